//! The operating system calls the host scope makes, each behind a safe wrapper: the monotonic
//! clock, futex wait and wake on shared words, and robust process-shared pthread mutexes.
//!
//! Every `unsafe` block of the host scope that talks to the kernel or to glibc is in this file.

use std::cell::UnsafeCell;
use std::io;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Nanoseconds on `CLOCK_MONOTONIC`, the clock every process on the host shares (and the one
/// `std::time::Instant` reads on Linux). Lease deadlines in the region are in these units.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call; CLOCK_MONOTONIC always exists on
    // Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Sleeps while `word` holds `expected`, for at most `timeout` (`None`: no limit). Returns on a
/// wake, a timeout, a signal, or at once when the word differs: callers re-read the word.
///
/// The futex is *shared* (no `FUTEX_PRIVATE_FLAG`), so a wake from another process that maps
/// the same page reaches it.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64 / 2) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT only reads the aligned u32 at `word` (valid for the call: we hold a
    // reference) and sleeps; `tsp` is null or points at `ts`, alive for the call. FUTEX_WAIT's
    // timeout is relative, on CLOCK_MONOTONIC.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            tsp,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes up to `n` waiters sleeping on `word`, in any process.
pub(crate) fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE does not touch the memory at `word`; it only uses its address as the
    // key of the wait queue. The remaining arguments are ignored for FUTEX_WAKE.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// The outcome of locking a robust mutex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Locked {
    /// Locked normally.
    Yes,
    /// Locked, but its previous owner died holding it (`EOWNERDEAD`): what it guarded may be
    /// half-changed; call [`ShmMutex::consistent`] once it is repaired.
    OwnerDied,
}

/// The outcome of trying a robust mutex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tried {
    /// Now locked by the caller.
    Locked(Locked),
    /// Held by a live thread.
    Busy,
}

/// A robust, process-shared pthread mutex living in the region (40 bytes on x86-64 glibc).
///
/// Robust: when the thread holding it dies (its process killed), the kernel marks it, and the
/// next locker gets `EOWNERDEAD` instead of waiting forever. This is the one death notice Linux
/// gives for free, because glibc registers these mutexes in each thread's robust futex list
/// (which glibc owns, one per thread, so keylock cannot keep a list of its own).
#[repr(C)]
pub(crate) struct ShmMutex(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: a process-shared pthread mutex is made to be used from any thread of any process; all
// access goes through the pthread functions, which synchronize internally.
unsafe impl Sync for ShmMutex {}
// SAFETY: as above: the mutex is plain memory used only through the pthread functions.
unsafe impl Send for ShmMutex {}

fn os_error(rc: libc::c_int, what: &str) -> io::Error {
    io::Error::new(
        io::Error::from_raw_os_error(rc).kind(),
        format!("{what}: {}", io::Error::from_raw_os_error(rc)),
    )
}

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(os_error(rc, what))
    }
}

impl ShmMutex {
    /// Initializes the mutex as robust and process-shared.
    ///
    /// # Safety
    ///
    /// No thread of any process may use the mutex during the call (the region is not yet
    /// visible to others, or the caller holds what guards it), and it must not be locked.
    pub(crate) unsafe fn init(&self) -> io::Result<()> {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        // SAFETY: `attr` is initialized by pthread_mutexattr_init before any other use, and
        // destroyed after; `self.0` is valid for writes and nobody else uses it (the caller's
        // contract).
        unsafe {
            check(
                libc::pthread_mutexattr_init(attr.as_mut_ptr()),
                "pthread_mutexattr_init",
            )?;
            let result = (|| {
                check(
                    libc::pthread_mutexattr_setpshared(
                        attr.as_mut_ptr(),
                        libc::PTHREAD_PROCESS_SHARED,
                    ),
                    "pthread_mutexattr_setpshared",
                )?;
                check(
                    libc::pthread_mutexattr_setrobust(
                        attr.as_mut_ptr(),
                        libc::PTHREAD_MUTEX_ROBUST,
                    ),
                    "pthread_mutexattr_setrobust",
                )?;
                check(
                    libc::pthread_mutex_init(self.0.get(), attr.as_ptr()),
                    "pthread_mutex_init",
                )
            })();
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            result
        }
    }

    /// Locks the mutex, waiting at most `bound` for a holder to let go.
    ///
    /// The wait is a series of `pthread_mutex_timedlock` calls of at most [`LOCK_SLICE`] each
    /// (its deadline is on `CLOCK_REALTIME`, so a slice keeps a clock step from stretching the
    /// bound), counted against `CLOCK_MONOTONIC`.
    pub(crate) fn lock_within(&self, bound: Duration) -> Result<Locked, MutexFault> {
        self.check_kind()?;
        let end = now_ns().saturating_add(bound.as_nanos().min(u64::MAX as u128) as u64);
        loop {
            let slice = end
                .saturating_sub(now_ns())
                .min(LOCK_SLICE.as_nanos() as u64);
            let at = realtime_ns().saturating_add(slice);
            let ts = libc::timespec {
                tv_sec: (at / 1_000_000_000) as libc::time_t,
                tv_nsec: (at % 1_000_000_000) as libc::c_long,
            };
            // SAFETY: the mutex was initialized by `init` when the region was made, and its
            // kind was just checked against the one `init` writes, so the C library takes its
            // robust path (which only compares and swaps the lock word, and sleeps on it); it
            // lives as long as `self`; `ts` is alive for the call.
            let rc = unsafe { libc::pthread_mutex_timedlock(self.0.get(), &ts) };
            match rc {
                0 => return Ok(Locked::Yes),
                libc::EOWNERDEAD => return Ok(Locked::OwnerDied),
                libc::ETIMEDOUT if now_ns() < end => {}
                libc::ETIMEDOUT => {
                    return Err(MutexFault::TimedOut {
                        word: self.first_word().load(std::sync::atomic::Ordering::Relaxed),
                        bound,
                    });
                }
                rc => return Err(MutexFault::Os(os_error(rc, "pthread_mutex_timedlock"))),
            }
        }
    }

    /// Locks the mutex if no live thread holds it.
    pub(crate) fn try_lock(&self) -> Result<Tried, MutexFault> {
        self.check_kind()?;
        // SAFETY: as in `lock_within`.
        let rc = unsafe { libc::pthread_mutex_trylock(self.0.get()) };
        match rc {
            0 => Ok(Tried::Locked(Locked::Yes)),
            libc::EOWNERDEAD => Ok(Tried::Locked(Locked::OwnerDied)),
            libc::EBUSY => Ok(Tried::Busy),
            rc => Err(MutexFault::Os(os_error(rc, "pthread_mutex_trylock"))),
        }
    }

    /// Marks a mutex locked with [`Locked::OwnerDied`] as usable again. (Nothing, if its kind
    /// was changed since it was locked: see [`ShmMutex::unlock`].)
    pub(crate) fn consistent(&self) {
        if self.check_kind().is_err() {
            return;
        }
        // SAFETY: as in `lock_within`; the caller holds the mutex after EOWNERDEAD, which is
        // what pthread_mutex_consistent requires (it returns EINVAL otherwise, harmlessly).
        unsafe { libc::pthread_mutex_consistent(self.0.get()) };
    }

    /// Unlocks the mutex, which the calling thread holds. If another process changed its kind
    /// while it was held, the C library is not called (that could crash it); the mutex stays
    /// locked, and everyone else's bounded wait reports the region.
    pub(crate) fn unlock(&self) {
        if self.check_kind().is_err() {
            return;
        }
        // SAFETY: as in `lock_within`; callers unlock only what they locked on this thread.
        unsafe { libc::pthread_mutex_unlock(self.0.get()) };
    }

    /// The mutex's first word (glibc's `__lock`, the futex word), viewed as an atomic.
    fn first_word(&self) -> &AtomicU32 {
        // SAFETY: pthread_mutex_t is at least 4-byte aligned and larger than 4 bytes; its first
        // word is an int that the C library and the kernel change only atomically, so viewing
        // it as an AtomicU32 is sound. It lives as long as `self`.
        unsafe { &*self.0.get().cast::<AtomicU32>() }
    }

    /// Checks the words of the mutex that `init` writes and nothing changes afterwards
    /// against those of a mutex this process initialized the same way. glibc chooses its
    /// code path by `__kind` alone: a kind with the elision bit (0x100) runs transactional
    /// instructions that kill the process with SIGILL where the CPU lacks them, and a
    /// priority-protect kind (0x40) trips an assertion (SIGABRT). So no pthread call is made
    /// on a region mutex before this check passes.
    fn check_kind(&self) -> Result<(), MutexFault> {
        let found = self.kind_words();
        let expected = pristine_kind_words();
        if found == expected {
            Ok(())
        } else {
            Err(MutexFault::Kind { found, expected })
        }
    }

    /// The kind words: glibc's `__kind`, and the word after it (`__spins` and `__elision` on
    /// x86-64, `__spins` on aarch64; zero for a robust mutex, which neither spins nor elides).
    #[cfg(target_env = "gnu")]
    fn kind_words(&self) -> [u32; 2] {
        const _: () = assert!(GLIBC_KIND_OFFSET + 8 <= size_of::<libc::pthread_mutex_t>());
        let word = |offset: usize| {
            // SAFETY: `offset` + 4 is within the mutex (asserted above) and 4-aligned in a
            // mutex that is 8-aligned; these words are ints that only pthread_mutex_init
            // writes, and reading them through an atomic view is sound for any bytes.
            let w = unsafe { &*self.0.get().cast::<u8>().add(offset).cast::<AtomicU32>() };
            w.load(std::sync::atomic::Ordering::Relaxed)
        };
        [word(GLIBC_KIND_OFFSET), word(GLIBC_KIND_OFFSET + 4)]
    }

    /// Other C libraries lay their mutex out otherwise; the host scope is made for glibc,
    /// and elsewhere the kind is not checked.
    #[cfg(not(target_env = "gnu"))]
    fn kind_words(&self) -> [u32; 2] {
        [0, 0]
    }
}

/// Where glibc's `pthread_mutex_t` keeps `__kind`, on x86-64 and aarch64 alike: after
/// `__lock`, `__count`, `__owner` and `__nusers`, four 32-bit words.
#[cfg(target_env = "gnu")]
const GLIBC_KIND_OFFSET: usize = 16;

/// The kind words of a mutex initialized by [`ShmMutex::init`] in this process.
fn pristine_kind_words() -> [u32; 2] {
    static PRISTINE: std::sync::OnceLock<[u32; 2]> = std::sync::OnceLock::new();
    *PRISTINE.get_or_init(|| {
        // SAFETY: an all-zero pthread_mutex_t is a valid value to overwrite; the mutex is
        // this function's own, so nobody else uses it during `init`.
        let m = ShmMutex(UnsafeCell::new(unsafe { std::mem::zeroed() }));
        // SAFETY: as above; the mutex is not locked. (A failure leaves it zeroed, and then
        // every region mutex fails the check, which is reported, not hidden.)
        let _ = unsafe { m.init() };
        let words = m.kind_words();
        // SAFETY: an initialized, unlocked mutex that nobody else can see.
        unsafe { libc::pthread_mutex_destroy(m.0.get()) };
        words
    })
}

/// The longest single `pthread_mutex_timedlock` call of [`ShmMutex::lock_within`].
const LOCK_SLICE: Duration = Duration::from_millis(250);

/// Nanoseconds on `CLOCK_REALTIME`, the clock of `pthread_mutex_timedlock`'s deadline.
fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Why a mutex in the region could not be used.
#[derive(Debug)]
pub(crate) enum MutexFault {
    /// Its kind words differ from those `init` writes: a corrupt region.
    Kind { found: [u32; 2], expected: [u32; 2] },
    /// It was not free within `bound`; `word` is its lock word as last seen.
    TimedOut { word: u32, bound: Duration },
    /// The C library refused it (`ENOTRECOVERABLE`, for one).
    Os(io::Error),
}

impl std::fmt::Display for MutexFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MutexFault::Kind { found, expected } => write!(
                f,
                "its kind words are {:#x} {:#x}, where keylock makes {:#x} {:#x} (not a mutex \
                 keylock made: the C library could crash on it)",
                found[0], found[1], expected[0], expected[1]
            ),
            MutexFault::TimedOut { word, bound } => write!(
                f,
                "not free within {bound:?}: its lock word {word:#x} names thread {} as holder, \
                 which never let go (a stopped or hung process, or no holder at all in a \
                 corrupt region)",
                word & FUTEX_TID_MASK
            ),
            MutexFault::Os(e) => write!(f, "{e}"),
        }
    }
}

pub(crate) use crate::fork::{fork_generation, watch_forks};

/// The calling process's id.
pub(crate) fn pid() -> u32 {
    std::process::id()
}

/// The kernel's robust-futex bits in a robust mutex's lock word (linux/futex.h, a stable ABI).
pub(crate) const FUTEX_WAITERS: u32 = 0x8000_0000;
pub(crate) const FUTEX_OWNER_DIED: u32 = 0x4000_0000;
pub(crate) const FUTEX_TID_MASK: u32 = 0x3fff_ffff;

/// Whether this process's pthread mutexes keep their futex word first, holding the owner's
/// thread id (glibc's `__data.__lock`), so that a waiter can sleep on a holder process's
/// liveness mutex with `futex_waitv` and be woken by the kernel when that process dies.
/// Checked at run time by each agent ([`check_lock_word`]); `false` until then, and wherever
/// the check fails (then waiters rely on their timed re-check alone).
static LOCK_WORD_FIRST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl ShmMutex {
    /// The mutex's futex word, if this C library keeps it first (see [`LOCK_WORD_FIRST`]).
    pub(crate) fn lock_word(&self) -> Option<&AtomicU32> {
        LOCK_WORD_FIRST
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| self.first_word())
    }

    /// Called by a thread that holds this mutex: checks that its first word names the thread.
    pub(crate) fn check_lock_word(&self) {
        let first = self.first_word();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let ok = first.load(std::sync::atomic::Ordering::Relaxed) & FUTEX_TID_MASK == tid;
        LOCK_WORD_FIRST.store(ok, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Sleeps until one of `words` no longer holds its value (all shared futexes), or `timeout`
/// passes: `futex_waitv` (Linux 5.16). Returns the index of the word that woke it, if one
/// did. Up to 128 words.
pub(crate) fn futex_waitv(words: &[(&AtomicU32, u32)], timeout: Duration) -> Option<usize> {
    #[repr(C)]
    struct FutexWaitv {
        val: u64,
        uaddr: u64,
        flags: u32,
        reserved: u32,
    }
    const FUTEX2_SIZE_U32: u32 = 0x02;
    let waiters: Vec<FutexWaitv> = words
        .iter()
        .take(128)
        .map(|(word, value)| FutexWaitv {
            val: u64::from(*value),
            uaddr: word.as_ptr() as u64,
            flags: FUTEX2_SIZE_U32,
            reserved: 0,
        })
        .collect();
    // futex_waitv takes an absolute timeout on the given clock.
    let end = now_ns().saturating_add(timeout.as_nanos().min(u64::MAX as u128) as u64);
    let ts = libc::timespec {
        tv_sec: (end / 1_000_000_000) as libc::time_t,
        tv_nsec: (end % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `waiters` holds futex_waitv records (the kernel's layout) naming aligned u32
    // words that stay valid for the call (the caller holds references); `ts` is alive for the
    // call. The kernel only reads the words.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            waiters.as_ptr(),
            waiters.len() as u32,
            0u32,
            &ts as *const libc::timespec,
            libc::CLOCK_MONOTONIC,
        )
    };
    if rc >= 0 {
        return Some(rc as usize);
    }
    if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS)
        && let Some((word, value)) = words.first()
    {
        // A kernel before 5.16: the first word alone (callers put the grant first).
        futex_wait(word, *value, Some(timeout));
    }
    None
}

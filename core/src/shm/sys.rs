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

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::new(
            io::Error::from_raw_os_error(rc).kind(),
            format!("{what}: {}", io::Error::from_raw_os_error(rc)),
        ))
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

    /// Locks the mutex, waiting as long as it takes.
    pub(crate) fn lock(&self) -> io::Result<Locked> {
        // SAFETY: the mutex was initialized by `init` when the region was made (the header's
        // checksum vouches for the region), and lives as long as `self`.
        let rc = unsafe { libc::pthread_mutex_lock(self.0.get()) };
        match rc {
            0 => Ok(Locked::Yes),
            libc::EOWNERDEAD => Ok(Locked::OwnerDied),
            rc => check(rc, "pthread_mutex_lock").map(|()| Locked::Yes),
        }
    }

    /// Locks the mutex if no live thread holds it.
    pub(crate) fn try_lock(&self) -> io::Result<Tried> {
        // SAFETY: as in `lock`.
        let rc = unsafe { libc::pthread_mutex_trylock(self.0.get()) };
        match rc {
            0 => Ok(Tried::Locked(Locked::Yes)),
            libc::EOWNERDEAD => Ok(Tried::Locked(Locked::OwnerDied)),
            libc::EBUSY => Ok(Tried::Busy),
            rc => check(rc, "pthread_mutex_trylock").map(|()| Tried::Busy),
        }
    }

    /// Marks a mutex locked with [`Locked::OwnerDied`] as usable again.
    pub(crate) fn consistent(&self) {
        // SAFETY: as in `lock`; the caller holds the mutex after EOWNERDEAD, which is what
        // pthread_mutex_consistent requires (it returns EINVAL otherwise, harmlessly).
        unsafe { libc::pthread_mutex_consistent(self.0.get()) };
    }

    /// Unlocks the mutex, which the calling thread holds.
    pub(crate) fn unlock(&self) {
        // SAFETY: as in `lock`; callers unlock only what they locked on this thread.
        unsafe { libc::pthread_mutex_unlock(self.0.get()) };
    }
}

/// How many times this process has forked a child that is running now (counted in the child).
static FORK_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Registers the fork handler (once per process) and returns the fork generation.
pub(crate) fn watch_forks() -> u64 {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // SAFETY: the handler only increments an atomic, which is async-signal-safe and so
        // allowed in a child after fork.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    fork_generation()
}

/// The fork generation of this process: it changes in a child after `fork()`, whose copies of
/// the parent's region handles must not act as the parent. (Counted once [`watch_forks`] ran.)
#[inline]
pub(crate) fn fork_generation() -> u64 {
    FORK_GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

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
        if !LOCK_WORD_FIRST.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        // SAFETY: pthread_mutex_t is at least 4-byte aligned and larger than 4 bytes; its first
        // word is the futex word the kernel and the C library change atomically (checked by
        // `check_lock_word`), so viewing it as an AtomicU32 is sound. It lives as long as
        // `self`.
        Some(unsafe { &*self.0.get().cast::<AtomicU32>() })
    }

    /// Called by a thread that holds this mutex: checks that its first word names the thread.
    pub(crate) fn check_lock_word(&self) {
        // SAFETY: as in `lock_word`; here only read, to check the layout.
        let first = unsafe { &*self.0.get().cast::<AtomicU32>() };
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

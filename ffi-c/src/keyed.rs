//! What `keylock_pool`, `keylock_striped` and `keylock_semaphore` share: a lock object made by
//! `keylock_core::open_with` (an `Arc<dyn KeyedLock>`, so that every scope the core knows, in
//! this process, in shared memory or in Redis, is one C handle), and the bodies of their
//! exports. Each export in `pool.rs`, `striped.rs` and `semaphore.rs` is one call into this
//! module; this module translates arguments and results and calls the core's `KeyedLock`,
//! nothing more.

use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use keylock_core::{
    Acquisition, KeyBuf, KeyBytes, KeyPool, KeyedLock, LockKey, LockOptions, Mode, StripedLock,
};

use crate::acquisition::*;
use crate::boundary::*;
use crate::contract::*;
use crate::metrics::keylock_metrics;
use crate::options::*;
use crate::result::*;
use crate::stats::keylock_stats;

/// A lock object and the id its acquisition records carry.
#[derive(Debug)]
pub(crate) struct Keyed {
    pub(crate) locks: Arc<dyn KeyedLock>,
    pub(crate) id: u64,
    direct: Direct,
}

/// The in-process object behind `locks`, when it is one (`KeyedLock::as_any`). Acquires then
/// go to the object's own methods (the same core operations the trait's `acquire` calls),
/// without the trait's dynamic dispatch and `Result` shuffling. An uncontended plain acquire
/// (`_lock`, `_lock_shared`) is the core's fast path, `try_acquire_fast`, whose `Acquisition`
/// the record keeps, and every `Acquisition` record's release first tries the core's
/// `try_release_fast`; other acquires keep the core's guard of the hold. Other scopes, and
/// `lock_many`, go through the trait and keep an `Acquisition` (an uncontended plain acquire
/// and its release try the trait's `try_acquire_fast` and `try_release_cas` first: the host
/// scope's one compare-and-swap each way, called on the host scope's object itself, found by
/// `KeyedLock::as_host`, rather than through the trait object, outside the panic guard as an
/// in-process object's are: its release always, its acquire for a key of at most 16 bytes).
///
/// A lock object opened with metrics is the core's `Metered` layer over the scope's object,
/// whose `as_any` and `as_host` are `None`: it is `Direct::Scope`, so that every call goes
/// through the layer and is counted. Nothing but speed depends on `Direct` (the trait's
/// methods answer everything the in-process objects' own methods do).
///
/// A record's guard is a `PoolGuard<&'static KeyPool>` / `StripeGuard<&'static StripedLock>`:
/// the `'static` stands for "as long as the handle", which the C contract makes true wherever
/// the guard is used. A record is only ever read through the handle it was made by (the id
/// check), and every call on a handle needs it live (the caller's contract); a record still held
/// when its handle is freed is never read again (C drops nothing), so its reference is never
/// used dangling.
#[derive(Debug, Clone, Copy)]
enum Direct {
    Pool(*const KeyPool<KeyBuf>),
    Striped(*const StripedLock),
    /// The host scope's object (`KeyedLock::as_host`): its uncontended lock and release are
    /// the trait's `try_acquire_fast` and `try_release_cas` called on the object itself, which
    /// inlines them into the export (no dynamic call, and the record written in place: an
    /// `shm:` striped lock's lock+release, ffi-c/bench/bench.c, 284 instructions through the
    /// trait object, 223 so; an `shm:` pool's 335 and 276).
    #[cfg(feature = "shm")]
    Host(*const keylock_core::shm::ShmLock),
    /// Another scope's object (or a metered one), kept as the trait object `Keyed::locks`
    /// points to: the fast calls through it then skip finding the object inside the `Arc`
    /// from the vtable's alignment (five instructions a call).
    Scope(*const dyn KeyedLock),
}

// SAFETY: the pointers point into the object that `Keyed::locks` owns (an `Arc` that lives as
// long as the `Keyed`), which is itself Send and Sync (the trait requires it); `Direct` only
// ever gives out shared references to it.
unsafe impl Send for Direct {}
// SAFETY: as above.
unsafe impl Sync for Direct {}

impl Direct {
    fn of(locks: &Arc<dyn KeyedLock>) -> Self {
        #[cfg(feature = "shm")]
        if let Some(host) = locks
            .as_host()
            .and_then(|h| h.downcast_ref::<keylock_core::shm::ShmLock>())
        {
            return Direct::Host(host);
        }
        let Some(any) = locks.as_any() else {
            return Direct::Scope(Arc::as_ptr(locks));
        };
        if let Some(pool) = any.downcast_ref::<KeyPool<KeyBuf>>() {
            Direct::Pool(pool)
        } else if let Some(striped) = any.downcast_ref::<StripedLock>() {
            Direct::Striped(striped)
        } else {
            Direct::Scope(Arc::as_ptr(locks))
        }
    }
}

/// [`Direct`] as references, with the handle's lifetime written `'static` (see [`Direct`]).
enum Local {
    Pool(&'static KeyPool<KeyBuf>),
    Striped(&'static StripedLock),
    #[cfg(feature = "shm")]
    Host(&'static keylock_core::shm::ShmLock),
    Scope(&'static dyn KeyedLock),
}

impl Keyed {
    /// The in-process object behind the trait, if it is one.
    #[inline(always)]
    fn local(&self) -> Local {
        match self.direct {
            // SAFETY: the pointer is into the object `self.locks` owns, alive while `self` is;
            // the reference is used during this call, or kept in a record's guard, which is
            // only used again through this handle while it is alive (see `Direct`).
            Direct::Pool(p) => Local::Pool(unsafe { &*p }),
            // SAFETY: as above.
            Direct::Striped(s) => Local::Striped(unsafe { &*s }),
            // SAFETY: as above.
            #[cfg(feature = "shm")]
            Direct::Host(h) => Local::Host(unsafe { &*h }),
            // SAFETY: as above (the object `self.locks` points to).
            Direct::Scope(l) => Local::Scope(unsafe { &*l }),
        }
    }

    /// The uncontended plain acquire of an in-process striped lock, straight from the core's
    /// lock word (`StripedLock::try_acquire_fast`): its record, or `None` (take the full path).
    ///
    /// Called outside the panic guard, because nothing on it can panic: the key's hash (foldhash
    /// over the bytes: arithmetic and reads within the slice), the stripe (`hash & mask`, an
    /// unchecked index that the mask keeps in range) and one compare-and-swap whose additions
    /// are bounded by the checks before them. A pool's probe is not as simple (a slot recycled
    /// under it is let go through the slow path), so the pool's fast path runs inside the guard
    /// ([`Self::acquire_guarded_fast`]).
    #[inline(always)]
    fn acquire_fast(&self, key: &[u8], mode: Mode) -> Option<Acquisition> {
        match self.local() {
            Local::Striped(s) => s.try_acquire_fast(key, mode),
            _ => None,
        }
    }

    /// Whether the object is the host scope's, whose uncontended acquire [`acquire_host_plain`]
    /// tries outside the panic guard.
    #[cfg(feature = "shm")]
    #[inline(always)]
    fn is_host(&self) -> bool {
        matches!(self.direct, Direct::Host(_))
    }

    /// The host scope's uncontended plain acquire, straight from the region's lock word
    /// (`try_acquire_fast` on the object itself): its record, or `None` (take the full path).
    #[cfg(feature = "shm")]
    #[inline(always)]
    fn acquire_host_fast(&self, key: &[u8], mode: Mode) -> Option<Acquisition> {
        match self.local() {
            Local::Host(host) => host.try_acquire_fast(LockKey::new(key), mode),
            _ => None,
        }
    }

    /// The uncontended plain acquire inside the panic guard, filled into `record`: an in-process
    /// pool's (`KeyPool::try_acquire_fast`; a striped lock's handle never holds one), or another
    /// scope's that has one (`KeyedLock::try_acquire_fast`: the host scope's, for a key longer
    /// than [`acquire_host_plain`] tries before the guard). `false`: nothing
    /// done (take the full path). Each arm fills the record itself: a record made from either
    /// would keep the pool's in memory too, as the trait's call returns it there, and lengthen
    /// the pool's path.
    #[inline(always)]
    fn acquire_guarded_fast<H: Handle>(
        &self,
        key: &[u8],
        mode: Mode,
        record: &mut keylock_acquisition,
    ) -> bool {
        let mut fill = |acq| record.fill_keyed(self.id, acq);
        match self.local() {
            Local::Pool(p) if !H::STRIPED => {
                p.try_acquire_fast(KeyBytes::new(key), mode).map(&mut fill)
            }
            Local::Scope(locks) => locks.try_acquire_fast(LockKey::new(key), mode).map(fill),
            #[cfg(feature = "shm")]
            Local::Host(host) if key.len() > StripedLock::INLINE_KEY_MAX => {
                host.try_acquire_fast(LockKey::new(key), mode).map(fill)
            }
            #[cfg(feature = "shm")]
            Local::Host(_) => None,
            Local::Pool(_) | Local::Striped(_) => None,
        }
        .is_some()
    }

    /// The core's one-CAS release (`try_release_cas`) of a plain exclusive record of an
    /// in-process object, marking the record released: whether it released (`false`: more must
    /// be done to release it). The object's kind is looked at before the record, so that another
    /// scope's record goes to the guarded path unread here.
    ///
    /// Called outside the panic guard, because nothing on it can panic: the record's checks
    /// (plain, its stripe or its shard and slot looked up with checked `get`s), and one
    /// compare-and-swap on the lock word. Nor does it call anything, so the release that
    /// finishes here needs no stack frame: the rest ([`Self::release_fast`], then the full
    /// release) is a jump away.
    /// `H` is the handle's type: a striped lock's handle only ever holds a striped lock or
    /// another scope, and a pool's a pool or another scope, so each export checks for its own.
    #[inline(always)]
    fn release_cas<H: Handle>(&self, record: &mut keylock_acquisition) -> bool {
        match self.local() {
            Local::Striped(s) if H::STRIPED => {
                record.release_keyed_cas(self.id, |a| s.try_release_cas(a))
            }
            Local::Pool(p) if !H::STRIPED => {
                record.release_keyed_cas(self.id, |a| p.try_release_cas(a))
            }
            _ => false,
        }
    }

    /// The host scope's one-CAS release, outside the panic guard too, for what
    /// [`Self::release_cas`] left: nothing on it can panic either (the record's checks: its
    /// mode, its process and fork, its entry looked up with a checked `get` in the mapping
    /// whose header was validated at open; and one compare-and-swap). Tried after the
    /// in-process objects', as a test of its own, so that theirs stays nearly as it was (one
    /// instruction more: as an arm of their `match`, a jump table, three). Lock+release
    /// (ffi-c/bench/bench.c): an `shm:` striped lock's 223 instructions with this inside the
    /// guard, 210 outside; an `shm:` pool's 276 and 263.
    #[cfg(feature = "shm")]
    #[inline(always)]
    fn release_host_cas(&self, record: &mut keylock_acquisition) -> bool {
        match self.local() {
            Local::Host(host) => record.release_keyed_cas(self.id, |a| host.try_release_cas(a)),
            _ => false,
        }
    }

    /// The one-CAS release through the trait object (`KeyedLock::try_release_cas`) of another
    /// scope's object that has one (the host scope's behind the metrics layer), for a record
    /// through the trait: whether it released. Inside the panic guard.
    #[inline(always)]
    fn release_scope_cas(&self, acq: &Acquisition) -> bool {
        match self.local() {
            Local::Scope(locks) => locks.try_release_cas(acq),
            // The host scope's was tried outside the guard (`release_host_cas`): not again.
            _ => false,
        }
    }

    /// The core's whole fast release (`try_release_fast`) of a plain record of an in-process
    /// object, for what [`Self::release_cas`] left: a shared hold's loop of compare-and-swaps,
    /// or a word the pool's eviction hand has marked. Inside the panic guard.
    #[inline(always)]
    fn release_fast<H: Handle>(&self, acq: Acquisition) -> Result<(), Acquisition> {
        match self.local() {
            Local::Striped(s) if H::STRIPED => s.try_release_fast(acq),
            Local::Pool(p) if !H::STRIPED => p.try_release_fast(acq),
            _ => Err(acq),
        }
    }

    /// A plain untimed acquire (no lease, no owner), exclusive or shared, into `out`.
    #[inline(always)]
    fn acquire_plain(&self, key: &[u8], mode: Mode, out: &mut keylock_acquisition) -> Outcome {
        match (self.local(), mode) {
            (Local::Striped(s), Mode::Exclusive) => out.fill_stripe(self.id, s.lock(key)),
            (Local::Striped(s), Mode::Shared) => out.fill_stripe(self.id, s.lock_shared(key)),
            (Local::Pool(p), Mode::Exclusive) => out.fill_pool(self.id, p.lock(KeyBytes::new(key))),
            (Local::Pool(p), Mode::Shared) => {
                out.fill_pool(self.id, p.lock_shared(KeyBytes::new(key)));
            }
            (_, mode) => {
                let opts = LockOptions::new().mode(mode);
                out.fill_keyed(self.id, self.locks.acquire(LockKey::new(key), &opts)?)
            }
        }
        Ok(())
    }

    /// An acquire with any options, into `out`. A guard is kept only for a plain acquisition
    /// (no lease, no owner), which the core keeps in the guard's few words; one with a lease or
    /// an owner goes through the trait and keeps an `Acquisition`, so that no record ever owns
    /// heap memory.
    #[inline]
    fn acquire_with(
        &self,
        key: &[u8],
        opts: &LockOptions,
        out: &mut keylock_acquisition,
    ) -> Outcome {
        let plain = opts.lease.is_none() && opts.owner.is_none();
        match self.local() {
            Local::Striped(s) if plain => out.fill_stripe(self.id, s.lock_with(key, *opts)?),
            Local::Pool(p) if plain => {
                out.fill_pool(self.id, p.lock_with(KeyBytes::new(key), *opts)?);
            }
            _ => out.fill_keyed(self.id, self.locks.acquire(LockKey::new(key), opts)?),
        }
        Ok(())
    }

    /// Releases what a record held.
    #[inline(always)]
    fn release(&self, held: Held) -> Outcome {
        match held {
            Held::Stripe(g) => g.release()?,
            Held::Pool(g) => g.release()?,
            Held::Acq(a) => self.locks.release(a)?,
        }
        Ok(())
    }
}

/// The handle types built on [`Keyed`].
pub(crate) trait Handle: Sized {
    /// Whether this is a striped lock's handle, whose in-process fast path runs outside the
    /// panic guard (see [`Keyed::acquire_fast`]).
    const STRIPED: bool;
    /// Wraps a lock object.
    fn wrap(keyed: Keyed) -> Self;
    /// The lock object.
    fn keyed(&self) -> &Keyed;
}

/// Exclusive, wait forever.
pub(crate) const EXCLUSIVE: LockOptions = LockOptions::new();

impl Keyed {
    /// Opens the lock object `name` names, as `open_with` does.
    fn open(name: &str, options: &keylock_core::OpenOptions) -> Result<Self, Fail> {
        let locks = keylock_core::open_with(name, options)?;
        let direct = Direct::of(&locks);
        Ok(Self {
            locks,
            id: next_lock_id(),
            direct,
        })
    }
}

/// A new in-process lock object: a pool, or a striped lock with `stripes` stripes.
pub(crate) fn new_local<H: Handle>(stripes: Option<usize>) -> *mut H {
    new_local_as(|| keylock_open_options::default().to_core(stripes))
}

/// A new in-process lock object as the core's options (from `options`) say; NULL when the core
/// refuses them.
pub(crate) fn new_local_as<H: Handle>(
    options: impl FnOnce() -> keylock_core::OpenOptions,
) -> *mut H {
    ffi_boundary_new(|| Keyed::open("local:", &options()).ok().map(H::wrap))
}

/// The body of `_open`: `stripes` turns `options.stripes` into the core's field (or refuses).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `options` is NULL or readable; `out` is NULL or
/// writable.
pub(crate) unsafe fn open<H: Handle>(
    name: *const c_char,
    options: *const keylock_open_options,
    out: *mut *mut H,
    stripes: impl FnOnce(usize) -> Result<Option<usize>, Fail>,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { open_as(name, options, out, |o| Ok(o.to_core(stripes(o.stripes)?))) }
}

/// The body of every `_open`: `to_core` turns the caller's options (the defaults for NULL) into
/// the core's (or refuses them).
///
/// # Safety
/// As [`open`].
pub(crate) unsafe fn open_as<H: Handle>(
    name: *const c_char,
    options: *const keylock_open_options,
    out: *mut *mut H,
    to_core: impl FnOnce(keylock_open_options) -> Result<keylock_core::OpenOptions, Fail>,
) -> keylock_result {
    ffi_boundary(|| {
        let out = crate::boundary::out(out)?;
        // SAFETY: out is non-NULL and writable (caller); NULL until an object is made.
        unsafe { out.write(std::ptr::null_mut()) };
        if name.is_null() {
            return Err(Fail(KEYLOCK_NULL_ARGUMENT));
        }
        // SAFETY: name is non-NULL and NUL-terminated (caller).
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| Fail(KEYLOCK_INVALID_ARGUMENT))?;
        // SAFETY: options is NULL or readable (caller).
        let options = unsafe { options.as_ref() }.copied().unwrap_or_default();
        let core = to_core(options)?;
        let handle = Box::new(H::wrap(Keyed::open(name, &core)?));
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// The body of every single-key acquire: `opts` is the core's options, already translated.
///
/// # Safety
/// `h` is NULL or a live handle; `key` is NULL or points to `len` readable bytes; `out` is NULL
/// or points to a writable record that nothing else uses during the call.
#[inline]
pub(crate) unsafe fn acquire<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    opts: &LockOptions,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: the caller's contract above.
    unsafe {
        acquire_into(out, |out| {
            let (h, key) = (handle(h)?.keyed(), crate::boundary::key(key, len)?);
            h.acquire_with(key, opts, out)
        })
    }
}

/// The body of the plain untimed acquires (`_lock`, `_lock_shared`). The uncontended case of an
/// in-process object is one call to the core's fast path and a record filled in place; anything
/// else (a NULL, a bad length, a held key, another scope) takes [`acquire_plain_guarded`], whose
/// [`acquire_plain_slow`] also reports the errors.
///
/// # Safety
/// As [`acquire`].
#[inline(always)]
pub(crate) unsafe fn acquire_plain<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    mode: Mode,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // A key longer than `INLINE_KEY_MAX` takes the guarded path: its hash is a call, and a
    // call anywhere on the fast path would give every call a stack frame.
    if H::STRIPED
        && len <= StripedLock::INLINE_KEY_MAX
        // SAFETY: the caller's contract above; the key is checked as `key` checks it.
        && unsafe { acquire_plain_fast(h, key, len, mode, out, Keyed::acquire_fast) }
    {
        return KEYLOCK_OK;
    }
    // SAFETY: as above (a handle pointer is NULL or valid).
    #[cfg(feature = "shm")]
    if unsafe { h.as_ref() }.is_some_and(|h| h.keyed().is_host()) {
        // SAFETY: forwarded from our caller.
        return unsafe { acquire_host_plain(h, key, len, mode, out) };
    }
    // SAFETY: forwarded from our caller.
    unsafe { acquire_plain_guarded(h, key, len, mode, out) }
}

/// [`acquire_plain`] for the host scope's object: for a key of at most `INLINE_KEY_MAX` bytes,
/// its uncontended acquire outside the panic guard; else, or if that finds the key taken,
/// [`acquire_plain_guarded`] (a jump). Its own function, so that the registers the region's
/// lookup needs are saved on this path alone, not on every export's call. Inside the guard,
/// the same acquire cost an `shm:` pool's lock+release (ffi-c/bench/bench.c, 16-byte key) 263
/// instructions, and costs 233 here; an `shm:` striped lock's 210, and 203 (`make bench-c`).
///
/// Outside the guard because nothing on it can panic or call: the key's hash (XXH3, inlined
/// for keys of 16 bytes or fewer: arithmetic on reads within the slice), the bucket and
/// entries looked up with checked indexes into the mapped region, the key read with loads
/// within the slice and compared with at most two of the entry's words, and one
/// compare-and-swap whose additions are bounded by the checks before them. The release build
/// is checked for it: ffi-c/tests/sh/leaves.sh (in `make test-c`) fails if this function, or
/// an export that runs before the guard, calls anything.
///
/// # Safety
/// As [`acquire`].
#[cfg(feature = "shm")]
#[inline(never)]
unsafe extern "C" fn acquire_host_plain<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    mode: Mode,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // The length is checked here, where it keeps XXH3's longer paths (calls) out of the build.
    let fast = |k: &Keyed, bytes: &[u8], mode| {
        if bytes.len() <= StripedLock::INLINE_KEY_MAX {
            k.acquire_host_fast(bytes, mode)
        } else {
            None
        }
    };
    // SAFETY: the caller's contract above; the key is checked as `key` checks it.
    if unsafe { acquire_plain_fast(h, key, len, mode, out, fast) } {
        return KEYLOCK_OK;
    }
    // SAFETY: forwarded from our caller.
    unsafe { acquire_plain_guarded(h, key, len, mode, out) }
}

/// [`acquire_plain`] inside the panic guard: a pool's fast path, or the full path. Its own
/// function, taking the call's arguments as they came, so that the striped lock's fast path
/// reaches it with a jump: a call through the guard's closure would give every call a stack
/// frame and six saved registers. `extern "C"` because such a function cannot unwind: a call
/// from an export to a Rust function carries an unwind edge (to the abort that keeps a panic
/// out of C), and a call with one cannot be a jump.
///
/// # Safety
/// As [`acquire`].
#[inline(never)]
unsafe extern "C" fn acquire_plain_guarded<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    mode: Mode,
    out: *mut keylock_acquisition,
) -> keylock_result {
    ffi_boundary(move || {
        // A pool's fast path runs inside the guard (see `Keyed::acquire_fast`), and so does
        // another scope's.
        // SAFETY: the caller's contract (as `acquire`'s); the key is checked as `key` checks it.
        let (handle, record, bytes) = unsafe { (h.as_ref(), out.as_mut(), key_of(key, len)) };
        if let (Some(handle), Some(record), Some(bytes)) = (handle, record, bytes)
            && handle
                .keyed()
                .acquire_guarded_fast::<H>(bytes, mode, record)
        {
            return Ok(());
        }
        // SAFETY: as above.
        unsafe { acquire_plain_slow(h, key, len, mode, out) }
    })
}

/// The uncontended case of [`acquire_plain`]: `fast`'s record filled into `out`, or `false`
/// (nothing done: a NULL, a bad length, or `fast` found the key taken).
///
/// # Safety
/// As [`acquire`].
#[inline(always)]
unsafe fn acquire_plain_fast<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    mode: Mode,
    out: *mut keylock_acquisition,
    fast: impl FnOnce(&Keyed, &[u8], Mode) -> Option<Acquisition>,
) -> bool {
    // SAFETY: the caller's contract above; the key is checked as `key` checks it.
    let (handle, record, bytes) = unsafe { (h.as_ref(), out.as_mut(), key_of(key, len)) };
    if let (Some(handle), Some(record), Some(bytes)) = (handle, record, bytes)
        && let Some(acq) = fast(handle.keyed(), bytes, mode)
    {
        record.fill_keyed(handle.keyed().id, acq);
        return true;
    }
    false
}

/// The key bytes, as [`key`](crate::boundary::key) checks them; `None` for what it refuses.
///
/// # Safety
/// As [`key`](crate::boundary::key).
#[inline(always)]
unsafe fn key_of<'a>(key: *const u8, len: usize) -> Option<&'a [u8]> {
    // SAFETY: forwarded from our caller.
    unsafe { crate::boundary::key(key, len) }.ok()
}

/// [`acquire_plain`] beyond the uncontended case.
///
/// # Safety
/// As [`acquire`].
#[cold]
#[inline(never)]
unsafe fn acquire_plain_slow<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    mode: Mode,
    out: *mut keylock_acquisition,
) -> Outcome {
    // SAFETY: out is NULL or writable (caller).
    let Some(out) = (unsafe { out.as_mut() }) else {
        return Err(Fail(KEYLOCK_NULL_ARGUMENT));
    };
    // SAFETY: the caller's contract above.
    let result = unsafe { handle(h) }.and_then(|h| {
        // SAFETY: as above.
        let key = unsafe { crate::boundary::key(key, len)? };
        h.keyed().acquire_plain(key, mode, out)
    });
    if result.is_err() {
        *out = keylock_acquisition::EMPTY;
    }
    result
}

/// Like [`acquire`] with a timeout and a mode.
///
/// # Safety
/// As [`acquire`].
pub(crate) unsafe fn acquire_timeout<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    mode: Mode,
    timeout_ns: u64,
    out: *mut keylock_acquisition,
) -> keylock_result {
    let opts = LockOptions::new().mode(mode).wait(wait_of(timeout_ns));
    // SAFETY: forwarded from our caller.
    unsafe { acquire(h, key, len, &opts, out) }
}

/// Like [`acquire`] with the caller's options (NULL: `KEYLOCK_LOCK_OPTIONS_INIT`).
///
/// # Safety
/// As [`acquire`], and `opts` is NULL or readable.
pub(crate) unsafe fn acquire_with<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    opts: *const keylock_lock_options,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: opts is NULL or readable (caller).
    let opts = match unsafe { opts.as_ref() }.map_or(Ok(EXCLUSIVE), |o| o.to_core()) {
        Ok(opts) => opts,
        Err(Fail(code)) => {
            // SAFETY: out is NULL or writable (caller): a failed acquire leaves it empty.
            if let Some(out) = unsafe { out.as_mut() } {
                *out = keylock_acquisition::EMPTY;
            }
            return code;
        }
    };
    // SAFETY: forwarded from our caller.
    unsafe { acquire(h, key, len, &opts, out) }
}

/// The body of `_lock_many` / `_lock_many_with`.
///
/// # Safety
/// `h` is NULL or a live handle; `keys`, `lens` and (when not NULL) `modes` point to `n`
/// readable elements each, each key to its length in bytes; `opts` is NULL or readable; `out`
/// is NULL or points to `n` writable records; `count` is NULL or writable.
#[allow(clippy::too_many_arguments)] // the C signature: arrays and their lengths
pub(crate) unsafe fn acquire_many<H: Handle>(
    h: *const H,
    keys: *const *const u8,
    lens: *const usize,
    modes: *const keylock_mode,
    n: usize,
    opts: *const keylock_lock_options,
    out: *mut keylock_acquisition,
    count: *mut usize,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { acquire_many_weighted(h, keys, lens, modes, n, opts, 1, out, count) }
}

/// [`acquire_many`] taking `weight` units of every key (a semaphore's `_acquire_many`; a lock
/// takes 1).
///
/// # Safety
/// As [`acquire_many`].
#[allow(clippy::too_many_arguments)] // the C signature: arrays and their lengths
pub(crate) unsafe fn acquire_many_weighted<H: Handle>(
    h: *const H,
    keys: *const *const u8,
    lens: *const usize,
    modes: *const keylock_mode,
    n: usize,
    opts: *const keylock_lock_options,
    weight: u32,
    out: *mut keylock_acquisition,
    count: *mut usize,
) -> keylock_result {
    ffi_boundary(|| {
        let count = crate::boundary::out(count)?;
        // SAFETY: count is non-NULL and writable (caller): 0 until the keys are held.
        unsafe { count.write(0) };
        // SAFETY: out is NULL or points to n writable records (caller). Every record is empty
        // until the keys are held.
        let out = unsafe { slice_mut(out, n)? };
        out.fill_with(|| keylock_acquisition::EMPTY);
        // SAFETY: the caller's contract above (`keys` refuses n == 0).
        let (h, keys) = unsafe { (handle(h)?.keyed(), crate::boundary::keys(keys, lens, n)?) };
        // SAFETY: opts is NULL or readable (caller).
        let opts = unsafe { opts.as_ref() }
            .map_or(Ok(EXCLUSIVE), |o| o.to_core())?
            .weight(weight);
        let modes = if modes.is_null() {
            None
        } else {
            // SAFETY: modes points to n readable elements (caller).
            Some(unsafe { slice(modes, n)? })
        };
        let list = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let mode = modes.map_or(Ok(opts.mode), |m| mode_of(m[i]))?;
                Ok((LockKey::new(k), mode))
            })
            .collect::<Result<Vec<_>, Fail>>()?;
        let acqs = h.locks.acquire_many(&list, &opts)?;
        if acqs.len() > out.len() {
            // Distinct locks never outnumber the keys; should the core break that, let go.
            for acq in acqs {
                let _ = h.release(Held::Acq(acq));
            }
            return Err(Fail(KEYLOCK_PANIC));
        }
        let held = acqs.len();
        for (slot, acq) in out.iter_mut().zip(acqs) {
            slot.fill_keyed(h.id, acq);
        }
        // SAFETY: as above.
        unsafe { count.write(held) };
        Ok(())
    })
}

/// The body of `_release`.
///
/// # Safety
/// `h` is NULL or a live handle; `acq` is NULL or points to a record that nothing else uses
/// during the call.
#[inline(always)]
pub(crate) unsafe fn release<H: Handle>(
    h: *const H,
    acq: *mut keylock_acquisition,
) -> keylock_result {
    // The uncontended case outside the panic guard (see `Keyed::release_fast`).
    // SAFETY: the caller's contract above.
    if let (Some(handle), Some(record)) = unsafe { (h.as_ref(), acq.as_mut()) } {
        let h = handle.keyed();
        if h.release_cas::<H>(record) {
            return KEYLOCK_OK;
        }
        #[cfg(feature = "shm")]
        if h.release_host_cas(record) {
            return KEYLOCK_OK;
        }
    }
    // SAFETY: as above.
    unsafe { release_guarded(h, acq) }
}

/// [`release`] inside the panic guard, in a function of its own for the reason
/// [`acquire_plain_guarded`] gives.
///
/// Another scope's one-CAS release (the host scope's) is tried first, alone: the rest is a jump
/// away, so that this path keeps only the record in a register across the call (9 instructions
/// fewer than one frame for both paths).
///
/// # Safety
/// As [`release`].
#[inline(never)]
unsafe extern "C" fn release_guarded<H: Handle>(
    h: *const H,
    acq: *mut keylock_acquisition,
) -> keylock_result {
    let released = catch_unwind(AssertUnwindSafe(move || {
        // SAFETY: the caller's contract (as `release`'s).
        match unsafe { (h.as_ref(), acq.as_mut()) } {
            (Some(handle), Some(record)) => {
                let h = handle.keyed();
                record.release_keyed_cas(h.id, |a| h.release_scope_cas(a))
            }
            _ => false,
        }
    }));
    match released {
        Ok(true) => KEYLOCK_OK,
        // SAFETY: as above.
        Ok(false) => unsafe { release_rest(h, acq) },
        Err(_) => KEYLOCK_PANIC,
    }
}

/// [`release_guarded`] beyond the one-CAS release of another scope: an in-process object's
/// whole fast release, else the full release.
///
/// # Safety
/// As [`release`].
#[inline(never)]
unsafe extern "C" fn release_rest<H: Handle>(
    h: *const H,
    acq: *mut keylock_acquisition,
) -> keylock_result {
    ffi_boundary(move || {
        // SAFETY: the caller's contract (as `release`'s).
        if let (Some(handle), Some(record)) = unsafe { (h.as_ref(), acq.as_mut()) } {
            let h = handle.keyed();
            if record.release_keyed_fast(h.id, |a| h.release_fast::<H>(a)) {
                return Ok(());
            }
        }
        // SAFETY: as above.
        unsafe { release_slow(h, acq) }
    })
}

/// [`release`] beyond the uncontended case: the full release, which also says what is wrong.
///
/// # Safety
/// As [`release`].
#[cold]
#[inline(never)]
unsafe fn release_slow<H: Handle>(h: *const H, acq: *mut keylock_acquisition) -> Outcome {
    // SAFETY: the caller's contract above.
    let (h, acq) = unsafe { (handle(h)?.keyed(), acq.as_mut()) };
    h.release(acq.ok_or(Fail(KEYLOCK_NULL_ARGUMENT))?.take_keyed(h.id)?)
}

/// The body of `_release_many`: every record is released (or refused) in turn; the result is
/// the first failure, or `KEYLOCK_OK`.
///
/// # Safety
/// `h` is NULL or a live handle; `acqs` is NULL or points to `n` records that nothing else uses
/// during the call.
pub(crate) unsafe fn release_many<H: Handle>(
    h: *const H,
    acqs: *mut keylock_acquisition,
    n: usize,
) -> keylock_result {
    ffi_boundary(|| {
        if n == 0 {
            return Err(Fail(KEYLOCK_INVALID_ARGUMENT));
        }
        // SAFETY: the caller's contract above.
        let (h, acqs) = unsafe { (handle(h)?.keyed(), slice_mut(acqs, n)?) };
        let mut first: Outcome = Ok(());
        for record in acqs {
            let result = record.take_keyed(h.id).and_then(|held| h.release(held));
            if first.is_ok() {
                first = result;
            }
        }
        first
    })
}

/// The body of `_extend`.
///
/// # Safety
/// As [`release`].
pub(crate) unsafe fn extend<H: Handle>(
    h: *const H,
    acq: *mut keylock_acquisition,
    lease_ns: u64,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (h, acq) = unsafe { (handle(h)?.keyed(), acq.as_mut()) };
        let lease = Duration::from_nanos(lease_ns);
        match acq.ok_or(Fail(KEYLOCK_NULL_ARGUMENT))?.keyed_mut(h.id)? {
            HeldMut::Stripe(g) => g.extend(lease)?,
            HeldMut::Pool(g) => g.extend(lease)?,
            HeldMut::Acq(a) => h.locks.extend(a, lease)?,
        }
        Ok(())
    })
}

/// The body of `_is_current`: an empty or released record is not current.
///
/// # Safety
/// `h` is NULL or a live handle; `acq` is NULL or readable; `out` is NULL or writable.
pub(crate) unsafe fn is_current<H: Handle>(
    h: *const H,
    acq: *const keylock_acquisition,
    out: *mut bool,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (h, acq) = unsafe { (handle(h)?.keyed(), handle(acq)?) };
        let out = crate::boundary::out(out)?;
        let current = match acq.keyed(h.id) {
            Ok(HeldRef::Stripe(g)) => g.is_current(),
            Ok(HeldRef::Pool(g)) => g.is_current(),
            Ok(HeldRef::Acq(a)) => h.locks.is_current(a)?,
            Err(Fail(KEYLOCK_NOT_LOCKED | KEYLOCK_NOT_OWNER)) => false,
            Err(e) => return Err(e),
        };
        // SAFETY: out is non-NULL and writable (caller).
        unsafe { out.write(current) };
        Ok(())
    })
}

/// The body of `_force_unlock` (`was_held` may be NULL).
///
/// # Safety
/// `h` is NULL or a live handle; `key` is NULL or points to `len` readable bytes; `was_held` is
/// NULL or writable.
pub(crate) unsafe fn force_unlock<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    was_held: *mut bool,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (h, key) = unsafe { (handle(h)?.keyed(), crate::boundary::key(key, len)?) };
        let held = h.locks.force_unlock(LockKey::new(key))?;
        // SAFETY: was_held is NULL or writable (caller).
        if let Some(was_held) = unsafe { was_held.as_mut() } {
            *was_held = held;
        }
        Ok(())
    })
}

/// The body of `_is_locked`.
///
/// # Safety
/// As [`force_unlock`], with `out` required.
pub(crate) unsafe fn is_locked<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    out: *mut bool,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (h, key) = unsafe { (handle(h)?.keyed(), crate::boundary::key(key, len)?) };
        let out = crate::boundary::out(out)?;
        let locked = h.locks.is_locked(LockKey::new(key))?;
        // SAFETY: out is non-NULL and writable (caller).
        unsafe { out.write(locked) };
        Ok(())
    })
}

/// The body of `_info`.
///
/// # Safety
/// As [`force_unlock`], with `out` required and pointing to a writable `keylock_lock_info`.
pub(crate) unsafe fn info<H: Handle>(
    h: *const H,
    key: *const u8,
    len: usize,
    out: *mut keylock_lock_info,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (h, key) = unsafe { (handle(h)?.keyed(), crate::boundary::key(key, len)?) };
        let out = crate::boundary::out(out)?;
        let info = keylock_lock_info::of(h.locks.info(LockKey::new(key))?);
        // SAFETY: out is non-NULL and writable (caller).
        unsafe { out.write(info) };
        Ok(())
    })
}

/// The body of `_stats`.
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or points to a writable `keylock_stats`.
pub(crate) unsafe fn stats<H: Handle>(h: *const H, out: *mut keylock_stats) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let h = unsafe { handle(h)? }.keyed();
        let out = crate::boundary::out(out)?;
        let stats = keylock_stats::of(&h.locks.stats()?);
        // SAFETY: out is non-NULL and writable (caller).
        unsafe { out.write(stats) };
        Ok(())
    })
}

/// The body of `_metrics`: `KEYLOCK_INVALID_ARGUMENT` for an object opened without metrics.
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or points to a writable `keylock_metrics`.
pub(crate) unsafe fn metrics<H: Handle>(h: *const H, out: *mut keylock_metrics) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let h = unsafe { handle(h)? }.keyed();
        let out = crate::boundary::out(out)?;
        let metrics = h.locks.metrics().ok_or(Fail(KEYLOCK_INVALID_ARGUMENT))?;
        // SAFETY: out is non-NULL and writable (caller).
        unsafe { out.write(keylock_metrics::of(&metrics)) };
        Ok(())
    })
}

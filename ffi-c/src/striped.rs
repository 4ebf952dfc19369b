//! `keylock_striped`: a fixed array of locks, each key hashed to one of them (keylock-core's
//! `StripedLock`).

use keylock_core::StripedLock;

use std::time::Duration;

use crate::boundary::*;
use crate::result::*;

/// A striped lock: a fixed number of locks ("stripes"), each key (a byte string) hashed to one.
/// The fastest per-key lock and fixed in size, at the price that two keys hashed to the same
/// stripe block each other. Every operation below is on the key's stripe: so a thread must not
/// lock a second key while it holds one (the two may share a stripe and deadlock); it locks
/// several keys with `keylock_striped_lock_many`.
///
/// Create with `keylock_striped_new`, destroy with `keylock_striped_free`. Safe to use from many
/// threads at once. A key locked by one thread may be unlocked by any thread.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[derive(Debug)]
pub struct keylock_striped {
    pub(crate) inner: StripedLock,
}

/// The most stripes `keylock_striped_new` accepts.
pub const KEYLOCK_MAX_STRIPES: usize = 1 << 20;

/// Creates a striped lock with `stripes` stripes, rounded up to a power of two. Each handle hashes
/// keys with its own random seed. A few times the number of threads is plenty; 1024 is a good
/// default.
///
/// Returns a handle that the caller owns and frees with `keylock_striped_free`, or NULL when
/// `stripes` is 0 or over `KEYLOCK_MAX_STRIPES` (or on an internal error).
#[unsafe(no_mangle)]
pub extern "C" fn keylock_striped_new(stripes: usize) -> *mut keylock_striped {
    ffi_boundary_new(|| {
        StripedLock::new(stripes)
            .ok()
            .map(|inner| keylock_striped { inner })
    })
}

/// Frees `striped`. `keylock_striped_free(NULL)` does nothing.
///
/// No thread may use or wait on the lock during or after this call. Stripes still locked are
/// simply dropped with it.
///
/// # Safety
/// `striped` is NULL or a handle from `keylock_striped_new` not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_free(striped: *mut keylock_striped) {
    // SAFETY: forwarded from our caller.
    unsafe { ffi_boundary_free(striped) }
}

/// Locks `key`, waiting as long as it takes. Keys are bytes: `key` points to `len` bytes, and
/// NULL with `len == 0` is the empty key. The key is copied; the caller keeps its buffer.
///
/// Locking a key whose stripe the calling thread already holds waits forever (the lock is not
/// recursive).
///
/// Returns:
/// - `KEYLOCK_OK`: the key's stripe is locked; release with `keylock_striped_unlock` (with this
///   key or any key of the same stripe).
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// `striped` is NULL or a live handle; `key` is NULL or points to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_lock(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (striped, key) = unsafe { (handle(striped)?, crate::boundary::key(key, len)?) };
        striped.inner.lock(key).leak();
        Ok(())
    })
}

/// Locks `key` if no one holds it, without waiting. Arguments as `keylock_striped_lock`.
///
/// Returns:
/// - `KEYLOCK_OK`: locked; release with `keylock_striped_unlock`.
/// - `KEYLOCK_WOULD_BLOCK`: the key's stripe is held (by any thread, the caller included).
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// As `keylock_striped_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_try_lock(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (striped, key) = unsafe { (handle(striped)?, crate::boundary::key(key, len)?) };
        striped.inner.try_lock(key)?.leak();
        Ok(())
    })
}

/// Locks `key`, waiting at most `timeout_ms` milliseconds. Arguments as `keylock_striped_lock`.
/// A timeout of 0 tries once. Any value is safe: one too large for the clock to represent
/// (`UINT64_MAX`, say) waits without limit.
///
/// Returns:
/// - `KEYLOCK_OK`: locked; release with `keylock_striped_unlock`.
/// - `KEYLOCK_TIMEOUT`: the timeout passed first; nothing was locked.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// As `keylock_striped_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_lock_timeout(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
    timeout_ms: u64,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (striped, key) = unsafe { (handle(striped)?, crate::boundary::key(key, len)?) };
        striped
            .inner
            .try_lock_for(key, Duration::from_millis(timeout_ms))?
            .leak();
        Ok(())
    })
}

/// Unlocks the stripe of `key`, which any thread may have locked.
///
/// Returns:
/// - `KEYLOCK_OK`: unlocked; the next waiter, if any, gets it.
/// - `KEYLOCK_NOT_LOCKED`: the key's stripe is not locked; nothing changed.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// As `keylock_striped_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_unlock(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (striped, key) = unsafe { (handle(striped)?, crate::boundary::key(key, len)?) };
        striped.inner.unlock(key)?;
        Ok(())
    })
}

/// Stores in `*out` whether the stripe of `key` is locked right now, by this key or another (a
/// snapshot, which other threads may change at once; for tests and diagnostics, not for deciding
/// whether to lock).
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` or `out` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// As `keylock_striped_lock`, and `out` is NULL or points to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_is_locked(
    striped: *const keylock_striped,
    key: *const u8,
    len: usize,
    out: *mut bool,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (striped, key) = unsafe { (handle(striped)?, crate::boundary::key(key, len)?) };
        let out = crate::boundary::out(out)?;
        let locked = striped.inner.is_locked(key);
        // SAFETY: out is non-NULL and writable (caller).
        unsafe { out.write(locked) };
        Ok(())
    })
}

/// Locks `n` keys together, waiting as long as it takes: `keys[i]` points to `lens[i]` bytes.
/// The stripes are taken in ascending order, so two threads locking overlapping sets in any
/// order cannot deadlock. Keys that share a stripe (or are listed twice) lock it once. Release
/// with `keylock_striped_unlock_many` on the same set.
///
/// Returns:
/// - `KEYLOCK_OK`: the stripe of every key is locked.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped`, `keys` or `lens` is NULL, or some `keys[i]` is NULL with
///   `lens[i] > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `n == 0` (checked first), or a length over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// `striped` is NULL or a live handle; `keys` and `lens` are NULL or point to `n` readable
/// elements; each `keys[i]` is NULL or points to `lens[i]` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_lock_many(
    striped: *mut keylock_striped,
    keys: *const *const u8,
    lens: *const usize,
    n: usize,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (striped, keys) = unsafe { (handle(striped)?, crate::boundary::keys(keys, lens, n)?) };
        striped.inner.lock_many(keys.iter().copied()).leak();
        Ok(())
    })
}

/// Unlocks the stripes of `n` keys locked with `keylock_striped_lock_many`. Every stripe is
/// checked first: if any is not locked, nothing is unlocked.
///
/// Returns:
/// - `KEYLOCK_OK`: every key is unlocked.
/// - `KEYLOCK_NOT_LOCKED`: some key's stripe is not locked; nothing changed.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped`, `keys` or `lens` is NULL, or some `keys[i]` is NULL with
///   `lens[i] > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `n == 0` (checked first), or a length over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// As `keylock_striped_lock_many`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_unlock_many(
    striped: *mut keylock_striped,
    keys: *const *const u8,
    lens: *const usize,
    n: usize,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (striped, keys) = unsafe { (handle(striped)?, crate::boundary::keys(keys, lens, n)?) };
        striped.inner.unlock_many(keys.iter().copied())?;
        Ok(())
    })
}

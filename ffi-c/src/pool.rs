//! `keylock_pool`: one lock per distinct key, created on demand and recycled when released
//! (keylock-core's `KeyPool<Vec<u8>>`).

use keylock_core::KeyPool;

use std::time::Duration;

use crate::boundary::*;
use crate::result::*;

/// A pool of per-key locks: each distinct key (a byte string) has its own lock, made when first
/// locked and recycled when released, so memory follows the number of keys held, not the number
/// of keys ever seen. Two different keys never block each other.
///
/// Create with `keylock_pool_new`, destroy with `keylock_pool_free`. Safe to use from many
/// threads at once. A key locked by one thread may be unlocked by any thread.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[derive(Debug)]
pub struct keylock_pool {
    inner: KeyPool<Vec<u8>>,
}

/// Creates an empty pool.
///
/// Returns a handle that the caller owns and frees with `keylock_pool_free`, or NULL on an
/// internal error (`KEYLOCK_PANIC`'s case).
#[unsafe(no_mangle)]
pub extern "C" fn keylock_pool_new() -> *mut keylock_pool {
    ffi_boundary_new(|| {
        Some(keylock_pool {
            inner: KeyPool::new(),
        })
    })
}

/// Frees `pool`. `keylock_pool_free(NULL)` does nothing.
///
/// No thread may use or wait on the pool during or after this call. Keys still locked are
/// simply dropped with it.
///
/// # Safety
/// `pool` is NULL or a handle from `keylock_pool_new` not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_free(pool: *mut keylock_pool) {
    // SAFETY: forwarded from our caller.
    unsafe { ffi_boundary_free(pool) }
}

/// Locks `key`, waiting as long as it takes. Keys are bytes: `key` points to `len` bytes, and
/// NULL with `len == 0` is the empty key. The key is copied; the caller keeps its buffer.
///
/// Locking a key the calling thread already holds waits forever (the lock is not recursive).
///
/// Returns:
/// - `KEYLOCK_OK`: locked; release with `keylock_pool_unlock`.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// `pool` is NULL or a live handle; `key` is NULL or points to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_lock(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (pool, key) = unsafe { (handle(pool)?, crate::boundary::key(key, len)?) };
        pool.inner.lock(key).leak();
        Ok(())
    })
}

/// Locks `key` if no one holds it, without waiting. Arguments as `keylock_pool_lock`.
///
/// Returns:
/// - `KEYLOCK_OK`: locked; release with `keylock_pool_unlock`.
/// - `KEYLOCK_WOULD_BLOCK`: the key is held (by any thread, the caller included).
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// As `keylock_pool_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_try_lock(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (pool, key) = unsafe { (handle(pool)?, crate::boundary::key(key, len)?) };
        pool.inner.try_lock(key)?.leak();
        Ok(())
    })
}

/// Locks `key`, waiting at most `timeout_ms` milliseconds. Arguments as `keylock_pool_lock`.
/// A timeout of 0 tries once. Any value is safe: one too large for the clock to represent
/// (`UINT64_MAX`, say) waits without limit.
///
/// Returns:
/// - `KEYLOCK_OK`: locked; release with `keylock_pool_unlock`.
/// - `KEYLOCK_TIMEOUT`: the timeout passed first; nothing was locked.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// As `keylock_pool_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_lock_timeout(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
    timeout_ms: u64,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (pool, key) = unsafe { (handle(pool)?, crate::boundary::key(key, len)?) };
        pool.inner
            .try_lock_for(key, Duration::from_millis(timeout_ms))?
            .leak();
        Ok(())
    })
}

/// Unlocks `key`, which any thread may have locked.
///
/// Returns:
/// - `KEYLOCK_OK`: unlocked; the next waiter, if any, gets it.
/// - `KEYLOCK_NOT_LOCKED`: the key is not locked; nothing changed.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// As `keylock_pool_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_unlock(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (pool, key) = unsafe { (handle(pool)?, crate::boundary::key(key, len)?) };
        pool.inner.unlock(key)?;
        Ok(())
    })
}

/// Stores in `*out` whether `key` is locked right now (a snapshot, which other threads may
/// change at once; for tests and diagnostics, not for deciding whether to lock).
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` or `out` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// As `keylock_pool_lock`, and `out` is NULL or points to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_is_locked(
    pool: *const keylock_pool,
    key: *const u8,
    len: usize,
    out: *mut bool,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (pool, key) = unsafe { (handle(pool)?, crate::boundary::key(key, len)?) };
        let out = crate::boundary::out(out)?;
        let locked = pool.inner.is_locked(key);
        // SAFETY: out is non-NULL and writable (caller).
        unsafe { out.write(locked) };
        Ok(())
    })
}

/// Locks `n` keys together, waiting as long as it takes: `keys[i]` points to `lens[i]` bytes.
/// The keys are taken in one global order, so two threads locking overlapping sets in any order
/// cannot deadlock. A key listed twice is locked once. Release with `keylock_pool_unlock_many`
/// on the same set (or `keylock_pool_unlock` on each distinct key).
///
/// Returns:
/// - `KEYLOCK_OK`: every key is locked.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool`, `keys` or `lens` is NULL, or some `keys[i]` is NULL with
///   `lens[i] > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `n == 0` (checked first), or a length over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// `pool` is NULL or a live handle; `keys` and `lens` are NULL or point to `n` readable
/// elements; each `keys[i]` is NULL or points to `lens[i]` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_lock_many(
    pool: *mut keylock_pool,
    keys: *const *const u8,
    lens: *const usize,
    n: usize,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (pool, keys) = unsafe { (handle(pool)?, crate::boundary::keys(keys, lens, n)?) };
        pool.inner.lock_many(keys.iter().copied()).leak();
        Ok(())
    })
}

/// Unlocks `n` keys locked with `keylock_pool_lock_many` (or one by one). Every key is checked
/// first: if any is not locked, nothing is unlocked.
///
/// Returns:
/// - `KEYLOCK_OK`: every key is unlocked.
/// - `KEYLOCK_NOT_LOCKED`: some key is not locked; nothing changed.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool`, `keys` or `lens` is NULL, or some `keys[i]` is NULL with
///   `lens[i] > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `n == 0` (checked first), or a length over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// As `keylock_pool_lock_many`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_unlock_many(
    pool: *mut keylock_pool,
    keys: *const *const u8,
    lens: *const usize,
    n: usize,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (pool, keys) = unsafe { (handle(pool)?, crate::boundary::keys(keys, lens, n)?) };
        pool.inner.unlock_many(keys.iter().copied())?;
        Ok(())
    })
}

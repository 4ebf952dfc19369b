//! `keylock_rwlock`: a reader-writer lock whose readers scale across cores (keylock-core's
//! `RwLock`, with no data inside).

use keylock_core::RwLock;

use std::time::Duration;

use crate::boundary::*;
use crate::result::*;

/// A reader-writer lock built for read-mostly work: readers on different cores do not contend
/// with each other, and a waiting writer keeps new readers out so it cannot starve. It guards no
/// data of its own; the caller decides what it protects.
///
/// Create with `keylock_rwlock_new`, destroy with `keylock_rwlock_free`. Safe to use from many
/// threads at once. A lock taken by one thread may be released by any thread. Not recursive: a
/// thread that holds a read lock and asks for another while a writer waits can deadlock.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[derive(Debug)]
pub struct keylock_rwlock {
    inner: RwLock,
}

/// Creates an unlocked reader-writer lock.
///
/// Returns a handle that the caller owns and frees with `keylock_rwlock_free`, or NULL on an
/// internal error.
#[unsafe(no_mangle)]
pub extern "C" fn keylock_rwlock_new() -> *mut keylock_rwlock {
    ffi_boundary_new(|| {
        Some(keylock_rwlock {
            inner: RwLock::new(),
        })
    })
}

/// Frees `rw`. `keylock_rwlock_free(NULL)` does nothing.
///
/// No thread may use or wait on the lock during or after this call.
///
/// # Safety
/// `rw` is NULL or a handle from `keylock_rwlock_new` not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_free(rw: *mut keylock_rwlock) {
    // SAFETY: forwarded from our caller.
    unsafe { ffi_boundary_free(rw) }
}

/// Takes a shared (read) lock, waiting as long as it takes. Any number of readers hold the lock
/// together, while no writer does.
///
/// Returns:
/// - `KEYLOCK_OK`: held; release with `keylock_rwlock_read_unlock`.
/// - `KEYLOCK_NULL_ARGUMENT`: `rw` is NULL.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// `rw` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_read_lock(rw: *mut keylock_rwlock) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let rw = unsafe { handle(rw)? };
        rw.inner.read().leak();
        Ok(())
    })
}

/// Takes the read lock if that needs no wait.
///
/// Returns:
/// - `KEYLOCK_OK`: held; release with `keylock_rwlock_read_unlock`.
/// - `KEYLOCK_WOULD_BLOCK`: a writer holds or waits for the lock.
/// - `KEYLOCK_NULL_ARGUMENT`: `rw` is NULL.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// `rw` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_try_read_lock(rw: *mut keylock_rwlock) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let rw = unsafe { handle(rw)? };
        rw.inner.try_read()?.leak();
        Ok(())
    })
}

/// Takes the read lock, waiting at most `timeout_ms` milliseconds. A timeout of 0 tries once;
/// a timeout too large to form a deadline (never the case on Linux) waits without limit.
///
/// Returns:
/// - `KEYLOCK_OK`: held; release with `keylock_rwlock_read_unlock`.
/// - `KEYLOCK_TIMEOUT`: the timeout passed first; nothing was locked.
/// - `KEYLOCK_NULL_ARGUMENT`: `rw` is NULL.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// `rw` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_read_lock_timeout(
    rw: *mut keylock_rwlock,
    timeout_ms: u64,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let rw = unsafe { handle(rw)? };
        rw.inner
            .try_read_for(Duration::from_millis(timeout_ms))?
            .leak();
        Ok(())
    })
}

/// Releases one read lock, which any thread may have taken.
///
/// Returns:
/// - `KEYLOCK_OK`: released.
/// - `KEYLOCK_NOT_LOCKED`: no read lock is held; nothing changed.
/// - `KEYLOCK_NULL_ARGUMENT`: `rw` is NULL.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `rw` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_read_unlock(rw: *mut keylock_rwlock) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let rw = unsafe { handle(rw)? };
        rw.inner.read_unlock()?;
        Ok(())
    })
}

/// Takes the exclusive (write) lock, waiting as long as it takes: one writer holds it, and no
/// reader.
///
/// Returns:
/// - `KEYLOCK_OK`: held; release with `keylock_rwlock_write_unlock`.
/// - `KEYLOCK_NULL_ARGUMENT`: `rw` is NULL.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// `rw` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_write_lock(rw: *mut keylock_rwlock) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let rw = unsafe { handle(rw)? };
        rw.inner.write().leak();
        Ok(())
    })
}

/// Takes the write lock if that needs no wait.
///
/// Returns:
/// - `KEYLOCK_OK`: held; release with `keylock_rwlock_write_unlock`.
/// - `KEYLOCK_WOULD_BLOCK`: a reader or writer holds the lock.
/// - `KEYLOCK_NULL_ARGUMENT`: `rw` is NULL.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// `rw` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_try_write_lock(rw: *mut keylock_rwlock) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let rw = unsafe { handle(rw)? };
        rw.inner.try_write()?.leak();
        Ok(())
    })
}

/// Takes the write lock, waiting at most `timeout_ms` milliseconds. A timeout of 0 tries once;
/// a timeout too large to form a deadline (never the case on Linux) waits without limit.
///
/// Returns:
/// - `KEYLOCK_OK`: held; release with `keylock_rwlock_write_unlock`.
/// - `KEYLOCK_TIMEOUT`: the timeout passed first; nothing was locked.
/// - `KEYLOCK_NULL_ARGUMENT`: `rw` is NULL.
/// - `KEYLOCK_PANIC`: internal error; nothing was locked.
///
/// # Safety
/// `rw` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_write_lock_timeout(
    rw: *mut keylock_rwlock,
    timeout_ms: u64,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let rw = unsafe { handle(rw)? };
        rw.inner
            .try_write_for(Duration::from_millis(timeout_ms))?
            .leak();
        Ok(())
    })
}

/// Releases one write lock, which any thread may have taken.
///
/// Returns:
/// - `KEYLOCK_OK`: released.
/// - `KEYLOCK_NOT_LOCKED`: no write lock is held; nothing changed.
/// - `KEYLOCK_NULL_ARGUMENT`: `rw` is NULL.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `rw` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_write_unlock(rw: *mut keylock_rwlock) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let rw = unsafe { handle(rw)? };
        rw.inner.write_unlock()?;
        Ok(())
    })
}

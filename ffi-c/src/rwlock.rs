//! `keylock_rwlock`: a reader-writer lock whose readers scale across cores (keylock-core's
//! `RwLock`, with no data inside). Each acquire stores the core's guard in the caller's
//! `keylock_acquisition`; `keylock_rwlock_release` drops exactly that guard.

use std::sync::Arc;

use keylock_core::{RwLock, Wait};

use crate::acquisition::*;
use crate::boundary::*;
use crate::options::wait_of;
use crate::result::*;

/// A reader-writer lock built for read-mostly work: readers on different cores do not contend
/// with each other, and a waiting writer keeps new readers out so it cannot starve. It guards no
/// data of its own; the caller decides what it protects. Each write acquisition has a fence,
/// greater than every earlier writer's.
///
/// Create with `keylock_rwlock_new`, destroy with `keylock_rwlock_free`. Safe to use from many
/// threads at once. Every acquire fills a `keylock_acquisition`; release it with
/// `keylock_rwlock_release` (from any thread). Not recursive: a thread that holds a read lock
/// and asks for another while a writer waits can deadlock.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[derive(Debug)]
pub struct keylock_rwlock {
    inner: Arc<RwLock>,
    id: u64,
}

/// Creates an unlocked reader-writer lock.
///
/// Returns a handle that the caller owns and frees with `keylock_rwlock_free`, or NULL on an
/// internal error.
#[unsafe(no_mangle)]
pub extern "C" fn keylock_rwlock_new() -> *mut keylock_rwlock {
    ffi_boundary_new(|| {
        Some(keylock_rwlock {
            inner: Arc::new(RwLock::new()),
            id: next_lock_id(),
        })
    })
}

/// Frees `rw`. `keylock_rwlock_free(NULL)` does nothing.
///
/// No thread may use or wait on the lock during or after this call. Release every acquisition
/// first: one still held keeps the lock's memory allocated (it can no longer be released).
///
/// # Safety
/// `rw` is NULL or a handle from `keylock_rwlock_new` not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_free(rw: *mut keylock_rwlock) {
    // SAFETY: forwarded from our caller.
    unsafe { ffi_boundary_free(rw) }
}

/// The body of the read acquires.
///
/// # Safety
/// `rw` is NULL or a live handle; `out` is NULL or writable and unused by other calls.
unsafe fn read(
    rw: *const keylock_rwlock,
    wait: Wait,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: the caller's contract above.
    unsafe {
        acquire_into(out, |out| {
            let rw = handle(rw)?;
            out.fill_read(rw.id, rw.inner.read_with_owned(wait)?);
            Ok(())
        })
    }
}

/// The body of the write acquires.
///
/// # Safety
/// As [`read`].
unsafe fn write(
    rw: *const keylock_rwlock,
    wait: Wait,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: the caller's contract above.
    unsafe {
        acquire_into(out, |out| {
            let rw = handle(rw)?;
            out.fill_write(rw.id, rw.inner.write_with_owned(wait)?);
            Ok(())
        })
    }
}

/// Takes a shared (read) lock, waiting as long as it takes, and writes the acquisition to
/// `*out` (mode `KEYLOCK_SHARED`, fence 0). Any number of readers hold the lock together, while
/// no writer does.
///
/// Returns:
/// - `KEYLOCK_OK`: held; release `*out` with `keylock_rwlock_release`.
/// - `KEYLOCK_NULL_ARGUMENT`: `rw` or `out` is NULL.
/// - `KEYLOCK_PANIC`: internal error.
///
/// On any failure nothing is held and `*out` is left empty (when `out` is not NULL).
///
/// # Safety
/// `rw` is NULL or a live handle; `out` is NULL or points to a writable `keylock_acquisition`
/// that no other call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_read_lock(
    rw: *mut keylock_rwlock,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { read(rw, Wait::Forever, out) }
}

/// Takes a read lock if no writer holds or waits for the lock, without waiting.
///
/// Returns what `keylock_rwlock_read_lock` returns, and:
/// - `KEYLOCK_WOULD_BLOCK`: a writer holds or waits for the lock; `*out` is empty.
///
/// # Safety
/// As `keylock_rwlock_read_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_try_read_lock(
    rw: *mut keylock_rwlock,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { read(rw, Wait::No, out) }
}

/// Takes a read lock, waiting at most `timeout_ns` nanoseconds (`KEYLOCK_NO_WAIT` does not
/// wait; `KEYLOCK_WAIT_FOREVER` waits as long as it takes).
///
/// Returns what `keylock_rwlock_read_lock` returns, and:
/// - `KEYLOCK_TIMEOUT`: the timeout passed first; `*out` is empty.
/// - `KEYLOCK_WOULD_BLOCK`: `timeout_ns` was 0 and a writer is present.
///
/// # Safety
/// As `keylock_rwlock_read_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_read_lock_timeout(
    rw: *mut keylock_rwlock,
    timeout_ns: u64,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { read(rw, wait_of(timeout_ns), out) }
}

/// Takes the exclusive (write) lock, waiting as long as it takes: new readers wait from the
/// moment a writer asks, and the writer waits for the readers inside to leave. The acquisition
/// (mode `KEYLOCK_EXCLUSIVE`) has a fence greater than every earlier writer's.
///
/// Returns what `keylock_rwlock_read_lock` returns.
///
/// # Safety
/// As `keylock_rwlock_read_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_write_lock(
    rw: *mut keylock_rwlock,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { write(rw, Wait::Forever, out) }
}

/// Takes the write lock if nobody holds the lock, without waiting.
///
/// Returns what `keylock_rwlock_try_read_lock` returns (`KEYLOCK_WOULD_BLOCK`: a reader or
/// writer holds the lock).
///
/// # Safety
/// As `keylock_rwlock_read_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_try_write_lock(
    rw: *mut keylock_rwlock,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { write(rw, Wait::No, out) }
}

/// Takes the write lock, waiting at most `timeout_ns` nanoseconds (as
/// `keylock_rwlock_read_lock_timeout`).
///
/// Returns what `keylock_rwlock_read_lock_timeout` returns.
///
/// # Safety
/// As `keylock_rwlock_read_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_write_lock_timeout(
    rw: *mut keylock_rwlock,
    timeout_ns: u64,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { write(rw, wait_of(timeout_ns), out) }
}

/// Releases the read or write acquisition in `*acquisition`, and only it; any thread may
/// release. The record is marked released, so that it cannot be released twice.
///
/// Returns:
/// - `KEYLOCK_OK`: released.
/// - `KEYLOCK_NOT_OWNER`: the record was released before; nothing changed.
/// - `KEYLOCK_NOT_LOCKED`: the record is empty (never filled, or a failed acquire's output).
/// - `KEYLOCK_NULL_ARGUMENT`: `rw` or `acquisition` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the record belongs to another lock object, or the struct is
///   not an acquisition record.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `rw` is NULL or a live handle; `acquisition` is NULL or points to a record that no other
/// call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_rwlock_release(
    rw: *mut keylock_rwlock,
    acquisition: *mut keylock_acquisition,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (rw, acq) = unsafe { (handle(rw)?, acquisition.as_mut()) };
        acq.ok_or(Fail(crate::contract::KEYLOCK_NULL_ARGUMENT))?
            .release_rw(rw.id)
    })
}

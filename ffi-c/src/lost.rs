//! Lost locks and region removal: `keylock_pool_lost` / `keylock_striped_lost` (whether a
//! remote acquisition was lost behind its holder's back) and `keylock_unlink` (remove a
//! shared-memory region by name). Both are one call into the core each.

use std::ffi::{CStr, c_char};

use crate::acquisition::{HeldRef, keylock_acquisition};
use crate::boundary::{ffi_boundary, handle};
use crate::contract::{KEYLOCK_INVALID_ARGUMENT, KEYLOCK_NOT_LOCKED, KEYLOCK_NOT_OWNER};
use crate::keyed::Handle;
use crate::pool::keylock_pool;
use crate::result::{Fail, keylock_result};
use crate::semaphore::keylock_semaphore;
use crate::striped::keylock_striped;

/// The body of `_lost`: an empty or released record, or one of a scope whose holders cannot
/// lose a lock behind their backs, is not lost.
///
/// # Safety
/// `h` is NULL or a live handle; `acq` is NULL or readable; `out` is NULL or writable.
unsafe fn lost<H: Handle>(
    h: *const H,
    acq: *const keylock_acquisition,
    out: *mut bool,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let (h, acq) = unsafe { (handle(h)?.keyed(), handle(acq)?) };
        let out = crate::boundary::out(out)?;
        let lost = match acq.keyed(h.id) {
            Ok(HeldRef::Acq(a)) => h.locks.lost_signal(a).is_some_and(|s| s.is_lost()),
            // The in-process fast paths: their holders cannot be cut off.
            Ok(HeldRef::Pool(_) | HeldRef::Stripe(_)) => false,
            Err(Fail(KEYLOCK_NOT_LOCKED | KEYLOCK_NOT_OWNER)) => false,
            Err(e) => return Err(e),
        };
        // SAFETY: out is non-NULL and writable (caller).
        unsafe { out.write(lost) };
        Ok(())
    })
}

/// Stores in `*out_lost` whether `*acquisition` was lost behind its holder's back: a remote
/// (Redis) lease that could not be renewed in time, or a force-unlock that the renewal found
/// (it renews every third of the lease, so the loss shows within about a third of the lease).
/// Once true it stays true, and releasing the record reports `KEYLOCK_NOT_OWNER` or
/// `KEYLOCK_LEASE_EXPIRED`. Always false for scopes whose holders cannot lose a lock that way
/// (in-process, shared memory: they learn of a force-unlock at release, or from
/// `keylock_pool_is_current`), and for an empty or released record. Cheap: it asks no server
/// (`keylock_pool_is_current` does).
///
/// Returns:
/// - `KEYLOCK_OK`: `*out_lost` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool`, `acquisition` or `out_lost` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the record belongs to another lock object, or the struct is
///   not an acquisition record.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `pool` is NULL or a live handle; `acquisition` is NULL or readable; `out_lost` is NULL or
/// points to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_lost(
    pool: *const keylock_pool,
    acquisition: *const keylock_acquisition,
    out_lost: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { lost(pool, acquisition, out_lost) }
}

/// Stores in `*out_lost` whether `*acquisition` was lost behind its holder's back: as
/// `keylock_pool_lost` (striped lock objects live in process or in shared memory, so this is
/// false unless a future scope can lose them).
///
/// Returns:
/// - `KEYLOCK_OK`: `*out_lost` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped`, `acquisition` or `out_lost` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the record belongs to another lock object, or the struct is
///   not an acquisition record.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `striped` is NULL or a live handle; `acquisition` is NULL or readable; `out_lost` is NULL or
/// points to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_lost(
    striped: *const keylock_striped,
    acquisition: *const keylock_acquisition,
    out_lost: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { lost(striped, acquisition, out_lost) }
}

/// Stores in `*out_lost` whether `*acquisition` (a semaphore's) was lost behind its holder's
/// back: as `keylock_pool_lost` (a Redis semaphore's units whose lease could not be renewed, or
/// that a force-release took; always false in process).
///
/// Returns:
/// - `KEYLOCK_OK`: `*out_lost` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `sem`, `acquisition` or `out_lost` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the record belongs to another lock object, or the struct is
///   not an acquisition record.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `sem` is NULL or a live handle; `acquisition` is NULL or readable; `out_lost` is NULL or
/// points to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_lost(
    sem: *const keylock_semaphore,
    acquisition: *const keylock_acquisition,
    out_lost: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { lost(sem, acquisition, out_lost) }
}

/// Removes the shared-memory region that `name` (`"shm:NAME"`, as `keylock_pool_open` takes
/// it) names, and stores in `*out_removed` (if not NULL) whether it existed. Processes that
/// have the region open keep using it; the next open of the name makes a new, empty region.
///
/// Returns:
/// - `KEYLOCK_OK`: done (`*out_removed` false: there was no such region).
/// - `KEYLOCK_NULL_ARGUMENT`: `name` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: not a `shm:` name, a malformed one (or not UTF-8), or a build
///   without the shared-memory scope.
/// - `KEYLOCK_PERMISSION_DENIED`, `KEYLOCK_UNAVAILABLE`: the file could not be removed.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out_removed` is NULL or points to a writable
/// `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_unlink(
    name: *const c_char,
    out_removed: *mut bool,
) -> keylock_result {
    ffi_boundary(|| {
        if name.is_null() {
            return Err(Fail(crate::contract::KEYLOCK_NULL_ARGUMENT));
        }
        // SAFETY: name is non-NULL and NUL-terminated (caller).
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| Fail(KEYLOCK_INVALID_ARGUMENT))?;
        let removed = keylock_core::unlink(name)?;
        // SAFETY: out_removed is NULL or writable (caller).
        if let Some(out) = unsafe { out_removed.as_mut() } {
            *out = removed;
        }
        Ok(())
    })
}

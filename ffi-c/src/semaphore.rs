//! `keylock_semaphore`: at most `permits` units held per key (keylock-core's `KeyedSemaphore`,
//! opened through `open_with` with `OpenOptions::permits`, so that it is the same trait object
//! as every other lock object). Each export is one call into [`crate::keyed`]; the weight of an
//! acquire is an argument of its own, turned into the core's `LockOptions::weight`.
//!
//! A semaphore is not a `KeyPool` or a `StripedLock`, so [`crate::keyed`]'s in-process fast
//! paths never apply to it: every acquire and release goes through the `KeyedLock` trait, and
//! every record keeps the core's `Acquisition`, which carries its units.

use std::ffi::c_char;

use keylock_core::LockOptions;

use crate::acquisition::keylock_acquisition;
use crate::boundary::*;
use crate::contract::*;
use crate::keyed::{self, Handle, Keyed};
use crate::metrics::keylock_metrics;
use crate::options::*;
use crate::result::*;
use crate::stats::keylock_stats;

/// The most permits a semaphore can have per key (`keylock_semaphore_new`,
/// `keylock_semaphore_open`).
pub const KEYLOCK_MAX_PERMITS: u32 = 32767;

// The header's number is the core's.
const _: () = assert!(KEYLOCK_MAX_PERMITS == keylock_core::KeyedSemaphore::<Vec<u8>>::MAX_PERMITS);

/// A keyed semaphore: at most `permits` units of each key (a byte string) held at once, for
/// per-tenant, per-token or per-host limits. Each acquire takes `weight` units of one key
/// (1 to `permits`) and waits while they do not fit; different keys never block each other.
///
/// - Strict FIFO per key: a request waits behind every request for the key queued before it,
///   so a heavy request at the head is not passed (and starved) by light ones that came later.
/// - Every acquisition has a fence of its own: it rises with every acquisition of the key, and
///   across force-releases and leases. A release goes by acquisition record and gives back
///   exactly that record's units; a stale record (force-released, lease run out, released
///   already) releases nothing.
/// - Memory follows the keys held or awaited, as in a pool.
///
/// Create with `keylock_semaphore_new` or `keylock_semaphore_open`, destroy with
/// `keylock_semaphore_free`. Safe to use from many threads at once. Every acquire fills a
/// `keylock_acquisition` (its `weight` is the units held); release it with
/// `keylock_semaphore_release` (from any thread).
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[derive(Debug)]
pub struct keylock_semaphore {
    keyed: Keyed,
}

impl Handle for keylock_semaphore {
    const STRIPED: bool = false;
    fn wrap(keyed: Keyed) -> Self {
        Self { keyed }
    }
    #[inline]
    fn keyed(&self) -> &Keyed {
        &self.keyed
    }
}

/// The core's options for `weight` units, waiting `timeout_ns` (as
/// `keylock_lock_options.timeout_ns`).
fn weighted(weight: u32, timeout_ns: u64) -> LockOptions {
    LockOptions::new().weight(weight).wait(wait_of(timeout_ns))
}

/// Creates a semaphore in this process with `permits` units per key (as
/// `keylock_semaphore_open("local:", permits, NULL, &sem)`).
///
/// Returns a handle that the caller owns and frees with `keylock_semaphore_free`, or NULL when
/// `permits` is 0 or over `KEYLOCK_MAX_PERMITS` (or on an internal error).
#[unsafe(no_mangle)]
pub extern "C" fn keylock_semaphore_new(permits: u32) -> *mut keylock_semaphore {
    keyed::new_local_as(|| keylock_core::OpenOptions::new().permits(permits))
}

/// Opens the semaphore that `name` names, with `permits` units per key and `options` (NULL:
/// the defaults), and stores its handle in `*out`: `"local:"` (or `""`) for a new semaphore in
/// this process, `"shm:NAME"` for one shared by the processes of this machine (the permits in
/// the region's header), `"redis://..."` or `"postgres://..."` for one shared by every process
/// that opens the same prefix; every open of a shared one must give the same permits (`KEYLOCK_INCOMPATIBLE`
/// otherwise). A semaphore is
/// always strict FIFO and has no stripes and no owners: `options->stripes` must be 0 and
/// `options->reentrant` and `options->fifo` false (`capacity` and `permissions` are for scopes
/// of fixed size, and must be 0 for `local:`; `metrics` turns on `keylock_semaphore_metrics`).
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is a handle that the caller owns and frees with
///   `keylock_semaphore_free`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `permits` is 0 or over `KEYLOCK_MAX_PERMITS`; an unknown or
///   malformed name (or one that is not UTF-8); or an option a semaphore does not take (above).
/// - `KEYLOCK_INCOMPATIBLE`: a region or Redis prefix whose semaphore has other permits, or
///   that holds locks.
/// - `KEYLOCK_CAPACITY_EXCEEDED`, `KEYLOCK_PERMISSION_DENIED`, `KEYLOCK_UNAVAILABLE`: as for
///   `keylock_pool_open` (a region that cannot be made or opened; Redis refused the
///   credentials, or could not be reached).
/// - `KEYLOCK_NULL_ARGUMENT`: `name` or `out` is NULL.
/// - `KEYLOCK_PANIC`: internal error.
///
/// On any failure `*out` is set to NULL (when `out` is not NULL).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `options` is NULL or points to a readable
/// `keylock_open_options`; `out` is NULL or points to a writable `keylock_semaphore *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_open(
    name: *const c_char,
    permits: u32,
    options: *const keylock_open_options,
    out: *mut *mut keylock_semaphore,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe {
        keyed::open_as(name, options, out, |o| {
            if o.stripes != 0 {
                return Err(Fail(KEYLOCK_INVALID_ARGUMENT));
            }
            let mut core = o.to_core(None);
            core.permits = Some(permits);
            Ok(core)
        })
    }
}

/// Frees `sem`. `keylock_semaphore_free(NULL)` does nothing.
///
/// No thread may use or wait on the semaphore during or after this call. Units still held are
/// simply dropped with it; their acquisition records must not be passed to keylock afterwards.
///
/// # Safety
/// `sem` is NULL or a handle from `keylock_semaphore_new` / `keylock_semaphore_open` not freed
/// before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_free(sem: *mut keylock_semaphore) {
    // SAFETY: forwarded from our caller.
    unsafe { ffi_boundary_free(sem) }
}

/// The units per key of `sem` (what it was made with); 0 for NULL.
///
/// # Safety
/// `sem` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_permits(sem: *const keylock_semaphore) -> u32 {
    // SAFETY: the caller's contract above.
    let Ok(sem) = (unsafe { handle(sem) }) else {
        return 0;
    };
    sem.keyed().locks.permits().unwrap_or(0)
}

/// Takes `weight` units of `key`, waiting as long as it takes (behind every earlier request
/// for the key), and writes the acquisition to `*out` (`out->weight` is `weight`; `out->fence`
/// is higher than that of every earlier acquisition of the key; `out->mode` is
/// `KEYLOCK_SHARED`). Keys are bytes: `key` points
/// to `len` bytes, and NULL with `len == 0` is the empty key. The key is copied.
///
/// Taking units of a key whose units the caller already holds waits while they do not fit, as
/// for anyone else.
///
/// Returns:
/// - `KEYLOCK_OK`: held; `*out` is the acquisition, to release with
///   `keylock_semaphore_release`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `weight` is 0 or over the semaphore's permits, or `len` is
///   over `PTRDIFF_MAX`.
/// - `KEYLOCK_NULL_ARGUMENT`: `sem` or `out` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_PANIC`: internal error.
///
/// On any failure nothing is held and `*out` is left empty (when `out` is not NULL).
///
/// # Safety
/// `sem` is NULL or a live handle; `key` is NULL or points to `len` readable bytes; `out` is
/// NULL or points to a writable `keylock_acquisition` that no other call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_acquire(
    sem: *mut keylock_semaphore,
    key: *const u8,
    len: usize,
    weight: u32,
    out: *mut keylock_acquisition,
) -> keylock_result {
    let opts = weighted(weight, KEYLOCK_WAIT_FOREVER);
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire(sem, key, len, &opts, out) }
}

/// Takes `weight` units of `key` if they fit now and no earlier request for the key is
/// waiting, without waiting. Arguments as `keylock_semaphore_acquire`.
///
/// Returns what `keylock_semaphore_acquire` returns, and:
/// - `KEYLOCK_WOULD_BLOCK`: the units do not fit now (or others are queued first); nothing is
///   held and `*out` is empty.
///
/// # Safety
/// As `keylock_semaphore_acquire`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_try_acquire(
    sem: *mut keylock_semaphore,
    key: *const u8,
    len: usize,
    weight: u32,
    out: *mut keylock_acquisition,
) -> keylock_result {
    let opts = weighted(weight, KEYLOCK_NO_WAIT);
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire(sem, key, len, &opts, out) }
}

/// Takes `weight` units of `key`, waiting at most `timeout_ns` nanoseconds. Arguments as
/// `keylock_semaphore_acquire`; `timeout_ns` as `keylock_lock_options.timeout_ns`:
/// `KEYLOCK_NO_WAIT` (0) does not wait, `KEYLOCK_WAIT_FOREVER` (`UINT64_MAX`) waits as long as
/// it takes.
///
/// Returns what `keylock_semaphore_acquire` returns, and:
/// - `KEYLOCK_TIMEOUT`: the timeout passed first; nothing is held, `*out` is empty, and the
///   request left the queue (those behind it move up).
/// - `KEYLOCK_WOULD_BLOCK`: `timeout_ns` was 0 and the units do not fit now.
///
/// # Safety
/// As `keylock_semaphore_acquire`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_acquire_timeout(
    sem: *mut keylock_semaphore,
    key: *const u8,
    len: usize,
    weight: u32,
    timeout_ns: u64,
    out: *mut keylock_acquisition,
) -> keylock_result {
    let opts = weighted(weight, timeout_ns);
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire(sem, key, len, &opts, out) }
}

/// Takes `weight` units of `key` as `options` says: its lease and how long to wait (NULL: no
/// lease, wait forever). A semaphore has no modes and no owners: `options->mode` must be a
/// known mode but is otherwise ignored, and `options->owner` is ignored. With a lease, the
/// units are given back by themselves when it runs out (the holder's release then reports
/// `KEYLOCK_LEASE_EXPIRED`). Other arguments as `keylock_semaphore_acquire`.
///
/// Returns what `keylock_semaphore_acquire_timeout` returns; `KEYLOCK_INVALID_ARGUMENT` also
/// for an unknown `options->mode`.
///
/// # Safety
/// As `keylock_semaphore_acquire`, and `options` is NULL or points to a readable
/// `keylock_lock_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_acquire_with(
    sem: *mut keylock_semaphore,
    key: *const u8,
    len: usize,
    weight: u32,
    options: *const keylock_lock_options,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: options is NULL or readable (caller).
    let opts = unsafe { options.as_ref() }.map_or(Ok(LockOptions::new()), |o| o.to_core());
    let opts = match opts {
        Ok(mut opts) => {
            opts.owner = None;
            opts.weight(weight)
        }
        Err(Fail(code)) => {
            // SAFETY: out is NULL or writable (caller): a failed acquire leaves it empty.
            if let Some(out) = unsafe { out.as_mut() } {
                *out = keylock_acquisition::EMPTY;
            }
            return code;
        }
    };
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire(sem, key, len, &opts, out) }
}

/// Gives back the units of the acquisition in `*acquisition`, and only those: if the key was
/// force-released or the lease ran out meanwhile, nothing is given back (its units were
/// already), and the key's current holders keep theirs. Any thread may release. The record is
/// marked released in every case but `KEYLOCK_NULL_ARGUMENT` and `KEYLOCK_INVALID_ARGUMENT`, so
/// that it cannot be released twice.
///
/// Returns:
/// - `KEYLOCK_OK`: released; waiters whose units now fit, in queue order, get them.
/// - `KEYLOCK_NOT_OWNER`: the acquisition was no longer current (force-released), or the
///   record was released before; nothing changed.
/// - `KEYLOCK_LEASE_EXPIRED`: its lease had run out; nothing changed.
/// - `KEYLOCK_NOT_LOCKED`: the record is empty (never filled, or a failed acquire's output).
/// - `KEYLOCK_NULL_ARGUMENT`: `sem` or `acquisition` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the record belongs to another lock object (another
///   semaphore, a pool...), or the struct is not an acquisition record.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `sem` is NULL or a live handle; `acquisition` is NULL or points to a record that no other
/// call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_release(
    sem: *mut keylock_semaphore,
    acquisition: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::release(sem, acquisition) }
}

/// Takes `weight` units of each of `n` keys, all together: `keys[i]` points to `lens[i]`
/// bytes. All or nothing, in one global order of the keys, so two threads taking overlapping
/// sets in any order cannot deadlock. A key listed twice is taken once. `options` gives the
/// lease and how long to wait for them all (NULL: no lease, wait forever; `mode` and `owner` do
/// not apply, as in `keylock_semaphore_acquire_with`).
///
/// `out` has room for `n` records; the acquisitions go to `out[0..*count]`, one per distinct
/// key, in the order of the keys' first occurrence, and the rest of `out` is left empty.
/// Release them with `keylock_semaphore_release_many(sem, out, *count)` (or one by one).
///
/// Returns:
/// - `KEYLOCK_OK`: `weight` units of every key are held.
/// - `KEYLOCK_WOULD_BLOCK` / `KEYLOCK_TIMEOUT`: `options->timeout_ns` was 0 / ran out first.
/// - `KEYLOCK_INVALID_ARGUMENT`: `weight` is 0 or over the permits, `n == 0`, a length over
///   `PTRDIFF_MAX`, or an unknown `options->mode`.
/// - `KEYLOCK_NULL_ARGUMENT`: `sem`, `keys`, `lens`, `out` or `count` is NULL, or some
///   `keys[i]` is NULL with `lens[i] > 0`.
/// - `KEYLOCK_PANIC`: internal error.
///
/// On any failure no units are held, every record of `out` is empty and `*count` is 0 (for the
/// pointers that are not NULL).
///
/// # Safety
/// `sem` is NULL or a live handle; `keys` and `lens` are NULL or point to `n` readable
/// elements, each `keys[i]` NULL or pointing to `lens[i]` readable bytes; `options` is NULL or
/// readable; `out` is NULL or points to `n` writable records; `count` is NULL or points to a
/// writable `size_t`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // the C signature: arrays and their lengths
pub unsafe extern "C" fn keylock_semaphore_acquire_many(
    sem: *mut keylock_semaphore,
    keys: *const *const u8,
    lens: *const usize,
    n: usize,
    weight: u32,
    options: *const keylock_lock_options,
    out: *mut keylock_acquisition,
    count: *mut usize,
) -> keylock_result {
    let modes = std::ptr::null();
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_many_weighted(sem, keys, lens, modes, n, options, weight, out, count) }
}

/// Releases `acquisitions[0..n]` (e.g. what `keylock_semaphore_acquire_many` filled), each as
/// `keylock_semaphore_release` does; every one is released or refused, whatever the others
/// give.
///
/// Returns `KEYLOCK_OK` when every release succeeded, else the first failure's code (as
/// `keylock_semaphore_release`); `KEYLOCK_INVALID_ARGUMENT` for `n == 0` or over
/// `PTRDIFF_MAX` bytes; `KEYLOCK_NULL_ARGUMENT` for a NULL `sem` or `acquisitions`.
///
/// # Safety
/// `sem` is NULL or a live handle; `acquisitions` is NULL or points to `n` records that no
/// other call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_release_many(
    sem: *mut keylock_semaphore,
    acquisitions: *mut keylock_acquisition,
    n: usize,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::release_many(sem, acquisitions, n) }
}

/// Moves the end of the lease of `*acquisition` to `lease_ns` nanoseconds from now (and
/// updates the record), while it is still current.
///
/// Returns what `keylock_pool_extend` returns (`KEYLOCK_INVALID_ARGUMENT` for an acquisition
/// without a lease).
///
/// # Safety
/// As `keylock_semaphore_release`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_extend(
    sem: *mut keylock_semaphore,
    acquisition: *mut keylock_acquisition,
    lease_ns: u64,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::extend(sem, acquisition, lease_ns) }
}

/// Stores in `*out` whether `*acquisition` still holds its units: not released, not
/// force-released, its lease (if any) not run out. An empty or released record is not current.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `sem`, `acquisition` or `out` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the record belongs to another lock object, or the struct is
///   not an acquisition record.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `sem` is NULL or a live handle; `acquisition` is NULL or readable; `out` is NULL or points
/// to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_is_current(
    sem: *const keylock_semaphore,
    acquisition: *const keylock_acquisition,
    out: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::is_current(sem, acquisition, out) }
}

/// Ends every hold of `key`, whoever holds its units, and advances its fence: for units left
/// behind by holders that will never release them. Their records no longer release anything
/// (their releases report `KEYLOCK_NOT_OWNER`); waiters are served in queue order, with fences
/// higher than theirs. Stores in `*was_held` (unless it is NULL) whether any units were held.
///
/// Returns:
/// - `KEYLOCK_OK`: no units of the key are held by earlier acquisitions (or none were).
/// - `KEYLOCK_NULL_ARGUMENT`: `sem` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `sem` is NULL or a live handle; `key` is NULL or points to `len` readable bytes; `was_held`
/// is NULL or points to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_force_release(
    sem: *mut keylock_semaphore,
    key: *const u8,
    len: usize,
    was_held: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::force_unlock(sem, key, len, was_held) }
}

/// Stores in `*out` who holds `key`: `out->units` (units held now, at most the permits),
/// `out->holders` (acquisitions holding them), `out->fence` (the newest acquisition's),
/// `out->waiters`, and the lease left on the earliest lease among the holders (`out->held` is
/// false, and every other field 0, when no units are held). A snapshot, which other threads
/// may change at once; for tests and diagnostics. For a semaphore `out->mode` is
/// `KEYLOCK_SHARED`, `out->holds` 1 and `out->owner` 0.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `sem` or `out` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// `sem` is NULL or a live handle; `key` is NULL or points to `len` readable bytes; `out` is
/// NULL or points to a writable `keylock_lock_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_info(
    sem: *const keylock_semaphore,
    key: *const u8,
    len: usize,
    out: *mut keylock_lock_info,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::info(sem, key, len, out) }
}

/// Stores in `*out` the counts of the semaphore (see `keylock_stats`): `held` counts the keys
/// with units held, `shared_holds` the units held over all keys, `waiting` the requests
/// queued. A snapshot for monitoring and tests.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `sem` or `out` is NULL.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// `sem` is NULL or a live handle; `out` is NULL or points to a writable `keylock_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_stats(
    sem: *const keylock_semaphore,
    out: *mut keylock_stats,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::stats(sem, out) }
}

/// Stores in `*out` the metrics of the semaphore, a lock object opened with metrics
/// (`keylock_open_options.metrics`): its acquisitions, contended calls, timeouts, failed tries,
/// lease ends, losses and force-unlocks, and histograms of wait and hold times, totals since it
/// was opened (see `keylock_metrics`). A snapshot for monitoring and tests; it asks no server.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_INVALID_ARGUMENT`: `sem` was opened without metrics (or made by
///   `keylock_semaphore_new`, which has none); `*out` is unchanged.
/// - `KEYLOCK_NULL_ARGUMENT`: `sem` or `out` is NULL.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// `sem` is NULL or a live handle; `out` is NULL or points to a writable `keylock_metrics`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_semaphore_metrics(
    sem: *const keylock_semaphore,
    out: *mut keylock_metrics,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::metrics(sem, out) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acquisition::state;

    #[test]
    fn a_semaphore_record_carries_its_units_through_the_trait() {
        let sem = keylock_semaphore_new(3);
        assert!(!sem.is_null());
        assert!(keylock_semaphore_new(0).is_null());
        assert!(keylock_semaphore_new(KEYLOCK_MAX_PERMITS + 1).is_null());
        let key = b"k".as_ptr();
        let (mut a, mut b, mut c) = (
            keylock_acquisition::EMPTY,
            keylock_acquisition::EMPTY,
            keylock_acquisition::EMPTY,
        );
        let mut info = keylock_lock_info::FREE;
        // SAFETY: a live handle and records; `key` points to 1 byte.
        unsafe {
            assert_eq!(keylock_semaphore_permits(sem), 3);
            assert_eq!(
                keylock_semaphore_acquire(sem, key, 1, 2, &mut a),
                KEYLOCK_OK
            );
            // Not a pool's or a striped lock's fast record: the trait's Acquisition.
            assert_eq!((a._private_state, a.weight), (state::KEYED, 2));
            let r = keylock_semaphore_try_acquire(sem, key, 1, 2, &mut b);
            assert_eq!((r, b._private_state), (KEYLOCK_WOULD_BLOCK, state::EMPTY));
            assert_eq!(
                keylock_semaphore_try_acquire(sem, key, 1, 1, &mut b),
                KEYLOCK_OK
            );
            assert!(b.fence > a.fence);
            assert_eq!(keylock_semaphore_info(sem, key, 1, &mut info), KEYLOCK_OK);
            assert_eq!((info.held, info.units, info.holders), (true, 3, 2));
            let r = keylock_semaphore_try_acquire(sem, key, 1, 4, &mut c);
            assert_eq!(r, KEYLOCK_INVALID_ARGUMENT);
            // The release gives back exactly the record's units.
            assert_eq!(keylock_semaphore_release(sem, &mut a), KEYLOCK_OK);
            assert_eq!(keylock_semaphore_info(sem, key, 1, &mut info), KEYLOCK_OK);
            assert_eq!((info.units, info.holders), (1, 1));
            assert_eq!(keylock_semaphore_release(sem, &mut b), KEYLOCK_OK);
            assert_eq!(keylock_semaphore_info(sem, key, 1, &mut info), KEYLOCK_OK);
            assert!(!info.held);
            keylock_semaphore_free(sem);
        }
    }
}

//! `keylock_striped`: a fixed array of locks, each key hashed to one of them (keylock-core's
//! `StripedLock` in this process; any scope through `keylock_striped_open`). Each export is one
//! call into [`crate::keyed`].

use std::ffi::c_char;

use keylock_core::{LockOptions, Mode, Wait};

use crate::acquisition::keylock_acquisition;
use crate::boundary::*;
use crate::keyed::{self, Handle, Keyed};
use crate::metrics::keylock_metrics;
use crate::options::*;
use crate::result::*;
use crate::stats::keylock_stats;

/// A striped lock: a fixed number of locks ("stripes"), each key (a byte string) hashed to one.
/// The fastest per-key lock and fixed in size, at the price that two keys hashed to the same
/// stripe block each other. Every operation below is on the key's stripe: a thread must not
/// lock a second key while it holds one (the two may share a stripe and deadlock), but lock
/// several keys together with `keylock_striped_lock_many`. Stripes have the pool's modes,
/// fences, leases and owners: "the key" below means the key's stripe.
///
/// Create with `keylock_striped_new` or `keylock_striped_open`, destroy with
/// `keylock_striped_free`. Safe to use from many threads at once. Every acquire fills a
/// `keylock_acquisition`; release it with `keylock_striped_release` (from any thread).
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[derive(Debug)]
pub struct keylock_striped {
    keyed: Keyed,
}

impl Handle for keylock_striped {
    const STRIPED: bool = true;
    fn wrap(keyed: Keyed) -> Self {
        Self { keyed }
    }
    #[inline]
    fn keyed(&self) -> &Keyed {
        &self.keyed
    }
}

const TRY_EXCLUSIVE: LockOptions = LockOptions::new().wait(Wait::No);
const TRY_SHARED: LockOptions = LockOptions::new().shared().wait(Wait::No);

/// The most stripes `keylock_striped_new` accepts.
pub const KEYLOCK_MAX_STRIPES: usize = 1 << 20;

/// The stripes `keylock_striped_open` makes when `keylock_open_options.stripes` is 0.
pub const KEYLOCK_DEFAULT_STRIPES: usize = 1024;

/// Creates a striped lock in this process with `stripes` stripes, rounded up to a power of two
/// (as `keylock_striped_open("local:", ...)`). Each handle hashes keys with its own random seed.
/// A few times the number of threads is plenty; `KEYLOCK_DEFAULT_STRIPES` (1024) is a good
/// default.
///
/// Returns a handle that the caller owns and frees with `keylock_striped_free`, or NULL when
/// `stripes` is 0 or over `KEYLOCK_MAX_STRIPES` (or on an internal error).
#[unsafe(no_mangle)]
pub extern "C" fn keylock_striped_new(stripes: usize) -> *mut keylock_striped {
    if stripes == 0 {
        return std::ptr::null_mut();
    }
    keyed::new_local(Some(stripes))
}

/// Opens the striped lock that `name` names, with `options` (NULL: the defaults), and stores
/// its handle in `*out`. `name` picks the scope as for `keylock_pool_open`; `options->stripes`
/// is the number of stripes (0: `KEYLOCK_DEFAULT_STRIPES`). Reentrant and strict-FIFO striped
/// locks, and striped locks with metrics, are made here.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is a handle that the caller owns and frees with
///   `keylock_striped_free`.
/// - `KEYLOCK_INVALID_ARGUMENT`: an unknown or malformed name (or one that is not UTF-8), a
///   scope this build lacks, more than `KEYLOCK_MAX_STRIPES` stripes, or `capacity` /
///   `permissions` for a scope without them.
/// - `KEYLOCK_INCOMPATIBLE`, `KEYLOCK_PERMISSION_DENIED`, `KEYLOCK_UNAVAILABLE`,
///   `KEYLOCK_CAPACITY_EXCEEDED`: as `keylock_pool_open`.
/// - `KEYLOCK_NULL_ARGUMENT`: `name` or `out` is NULL.
/// - `KEYLOCK_PANIC`: internal error.
///
/// On any failure `*out` is set to NULL (when `out` is not NULL).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `options` is NULL or points to a readable
/// `keylock_open_options`; `out` is NULL or points to a writable `keylock_striped *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_open(
    name: *const c_char,
    options: *const keylock_open_options,
    out: *mut *mut keylock_striped,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe {
        keyed::open(name, options, out, |stripes| {
            Ok(Some(match stripes {
                0 => KEYLOCK_DEFAULT_STRIPES,
                n => n,
            }))
        })
    }
}

/// Frees `striped`. `keylock_striped_free(NULL)` does nothing.
///
/// No thread may use or wait on the lock during or after this call. Stripes still held are
/// simply dropped with it; their acquisition records must not be passed to keylock afterwards.
///
/// # Safety
/// `striped` is NULL or a handle from `keylock_striped_new` / `keylock_striped_open` not freed
/// before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_free(striped: *mut keylock_striped) {
    // SAFETY: forwarded from our caller.
    unsafe { ffi_boundary_free(striped) }
}

/// Locks `key` exclusively, waiting as long as it takes, and writes the acquisition to `*out`.
/// Keys are bytes: `key` points to `len` bytes, and NULL with `len == 0` is the empty key. The
/// key is copied; the caller keeps its buffer.
///
/// Locking a key whose stripe the caller already holds waits forever, unless the lock is
/// reentrant and the acquire names the holder's owner (`keylock_striped_lock_with`).
///
/// Returns:
/// - `KEYLOCK_OK`: held; `*out` is the acquisition, to release with `keylock_striped_release`.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` or `out` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_CAPACITY_EXCEEDED`, `KEYLOCK_UNAVAILABLE`: (shared scopes) the lock table is
///   full, or the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error.
///
/// On any failure nothing is held and `*out` is left empty (when `out` is not NULL).
///
/// # Safety
/// `striped` is NULL or a live handle; `key` is NULL or points to `len` readable bytes; `out` is
/// NULL or points to a writable `keylock_acquisition` that no other call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_lock(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_plain(striped, key, len, Mode::Exclusive, out) }
}

/// Locks `key` exclusively if it is free, without waiting. Arguments as `keylock_striped_lock`.
///
/// Returns what `keylock_striped_lock` returns, and:
/// - `KEYLOCK_WOULD_BLOCK`: the key is held (by anyone, the caller included), or others wait
///   for it; nothing is held and `*out` is empty.
///
/// # Safety
/// As `keylock_striped_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_try_lock(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire(striped, key, len, &TRY_EXCLUSIVE, out) }
}

/// Locks `key` exclusively, waiting at most `timeout_ns` nanoseconds. Arguments as
/// `keylock_striped_lock`; `timeout_ns` as `keylock_lock_options.timeout_ns`: `KEYLOCK_NO_WAIT`
/// (0) does not wait, `KEYLOCK_WAIT_FOREVER` (`UINT64_MAX`) waits as long as it takes.
///
/// Returns what `keylock_striped_lock` returns, and:
/// - `KEYLOCK_TIMEOUT`: the timeout passed first; nothing is held and `*out` is empty.
/// - `KEYLOCK_WOULD_BLOCK`: `timeout_ns` was 0 and the key is held.
///
/// # Safety
/// As `keylock_striped_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_lock_timeout(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
    timeout_ns: u64,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_timeout(striped, key, len, Mode::Exclusive, timeout_ns, out) }
}

/// Locks `key` in shared mode, together with any other shared holders, waiting as long as no
/// exclusive holder or earlier exclusive request is in the way (FIFO per key: a shared request
/// behind a waiting exclusive one waits for it). The acquisition's fence is the key's current
/// one. Arguments and results as `keylock_striped_lock`.
///
/// # Safety
/// As `keylock_striped_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_lock_shared(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_plain(striped, key, len, Mode::Shared, out) }
}

/// Locks `key` in shared mode if nothing is in the way, without waiting. Arguments and results
/// as `keylock_striped_try_lock`.
///
/// # Safety
/// As `keylock_striped_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_try_lock_shared(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire(striped, key, len, &TRY_SHARED, out) }
}

/// Locks `key` in shared mode, waiting at most `timeout_ns` nanoseconds. Arguments and results
/// as `keylock_striped_lock_timeout`.
///
/// # Safety
/// As `keylock_striped_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_lock_shared_timeout(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
    timeout_ns: u64,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_timeout(striped, key, len, Mode::Shared, timeout_ns, out) }
}

/// Locks `key` as `options` says: mode, lease, owner and how long to wait (NULL: exclusive,
/// no lease, no owner, wait forever). Other arguments as `keylock_striped_lock`.
///
/// Returns what `keylock_striped_lock` returns, and:
/// - `KEYLOCK_WOULD_BLOCK` / `KEYLOCK_TIMEOUT`: as `keylock_striped_lock_timeout`.
/// - `KEYLOCK_REENTRANCY_LIMIT`: a reentrant acquire by an owner that already holds the key
///   65536 times.
/// - `KEYLOCK_INVALID_ARGUMENT`: also an unknown `options->mode`.
///
/// # Safety
/// As `keylock_striped_lock`, and `options` is NULL or points to a readable
/// `keylock_lock_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_lock_with(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
    options: *const keylock_lock_options,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_with(striped, key, len, options, out) }
}

/// Locks `n` keys exclusively, all together, waiting as long as it takes: `keys[i]` points to
/// `lens[i]` bytes. The keys are taken in one global order, so two threads locking overlapping
/// sets in any order cannot deadlock. A key listed twice is locked once.
///
/// `out` has room for `n` records; the acquisitions go to `out[0..*count]`, one per distinct
/// stripe, in the order of the keys' first occurrence (keys that share a stripe get the one
/// record at the first of them), and the rest of `out` is left empty. Release them with
/// `keylock_striped_release_many(striped, out, *count)` (or one by one).
///
/// Returns:
/// - `KEYLOCK_OK`: every key is held.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped`, `keys`, `lens`, `out` or `count` is NULL, or some
///   `keys[i]` is NULL with `lens[i] > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `n == 0`, or a length over `PTRDIFF_MAX`.
/// - `KEYLOCK_CAPACITY_EXCEEDED`, `KEYLOCK_UNAVAILABLE`: as `keylock_striped_lock`.
/// - `KEYLOCK_PANIC`: internal error.
///
/// On any failure no key is held, every record of `out` is empty and `*count` is 0 (for the
/// pointers that are not NULL).
///
/// # Safety
/// `striped` is NULL or a live handle; `keys` and `lens` are NULL or point to `n` readable
/// elements, each `keys[i]` NULL or pointing to `lens[i]` readable bytes; `out` is NULL or
/// points to `n` writable records; `count` is NULL or points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_lock_many(
    striped: *mut keylock_striped,
    keys: *const *const u8,
    lens: *const usize,
    n: usize,
    out: *mut keylock_acquisition,
    count: *mut usize,
) -> keylock_result {
    let (modes, options) = (std::ptr::null(), std::ptr::null());
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_many(striped, keys, lens, modes, n, options, out, count) }
}

/// Like `keylock_striped_lock_many`, with a mode per key (`modes[i]` for `keys[i]`; NULL: every key
/// in `options->mode`) and `options` for the lease, owner and wait, which apply to every key
/// (NULL: no lease, no owner, wait forever). A key listed twice in different modes is held in
/// the stronger (exclusive). All or nothing: with a timeout, either every key is held or none.
///
/// Returns what `keylock_striped_lock_many` returns, and `KEYLOCK_WOULD_BLOCK` /
/// `KEYLOCK_TIMEOUT` / `KEYLOCK_REENTRANCY_LIMIT` as `keylock_striped_lock_with`, and
/// `KEYLOCK_INVALID_ARGUMENT` for an unknown mode.
///
/// # Safety
/// As `keylock_striped_lock_many`; `modes` is NULL or points to `n` readable elements, `options`
/// NULL or readable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // the C signature: arrays and their lengths
pub unsafe extern "C" fn keylock_striped_lock_many_with(
    striped: *mut keylock_striped,
    keys: *const *const u8,
    lens: *const usize,
    modes: *const keylock_mode,
    n: usize,
    options: *const keylock_lock_options,
    out: *mut keylock_acquisition,
    count: *mut usize,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_many(striped, keys, lens, modes, n, options, out, count) }
}

/// Releases the acquisition in `*acquisition`, and only it: if the key was force-unlocked or
/// the lease ran out meanwhile, whoever holds the key now keeps it. Any thread may release. The
/// record is marked released in every case but `KEYLOCK_NULL_ARGUMENT` and
/// `KEYLOCK_INVALID_ARGUMENT`, so that it cannot be released twice.
///
/// Returns:
/// - `KEYLOCK_OK`: released; the next waiter, if any, gets the key.
/// - `KEYLOCK_NOT_OWNER`: the acquisition was no longer current (force-unlocked), or the
///   record was released before; nothing changed.
/// - `KEYLOCK_LEASE_EXPIRED`: its lease had run out; nothing changed.
/// - `KEYLOCK_NOT_LOCKED`: the record is empty (never filled, or a failed acquire's output).
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` or `acquisition` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the record belongs to another lock object, or the struct is
///   not an acquisition record.
/// - `KEYLOCK_UNAVAILABLE`: (shared scopes) the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `striped` is NULL or a live handle; `acquisition` is NULL or points to a record that no other
/// call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_release(
    striped: *mut keylock_striped,
    acquisition: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::release(striped, acquisition) }
}

/// Releases `acquisitions[0..n]` (e.g. what `keylock_striped_lock_many` filled), each as
/// `keylock_striped_release` does; every one is released or refused, whatever the others give.
///
/// Returns `KEYLOCK_OK` when every release succeeded, else the first failure's code (as
/// `keylock_striped_release`); `KEYLOCK_INVALID_ARGUMENT` for `n == 0` or over `PTRDIFF_MAX`
/// bytes; `KEYLOCK_NULL_ARGUMENT` for a NULL `striped` or `acquisitions`.
///
/// # Safety
/// `striped` is NULL or a live handle; `acquisitions` is NULL or points to `n` records that no
/// other call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_release_many(
    striped: *mut keylock_striped,
    acquisitions: *mut keylock_acquisition,
    n: usize,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::release_many(striped, acquisitions, n) }
}

/// Moves the end of the lease of `*acquisition` to `lease_ns` nanoseconds from now (and updates
/// the record), while it is still current.
///
/// Returns:
/// - `KEYLOCK_OK`: extended.
/// - `KEYLOCK_LEASE_EXPIRED`: the lease had already run out; nothing changed.
/// - `KEYLOCK_NOT_OWNER`: force-unlocked, or the record was released.
/// - `KEYLOCK_NOT_LOCKED`: the record is empty.
/// - `KEYLOCK_INVALID_ARGUMENT`: the acquisition has no lease, belongs to another lock object,
///   or the struct is not an acquisition record.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` or `acquisition` is NULL.
/// - `KEYLOCK_UNAVAILABLE`: (shared scopes) the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// As `keylock_striped_release`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_extend(
    striped: *mut keylock_striped,
    acquisition: *mut keylock_acquisition,
    lease_ns: u64,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::extend(striped, acquisition, lease_ns) }
}

/// Stores in `*out` whether `*acquisition` is still the key's current acquisition: not
/// released, not force-unlocked, its lease (if any) not run out. An empty or released record
/// is not current.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped`, `acquisition` or `out` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the record belongs to another lock object, or the struct is
///   not an acquisition record.
/// - `KEYLOCK_UNAVAILABLE`: (shared scopes) the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `striped` is NULL or a live handle; `acquisition` is NULL or readable; `out` is NULL or points
/// to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_is_current(
    striped: *const keylock_striped,
    acquisition: *const keylock_acquisition,
    out: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::is_current(striped, acquisition, out) }
}

/// Frees `key` whoever holds it, in either mode, and advances its fence: for a lock left behind
/// by a holder that will never release it. The holders' records no longer release anything
/// (their releases report `KEYLOCK_NOT_OWNER`), and the next acquirer's fence is higher than
/// theirs. Stores in `*was_held` (unless it is NULL) whether the key was held.
///
/// Returns:
/// - `KEYLOCK_OK`: the key is free (or was).
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_UNAVAILABLE`: (shared scopes) the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `striped` is NULL or a live handle; `key` is NULL or points to `len` readable bytes; `was_held`
/// is NULL or points to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_force_unlock(
    striped: *mut keylock_striped,
    key: *const u8,
    len: usize,
    was_held: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::force_unlock(striped, key, len, was_held) }
}

/// Stores in `*out` whether `key` is held right now, in either mode (a snapshot, which other
/// threads may change at once; for tests and diagnostics, not for deciding whether to lock).
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` or `out` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_UNAVAILABLE`: (shared scopes) the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// As `keylock_striped_force_unlock`, with `out` not optional.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_is_locked(
    striped: *const keylock_striped,
    key: *const u8,
    len: usize,
    out: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::is_locked(striped, key, len, out) }
}

/// Stores in `*out` who holds `key` and how: fence, mode, holders, hold count, owner, lease
/// left and waiters (`out->held` is false, and every other field 0, when the key is free). A
/// snapshot, as `keylock_striped_is_locked`.
///
/// Returns what `keylock_striped_is_locked` returns.
///
/// # Safety
/// As `keylock_striped_is_locked`, with `out` pointing to a writable `keylock_lock_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_info(
    striped: *const keylock_striped,
    key: *const u8,
    len: usize,
    out: *mut keylock_lock_info,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::info(striped, key, len, out) }
}

/// Stores in `*out` the counts of the striped lock, the same fields at every scope (keys are
/// stripes): keys held, waiters queued, shared holds, this handle's own holds and waits, capacity and
/// entries in use (see `keylock_stats`). A figure the scope cannot tell, such as the holders of
/// other processes on a Redis scope, is `KEYLOCK_STATS_UNKNOWN`. A snapshot for monitoring and
/// tests: a scan of the object's keys or entries.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` or `out` is NULL.
/// - `KEYLOCK_UNAVAILABLE`: (shared-memory scopes) the region cannot be read from this process
///   (it was opened before `fork()`, or its table mutex failed); `*out` is unchanged.
/// - `KEYLOCK_INCOMPATIBLE`: (shared-memory scopes) the region's records are corrupt.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// `striped` is NULL or a live handle; `out` is NULL or points to a writable `keylock_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_stats(
    striped: *const keylock_striped,
    out: *mut keylock_stats,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::stats(striped, out) }
}

/// Stores in `*out` the metrics of the striped lock, a lock object opened with metrics
/// (`keylock_open_options.metrics`): its acquisitions, contended calls, timeouts, failed tries,
/// lease ends, losses and force-unlocks, and histograms of wait and hold times, totals since it
/// was opened (see `keylock_metrics`). A snapshot for monitoring and tests; it asks no server.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_INVALID_ARGUMENT`: `striped` was opened without metrics (or made by
///   `keylock_striped_new`, which has none); `*out` is unchanged.
/// - `KEYLOCK_NULL_ARGUMENT`: `striped` or `out` is NULL.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// `striped` is NULL or a live handle; `out` is NULL or points to a writable `keylock_metrics`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_striped_metrics(
    striped: *const keylock_striped,
    out: *mut keylock_metrics,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::metrics(striped, out) }
}

//! `keylock_pool`: one lock per distinct key, made on demand and recycled when released
//! (keylock-core's `KeyPool<KeyBuf>` in this process; any scope through `keylock_pool_open`).
//! Each export is one call into [`crate::keyed`].

use std::ffi::c_char;

use keylock_core::{LockOptions, Mode, Wait};

use crate::acquisition::keylock_acquisition;
use crate::boundary::*;
use crate::keyed::{self, Handle, Keyed};
use crate::metrics::keylock_metrics;
use crate::options::*;
use crate::result::*;
use crate::stats::keylock_stats;

/// A pool of per-key locks: each distinct key (a byte string) has its own lock, made when first
/// locked and recycled when released, so memory follows the number of keys held or awaited,
/// not the number of keys ever seen. Two different keys never block each other. Every key can
/// be held exclusively (one holder) or shared (many holders, no exclusive one).
///
/// Create with `keylock_pool_new` or `keylock_pool_open`, destroy with `keylock_pool_free`.
/// Safe to use from many threads at once. Every acquire fills a `keylock_acquisition`; release
/// it with `keylock_pool_release` (from any thread).
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[derive(Debug)]
pub struct keylock_pool {
    keyed: Keyed,
}

impl Handle for keylock_pool {
    const STRIPED: bool = false;
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

/// Creates an empty pool in this process (as `keylock_pool_open("local:", NULL, &pool)`).
///
/// Returns a handle that the caller owns and frees with `keylock_pool_free`, or NULL on an
/// internal error (`KEYLOCK_PANIC`'s case).
#[unsafe(no_mangle)]
pub extern "C" fn keylock_pool_new() -> *mut keylock_pool {
    keyed::new_local(None)
}

/// Opens the pool that `name` names, with `options` (NULL: the defaults), and stores its handle
/// in `*out`. `name` picks the scope: `"local:"` (or `""`) a new pool in this process;
/// `"shm:NAME"` a pool in shared memory, the same for every process that opens the name;
/// `"redis://HOST:PORT/DB"` a pool in Redis; `"postgres://USER:PASSWORD@HOST:PORT/DB"` a pool
/// in PostgreSQL. (The last three exist in builds with the library's `shm`, `redis` and
/// `postgres` features; others refuse them with `KEYLOCK_INVALID_ARGUMENT`.)
/// Reentrant and strict-FIFO pools, and pools with metrics, are made here
/// (`keylock_open_options`).
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is a handle that the caller owns and frees with `keylock_pool_free`.
/// - `KEYLOCK_INVALID_ARGUMENT`: an unknown or malformed name (or one that is not UTF-8), a
///   scope this build lacks, `options->stripes` not 0, or `capacity` / `permissions` for a
///   scope without them.
/// - `KEYLOCK_INCOMPATIBLE`, `KEYLOCK_PERMISSION_DENIED`, `KEYLOCK_UNAVAILABLE`,
///   `KEYLOCK_CAPACITY_EXCEEDED`: a shared scope's object is of another layout, not ours to
///   open, unreachable, or cannot be made that large.
/// - `KEYLOCK_NULL_ARGUMENT`: `name` or `out` is NULL.
/// - `KEYLOCK_PANIC`: internal error.
///
/// On any failure `*out` is set to NULL (when `out` is not NULL).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `options` is NULL or points to a readable
/// `keylock_open_options`; `out` is NULL or points to a writable `keylock_pool *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_open(
    name: *const c_char,
    options: *const keylock_open_options,
    out: *mut *mut keylock_pool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe {
        keyed::open(name, options, out, |stripes| match stripes {
            0 => Ok(None),
            _ => Err(Fail(crate::contract::KEYLOCK_INVALID_ARGUMENT)),
        })
    }
}

/// Frees `pool`. `keylock_pool_free(NULL)` does nothing.
///
/// No thread may use or wait on the pool during or after this call. Keys still held are simply
/// dropped with it; their acquisition records must not be passed to keylock afterwards.
///
/// # Safety
/// `pool` is NULL or a handle from `keylock_pool_new` / `keylock_pool_open` not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_free(pool: *mut keylock_pool) {
    // SAFETY: forwarded from our caller.
    unsafe { ffi_boundary_free(pool) }
}

/// Locks `key` exclusively, waiting as long as it takes, and writes the acquisition to `*out`.
/// Keys are bytes: `key` points to `len` bytes, and NULL with `len == 0` is the empty key. The
/// key is copied; the caller keeps its buffer.
///
/// Locking a key the caller already holds waits forever, unless the pool is reentrant and the
/// acquire names the holder's owner (`keylock_pool_lock_with`).
///
/// Returns:
/// - `KEYLOCK_OK`: held; `*out` is the acquisition, to release with `keylock_pool_release`.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` or `out` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_CAPACITY_EXCEEDED`, `KEYLOCK_UNAVAILABLE`: (shared scopes) the lock table is
///   full, or the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error.
///
/// On any failure nothing is held and `*out` is left empty (when `out` is not NULL).
///
/// # Safety
/// `pool` is NULL or a live handle; `key` is NULL or points to `len` readable bytes; `out` is
/// NULL or points to a writable `keylock_acquisition` that no other call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_lock(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_plain(pool, key, len, Mode::Exclusive, out) }
}

/// Locks `key` exclusively if it is free, without waiting. Arguments as `keylock_pool_lock`.
///
/// Returns what `keylock_pool_lock` returns, and:
/// - `KEYLOCK_WOULD_BLOCK`: the key is held (by anyone, the caller included), or others wait
///   for it; nothing is held and `*out` is empty.
///
/// # Safety
/// As `keylock_pool_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_try_lock(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire(pool, key, len, &TRY_EXCLUSIVE, out) }
}

/// Locks `key` exclusively, waiting at most `timeout_ns` nanoseconds. Arguments as
/// `keylock_pool_lock`; `timeout_ns` as `keylock_lock_options.timeout_ns`: `KEYLOCK_NO_WAIT`
/// (0) does not wait, `KEYLOCK_WAIT_FOREVER` (`UINT64_MAX`) waits as long as it takes.
///
/// Returns what `keylock_pool_lock` returns, and:
/// - `KEYLOCK_TIMEOUT`: the timeout passed first; nothing is held and `*out` is empty.
/// - `KEYLOCK_WOULD_BLOCK`: `timeout_ns` was 0 and the key is held.
///
/// # Safety
/// As `keylock_pool_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_lock_timeout(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
    timeout_ns: u64,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_timeout(pool, key, len, Mode::Exclusive, timeout_ns, out) }
}

/// Locks `key` in shared mode, together with any other shared holders, waiting as long as no
/// exclusive holder or earlier exclusive request is in the way (FIFO per key: a shared request
/// behind a waiting exclusive one waits for it). The acquisition's fence is the key's current
/// one. Arguments and results as `keylock_pool_lock`.
///
/// # Safety
/// As `keylock_pool_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_lock_shared(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_plain(pool, key, len, Mode::Shared, out) }
}

/// Locks `key` in shared mode if nothing is in the way, without waiting. Arguments and results
/// as `keylock_pool_try_lock`.
///
/// # Safety
/// As `keylock_pool_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_try_lock_shared(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire(pool, key, len, &TRY_SHARED, out) }
}

/// Locks `key` in shared mode, waiting at most `timeout_ns` nanoseconds. Arguments and results
/// as `keylock_pool_lock_timeout`.
///
/// # Safety
/// As `keylock_pool_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_lock_shared_timeout(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
    timeout_ns: u64,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_timeout(pool, key, len, Mode::Shared, timeout_ns, out) }
}

/// Locks `key` as `options` says: mode, lease, owner and how long to wait (NULL: exclusive,
/// no lease, no owner, wait forever). Other arguments as `keylock_pool_lock`.
///
/// Returns what `keylock_pool_lock` returns, and:
/// - `KEYLOCK_WOULD_BLOCK` / `KEYLOCK_TIMEOUT`: as `keylock_pool_lock_timeout`.
/// - `KEYLOCK_REENTRANCY_LIMIT`: a reentrant acquire by an owner that already holds the key
///   65536 times.
/// - `KEYLOCK_INVALID_ARGUMENT`: also an unknown `options->mode`.
///
/// # Safety
/// As `keylock_pool_lock`, and `options` is NULL or points to a readable
/// `keylock_lock_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_lock_with(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
    options: *const keylock_lock_options,
    out: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_with(pool, key, len, options, out) }
}

/// Locks `n` keys exclusively, all together, waiting as long as it takes: `keys[i]` points to
/// `lens[i]` bytes. The keys are taken in one global order, so two threads locking overlapping
/// sets in any order cannot deadlock. A key listed twice is locked once.
///
/// `out` has room for `n` records; the acquisitions go to `out[0..*count]`, one per distinct
/// key, in the order of the keys' first occurrence (with distinct keys, `out[i]` is `keys[i]`'s,
/// so its fence is that key's), and the rest of `out` is left empty. Release them with
/// `keylock_pool_release_many(pool, out, *count)` (or one by one).
///
/// Returns:
/// - `KEYLOCK_OK`: every key is held.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool`, `keys`, `lens`, `out` or `count` is NULL, or some
///   `keys[i]` is NULL with `lens[i] > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `n == 0`, or a length over `PTRDIFF_MAX`.
/// - `KEYLOCK_CAPACITY_EXCEEDED`, `KEYLOCK_UNAVAILABLE`: as `keylock_pool_lock`.
/// - `KEYLOCK_PANIC`: internal error.
///
/// On any failure no key is held, every record of `out` is empty and `*count` is 0 (for the
/// pointers that are not NULL).
///
/// # Safety
/// `pool` is NULL or a live handle; `keys` and `lens` are NULL or point to `n` readable
/// elements, each `keys[i]` NULL or pointing to `lens[i]` readable bytes; `out` is NULL or
/// points to `n` writable records; `count` is NULL or points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_lock_many(
    pool: *mut keylock_pool,
    keys: *const *const u8,
    lens: *const usize,
    n: usize,
    out: *mut keylock_acquisition,
    count: *mut usize,
) -> keylock_result {
    let (modes, options) = (std::ptr::null(), std::ptr::null());
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_many(pool, keys, lens, modes, n, options, out, count) }
}

/// Like `keylock_pool_lock_many`, with a mode per key (`modes[i]` for `keys[i]`; NULL: every key
/// in `options->mode`) and `options` for the lease, owner and wait, which apply to every key
/// (NULL: no lease, no owner, wait forever). A key listed twice in different modes is held in
/// the stronger (exclusive). All or nothing: with a timeout, either every key is held or none.
///
/// Returns what `keylock_pool_lock_many` returns, and `KEYLOCK_WOULD_BLOCK` /
/// `KEYLOCK_TIMEOUT` / `KEYLOCK_REENTRANCY_LIMIT` as `keylock_pool_lock_with`, and
/// `KEYLOCK_INVALID_ARGUMENT` for an unknown mode.
///
/// # Safety
/// As `keylock_pool_lock_many`; `modes` is NULL or points to `n` readable elements, `options`
/// NULL or readable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // the C signature: arrays and their lengths
pub unsafe extern "C" fn keylock_pool_lock_many_with(
    pool: *mut keylock_pool,
    keys: *const *const u8,
    lens: *const usize,
    modes: *const keylock_mode,
    n: usize,
    options: *const keylock_lock_options,
    out: *mut keylock_acquisition,
    count: *mut usize,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::acquire_many(pool, keys, lens, modes, n, options, out, count) }
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
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` or `acquisition` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the record belongs to another lock object, or the struct is
///   not an acquisition record.
/// - `KEYLOCK_UNAVAILABLE`: (shared scopes) the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `pool` is NULL or a live handle; `acquisition` is NULL or points to a record that no other
/// call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_release(
    pool: *mut keylock_pool,
    acquisition: *mut keylock_acquisition,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::release(pool, acquisition) }
}

/// Releases `acquisitions[0..n]` (e.g. what `keylock_pool_lock_many` filled), each as
/// `keylock_pool_release` does; every one is released or refused, whatever the others give.
///
/// Returns `KEYLOCK_OK` when every release succeeded, else the first failure's code (as
/// `keylock_pool_release`); `KEYLOCK_INVALID_ARGUMENT` for `n == 0` or over `PTRDIFF_MAX`
/// bytes; `KEYLOCK_NULL_ARGUMENT` for a NULL `pool` or `acquisitions`.
///
/// # Safety
/// `pool` is NULL or a live handle; `acquisitions` is NULL or points to `n` records that no
/// other call uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_release_many(
    pool: *mut keylock_pool,
    acquisitions: *mut keylock_acquisition,
    n: usize,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::release_many(pool, acquisitions, n) }
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
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` or `acquisition` is NULL.
/// - `KEYLOCK_UNAVAILABLE`: (shared scopes) the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// As `keylock_pool_release`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_extend(
    pool: *mut keylock_pool,
    acquisition: *mut keylock_acquisition,
    lease_ns: u64,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::extend(pool, acquisition, lease_ns) }
}

/// Stores in `*out` whether `*acquisition` is still the key's current acquisition: not
/// released, not force-unlocked, its lease (if any) not run out. An empty or released record
/// is not current.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool`, `acquisition` or `out` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the record belongs to another lock object, or the struct is
///   not an acquisition record.
/// - `KEYLOCK_UNAVAILABLE`: (shared scopes) the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `pool` is NULL or a live handle; `acquisition` is NULL or readable; `out` is NULL or points
/// to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_is_current(
    pool: *const keylock_pool,
    acquisition: *const keylock_acquisition,
    out: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::is_current(pool, acquisition, out) }
}

/// Frees `key` whoever holds it, in either mode, and advances its fence: for a lock left behind
/// by a holder that will never release it. The holders' records no longer release anything
/// (their releases report `KEYLOCK_NOT_OWNER`), and the next acquirer's fence is higher than
/// theirs. Stores in `*was_held` (unless it is NULL) whether the key was held.
///
/// Returns:
/// - `KEYLOCK_OK`: the key is free (or was).
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_UNAVAILABLE`: (shared scopes) the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `pool` is NULL or a live handle; `key` is NULL or points to `len` readable bytes; `was_held`
/// is NULL or points to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_force_unlock(
    pool: *mut keylock_pool,
    key: *const u8,
    len: usize,
    was_held: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::force_unlock(pool, key, len, was_held) }
}

/// Stores in `*out` whether `key` is held right now, in either mode (a snapshot, which other
/// threads may change at once; for tests and diagnostics, not for deciding whether to lock).
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` or `out` is NULL, or `key` is NULL with `len > 0`.
/// - `KEYLOCK_INVALID_ARGUMENT`: `len` is over `PTRDIFF_MAX`.
/// - `KEYLOCK_UNAVAILABLE`: (shared scopes) the scope could not be reached.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// As `keylock_pool_force_unlock`, with `out` not optional.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_is_locked(
    pool: *const keylock_pool,
    key: *const u8,
    len: usize,
    out: *mut bool,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::is_locked(pool, key, len, out) }
}

/// Stores in `*out` who holds `key` and how: fence, mode, holders, hold count, owner, lease
/// left and waiters (`out->held` is false, and every other field 0, when the key is free). A
/// snapshot, as `keylock_pool_is_locked`.
///
/// Returns what `keylock_pool_is_locked` returns.
///
/// # Safety
/// As `keylock_pool_is_locked`, with `out` pointing to a writable `keylock_lock_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_info(
    pool: *const keylock_pool,
    key: *const u8,
    len: usize,
    out: *mut keylock_lock_info,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::info(pool, key, len, out) }
}

/// Stores in `*out` the counts of the pool, the same fields at every scope:
/// keys held, waiters queued, shared holds, this handle's own holds and waits, capacity and
/// entries in use (see `keylock_stats`). A figure the scope cannot tell, such as the holders of
/// other processes on a Redis scope, is `KEYLOCK_STATS_UNKNOWN`. A snapshot for monitoring and
/// tests: a scan of the object's keys or entries.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` or `out` is NULL.
/// - `KEYLOCK_UNAVAILABLE`: (shared-memory scopes) the region cannot be read from this process
///   (it was opened before `fork()`, or its table mutex failed); `*out` is unchanged.
/// - `KEYLOCK_INCOMPATIBLE`: (shared-memory scopes) the region's records are corrupt.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// `pool` is NULL or a live handle; `out` is NULL or points to a writable `keylock_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_stats(
    pool: *const keylock_pool,
    out: *mut keylock_stats,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::stats(pool, out) }
}

/// Stores in `*out` the metrics of the pool, a lock object opened with metrics
/// (`keylock_open_options.metrics`): its acquisitions, contended calls, timeouts, failed tries,
/// lease ends, losses and force-unlocks, and histograms of wait and hold times, totals since it
/// was opened (see `keylock_metrics`). A snapshot for monitoring and tests; it asks no server.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out` is set.
/// - `KEYLOCK_INVALID_ARGUMENT`: `pool` was opened without metrics (or made by
///   `keylock_pool_new`, which has none); `*out` is unchanged.
/// - `KEYLOCK_NULL_ARGUMENT`: `pool` or `out` is NULL.
/// - `KEYLOCK_PANIC`: internal error; `*out` is unchanged.
///
/// # Safety
/// `pool` is NULL or a live handle; `out` is NULL or points to a writable `keylock_metrics`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_pool_metrics(
    pool: *const keylock_pool,
    out: *mut keylock_metrics,
) -> keylock_result {
    // SAFETY: forwarded from our caller.
    unsafe { keyed::metrics(pool, out) }
}

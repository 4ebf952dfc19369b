//! What an acquire and an open take beyond the key, and what `_info` reports: plain structs in
//! caller memory (`keylock_lock_options`, `keylock_open_options`, `keylock_lock_info`), and
//! their translation into keylock-core's `LockOptions`, `OpenOptions` and `LockInfo`.
//!
//! Nothing here decides anything about locking: each field maps to one core field.

use std::time::Duration;

use keylock_core::{LockInfo, LockOptions, Mode, OpenOptions, Owner, Wait};

use crate::contract::*;
use crate::result::Fail;
// The type and its KEYLOCK_EXCLUSIVE / KEYLOCK_SHARED values are generated into `contract.rs`
// from keylock-core's `Mode` (`make header`).
pub use crate::contract::keylock_mode;

/// `timeout_ns` value: wait as long as it takes.
pub const KEYLOCK_WAIT_FOREVER: u64 = u64::MAX;

/// `timeout_ns` value: do not wait; a held key is `KEYLOCK_WOULD_BLOCK`.
pub const KEYLOCK_NO_WAIT: u64 = 0;

/// `lease_remaining_ns` value (`keylock_lock_info`, `keylock_acquisition_lease_remaining`): no
/// lease.
pub const KEYLOCK_NO_LEASE: u64 = u64::MAX;

/// What an acquire asks for beyond the key. Start from `KEYLOCK_LOCK_OPTIONS_INIT` (exclusive,
/// no lease, no owner, wait forever) and change the fields you need, e.g.
/// `keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT; o.mode = KEYLOCK_SHARED;`.
///
/// Note that an all-zero struct means "do not wait" (`timeout_ns == KEYLOCK_NO_WAIT`): a try.
/// The library only reads the struct during the call.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct keylock_lock_options {
    /// `KEYLOCK_EXCLUSIVE` or `KEYLOCK_SHARED`. Ignored by the `_many` calls, whose `modes`
    /// array gives one mode per key.
    pub mode: keylock_mode,
    /// A lease in nanoseconds, 0 for none. When it runs out the acquisition ends by itself: the
    /// key is free for the next acquirer (whose fence is higher) and the holder's release
    /// reports `KEYLOCK_LEASE_EXPIRED`. Any value is safe.
    pub lease_ns: u64,
    /// The owner, for a reentrant lock object (`keylock_open_options.reentrant`): an exclusive
    /// acquire by the owner that holds the key exclusively succeeds at once, keeps the fence and
    /// raises the hold count. 0 means no owner. Ignored by lock objects that are not reentrant.
    pub owner: u64,
    /// How long to wait, in nanoseconds: `KEYLOCK_WAIT_FOREVER` (`UINT64_MAX`) waits as long as
    /// it takes; `KEYLOCK_NO_WAIT` (0) does not wait (`KEYLOCK_WOULD_BLOCK` if held); any other
    /// value waits at most that long (`KEYLOCK_TIMEOUT` when it runs out).
    pub timeout_ns: u64,
}

impl keylock_lock_options {
    /// `KEYLOCK_LOCK_OPTIONS_INIT`: exclusive, no lease, no owner, wait forever (the header's
    /// macro; a test checks that the two agree).
    #[cfg(test)]
    pub(crate) const INIT: Self = Self {
        mode: KEYLOCK_EXCLUSIVE,
        lease_ns: 0,
        owner: 0,
        timeout_ns: KEYLOCK_WAIT_FOREVER,
    };

    /// The core's options for these. `KEYLOCK_INVALID_ARGUMENT` for an unknown mode.
    #[inline]
    pub(crate) fn to_core(self) -> Result<LockOptions, Fail> {
        let mut opts = LockOptions::new()
            .mode(mode_of(self.mode)?)
            .wait(wait_of(self.timeout_ns));
        if self.lease_ns != 0 {
            opts = opts.lease(Duration::from_nanos(self.lease_ns));
        }
        if let Some(owner) = Owner::new(self.owner) {
            opts = opts.owner(owner);
        }
        Ok(opts)
    }
}

/// The core's mode for a `keylock_mode`.
#[inline]
pub(crate) fn mode_of(mode: keylock_mode) -> Result<Mode, Fail> {
    match mode {
        KEYLOCK_EXCLUSIVE => Ok(Mode::Exclusive),
        KEYLOCK_SHARED => Ok(Mode::Shared),
        _ => Err(Fail(KEYLOCK_INVALID_ARGUMENT)),
    }
}

/// The `keylock_mode` of a core mode.
#[inline]
pub(crate) fn mode_code(mode: Mode) -> keylock_mode {
    match mode {
        Mode::Exclusive => KEYLOCK_EXCLUSIVE,
        Mode::Shared => KEYLOCK_SHARED,
    }
}

/// The core's wait for a `timeout_ns` (see `keylock_lock_options.timeout_ns`).
#[inline]
pub(crate) fn wait_of(timeout_ns: u64) -> Wait {
    match timeout_ns {
        KEYLOCK_NO_WAIT => Wait::No,
        KEYLOCK_WAIT_FOREVER => Wait::Forever,
        ns => Wait::For(Duration::from_nanos(ns)),
    }
}

/// Nanoseconds of a duration, saturated below `KEYLOCK_NO_LEASE` so that a real figure never
/// reads as "no lease".
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).map_or(KEYLOCK_NO_LEASE - 1, |ns| ns.min(KEYLOCK_NO_LEASE - 1))
}

/// How `keylock_pool_open`, `keylock_striped_open` and `keylock_semaphore_open` make a lock
/// object. Zero-initialise it (`keylock_open_options o = {0};`) for the defaults, or pass NULL.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct keylock_open_options {
    /// `keylock_striped_open`: the number of stripes, rounded up to a power of two (0: 1024).
    /// `keylock_pool_open`: must be 0.
    pub stripes: usize,
    /// Scopes of fixed size (shared memory): the most keys held or awaited at once (0: the
    /// scope's default). Must be 0 for `local:`.
    pub capacity: usize,
    /// Scopes that create a file (shared memory): its permission bits, e.g. 0600 (0: the
    /// scope's default). Must be 0 for `local:`.
    pub permissions: u32,
    /// Reentrant: exclusive acquires by the owner that holds the key raise a hold count (see
    /// `keylock_lock_options.owner`), up to 65536 holds, past which an acquire fails with
    /// `KEYLOCK_REENTRANCY_LIMIT`.
    pub reentrant: bool,
    /// Strict FIFO per key: every release hands the lock to the longest waiter (the Web Locks
    /// order). The default lets a running thread take a just-released lock first, which is
    /// faster, and still hands it to a waiter that has waited 0.5 ms (at most once per 0.5 ms
    /// per key).
    pub fifo: bool,
    /// Metrics: the object counts its acquisitions, waits, timeouts, failed tries, lease ends,
    /// losses and force-unlocks, with histograms of wait and hold times, which
    /// `keylock_pool_metrics` (`_striped_`, `_semaphore_`) read (see `keylock_metrics`). Off
    /// by default, and then free; on, every acquire and release of the object pays for a
    /// clock read or two and a few atomic additions, and the in-process fast paths are not
    /// taken. (The last field, so that the others kept their offsets when it was added; it sits
    /// in what was padding, so the struct kept its size too.)
    pub metrics: bool,
}

// The ABI: `metrics` took the padding after `fifo`, so every other field kept its offset and the
// struct its size (24 bytes on 64-bit targets). The C test checks the size from C.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<keylock_open_options>() == 24);
    assert!(std::mem::offset_of!(keylock_open_options, permissions) == 16);
    assert!(std::mem::offset_of!(keylock_open_options, reentrant) == 20);
    assert!(std::mem::offset_of!(keylock_open_options, fifo) == 21);
    assert!(std::mem::offset_of!(keylock_open_options, metrics) == 22);
};

impl keylock_open_options {
    /// The core's options for these; `stripes` is the caller's, already checked.
    pub(crate) fn to_core(self, stripes: Option<usize>) -> OpenOptions {
        let mut opts = OpenOptions::default();
        opts.stripes = stripes;
        opts.reentrant = self.reentrant;
        opts.fifo = self.fifo;
        opts.metrics = self.metrics;
        opts.capacity = (self.capacity != 0).then_some(self.capacity);
        opts.mode = (self.permissions != 0).then_some(self.permissions);
        opts
    }
}

/// Who holds a key and how: what `keylock_pool_info`, `keylock_striped_info` and
/// `keylock_semaphore_info` report. A snapshot, which other threads may change at once; for
/// diagnostics and tests.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct keylock_lock_info {
    /// The current fence: the exclusive holder's, or the one shared holders read.
    pub fence: u64,
    /// The exclusive holder's owner, 0 for none.
    pub owner: u64,
    /// Nanoseconds left on the earliest lease among the holders; `KEYLOCK_NO_LEASE` when no
    /// holder has a lease.
    pub lease_remaining_ns: u64,
    /// Requests waiting for the key.
    pub waiters: usize,
    /// How the key is held.
    pub mode: keylock_mode,
    /// Holders now: 1 for an exclusive holder, the count of shared ones (of a semaphore: the
    /// acquisitions holding units).
    pub holders: u32,
    /// The exclusive holder's hold count (above 1 only for reentrant acquisitions).
    pub holds: u32,
    /// Whether the key is held at all; when false, every other field is 0.
    pub held: bool,
    /// Units held now: of a semaphore, the sum of its holders' weights (at most its permits);
    /// of a lock, the same as `holders`. (The last field, so that the others kept their
    /// offsets when it was added.)
    pub units: u32,
}

impl keylock_lock_info {
    /// A free key's info.
    pub(crate) const FREE: Self = Self {
        fence: 0,
        owner: 0,
        lease_remaining_ns: 0,
        waiters: 0,
        mode: KEYLOCK_EXCLUSIVE,
        holders: 0,
        holds: 0,
        held: false,
        units: 0,
    };

    pub(crate) fn of(info: Option<LockInfo>) -> Self {
        let Some(info) = info else {
            return Self::FREE;
        };
        Self {
            fence: info.fence,
            owner: info.owner.map_or(0, Owner::get),
            lease_remaining_ns: info.lease_remaining.map_or(KEYLOCK_NO_LEASE, nanos),
            waiters: info.waiters,
            mode: mode_code(info.mode),
            holders: info.holders,
            holds: info.holds,
            held: true,
            units: info.units,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_translate_field_by_field() {
        let o = keylock_lock_options::INIT.to_core().unwrap();
        assert_eq!(o, LockOptions::new());
        let o = keylock_lock_options {
            mode: KEYLOCK_SHARED,
            lease_ns: 5,
            owner: 9,
            timeout_ns: 7,
        }
        .to_core()
        .unwrap();
        let want = LockOptions::new()
            .shared()
            .lease(Duration::from_nanos(5))
            .owner(Owner::new(9).unwrap())
            .wait(Wait::For(Duration::from_nanos(7)));
        assert_eq!(o, want);
        let bad = keylock_lock_options {
            mode: 2,
            ..keylock_lock_options::INIT
        };
        assert_eq!(bad.to_core(), Err(Fail(KEYLOCK_INVALID_ARGUMENT)));
        assert_eq!(wait_of(0), Wait::No);
        assert_eq!(wait_of(u64::MAX), Wait::Forever);
    }

    #[test]
    fn mode_numbers_are_the_core_repr() {
        assert_eq!(KEYLOCK_EXCLUSIVE, Mode::Exclusive as u32);
        assert_eq!(KEYLOCK_SHARED, Mode::Shared as u32);
        for m in [Mode::Exclusive, Mode::Shared] {
            assert_eq!(mode_of(mode_code(m)), Ok(m));
        }
    }

    #[test]
    fn durations_never_read_as_no_lease() {
        assert_eq!(nanos(Duration::from_nanos(3)), 3);
        assert_eq!(nanos(Duration::MAX), KEYLOCK_NO_LEASE - 1);
    }
}

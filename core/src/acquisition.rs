//! The record of one acquisition, and the options an acquire takes.
//!
//! Every acquire in keylock, whatever the primitive or the scope, produces one [`Acquisition`]:
//! its **fence** (a `u64` that rises each time the lock passes to a new exclusive holder, and
//! doubles as the acquisition's identity), its [`Mode`], its lease deadline, its [`Owner`] and
//! where the lock lives. Guards, handles and the C ABI carry this record rather than the key, so
//! a release can only ever release the acquisition it was given: a stale guard whose
//! acquisition was force-unlocked, or whose lease ran out, finds a different fence in the lock
//! and is refused ([`Error::NotOwner`](crate::Error::NotOwner) /
//! [`Error::LeaseExpired`](crate::Error::LeaseExpired)).

use std::fmt;
use std::time::{Duration, Instant};

/// How an acquisition holds its key: alone, or together with other shared holders.
///
/// ```
/// use keylock_core::{KeyPool, Mode};
/// let pool: KeyPool<String> = KeyPool::new();
/// let a = pool.lock_shared("doc");
/// let b = pool.lock_shared("doc");     // shared holders overlap
/// assert_eq!((a.mode(), b.mode()), (Mode::Shared, Mode::Shared));
/// assert!(pool.try_lock("doc").is_err()); // an exclusive holder waits for both
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum Mode {
    /// One holder at a time (a writer).
    #[default]
    Exclusive = 0,
    /// Any number of holders at once, excluding exclusive holders (readers).
    Shared = 1,
}

impl Mode {
    /// `"exclusive"` or `"shared"`, the names the Web Locks API uses.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who holds a lock, for reentrant locks: a number the caller chooses (a thread id, a task id,
/// a request id), as Hazelcast clients pass a lock context.
///
/// In a lock object made reentrant, an exclusive acquire by the owner that already holds the key
/// exclusively succeeds at once, keeps the holder's fence and raises its hold count; the key is
/// free again once the owner has released as many times as it acquired.
///
/// ```
/// use keylock_core::{KeyPool, LockOptions, Owner};
/// let pool: KeyPool<u64> = KeyPool::builder().reentrant(true).build();
/// let me = Owner::new(7).unwrap();
/// let outer = pool.lock_with(&1, LockOptions::new().owner(me)).unwrap();
/// let inner = pool.lock_with(&1, LockOptions::new().owner(me)).unwrap();
/// assert_eq!(outer.fence(), inner.fence());
/// assert_eq!(pool.info(&1).unwrap().holds, 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner(std::num::NonZeroU64);

impl Owner {
    /// The owner numbered `id`; `None` for 0, which means "no owner" in the C ABI.
    pub const fn new(id: u64) -> Option<Self> {
        match std::num::NonZeroU64::new(id) {
            Some(id) => Some(Self(id)),
            None => None,
        }
    }

    /// The owner's number.
    pub const fn get(self) -> u64 {
        self.0.get()
    }
}

/// How long an acquire may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Until the lock is acquired.
    #[default]
    Forever,
    /// Not at all: the lock is taken now or the call fails with `WouldBlock`.
    No,
    /// At most this long, then `TimedOut`.
    For(Duration),
    /// Until this instant, then `TimedOut`.
    Until(Instant),
}

impl Wait {
    /// The instant after which waiting stops; `None` for no limit (or a limit too far away for
    /// `Instant` to represent), and "now" for [`Wait::No`].
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Forever => None,
            Wait::No => Some(Instant::now()),
            Wait::For(d) => Instant::now().checked_add(d),
            Wait::Until(t) => Some(t),
        }
    }

    /// The error for an acquire that did not get the lock in time.
    pub(crate) fn failure(self) -> crate::Error {
        match self {
            Wait::No => crate::Error::WouldBlock,
            _ => crate::Error::TimedOut,
        }
    }
}

/// What an acquire asks for beyond the key: mode, lease, owner and how long to wait.
///
/// The builder methods take and return the options by value, so a call reads
/// `LockOptions::new().shared().lease(Duration::from_secs(30))`.
///
/// ```
/// use std::time::Duration;
/// use keylock_core::{KeyPool, LockOptions, Mode, Wait};
/// let pool: KeyPool<String> = KeyPool::new();
/// let opts = LockOptions::new().lease(Duration::from_secs(30)).wait(Wait::For(Duration::from_millis(50)));
/// let guard = pool.lock_with("job:9", opts).unwrap();
/// assert!(guard.lease_remaining().unwrap() <= Duration::from_secs(30));
/// assert_eq!(guard.mode(), Mode::Exclusive);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockOptions {
    /// Shared or exclusive (default exclusive).
    pub mode: Mode,
    /// A lease: after this long the acquisition ends by itself and the key is free for the next
    /// acquirer, whose fence is higher.
    pub lease: Option<Duration>,
    /// The owner, for reentrant lock objects (ignored by others).
    pub owner: Option<Owner>,
    /// How long to wait (default: until acquired).
    pub wait: Wait,
    /// The units of a [`KeyedSemaphore`](crate::KeyedSemaphore) to take (default 1). A lock
    /// object that is not a semaphore takes only 1; a semaphore refuses 0 and more than its
    /// permits with `InvalidArgument`.
    pub weight: u32,
}

impl LockOptions {
    /// Exclusive, no lease, no owner, wait until acquired.
    pub const fn new() -> Self {
        Self {
            mode: Mode::Exclusive,
            lease: None,
            owner: None,
            wait: Wait::Forever,
            weight: 1,
        }
    }

    /// Sets the mode.
    pub const fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Shared mode.
    pub const fn shared(self) -> Self {
        self.mode(Mode::Shared)
    }

    /// Sets a lease.
    pub const fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Sets the owner.
    pub const fn owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Sets how long to wait.
    pub const fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// Sets the units of a semaphore to take.
    pub const fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// `InvalidArgument` unless the weight is 1: a lock scope's check (a semaphore scope takes
    /// any weight its permits allow).
    #[cfg_attr(not(any(feature = "shm", feature = "redis")), allow(dead_code))]
    pub(crate) fn check_lock_weight(&self) -> crate::Result<()> {
        if self.weight == 1 {
            Ok(())
        } else {
            Err(crate::Error::InvalidArgument(
                "a lock's acquisition has weight 1; only a semaphore takes more units",
            ))
        }
    }

    /// The part of the options a queued waiter carries.
    pub(crate) fn want(&self) -> Want {
        Want {
            mode: self.mode,
            lease: self.lease,
            owner: self.owner,
            units: self.weight,
        }
    }
}

/// What a waiter asks of the lock it waits for (the options less the wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Want {
    pub(crate) mode: Mode,
    pub(crate) lease: Option<Duration>,
    pub(crate) owner: Option<Owner>,
    /// The units a semaphore's acquire takes; 0 for a lock's. (`LockOptions` gives the weight
    /// asked for; the lock object's policy turns it into units, or into a value it refuses.)
    pub(crate) units: u32,
}

impl Want {
    pub(crate) const EXCLUSIVE: Want = Want::of_mode(Mode::Exclusive);
    pub(crate) const SHARED: Want = Want::of_mode(Mode::Shared);

    /// A plain request in `mode`: no lease, no owner, no units.
    #[inline]
    pub(crate) const fn of_mode(mode: Mode) -> Want {
        Want {
            mode,
            lease: None,
            owner: None,
            units: 0,
        }
    }

    /// Whether a semaphore's acquire of `units` needs nothing kept beside the lock word (no
    /// lease), so that its fast path may take it.
    #[inline]
    pub(crate) fn is_plain_units(&self) -> bool {
        self.units != 0 && self.lease.is_none()
    }

    /// Whether nothing about the holder must be kept beside the lock word, so that the fast
    /// path may take it: a lock's acquire with no lease, and no owner of an exclusive hold (a
    /// shared request's owner matters only when that owner holds the key exclusively, which
    /// the fast path cannot see as anything but taken).
    #[inline]
    pub(crate) fn is_plain(&self) -> bool {
        self.lease.is_none()
            && (self.owner.is_none() || self.mode == Mode::Shared)
            && self.units == 0
    }
}

/// One acquisition: what a release, an extend or a check of it needs, and nothing about the
/// key itself.
///
/// Guards carry one; [`PoolGuard::into_acquisition`](crate::PoolGuard::into_acquisition) hands it
/// out for callers that cannot keep a guard, and `release(acquisition)` on the lock object ends
/// it later. A release after it was force-unlocked or its lease ran out is refused and never
/// touches a later holder.
///
/// A record is one hold: it is neither `Copy` nor `Clone`, and releasing it consumes it, so it
/// cannot be released twice. (Shared holders of a key are counted, not named; a second release
/// of a copied record would count another holder out.)
///
/// ```
/// use keylock_core::{Error, KeyPool};
/// let pool: KeyPool<String> = KeyPool::new();
/// let acq = pool.lock("row:1").into_acquisition();
/// assert!(pool.force_unlock("row:1"));          // somebody frees it by force...
/// let next = pool.lock("row:1");                // ...and the next holder gets a higher fence
/// assert!(next.fence() > acq.fence());
/// assert_eq!(pool.release(acq), Err(Error::NotOwner)); // the stale release is refused
/// assert!(pool.is_locked("row:1"));
/// ```
// `repr(C)`, in this order: the fields a plain acquisition leaves zero (ticket, owner; units,
// mode, owner died) in two runs that start on 8-byte boundaries. In Rust's own order they were
// one run of 22 bytes, which the compiler writes as 16 bytes and an overlapping 8, and the
// release's 8-byte read of `owner` then straddled the two stores: the processor cannot forward
// such a read from its store buffer and waits for both stores to reach the cache (about 4 of the
// C striped lock+release's 18 ns).
#[derive(PartialEq, Eq)]
#[repr(C)]
pub struct Acquisition {
    pub(crate) fence: u64,
    /// A leased shared acquisition's ticket among the key's shared holders (0 otherwise).
    pub(crate) ticket: u64,
    pub(crate) owner: Option<Owner>,
    /// Where the lock is, in the terms of the lock object that made it (stripe number, or
    /// shard and slot).
    pub(crate) at: u64,
    /// The units of a semaphore this acquisition holds (0 for a lock's).
    pub(crate) units: u32,
    pub(crate) mode: Mode,
    pub(crate) owner_died: bool,
    pub(crate) lease_until: Option<Instant>,
    /// When the hold started, kept by a lock object with metrics ([`crate::Metered`]) for the
    /// hold-time histogram; `None` everywhere else (a scope never sees it set).
    pub(crate) metered_since: Option<Instant>,
}

impl Acquisition {
    /// The fencing token: strictly greater than the fence of every earlier exclusive
    /// acquisition of the same key (or stripe, or RwLock writer) in the same lock object.
    /// Shared holders read the fence of the last exclusive acquisition (or force-unlock).
    #[inline]
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Shared or exclusive.
    #[inline]
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The owner given at acquire time, if any.
    #[inline]
    pub fn owner(&self) -> Option<Owner> {
        self.owner
    }

    /// When the lease ends, if the acquisition has one (as last extended through this record).
    #[inline]
    pub fn lease_deadline(&self) -> Option<Instant> {
        self.lease_until
    }

    /// The units of a [`KeyedSemaphore`](crate::KeyedSemaphore) that the acquisition holds;
    /// 1 for a lock's acquisition.
    #[inline]
    pub fn weight(&self) -> u32 {
        self.units.max(1)
    }

    /// Whether the previous holder died holding the lock (cross-process scopes only; always
    /// `false` in one process). The data it protected may be half-changed.
    #[inline]
    pub fn owner_died(&self) -> bool {
        self.owner_died
    }

    /// The record of a plain hold (no lease, no owner, no ticket).
    #[inline]
    pub(crate) fn plain(fence: u64, at: u64, mode: Mode) -> Self {
        Self {
            fence,
            at,
            ticket: 0,
            owner: None,
            lease_until: None,
            mode,
            owner_died: false,
            units: 0,
            metered_since: None,
        }
    }

    /// Whether the record is of a plain hold, so the fast path may release it.
    #[inline]
    pub(crate) fn is_plain(&self) -> bool {
        self.keeps_nothing_else() && self.units == 0
    }

    /// A semaphore's hold of units with nothing kept beside the lock word (no lease, no owner):
    /// what the one compare-and-swap of a sole holder may release.
    #[inline]
    pub(crate) fn is_plain_permit(&self) -> bool {
        self.keeps_nothing_else() && self.units != 0
    }

    /// Whether nothing of the hold is kept beside the lock word: no ticket, owner or lease.
    #[inline]
    fn keeps_nothing_else(&self) -> bool {
        self.ticket == 0 && self.owner.is_none() && self.lease_until.is_none()
    }

    /// A copy for internal checks that never release it (the record itself is one hold).
    pub(crate) fn duplicate(&self) -> Acquisition {
        Acquisition { ..*self }
    }

    /// The error for a release or extend of this acquisition that found it no longer current.
    pub(crate) fn stale_error(&self) -> crate::Error {
        match self.lease_until {
            Some(t) if Instant::now() >= t => crate::Error::LeaseExpired,
            _ => crate::Error::NotOwner,
        }
    }
}

impl fmt::Debug for Acquisition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquisition")
            .field("fence", &self.fence)
            .field("mode", &self.mode)
            .field("owner", &self.owner.map(Owner::get))
            .field("lease_deadline", &self.lease_until)
            .field("owner_died", &self.owner_died)
            .field("weight", &self.weight())
            .finish_non_exhaustive()
    }
}

/// What [`KeyPool::info`](crate::KeyPool::info) and [`StripedLock::info`](crate::StripedLock::info)
/// report about a held key: a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The current fence: the exclusive holder's, or for shared holders the one they read.
    pub fence: u64,
    /// How the key is held.
    pub mode: Mode,
    /// Shared holders now (1 for an exclusive holder).
    pub holders: u32,
    /// The exclusive holder's hold count (above 1 only for reentrant acquisitions).
    pub holds: u32,
    /// The exclusive holder's owner, if it gave one.
    pub owner: Option<Owner>,
    /// Time left on the earliest lease among the holders, if any holder has one.
    pub lease_remaining: Option<Duration>,
    /// Waiters queued for the key.
    pub waiters: usize,
    /// Units of a semaphore held now (the sum of its holders' weights); for a lock, the same
    /// as `holders`.
    pub units: u32,
}

//! Guards of held keys: each carries its acquisition and releases only that.

use std::fmt;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::shard::Slot;
use super::{PoolRef, SlotRef};
use crate::acquisition::{Acquisition, Mode, Want};
use crate::entry::{Hold, HoldRec, lease_end};
use crate::error::{Error, Result};
use crate::site;
use crate::wait::Grant;

/// The record of one key's acquisition.
fn acquisition(at: SlotRef, hold: &Hold, lease_until: Option<Instant>) -> Acquisition {
    Acquisition {
        fence: hold.fence,
        at: at.to_u64(),
        ticket: hold.ticket,
        owner: hold.owner,
        lease_until,
        mode: hold.mode,
        owner_died: false,
    }
}

/// A held key; released on drop. `Send`: it may be released from another thread.
///
/// The guard releases only its own acquisition: after a [`KeyPool::force_unlock`] or the end of
/// its lease it releases nothing, and [`release`](Self::release) says why.
///
/// [`KeyPool::force_unlock`]: crate::KeyPool::force_unlock
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<String> = KeyPool::new();
/// let guard = pool.lock("row-9");
/// std::thread::scope(|s| {
///     s.spawn(move || drop(guard)); // released on another thread
/// });
/// assert!(!pool.is_locked("row-9"));
///
/// let acq = pool.lock("row-9").into_acquisition(); // keep it held without a guard...
/// pool.release(acq).unwrap();                      // ...and release exactly that later
/// ```
#[must_use = "the key is released as soon as the guard is dropped"]
pub struct PoolGuard<P: PoolRef> {
    pool: Option<P>,
    /// The key's slot: slots never move, and the guard keeps the pool (and so the slot) alive.
    slot: NonNull<Slot<P::Key>>,
    rec: HoldRec,
}

// SAFETY: the guard owns a pool handle and points into that pool's slots, which are shared
// between threads exactly as `&KeyPool` shares them (see `Shard`'s impls).
unsafe impl<P: PoolRef + Send> Send for PoolGuard<P> where P::Key: Send + Sync {}
// SAFETY: `&PoolGuard` only reads the slot's atomic word (`is_current`) or locks its shard.
unsafe impl<P: PoolRef + Sync> Sync for PoolGuard<P> where P::Key: Send + Sync {}

impl<P: PoolRef> PoolGuard<P> {
    #[inline]
    pub(super) fn new(pool: P, slot: &Slot<P::Key>, want: Want, grant: Grant) -> Self {
        Self::from_ptr(pool, NonNull::from(slot), want, grant)
    }

    #[inline]
    pub(super) fn from_ptr(pool: P, slot: NonNull<Slot<P::Key>>, want: Want, grant: Grant) -> Self {
        Self {
            pool: Some(pool),
            slot,
            rec: HoldRec::of(&want, grant),
        }
    }

    #[inline]
    pub(super) fn plain(pool: P, slot: &Slot<P::Key>, mode: Mode, fence: u64) -> Self {
        Self {
            pool: Some(pool),
            slot: NonNull::from(slot),
            rec: HoldRec::plain(mode, fence),
        }
    }

    /// The slot.
    #[inline]
    fn slot(&self) -> &Slot<P::Key> {
        // SAFETY: the slot belongs to the pool this guard holds (`pool` is Some whenever this
        // is called), and slots live as long as their pool.
        unsafe { self.slot.as_ref() }
    }

    #[inline]
    fn at(&self) -> SlotRef {
        self.slot().at
    }

    /// The fencing token (see [`Acquisition::fence`]).
    pub fn fence(&self) -> u64 {
        self.rec.fence
    }

    /// Shared or exclusive.
    pub fn mode(&self) -> Mode {
        self.rec.mode
    }

    /// Whether the previous holder died holding the lock (see [`Acquisition::owner_died`]).
    /// Always `false` here: this lock object lives in one process, where a holder cannot die
    /// and leave its key held. (The cross-process scopes' guard is
    /// [`KeyedGuard`](crate::KeyedGuard).)
    pub fn owner_died(&self) -> bool {
        self.acquisition().owner_died()
    }

    /// Whether this acquisition is still the key's current one (not force-unlocked, lease not
    /// ended).
    pub fn is_current(&self) -> bool {
        match &self.pool {
            Some(pool) => site::is_current(&self.slot().site(pool.policy), &self.rec.hold()),
            None => false,
        }
    }

    /// Time left on the lease, if the acquisition has one (zero once it has ended).
    pub fn lease_remaining(&self) -> Option<Duration> {
        self.rec
            .lease_until()
            .map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Moves the end of the lease to `lease` from now. `LeaseExpired` (or `NotOwner`) when the
    /// acquisition is no longer current; `InvalidArgument` when it has no lease.
    pub fn extend(&mut self, lease: Duration) -> Result<()> {
        let pool = self.pool.as_ref().ok_or(Error::NotOwner)?;
        let site = self.slot().site(pool.policy);
        let until = lease_end(lease);
        match site::extend(&site, &self.rec.hold(), until) {
            Ok(()) => {
                self.rec.set_lease(until);
                Ok(())
            }
            Err(e) => Err(e.unwrap_or_else(|| self.acquisition().stale_error())),
        }
    }

    /// Releases the key now, saying whether this acquisition was still current:
    /// `Err(NotOwner)` after a force-unlock, `Err(LeaseExpired)` after its lease ended.
    /// (Dropping the guard does the same, silently.)
    #[inline]
    pub fn release(mut self) -> Result<()> {
        let pool = self.pool.as_ref().ok_or(Error::NotOwner)?;
        let slot = self.slot();
        let result =
            if self.rec.is_plain() && slot.entry.release_fast(self.rec.mode, self.rec.fence) {
                Ok(())
            } else {
                self.release_rest(pool.policy)
            };
        self.pool = None;
        result
    }

    #[cold]
    #[inline(never)]
    fn release_rest(&self, policy: crate::entry::Policy) -> Result<()> {
        site::release(&self.slot().site(policy), &self.rec.hold())
            .map_err(|()| self.acquisition().stale_error())
    }

    /// Keeps the key held and forgets the guard; release it later with
    /// [`KeyPool::release`](crate::KeyPool::release).
    pub fn into_acquisition(mut self) -> Acquisition {
        let acq = self.acquisition();
        self.pool = None;
        acq
    }

    fn acquisition(&self) -> Acquisition {
        acquisition(self.at(), &self.rec.hold(), self.rec.lease_until())
    }
}

impl<P: PoolRef> fmt::Debug for PoolGuard<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolGuard")
            .field("fence", &self.rec.fence)
            .field("mode", &self.rec.mode)
            .finish_non_exhaustive()
    }
}

impl<P: PoolRef> Drop for PoolGuard<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            let slot = self.slot();
            if self.rec.is_plain() && slot.entry.release_fast(self.rec.mode, self.rec.fence) {
                return;
            }
            release_slow(slot, pool.policy, &self.rec);
        }
    }
}

/// The rest of a guard's release, out of line: waiters to wake, holder state, or a hold that is
/// not current any more (force-unlocked, lease ended: nothing of ours to release).
#[cold]
#[inline(never)]
fn release_slow<K>(slot: &Slot<K>, policy: crate::entry::Policy, rec: &HoldRec) {
    let _ = site::release(&slot.site(policy), &rec.hold());
}

/// Several held keys; all released on drop.
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<u64> = KeyPool::new();
/// let guard = pool.lock_many([3, 1, 3].iter());
/// assert_eq!(guard.len(), 2);
/// drop(guard);
/// assert!(pool.is_empty());
/// ```
#[must_use = "the keys are released as soon as the guard is dropped"]
pub struct PoolManyGuard<P: PoolRef> {
    pool: Option<P>,
    /// Each key held, in the canonical order, with its hold and lease end.
    held: Vec<(SlotRef, Hold, Option<Instant>)>,
}

impl<P: PoolRef> PoolManyGuard<P> {
    pub(super) fn new(pool: P, held: Vec<(SlotRef, Hold, Option<Instant>)>) -> Self {
        Self {
            pool: Some(pool),
            held,
        }
    }

    /// The number of distinct keys held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether the guard holds no key (it was given none).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The fence of each key held, in the canonical order (not the order the keys were given:
    /// see [`fence_of`](Self::fence_of)).
    pub fn fences(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.held.iter().map(|(_, hold, _)| hold.fence)
    }

    /// The fence of `key`'s acquisition, if this guard holds `key`.
    ///
    /// ```
    /// use keylock_core::KeyPool;
    /// let pool: KeyPool<String> = KeyPool::new();
    /// drop(pool.lock("b"));
    /// let both = pool.lock_many(["a", "b"]);
    /// assert_eq!(both.fence_of("b"), Some(2));
    /// assert_eq!(both.fence_of("a"), Some(1));
    /// assert_eq!(both.fence_of("c"), None);
    /// ```
    pub fn fence_of<Q>(&self, key: &Q) -> Option<u64>
    where
        P::Key: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        let at = self.pool.as_ref()?.slot_of(key)?;
        self.held
            .iter()
            .find(|(held, _, _)| *held == at)
            .map(|(_, hold, _)| hold.fence)
    }

    /// Whether the previous holder of any of the locks held died holding it (see
    /// [`Acquisition::owner_died`]); always `false` in one process, as for the one-lock guard.
    pub fn owner_died(&self) -> bool {
        self.held
            .iter()
            .any(|(x, hold, lease)| acquisition(*x, hold, *lease).owner_died())
    }

    /// Releases every key now; the first stale acquisition's error, if any (the others are
    /// released all the same).
    pub fn release(mut self) -> Result<()> {
        let pool = self.pool.take().ok_or(Error::NotOwner)?;
        let mut result = Ok(());
        for (at, hold, lease) in self.held.iter().rev() {
            if pool.release_hold(*at, hold).is_err() && result.is_ok() {
                result = Err(acquisition(*at, hold, *lease).stale_error());
            }
        }
        result
    }

    /// Keeps the keys held and forgets the guard: one acquisition per key, to release with
    /// [`KeyPool::release`](crate::KeyPool::release).
    pub fn into_acquisitions(mut self) -> Vec<Acquisition> {
        self.pool = None;
        self.held
            .iter()
            .map(|(at, h, l)| acquisition(*at, h, *l))
            .collect()
    }
}

impl<P: PoolRef> fmt::Debug for PoolManyGuard<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolManyGuard")
            .field("keys", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl<P: PoolRef> Drop for PoolManyGuard<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.release_holds(&self.held);
        }
    }
}

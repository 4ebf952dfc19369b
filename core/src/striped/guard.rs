//! Guards of held stripes: each carries its acquisition and releases only that.

use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::StripedLock;
use crate::acquisition::{Acquisition, Mode, Want};
use crate::entry::{Hold, HoldRec, lease_end};
use crate::error::{Error, Result};
use crate::site;
use crate::site::RawLock;
use crate::wait::Grant;

/// The record of one stripe's acquisition.
fn acquisition(stripe: usize, hold: &Hold, lease_until: Option<Instant>) -> Acquisition {
    Acquisition {
        fence: hold.fence,
        at: stripe as u64,
        ticket: hold.ticket,
        owner: hold.owner,
        lease_until,
        mode: hold.mode,
        owner_died: false,
    }
}

/// A held stripe; released on drop. `Send`: it may be released from another thread.
///
/// The guard releases only its own acquisition: after a [`StripedLock::force_unlock`] or the
/// end of its lease it releases nothing, and [`release`](Self::release) says why.
///
/// ```
/// use keylock_core::StripedLock;
/// let locks = StripedLock::new(16).unwrap();
/// let guard = locks.lock("k");
/// assert_eq!(guard.stripe(), locks.stripe_of("k"));
/// let acq = guard.into_acquisition();      // keep it held without a guard...
/// locks.release(acq).unwrap();             // ...and release exactly that acquisition later
/// ```
#[must_use = "the stripe is released as soon as the guard is dropped"]
pub struct StripeGuard<P: Deref<Target = StripedLock>> {
    lock: Option<P>,
    /// The stripe's lock: stripes never move, and the guard keeps the lock object alive.
    raw: NonNull<RawLock>,
    stripe: usize,
    rec: HoldRec,
}

// SAFETY: `raw` points into the lock object the guard holds through `P`, whose stripes are
// shared between threads as `&StripedLock` shares them; so the guard is as Send as `P`.
unsafe impl<P: Deref<Target = StripedLock> + Send> Send for StripeGuard<P> {}
// SAFETY: as above; `&StripeGuard` only reads the stripe's atomic word or locks its queue.
unsafe impl<P: Deref<Target = StripedLock> + Sync> Sync for StripeGuard<P> {}

impl<P: Deref<Target = StripedLock>> StripeGuard<P> {
    pub(super) fn new(lock: P, stripe: usize, want: Want, grant: Grant) -> Self {
        Self {
            raw: NonNull::from(lock.stripe_at(stripe)),
            lock: Some(lock),
            stripe,
            rec: HoldRec::of(&want, grant),
        }
    }

    #[inline]
    pub(super) fn plain(lock: P, stripe: usize, mode: Mode, fence: u64) -> Self {
        Self {
            raw: NonNull::from(lock.stripe_at(stripe)),
            lock: Some(lock),
            stripe,
            rec: HoldRec::plain(mode, fence),
        }
    }

    /// The stripe held.
    pub fn stripe(&self) -> usize {
        self.stripe
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

    /// Whether this acquisition is still the stripe's current one (not force-unlocked, lease
    /// not ended).
    pub fn is_current(&self) -> bool {
        match &self.lock {
            Some(lock) => site::is_current(&lock.site(self.stripe), &self.rec.hold()),
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
        let lock = self.lock.as_ref().ok_or(Error::NotOwner)?;
        let until = lease_end(lease);
        match site::extend(&lock.site(self.stripe), &self.rec.hold(), until) {
            Ok(()) => {
                self.rec.set_lease(until);
                Ok(())
            }
            Err(e) => Err(e.unwrap_or_else(|| self.acquisition().stale_error())),
        }
    }

    /// Releases the stripe now, saying whether this acquisition was still current:
    /// `Err(NotOwner)` after a force-unlock, `Err(LeaseExpired)` after its lease ended. (Dropping
    /// the guard does the same, silently.)
    #[inline]
    pub fn release(mut self) -> Result<()> {
        let lock = self.lock.take().ok_or(Error::NotOwner)?;
        // SAFETY: see the field: the stripe lives as long as the lock object we hold.
        let entry = unsafe { &self.raw.as_ref().entry };
        if self.rec.is_plain() && entry.release_fast(self.rec.mode, self.rec.fence) {
            return Ok(());
        }
        self.release_rest(&lock)
    }

    #[cold]
    #[inline(never)]
    fn release_rest(&self, lock: &StripedLock) -> Result<()> {
        site::release(&lock.site(self.stripe), &self.rec.hold())
            .map_err(|()| self.acquisition().stale_error())
    }

    /// Keeps the stripe held and forgets the guard; release it later with
    /// [`StripedLock::release`].
    pub fn into_acquisition(mut self) -> Acquisition {
        self.lock = None;
        self.acquisition()
    }

    fn acquisition(&self) -> Acquisition {
        acquisition(self.stripe, &self.rec.hold(), self.rec.lease_until())
    }
}

impl<P: Deref<Target = StripedLock>> fmt::Debug for StripeGuard<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripeGuard")
            .field("stripe", &self.stripe)
            .field("fence", &self.rec.fence)
            .field("mode", &self.rec.mode)
            .finish()
    }
}

impl<P: Deref<Target = StripedLock>> Drop for StripeGuard<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            // SAFETY: see the field: the stripe lives as long as the lock object we hold.
            let entry = unsafe { &self.raw.as_ref().entry };
            if self.rec.is_plain() && entry.release_fast(self.rec.mode, self.rec.fence) {
                return;
            }
            release_slow(lock, self.stripe, &self.rec);
        }
    }
}

/// The rest of a guard's release, out of line: waiters to wake, holder state, or a hold that is
/// not current any more (force-unlocked, lease ended: nothing of ours to release).
#[cold]
#[inline(never)]
fn release_slow(lock: &StripedLock, stripe: usize, rec: &HoldRec) {
    let _ = site::release(&lock.site(stripe), &rec.hold());
}

/// Several held stripes; all released on drop.
///
/// ```
/// use keylock_core::StripedLock;
/// let locks = StripedLock::new(1).unwrap(); // one stripe: every key shares it
/// let guard = locks.lock_many(["a", "b", "c"].iter());
/// assert_eq!(guard.stripes().collect::<Vec<_>>(), [0]); // taken once
/// ```
#[must_use = "the stripes are released as soon as the guard is dropped"]
pub struct StripesGuard<P: Deref<Target = StripedLock>> {
    lock: Option<P>,
    /// Each stripe held, ascending, with its hold and lease end.
    held: Vec<(usize, Hold, Option<Instant>)>,
}

impl<P: Deref<Target = StripedLock>> StripesGuard<P> {
    pub(super) fn new(lock: P, held: Vec<(usize, Hold, Option<Instant>)>) -> Self {
        Self {
            lock: Some(lock),
            held,
        }
    }

    /// The distinct stripes held, ascending.
    pub fn stripes(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.held.iter().map(|&(stripe, _, _)| stripe)
    }

    /// The fence of each stripe held, in the order of [`stripes`](Self::stripes).
    pub fn fences(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.held.iter().map(|(_, hold, _)| hold.fence)
    }

    /// The fence of `key`'s stripe, if this guard holds it.
    pub fn fence_of<K: std::hash::Hash + ?Sized>(&self, key: &K) -> Option<u64> {
        let stripe = self.lock.as_ref()?.stripe_of(key);
        self.held
            .iter()
            .find(|(s, _, _)| *s == stripe)
            .map(|(_, hold, _)| hold.fence)
    }

    /// The number of distinct stripes held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no stripe is held (no keys were given).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Whether the previous holder of any of the locks held died holding it (see
    /// [`Acquisition::owner_died`]); always `false` in one process, as for the one-lock guard.
    pub fn owner_died(&self) -> bool {
        self.held
            .iter()
            .any(|(x, hold, lease)| acquisition(*x, hold, *lease).owner_died())
    }

    /// Releases every stripe now; the first stale acquisition's error, if any (the others are
    /// released all the same).
    pub fn release(mut self) -> Result<()> {
        let lock = self.lock.take().ok_or(Error::NotOwner)?;
        let mut result = Ok(());
        for (stripe, hold, lease) in self.held.iter().rev() {
            if site::release(&lock.site(*stripe), hold).is_err() && result.is_ok() {
                result = Err(acquisition(*stripe, hold, *lease).stale_error());
            }
        }
        result
    }

    /// Keeps the stripes held and forgets the guard: one acquisition per stripe, to release
    /// with [`StripedLock::release`].
    pub fn into_acquisitions(mut self) -> Vec<Acquisition> {
        self.lock = None;
        self.held
            .iter()
            .map(|(s, h, l)| acquisition(*s, h, *l))
            .collect()
    }
}

impl<P: Deref<Target = StripedLock>> fmt::Debug for StripesGuard<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripesGuard")
            .field("stripes", &self.stripes().collect::<Vec<_>>())
            .finish()
    }
}

impl<P: Deref<Target = StripedLock>> Drop for StripesGuard<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            lock.release_holds(&self.held);
        }
    }
}

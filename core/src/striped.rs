//! `StripedLock`: a fixed array of padded mutexes indexed by `hash(key) & mask` (seed 000).

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::error::{Error, Result};
use crate::hash::{DefaultHashBuilder, hash_of, random, seeded};
use crate::raw_mutex::RawMutex;
use crate::wait::{LazyWaiter, Wake, deadline_after};

/// Counters of a [`StripedLock`], read by [`StripedLock::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StripedStats {
    /// The number of stripes.
    pub stripes: usize,
    /// Stripes held now.
    pub held: usize,
    /// Stripes that have waiters queued now.
    pub queued: usize,
}

/// A fixed number of locks shared by all keys: each key maps to the stripe
/// `hash(key) & (stripes - 1)`.
///
/// Memory is fixed at creation (one cache-padded mutex per stripe, 128 bytes on x86-64) and
/// locking is one hash and one compare-and-swap. **The trade-off: keys that share a stripe
/// exclude each other.** With `s` stripes and `n` keys held at once, a new key collides with
/// probability about `n / s`. Pick it when occasional false sharing between keys is acceptable
/// and speed and fixed memory matter most; pick [`KeyPool`](crate::KeyPool) when two different
/// keys must never block each other.
///
/// ```
/// use keylock_core::StripedLock;
///
/// let locks = StripedLock::new(1000).unwrap(); // rounded up to 1024
/// assert_eq!(locks.stripes(), 1024);
/// {
///     let _guard = locks.lock("account-17");
///     assert!(locks.is_locked("account-17"));
///     assert!(locks.try_lock("account-17").is_err());
/// }
/// assert!(!locks.is_locked("account-17"));
///
/// // Several keys at once, deadlock-free: distinct stripes in ascending order.
/// let both = locks.lock_many(["alice", "bob"].iter());
/// drop(both);
/// ```
pub struct StripedLock {
    stripes: Box<[CachePadded<RawMutex>]>,
    mask: usize,
    hasher: DefaultHashBuilder,
}

impl fmt::Debug for StripedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.stripes.iter().filter(|s| s.is_locked()).count();
        f.debug_struct("StripedLock")
            .field("stripes", &self.stripes.len())
            .field("held", &held)
            .finish()
    }
}

impl StripedLock {
    /// The largest number of stripes accepted (2^20: 128 MiB of padded locks).
    pub const MAX_STRIPES: usize = 1 << 20;

    /// `stripes` locks (rounded up to a power of two) with a random hash seed.
    ///
    /// `Err(InvalidArgument)` when `stripes` is 0 or more than [`MAX_STRIPES`](Self::MAX_STRIPES).
    pub fn new(stripes: usize) -> Result<Self> {
        Self::build(stripes, random())
    }

    /// Like [`new`](Self::new), but with a fixed seed: the same key maps to the same stripe in
    /// every process that runs the same keylock build.
    ///
    /// ```
    /// use keylock_core::StripedLock;
    /// let a = StripedLock::with_seed(64, 7).unwrap();
    /// let b = StripedLock::with_seed(64, 7).unwrap();
    /// assert_eq!(a.stripe_of("user:42"), b.stripe_of("user:42"));
    /// ```
    pub fn with_seed(stripes: usize, seed: u64) -> Result<Self> {
        Self::build(stripes, seeded(seed))
    }

    fn build(stripes: usize, hasher: DefaultHashBuilder) -> Result<Self> {
        if stripes == 0 {
            return Err(Error::InvalidArgument("stripes must be at least 1"));
        }
        if stripes > Self::MAX_STRIPES {
            return Err(Error::InvalidArgument(
                "stripes exceeds StripedLock::MAX_STRIPES",
            ));
        }
        let n = stripes.next_power_of_two();
        let stripes = (0..n).map(|_| CachePadded::new(RawMutex::new())).collect();
        Ok(Self {
            stripes,
            mask: n - 1,
            hasher,
        })
    }

    /// The number of stripes (a power of two).
    pub fn stripes(&self) -> usize {
        self.stripes.len()
    }

    /// Stripes held now and stripes with waiters (a snapshot, one pass over the stripes: costs
    /// O(stripes), so it is meant for monitoring, not for every acquisition).
    ///
    /// ```
    /// use keylock_core::StripedLock;
    /// let locks = StripedLock::new(8).unwrap();
    /// let _g = locks.lock("a");
    /// let stats = locks.stats();
    /// assert_eq!((stats.stripes, stats.held, stats.queued), (8, 1, 0));
    /// ```
    pub fn stats(&self) -> StripedStats {
        let mut stats = StripedStats {
            stripes: self.stripes.len(),
            held: 0,
            queued: 0,
        };
        for stripe in self.stripes.iter() {
            stats.held += usize::from(stripe.is_locked());
            stats.queued += usize::from(stripe.is_queued());
        }
        stats
    }

    /// The stripe `key` maps to.
    #[inline]
    pub fn stripe_of<K: Hash + ?Sized>(&self, key: &K) -> usize {
        hash_of(&self.hasher, key) as usize & self.mask
    }

    #[inline]
    fn stripe(&self, index: usize) -> &RawMutex {
        &self.stripes[index]
    }

    /// The guard for a stripe just acquired: records the acquisition's generation, so that the
    /// guard never releases a later acquisition (after an explicit `unlock`).
    #[inline]
    fn guard<P: Deref<Target = StripedLock>>(&self, lock: P, stripe: usize) -> StripeGuard<P> {
        let generation = self.stripe(stripe).begin();
        StripeGuard {
            lock: Some(lock),
            stripe,
            generation,
        }
    }

    /// Blocks until `key`'s stripe is held.
    #[inline]
    pub fn lock<K: Hash + ?Sized>(&self, key: &K) -> StripeGuard<&Self> {
        let stripe = self.stripe_of(key);
        self.stripe(stripe).lock(None);
        self.guard(self, stripe)
    }

    /// Takes `key`'s stripe if it is free; `Err(WouldBlock)` otherwise.
    #[inline]
    pub fn try_lock<K: Hash + ?Sized>(&self, key: &K) -> Result<StripeGuard<&Self>> {
        let stripe = self.stripe_of(key);
        if self.stripe(stripe).try_lock() {
            Ok(self.guard(self, stripe))
        } else {
            Err(Error::WouldBlock)
        }
    }

    /// Waits at most `timeout` for `key`'s stripe; `Err(TimedOut)` when it runs out.
    pub fn try_lock_for<K: Hash + ?Sized>(
        &self,
        key: &K,
        timeout: Duration,
    ) -> Result<StripeGuard<&Self>> {
        let stripe = self.stripe_of(key);
        if self.stripe(stripe).lock(deadline_after(timeout)) {
            Ok(self.guard(self, stripe))
        } else {
            Err(Error::TimedOut)
        }
    }

    /// Releases `key`'s stripe, for callers that leaked its guard ([`StripeGuard::leak`]).
    /// `Err(NotLocked)` when that stripe is not locked.
    pub fn unlock<K: Hash + ?Sized>(&self, key: &K) -> Result<()> {
        if self.stripe(self.stripe_of(key)).unlock() {
            Ok(())
        } else {
            Err(Error::NotLocked)
        }
    }

    /// Whether `key`'s stripe is held (a snapshot).
    pub fn is_locked<K: Hash + ?Sized>(&self, key: &K) -> bool {
        self.stripe(self.stripe_of(key)).is_locked()
    }

    /// The distinct stripes of `keys`, ascending: the one order every multi-key acquire uses.
    fn stripes_of<'k, K, I>(&self, keys: I) -> Vec<usize>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let mut stripes: Vec<usize> = keys.into_iter().map(|k| self.stripe_of(k)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
    }

    /// Takes `stripes` in order with `take`; all or none.
    fn take_stripes(
        &self,
        stripes: Vec<usize>,
        mut take: impl FnMut(&RawMutex) -> bool,
    ) -> Option<Vec<(usize, u32)>> {
        let mut held = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            if !take(self.stripe(stripe)) {
                self.release_held(&held);
                return None;
            }
            held.push((stripe, self.stripe(stripe).begin()));
        }
        Some(held)
    }

    /// Releases stripes taken by this caller, newest first; a stripe whose acquisition was
    /// already released explicitly (another generation now) is left alone.
    fn release_held(&self, held: &[(usize, u32)]) {
        for &(stripe, generation) in held.iter().rev() {
            self.stripe(stripe).unlock_if(generation);
        }
    }

    /// Blocks until the stripes of all `keys` are held. Deadlock-free: distinct stripes are
    /// taken in ascending order, each once even when several keys share it.
    pub fn lock_many<'k, K, I>(&self, keys: I) -> StripesGuard<&Self>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let stripes = self.stripes_of(keys);
        let held = self
            .take_stripes(stripes, |m| m.lock(None))
            .expect("an untimed wait succeeds");
        StripesGuard {
            lock: Some(self),
            held,
        }
    }

    /// Takes the stripes of all `keys` if all are free, or none; `Err(WouldBlock)` otherwise.
    pub fn try_lock_many<'k, K, I>(&self, keys: I) -> Result<StripesGuard<&Self>>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let stripes = self.stripes_of(keys);
        match self.take_stripes(stripes, RawMutex::try_lock) {
            Some(held) => Ok(StripesGuard {
                lock: Some(self),
                held,
            }),
            None => Err(Error::WouldBlock),
        }
    }

    /// Waits at most `timeout` in all for the stripes of all `keys`: all or none.
    pub fn try_lock_many_for<'k, K, I>(
        &self,
        keys: I,
        timeout: Duration,
    ) -> Result<StripesGuard<&Self>>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let deadline = deadline_after(timeout);
        let stripes = self.stripes_of(keys);
        match self.take_stripes(stripes, |m| m.lock(deadline)) {
            Some(held) => Ok(StripesGuard {
                lock: Some(self),
                held,
            }),
            None => Err(Error::TimedOut),
        }
    }

    /// Releases the stripes of all `keys` (leaked guards). If any of them is not locked,
    /// nothing is released and the result is `Err(NotLocked)`.
    pub fn unlock_many<'k, K, I>(&self, keys: I) -> Result<()>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let stripes = self.stripes_of(keys);
        if stripes.iter().any(|&s| !self.stripe(s).is_locked()) {
            return Err(Error::NotLocked);
        }
        for &stripe in stripes.iter().rev() {
            self.stripe(stripe).unlock();
        }
        Ok(())
    }

    /// A future that resolves to the guard of `key`'s stripe, waiting in the same queue as
    /// blocking callers.
    pub fn lock_async<K: Hash + ?Sized>(&self, key: &K) -> StripeLockFuture<&Self> {
        StripeLockFuture {
            lock: Some(self),
            stripe: self.stripe_of(key),
            waiter: LazyWaiter::new(),
        }
    }

    /// Like [`lock_async`](Self::lock_async), for an `Arc`: the future is `'static`.
    pub fn lock_async_owned<K: Hash + ?Sized>(
        self: &Arc<Self>,
        key: &K,
    ) -> StripeLockFuture<Arc<Self>> {
        StripeLockFuture {
            lock: Some(Arc::clone(self)),
            stripe: self.stripe_of(key),
            waiter: LazyWaiter::new(),
        }
    }

    /// A future that resolves once the stripes of all `keys` are held (ascending order).
    pub fn lock_many_async<'k, K, I>(&self, keys: I) -> StripesLockFuture<&Self>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let stripes = self.stripes_of(keys);
        StripesLockFuture {
            inner: ManyFuture::new(self, stripes),
        }
    }

    /// Like [`lock_many_async`](Self::lock_many_async), for an `Arc`: the future is `'static`.
    pub fn lock_many_async_owned<'k, K, I>(
        self: &Arc<Self>,
        keys: I,
    ) -> StripesLockFuture<Arc<Self>>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let stripes = self.stripes_of(keys);
        StripesLockFuture {
            inner: ManyFuture::new(Arc::clone(self), stripes),
        }
    }
}

/// A held stripe; released on drop. `Send`: it may be released from another thread.
///
/// ```
/// use keylock_core::StripedLock;
/// let locks = StripedLock::new(16).unwrap();
/// let guard = locks.lock("k");
/// assert_eq!(guard.stripe(), locks.stripe_of("k"));
/// guard.leak();
/// locks.unlock("k").unwrap();
/// ```
#[must_use = "the stripe is released as soon as the guard is dropped"]
pub struct StripeGuard<P: Deref<Target = StripedLock>> {
    lock: Option<P>,
    stripe: usize,
    generation: u32,
}

impl<P: Deref<Target = StripedLock>> StripeGuard<P> {
    /// The stripe held.
    pub fn stripe(&self) -> usize {
        self.stripe
    }

    /// Keeps the stripe held and forgets the guard; release it later with
    /// [`StripedLock::unlock`].
    pub fn leak(mut self) {
        self.lock = None;
    }
}

impl<P: Deref<Target = StripedLock>> fmt::Debug for StripeGuard<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripeGuard")
            .field("stripe", &self.stripe)
            .finish()
    }
}

impl<P: Deref<Target = StripedLock>> Drop for StripeGuard<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            lock.stripe(self.stripe).unlock_if(self.generation);
        }
    }
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
    /// (stripe, generation) for each stripe held, ascending.
    held: Vec<(usize, u32)>,
}

impl<P: Deref<Target = StripedLock>> StripesGuard<P> {
    /// The distinct stripes held, ascending.
    pub fn stripes(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.held.iter().map(|&(stripe, _)| stripe)
    }

    /// Keeps the stripes held and forgets the guard; release them later with
    /// [`StripedLock::unlock_many`].
    pub fn leak(mut self) {
        self.lock = None;
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
            lock.release_held(&self.held);
        }
    }
}

/// Polls for one stripe: the lock-free attempt first (when not queued), else the queue.
#[inline]
fn poll_stripe(mutex: &RawMutex, waiter: Pin<&mut LazyWaiter>, cx: &mut Context<'_>) -> Poll<u32> {
    let got = (!waiter.is_registered() && mutex.try_lock())
        || waiter
            .get()
            .poll(mutex, || Wake::Task(cx.waker().clone()))
            .is_ready();
    if got {
        Poll::Ready(mutex.begin())
    } else {
        Poll::Pending
    }
}

/// Acquires a sorted list of stripes one after another.
struct ManyFuture<P: Deref<Target = StripedLock>> {
    lock: Option<P>,
    /// (stripe, generation once held), ascending.
    stripes: Vec<(usize, u32)>,
    /// How many of `stripes` are held.
    held: usize,
    waiter: LazyWaiter,
}

impl<P: Deref<Target = StripedLock>> ManyFuture<P> {
    fn new(lock: P, stripes: Vec<usize>) -> Self {
        let stripes = stripes.into_iter().map(|s| (s, 0)).collect();
        Self {
            lock: Some(lock),
            stripes,
            held: 0,
            waiter: LazyWaiter::new(),
        }
    }
}

impl<P: Deref<Target = StripedLock>> Drop for ManyFuture<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            if self.held < self.stripes.len() {
                // SAFETY: the future is dropped in place; the waiter was pinned inside it.
                let waiter = unsafe { Pin::new_unchecked(&mut self.waiter) };
                waiter.abandon(lock.stripe(self.stripes[self.held].0), false);
            }
            lock.release_held(&self.stripes[..self.held]);
        }
    }
}

/// Resolves to a [`StripeGuard`]. Dropping it before then cancels the wait exactly: a waiter
/// leaves the queue, and a lock already handed to it passes on.
///
/// ```
/// use keylock_core::StripedLock;
/// let locks = StripedLock::new(16).unwrap();
/// let guard = futures::executor::block_on(locks.lock_async(&5u32));
/// assert!(locks.is_locked(&5u32));
/// drop(guard);
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct StripeLockFuture<P: Deref<Target = StripedLock>> {
    lock: Option<P>,
    stripe: usize,
    waiter: LazyWaiter,
}

impl<P: Deref<Target = StripedLock>> Future for StripeLockFuture<P> {
    type Output = StripeGuard<P>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StripeGuard<P>> {
        // SAFETY: the waiter is never moved out of the pinned future.
        let this = unsafe { self.get_unchecked_mut() };
        let lock = this
            .lock
            .as_ref()
            .expect("StripeLockFuture polled after completion");
        // SAFETY: as above.
        let waiter = unsafe { Pin::new_unchecked(&mut this.waiter) };
        poll_stripe(lock.stripe(this.stripe), waiter, cx).map(|generation| StripeGuard {
            lock: this.lock.take(),
            stripe: this.stripe,
            generation,
        })
    }
}

impl<P: Deref<Target = StripedLock>> Drop for StripeLockFuture<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            // SAFETY: the future is dropped in place; the waiter was pinned inside it.
            let waiter = unsafe { Pin::new_unchecked(&mut self.waiter) };
            waiter.abandon(lock.stripe(self.stripe), false);
        }
    }
}

impl<P: Deref<Target = StripedLock>> fmt::Debug for StripeLockFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripeLockFuture")
            .field("stripe", &self.stripe)
            .finish()
    }
}

/// Resolves to a [`StripesGuard`]. Dropping it before then releases what it took and cancels
/// the wait exactly.
///
/// ```
/// use keylock_core::StripedLock;
/// let locks = StripedLock::new(16).unwrap();
/// let guard = futures::executor::block_on(locks.lock_many_async([1u8, 2].iter()));
/// assert!(locks.is_locked(&1u8) && locks.is_locked(&2u8));
/// drop(guard);
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct StripesLockFuture<P: Deref<Target = StripedLock>> {
    inner: ManyFuture<P>,
}

impl<P: Deref<Target = StripedLock>> Future for StripesLockFuture<P> {
    type Output = StripesGuard<P>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StripesGuard<P>> {
        // SAFETY: structural pinning of the only field; its waiter is never moved out.
        let this = unsafe { &mut self.get_unchecked_mut().inner };
        let lock = this
            .lock
            .as_ref()
            .expect("StripesLockFuture polled after completion");
        while this.held < this.stripes.len() {
            let mutex = lock.stripe(this.stripes[this.held].0);
            // SAFETY: as above.
            let waiter = unsafe { Pin::new_unchecked(&mut this.waiter) };
            match poll_stripe(mutex, waiter, cx) {
                Poll::Ready(generation) => this.stripes[this.held].1 = generation,
                Poll::Pending => return Poll::Pending,
            }
            this.held += 1;
        }
        Poll::Ready(StripesGuard {
            lock: this.lock.take(),
            held: std::mem::take(&mut this.stripes),
        })
    }
}

impl<P: Deref<Target = StripedLock>> fmt::Debug for StripesLockFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripesLockFuture")
            .field("stripes", &self.inner.stripes)
            .finish()
    }
}

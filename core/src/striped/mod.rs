//! `StripedLock`: a fixed array of cache-padded locks; a key's lock is stripe
//! `hash(key) & (stripes - 1)`, so memory is fixed and distinct keys may share a stripe.
//!
//! Each stripe is one [`Entry`](crate::entry) with a queue mutex of its own, so a stripe has
//! everything a pool key has: both modes, fences, leases, owners, force-unlock. This module
//! finds stripes; `guard` and `future` hold and await them.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner, Wait, Want};
use crate::entry::{Hold, Policy};
use crate::error::{Error, Result};
use crate::hash::{DefaultHashBuilder, hash_of, random, seeded};
use crate::many;
use crate::site::{self, RawLock, RawSite, plain};

use crate::front::{
    self, AcquireFuture, FindKey, Held, LockFuture, LockGuard, LockTable, ManyAcquireFuture,
    ManyGuard, ManyLockFuture, Plan, table::Table,
};

/// Counters of a [`StripedLock`], read by [`StripedLock::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StripedStats {
    /// The number of stripes.
    pub stripes: usize,
    /// Stripes held now (in either mode).
    pub held: usize,
    /// Stripes that have waiters queued now.
    pub queued: usize,
}

/// A fixed number of locks shared by all keys: each key maps to the stripe
/// `hash(key) & (stripes - 1)`.
///
/// Memory is fixed at creation (one cache-padded lock per stripe, 128 bytes on x86-64) and
/// locking is one hash and one compare-and-swap. **The trade-off: keys that share a stripe
/// exclude each other.** With `s` stripes and `n` keys held at once, a new key collides with
/// probability about `n / s`. Pick it when occasional false sharing between keys is acceptable
/// and speed and fixed memory matter most; pick [`KeyPool`](crate::KeyPool) when two different
/// keys must never block each other.
///
/// Every stripe has both modes ([`lock_shared`](Self::lock_shared)), a fence that rises with
/// each exclusive acquisition ([`LockGuard::fence`]), leases, force-unlock and, when built
/// [`reentrant`](StripedLockBuilder::reentrant), owners with hold counts.
///
/// ```
/// use keylock_core::StripedLock;
///
/// let locks = StripedLock::new(1000).unwrap(); // rounded up to 1024
/// assert_eq!(locks.stripes(), 1024);
/// {
///     let guard = locks.lock("account-17");
///     assert!(locks.is_locked("account-17"));
///     assert!(locks.try_lock("account-17").is_err());
///     assert!(guard.fence() >= 1);
/// }
/// assert!(!locks.is_locked("account-17"));
///
/// // Several keys at once, deadlock-free: distinct stripes in ascending order.
/// let both = locks.lock_many(["alice", "bob"].iter());
/// drop(both);
/// ```
pub struct StripedLock {
    stripes: Box<[CachePadded<RawLock>]>,
    mask: usize,
    hasher: DefaultHashBuilder,
    policy: Policy,
}

impl fmt::Debug for StripedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stats = self.stats();
        f.debug_struct("StripedLock")
            .field("stripes", &stats.stripes)
            .field("held", &stats.held)
            .finish_non_exhaustive()
    }
}

/// Options for a [`StripedLock`], from [`StripedLock::builder`].
///
/// ```
/// use keylock_core::StripedLock;
/// let locks = StripedLock::builder().stripes(64).seed(7).fifo(true).build().unwrap();
/// assert_eq!(locks.stripes(), 64);
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct StripedLockBuilder {
    stripes: usize,
    seed: Option<u64>,
    policy: Policy,
}

impl StripedLockBuilder {
    /// The number of stripes (rounded up to a power of two; default 1024).
    pub fn stripes(mut self, stripes: usize) -> Self {
        self.stripes = stripes;
        self
    }

    /// A fixed hash seed: the same key maps to the same stripe in every process that runs the
    /// same keylock build (default: random per instance).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    front::policy_builder_methods!("stripe");

    /// The lock. `Err(InvalidArgument)` when the stripe count is 0 or more than
    /// [`StripedLock::MAX_STRIPES`].
    pub fn build(self) -> Result<StripedLock> {
        let hasher = self.seed.map_or_else(random, seeded);
        StripedLock::build(self.stripes, hasher, self.policy)
    }
}

impl StripedLock {
    /// The largest number of stripes accepted (2^20: 128 MiB of padded locks).
    pub const MAX_STRIPES: usize = 1 << 20;

    /// `stripes` locks (rounded up to a power of two) with a random hash seed.
    ///
    /// `Err(InvalidArgument)` when `stripes` is 0 or more than [`MAX_STRIPES`](Self::MAX_STRIPES).
    pub fn new(stripes: usize) -> Result<Self> {
        Self::build(stripes, random(), Policy::DEFAULT)
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
        Self::build(stripes, seeded(seed), Policy::DEFAULT)
    }

    /// Options beyond the stripe count: seed, FIFO, reentrancy.
    pub fn builder() -> StripedLockBuilder {
        StripedLockBuilder {
            stripes: 1024,
            seed: None,
            policy: Policy::DEFAULT,
        }
    }

    fn build(stripes: usize, hasher: DefaultHashBuilder, policy: Policy) -> Result<Self> {
        if stripes == 0 {
            return Err(Error::InvalidArgument("stripes must be at least 1"));
        }
        if stripes > Self::MAX_STRIPES {
            return Err(Error::InvalidArgument(
                "stripes exceeds StripedLock::MAX_STRIPES",
            ));
        }
        let n = stripes.next_power_of_two();
        let stripes = (0..n).map(|_| CachePadded::new(RawLock::new())).collect();
        Ok(Self {
            stripes,
            mask: n - 1,
            hasher,
            policy,
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
            stats.held += usize::from(stripe.entry.is_held());
            stats.queued += usize::from(stripe.entry.is_queued());
        }
        stats
    }

    /// The stripe `key` maps to.
    #[inline]
    pub fn stripe_of<K: Hash + ?Sized>(&self, key: &K) -> usize {
        hash_of(&self.hasher, key) as usize & self.mask
    }

    /// The stripe numbered `stripe` (which must be in range) as a site.
    #[inline]
    fn site(&self, stripe: usize) -> RawSite<'_> {
        RawSite {
            lock: &self.stripes[stripe],
            policy: self.policy,
        }
    }

    /// The stripe of a hash: `hash & mask` is always in range.
    #[inline]
    pub(super) fn stripe_at(&self, stripe: usize) -> &RawLock {
        debug_assert!(stripe < self.stripes.len());
        // SAFETY: every caller passes `hash & self.mask` (or a number checked against the
        // length), and there are `mask + 1` stripes.
        unsafe { self.stripes.get_unchecked(stripe & self.mask) }
    }

    /// `want` as this lock serves it (owners only matter to a reentrant lock).
    #[inline]
    fn want(&self, opts: &LockOptions) -> Want {
        self.policy.normalize(opts.want())
    }

    /// Acquires `stripe` for `want`, waiting as `wait` says.
    #[inline]
    fn acquire<P: std::ops::Deref<Target = StripedLock>>(
        &self,
        lock: P,
        stripe: usize,
        want: Want,
        wait: Wait,
    ) -> Result<LockGuard<P>> {
        let grant = site::acquire(&self.site(stripe), &want, wait)?;
        Ok(LockGuard::new(lock, self.stripe_at(stripe), &want, grant))
    }

    // ---- exclusive ----

    /// Blocks until `key`'s stripe is held exclusively.
    #[inline]
    pub fn lock<K: Hash + ?Sized>(&self, key: &K) -> LockGuard<&Self> {
        let stripe = self.stripe_of(key);
        let fence = match self
            .stripe_at(stripe)
            .entry
            .try_fast(Mode::Exclusive, self.policy.fifo)
        {
            Some(fence) => fence,
            None => self.lock_slow(stripe, Mode::Exclusive),
        };
        LockGuard::plain(self, self.stripe_at(stripe), Mode::Exclusive, fence)
    }

    #[cold]
    fn lock_slow(&self, stripe: usize, mode: Mode) -> u64 {
        match site::acquire(&self.site(stripe), &plain(mode), Wait::Forever) {
            Ok(grant) => grant.fence,
            // A plain untimed acquire has no way to fail.
            Err(e) => unreachable!("an untimed plain acquire failed: {e}"),
        }
    }

    /// Takes `key`'s stripe exclusively if it is free; `Err(WouldBlock)` otherwise.
    #[inline]
    pub fn try_lock<K: Hash + ?Sized>(&self, key: &K) -> Result<LockGuard<&Self>> {
        let stripe = self.stripe_of(key);
        self.acquire(self, stripe, Want::EXCLUSIVE, Wait::No)
    }

    /// Waits at most `timeout` for `key`'s stripe; `Err(TimedOut)` when it runs out.
    pub fn try_lock_for<K: Hash + ?Sized>(
        &self,
        key: &K,
        timeout: Duration,
    ) -> Result<LockGuard<&Self>> {
        let stripe = self.stripe_of(key);
        self.acquire(self, stripe, Want::EXCLUSIVE, Wait::For(timeout))
    }

    // ---- shared ----

    /// Blocks until `key`'s stripe is held in shared mode (with any other shared holders).
    ///
    /// ```
    /// use keylock_core::StripedLock;
    /// let locks = StripedLock::new(16).unwrap();
    /// let a = locks.lock_shared("doc");
    /// let b = locks.lock_shared("doc");
    /// assert!(locks.try_lock("doc").is_err());
    /// drop((a, b));
    /// assert!(locks.try_lock("doc").is_ok());
    /// ```
    #[inline]
    pub fn lock_shared<K: Hash + ?Sized>(&self, key: &K) -> LockGuard<&Self> {
        let stripe = self.stripe_of(key);
        let fence = match self.stripe_at(stripe).entry.try_fast(Mode::Shared, false) {
            Some(fence) => fence,
            None => self.lock_slow(stripe, Mode::Shared),
        };
        LockGuard::plain(self, self.stripe_at(stripe), Mode::Shared, fence)
    }

    /// Takes `key`'s stripe in shared mode if no exclusive holder or queued request is in the
    /// way; `Err(WouldBlock)` otherwise.
    pub fn try_lock_shared<K: Hash + ?Sized>(&self, key: &K) -> Result<LockGuard<&Self>> {
        let stripe = self.stripe_of(key);
        self.acquire(self, stripe, Want::SHARED, Wait::No)
    }

    /// Waits at most `timeout` for `key`'s stripe in shared mode.
    pub fn try_lock_shared_for<K: Hash + ?Sized>(
        &self,
        key: &K,
        timeout: Duration,
    ) -> Result<LockGuard<&Self>> {
        let stripe = self.stripe_of(key);
        self.acquire(self, stripe, Want::SHARED, Wait::For(timeout))
    }

    // ---- with options ----

    /// Acquires `key`'s stripe as `opts` says: mode, lease, owner, how long to wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use keylock_core::{LockOptions, StripedLock, Wait};
    /// let locks = StripedLock::new(16).unwrap();
    /// let g = locks.lock_with("k", LockOptions::new().lease(Duration::from_millis(20))).unwrap();
    /// // Nobody releases it: the next acquirer takes over when the lease ends.
    /// let next = locks.lock_with("k", LockOptions::new().wait(Wait::For(Duration::from_secs(5)))).unwrap();
    /// assert!(next.fence() > g.fence());
    /// assert_eq!(g.release().unwrap_err(), keylock_core::Error::LeaseExpired);
    /// ```
    pub fn lock_with<K: Hash + ?Sized>(
        &self,
        key: &K,
        opts: LockOptions,
    ) -> Result<LockGuard<&Self>> {
        let stripe = self.stripe_of(key);
        self.acquire(self, stripe, self.want(&opts), opts.wait)
    }

    /// A plain acquisition's record straight from the fast path, or `None` (take the full
    /// path): the trait's (and so the front ends') uncontended case.
    #[inline]
    pub(crate) fn acquire_stripe_fast(&self, stripe: usize, mode: Mode) -> Option<Acquisition> {
        let fence = self
            .stripe_at(stripe)
            .entry
            .try_fast(mode, self.policy.fifo)?;
        Some(Acquisition::plain(fence, stripe as u64, mode))
    }

    /// Releases a plain acquisition record on the fast path; `false` means: take the full path.
    #[inline]
    pub(crate) fn release_stripe_fast(&self, acq: &Acquisition) -> bool {
        acq.is_plain()
            && usize::try_from(acq.at).is_ok_and(|s| s < self.stripes.len())
            && self.stripes[acq.at as usize]
                .entry
                .release_fast(acq.mode, acq.fence)
    }

    /// Acquires stripe `stripe` as `opts` says (the trait's form).
    pub(crate) fn lock_stripe_with(
        &self,
        stripe: usize,
        opts: LockOptions,
    ) -> Result<LockGuard<&Self>> {
        self.acquire(self, stripe, self.want(&opts), opts.wait)
    }

    /// [`lock_stripe_with`](Self::lock_stripe_with) as a future.
    pub(crate) fn lock_stripe_with_async_owned(
        self: &Arc<Self>,
        stripe: usize,
        opts: LockOptions,
    ) -> AcquireFuture<Arc<Self>> {
        AcquireFuture::new(Self::start(
            Arc::clone(self),
            stripe,
            self.want(&opts),
            opts.wait,
        ))
    }

    /// Force-unlocks stripe `stripe`.
    pub(crate) fn force_unlock_stripe(&self, stripe: usize) -> bool {
        site::force_unlock(&self.site(stripe))
    }

    /// Frees stripe `stripe` whoever holds it and takes it exclusively as `opts` says (its
    /// lease and owner; it never waits), ahead of every queued waiter: the previous holders'
    /// acquisitions are stale, and the queue's head is served when this holder releases.
    /// `InvalidArgument` for a shared request.
    pub(crate) fn steal_stripe(
        &self,
        stripe: usize,
        opts: LockOptions,
    ) -> Result<LockGuard<&Self>> {
        let want = self.want(&opts);
        let grant = site::steal(&self.site(stripe), &want)?;
        Ok(LockGuard::new(self, self.stripe_at(stripe), &want, grant))
    }

    /// The holders of stripe `stripe`.
    pub(crate) fn info_stripe(&self, stripe: usize) -> Option<LockInfo> {
        site::info(&self.site(stripe))
    }

    /// Stripe `stripe` now, under its queue lock: (held in either mode, shared holders,
    /// waiters queued).
    pub(crate) fn stripe_counts(&self, stripe: usize) -> (bool, usize, usize) {
        site::with_locked(&self.site(stripe), |e, side, _, _| {
            (e.is_held(), e.shared_holders(), side.waiters.len())
        })
    }

    /// Whether the lock is reentrant.
    pub fn is_reentrant(&self) -> bool {
        self.policy.reentrant
    }

    /// Like [`lock_with`](Self::lock_with), for an `Arc`: the guard is `'static`.
    pub fn lock_with_owned<K: Hash + ?Sized>(
        self: &Arc<Self>,
        key: &K,
        opts: LockOptions,
    ) -> Result<LockGuard<Arc<Self>>> {
        let stripe = self.stripe_of(key);
        self.acquire(Arc::clone(self), stripe, self.want(&opts), opts.wait)
    }

    // ---- acquisitions ----

    /// Releases an acquisition handed out by [`LockGuard::into_acquisition`]. Refused with
    /// `NotOwner` (or `LeaseExpired`) when it is no longer current: released already,
    /// force-unlocked, or its lease ran out. Never touches another acquisition.
    pub fn release(&self, acquisition: Acquisition) -> Result<()> {
        let owner = acquisition.owner;
        self.release_as(acquisition, owner)
    }

    /// Like [`release`](Self::release), on behalf of `owner`: in a reentrant lock, refused with
    /// `NotOwner` unless `owner` is the holder's owner (as `threading.RLock` refuses a release
    /// from another thread).
    pub fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
        front::release_acquisition(self, acquisition, owner)
    }

    /// Whether `acquisition` is still current.
    pub fn is_current(&self, acquisition: &Acquisition) -> bool {
        self.is_current_as(acquisition, acquisition.owner)
    }

    /// Whether `acquisition` is current and, in a reentrant lock, held by `owner`
    /// (`threading.RLock`'s `_is_owned`).
    pub fn is_current_as(&self, acquisition: &Acquisition, owner: Option<Owner>) -> bool {
        front::acquisition_is_current(self, acquisition, owner)
    }

    /// Moves the end of `acquisition`'s lease to `lease` from now (and updates the record).
    /// `InvalidArgument` for an acquisition without a lease.
    pub fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        front::extend_acquisition(self, acquisition, lease)
    }

    /// Frees `key`'s stripe whoever holds it (in either mode), advancing its fence: the
    /// holders' guards no longer release anything, and their explicit releases report
    /// `NotOwner`. For a lock left behind by a caller that will never release it. Returns
    /// whether the stripe was held.
    ///
    /// ```
    /// use keylock_core::StripedLock;
    /// let locks = StripedLock::new(16).unwrap();
    /// let stale = locks.lock("k");
    /// assert!(locks.force_unlock("k"));
    /// let fresh = locks.lock("k");
    /// drop(stale);                      // releases nothing
    /// assert!(locks.is_locked("k"));
    /// drop(fresh);
    /// ```
    pub fn force_unlock<K: Hash + ?Sized>(&self, key: &K) -> bool {
        site::force_unlock(&self.site(self.stripe_of(key)))
    }

    /// Whether `key`'s stripe is held (a snapshot; an ended lease does not count).
    pub fn is_locked<K: Hash + ?Sized>(&self, key: &K) -> bool {
        site::is_locked(&self.site(self.stripe_of(key)))
    }

    /// Who holds `key`'s stripe and how (a snapshot); `None` when free.
    ///
    /// ```
    /// use keylock_core::{Mode, StripedLock};
    /// let locks = StripedLock::new(16).unwrap();
    /// let _a = locks.lock_shared("k");
    /// let _b = locks.lock_shared("k");
    /// let info = locks.info("k").unwrap();
    /// assert_eq!((info.mode, info.holders), (Mode::Shared, 2));
    /// ```
    pub fn info<K: Hash + ?Sized>(&self, key: &K) -> Option<LockInfo> {
        site::info(&self.site(self.stripe_of(key)))
    }

    // ---- many keys ----

    /// The distinct stripes of `keys`, ascending, each with the strongest mode asked of it:
    /// the one order every multi-key acquire uses.
    fn stripes_of<'k, K, I>(&self, keys: I) -> Plan
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = (&'k K, Mode)>,
    {
        let stripes: Plan = keys
            .into_iter()
            .map(|(k, m)| (self.stripe_of(k) as u64, m))
            .collect();
        canonical(stripes)
    }

    /// The stripe of a key of the [`KeyedLock`](crate::KeyedLock) trait: a plain key's stripe
    /// is the one [`stripe_of`](Self::stripe_of) gives its bytes; names hash with their space.
    pub(crate) fn stripe_of_key(&self, key: crate::scope::LockKey<'_>) -> usize {
        match key.space {
            crate::scope::KeySpace::Keys => self.stripe_of(key.bytes),
            space => self.stripe_of(&(space, key.bytes)),
        }
    }

    /// Acquires the given stripes (any order, duplicates allowed), all or none.
    pub(crate) fn lock_stripes(
        &self,
        stripes: Vec<(usize, Mode)>,
        opts: LockOptions,
    ) -> Result<ManyGuard<&Self>> {
        let held = self.take_all(plan_of(stripes), self.want(&opts), opts.wait)?;
        Ok(ManyGuard::new(self, held))
    }

    /// [`lock_stripes`](Self::lock_stripes) as a future.
    pub(crate) fn lock_stripes_async_owned(
        self: &Arc<Self>,
        stripes: Vec<(usize, Mode)>,
        opts: LockOptions,
    ) -> ManyAcquireFuture<Arc<Self>> {
        let want = self.want(&opts);
        ManyAcquireFuture::new(Arc::clone(self), plan_of(stripes), want, opts.wait)
    }

    /// Takes `stripes` in order; all or none.
    fn take_all(&self, stripes: Plan, base: Want, wait: Wait) -> Result<Vec<Held>> {
        let wait = many::one_deadline(wait);
        let take = |&(place, mode): &(u64, Mode)| {
            let want = Want { mode, ..base };
            let grant = site::acquire(&self.site(place as usize), &want, wait)?;
            Ok((place, Hold::of(&want, grant), grant.lease_until))
        };
        let give_back = |(place, hold, _): Held| {
            let _ = front::release_at(self, place, &hold);
        };
        many::take_all(&stripes, take, give_back).map_err(|failed| failed.error)
    }

    /// Blocks until the stripes of all `keys` are held exclusively. Deadlock-free: distinct
    /// stripes are taken in ascending order, each once even when several keys share it.
    pub fn lock_many<'k, K, I>(&self, keys: I) -> ManyGuard<&Self>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let stripes = self.stripes_of(keys.into_iter().map(|k| (k, Mode::Exclusive)));
        match self.take_all(stripes, Want::EXCLUSIVE, Wait::Forever) {
            Ok(held) => ManyGuard::new(self, held),
            Err(e) => unreachable!("an untimed plain acquire failed: {e}"),
        }
    }

    /// Takes the stripes of all `keys` exclusively if all are free, or none;
    /// `Err(WouldBlock)` otherwise.
    pub fn try_lock_many<'k, K, I>(&self, keys: I) -> Result<ManyGuard<&Self>>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let opts = LockOptions::new().wait(Wait::No);
        self.lock_many_with(keys.into_iter().map(|k| (k, Mode::Exclusive)), opts)
    }

    /// Waits at most `timeout` in all for the stripes of all `keys`: all or none.
    pub fn try_lock_many_for<'k, K, I>(
        &self,
        keys: I,
        timeout: Duration,
    ) -> Result<ManyGuard<&Self>>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let opts = LockOptions::new().wait(Wait::For(timeout));
        self.lock_many_with(keys.into_iter().map(|k| (k, Mode::Exclusive)), opts)
    }

    /// Acquires the stripes of all `keys`, each in its own mode, as `opts` says (its mode is
    /// ignored; lease, owner and wait apply to every key): all or none, deadlock-free.
    ///
    /// ```
    /// use keylock_core::{LockOptions, Mode, StripedLock};
    /// let locks = StripedLock::new(1024).unwrap();
    /// let g = locks.lock_many_with([("src", Mode::Shared), ("dst", Mode::Exclusive)], LockOptions::new()).unwrap();
    /// assert_eq!(g.len(), locks.lock_many_with([("x", Mode::Shared)], LockOptions::new()).unwrap().len() + 1);
    /// ```
    pub fn lock_many_with<'k, K, I>(&self, keys: I, opts: LockOptions) -> Result<ManyGuard<&Self>>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = (&'k K, Mode)>,
    {
        let stripes = self.stripes_of(keys);
        let base = self.want(&opts);
        let held = self.take_all(stripes, base, opts.wait)?;
        Ok(ManyGuard::new(self, held))
    }

    /// Like [`lock_many_with`](Self::lock_many_with), for an `Arc`: the guard is `'static`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use keylock_core::{LockOptions, Mode, StripedLock};
    /// let locks = Arc::new(StripedLock::new(16).unwrap());
    /// let both = locks
    ///     .lock_many_with_owned([("a", Mode::Exclusive), ("b", Mode::Shared)], LockOptions::new())
    ///     .unwrap();
    /// std::thread::spawn(move || drop(both)).join().unwrap(); // 'static: it may move
    /// assert!(!locks.is_locked("a") && !locks.is_locked("b"));
    /// ```
    pub fn lock_many_with_owned<'k, K, I>(
        self: &Arc<Self>,
        keys: I,
        opts: LockOptions,
    ) -> Result<ManyGuard<Arc<Self>>>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = (&'k K, Mode)>,
    {
        let stripes = self.stripes_of(keys);
        let held = self.take_all(stripes, self.want(&opts), opts.wait)?;
        Ok(ManyGuard::new(Arc::clone(self), held))
    }

    // ---- futures ----

    /// A future that resolves to the guard of `key`'s stripe (exclusive), waiting in the same
    /// queue as blocking callers.
    #[inline]
    pub fn lock_async<K: Hash + ?Sized>(&self, key: &K) -> LockFuture<&Self> {
        LockFuture::new(Self::start(
            self,
            self.stripe_of(key),
            Want::EXCLUSIVE,
            Wait::Forever,
        ))
    }

    /// Like [`lock_async`](Self::lock_async), for an `Arc`: the future is `'static`.
    #[inline]
    pub fn lock_async_owned<K: Hash + ?Sized>(self: &Arc<Self>, key: &K) -> LockFuture<Arc<Self>> {
        LockFuture::new(Self::start(
            Arc::clone(self),
            self.stripe_of(key),
            Want::EXCLUSIVE,
            Wait::Forever,
        ))
    }

    /// A future that resolves to a shared guard of `key`'s stripe.
    #[inline]
    pub fn lock_shared_async<K: Hash + ?Sized>(&self, key: &K) -> LockFuture<&Self> {
        LockFuture::new(Self::start(
            self,
            self.stripe_of(key),
            Want::SHARED,
            Wait::Forever,
        ))
    }

    /// Like [`lock_shared_async`](Self::lock_shared_async), for an `Arc`.
    #[inline]
    pub fn lock_shared_async_owned<K: Hash + ?Sized>(
        self: &Arc<Self>,
        key: &K,
    ) -> LockFuture<Arc<Self>> {
        LockFuture::new(Self::start(
            Arc::clone(self),
            self.stripe_of(key),
            Want::SHARED,
            Wait::Forever,
        ))
    }

    /// A future for `key`'s stripe as `opts` says; it resolves to `Err(TimedOut)` when its
    /// wait runs out (the executor must poll it then: give it a timer, as
    /// `tokio::time::timeout` does, or rely on the wake-up keylock arranges for that time).
    #[inline]
    pub fn lock_with_async<K: Hash + ?Sized>(
        &self,
        key: &K,
        opts: LockOptions,
    ) -> AcquireFuture<&Self> {
        AcquireFuture::new(Self::start(
            self,
            self.stripe_of(key),
            self.want(&opts),
            opts.wait,
        ))
    }

    /// Like [`lock_with_async`](Self::lock_with_async), for an `Arc`.
    #[inline]
    pub fn lock_with_async_owned<K: Hash + ?Sized>(
        self: &Arc<Self>,
        key: &K,
        opts: LockOptions,
    ) -> AcquireFuture<Arc<Self>> {
        let (stripe, want) = (self.stripe_of(key), self.want(&opts));
        AcquireFuture::new(Self::start(Arc::clone(self), stripe, want, opts.wait))
    }

    /// A future that resolves once the stripes of all `keys` are held exclusively (ascending
    /// order).
    pub fn lock_many_async<'k, K, I>(&self, keys: I) -> ManyLockFuture<&Self>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let stripes = self.stripes_of(keys.into_iter().map(|k| (k, Mode::Exclusive)));
        ManyLockFuture::new(self, stripes)
    }

    /// Like [`lock_many_async`](Self::lock_many_async), for an `Arc`: the future is `'static`.
    pub fn lock_many_async_owned<'k, K, I>(self: &Arc<Self>, keys: I) -> ManyLockFuture<Arc<Self>>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = &'k K>,
    {
        let stripes = self.stripes_of(keys.into_iter().map(|k| (k, Mode::Exclusive)));
        ManyLockFuture::new(Arc::clone(self), stripes)
    }

    /// A future for the stripes of all `keys`, each in its own mode, as `opts` says.
    pub fn lock_many_with_async<'k, K, I>(
        &self,
        keys: I,
        opts: LockOptions,
    ) -> ManyAcquireFuture<&Self>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = (&'k K, Mode)>,
    {
        let stripes = self.stripes_of(keys);
        ManyAcquireFuture::new(self, stripes, self.want(&opts), opts.wait)
    }

    /// Like [`lock_many_with_async`](Self::lock_many_with_async), for an `Arc`.
    pub fn lock_many_with_async_owned<'k, K, I>(
        self: &Arc<Self>,
        keys: I,
        opts: LockOptions,
    ) -> ManyAcquireFuture<Arc<Self>>
    where
        K: Hash + ?Sized + 'k,
        I: IntoIterator<Item = (&'k K, Mode)>,
    {
        let stripes = self.stripes_of(keys);
        let want = self.want(&opts);
        ManyAcquireFuture::new(Arc::clone(self), stripes, want, opts.wait)
    }
}

/// Stripes in the canonical plan: ascending, each once with the strongest mode asked of it.
fn canonical(mut stripes: Plan) -> Plan {
    many::plan_in_place(&mut stripes);
    stripes
}

/// Stripe numbers (any order, duplicates allowed) as a canonical plan.
fn plan_of(stripes: Vec<(usize, Mode)>) -> Plan {
    canonical(stripes.into_iter().map(|(s, m)| (s as u64, m)).collect())
}

impl StripedLock {
    /// The start of an async acquire: the stripe is taken now if it is free on the fast path,
    /// else the future tries once more under its lock and then waits.
    #[inline]
    fn start<P>(lock: P, stripe: usize, want: Want, wait: Wait) -> front::One<P>
    where
        P: std::ops::Deref<Target = StripedLock>,
    {
        let word = lock.stripe_at(stripe);
        if want.is_plain()
            && let Some(fence) = word.entry.try_fast(want.mode, lock.policy.fifo)
        {
            let word = std::ptr::NonNull::from(word);
            // SAFETY: the stripe lives as long as the lock object, which `lock` keeps.
            return front::One::taken(lock, unsafe { word.as_ref() }, want.mode, fence);
        }
        front::One::after_fast_path(lock, stripe as u64, want, wait)
    }
}

// The table's types are the crate's own (see `front::table::Table`).
#[allow(private_interfaces)]
impl Table for StripedLock {
    type Word = RawLock;
    type Site<'a>
        = RawSite<'a>
    where
        Self: 'a;
    const NAME: &'static str = "StripeGuard";

    #[inline]
    fn entry(stripe: &RawLock) -> &crate::entry::Entry {
        &stripe.entry
    }

    #[inline]
    fn site<'a>(&'a self, stripe: &'a RawLock) -> RawSite<'a> {
        RawSite {
            lock: stripe,
            policy: self.policy,
        }
    }

    #[inline]
    fn place(&self, stripe: &RawLock) -> u64 {
        // Stripes are one array of padded locks, each lock at the start of its padding.
        let base = self.stripes.as_ptr() as usize;
        ((stripe as *const RawLock as usize - base) / std::mem::size_of::<CachePadded<RawLock>>())
            as u64
    }

    #[inline]
    fn word(&self, place: u64) -> Result<&RawLock> {
        usize::try_from(place)
            .ok()
            .and_then(|s| self.stripes.get(s))
            .map(|padded| &**padded)
            .ok_or(Error::InvalidArgument(
                "the acquisition belongs to another lock",
            ))
    }
}

impl LockTable for StripedLock {}

impl<Q: Hash + ?Sized> FindKey<Q> for StripedLock {
    fn place_of(&self, key: &Q) -> Option<u64> {
        Some(self.stripe_of(key) as u64)
    }
}

impl<P: std::ops::Deref<Target = StripedLock>> LockGuard<P> {
    /// The stripe held.
    pub fn stripe(&self) -> usize {
        self.place() as usize
    }
}

impl<P: std::ops::Deref<Target = StripedLock>> ManyGuard<P> {
    /// The distinct stripes held, ascending.
    pub fn stripes(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.places().map(|place| place as usize)
    }
}

/// A held stripe of a [`StripedLock`]: the front's [`LockGuard`], under the stripes' name.
pub type StripeGuard<P> = LockGuard<P>;
/// Several held stripes of a [`StripedLock`]: the front's [`ManyGuard`].
pub type StripesGuard<P> = ManyGuard<P>;
/// A [`StripedLock`]'s future of one stripe: the front's [`LockFuture`].
pub type StripeLockFuture<P> = LockFuture<P>;
/// A [`StripedLock`]'s future of one stripe with options: the front's [`AcquireFuture`].
pub type StripeAcquireFuture<P> = AcquireFuture<P>;
/// A [`StripedLock`]'s future of several stripes: the front's [`ManyLockFuture`].
pub type StripesLockFuture<P> = ManyLockFuture<P>;
/// A [`StripedLock`]'s future of several stripes with options: the front's
/// [`ManyAcquireFuture`].
pub type StripesAcquireFuture<P> = ManyAcquireFuture<P>;

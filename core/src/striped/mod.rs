//! `StripedLock`: a fixed array of cache-padded locks; a key's lock is stripe
//! `hash(key) & (stripes - 1)`, so memory is fixed and distinct keys may share a stripe.
//!
//! Each stripe is one [`Entry`](crate::entry) with a queue mutex of its own, so a stripe has
//! everything a pool key has: both modes, fences, leases, owners, force-unlock. This module
//! finds stripes; `guard` and `future` hold and await them.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Wait, Want};
use crate::entry::Policy;
use crate::error::{Error, Result};
use crate::guarded::{self, RawLock, RawLockEntry};
use crate::hash::{StripeHashBuilder, hash_of, stripe_random, stripe_seeded};
use crate::many;

use crate::entry::SlowState;
use crate::front::table::{Find, Table, Take};
use crate::front::{
    self, AcquireFuture, LockGuard, LockTable, Locks, ManyAcquireFuture, ManyGuard, Plan,
};
use crate::wait::{Grant, Wakes};

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
/// Every stripe has both modes ([`lock_shared`](Locks::lock_shared)), a fence that rises with
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
pub type StripedLock = Locks<StripeTable>;

/// The table of a [`StripedLock`]: its fixed array of cache-padded stripes. Only named in
/// [`StripedLock`]'s definition; what it does is the front's ([`Locks`]).
pub struct StripeTable {
    stripes: Box<[CachePadded<RawLock>]>,
    mask: usize,
    hasher: StripeHashBuilder,
    policy: Policy,
}

impl fmt::Debug for StripeTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.stripes.iter().filter(|s| s.entry.is_held()).count();
        f.debug_struct("StripedLock")
            .field("stripes", &self.stripes.len())
            .field("held", &held)
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
        let hasher = self.seed.map_or_else(stripe_random, stripe_seeded);
        StripeTable::build(self.stripes, hasher, self.policy).map(|table| Locks { table })
    }
}

impl StripedLock {
    /// The largest number of stripes accepted (2^20: 128 MiB of padded locks).
    pub const MAX_STRIPES: usize = 1 << 20;

    /// The longest key whose stripe is found without a call: the stripe hash (foldhash) hashes
    /// up to 16 bytes inline and calls out of line for longer keys. A caller whose fast path
    /// must make no call, so as to need no stack frame (the C library's), sends longer keys
    /// down its other path.
    pub const INLINE_KEY_MAX: usize = 16;

    /// `stripes` locks (rounded up to a power of two) with a random hash seed.
    ///
    /// `Err(InvalidArgument)` when `stripes` is 0 or more than [`MAX_STRIPES`](Self::MAX_STRIPES).
    pub fn new(stripes: usize) -> Result<Self> {
        StripeTable::build(stripes, stripe_random(), Policy::DEFAULT).map(|table| Locks { table })
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
        StripeTable::build(stripes, stripe_seeded(seed), Policy::DEFAULT)
            .map(|table| Locks { table })
    }

    /// Options beyond the stripe count: seed, FIFO, reentrancy.
    pub fn builder() -> StripedLockBuilder {
        StripedLockBuilder {
            stripes: 1024,
            seed: None,
            policy: Policy::DEFAULT,
        }
    }

    /// The number of stripes (a power of two).
    pub fn stripes(&self) -> usize {
        self.table.stripes.len()
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
            stripes: self.table.stripes.len(),
            held: 0,
            queued: 0,
        };
        for stripe in self.table.stripes.iter() {
            stats.held += usize::from(stripe.entry.is_held());
            stats.queued += usize::from(stripe.entry.is_queued());
        }
        stats
    }

    /// The stripe `key` maps to.
    #[inline]
    pub fn stripe_of<K: Hash + ?Sized>(&self, key: &K) -> usize {
        self.table.stripe_of(key)
    }

    // ---- by stripe number: the KeyedLock trait's forms ----

    /// The stripe of a key of the [`KeyedLock`](crate::KeyedLock) trait: a plain key's stripe
    /// is the one [`stripe_of`](Self::stripe_of) gives its bytes; names hash with their space.
    pub(crate) fn stripe_of_key(&self, key: crate::scope::LockKey<'_>) -> usize {
        match key.space {
            crate::scope::KeySpace::Keys => self.stripe_of(key.bytes),
            space => self.stripe_of(&(space, key.bytes)),
        }
    }

    /// A plain acquisition's record straight from the fast path, or `None` (take the full
    /// path): the trait's (and so the front ends') uncontended case.
    #[inline]
    pub(crate) fn acquire_stripe_fast(&self, stripe: usize, mode: Mode) -> Option<Acquisition> {
        let fence = self
            .table
            .stripe_at(stripe)
            .entry
            .try_fast(mode, self.table.policy.fifo)?;
        Some(Acquisition::plain(fence, stripe as u64, mode))
    }

    /// Acquires stripe `stripe` as `opts` says.
    pub(crate) fn lock_stripe_with(
        &self,
        stripe: usize,
        opts: LockOptions,
    ) -> Result<LockGuard<&Self>> {
        let want = self.want(&opts);
        let grant = self.table.take_place(stripe as u64, &want, opts.wait)?;
        Ok(LockGuard::new(
            self,
            self.table.stripe_at(stripe),
            &want,
            grant,
        ))
    }

    /// [`lock_stripe_with`](Self::lock_stripe_with) as a future.
    pub(crate) fn lock_stripe_with_async_owned(
        self: &Arc<Self>,
        stripe: usize,
        opts: LockOptions,
    ) -> AcquireFuture<Arc<Self>> {
        AcquireFuture::new(self.start_at(
            Arc::clone(self),
            stripe as u64,
            self.want(&opts),
            opts.wait,
        ))
    }

    /// Force-unlocks stripe `stripe`.
    pub(crate) fn force_unlock_stripe(&self, stripe: usize) -> bool {
        guarded::force_unlock(&self.table.guarded_of(stripe))
    }

    /// Frees stripe `stripe` whoever holds it and takes it exclusively as `opts` says (see
    /// [`steal_with`](Locks::steal_with)).
    pub(crate) fn steal_stripe(
        &self,
        stripe: usize,
        opts: LockOptions,
    ) -> Result<LockGuard<&Self>> {
        let want = self.want(&opts);
        let grant = guarded::steal(&self.table.guarded_of(stripe), &want)?;
        Ok(LockGuard::new(
            self,
            self.table.stripe_at(stripe),
            &want,
            grant,
        ))
    }

    /// The holders of stripe `stripe`.
    pub(crate) fn info_stripe(&self, stripe: usize) -> Option<LockInfo> {
        guarded::info(&self.table.guarded_of(stripe))
    }

    /// Stripe `stripe` now, under its queue lock: (held in either mode, shared holders,
    /// waiters queued).
    pub(crate) fn stripe_counts(&self, stripe: usize) -> (bool, usize, usize) {
        guarded::with_locked(&self.table.guarded_of(stripe), |e, slow, _, _| {
            (e.is_held(), e.shared_holders(), slow.waiters.len())
        })
    }

    /// Acquires the given stripes (any order, duplicates allowed), all or none.
    pub(crate) fn lock_stripes(
        &self,
        stripes: Vec<(usize, Mode)>,
        opts: LockOptions,
    ) -> Result<ManyGuard<&Self>> {
        let held = self.take_planned(&plan_of(stripes), self.want(&opts), opts.wait)?;
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
}

/// Stripe numbers (any order, duplicates allowed) as a canonical plan.
fn plan_of(stripes: Vec<(usize, Mode)>) -> Plan {
    let mut plan: Plan = stripes.into_iter().map(|(s, m)| (s as u64, m)).collect();
    many::plan_in_place(&mut plan);
    plan
}

impl StripeTable {
    fn build(stripes: usize, hasher: StripeHashBuilder, policy: Policy) -> Result<Self> {
        if stripes == 0 {
            return Err(Error::InvalidArgument("stripes must be at least 1"));
        }
        if stripes > StripedLock::MAX_STRIPES {
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

    /// The stripe `key` maps to.
    #[inline]
    fn stripe_of<K: Hash + ?Sized>(&self, key: &K) -> usize {
        hash_of(&self.hasher, key) as usize & self.mask
    }

    /// The stripe numbered `stripe` (which must be in range) as a guarded entry.
    #[inline]
    fn guarded_of(&self, stripe: usize) -> RawLockEntry<'_> {
        RawLockEntry {
            lock: &self.stripes[stripe],
            policy: self.policy,
        }
    }

    /// The stripe of a hash: `hash & mask` is always in range.
    #[inline]
    fn stripe_at(&self, stripe: usize) -> &RawLock {
        debug_assert!(stripe < self.stripes.len());
        // SAFETY: every caller passes `hash & self.mask` (or a number checked against the
        // length), and there are `mask + 1` stripes.
        unsafe { self.stripes.get_unchecked(stripe & self.mask) }
    }
}

// The table's types are the crate's own (see `front::table::Table`).
#[allow(private_interfaces, private_bounds)]
impl Table for StripeTable {
    type Word = RawLock;
    type Guarded<'a>
        = RawLockEntry<'a>
    where
        Self: 'a;
    const NAME: &'static str = "StripeGuard";

    #[inline]
    fn entry(stripe: &RawLock) -> &crate::entry::Entry {
        &stripe.entry
    }

    #[inline]
    fn guarded<'a>(&'a self, stripe: &'a RawLock) -> RawLockEntry<'a> {
        RawLockEntry {
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
    fn word_if(&self, place: u64) -> Option<&RawLock> {
        usize::try_from(place)
            .ok()
            .and_then(|s| self.stripes.get(s))
            .map(|padded| &**padded)
    }

    #[inline]
    fn policy(&self) -> Policy {
        self.policy
    }

    fn take_place(&self, place: u64, want: &Want, wait: Wait) -> Result<Grant> {
        guarded::acquire(&self.guarded(self.word(place)?), want, wait)
    }
}

impl LockTable for StripeTable {}

#[allow(private_interfaces, private_bounds)]
impl<Q: Hash + ?Sized> Find<Q> for StripeTable {
    #[inline]
    fn place_of(&self, key: &Q) -> Option<u64> {
        Some(self.stripe_of(key) as u64)
    }

    fn with_key_locked<R>(
        &self,
        key: &Q,
        f: impl FnOnce(&crate::entry::Entry, &mut SlowState, &Policy, &mut Wakes) -> R,
    ) -> Option<R> {
        Some(guarded::with_locked(
            &self.guarded_of(self.stripe_of(key)),
            f,
        ))
    }
}

#[allow(private_interfaces, private_bounds)]
impl<Q: Hash + ?Sized> Take<Q> for StripeTable {
    /// The key's stripe.
    type Found = usize;

    #[inline]
    fn find(&self, key: &Q) -> usize {
        self.stripe_of(key)
    }

    #[inline]
    fn take_fast(&self, stripe: usize, _key: &Q, mode: Mode) -> Option<(&RawLock, u64)> {
        let word = self.stripe_at(stripe);
        let fence = word.entry.try_fast(mode, self.policy.fifo)?;
        Some((word, fence))
    }

    #[inline]
    fn place_found(&self, stripe: usize, _word: &RawLock) -> u64 {
        stripe as u64
    }

    fn take_slow(
        &self,
        stripe: usize,
        _key: &Q,
        want: &Want,
        wait: Wait,
    ) -> Result<(&RawLock, Grant)> {
        let grant = guarded::acquire(&self.guarded_of(stripe), want, wait)?;
        Ok((self.stripe_at(stripe), grant))
    }

    #[inline]
    fn reserve(&self, stripe: usize, _key: &Q) -> u64 {
        stripe as u64
    }

    fn steal(&self, stripe: usize, _key: &Q, want: &Want) -> (&RawLock, Grant) {
        let grant = guarded::with_locked(&self.guarded_of(stripe), |e, slow, _, _| {
            e.steal_locked(slow, want)
        });
        (self.stripe_at(stripe), grant)
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

//! [`Locks`]: the public API of the in-process keyed locks, written once over a table of lock
//! words, as `lock_api` writes `Mutex<R, T>` once over a raw mutex. [`KeyPool`] is `Locks` over
//! a pool's slots and [`StripedLock`] is `Locks` over fixed stripes; a method added here is a
//! method of both.
//!
//! [`KeyPool`]: crate::KeyPool
//! [`StripedLock`]: crate::StripedLock

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use super::table::{Find, Table, Take};
use super::{
    AcquireFuture, FindKey, Held, LockFuture, LockGuard, LockTable, ManyAcquireFuture, ManyGuard,
    ManyLockFuture, One, Plan, TakeKey, release_at,
};
use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner, Wait, Want};
use crate::entry::{Entry, GuardHold, Hold, Policy, SlowState};
use crate::error::{Error, Result};
use crate::guarded::plain;
use crate::many;
use crate::wait::{Grant, Wakes};

/// Keyed locks over the table `T`: every key's lock has both modes, a fence that rises with
/// each exclusive acquisition, leases, owners (when reentrant) and force-unlock, and every
/// acquire comes blocking, try, timed and async, for one key or several at once.
///
/// The table decides what a key's lock is: [`KeyPool`](crate::KeyPool) (`Locks` over
/// [`PoolTable`](crate::PoolTable)) gives each key held or awaited a lock of its own, and
/// [`StripedLock`](crate::StripedLock) (`Locks` over [`StripeTable`](crate::StripeTable))
/// maps each key to one of a fixed number of stripes, which keys may share. Below, "`key`'s
/// lock" means the key's slot in a pool and the key's stripe in a striped lock.
///
/// ```
/// use keylock_core::{KeyPool, StripedLock};
/// let pool: KeyPool<String> = KeyPool::new();
/// let stripes = StripedLock::new(64).unwrap();
/// let (a, b) = (pool.lock("k"), stripes.lock("k")); // the same API over two tables
/// assert!(pool.try_lock("k").is_err() && stripes.try_lock("k").is_err());
/// drop((a, b));
/// ```
pub struct Locks<T> {
    pub(crate) table: T,
}

impl<T: fmt::Debug> fmt::Debug for Locks<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.table.fmt(f)
    }
}

/// A plain grant taken on a fast path.
#[inline]
fn fast_grant(fence: u64) -> Grant {
    Grant {
        fence,
        ticket: 0,
        lease_until: None,
        reentered: false,
    }
}

impl<T: LockTable> Locks<T> {
    /// `want` as this lock object serves it (owners only matter to a reentrant one).
    #[inline]
    pub(crate) fn want(&self, opts: &LockOptions) -> Want {
        self.table.policy().normalize(opts.want())
    }

    /// Whether the locks are reentrant.
    pub fn is_reentrant(&self) -> bool {
        self.table.policy().reentrant
    }

    /// `key`'s lock acquired for `want`, waiting as `wait` says.
    #[inline]
    fn acquire<Q: ?Sized>(&self, key: &Q, want: &Want, wait: Wait) -> Result<(&T::Word, Grant)>
    where
        T: TakeKey<Q>,
    {
        let found = self.table.find(key);
        if want.is_plain() {
            if let Some((word, fence)) = self.table.take_fast(found, key, want.mode) {
                return Ok((word, fast_grant(fence)));
            }
        } else if want.is_plain_units()
            && let Some((word, fence)) = self.table.take_fast_units(found, key, want.units)
        {
            return Ok((word, fast_grant(fence)));
        }
        self.table.take_slow(found, key, want, wait)
    }

    /// Blocks until `key`'s lock is held in `mode` (plain: no lease, no owner).
    #[inline]
    fn lock_plain<P, Q>(&self, handle: P, key: &Q, mode: Mode) -> LockGuard<P>
    where
        P: Deref<Target = Self>,
        Q: ?Sized,
        T: TakeKey<Q>,
    {
        let found = self.table.find(key);
        if let Some((word, fence)) = self.table.take_fast(found, key, mode) {
            return LockGuard::plain(handle, word, mode, fence);
        }
        // The slow path returns the word and the record, and the guard is made here: with the
        // slow path making it, StripedLock's loop (bench/before_after.py) took 72 instructions
        // against 66.
        let (word, rec) = self.lock_plain_slow(found, key, mode);
        LockGuard::of_record(handle, word, rec)
    }

    #[cold]
    fn lock_plain_slow<Q>(
        &self,
        found: <T as Take<Q>>::Found,
        key: &Q,
        mode: Mode,
    ) -> (&T::Word, GuardHold)
    where
        Q: ?Sized,
        T: TakeKey<Q>,
    {
        let want = plain(mode);
        match self.table.take_slow(found, key, &want, Wait::Forever) {
            Ok((word, grant)) => (word, GuardHold::of(&want, grant)),
            // A plain untimed acquire has no way to fail.
            Err(e) => unreachable!("an untimed plain acquire failed: {e}"),
        }
    }

    /// A semaphore's `units` of `key` (no lease), waiting as `wait` says: its fast path, then
    /// the slow path, which also refuses a weight the table's policy does not take.
    #[inline]
    pub(crate) fn lock_units<Q: ?Sized>(
        &self,
        key: &Q,
        units: u32,
        wait: Wait,
    ) -> Result<LockGuard<&Self>>
    where
        T: TakeKey<Q>,
    {
        let found = self.table.find(key);
        if let Some(guard) = self.take_units_fast(found, key, units) {
            return Ok(guard);
        }
        self.lock_units_slow(found, key, units, wait)
    }

    /// The fast path of [`lock_units`](Self::lock_units) alone: a semaphore's `units` of a
    /// free `key` with one compare-and-swap, or `None` (take the full path).
    #[inline]
    pub(crate) fn try_acquire_fast_units<Q: ?Sized>(
        &self,
        key: &Q,
        units: u32,
    ) -> Option<Acquisition>
    where
        T: TakeKey<Q>,
    {
        let found = self.table.find(key);
        Some(self.take_units_fast(found, key, units)?.into_acquisition())
    }

    /// `units` of the key `found` with one compare-and-swap of its lock word, if that alone
    /// grants them: the fast half of [`lock_units`](Self::lock_units) and all of
    /// [`try_acquire_fast_units`](Self::try_acquire_fast_units).
    #[inline]
    fn take_units_fast<Q: ?Sized>(
        &self,
        found: <T as Take<Q>>::Found,
        key: &Q,
        units: u32,
    ) -> Option<LockGuard<&Self>>
    where
        T: TakeKey<Q>,
    {
        let (word, fence) = self.table.take_fast_units(found, key, units)?;
        let shape = crate::entry::shape(Mode::Shared, units);
        Some(LockGuard::plain_at(
            self,
            std::ptr::NonNull::from(word),
            shape,
            fence,
        ))
    }

    #[cold]
    fn lock_units_slow<Q: ?Sized>(
        &self,
        found: <T as Take<Q>>::Found,
        key: &Q,
        units: u32,
        wait: Wait,
    ) -> Result<LockGuard<&Self>>
    where
        T: TakeKey<Q>,
    {
        let want = self.want(&LockOptions::new().weight(units));
        let (word, grant) = self.table.take_slow(found, key, &want, wait)?;
        Ok(LockGuard::new(self, word, &want, grant))
    }

    /// `key`'s lock acquired as `opts` says, guarded through `handle`.
    #[inline]
    fn lock_with_handle<P, Q>(&self, handle: P, key: &Q, opts: LockOptions) -> Result<LockGuard<P>>
    where
        P: Deref<Target = Self>,
        Q: ?Sized,
        T: TakeKey<Q>,
    {
        let want = self.want(&opts);
        let (word, grant) = self.acquire(key, &want, opts.wait)?;
        Ok(LockGuard::new(handle, word, &want, grant))
    }

    // ---- exclusive ----

    /// Runs `f` while holding `key`'s lock exclusively, and releases it after `f` returns (or
    /// panics): the closure form of "one call at a time per key".
    ///
    /// ```
    /// use keylock_core::KeyPool;
    /// let pool: KeyPool<String> = KeyPool::new();
    /// let balance = pool.with_lock("acct:7", || 40 + 2);
    /// assert_eq!(balance, 42);
    /// assert!(!pool.is_locked("acct:7"));
    /// ```
    pub fn with_lock<Q: ?Sized, R>(&self, key: &Q, f: impl FnOnce() -> R) -> R
    where
        T: TakeKey<Q>,
    {
        let _guard = self.lock(key);
        f()
    }

    /// Blocks until `key`'s lock is held exclusively.
    #[inline]
    pub fn lock<Q: ?Sized>(&self, key: &Q) -> LockGuard<&Self>
    where
        T: TakeKey<Q>,
    {
        self.lock_plain(self, key, Mode::Exclusive)
    }

    /// Takes `key`'s lock exclusively if it is free; `Err(WouldBlock)` otherwise.
    #[inline]
    pub fn try_lock<Q: ?Sized>(&self, key: &Q) -> Result<LockGuard<&Self>>
    where
        T: TakeKey<Q>,
    {
        self.lock_with(key, LockOptions::new().wait(Wait::No))
    }

    /// Waits at most `timeout` for `key`'s lock; `Err(TimedOut)` when it runs out.
    pub fn try_lock_for<Q: ?Sized>(&self, key: &Q, timeout: Duration) -> Result<LockGuard<&Self>>
    where
        T: TakeKey<Q>,
    {
        self.lock_with(key, LockOptions::new().wait(Wait::For(timeout)))
    }

    // ---- shared ----

    /// Blocks until `key`'s lock is held in shared mode (with any other shared holders). A
    /// shared request queued behind a waiting exclusive one waits for it (FIFO per lock).
    ///
    /// ```
    /// use keylock_core::KeyPool;
    /// let pool: KeyPool<String> = KeyPool::new();
    /// let a = pool.lock_shared("doc");
    /// let b = pool.lock_shared("doc");
    /// assert!(pool.try_lock("doc").is_err());
    /// assert_eq!(a.fence(), b.fence());
    /// ```
    #[inline]
    pub fn lock_shared<Q: ?Sized>(&self, key: &Q) -> LockGuard<&Self>
    where
        T: TakeKey<Q>,
    {
        self.lock_plain(self, key, Mode::Shared)
    }

    /// Takes `key`'s lock in shared mode if no exclusive holder or queued request is in the
    /// way; `Err(WouldBlock)` otherwise.
    pub fn try_lock_shared<Q: ?Sized>(&self, key: &Q) -> Result<LockGuard<&Self>>
    where
        T: TakeKey<Q>,
    {
        self.lock_with(key, LockOptions::new().shared().wait(Wait::No))
    }

    /// Waits at most `timeout` for `key`'s lock in shared mode.
    pub fn try_lock_shared_for<Q: ?Sized>(
        &self,
        key: &Q,
        timeout: Duration,
    ) -> Result<LockGuard<&Self>>
    where
        T: TakeKey<Q>,
    {
        self.lock_with(key, LockOptions::new().shared().wait(Wait::For(timeout)))
    }

    // ---- with options ----

    /// Acquires `key`'s lock as `opts` says: mode, lease, owner, how long to wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use keylock_core::{Error, KeyPool, LockOptions, Wait};
    /// let pool: KeyPool<String> = KeyPool::new();
    /// let g = pool.lock_with("job", LockOptions::new().lease(Duration::from_millis(20))).unwrap();
    /// // The holder never releases: the next acquirer takes over when the lease ends.
    /// let next = pool.lock_with("job", LockOptions::new().wait(Wait::For(Duration::from_secs(5)))).unwrap();
    /// assert!(next.fence() > g.fence());
    /// assert_eq!(g.release().unwrap_err(), Error::LeaseExpired);
    /// ```
    pub fn lock_with<Q: ?Sized>(&self, key: &Q, opts: LockOptions) -> Result<LockGuard<&Self>>
    where
        T: TakeKey<Q>,
    {
        self.lock_with_handle(self, key, opts)
    }

    /// Like [`lock_with`](Self::lock_with), for an `Arc`: the guard is `'static`.
    pub fn lock_with_owned<Q: ?Sized>(
        self: &Arc<Self>,
        key: &Q,
        opts: LockOptions,
    ) -> Result<LockGuard<Arc<Self>>>
    where
        T: TakeKey<Q>,
    {
        self.lock_with_handle(Arc::clone(self), key, opts)
    }

    /// Frees `key`'s lock whoever holds it and takes it exclusively as `opts` says (its lease
    /// and owner; it never waits), ahead of every queued waiter: what a force-unlock followed
    /// by an acquire would do, except that no waiter is served in between. The previous
    /// holders' acquisitions are stale, and the queue's head is served when this holder
    /// releases. `InvalidArgument` for a shared request.
    ///
    /// ```
    /// use keylock_core::{KeyPool, LockOptions};
    /// let pool: KeyPool<String> = KeyPool::new();
    /// let old = pool.lock("k").into_acquisition();
    /// let new = pool.steal_with("k", LockOptions::new()).unwrap();
    /// assert!(new.fence() > old.fence());
    /// assert!(pool.release(old).is_err()); // stale
    /// ```
    pub fn steal_with<Q: ?Sized>(&self, key: &Q, opts: LockOptions) -> Result<LockGuard<&Self>>
    where
        T: TakeKey<Q>,
    {
        let want = self.want(&opts);
        if want.mode != Mode::Exclusive {
            return Err(Error::InvalidArgument(
                "only an exclusive request may steal",
            ));
        }
        let (word, grant) = self.table.steal(self.table.find(key), key, &want);
        Ok(LockGuard::new(self, word, &want, grant))
    }

    // ---- records without guards ----

    /// Takes `key`'s lock in `mode` if its lock word alone allows it now, with one
    /// compare-and-swap: the record of a plain acquisition (no lease, no owner), or `None`,
    /// which changes nothing and means "take the full path" ([`lock_with`](Self::lock_with),
    /// [`KeyedLock::acquire`](crate::KeyedLock::acquire)): the lock is held or has waiters, or
    /// (in a pool) the key has no slot yet. Never waits and never panics.
    ///
    /// For front ends that keep a record rather than a guard (the C ABI): the uncontended case
    /// of [`lock`](Self::lock) / [`lock_shared`](Self::lock_shared) followed by
    /// [`into_acquisition`](LockGuard::into_acquisition), by the same rules, without building
    /// a guard. Release the record with [`release`](Self::release), or try
    /// [`try_release_fast`](Self::try_release_fast) first.
    ///
    /// ```
    /// use keylock_core::{KeyPool, Mode, StripedLock};
    /// let locks = StripedLock::new(8).unwrap();
    /// let acq = locks.try_acquire_fast("k", Mode::Exclusive).unwrap();
    /// assert!(locks.try_acquire_fast("k", Mode::Exclusive).is_none()); // held: full path
    /// assert!(locks.try_release_fast(acq).is_ok());
    /// assert!(!locks.is_locked("k"));
    /// let pool: KeyPool<String> = KeyPool::new();
    /// assert!(pool.try_acquire_fast("k", Mode::Exclusive).is_none()); // no slot yet
    /// drop(pool.lock("k")); // the key's slot is made on the full path
    /// assert!(pool.try_release_fast(pool.try_acquire_fast("k", Mode::Exclusive).unwrap()).is_ok());
    /// ```
    #[inline]
    pub fn try_acquire_fast<Q: ?Sized>(&self, key: &Q, mode: Mode) -> Option<Acquisition>
    where
        T: TakeKey<Q>,
    {
        self.try_acquire_fast_inlined(key, mode)
    }

    /// [`try_acquire_fast`](Self::try_acquire_fast), always inlined: for the trait's `acquire`,
    /// into which the compiler stopped inlining it for a pool of `KeyBuf` keys (a lock+release
    /// through `Arc<dyn KeyedLock>` took 379 instructions instead of 295: callgrind, the C
    /// suite's `rust_pool_trait` loop). Inlined everywhere, it made the bindings' calls through
    /// the trait's own `try_acquire_fast` a few nanoseconds slower (Python's uncontended
    /// `with pool.lock(k)` 192 -> 199 ns in two runs of its suite).
    #[inline(always)]
    pub(crate) fn try_acquire_fast_inlined<Q: ?Sized>(
        &self,
        key: &Q,
        mode: Mode,
    ) -> Option<Acquisition>
    where
        T: TakeKey<Q>,
    {
        let found = self.table.find(key);
        let (word, fence) = self.table.take_fast(found, key, mode)?;
        Some(Acquisition::plain(
            fence,
            self.table.place_found(found, word),
            mode,
        ))
    }

    /// Releases `acquisition` with one compare-and-swap if its lock word alone allows it (a
    /// plain, current hold of this lock object with no waiters to wake). Otherwise changes
    /// nothing and hands the record back, for [`release`](Self::release), which wakes waiters
    /// or says why it cannot release (`NotOwner`, `LeaseExpired`, `InvalidArgument`). Never
    /// panics.
    #[inline]
    pub fn try_release_fast(
        &self,
        acquisition: Acquisition,
    ) -> std::result::Result<(), Acquisition> {
        if self.release_fast(&acquisition) {
            Ok(())
        } else {
            Err(acquisition)
        }
    }

    /// The first step of [`try_release_fast`](Self::try_release_fast) alone: releases a plain
    /// exclusive `acquisition` whose lock word is exactly as its acquire left it, with one
    /// compare-and-swap and no call, and says whether it did. After `true` the record is spent:
    /// releasing it again is refused as stale (`NotOwner`), as for any released acquisition.
    /// `false` changes nothing (a shared hold, waiters to wake, a word the pool's eviction hand
    /// has marked...): `try_release_fast` or [`release`](Self::release) then does the rest.
    /// For a caller whose fast path must make no call, so as to need no stack frame (the C
    /// library's); by reference, so that no `Result` carrying the record is made and tested.
    ///
    /// ```
    /// use keylock_core::{Error, Mode, StripedLock};
    /// let locks = StripedLock::new(8).unwrap();
    /// let shared = locks.try_acquire_fast("k", Mode::Shared).unwrap();
    /// assert!(!locks.try_release_cas(&shared)); // a shared hold: not this step's
    /// assert!(locks.try_release_fast(shared).is_ok());
    /// let acq = locks.try_acquire_fast("k", Mode::Exclusive).unwrap();
    /// assert!(locks.try_release_cas(&acq));
    /// assert!(!locks.is_locked("k"));
    /// assert_eq!(locks.release(acq), Err(Error::NotOwner)); // spent
    /// ```
    #[inline]
    pub fn try_release_cas(&self, acquisition: &Acquisition) -> bool {
        acquisition.is_plain()
            && acquisition.mode == Mode::Exclusive
            && self
                .table
                .word_if(acquisition.at)
                .is_some_and(|word| T::entry(word).release_exclusive_cas(acquisition.fence))
    }

    /// [`try_release_cas`](Self::try_release_cas) of a semaphore's units: releases a plain
    /// hold of units that is its key's only one, with one compare-and-swap of the exact word
    /// its acquire left; `false` changes nothing (other holders, waiters, a lease, a stale
    /// record), and the full release does the rest.
    #[inline]
    pub(crate) fn try_release_cas_units(&self, acquisition: &Acquisition) -> bool {
        acquisition.is_plain_permit()
            && self.table.word_if(acquisition.at).is_some_and(|word| {
                T::entry(word).release_fast_units(acquisition.fence, acquisition.units)
            })
    }

    /// [`try_release_fast`](Self::try_release_fast) by reference: whether it released.
    #[inline]
    pub(crate) fn release_fast(&self, acq: &Acquisition) -> bool {
        acq.is_plain()
            && self
                .table
                .word_if(acq.at)
                .is_some_and(|word| T::entry(word).release_fast(acq.mode, acq.fence))
    }

    // ---- acquisitions ----

    /// Releases an acquisition handed out by [`LockGuard::into_acquisition`]. Refused with
    /// `NotOwner` (or `LeaseExpired`) when it is no longer current: released already,
    /// force-unlocked, or its lease ran out. Never touches another acquisition.
    pub fn release(&self, acquisition: Acquisition) -> Result<()> {
        let owner = acquisition.owner;
        self.release_as(acquisition, owner)
    }

    /// Like [`release`](Self::release), on behalf of `owner`: in a reentrant lock object,
    /// refused with `NotOwner` unless `owner` is the holder's owner (as `threading.RLock`
    /// refuses a release from another thread).
    pub fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
        super::release_acquisition(self, acquisition, owner)
    }

    /// Whether `acquisition` is still current.
    pub fn is_current(&self, acquisition: &Acquisition) -> bool {
        self.is_current_as(acquisition, acquisition.owner)
    }

    /// Whether `acquisition` is current and, in a reentrant lock object, held by `owner`
    /// (`threading.RLock`'s `_is_owned`).
    pub fn is_current_as(&self, acquisition: &Acquisition, owner: Option<Owner>) -> bool {
        super::acquisition_is_current(self, acquisition, owner)
    }

    /// Moves the end of `acquisition`'s lease to `lease` from now (and updates the record).
    /// `InvalidArgument` for an acquisition without a lease.
    pub fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        super::extend_acquisition(self, acquisition, lease)
    }

    // ---- whoever holds it ----

    /// Frees `key`'s lock whoever holds it (in either mode), advancing its fence: the holders'
    /// guards no longer release anything, and their explicit releases report `NotOwner`. For a
    /// lock left behind by a caller that will never release it. Returns whether it was held.
    ///
    /// ```
    /// use keylock_core::KeyPool;
    /// let pool: KeyPool<String> = KeyPool::new();
    /// let stale = pool.lock("k");
    /// assert!(pool.force_unlock("k"));
    /// let fresh = pool.lock("k");
    /// assert!(fresh.fence() > stale.fence());
    /// drop(stale);                      // releases nothing
    /// assert!(pool.is_locked("k"));
    /// ```
    pub fn force_unlock<Q: ?Sized>(&self, key: &Q) -> bool
    where
        T: FindKey<Q>,
    {
        self.table
            .with_key_locked(key, |entry, slow, policy, wakes| {
                entry.force_unlock_locked(slow, policy, wakes)
            })
            .unwrap_or(false)
    }

    /// Whether `key`'s lock is held (a snapshot; an ended lease does not count).
    pub fn is_locked<Q: ?Sized>(&self, key: &Q) -> bool
    where
        T: FindKey<Q>,
    {
        self.info(key).is_some()
    }

    /// Who holds `key`'s lock and how (a snapshot); `None` when free.
    ///
    /// ```
    /// use keylock_core::{KeyPool, Mode, StripedLock};
    /// let pool: KeyPool<u64> = KeyPool::new();
    /// let _g = pool.lock(&5);
    /// let info = pool.info(&5).unwrap();
    /// assert_eq!((info.mode, info.holders, info.waiters), (Mode::Exclusive, 1, 0));
    /// assert!(pool.info(&6).is_none());
    /// let locks = StripedLock::new(16).unwrap();
    /// let (_a, _b) = (locks.lock_shared("k"), locks.lock_shared("k"));
    /// assert_eq!(locks.info("k").unwrap().holders, 2);
    /// ```
    pub fn info<Q: ?Sized>(&self, key: &Q) -> Option<LockInfo>
    where
        T: FindKey<Q>,
    {
        self.table
            .with_key_locked(key, |entry, slow, policy, wakes| {
                entry.info_locked(slow, policy, wakes)
            })
            .flatten()
    }

    // ---- many keys ----

    /// The canonical plan of `keys`: their places in ascending order, each once with the
    /// strongest mode asked of it. A table that reserves gets a reservation per place (a
    /// duplicate's extra one is given back).
    pub(crate) fn plan<'k, Q, I>(&self, keys: I) -> Plan
    where
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = (&'k Q, Mode)>,
    {
        let reserved = keys
            .into_iter()
            .map(|(k, m)| (self.table.reserve(self.table.find(k), k), (), m));
        many::plan_with(reserved, |dup| self.unreserve_place(dup.lock))
            .into_iter()
            .map(|step| (step.lock, step.mode))
            .collect()
    }

    /// Drops a reservation of the word at `place` that will not be used.
    fn unreserve_place(&self, place: u64) {
        if let Ok(word) = self.table.word(place) {
            self.table.unreserve(word);
        }
    }

    /// Acquires the planned places in order; all or none (every reservation is used up).
    pub(crate) fn take_planned(
        &self,
        plan: &[(u64, Mode)],
        base: Want,
        wait: Wait,
    ) -> Result<Vec<Held>> {
        let wait = many::one_deadline(wait);
        let take = |&(place, mode): &(u64, Mode)| {
            let want = Want { mode, ..base };
            let grant = self.table.take_place(place, &want, wait)?;
            Ok((place, Hold::of(&want, grant), grant.lease_until))
        };
        let give_back = |(place, hold, _): Held| {
            let _ = release_at(self, place, &hold);
        };
        many::take_all(plan, take, give_back).map_err(|failed| {
            // The places after the failed one were reserved and never tried.
            for &(rest, _) in &plan[failed.at + 1..] {
                self.unreserve_place(rest);
            }
            failed.error
        })
    }

    /// Every one of `keys` acquired as `opts` says, guarded through `handle`.
    fn lock_many_handle<'k, P, Q, I>(
        &self,
        handle: P,
        keys: I,
        opts: LockOptions,
    ) -> Result<ManyGuard<P>>
    where
        P: Deref<Target = Self>,
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = (&'k Q, Mode)>,
    {
        let plan = self.plan(keys);
        let held = self.take_planned(&plan, self.want(&opts), opts.wait)?;
        Ok(ManyGuard::new(handle, held))
    }

    /// Blocks until every one of `keys` is held exclusively. Deadlock-free: their locks are
    /// taken in one canonical order, each once even if several keys name it.
    pub fn lock_many<'k, Q, I>(&self, keys: I) -> ManyGuard<&Self>
    where
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = &'k Q>,
    {
        let all = keys.into_iter().map(|k| (k, Mode::Exclusive));
        match self.lock_many_handle(self, all, LockOptions::new()) {
            Ok(guard) => guard,
            Err(e) => unreachable!("an untimed plain acquire failed: {e}"),
        }
    }

    /// Takes every one of `keys` exclusively if all are free, or none; `Err(WouldBlock)`
    /// otherwise.
    pub fn try_lock_many<'k, Q, I>(&self, keys: I) -> Result<ManyGuard<&Self>>
    where
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = &'k Q>,
    {
        let opts = LockOptions::new().wait(Wait::No);
        self.lock_many_with(keys.into_iter().map(|k| (k, Mode::Exclusive)), opts)
    }

    /// Waits at most `timeout` in all for every one of `keys`: all or none.
    pub fn try_lock_many_for<'k, Q, I>(
        &self,
        keys: I,
        timeout: Duration,
    ) -> Result<ManyGuard<&Self>>
    where
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = &'k Q>,
    {
        let opts = LockOptions::new().wait(Wait::For(timeout));
        self.lock_many_with(keys.into_iter().map(|k| (k, Mode::Exclusive)), opts)
    }

    /// Acquires every one of `keys`, each in its own mode, as `opts` says (its mode is
    /// ignored; lease, owner and wait apply to every key): all or none, deadlock-free.
    ///
    /// ```
    /// use keylock_core::{KeyPool, LockOptions, Mode};
    /// let pool: KeyPool<String> = KeyPool::new();
    /// let g = pool.lock_many_with([("src", Mode::Shared), ("dst", Mode::Exclusive)], LockOptions::new()).unwrap();
    /// assert_eq!(g.len(), 2);
    /// assert!(pool.try_lock_shared("src").is_ok());
    /// assert!(pool.try_lock_shared("dst").is_err());
    /// ```
    pub fn lock_many_with<'k, Q, I>(&self, keys: I, opts: LockOptions) -> Result<ManyGuard<&Self>>
    where
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = (&'k Q, Mode)>,
    {
        self.lock_many_handle(self, keys, opts)
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
    pub fn lock_many_with_owned<'k, Q, I>(
        self: &Arc<Self>,
        keys: I,
        opts: LockOptions,
    ) -> Result<ManyGuard<Arc<Self>>>
    where
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = (&'k Q, Mode)>,
    {
        self.lock_many_handle(Arc::clone(self), keys, opts)
    }

    // ---- futures ----

    /// The start of an async acquire: `key`'s lock is taken now if its fast path can, else
    /// its place is kept (a pool reserves the slot) for the future's attempt and wait.
    #[inline(always)]
    fn start<P, Q>(&self, handle: P, key: &Q, want: Want, wait: Wait) -> One<P>
    where
        P: Deref<Target = Self>,
        Q: ?Sized,
        T: TakeKey<Q>,
    {
        let found = self.table.find(key);
        if want.is_plain() {
            if let Some((word, fence)) = self.table.take_fast(found, key, want.mode) {
                return One::taken(handle, word, want.mode, fence);
            }
        } else if want.is_plain_units() {
            return self.start_units(handle, found, key, want, wait);
        }
        let place = self.table.reserve(found, key);
        One::after_fast_path(handle, place, want, wait)
    }

    /// [`start`](Self::start) for a semaphore's plain acquire (out of line, so that a lock's
    /// async path stays as it was).
    #[inline(never)]
    fn start_units<P, Q>(
        &self,
        handle: P,
        found: <T as Take<Q>>::Found,
        key: &Q,
        want: Want,
        wait: Wait,
    ) -> One<P>
    where
        P: Deref<Target = Self>,
        Q: ?Sized,
        T: TakeKey<Q>,
    {
        if let Some((word, fence)) = self.table.take_fast_units(found, key, want.units) {
            return One::taken_units(handle, word, want.units, fence);
        }
        let place = self.table.reserve(found, key);
        One::after_fast_path(handle, place, want, wait)
    }

    /// The start of an async acquire of the word at `place`, found by the caller (the
    /// [`KeyedLock`](crate::KeyedLock) trait's form), in a table whose words need no
    /// reservation.
    pub(crate) fn start_at<P>(&self, handle: P, place: u64, want: Want, wait: Wait) -> One<P>
    where
        P: Deref<Target = Self>,
    {
        if want.is_plain()
            && let Ok(word) = self.table.word(place)
            && let Some(fence) = T::entry(word).try_fast(want.mode, self.table.policy().fifo)
        {
            return One::taken(handle, word, want.mode, fence);
        }
        One::after_fast_path(handle, place, want, wait)
    }

    /// A future that resolves to `key`'s exclusive guard, waiting in the same queue as
    /// blocking callers.
    ///
    /// The key is looked up when this is called: a free key is taken at once (the future is
    /// then ready on its first poll), and a held one gets its place kept, so the future owns
    /// no copy of the key. Dropping the future releases whichever it holds.
    #[inline]
    pub fn lock_async<Q: ?Sized>(&self, key: &Q) -> LockFuture<&Self>
    where
        T: TakeKey<Q>,
    {
        LockFuture::new(self.start(self, key, Want::EXCLUSIVE, Wait::Forever))
    }

    /// Like [`lock_async`](Self::lock_async), for an `Arc`: the future is `'static`.
    #[inline]
    pub fn lock_async_owned<Q: ?Sized>(self: &Arc<Self>, key: &Q) -> LockFuture<Arc<Self>>
    where
        T: TakeKey<Q>,
    {
        LockFuture::new(self.start(Arc::clone(self), key, Want::EXCLUSIVE, Wait::Forever))
    }

    /// A future that resolves to a shared guard of `key`'s lock.
    #[inline]
    pub fn lock_shared_async<Q: ?Sized>(&self, key: &Q) -> LockFuture<&Self>
    where
        T: TakeKey<Q>,
    {
        LockFuture::new(self.start(self, key, Want::SHARED, Wait::Forever))
    }

    /// Like [`lock_shared_async`](Self::lock_shared_async), for an `Arc`.
    #[inline]
    pub fn lock_shared_async_owned<Q: ?Sized>(self: &Arc<Self>, key: &Q) -> LockFuture<Arc<Self>>
    where
        T: TakeKey<Q>,
    {
        LockFuture::new(self.start(Arc::clone(self), key, Want::SHARED, Wait::Forever))
    }

    /// A future for `key`'s lock as `opts` says; it resolves to `Err(TimedOut)` when its wait
    /// runs out (keylock wakes it at that time).
    #[inline]
    pub fn lock_with_async<Q: ?Sized>(&self, key: &Q, opts: LockOptions) -> AcquireFuture<&Self>
    where
        T: TakeKey<Q>,
    {
        AcquireFuture::new(self.start(self, key, self.want(&opts), opts.wait))
    }

    /// Like [`lock_with_async`](Self::lock_with_async), for an `Arc`: the future is `'static`.
    #[inline]
    pub fn lock_with_async_owned<Q: ?Sized>(
        self: &Arc<Self>,
        key: &Q,
        opts: LockOptions,
    ) -> AcquireFuture<Arc<Self>>
    where
        T: TakeKey<Q>,
    {
        let want = self.want(&opts);
        AcquireFuture::new(self.start(Arc::clone(self), key, want, opts.wait))
    }

    /// A future that resolves once all `keys` are held exclusively, in the canonical order.
    pub fn lock_many_async<'k, Q, I>(&self, keys: I) -> ManyLockFuture<&Self>
    where
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = &'k Q>,
    {
        ManyLockFuture::new(
            self,
            self.plan(keys.into_iter().map(|k| (k, Mode::Exclusive))),
        )
    }

    /// Like [`lock_many_async`](Self::lock_many_async), for an `Arc`: the future is `'static`.
    pub fn lock_many_async_owned<'k, Q, I>(self: &Arc<Self>, keys: I) -> ManyLockFuture<Arc<Self>>
    where
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = &'k Q>,
    {
        let plan = self.plan(keys.into_iter().map(|k| (k, Mode::Exclusive)));
        ManyLockFuture::new(Arc::clone(self), plan)
    }

    /// A future for all `keys`, each in its own mode, as `opts` says.
    pub fn lock_many_with_async<'k, Q, I>(
        &self,
        keys: I,
        opts: LockOptions,
    ) -> ManyAcquireFuture<&Self>
    where
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = (&'k Q, Mode)>,
    {
        ManyAcquireFuture::new(self, self.plan(keys), self.want(&opts), opts.wait)
    }

    /// Like [`lock_many_with_async`](Self::lock_many_with_async), for an `Arc`.
    pub fn lock_many_with_async_owned<'k, Q, I>(
        self: &Arc<Self>,
        keys: I,
        opts: LockOptions,
    ) -> ManyAcquireFuture<Arc<Self>>
    where
        Q: ?Sized + 'k,
        T: TakeKey<Q>,
        I: IntoIterator<Item = (&'k Q, Mode)>,
    {
        let (plan, want) = (self.plan(keys), self.want(&opts));
        ManyAcquireFuture::new(Arc::clone(self), plan, want, opts.wait)
    }
}

// Guards and futures hold a `&Locks<T>` or an `Arc<Locks<T>>`: the front is a table too, the
// one it wraps.
#[allow(private_interfaces, private_bounds)]
impl<T: LockTable> Table for Locks<T> {
    type Word = T::Word;
    type Guarded<'a>
        = T::Guarded<'a>
    where
        Self: 'a;
    const NAME: &'static str = T::NAME;

    #[inline]
    fn entry(word: &T::Word) -> &Entry {
        T::entry(word)
    }

    #[inline]
    fn guarded<'a>(&'a self, word: &'a T::Word) -> T::Guarded<'a> {
        self.table.guarded(word)
    }

    #[inline]
    fn place(&self, word: &T::Word) -> u64 {
        self.table.place(word)
    }

    #[inline]
    fn word_if(&self, place: u64) -> Option<&T::Word> {
        self.table.word_if(place)
    }

    #[inline]
    fn unreserve(&self, word: &T::Word) {
        self.table.unreserve(word)
    }

    #[inline]
    fn policy(&self) -> Policy {
        self.table.policy()
    }

    fn take_place(&self, place: u64, want: &Want, wait: Wait) -> Result<Grant> {
        self.table.take_place(place, want, wait)
    }
}

impl<T: LockTable> LockTable for Locks<T> {}

#[allow(private_interfaces, private_bounds)]
impl<T: LockTable + Find<Q>, Q: ?Sized> Find<Q> for Locks<T> {
    #[inline]
    fn place_of(&self, key: &Q) -> Option<u64> {
        self.table.place_of(key)
    }

    fn with_key_locked<R>(
        &self,
        key: &Q,
        f: impl FnOnce(&Entry, &mut SlowState, &Policy, &mut Wakes) -> R,
    ) -> Option<R> {
        self.table.with_key_locked(key, f)
    }
}

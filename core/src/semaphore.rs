//! [`KeyedSemaphore`]: at most `permits` units held per key, in one process.
//!
//! A keyed semaphore is a [`KeyPool`] whose lock words follow the semaphore's rule (see
//! [`entry`](crate::entry)'s module docs): the pool's table, the one front's acquires, guards,
//! futures and multi-key plan, and a different rule on the word. This file only names the
//! operations as a semaphore's users expect them, checks the permits, and serves the
//! [`KeyedLock`] trait, through which the bindings reach it.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::time::Duration;

use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner, Wait};
use crate::entry::Policy;
use crate::error::{Error, Result};
use crate::front::{AcquireFuture, LockGuard, ManyAcquireFuture, ManyGuard};
use crate::front::{FindKey, TakeKey};
use crate::hash::DefaultHashBuilder;
use crate::local::ByteStringKey;
use crate::many;
use crate::pool::{KeyPool, PoolBuilder, PoolStats, PoolTable};
use crate::scope::{self, KeySpace, KeyedLock, LockKey};
use crate::stats::ScopeStats;

/// One acquisition of a [`KeyedSemaphore`]'s units, released on drop. It is the front's guard:
/// [`fence`](LockGuard::fence), [`extend`](LockGuard::extend),
/// [`into_acquisition`](LockGuard::into_acquisition) and the rest work as for a lock.
pub type Permit<'a, K = Vec<u8>, S = DefaultHashBuilder> = LockGuard<&'a KeyPool<K, S>>;

/// A [`Permit`] that owns its semaphore (from the `_owned` async forms).
pub type OwnedPermit<K = Vec<u8>, S = DefaultHashBuilder> = LockGuard<Arc<KeyPool<K, S>>>;

/// At most `permits` units held per key: per tenant, per API token, per downstream host.
///
/// - An acquire takes `weight` units of one key (default 1; 0 or more than `permits` is
///   `InvalidArgument`), and waits while they do not fit.
/// - Strict FIFO per key: a request waits behind every request queued before it, so a heavy
///   request at the head is never starved by light ones arriving after it (light requests do
///   not pass it; that is what would starve it).
/// - Every acquisition has a fence of its own, rising per key across all acquisitions,
///   force-releases and leases; a release goes by acquisition, and a stale one is refused.
/// - Memory follows the keys held or awaited, as in [`KeyPool`].
///
/// ```
/// use keylock_core::{Error, KeyedSemaphore};
/// let sem: KeyedSemaphore<String> = KeyedSemaphore::new(3).unwrap();
/// let a = sem.acquire("gpu:0", 2).unwrap();
/// let b = sem.try_acquire("gpu:0", 1).unwrap();
/// assert_eq!(sem.try_acquire("gpu:0", 1).unwrap_err(), Error::WouldBlock); // 3 of 3 held
/// assert!(b.fence() > a.fence());                                          // fence per permit
/// assert_eq!(sem.info("gpu:0").unwrap().units, 3);
/// drop((a, b));
/// assert!(sem.info("gpu:0").is_none());
/// ```
pub struct KeyedSemaphore<K = Vec<u8>, S = DefaultHashBuilder> {
    pool: Arc<KeyPool<K, S>>,
    permits: u32,
}

impl<K, S> fmt::Debug for KeyedSemaphore<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedSemaphore")
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

/// Builds a [`KeyedSemaphore`]: its permits, shards, retained keys and hasher.
#[derive(Debug, Clone)]
pub struct SemaphoreBuilder<S = DefaultHashBuilder> {
    pool: PoolBuilder<S>,
    permits: u32,
}

impl<S> SemaphoreBuilder<S> {
    /// The number of shards (as [`PoolBuilder::shards`]).
    pub fn shards(self, shards: usize) -> Self {
        Self {
            pool: self.pool.shards(shards),
            ..self
        }
    }

    /// How many released keys stay indexed (as [`PoolBuilder::retain`]).
    pub fn retain(self, keys: usize) -> Self {
        Self {
            pool: self.pool.retain(keys),
            ..self
        }
    }

    /// The hasher for the keys.
    pub fn hasher<T: BuildHasher>(self, hasher: T) -> SemaphoreBuilder<T> {
        SemaphoreBuilder {
            pool: self.pool.hasher(hasher),
            permits: self.permits,
        }
    }

    /// The semaphore; `InvalidArgument` for 0 permits or more than
    /// [`KeyedSemaphore::MAX_PERMITS`].
    pub fn build<K: Hash + Eq>(self) -> Result<KeyedSemaphore<K, S>>
    where
        S: BuildHasher,
    {
        check_permits(self.permits)?;
        Ok(KeyedSemaphore {
            pool: Arc::new(self.pool.permits(self.permits).build()),
            permits: self.permits,
        })
    }
}

fn check_permits(permits: u32) -> Result<()> {
    if permits == 0 || permits > Policy::MAX_PERMITS {
        return Err(Error::InvalidArgument(
            "a semaphore's permits are at least 1 and at most 32767",
        ));
    }
    Ok(())
}

impl<K: Hash + Eq> KeyedSemaphore<K> {
    /// A semaphore with `permits` units per key.
    pub fn new(permits: u32) -> Result<Self> {
        KeyedSemaphore::builder(permits).build()
    }
}

impl KeyedSemaphore {
    /// A builder for a semaphore with `permits` units per key.
    pub fn builder(permits: u32) -> SemaphoreBuilder {
        SemaphoreBuilder {
            pool: KeyPool::builder(),
            permits,
        }
    }
}

/// The options of an acquire of `weight` units that waits as `wait` says.
fn weighted(weight: u32, wait: Wait) -> LockOptions {
    LockOptions::new().weight(weight).wait(wait)
}

impl<K: Hash + Eq, S: BuildHasher> KeyedSemaphore<K, S> {
    /// The most permits a semaphore can have per key.
    pub const MAX_PERMITS: u32 = Policy::MAX_PERMITS;

    /// The units per key.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Blocks until `weight` units of `key` are held. Fails only for a bad weight.
    ///
    /// Inline, as `KeyPool::lock` is: out of line, its permit was returned through memory and
    /// read back for the release (bench/semaphore.py's acquire(1)+release: 171 instructions,
    /// 136 inline).
    #[inline]
    pub fn acquire<Q>(&self, key: &Q, weight: u32) -> Result<Permit<'_, K, S>>
    where
        PoolTable<K, S>: TakeKey<Q>,
        Q: ?Sized,
    {
        self.pool.lock_units(key, weight, Wait::Forever)
    }

    /// `weight` units of `key` now, or `WouldBlock`.
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, weight: u32) -> Result<Permit<'_, K, S>>
    where
        PoolTable<K, S>: TakeKey<Q>,
        Q: ?Sized,
    {
        self.pool.lock_units(key, weight, Wait::No)
    }

    /// `weight` units of `key` within `timeout`, or `TimedOut`.
    pub fn try_acquire_for<Q>(
        &self,
        key: &Q,
        weight: u32,
        timeout: Duration,
    ) -> Result<Permit<'_, K, S>>
    where
        PoolTable<K, S>: TakeKey<Q>,
        Q: ?Sized,
    {
        self.pool
            .lock_with(key, weighted(weight, Wait::For(timeout)))
    }

    /// Units of `key` as `opts` says: its `weight`, `lease` and `wait` (a semaphore has no
    /// modes and no owners: `mode` and `owner` are ignored).
    pub fn acquire_with<Q>(&self, key: &Q, opts: LockOptions) -> Result<Permit<'_, K, S>>
    where
        PoolTable<K, S>: TakeKey<Q>,
        Q: ?Sized,
    {
        self.pool.lock_with(key, opts)
    }

    /// Runs `f` while holding `weight` units of `key`, and releases them after it, also when
    /// it panics.
    ///
    /// ```
    /// use keylock_core::KeyedSemaphore;
    /// let sem: KeyedSemaphore<u64> = KeyedSemaphore::new(2).unwrap();
    /// let n = sem.with_permit(&7, 1, || 40 + 2).unwrap();
    /// assert_eq!(n, 42);
    /// ```
    pub fn with_permit<Q, R>(&self, key: &Q, weight: u32, f: impl FnOnce() -> R) -> Result<R>
    where
        PoolTable<K, S>: TakeKey<Q>,
        Q: ?Sized,
    {
        let _permit = self.acquire(key, weight)?;
        Ok(f())
    }

    /// A future for `weight` units of `key`; dropping it cancels the wait exactly.
    pub fn acquire_async<Q>(&self, key: &Q, weight: u32) -> AcquireFuture<&KeyPool<K, S>>
    where
        PoolTable<K, S>: TakeKey<Q>,
        Q: ?Sized,
    {
        self.pool
            .lock_with_async(key, weighted(weight, Wait::Forever))
    }

    /// A future for units of `key` as `opts` says.
    pub fn acquire_with_async<Q>(&self, key: &Q, opts: LockOptions) -> AcquireFuture<&KeyPool<K, S>>
    where
        PoolTable<K, S>: TakeKey<Q>,
        Q: ?Sized,
    {
        self.pool.lock_with_async(key, opts)
    }

    /// Like [`acquire_with_async`](Self::acquire_with_async), but `'static`: the future and
    /// its permit own the semaphore.
    pub fn acquire_with_async_owned<Q>(
        &self,
        key: &Q,
        opts: LockOptions,
    ) -> AcquireFuture<Arc<KeyPool<K, S>>>
    where
        PoolTable<K, S>: TakeKey<Q>,
        Q: ?Sized,
    {
        self.pool.lock_with_async_owned(key, opts)
    }

    /// `opts.weight` units of every one of `keys`, all or none, in the one canonical order
    /// (deadlock-free); a key named twice is taken once.
    pub fn acquire_many<'k, Q, I>(
        &self,
        keys: I,
        opts: LockOptions,
    ) -> Result<ManyGuard<&KeyPool<K, S>>>
    where
        PoolTable<K, S>: TakeKey<Q>,
        Q: ?Sized + 'k,
        I: IntoIterator<Item = &'k Q>,
    {
        self.pool
            .lock_many_with(keys.into_iter().map(|k| (k, Mode::Shared)), opts)
    }

    /// [`acquire_many`](Self::acquire_many) as a future.
    pub fn acquire_many_async<'k, Q, I>(
        &self,
        keys: I,
        opts: LockOptions,
    ) -> ManyAcquireFuture<&KeyPool<K, S>>
    where
        PoolTable<K, S>: TakeKey<Q>,
        Q: ?Sized + 'k,
        I: IntoIterator<Item = &'k Q>,
    {
        self.pool
            .lock_many_with_async(keys.into_iter().map(|k| (k, Mode::Shared)), opts)
    }

    /// Releases an acquisition handed out by [`LockGuard::into_acquisition`]; `NotOwner` (or
    /// `LeaseExpired`) when it is no longer current, and never another acquisition's units.
    pub fn release(&self, acquisition: Acquisition) -> Result<()> {
        self.pool.release(acquisition)
    }

    /// Whether `acquisition` still holds its units.
    pub fn is_current(&self, acquisition: &Acquisition) -> bool {
        self.pool.is_current(acquisition)
    }

    /// Moves the end of a leased acquisition's lease to `lease` from now.
    pub fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        self.pool.extend(acquisition, lease)
    }

    /// Ends every hold of `key` (each later release of them is refused) and serves its
    /// waiters; whether anyone held it. The fence advances.
    pub fn force_release<Q>(&self, key: &Q) -> bool
    where
        PoolTable<K, S>: FindKey<Q>,
        Q: ?Sized,
    {
        self.pool.force_unlock(key)
    }

    /// A snapshot of `key`: the units held, the holders and the waiters; `None` when nobody
    /// holds it.
    pub fn info<Q>(&self, key: &Q) -> Option<LockInfo>
    where
        PoolTable<K, S>: FindKey<Q>,
        Q: ?Sized,
    {
        self.pool.info(key)
    }

    /// The pool's counters (`held` counts keys with units held, `shared_holds` the units).
    pub fn stats(&self) -> PoolStats {
        self.pool.stats()
    }
}

/// Only plain keys: a semaphore has no Web Locks names. The key in its borrowed form for `K`.
fn plain_key<K: ByteStringKey>(key: LockKey<'_>) -> Result<&K::Borrowed> {
    match key.space {
        KeySpace::Keys => Ok(K::borrowed(key.bytes)),
        KeySpace::Names => Err(Error::InvalidArgument("a semaphore's keys are plain keys")),
    }
}

impl<K, S> KeyedLock for KeyedSemaphore<K, S>
where
    K: ByteStringKey,
    S: BuildHasher + Send + Sync + 'static,
{
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        let bytes = plain_key::<K>(key)?;
        let permit = match opts.lease {
            None => self.pool.lock_units(bytes, opts.weight, opts.wait)?,
            Some(_) => self.pool.lock_with(bytes, *opts)?,
        };
        Ok(permit.into_acquisition())
    }

    /// One unit (a semaphore has no modes).
    fn try_acquire_fast(&self, key: LockKey<'_>, _mode: Mode) -> Option<Acquisition> {
        self.pool
            .try_acquire_fast_units(plain_key::<K>(key).ok()?, 1)
    }

    /// The sole holder's units (a second holder, a waiter or a lease: the full release).
    fn try_release_cas(&self, acquisition: &Acquisition) -> bool {
        self.pool.try_release_cas_units(acquisition)
    }

    fn acquire_async(
        self: Arc<Self>,
        key: LockKey<'_>,
        opts: &LockOptions,
    ) -> scope::AcquireFuture {
        match plain_key::<K>(key) {
            Ok(bytes) => {
                let fut = self.pool.lock_with_async_owned(bytes, *opts);
                Box::pin(async move { Ok(fut.await?.into_acquisition()) })
            }
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn acquire_many(
        &self,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> Result<Vec<Acquisition>> {
        let bytes = keys
            .iter()
            .map(|(k, _)| plain_key::<K>(*k))
            .collect::<Result<Vec<_>>>()?;
        let opts = LockOptions {
            wait: many::one_deadline(opts.wait),
            ..*opts
        };
        let out = self
            .pool
            .lock_many_with(bytes.iter().map(|b| (*b, Mode::Shared)), opts)?
            .into_acquisitions();
        let ats: Vec<Option<u64>> = bytes
            .iter()
            .map(|b| self.pool.table.slot_of(*b).map(|at| at.to_u64()))
            .collect();
        Ok(many::in_key_order_of_places(&ats, out))
    }

    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> scope::AcquireManyFuture {
        let bytes = match keys
            .iter()
            .map(|(k, _)| plain_key::<K>(*k))
            .collect::<Result<Vec<_>>>()
        {
            Ok(bytes) => bytes,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let opts = LockOptions {
            wait: many::one_deadline(opts.wait),
            ..*opts
        };
        let fut = self
            .pool
            .lock_many_with_async_owned(bytes.iter().map(|b| (*b, Mode::Shared)), opts);
        // Every key's slot is reserved now, so where each one is stays put.
        let ats: Vec<Option<u64>> = bytes
            .iter()
            .map(|b| self.pool.table.slot_of(*b).map(|at| at.to_u64()))
            .collect();
        Box::pin(async move {
            let out = fut.await?.into_acquisitions();
            Ok(many::in_key_order_of_places(&ats, out))
        })
    }

    fn release_as(&self, acquisition: Acquisition, _owner: Option<Owner>) -> Result<()> {
        self.pool.release(acquisition)
    }

    fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        self.pool.extend(acquisition, lease)
    }

    fn is_current_as(&self, acquisition: &Acquisition, _owner: Option<Owner>) -> Result<bool> {
        Ok(self.pool.is_current(acquisition))
    }

    fn force_unlock(&self, key: LockKey<'_>) -> Result<bool> {
        Ok(self.pool.force_unlock(plain_key::<K>(key)?))
    }

    fn steal(&self, _key: LockKey<'_>, _opts: &LockOptions) -> Result<Acquisition> {
        Err(Error::InvalidArgument(
            "a semaphore's units cannot be stolen; use force_release",
        ))
    }

    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>> {
        Ok(self.pool.info(plain_key::<K>(key)?))
    }

    fn is_reentrant(&self) -> bool {
        false
    }

    fn permits(&self) -> Option<u32> {
        Some(KeyedSemaphore::permits(self))
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn stats(&self) -> Result<ScopeStats> {
        Ok(self.pool.stats().scope())
    }
}

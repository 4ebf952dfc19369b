//! One trait for a keyed lock at every scope: in this process, across processes on one host
//! (shared memory), across machines (Redis, PostgreSQL).
//!
//! [`KeyedLock`] is what generic code and the front ends (C, Python, Node) talk to. Keys are
//! bytes (the [`keys`](crate::keys) module says how every language turns its keys into bytes),
//! in one of two [`KeySpace`]s, so that Web Locks names never meet plain keys. Every operation
//! can fail, since a lock table can be full and a network can go away, and a release goes by
//! the [`Acquisition`] record that the acquire returned, never by key.
//!
//! [`open`](crate::open) picks the scope from a name, so that a program changes scope by changing one
//! string: `""` or `"local:"` for this process, `"shm:NAME"` for shared memory,
//! `"redis://HOST:PORT/DB"` for Redis, `"postgres://USER@HOST/DB"` for PostgreSQL (each behind a cargo
//! feature).
//!
//! ```
//! use keylock_core::{KeyPool, KeyedLock, LockKey, LockOptions};
//!
//! fn transfer(locks: &dyn KeyedLock) -> keylock_core::Result<u64> {
//!     let acq = locks.acquire(LockKey::new(b"acct:1"), &LockOptions::new())?;
//!     let fence = acq.fence();
//!     locks.release(acq)?;
//!     Ok(fence)
//! }
//! let pool: KeyPool = KeyPool::new();
//! assert_eq!(transfer(&pool).unwrap(), 1);
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner};
use crate::error::{Error, Result};
use crate::report::KeyReport;
use crate::stats::ScopeStats;

/// The namespace of a key. Two keys in different spaces never name the same lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum KeySpace {
    /// Plain keys: bytes, as every front end encodes them.
    #[default]
    Keys = 0,
    /// Web Locks names (any string, including lone surrogates, as WTF-8).
    Names = 1,
}

/// A key of a [`KeyedLock`]: bytes in a space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockKey<'a> {
    /// The namespace.
    pub space: KeySpace,
    /// The key's bytes.
    pub bytes: &'a [u8],
}

impl<'a> LockKey<'a> {
    /// A plain key.
    pub const fn new(bytes: &'a [u8]) -> Self {
        Self {
            space: KeySpace::Keys,
            bytes,
        }
    }

    /// A Web Locks name (its WTF-8 bytes).
    pub const fn name(bytes: &'a [u8]) -> Self {
        Self {
            space: KeySpace::Names,
            bytes,
        }
    }
}

impl<'a> From<&'a [u8]> for LockKey<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        Self::new(bytes)
    }
}

/// The future of an async acquire through the trait.
pub type AcquireFuture = Pin<Box<dyn Future<Output = Result<Acquisition>> + Send + 'static>>;

/// The future of an async multi-key acquire through the trait.
pub type AcquireManyFuture =
    Pin<Box<dyn Future<Output = Result<Vec<Acquisition>>> + Send + 'static>>;

/// A keyed lock at some scope. See the [module docs](self).
///
/// Acquires take [`LockOptions`] (mode, lease, owner, how long to wait) and return one
/// [`Acquisition`] per key; `release` ends exactly that acquisition and refuses a stale one
/// (`NotOwner`, `LeaseExpired`). Async acquires own the lock object (`self: Arc<Self>`), so
/// their futures are `'static` and can be kept by an event loop; dropping one cancels its wait.
pub trait KeyedLock: Send + Sync + fmt::Debug {
    /// Acquires `key`, blocking the calling thread as `opts.wait` says.
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition>;

    /// Acquires `key` as a future. It resolves to `Err(TimedOut)` once `opts.wait` runs out.
    fn acquire_async(self: Arc<Self>, key: LockKey<'_>, opts: &LockOptions) -> AcquireFuture;

    /// Acquires every one of `keys`, each in its own mode (`opts.mode` is ignored), all or
    /// none, deadlock-free (in the lock's one canonical order). Returns one acquisition per
    /// distinct lock, in the order of the keys' first occurrence (keys that share a lock, such
    /// as two keys of one stripe, get the one acquisition at the first of them).
    fn acquire_many(
        &self,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> Result<Vec<Acquisition>>;

    /// [`acquire_many`](Self::acquire_many) as a future.
    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> AcquireManyFuture;

    /// Ends `acquisition` on behalf of `owner` (for a reentrant lock, only the holder's owner
    /// may; `None` means the acquisition's own). Refused with `NotOwner` or `LeaseExpired`
    /// when it is no longer current.
    fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()>;

    /// Ends `acquisition` (see [`release_as`](Self::release_as)).
    fn release(&self, acquisition: Acquisition) -> Result<()> {
        self.release_as(acquisition, None)
    }

    /// The uncontended case of an exclusive or shared plain acquire of `key` (no lease, no
    /// owner, weight 1: one unit of a semaphore, which has no modes), taken with one
    /// compare-and-swap of the key's lock word where the lock object has one in this process:
    /// its acquisition, or `None` when that alone cannot grant it (the key is held or awaited,
    /// has no lock word yet, or the lock object has no such path: the remote scopes, a
    /// host-scope region's shared acquires and its semaphores, and a lock object with metrics,
    /// which counts each acquire on its full path). `None` says nothing about why: the caller
    /// takes the full path ([`acquire`](Self::acquire) or
    /// [`acquire_async`](Self::acquire_async)), which decides. An
    /// async front end calls this before making a future, so that a free key costs no future
    /// and a held one costs no second attempt. Never waits.
    ///
    /// ```
    /// use keylock_core::{LockKey, LockOptions, Mode, open};
    /// let locks = open("local:").unwrap();
    /// let k = LockKey::new(b"k");
    /// assert!(locks.try_acquire_fast(k, Mode::Exclusive).is_none()); // no lock word yet
    /// let first = locks.acquire(k, &LockOptions::new()).unwrap(); // made on the full path
    /// locks.release(first).unwrap();
    /// let acq = locks.try_acquire_fast(k, Mode::Exclusive).unwrap();
    /// assert!(locks.try_acquire_fast(k, Mode::Exclusive).is_none()); // held
    /// locks.release(acq).unwrap();
    /// ```
    fn try_acquire_fast(&self, key: LockKey<'_>, mode: Mode) -> Option<Acquisition> {
        let _ = (key, mode);
        None
    }

    /// The uncontended case of a release: ends `acquisition` with one compare-and-swap of its
    /// key's lock word where the lock object has such a path in this process and the hold is
    /// plain (exclusive, no lease, no owner, nothing queued behind it), and says so; `false`
    /// changes nothing, and says nothing about why: the caller takes the full path
    /// ([`release`](Self::release)), which decides. After `true` the record is spent (a
    /// release of it is `NotOwner`). The in-process pools and striped locks and the host scope
    /// have this path, and the in-process semaphores for a key's only holder (a plain hold of
    /// any weight); the remote scopes and lock objects with metrics (which count each release
    /// on the full path) answer `false`. Never waits.
    ///
    /// ```
    /// use keylock_core::{Error, LockKey, LockOptions, open};
    /// let locks = open("local:").unwrap();
    /// let acq = locks.acquire(LockKey::new(b"k"), &LockOptions::new()).unwrap();
    /// assert!(locks.try_release_cas(&acq));
    /// assert!(!locks.is_locked(LockKey::new(b"k")).unwrap());
    /// assert_eq!(locks.release(acq), Err(Error::NotOwner)); // spent
    /// ```
    fn try_release_cas(&self, acquisition: &Acquisition) -> bool {
        let _ = acquisition;
        false
    }

    /// Moves the end of `acquisition`'s lease to `lease` from now.
    fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()>;

    /// Whether `acquisition` is current and, for a reentrant lock, held by `owner` (`None`: the
    /// acquisition's own). A front end checks this before a release on behalf of the caller
    /// (Python's `RLock.release` from another thread must fail and keep the hold).
    fn is_current_as(&self, acquisition: &Acquisition, owner: Option<Owner>) -> Result<bool>;

    /// Whether `acquisition` is still current.
    fn is_current(&self, acquisition: &Acquisition) -> Result<bool> {
        self.is_current_as(acquisition, None)
    }

    /// Frees `key` whoever holds it, advancing its fence; whether it was held.
    fn force_unlock(&self, key: LockKey<'_>) -> Result<bool>;

    /// Frees `key` whoever holds it and takes it exclusively for this request, ahead of every
    /// waiter already queued (the Web Locks `steal`): the previous holders' acquisitions are
    /// stale, and the queue's head is served when the new holder releases. `opts.mode` must be
    /// exclusive (else `InvalidArgument`).
    ///
    /// The in-process and shared-memory lock objects do it in one step. The default, for a
    /// scope that has no such step yet (Redis), is [`force_unlock`](Self::force_unlock) and then [`acquire`](Self::acquire) as
    /// `opts.wait` says: a waiter may be served in between, and with `Wait::No` the steal then
    /// fails with `WouldBlock`.
    ///
    /// ```
    /// use keylock_core::{KeyPool, KeyedLock, LockKey, LockOptions, Wait};
    /// let pool: KeyPool = KeyPool::new();
    /// let locks: &dyn KeyedLock = &pool;
    /// let old = locks.acquire(LockKey::new(b"k"), &LockOptions::new()).unwrap();
    /// let new = locks.steal(LockKey::new(b"k"), &LockOptions::new().wait(Wait::No)).unwrap();
    /// assert!(new.fence() > old.fence());
    /// assert!(!locks.is_current(&old).unwrap());
    /// ```
    fn steal(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        if opts.mode != Mode::Exclusive {
            return Err(crate::Error::InvalidArgument(
                "only an exclusive request may steal",
            ));
        }
        self.force_unlock(key)?;
        self.acquire(key, opts)
    }

    /// Whether `key` is held (a snapshot).
    fn is_locked(&self, key: LockKey<'_>) -> Result<bool> {
        Ok(self.info(key)?.is_some())
    }

    /// Who holds `key` and how (a snapshot); `None` when free.
    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>>;

    /// Whether this lock object is reentrant (owners raise a hold count).
    fn is_reentrant(&self) -> bool;

    /// The concrete lock object behind the trait, for a caller that takes a shorter path to the
    /// same operations (the C ABI's uncontended lock and release): the in-process `KeyPool`
    /// (a `KeyPool<KeyBuf>` from `open`) and `StripedLock` give themselves; other scopes give
    /// `None` (the default), and are used through the trait alone.
    ///
    /// ```
    /// use keylock_core::{KeyBuf, KeyPool, OpenOptions, StripedLock, open, open_with};
    /// let pool = open("local:").unwrap();
    /// assert!(pool.as_any().unwrap().downcast_ref::<KeyPool<KeyBuf>>().is_some());
    /// let mut opts = OpenOptions::default();
    /// opts.stripes = Some(8);
    /// let striped = open_with("local:", &opts).unwrap();
    /// assert!(striped.as_any().unwrap().downcast_ref::<StripedLock>().is_some());
    /// ```
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// The host scope's lock object (`shm:`, a `ShmLock`) behind the trait, for a caller that
    /// downcasts it and takes its uncontended lock and release without the trait's dynamic
    /// dispatch (the C ABI): the same operations, called on the object itself, which the
    /// compiler can then inline. `None` for every other object, a metered one included (its
    /// calls go through the layer, to be counted). Kept apart from [`as_any`](Self::as_any),
    /// whose `Some` means an in-process object.
    fn as_host(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// The counts of the lock object, the same record at every scope (keys of both spaces
    /// count): what each scope can tell is filled in, and what it cannot is `None` (see
    /// [`ScopeStats`]). A scan, for monitoring and tests: O(keys or entries) under the scope's
    /// locks. Fails only where reading the counts needs the scope itself (a shared-memory
    /// region that cannot be locked, a process that forked: `Unavailable`).
    fn stats(&self) -> Result<ScopeStats>;

    /// Every key (stripe) held or awaited now, by anyone in the scope, with its holders and
    /// waiters where the scope records them: what `keylock list` shows
    /// ([`inspect`](crate::inspect) opens a scope to look at it). The scopes other
    /// processes share (shared memory, Redis, PostgreSQL) list their keys; a lock object of one
    /// process, which nothing outside it can see, answers `InvalidArgument`.
    fn list(&self) -> Result<Vec<KeyReport>> {
        Err(Error::InvalidArgument(
            "only shm:, redis:// and postgres:// lock objects list their keys",
        ))
    }

    /// A semaphore's units per key; `None` for a lock object.
    fn permits(&self) -> Option<u32> {
        None
    }

    /// Whether an acquire of `key` as `opts` asks would find it taken now (a snapshot, as
    /// `threading.Lock.locked()` and `asyncio.Semaphore.locked()` answer): a lock held in a
    /// mode that excludes `opts.mode`; a semaphore whose units held leave no room for
    /// `opts.weight`, or that has waiters (who go first).
    fn would_wait(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<bool> {
        Ok(match self.info(key)? {
            None => false,
            Some(info) => match self.permits() {
                Some(permits) => {
                    info.waiters > 0
                        || u64::from(info.units) + u64::from(opts.weight) > u64::from(permits)
                }
                None => opts.mode == Mode::Exclusive || info.mode == Mode::Exclusive,
            },
        })
    }

    /// The number of stripes of a striped lock object; `None` for one with a lock per key.
    fn stripes(&self) -> Option<usize> {
        None
    }

    /// The stripe `key` maps to in a striped lock object; `None` for one with a lock per key.
    fn stripe_of(&self, key: LockKey<'_>) -> Option<usize> {
        let _ = key;
        None
    }

    /// The signal that fires if `acquisition` is lost behind its holder's back (a remote lease
    /// that could not be renewed, a force-unlock seen at renewal). `None` for scopes whose
    /// holders cannot be cut off that way (in-process), and for an acquisition that is not
    /// this lock object's.
    fn lost_signal(&self, acquisition: &Acquisition) -> Option<crate::LostSignal> {
        let _ = acquisition;
        None
    }

    /// The lock object's metrics (see [`metrics`](crate::metrics)): a snapshot of its counts
    /// and histograms when it was opened with [`OpenOptions::metrics`] (or wrapped in a
    /// [`Metered`](crate::Metered)); `None` otherwise, and then nothing is counted.
    fn metrics(&self) -> Option<crate::MetricsSnapshot> {
        None
    }
}

/// How to make a lock object by name ([`open_with`](crate::open_with)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenOptions {
    /// A `StripedLock` with this many stripes instead of a `KeyPool`.
    pub stripes: Option<usize>,
    /// Reentrant (owners raise a hold count).
    pub reentrant: bool,
    /// Strict FIFO per key (every release hands the lock to the next waiter).
    pub fifo: bool,
    /// Fixed-size scopes (shared memory): the most keys held or awaited at once.
    pub capacity: Option<usize>,
    /// Fixed-size scopes created by this open: permission bits (default 0o600).
    pub mode: Option<u32>,
    /// A striped lock object: the hash seed, so that keys map to the same stripes in every
    /// process running the same build (default: random per lock object).
    pub seed: Option<u64>,
    /// A keyed semaphore with this many units per key instead of a lock
    /// ([`KeyedSemaphore`](crate::KeyedSemaphore); in this process, in `shm:`, on Redis and
    /// on PostgreSQL).
    pub permits: Option<u32>,
    /// Metrics on the lock object (see [`metrics`](crate::metrics)): off by default, and then
    /// nothing is counted and no path does anything more.
    pub metrics: bool,
    /// A server scope's keyed semaphore with the permits recorded under its prefix, instead
    /// of `permits` ([`inspect_semaphore`](crate::inspect_semaphore)).
    pub(crate) recorded_permits: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// A `KeyPool`, not reentrant, eventual fairness, default capacity and mode.
    pub const fn new() -> Self {
        Self {
            stripes: None,
            reentrant: false,
            fifo: false,
            capacity: None,
            mode: None,
            seed: None,
            permits: None,
            metrics: false,
            recorded_permits: false,
        }
    }

    /// Metrics on the lock object ([`KeyedLock::metrics`] reads them).
    pub const fn metrics(mut self, metrics: bool) -> Self {
        self.metrics = metrics;
        self
    }

    /// A keyed semaphore with `permits` units per key.
    pub const fn permits(mut self, permits: u32) -> Self {
        self.permits = Some(permits);
        self
    }

    /// A `StripedLock` with `stripes` stripes.
    pub const fn stripes(mut self, stripes: usize) -> Self {
        self.stripes = Some(stripes);
        self
    }

    /// Reentrant.
    pub const fn reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = reentrant;
        self
    }

    /// Strict FIFO per key.
    pub const fn fifo(mut self, fifo: bool) -> Self {
        self.fifo = fifo;
        self
    }

    /// The capacity of a fixed-size scope.
    pub const fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = Some(capacity);
        self
    }

    /// The permission bits of a scope this open creates.
    pub const fn mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode);
        self
    }

    /// The hash seed of a striped lock object.
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
}

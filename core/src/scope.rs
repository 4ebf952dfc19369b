//! One trait for a keyed lock at every scope: in this process, across processes on one host
//! (shared memory), across machines (Redis).
//!
//! [`KeyedLock`] is what generic code and the front ends (C, Python, Node) talk to. Keys are
//! bytes (the [`keys`](crate::keys) module says how every language turns its keys into bytes),
//! in one of two [`KeySpace`]s, so that Web Locks names never meet plain keys. Every operation
//! can fail, since a lock table can be full and a network can go away, and a release goes by
//! the [`Acquisition`] record that the acquire returned, never by key.
//!
//! [`open`] picks the scope from a name, so that a program changes scope by changing one
//! string: `""` or `"local:"` for this process, `"shm:NAME"` for shared memory,
//! `"redis://HOST:PORT/DB"` for Redis (each behind a cargo feature).
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

use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner, Wait};
use crate::error::{Error, Result};
use crate::pool::{KeyPool, PoolStats};
use crate::striped::StripedLock;

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

    /// Whether `key` is held (a snapshot).
    fn is_locked(&self, key: LockKey<'_>) -> Result<bool> {
        Ok(self.info(key)?.is_some())
    }

    /// Who holds `key` and how (a snapshot); `None` when free.
    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>>;

    /// Whether this lock object is reentrant (owners raise a hold count).
    fn is_reentrant(&self) -> bool;

    /// The concrete lock object behind the trait, for a caller that takes a shorter path to the
    /// same operations (the C ABI's uncontended lock and release): the in-process `KeyPool` and
    /// `StripedLock` give themselves; other scopes give `None` (the default), and are used
    /// through the trait alone.
    ///
    /// ```
    /// use keylock_core::{KeyPool, OpenOptions, StripedLock, open, open_with};
    /// let pool = open("local:").unwrap();
    /// assert!(pool.as_any().unwrap().downcast_ref::<KeyPool>().is_some());
    /// let mut opts = OpenOptions::default();
    /// opts.stripes = Some(8);
    /// let striped = open_with("local:", &opts).unwrap();
    /// assert!(striped.as_any().unwrap().downcast_ref::<StripedLock>().is_some());
    /// ```
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// Counters of the plain keys, for monitoring and tests (a scan: O(slots)); `None` for a
    /// lock object that keeps none (a striped one).
    fn stats(&self) -> Option<PoolStats> {
        None
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
}

/// How to make a lock object by name ([`open_with`]).
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
        }
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

/// Opens the lock object that `name` names (see the [module docs](self)), as a `KeyPool`.
pub fn open(name: &str) -> Result<Arc<dyn KeyedLock>> {
    open_with(name, &OpenOptions::default())
}

/// Opens the lock object that `name` names, with `options`.
pub fn open_with(name: &str, options: &OpenOptions) -> Result<Arc<dyn KeyedLock>> {
    let (scheme, rest) = match name.split_once(':') {
        Some((scheme, rest)) => (scheme, rest),
        None if name.is_empty() => ("local", ""),
        None => {
            return Err(Error::InvalidArgument(
                "a lock name starts with a scheme: local:, shm:NAME or redis://...",
            ));
        }
    };
    match scheme {
        "local" => {
            if !rest.is_empty() {
                return Err(Error::InvalidArgument(
                    "local: takes no name (in-process locks are not shared by name)",
                ));
            }
            local(options)
        }
        #[cfg(all(feature = "shm", target_os = "linux"))]
        "shm" => crate::shm::open_scope(rest, options),
        #[cfg(not(all(feature = "shm", target_os = "linux")))]
        "shm" => Err(Error::InvalidArgument(
            "this build of keylock has no shared-memory scope (cargo feature \"shm\", Linux)",
        )),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => crate::redis::open(name, options),
        #[cfg(not(feature = "redis"))]
        "redis" | "rediss" => Err(Error::InvalidArgument(
            "this build of keylock has no Redis scope (cargo feature \"redis\")",
        )),
        _ => Err(Error::InvalidArgument(
            "unknown lock scheme: use local:, shm:NAME or redis://...",
        )),
    }
}

/// An in-process lock object for `options`.
fn local(options: &OpenOptions) -> Result<Arc<dyn KeyedLock>> {
    if options.capacity.is_some() || options.mode.is_some() {
        return Err(Error::InvalidArgument(
            "capacity and mode apply to shared-memory scopes only",
        ));
    }
    Ok(match options.stripes {
        Some(stripes) => {
            let mut builder = StripedLock::builder()
                .stripes(stripes)
                .reentrant(options.reentrant)
                .fifo(options.fifo);
            if let Some(seed) = options.seed {
                builder = builder.seed(seed);
            }
            Arc::new(builder.build()?)
        }
        None if options.seed.is_some() => {
            return Err(Error::InvalidArgument(
                "a seed applies to striped lock objects only",
            ));
        }
        None => Arc::new(
            KeyPool::builder()
                .reentrant(options.reentrant)
                .fifo(options.fifo)
                .build::<Vec<u8>>(),
        ),
    })
}

/// Puts `acqs` (one per distinct lock, any order) in the order of the keys' first occurrence:
/// `ats` says where each key's lock is (the `at` of its acquisition), in key order.
fn in_key_order(ats: &[Option<u64>], acqs: Vec<Acquisition>) -> Vec<Acquisition> {
    let mut rest: Vec<Option<Acquisition>> = acqs.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(rest.len());
    for &at in ats {
        let Some(at) = at else { continue };
        if let Some(slot) = rest
            .iter_mut()
            .find(|a| a.as_ref().is_some_and(|a| a.at == at))
        {
            out.extend(slot.take());
        }
    }
    // Anything not matched (it cannot happen: every key has a held lock) keeps its place.
    out.extend(rest.into_iter().flatten());
    out
}

/// The wait of a multi-key acquire as one deadline for all keys.
pub(crate) fn shared_wait(wait: Wait) -> Wait {
    match wait {
        Wait::For(d) => match std::time::Instant::now().checked_add(d) {
            Some(t) => Wait::Until(t),
            None => Wait::Forever,
        },
        w => w,
    }
}

/// Bit of an in-process pool acquisition's `at` that says it belongs to the names pool.
const NAMES: u64 = 1 << 63;

fn tagged(mut acq: Acquisition, space: KeySpace) -> Acquisition {
    if space == KeySpace::Names {
        acq.at |= NAMES;
    }
    acq
}

fn untagged(mut acq: Acquisition) -> (Acquisition, KeySpace) {
    if acq.at & NAMES != 0 {
        acq.at &= !NAMES;
        (acq, KeySpace::Names)
    } else {
        (acq, KeySpace::Keys)
    }
}

impl<S: std::hash::BuildHasher> KeyPool<Vec<u8>, S> {
    /// Where `key`'s slot is, as an acquisition's `at`, if it has one.
    fn at_of(&self, key: LockKey<'_>) -> Option<u64> {
        match key.space {
            KeySpace::Keys => self.slot_of(key.bytes).map(|at| at.to_u64()),
            KeySpace::Names => self
                .names_if()?
                .slot_of(key.bytes)
                .map(|at| at.to_u64() | NAMES),
        }
    }
}

impl<S> KeyedLock for KeyPool<Vec<u8>, S>
where
    S: std::hash::BuildHasher + Send + Sync + 'static,
{
    #[inline]
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        // The uncontended plain case straight from the lock word: what the front ends pay on
        // every call.
        if key.space == KeySpace::Keys
            && opts.lease.is_none()
            && (opts.owner.is_none() || !self.is_reentrant())
            && let Some(acq) = self.acquire_plain_fast(key.bytes, opts.mode)
        {
            return Ok(acq);
        }
        let acq = match key.space {
            KeySpace::Keys => self.lock_with(key.bytes, *opts)?.into_acquisition(),
            KeySpace::Names => self.names().lock_with(key.bytes, *opts)?.into_acquisition(),
        };
        Ok(tagged(acq, key.space))
    }

    fn acquire_async(self: Arc<Self>, key: LockKey<'_>, opts: &LockOptions) -> AcquireFuture {
        let space = key.space;
        match space {
            KeySpace::Keys => {
                let fut = self.lock_with_async_owned(key.bytes, *opts);
                Box::pin(async move { Ok(fut.await?.into_acquisition()) })
            }
            KeySpace::Names => {
                let fut = self.names().lock_with_async_owned(key.bytes, *opts);
                Box::pin(async move { Ok(tagged(fut.await?.into_acquisition(), space)) })
            }
        }
    }

    fn acquire_many(
        &self,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> Result<Vec<Acquisition>> {
        // Plain keys first, then names: one order for every caller, so no deadlock.
        let opts = LockOptions {
            wait: shared_wait(opts.wait),
            ..*opts
        };
        let plain = keys
            .iter()
            .filter(|(k, _)| k.space == KeySpace::Keys)
            .map(|(k, m)| (k.bytes, *m));
        let mut out = self.lock_many_with(plain, opts)?.into_acquisitions();
        if keys.iter().any(|(k, _)| k.space == KeySpace::Names) {
            let names = keys
                .iter()
                .filter(|(k, _)| k.space == KeySpace::Names)
                .map(|(k, m)| (k.bytes, *m));
            match self.names().lock_many_with(names, opts) {
                Ok(g) => out.extend(
                    g.into_acquisitions()
                        .into_iter()
                        .map(|a| tagged(a, KeySpace::Names)),
                ),
                Err(e) => {
                    for acq in out {
                        let _ = self.release_as(acq, None);
                    }
                    return Err(e);
                }
            }
        }
        let ats: Vec<Option<u64>> = keys.iter().map(|(k, _)| self.at_of(*k)).collect();
        Ok(in_key_order(&ats, out))
    }

    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> AcquireManyFuture {
        let opts = LockOptions {
            wait: shared_wait(opts.wait),
            ..*opts
        };
        let plain: Vec<(&[u8], Mode)> = keys
            .iter()
            .filter(|(k, _)| k.space == KeySpace::Keys)
            .map(|(k, m)| (k.bytes, *m))
            .collect();
        let named: Vec<(&[u8], Mode)> = keys
            .iter()
            .filter(|(k, _)| k.space == KeySpace::Names)
            .map(|(k, m)| (k.bytes, *m))
            .collect();
        let first = self.lock_many_with_async_owned(plain, opts);
        let second = (!named.is_empty()).then(|| {
            let names = Arc::clone(self.names());
            // Reserved now, awaited after the plain keys (the canonical order).
            names.lock_many_with_async_owned(named, opts)
        });
        // Every key's slot is reserved now, so where each one is stays put.
        let ats: Vec<Option<u64>> = keys.iter().map(|(k, _)| self.at_of(*k)).collect();
        Box::pin(async move {
            let mut out = first.await?.into_acquisitions();
            if let Some(second) = second {
                match second.await {
                    Ok(g) => out.extend(
                        g.into_acquisitions()
                            .into_iter()
                            .map(|a| tagged(a, KeySpace::Names)),
                    ),
                    Err(e) => {
                        for acq in out {
                            let _ = self.release_as(acq, None);
                        }
                        return Err(e);
                    }
                }
            }
            Ok(in_key_order(&ats, out))
        })
    }

    #[inline]
    fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
        if owner.is_none() && self.release_plain_fast(&acquisition) {
            return Ok(());
        }
        let owner = owner.or(acquisition.owner);
        match untagged(acquisition) {
            (acq, KeySpace::Keys) => KeyPool::release_as(self, acq, owner),
            (acq, KeySpace::Names) => match self.names_if() {
                Some(names) => names.release_as(acq, owner),
                None => Err(Error::InvalidArgument(
                    "the acquisition belongs to another lock",
                )),
            },
        }
    }

    fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        if acquisition.at & NAMES == 0 {
            return KeyPool::extend(self, acquisition, lease);
        }
        let names = self.names_if().ok_or(Error::InvalidArgument(
            "the acquisition belongs to another lock",
        ))?;
        acquisition.at &= !NAMES;
        let result = names.extend(acquisition, lease);
        acquisition.at |= NAMES;
        result
    }

    fn is_current_as(&self, acquisition: &Acquisition, owner: Option<Owner>) -> Result<bool> {
        let owner = owner.or(acquisition.owner);
        if acquisition.at & NAMES == 0 {
            return Ok(KeyPool::is_current_as(self, acquisition, owner));
        }
        let Some(names) = self.names_if() else {
            return Ok(false);
        };
        let probe = Acquisition {
            at: acquisition.at & !NAMES,
            ..acquisition.duplicate()
        };
        Ok(names.is_current_as(&probe, owner))
    }

    fn force_unlock(&self, key: LockKey<'_>) -> Result<bool> {
        Ok(match key.space {
            KeySpace::Keys => KeyPool::force_unlock(self, key.bytes),
            KeySpace::Names => self.names_if().is_some_and(|n| n.force_unlock(key.bytes)),
        })
    }

    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>> {
        Ok(match key.space {
            KeySpace::Keys => KeyPool::info(self, key.bytes),
            KeySpace::Names => self.names_if().and_then(|n| n.info(key.bytes)),
        })
    }

    fn is_reentrant(&self) -> bool {
        KeyPool::is_reentrant(self)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn stats(&self) -> Option<PoolStats> {
        Some(KeyPool::stats(self))
    }
}

impl KeyedLock for StripedLock {
    #[inline]
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        let stripe = self.stripe_of_key(key);
        if opts.lease.is_none()
            && (opts.owner.is_none() || !self.is_reentrant())
            && let Some(acq) = self.acquire_stripe_fast(stripe, opts.mode)
        {
            return Ok(acq);
        }
        Ok(self.lock_stripe_with(stripe, *opts)?.into_acquisition())
    }

    fn acquire_async(self: Arc<Self>, key: LockKey<'_>, opts: &LockOptions) -> AcquireFuture {
        let fut = self.lock_stripe_with_async_owned(self.stripe_of_key(key), *opts);
        Box::pin(async move { Ok(fut.await?.into_acquisition()) })
    }

    fn acquire_many(
        &self,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> Result<Vec<Acquisition>> {
        let stripes: Vec<(usize, Mode)> = keys
            .iter()
            .map(|(k, m)| (self.stripe_of_key(*k), *m))
            .collect();
        let ats: Vec<Option<u64>> = stripes.iter().map(|&(s, _)| Some(s as u64)).collect();
        let acqs = self.lock_stripes(stripes, *opts)?.into_acquisitions();
        Ok(in_key_order(&ats, acqs))
    }

    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> AcquireManyFuture {
        let stripes: Vec<(usize, Mode)> = keys
            .iter()
            .map(|(k, m)| (self.stripe_of_key(*k), *m))
            .collect();
        let ats: Vec<Option<u64>> = stripes.iter().map(|&(s, _)| Some(s as u64)).collect();
        let fut = self.lock_stripes_async_owned(stripes, *opts);
        Box::pin(async move { Ok(in_key_order(&ats, fut.await?.into_acquisitions())) })
    }

    #[inline]
    fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
        if owner.is_none() && self.release_stripe_fast(&acquisition) {
            return Ok(());
        }
        let owner = owner.or(acquisition.owner);
        StripedLock::release_as(self, acquisition, owner)
    }

    fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        StripedLock::extend(self, acquisition, lease)
    }

    fn is_current_as(&self, acquisition: &Acquisition, owner: Option<Owner>) -> Result<bool> {
        let owner = owner.or(acquisition.owner);
        Ok(StripedLock::is_current_as(self, acquisition, owner))
    }

    fn force_unlock(&self, key: LockKey<'_>) -> Result<bool> {
        Ok(self.force_unlock_stripe(self.stripe_of_key(key)))
    }

    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>> {
        Ok(self.info_stripe(self.stripe_of_key(key)))
    }

    fn is_reentrant(&self) -> bool {
        StripedLock::is_reentrant(self)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn stripes(&self) -> Option<usize> {
        Some(StripedLock::stripes(self))
    }

    fn stripe_of(&self, key: LockKey<'_>) -> Option<usize> {
        Some(self.stripe_of_key(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_with_seed_gives_the_same_stripes() {
        let options = OpenOptions {
            stripes: Some(64),
            seed: Some(7),
            ..OpenOptions::default()
        };
        let (a, b) = (
            open_with("local:", &options).unwrap(),
            open_with("", &options).unwrap(),
        );
        assert_eq!((a.stripes(), b.stripes()), (Some(64), Some(64)));
        for i in 0u64..100 {
            let bytes = i.to_be_bytes();
            let key = LockKey::new(&bytes);
            assert_eq!(a.stripe_of(key), b.stripe_of(key));
        }
        let pool_with_seed = OpenOptions {
            seed: Some(7),
            ..OpenOptions::default()
        };
        assert!(matches!(
            open_with("local:", &pool_with_seed),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn stats_and_stripes_say_what_kind_of_lock_it_is() {
        let pool = open("local:").unwrap();
        assert_eq!(
            (pool.stripes(), pool.stripe_of(LockKey::new(b"k"))),
            (None, None)
        );
        let acq = pool
            .acquire(LockKey::new(b"k"), &LockOptions::new())
            .unwrap();
        assert_eq!(pool.stats().map(|s| s.held), Some(1));
        pool.release(acq).unwrap();
        assert_eq!(pool.stats().map(|s| s.entries_in_use), Some(0));
        let striped = open_with(
            "local:",
            &OpenOptions {
                stripes: Some(4),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        assert_eq!(striped.stats(), None);
        assert!(striped.stripe_of(LockKey::new(b"k")).is_some_and(|s| s < 4));
    }
}

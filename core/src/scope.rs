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
use crate::pool::KeyPool;
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
///
/// `Any` is a supertrait so that a front end can reach what one scope offers beyond the trait
/// (an in-process `KeyPool`'s statistics, a `StripedLock`'s stripe count) by downcasting a
/// `&dyn KeyedLock` (upcast to `&dyn Any`), without knowing about the scope otherwise.
///
/// ```
/// use std::any::Any;
/// use keylock_core::{KeyPool, StripedLock};
/// let locks = keylock_core::open("local:").unwrap();
/// let any: &dyn Any = &*locks;
/// assert!(any.downcast_ref::<KeyPool>().is_some());
/// assert!(any.downcast_ref::<StripedLock>().is_none());
/// ```
pub trait KeyedLock: Send + Sync + fmt::Debug + std::any::Any {
    /// Acquires `key`, blocking the calling thread as `opts.wait` says.
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition>;

    /// Acquires `key` as a future. It resolves to `Err(TimedOut)` once `opts.wait` runs out.
    fn acquire_async(self: Arc<Self>, key: LockKey<'_>, opts: &LockOptions) -> AcquireFuture;

    /// Acquires every one of `keys`, each in its own mode (`opts.mode` is ignored), all or
    /// none, deadlock-free. The acquisitions come in the lock's canonical order.
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

    /// Whether `acquisition` is still current.
    fn is_current(&self, acquisition: &Acquisition) -> Result<bool>;

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
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            stripes: None,
            reentrant: false,
            fifo: false,
            capacity: None,
            mode: None,
        }
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
        "shm" => Err(Error::InvalidArgument(
            "this build of keylock has no shared-memory scope (cargo feature \"shm\", Linux)",
        )),
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
        Some(stripes) => Arc::new(
            StripedLock::builder()
                .stripes(stripes)
                .reentrant(options.reentrant)
                .fifo(options.fifo)
                .build()?,
        ),
        None => Arc::new(
            KeyPool::builder()
                .reentrant(options.reentrant)
                .fifo(options.fifo)
                .build::<Vec<u8>>(),
        ),
    })
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

impl<S> KeyedLock for KeyPool<Vec<u8>, S>
where
    S: std::hash::BuildHasher + Send + Sync + 'static,
{
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
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
        Ok(out)
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
            Ok(out)
        })
    }

    fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
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

    fn is_current(&self, acquisition: &Acquisition) -> Result<bool> {
        if acquisition.at & NAMES == 0 {
            return Ok(KeyPool::is_current(self, acquisition));
        }
        let Some(names) = self.names_if() else {
            return Ok(false);
        };
        let probe = Acquisition {
            at: acquisition.at & !NAMES,
            ..acquisition.duplicate()
        };
        Ok(names.is_current(&probe))
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
}

impl KeyedLock for StripedLock {
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        let stripe = self.stripe_of_key(key);
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
        let stripes = keys
            .iter()
            .map(|(k, m)| (self.stripe_of_key(*k), *m))
            .collect();
        Ok(self.lock_stripes(stripes, *opts)?.into_acquisitions())
    }

    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> AcquireManyFuture {
        let stripes = keys
            .iter()
            .map(|(k, m)| (self.stripe_of_key(*k), *m))
            .collect();
        let fut = self.lock_stripes_async_owned(stripes, *opts);
        Box::pin(async move { Ok(fut.await?.into_acquisitions()) })
    }

    fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
        let owner = owner.or(acquisition.owner);
        StripedLock::release_as(self, acquisition, owner)
    }

    fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        StripedLock::extend(self, acquisition, lease)
    }

    fn is_current(&self, acquisition: &Acquisition) -> Result<bool> {
        Ok(StripedLock::is_current(self, acquisition))
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
}

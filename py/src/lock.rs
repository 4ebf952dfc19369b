//! What a lock handle locks ([`Target`]) and the calls into the core on it, and the data of the
//! handle base class ([`LockHandle`]). The layer below both ways of waiting ([`crate::wait`]) and
//! the handles' Python protocol ([`crate::handle`]), which build on it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use keylock_core as core;
use pyo3::prelude::*;

use crate::args::OptTimeout;
use crate::key::OwnedKey;

/// A core future that resolves once the lock is held (its guard already leaked).
pub(crate) type LockFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What a handle locks.
pub(crate) enum Target {
    /// One key of a KeyPool.
    Key {
        pool: Arc<core::KeyPool>,
        key: OwnedKey,
    },
    /// The stripe of one key of a StripedLock.
    Stripe {
        lock: Arc<core::StripedLock>,
        key: OwnedKey,
    },
    /// Several keys of a KeyPool, taken together.
    PoolMany {
        pool: Arc<core::KeyPool>,
        keys: Vec<OwnedKey>,
    },
    /// The stripes of several keys, taken together.
    StripeMany {
        lock: Arc<core::StripedLock>,
        keys: Vec<OwnedKey>,
    },
    /// An RwLock, shared.
    Read(Arc<core::RwLock>),
    /// An RwLock, exclusive.
    Write(Arc<core::RwLock>),
}

fn slices(keys: &[OwnedKey]) -> impl Iterator<Item = &[u8]> + Clone {
    keys.iter().map(OwnedKey::as_bytes)
}

impl Target {
    /// Takes the lock if it is free now; never waits, never releases the GIL.
    #[inline]
    pub(crate) fn try_acquire(&self) -> bool {
        match self {
            Target::Key { pool, key } => pool.try_lock(&**key).map(|g| g.leak()).is_ok(),
            Target::Stripe { lock, key } => lock.try_lock(&**key).map(|g| g.leak()).is_ok(),
            Target::PoolMany { pool, keys } => {
                pool.try_lock_many(slices(keys)).map(|g| g.leak()).is_ok()
            }
            Target::StripeMany { lock, keys } => {
                lock.try_lock_many(slices(keys)).map(|g| g.leak()).is_ok()
            }
            Target::Read(rw) => rw.try_read().map(|g| g.leak()).is_ok(),
            Target::Write(rw) => rw.try_write().map(|g| g.leak()).is_ok(),
        }
    }

    /// The core's cancel-safe future for this lock: it keeps its place in the queue until it is
    /// ready or dropped.
    pub(crate) fn future(&self) -> LockFuture {
        match self {
            Target::Key { pool, key } => {
                let fut = pool.lock_async_owned(&**key);
                Box::pin(async move { fut.await.leak() })
            }
            Target::Stripe { lock, key } => {
                let fut = lock.lock_async_owned(&**key);
                Box::pin(async move { fut.await.leak() })
            }
            Target::PoolMany { pool, keys } => {
                let fut = pool.lock_many_async_owned(slices(keys));
                Box::pin(async move { fut.await.leak() })
            }
            Target::StripeMany { lock, keys } => {
                let fut = lock.lock_many_async_owned(slices(keys));
                Box::pin(async move { fut.await.leak() })
            }
            Target::Read(rw) => {
                let fut = rw.read_async_owned();
                Box::pin(async move { fut.await.leak() })
            }
            Target::Write(rw) => {
                let fut = rw.write_async_owned();
                Box::pin(async move { fut.await.leak() })
            }
        }
    }

    /// The core's explicit unlock.
    pub(crate) fn release(&self) -> Result<(), core::Error> {
        match self {
            Target::Key { pool, key } => pool.unlock(&**key),
            Target::Stripe { lock, key } => lock.unlock(&**key),
            Target::PoolMany { pool, keys } => pool.unlock_many(slices(keys)),
            Target::StripeMany { lock, keys } => lock.unlock_many(slices(keys)),
            Target::Read(rw) => rw.read_unlock(),
            Target::Write(rw) => rw.write_unlock(),
        }
    }

    /// Whether a non-blocking acquire would fail now (`threading.Lock.locked()`).
    pub(crate) fn locked(&self) -> bool {
        match self {
            Target::Key { pool, key } => pool.is_locked(&**key),
            Target::Stripe { lock, key } => lock.is_locked(&**key),
            Target::PoolMany { pool, keys } => keys.iter().any(|k| pool.is_locked(&**k)),
            Target::StripeMany { lock, keys } => keys.iter().any(|k| lock.is_locked(&**k)),
            Target::Read(rw) => rw.is_write_locked(),
            Target::Write(rw) => rw.is_locked(),
        }
    }
}

/// Base class of every keylock lock handle.
///
/// A handle follows `threading.Lock`'s protocol (`acquire`, `release`, `locked`, `with`) and
/// asyncio's (`async with`, `await acquire_async()`), so code written for a `threading.Lock`
/// works unchanged. Handles are made by `KeyPool.lock`, `StripedLock.lock`, `lock_many`,
/// `RwLock.read` and `RwLock.write`; they hold no state of their own, so any number of handles
/// for the same key are interchangeable and any thread may release what another acquired.
#[pyclass(module = "keylock", name = "LockHandle", subclass, frozen, weakref)]
pub(crate) struct LockHandle {
    pub(crate) target: Target,
    /// Limit for `with` / `async with`: `None` waits for as long as it takes.
    pub(crate) timeout: Option<f64>,
}

impl LockHandle {
    pub(crate) fn new(target: Target, timeout: OptTimeout) -> Self {
        Self {
            target,
            timeout: timeout.0,
        }
    }
}

//! The three locks as this binding holds them: the core object, plus this thread's presence on
//! it for shared locks. Every operation is one call into the core; the only additions are the
//! activity counts of shared locks ([`crate::shared`]) and leaking guards, since JavaScript
//! releases with the explicit unlocks.

use std::sync::Arc;
use std::time::Duration;

use keylock_core::{KeyPool, RwLock, StripedLock};

use crate::reactor::{self, Acquire};
use crate::shared::{Presence, Registry};
use crate::status;

/// Keys are byte strings: UTF-8 for JavaScript strings, raw bytes for `Uint8Array`s.
pub(crate) type Pool = KeyPool<Vec<u8>>;

pub(crate) static SHARED_POOLS: Registry<Pool> = Registry::new();
pub(crate) static SHARED_STRIPED: Registry<StripedLock> = Registry::new();
pub(crate) static SHARED_RWLOCKS: Registry<RwLock> = Registry::new();

/// One lock as a JavaScript object holds it.
#[derive(Debug)]
pub(crate) struct Held<T> {
    pub(crate) core: Arc<T>,
    /// This thread's activity record, for shared locks only.
    pub(crate) presence: Option<Presence>,
}

impl<T> Held<T> {
    pub(crate) fn new(core: T) -> Self {
        Self {
            core: Arc::new(core),
            presence: None,
        }
    }

    /// Counts an acquisition made with status `code` (shared locks only).
    #[inline]
    fn acquired(&self, code: u32) -> u32 {
        if code == status::OK
            && let Some(p) = &self.presence
        {
            p.enter();
        }
        code
    }

    /// Counts a release made with status `code` (shared locks only), and flags a waiter of this
    /// thread that it woke ([`status::LOCAL_WAKE`]).
    #[inline]
    fn released(&self, code: u32) -> u32 {
        if code == status::OK
            && let Some(p) = &self.presence
        {
            p.leave();
            reactor::after_shared_release();
        }
        if reactor::take_local_wake() {
            code | status::LOCAL_WAKE
        } else {
            code
        }
    }

    fn start(&self, fut: Acquire) -> napi::Result<u32> {
        reactor::start(fut, self.presence.clone())
    }
}

/// A lock handle as JavaScript sees it (one type, so one type tag guards them all).
#[derive(Debug)]
pub(crate) enum Handle {
    Pool(Held<Pool>),
    Striped(Held<StripedLock>),
    Rw(Held<RwLock>),
}

/// The keyed operations, common to `KeyPool` and `StripedLock`. Results are statuses
/// ([`status`]), or for the async starts the waiter id (0: acquired at once).
pub(crate) trait Keyed {
    fn try_lock(&self, key: &[u8]) -> bool;
    fn unlock(&self, key: &[u8]) -> u32;
    fn is_locked(&self, key: &[u8]) -> bool;
    fn lock_async(&self, key: &[u8]) -> napi::Result<u32>;
    fn lock_sync(&self, key: &[u8], timeout: Option<Duration>) -> u32;
    fn try_lock_many(&self, keys: &[&[u8]]) -> bool;
    fn unlock_many(&self, keys: &[&[u8]]) -> u32;
    fn lock_many_async(&self, keys: &[&[u8]]) -> napi::Result<u32>;
    fn lock_many_sync(&self, keys: &[&[u8]], timeout: Option<Duration>) -> u32;
}

/// Implements [`Keyed`] for a core type whose methods share the names and shapes of
/// `KeyPool`'s and `StripedLock`'s.
macro_rules! keyed {
    ($core:ty) => {
        impl Keyed for Held<$core> {
            #[inline]
            fn try_lock(&self, key: &[u8]) -> bool {
                let code = status::of(self.core.try_lock(key).map(|g| g.leak()));
                self.acquired(code) == status::OK
            }

            #[inline]
            fn unlock(&self, key: &[u8]) -> u32 {
                self.released(status::of(self.core.unlock(key)))
            }

            #[inline]
            fn is_locked(&self, key: &[u8]) -> bool {
                self.core.is_locked(key)
            }

            fn lock_async(&self, key: &[u8]) -> napi::Result<u32> {
                let fut = self.core.lock_async_owned(key);
                self.start(Box::pin(async move { fut.await.leak() }))
            }

            fn lock_sync(&self, key: &[u8], timeout: Option<Duration>) -> u32 {
                self.acquired(match timeout {
                    Some(d) => status::of(self.core.try_lock_for(key, d).map(|g| g.leak())),
                    None => {
                        self.core.lock(key).leak();
                        status::OK
                    }
                })
            }

            fn try_lock_many(&self, keys: &[&[u8]]) -> bool {
                let code = status::of(
                    self.core
                        .try_lock_many(keys.iter().copied())
                        .map(|g| g.leak()),
                );
                self.acquired(code) == status::OK
            }

            fn unlock_many(&self, keys: &[&[u8]]) -> u32 {
                self.released(status::of(self.core.unlock_many(keys.iter().copied())))
            }

            fn lock_many_async(&self, keys: &[&[u8]]) -> napi::Result<u32> {
                let fut = self.core.lock_many_async_owned(keys.iter().copied());
                self.start(Box::pin(async move { fut.await.leak() }))
            }

            fn lock_many_sync(&self, keys: &[&[u8]], timeout: Option<Duration>) -> u32 {
                let keys = keys.iter().copied();
                self.acquired(match timeout {
                    Some(d) => status::of(self.core.try_lock_many_for(keys, d).map(|g| g.leak())),
                    None => {
                        self.core.lock_many(keys).leak();
                        status::OK
                    }
                })
            }
        }
    };
}

keyed!(Pool);
keyed!(StripedLock);

impl Held<RwLock> {
    pub(crate) fn try_read(&self) -> bool {
        self.acquired(status::of(self.core.try_read().map(|g| g.leak()))) == status::OK
    }

    pub(crate) fn try_write(&self) -> bool {
        self.acquired(status::of(self.core.try_write().map(|g| g.leak()))) == status::OK
    }

    pub(crate) fn read_sync(&self, timeout: Option<Duration>) -> u32 {
        self.acquired(match timeout {
            Some(d) => status::of(self.core.try_read_for(d).map(|g| g.leak())),
            None => {
                self.core.read().leak();
                status::OK
            }
        })
    }

    pub(crate) fn write_sync(&self, timeout: Option<Duration>) -> u32 {
        self.acquired(match timeout {
            Some(d) => status::of(self.core.try_write_for(d).map(|g| g.leak())),
            None => {
                self.core.write().leak();
                status::OK
            }
        })
    }

    pub(crate) fn read_async(&self) -> napi::Result<u32> {
        let fut = self.core.read_async_owned();
        self.start(Box::pin(async move { fut.await.leak() }))
    }

    pub(crate) fn write_async(&self) -> napi::Result<u32> {
        let fut = self.core.write_async_owned();
        self.start(Box::pin(async move { fut.await.leak() }))
    }

    pub(crate) fn read_unlock(&self) -> u32 {
        self.released(status::of(self.core.read_unlock()))
    }

    pub(crate) fn write_unlock(&self) -> u32 {
        self.released(status::of(self.core.write_unlock()))
    }
}

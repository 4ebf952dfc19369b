//! `StripedLock` for JavaScript: the native half (the public class is in `index.js`).

use std::sync::Arc;

use keylock_core::StripedLock;
use napi::Result;
use napi_derive::napi;

use crate::keys::Key;
use crate::reactor;
use crate::shared::{Presence, Registry};
use crate::status;

static SHARED: Registry<StripedLock> = Registry::new();

/// The largest stripe count `new StripedLock(n)` accepts.
#[napi]
pub const MAX_STRIPES: u32 = StripedLock::MAX_STRIPES as u32;

/// A striped lock owned by this thread's JavaScript, or a handle on a shared one.
#[napi]
#[derive(Debug)]
pub struct NativeStripedLock {
    core: Arc<StripedLock>,
    /// This thread's activity record, for shared locks only.
    presence: Option<Presence>,
}

impl NativeStripedLock {
    fn acquired(&self) {
        if let Some(p) = &self.presence {
            p.enter();
        }
    }

    fn released(&self, code: u32) -> u32 {
        if code == status::OK
            && let Some(p) = &self.presence
        {
            p.leave();
            reactor::after_shared_release();
        }
        code
    }
}

#[napi]
impl NativeStripedLock {
    /// A new lock of `stripes` stripes (rounded up to a power of two).
    #[napi(constructor, catch_unwind)]
    pub fn new(stripes: u32) -> Result<Self> {
        let core = StripedLock::new(stripes as usize)
            .map_err(|e| napi::Error::new(napi::Status::InvalidArg, e.to_string()))?;
        Ok(Self {
            core: Arc::new(core),
            presence: None,
        })
    }

    /// The process-wide lock called `name`, created with `stripes` stripes if it does not exist.
    /// The caller compares `stripes` of the result with what it asked for.
    #[napi(factory, catch_unwind)]
    pub fn shared(name: String, stripes: u32) -> Result<Self> {
        let shared = SHARED
            .get_or_insert(&name, || StripedLock::new(stripes as usize))
            .map_err(|e| napi::Error::new(napi::Status::InvalidArg, e.to_string()))?;
        let presence = Some(Presence::join(&shared));
        Ok(Self {
            core: shared.core.clone(),
            presence,
        })
    }

    /// The number of stripes.
    #[napi(getter, catch_unwind)]
    pub fn stripes(&self) -> u32 {
        self.core.stripes() as u32
    }

    /// The stripe `key` maps to.
    #[napi(catch_unwind)]
    pub fn stripe_of(&self, key: Key) -> u32 {
        self.core.stripe_of(key.as_bytes()) as u32
    }

    /// Takes `key`'s stripe if it is free.
    #[napi(catch_unwind)]
    pub fn try_lock(&self, key: Key) -> bool {
        let ok = self.core.try_lock(key.as_bytes()).map(|g| g.leak()).is_ok();
        if ok {
            self.acquired();
        }
        ok
    }

    /// Blocks this thread until `key`'s stripe is held or `timeout_ms` passed: a status.
    #[napi(catch_unwind)]
    pub fn lock_sync(&self, key: Key, timeout_ms: Option<f64>) -> u32 {
        let code = match status::timeout(timeout_ms) {
            Some(d) => status::of(self.core.try_lock_for(key.as_bytes(), d).map(|g| g.leak())),
            None => {
                self.core.lock(key.as_bytes()).leak();
                status::OK
            }
        };
        if code == status::OK {
            self.acquired();
        }
        code
    }

    /// Starts waiting for `key`'s stripe: 0 when it was taken at once, else a waiter id.
    #[napi(catch_unwind)]
    pub fn lock_async(&self, key: Key) -> Result<u32> {
        let fut = self.core.lock_async_owned(key.as_bytes());
        reactor::start(
            Box::pin(async move { fut.await.leak() }),
            self.presence.clone(),
        )
    }

    /// Releases `key`'s stripe: a status (`NOT_LOCKED` when it was free).
    #[napi(catch_unwind)]
    pub fn unlock(&self, key: Key) -> u32 {
        self.released(status::of(self.core.unlock(key.as_bytes())))
    }

    /// Whether `key`'s stripe is held.
    #[napi(catch_unwind)]
    pub fn is_locked(&self, key: Key) -> bool {
        self.core.is_locked(key.as_bytes())
    }

    /// Takes the stripes of all `keys` if all are free, or none.
    #[napi(catch_unwind)]
    pub fn try_lock_many(&self, keys: Vec<Key>) -> bool {
        let ok = self
            .core
            .try_lock_many(keys.iter().map(Key::as_bytes))
            .map(|g| g.leak())
            .is_ok();
        if ok {
            self.acquired();
        }
        ok
    }

    /// Blocks until the stripes of all `keys` are held or `timeout_ms` passed: a status.
    #[napi(catch_unwind)]
    pub fn lock_many_sync(&self, keys: Vec<Key>, timeout_ms: Option<f64>) -> u32 {
        let keys = keys.iter().map(Key::as_bytes);
        let code = match status::timeout(timeout_ms) {
            Some(d) => status::of(self.core.try_lock_many_for(keys, d).map(|g| g.leak())),
            None => {
                self.core.lock_many(keys).leak();
                status::OK
            }
        };
        if code == status::OK {
            self.acquired();
        }
        code
    }

    /// Starts waiting for the stripes of all `keys`: 0 when taken at once, else a waiter id.
    #[napi(catch_unwind)]
    pub fn lock_many_async(&self, keys: Vec<Key>) -> Result<u32> {
        let fut = self
            .core
            .lock_many_async_owned(keys.iter().map(Key::as_bytes));
        reactor::start(
            Box::pin(async move { fut.await.leak() }),
            self.presence.clone(),
        )
    }

    /// Releases the stripes of all `keys`: a status (nothing is released if one was free).
    #[napi(catch_unwind)]
    pub fn unlock_many(&self, keys: Vec<Key>) -> u32 {
        self.released(status::of(
            self.core.unlock_many(keys.iter().map(Key::as_bytes)),
        ))
    }
}

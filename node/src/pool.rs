//! `KeyPool` for JavaScript: the native half (the public class is in `index.js`).

use std::sync::Arc;

use keylock_core::KeyPool;
use napi::Result;
use napi_derive::napi;

use crate::keys::Key;
use crate::reactor;
use crate::shared::{Presence, Registry};
use crate::status;

/// Keys are byte strings: UTF-8 for JavaScript strings, raw bytes for `Uint8Array`s.
type Pool = KeyPool<Vec<u8>>;

static SHARED: Registry<Pool> = Registry::new();

/// `pool.stats()`: counters of the core's `PoolStats` (numbers, exact below 2^53).
#[napi(object)]
#[derive(Debug, Clone, Copy)]
pub struct PoolStats {
    /// Keys held now.
    pub held: f64,
    /// Waiters queued now.
    pub waiting: f64,
    /// Keys that have an entry now (held, or awaited by someone); 0 once everything is released.
    pub entries_in_use: f64,
    /// Entries allocated (in use or kept for reuse): the pool's memory, in keys.
    pub entries_allocated: f64,
    /// An upper bound on the most entries in use at once so far.
    pub peak_held: f64,
    /// Acquisitions so far.
    pub acquisitions: f64,
    /// Acquisitions that had to wait.
    pub contended: f64,
}

/// A key pool owned by this thread's JavaScript, or a handle on a shared one.
#[napi]
#[derive(Debug)]
pub struct NativeKeyPool {
    core: Arc<Pool>,
    /// This thread's activity record, for shared pools only.
    presence: Option<Presence>,
}

impl NativeKeyPool {
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
impl NativeKeyPool {
    /// An empty pool.
    #[napi(constructor, catch_unwind)]
    #[allow(clippy::new_without_default)] // a JavaScript constructor, not a Rust API
    pub fn new() -> Self {
        Self {
            core: Arc::new(Pool::new()),
            presence: None,
        }
    }

    /// The process-wide pool called `name`, created if it does not exist.
    #[napi(factory, catch_unwind)]
    pub fn shared(name: String) -> Self {
        let shared = SHARED
            .get_or_insert(&name, || Ok::<_, std::convert::Infallible>(Pool::new()))
            .unwrap_or_else(|never| match never {});
        let presence = Some(Presence::join(&shared));
        Self {
            core: shared.core.clone(),
            presence,
        }
    }

    /// Takes `key` if it is free.
    #[napi(catch_unwind)]
    pub fn try_lock(&self, key: Key) -> bool {
        let ok = self.core.try_lock(key.as_bytes()).map(|g| g.leak()).is_ok();
        if ok {
            self.acquired();
        }
        ok
    }

    /// Blocks this thread until `key` is held or `timeout_ms` passed: a status.
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

    /// Starts waiting for `key`: 0 when it was taken at once, else a waiter id.
    #[napi(catch_unwind)]
    pub fn lock_async(&self, key: Key) -> Result<u32> {
        let fut = self.core.lock_async_owned(key.as_bytes());
        reactor::start(
            Box::pin(async move { fut.await.leak() }),
            self.presence.clone(),
        )
    }

    /// Releases `key`: a status (`NOT_LOCKED` when it was free).
    #[napi(catch_unwind)]
    pub fn unlock(&self, key: Key) -> u32 {
        self.released(status::of(self.core.unlock(key.as_bytes())))
    }

    /// Whether `key` is held.
    #[napi(catch_unwind)]
    pub fn is_locked(&self, key: Key) -> bool {
        self.core.is_locked(key.as_bytes())
    }

    /// Takes all `keys` if all are free, or none.
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

    /// Blocks until all `keys` are held or `timeout_ms` passed: a status.
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

    /// Starts waiting for all `keys`: 0 when taken at once, else a waiter id.
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

    /// Releases all `keys`: a status (nothing is released if one was free).
    #[napi(catch_unwind)]
    pub fn unlock_many(&self, keys: Vec<Key>) -> u32 {
        self.released(status::of(
            self.core.unlock_many(keys.iter().map(Key::as_bytes)),
        ))
    }

    /// Keys held now.
    #[napi(getter, catch_unwind)]
    pub fn size(&self) -> u32 {
        self.core.len() as u32
    }

    /// The pool's counters.
    #[napi(catch_unwind)]
    pub fn stats(&self) -> PoolStats {
        let s = self.core.stats();
        PoolStats {
            held: s.held as f64,
            waiting: s.waiting as f64,
            entries_in_use: s.entries_in_use as f64,
            entries_allocated: s.entries_allocated as f64,
            peak_held: s.peak_held as f64,
            acquisitions: s.acquisitions as f64,
            contended: s.contended as f64,
        }
    }
}

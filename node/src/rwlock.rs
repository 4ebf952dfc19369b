//! `RwLock` for JavaScript: the native half (the public class is in `index.js`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use keylock_core::RwLock;
use napi::Result;
use napi_derive::napi;

use crate::reactor;
use crate::shared::{Presence, Registry};
use crate::status;

static SHARED: Registry<RwLock> = Registry::new();

/// A reader-writer lock owned by this thread's JavaScript, or a handle on a shared one.
#[napi]
#[derive(Debug)]
pub struct NativeRwLock {
    core: Arc<RwLock>,
    /// This thread's activity record, for shared locks only.
    presence: Option<Presence>,
}

impl NativeRwLock {
    fn acquired(&self, code: u32) -> u32 {
        if code == status::OK
            && let Some(p) = &self.presence
        {
            p.enter();
        }
        code
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
impl NativeRwLock {
    /// A free lock.
    #[napi(constructor, catch_unwind)]
    #[allow(clippy::new_without_default)] // a JavaScript constructor, not a Rust API
    pub fn new() -> Self {
        Self {
            core: Arc::new(RwLock::new()),
            presence: None,
        }
    }

    /// The process-wide lock called `name`, created if it does not exist.
    #[napi(factory, catch_unwind)]
    pub fn shared(name: String) -> Self {
        let shared = SHARED
            .get_or_insert(&name, || Ok::<_, std::convert::Infallible>(RwLock::new()))
            .unwrap_or_else(|never| match never {});
        let presence = Some(Presence::join(&shared));
        Self {
            core: shared.core.clone(),
            presence,
        }
    }

    /// Takes a read lock if no writer holds or waits: whether it did.
    #[napi(catch_unwind)]
    pub fn try_read(&self) -> bool {
        self.acquired(status::of(self.core.try_read().map(|g| g.leak()))) == status::OK
    }

    /// Takes the write lock if it is free: whether it did.
    #[napi(catch_unwind)]
    pub fn try_write(&self) -> bool {
        self.acquired(status::of(self.core.try_write().map(|g| g.leak()))) == status::OK
    }

    /// Blocks this thread for a read lock, at most `timeout_ms`: a status.
    #[napi(catch_unwind)]
    pub fn read_sync(&self, timeout_ms: Option<f64>) -> u32 {
        self.acquired(match status::timeout(timeout_ms) {
            Some(d) => status::of(self.core.try_read_for(d).map(|g| g.leak())),
            None => {
                self.core.read().leak();
                status::OK
            }
        })
    }

    /// Blocks this thread for the write lock, at most `timeout_ms`: a status.
    #[napi(catch_unwind)]
    pub fn write_sync(&self, timeout_ms: Option<f64>) -> u32 {
        self.acquired(match status::timeout(timeout_ms) {
            Some(d) => status::of(self.core.try_write_for(d).map(|g| g.leak())),
            None => {
                self.core.write().leak();
                status::OK
            }
        })
    }

    /// Starts waiting for a read lock: 0 when taken at once, else a waiter id.
    #[napi(catch_unwind)]
    pub fn read_async(&self) -> Result<u32> {
        let fut = self.core.read_async_owned();
        reactor::start(
            Box::pin(async move { fut.await.leak() }),
            self.presence.clone(),
        )
    }

    /// Starts waiting for the write lock: 0 when taken at once, else a waiter id.
    #[napi(catch_unwind)]
    pub fn write_async(&self) -> Result<u32> {
        let fut = self.core.write_async_owned();
        reactor::start(
            Box::pin(async move { fut.await.leak() }),
            self.presence.clone(),
        )
    }

    /// Releases one read lock: a status.
    #[napi(catch_unwind)]
    pub fn read_unlock(&self) -> u32 {
        let mut result = self.core.read_unlock();
        // Work-around for the core (reported): a reader granted by a writer's release can hold
        // the lock while that writer still grants other queued readers, and during that window
        // `read_unlock` reports `NotLocked` (the phase still says "writer"). The window ends as
        // soon as the writer has granted the queue, so retry briefly while a writer shows.
        if result == Err(keylock_core::Error::NotLocked) {
            let start = Instant::now();
            while result.is_err()
                && self.core.is_write_locked()
                && start.elapsed() < Duration::from_millis(10)
            {
                std::thread::yield_now();
                result = self.core.read_unlock();
            }
        }
        self.released(status::of(result))
    }

    /// Releases the write lock: a status.
    #[napi(catch_unwind)]
    pub fn write_unlock(&self) -> u32 {
        self.released(status::of(self.core.write_unlock()))
    }

    /// Whether a reader or a writer holds the lock.
    #[napi(catch_unwind)]
    pub fn is_locked(&self) -> bool {
        self.core.is_locked()
    }

    /// Whether a writer holds the lock.
    #[napi(catch_unwind)]
    pub fn is_write_locked(&self) -> bool {
        self.core.is_write_locked()
    }
}

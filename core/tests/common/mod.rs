//! Shared helpers for the integration tests.
// Each test crate uses its own subset of these helpers.
#![allow(dead_code)]

use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Runs `body` on its own thread and fails the test if it has not finished within `limit`:
/// a hang is reported as a deadlock instead of hanging CI.
///
/// The hand-back uses parking_lot rather than std's channels: under ThreadSanitizer the
/// standard library is not instrumented here, and its channels would report false races.
pub(crate) fn within<T: Send + 'static>(
    limit: Duration,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let done = Arc::new((parking_lot::Mutex::new(false), parking_lot::Condvar::new()));
    let signal = done.clone();
    let handle = thread::spawn(move || {
        struct Finish(Arc<(parking_lot::Mutex<bool>, parking_lot::Condvar)>);
        impl Drop for Finish {
            // Runs on return and on panic alike.
            fn drop(&mut self) {
                *self.0.0.lock() = true;
                self.0.1.notify_all();
            }
        }
        let _finish = Finish(signal);
        body()
    });
    let (lock, cond) = &*done;
    let mut finished = lock.lock();
    if !*finished {
        let _ = cond.wait_for(&mut finished, limit);
    }
    if !*finished {
        panic!("deadlock: test body did not finish within {limit:?}");
    }
    drop(finished);
    match handle.join() {
        Ok(out) => out,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A counter that is deliberately not atomic: only the lock under test makes it correct.
pub(crate) struct Racy(std::cell::UnsafeCell<u64>);

// SAFETY: every access in the tests happens under the lock being tested; a lost update shows up
// as a wrong final count, which is what the tests check.
unsafe impl Sync for Racy {}

impl Racy {
    pub(crate) fn new() -> Self {
        Self(std::cell::UnsafeCell::new(0))
    }

    /// Read-modify-write in two steps, with a yield point between them to widen any race.
    pub(crate) fn bump(&self) {
        // SAFETY: see the Sync impl.
        unsafe {
            let v = std::ptr::read_volatile(self.0.get());
            std::hint::spin_loop();
            std::ptr::write_volatile(self.0.get(), v + 1);
        }
    }

    pub(crate) fn get(&self) -> u64 {
        // SAFETY: read after all writers joined.
        unsafe { *self.0.get() }
    }
}

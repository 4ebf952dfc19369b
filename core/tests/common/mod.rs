//! Shared helpers for the integration tests.
// Each test crate uses its own subset of these helpers.
#![allow(dead_code)]

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Runs `body` on its own thread and fails the test if it has not finished within `limit`:
/// a hang is reported as a deadlock instead of hanging CI.
pub(crate) fn within<T: Send + 'static>(
    limit: Duration,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let out = body();
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(limit) {
        Ok(()) => handle.join().expect("test body panicked"),
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(_) => unreachable!("body finished without reporting"),
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("deadlock: test body did not finish within {limit:?}")
        }
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

//! A test-only hook: hold a blocking waiter, with the GIL released, right after it has joined
//! its lock's queue and before it starts waiting, until the test lets it go. The tests use it to
//! show that nobody can pass a waiter in that window (`keylock._keylock._set_waiter_stall(True)`,
//! then `_stalled_waiters()` to see it there, then `_set_waiter_stall(False)`). Off (the
//! default), it costs one relaxed load per blocking wait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Whether waiters stall (read without the gate's mutex, on every blocking wait).
static ON: AtomicBool = AtomicBool::new(false);

/// The gate: whether it is closed, and how many waiters stand at it now.
static GATE: Mutex<(bool, usize)> = Mutex::new((false, 0));
static OPENED: Condvar = Condvar::new();

/// The longest a waiter stands at the gate, so that a test that forgets to open it still ends.
const MOST: Duration = Duration::from_secs(60);

fn gate() -> MutexGuard<'static, (bool, usize)> {
    GATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stands at the gate while the tests keep it closed. Called with the GIL released.
pub(crate) fn after_release() {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let end = Instant::now() + MOST;
    let mut g = gate();
    g.1 += 1;
    while g.0 {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        g = OPENED
            .wait_timeout(g, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    g.1 -= 1;
}

/// Tests only: `True` makes every blocking waiter stop (GIL released) between joining its
/// lock's queue and waiting, until `_set_waiter_stall(False)` lets them all go.
#[pyfunction]
#[pyo3(signature = (on, /))]
pub(crate) fn _set_waiter_stall(on: bool) {
    let mut g = gate();
    g.0 = on;
    ON.store(on, Ordering::Relaxed);
    drop(g);
    if !on {
        OPENED.notify_all();
    }
}

/// Tests only: how many blocking waiters stand stalled now.
#[pyfunction]
pub(crate) fn _stalled_waiters() -> usize {
    gate().1
}

//! Lost locks: how a handle tells its holder that the lock was lost behind its back (a Redis
//! lease that could not be renewed in time, or a force-unlock the renewal found). The core's
//! `LostSignal` of each acquisition, turned into Python's waiting styles: a flag
//! (`handle.lost`), a blocking wait (`handle.wait_lost(timeout)`, GIL released, in slices with
//! `check_signals` between them) and an asyncio future (`handle.lost_future()`, resolved on the
//! event loop through `call_soon_threadsafe`, from the hand-off thread of [`crate::handoff`], never
//! from the scope's own thread). Nothing here decides anything about the lock.

use std::time::{Duration, Instant};

use keylock_core::LostSignal;
use pyo3::intern;
use pyo3::prelude::*;

use crate::handoff::run_in_python;
use crate::lock::LockHandle;
use crate::wait::{SLICE, post_resolve, running_loop};

/// The lost signals of the handle's newest acquisition (none for scopes whose holders cannot
/// lose a lock that way, or an RwLock); `None` if the handle holds nothing.
pub(crate) fn signals(py: Python<'_>, handle: &LockHandle) -> Option<Vec<LostSignal>> {
    let lock = handle.target.keyed();
    handle.with_newest(py, None, |r| match lock {
        Some(lock) => r
            .held
            .acquisitions()
            .iter()
            .filter_map(|a| lock.lost_signal(a))
            .collect(),
        None => Vec::new(),
    })
}

/// One signal that fires when any of `signals` does (one that never fires for none).
fn any_of(signals: Vec<LostSignal>) -> LostSignal {
    if signals.len() == 1 {
        return signals.into_iter().next().expect("one signal");
    }
    let any = LostSignal::new();
    for s in signals {
        let any = any.clone();
        s.on_lost(move || any.fire());
    }
    any
}

/// Blocks until `signals` fire or `timeout` (seconds; `None`: no limit) passes; whether they
/// fired. A raising signal handler (Ctrl-C) interrupts the wait.
pub(crate) fn wait(
    py: Python<'_>,
    signals: Vec<LostSignal>,
    timeout: Option<f64>,
) -> PyResult<bool> {
    let signal = any_of(signals);
    let deadline = timeout.and_then(|t| Instant::now().checked_add(Duration::from_secs_f64(t)));
    loop {
        let slice = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
            None => SLICE,
        };
        if py.detach(|| signal.wait_timeout(slice)) {
            return Ok(true);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
        py.check_signals()?;
    }
}

/// An asyncio future of the running loop that is resolved (with None) once `signals` fire.
pub(crate) fn future(py: Python<'_>, signals: Vec<LostSignal>) -> PyResult<Py<PyAny>> {
    let event_loop = running_loop(py)?;
    let fut = event_loop
        .call_method0(intern!(py, "create_future"))?
        .unbind();
    if signals.iter().any(LostSignal::is_lost) {
        fut.call_method1(py, intern!(py, "set_result"), (py.None(),))?;
        return Ok(fut);
    }
    let (event_loop, target) = (event_loop.unbind(), fut.clone_ref(py));
    // Fired on the scope's own thread, which must never wait for the GIL: the result goes to
    // the loop by way of the hand-off thread.
    any_of(signals).on_lost(move || {
        run_in_python(move |py| post_resolve(py, &event_loop, target));
    });
    Ok(fut)
}

//! Waiting styles: blocking (threads) and asyncio. Both drive the core's cancel-safe futures;
//! neither decides anything about the lock.
//!
//! **Blocking.** Try first with the GIL held (the uncontended path never drops the GIL). If that
//! fails, create the core's future and wait for it with [`block_on_until`] with the GIL released,
//! in slices of [`SLICE`], calling `check_signals` between slices so that Ctrl-C interrupts the
//! wait promptly. The future keeps its place in the queue between slices; dropping it (timeout,
//! signal) cancels the wait exactly: if the lock had just been handed to it, the core passes it on.
//!
//! **asyncio.** [`Acquire`] is an awaitable that polls the core's future on the event loop's
//! thread. While pending it yields an asyncio future to the task; the waker it gave the core
//! ([`LoopWaker`]) resolves that asyncio future through `loop.call_soon_threadsafe`, and the task
//! polls again. No thread waits: a pending acquire costs a few hundred bytes. A cancelled task
//! throws into the awaitable, which drops the core future (an exact cancel).

use std::mem;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use keylock_core::wait::block_on_until;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyType};

use crate::args::Wait;
use crate::errors::LockTimeout;
use crate::lock::{LockFuture, LockHandle, Target};

/// How long a blocking wait stays in the core before looking for signals.
const SLICE: Duration = Duration::from_millis(50);

/// Locks a mutex of ours; none of them is held across a call that could panic halfway through
/// an update, so a poisoned one is still consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Blocking acquire (see the module docs). Returns whether the lock was taken.
pub(crate) fn acquire_blocking(py: Python<'_>, target: &Target, wait: Wait) -> PyResult<bool> {
    if target.try_acquire() {
        return Ok(true);
    }
    let deadline = match wait {
        Wait::Try => return Ok(false),
        Wait::Forever => None,
        // A deadline past what Instant can represent is as good as none.
        Wait::For(d) => Instant::now().checked_add(d),
    };
    let mut fut = target.future();
    loop {
        let slice_end = Instant::now() + SLICE;
        let until = deadline.map_or(slice_end, |d| d.min(slice_end));
        if py
            .detach(|| block_on_until(fut.as_mut(), Some(until)))
            .is_ready()
        {
            return Ok(true);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            // Dropping the future leaves the queue; a lock granted meanwhile is passed on.
            return Ok(false);
        }
        // A raising signal handler propagates; `fut` is dropped on the way out.
        py.check_signals()?;
    }
}

/// `asyncio.get_running_loop`, looked up once.
fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GET.get_or_try_init(py, || {
        py.import("asyncio")?
            .getattr("get_running_loop")
            .map(Bound::unbind)
    })?
    .call0(py)
    .map(|l| l.into_bound(py))
}

/// `_resolve(fut)`, looked up once (it is passed to `call_soon_threadsafe`).
fn resolve_fn(py: Python<'_>) -> PyResult<&Py<PyAny>> {
    static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    RESOLVE.get_or_try_init(py, || {
        Ok(wrap_pyfunction!(_resolve, py)?.into_any().unbind())
    })
}

/// Wake-up callback run on the event loop: resolve `fut` unless the task gave up on it.
#[pyfunction]
pub(crate) fn _resolve(fut: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = fut.py();
    if !fut.call_method0(intern!(py, "done"))?.is_truthy()? {
        fut.call_method1(intern!(py, "set_result"), (py.None(),))?;
    }
    Ok(())
}

/// The waker an asyncio acquire gives the core. One per [`Acquire`], so the core sees the same
/// waker on every poll (`will_wake`) and never has to replace it.
struct LoopWaker {
    event_loop: Py<PyAny>,
    /// The asyncio future the task is awaiting now; a wake resolves it once.
    target: Mutex<Option<Py<PyAny>>>,
}

impl Wake for LoopWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(fut) = lock(&self.target).take() else {
            return; // already woken, and not polled since
        };
        // Called by whichever thread released the lock, with or without the GIL, and never with
        // a core queue lock held (the core wakes after unlocking).
        Python::try_attach(|py| {
            let posted = resolve_fn(py).and_then(|f| {
                self.event_loop
                    .call_method1(py, intern!(py, "call_soon_threadsafe"), (f, fut))
                    .map(drop)
            });
            if let Err(e) = posted {
                // Only a closed loop refuses; its tasks can never run again anyway.
                e.write_unraisable(py, None);
            }
        });
    }
}

/// Where an [`Acquire`] is.
enum State {
    /// Not awaited yet.
    Start,
    /// Waiting in the core's queue.
    Waiting {
        fut: LockFuture,
        waker: Arc<LoopWaker>,
        /// The `loop.call_later` handle of the timeout, if any.
        timer: Option<Py<PyAny>>,
        /// Set by the timer: poll once more, then give up.
        timed_out: bool,
    },
    /// Finished (taken, timed out, cancelled or closed).
    Done,
}

/// Awaitable returned by `acquire_async()` and `__aenter__()`.
///
/// It implements the coroutine protocol (`send`, `throw`, `close`) so that the awaiting task
/// can cancel it: a throw or close drops the core's future, which cancels the wait exactly.
#[pyclass(module = "keylock", name = "_Acquire", frozen)]
pub(crate) struct Acquire {
    handle: Py<LockHandle>,
    timeout: Option<f64>,
    /// `async with`: raise LockTimeout on timeout and return None on success; `acquire_async`:
    /// return True or False.
    raise_on_timeout: bool,
    state: Mutex<State>,
}

impl Acquire {
    pub(crate) fn new(
        handle: &Bound<'_, LockHandle>,
        timeout: Option<f64>,
        raise_on_timeout: bool,
    ) -> PyResult<Py<Self>> {
        Py::new(
            handle.py(),
            Self {
                handle: handle.clone().unbind(),
                timeout,
                raise_on_timeout,
                state: Mutex::new(State::Start),
            },
        )
    }

    /// The awaitable's result: `StopIteration(value)`, or LockTimeout.
    fn finish(&self, py: Python<'_>, taken: bool) -> PyErr {
        if self.raise_on_timeout {
            if taken {
                PyStopIteration::new_err(())
            } else {
                LockTimeout::new_err("timed out waiting for the lock")
            }
        } else {
            PyStopIteration::new_err((PyBool::new(py, taken).to_owned().unbind(),))
        }
    }

    /// Ends the wait, dropping the core future (which cancels it) outside our mutex.
    fn abandon(&self, py: Python<'_>) {
        let old = mem::replace(&mut *lock(&self.state), State::Done);
        if let State::Waiting {
            timer: Some(timer), ..
        } = &old
        {
            let _ = timer.call_method0(py, intern!(py, "cancel"));
        }
        drop(old);
    }

    /// One step of the coroutine: `Ok(fut)` yields `fut` to the task; `Err` is the result
    /// (StopIteration) or the exception.
    fn step(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let target = &this.handle.get().target;
        let mut st = lock(&this.state);
        if let State::Start = *st {
            if target.try_acquire() {
                *st = State::Done;
                return Err(this.finish(py, true));
            }
            if this.timeout.is_some_and(|t| t <= 0.0) {
                *st = State::Done;
                return Err(this.finish(py, false));
            }
            let event_loop = running_loop(py)?;
            let timer = match this.timeout {
                Some(t) => Some(
                    event_loop
                        .call_method1(
                            intern!(py, "call_later"),
                            (t, slf.getattr(intern!(py, "_on_timeout"))?),
                        )?
                        .unbind(),
                ),
                None => None,
            };
            *st = State::Waiting {
                fut: target.future(),
                waker: Arc::new(LoopWaker {
                    event_loop: event_loop.unbind(),
                    target: Mutex::new(None),
                }),
                timer,
                timed_out: false,
            };
        }
        let State::Waiting {
            fut,
            waker,
            timed_out,
            ..
        } = &mut *st
        else {
            return Err(PyRuntimeError::new_err(
                "cannot reuse an already awaited acquire",
            ));
        };
        // Arm the waker with a fresh asyncio future before polling, so that a wake-up that
        // races with this poll is not lost.
        let aio_fut = waker
            .event_loop
            .call_method0(py, intern!(py, "create_future"))?;
        *lock(&waker.target) = Some(aio_fut.clone_ref(py));
        let std_waker = Waker::from(Arc::clone(waker));
        let ready = fut
            .as_mut()
            .poll(&mut Context::from_waker(&std_waker))
            .is_ready();
        let expired = *timed_out;
        if ready || expired {
            drop(st);
            // Taken: the core future is spent. Timed out: dropping it cancels the wait.
            this.abandon(py);
            return Err(this.finish(py, ready));
        }
        drop(st);
        aio_fut.setattr(py, intern!(py, "_asyncio_future_blocking"), true)?;
        Ok(aio_fut)
    }
}

#[pymethods]
impl Acquire {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        Self::step(slf)
    }

    /// Resume the acquire (the value sent is ignored).
    #[pyo3(signature = (value, /))]
    fn send(slf: &Bound<'_, Self>, value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let _ = value;
        Self::step(slf)
    }

    /// Cancel the wait (nothing stays held), then raise the exception thrown in.
    #[pyo3(signature = (typ, val = None, tb = None, /))]
    fn throw(
        &self,
        py: Python<'_>,
        typ: &Bound<'_, PyAny>,
        val: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.abandon(py);
        let exc = if let Ok(cls) = typ.cast::<PyType>() {
            match val {
                Some(v) if v.is_instance(cls)? => v.clone(),
                Some(v) if !v.is_none() => cls.call1((v,))?,
                _ => cls.call0()?,
            }
        } else {
            typ.clone()
        };
        if let Some(tb) = tb.filter(|tb| !tb.is_none()) {
            exc.call_method1(intern!(py, "with_traceback"), (tb,))?;
        }
        Err(PyErr::from_value(exc))
    }

    /// Cancel the wait; nothing stays held.
    fn close(&self, py: Python<'_>) {
        self.abandon(py);
    }

    /// Timer callback: give up after one last poll.
    fn _on_timeout(&self, py: Python<'_>) -> PyResult<()> {
        let mut st = lock(&self.state);
        if let State::Waiting {
            waker,
            timed_out,
            timer,
            ..
        } = &mut *st
        {
            *timed_out = true;
            // The handle has run; dropping it breaks the cycle handle -> callback -> self.
            let ran = timer.take();
            let pending = lock(&waker.target).take();
            drop(st);
            drop(ran);
            if let Some(fut) = pending {
                _resolve(fut.bind(py))?;
            }
        }
        Ok(())
    }
}

/// An awaitable that is already done (returned by `__aexit__`, which releases synchronously).
#[pyclass(module = "keylock", name = "_Ready", frozen)]
pub(crate) struct Ready {
    value: Py<PyAny>,
}

impl Ready {
    pub(crate) fn none(py: Python<'_>) -> PyResult<Py<Self>> {
        Py::new(py, Self { value: py.None() })
    }
}

#[pymethods]
impl Ready {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<()> {
        Err(PyStopIteration::new_err((self.value.clone_ref(py),)))
    }

    #[pyo3(signature = (value, /))]
    fn send(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let _ = value;
        self.__next__(py)
    }

    #[pyo3(signature = (typ, val = None, tb = None, /))]
    fn throw(
        &self,
        typ: &Bound<'_, PyAny>,
        val: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _ = tb;
        let exc = match (typ.cast::<PyType>(), val) {
            (Ok(_), Some(v)) if !v.is_none() => v.clone(),
            (Ok(cls), _) => cls.call0()?,
            (Err(_), _) => typ.clone(),
        };
        Err(PyErr::from_value(exc))
    }

    fn close(&self) {}
}

//! Waiting styles: blocking (threads) and asyncio. Both drive the core's cancel-safe futures and
//! keep the acquisition the core hands out in the handle; neither decides anything about the
//! lock.
//!
//! **Blocking.** Try first with the GIL held (the uncontended path of an in-process lock object
//! never drops the GIL; a scope that may block is tried with it released). If that fails, create
//! the core's future and poll it once with the GIL held ([`poll_once`]), so that it stands in the
//! key's queue before any other thread can run; then wait for it with [`block_on_until`] with the
//! GIL released, in slices of [`SLICE`], calling `check_signals` between slices so that Ctrl-C
//! interrupts the wait promptly. The future keeps its place in the queue between slices and has
//! the caller's deadline, so the core ends a wait that runs out itself (`TimedOut`); dropping it
//! (signal) cancels the wait exactly: if the lock had just been handed to it, the core passes it
//! on. A lock object with metrics counts every call, so there the first try is left to the
//! future's first poll: a call that waits is one call to the core, as the caller made it.
//!
//! **asyncio.** [`Acquire`] is an awaitable that polls the core's future on the event loop's
//! thread. While pending it yields an asyncio future to the task; the waker it gave the core
//! ([`LoopWaker`]) resolves that asyncio future (directly when the wake-up comes from the loop's
//! own thread, through `loop.call_soon_threadsafe` from any other, by way of
//! [`crate::handoff`] from a thread that is not Python's), and the task polls again. No
//! thread waits: a pending acquire costs a few hundred bytes. A cancelled task throws into the
//! awaitable, which drops the core future (an exact cancel). An acquire or release that is
//! already done returns [`crate::ready`]'s awaitable instead.

use std::mem;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use keylock_core::wait::{block_on_until, poll_once};
use keylock_core::{Error, Owner};
use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::{MutexExt, PyOnceLock};
use pyo3::types::{PyBool, PyType};

use crate::args::Wait;
use crate::errors;
use crate::gil::with_gil_released;
use crate::handoff::run_in_python;
use crate::lock::{Held, HoldFuture, LockHandle};

/// How long a blocking wait stays in the core before looking for signals.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// Locks a mutex of ours (detached from the interpreter while it waits); none of them is held
/// across a call that could panic halfway through an update, so a poisoned one is still
/// consistent.
fn lock<'a, T>(py: Python<'_>, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
    m.lock_py_attached(py).unwrap_or_else(|e| e.into_inner())
}

/// Locks a mutex of ours from a thread that may not be attached to the interpreter.
fn lock_detached<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tries once without waiting; `Ok(false)` when the lock is taken by someone else.
#[inline]
pub(crate) fn try_acquire(
    py: Python<'_>,
    handle: &LockHandle,
    lease: Option<Duration>,
    owner: Option<Owner>,
) -> PyResult<bool> {
    if let Some(held) = handle.target.try_fast(lease, owner) {
        handle.push(py, held, None);
        return Ok(true);
    }
    let opts = handle.target.options(lease, owner);
    let tried = with_gil_released(py, handle.target.may_block(), || {
        handle.target.try_now(opts)
    });
    match tried {
        Ok(held) => {
            handle.push(py, held, owner);
            Ok(true)
        }
        Err(Error::WouldBlock) => Ok(false),
        Err(e) => Err(errors::to_py(py, e)),
    }
}

/// Blocking acquire (see the module docs). Returns whether the lock was taken.
pub(crate) fn acquire_blocking(
    py: Python<'_>,
    handle: &LockHandle,
    wait: Wait,
    lease: Option<Duration>,
) -> PyResult<bool> {
    let owner = handle.owner(py)?;
    // A lock object with metrics counts a failed try: there the future below is the only call
    // (its first poll tries, and the core counts the call as one that had to wait only if that
    // try fails).
    if (wait == Wait::Try || !handle.target.metered()) && try_acquire(py, handle, lease, owner)? {
        return Ok(true);
    }
    let deadline = match wait {
        Wait::Try => return Ok(false),
        Wait::Forever => None,
        // A deadline past what Instant can represent is as good as none.
        Wait::For(d) => Instant::now().checked_add(d),
    };
    // The core has the deadline, and ends the wait itself (`TimedOut`, which is what it counts).
    let mut fut = handle
        .target
        .future(handle.target.options(lease, owner), deadline);
    // Queue the waiter before the GIL goes: from then on every other thread may run, and a
    // request made after this one must find it in the queue (a reader behind a waiting writer
    // waits). A poll never waits, whatever the scope (a remote one sends its request and
    // returns), so it runs with the GIL held.
    if let Poll::Ready(result) = poll_once(Pin::new(&mut fut)) {
        return taken(py, handle, result, owner);
    }
    let mut first = true;
    loop {
        let slice_end = Instant::now() + SLICE;
        let until = deadline.map_or(slice_end, |d| d.min(slice_end));
        let waited = py.detach(|| {
            if mem::take(&mut first) {
                crate::stall::after_release();
            }
            block_on_until(Pin::new(&mut fut), Some(until))
        });
        if let Poll::Ready(result) = waited {
            return taken(py, handle, result, owner);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            // The core's future ended at the deadline in the last poll; one that did not (an
            // RwLock's, or a remote scope's still waiting for its server) is dropped, which
            // leaves the queue (a lock granted meanwhile is passed on).
            return Ok(false);
        }
        // A raising signal handler propagates; `fut` is dropped on the way out.
        py.check_signals()?;
    }
}

/// The end of a wait in the core: the acquisition kept in the handle (true), the deadline
/// reached (false), or the error raised.
fn taken(
    py: Python<'_>,
    handle: &LockHandle,
    result: Result<Held, Error>,
    owner: Option<Owner>,
) -> PyResult<bool> {
    match result {
        Ok(held) => {
            handle.push(py, held, owner);
            Ok(true)
        }
        Err(Error::TimedOut) => Ok(false),
        Err(e) => Err(errors::to_py(py, e)),
    }
}

/// `asyncio.get_running_loop`, looked up once.
pub(crate) fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
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
pub(crate) fn resolve_fn(py: Python<'_>) -> PyResult<&Py<PyAny>> {
    static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    RESOLVE.get_or_try_init(py, || {
        Ok(wrap_pyfunction!(_resolve, py)?.into_any().unbind())
    })
}

/// Posts `_resolve(fut)` to `event_loop` from a thread that does not run it. A closed loop
/// refuses, and that is no error: nothing can await the future any more (a wake-up or a loss
/// that raced the end of `asyncio.run`). Anything else is reported as unraisable.
pub(crate) fn post_resolve(py: Python<'_>, event_loop: &Py<PyAny>, fut: Py<PyAny>) {
    let posted = resolve_fn(py).and_then(|f| {
        event_loop
            .call_method1(py, intern!(py, "call_soon_threadsafe"), (f, fut))
            .map(drop)
    });
    if let Err(e) = posted {
        let closed = event_loop
            .call_method0(py, intern!(py, "is_closed"))
            .and_then(|c| c.is_truthy(py))
            .unwrap_or(false);
        if !closed {
            e.write_unraisable(py, None);
        }
    }
}

/// Wake-up callback run on the event loop: resolve `fut` unless the task gave up on it.
#[pyfunction]
pub(crate) fn _resolve(fut: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = fut.py();
    // Almost always still pending: try first, and look only if that failed (a future the task
    // cancelled meanwhile refuses a result; that is not an error here).
    match fut.call_method1(intern!(py, "set_result"), (py.None(),)) {
        Ok(_) => Ok(()),
        Err(_) if fut.call_method0(intern!(py, "done"))?.is_truthy()? => Ok(()),
        Err(e) => Err(e),
    }
}

/// The waker an asyncio acquire gives the core. One per [`Acquire`], so the core sees the same
/// waker on every poll (`will_wake`) and never has to replace it.
struct LoopWaker {
    event_loop: Py<PyAny>,
    /// The thread that runs the loop (`owner::thread_number`): a wake-up from it may resolve
    /// the future directly.
    loop_thread: u64,
    /// The asyncio future the task is awaiting now; a wake resolves it once.
    target: Mutex<Option<Py<PyAny>>>,
}

impl Wake for LoopWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(fut) = lock_detached(&self.target).take() else {
            return; // already woken, and not polled since
        };
        // Called by whichever thread released the lock (or the core's lease timer, or a remote
        // scope's runtime thread), with or without the GIL, and never with a core queue lock
        // held (the core wakes after unlocking). A thread that is not Python's hands the
        // wake-up to the hand-off thread rather than wait for the GIL. On the loop's own thread
        // (a task released the key) the future is resolved at once: that schedules the waiting
        // task without a trip through the loop's self-pipe.
        let this = Arc::clone(self);
        run_in_python(move |py| {
            if crate::owner::thread_number() == this.loop_thread {
                if let Err(e) = _resolve(fut.bind(py)) {
                    e.write_unraisable(py, None);
                }
            } else {
                post_resolve(py, &this.event_loop, fut);
            }
        });
    }
}

/// Where an [`Acquire`] is.
enum State {
    /// Not awaited yet; `tried`: `__aenter__` already tried to take the lock without waiting.
    Start { tried: bool },
    /// Waiting in the core's queue.
    Waiting {
        fut: HoldFuture,
        waker: Arc<LoopWaker>,
        /// `waker` as the `Waker` the core is given (made once, so the core sees the same one).
        std_waker: Waker,
        /// The `loop.call_later` handle of the timeout, if any.
        timer: Option<Py<PyAny>>,
        /// Set by the timer: poll once more, then give up.
        timed_out: bool,
    },
    /// Finished (taken, timed out, cancelled or closed).
    Done,
}

/// Awaitable returned by `acquire_async()` and, when the lock is taken, by `__aenter__()`.
///
/// It implements the coroutine protocol (`send`, `throw`, `close`) so that the awaiting task
/// can cancel it: a throw or close drops the core's future, which cancels the wait exactly.
#[pyclass(module = "keylock", name = "_Acquire", frozen)]
pub(crate) struct Acquire {
    handle: Py<LockHandle>,
    timeout: Option<f64>,
    lease: Option<Duration>,
    /// The owner, for a reentrant lock object: the task that asked.
    owner: Option<Owner>,
    /// `async with`: raise LockTimeout on timeout and return None on success; `acquire_async`:
    /// return True or False.
    raise_on_timeout: bool,
    state: Mutex<State>,
}

impl Acquire {
    pub(crate) fn new(
        handle: &Bound<'_, LockHandle>,
        timeout: Option<f64>,
        lease: Option<Duration>,
        owner: Option<Owner>,
        raise_on_timeout: bool,
        tried: bool,
    ) -> PyResult<Py<Self>> {
        Py::new(
            handle.py(),
            Self {
                handle: handle.clone().unbind(),
                timeout,
                lease,
                owner,
                raise_on_timeout,
                state: Mutex::new(State::Start { tried }),
            },
        )
    }

    /// The awaitable's result: `Ok(None)` (returns None without raising StopIteration),
    /// `StopIteration(value)`, or LockTimeout.
    fn finish(&self, py: Python<'_>, taken: bool) -> PyResult<Option<Py<PyAny>>> {
        if self.raise_on_timeout {
            if taken {
                Ok(None)
            } else {
                Err(errors::timeout(py))
            }
        } else {
            Err(PyStopIteration::new_err((PyBool::new(py, taken)
                .to_owned()
                .unbind(),)))
        }
    }

    /// Ends the wait, dropping the core future (which cancels it) outside our mutex.
    fn abandon(&self, py: Python<'_>) {
        let old = mem::replace(&mut *lock(py, &self.state), State::Done);
        if let State::Waiting {
            timer: Some(timer), ..
        } = &old
        {
            let _ = timer.call_method0(py, intern!(py, "cancel"));
        }
        drop(old);
    }

    /// One step of the coroutine: `Ok(Some(fut))` yields `fut` to the task; `Ok(None)` returns
    /// None; `Err` is the result (StopIteration) or the exception.
    fn step(slf: &Bound<'_, Self>) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let this = slf.get();
        let handle = this.handle.get();
        let mut st = lock(py, &this.state);
        if let State::Start { tried } = *st {
            let only_try = this.timeout.is_some_and(|t| t <= 0.0);
            // As for a blocking acquire: no try of our own before a wait that the core counts.
            if !tried
                && (only_try || !handle.target.metered())
                && crate::wait::try_acquire(py, handle, this.lease, this.owner)?
            {
                *st = State::Done;
                return this.finish(py, true);
            }
            if only_try {
                *st = State::Done;
                return this.finish(py, false);
            }
            // The core's deadline, taken before the loop's timer is set, so that it has passed
            // when the timer runs.
            let deadline = this
                .timeout
                .and_then(|t| Duration::try_from_secs_f64(t).ok())
                .and_then(|d| Instant::now().checked_add(d));
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
            let waker = Arc::new(LoopWaker {
                event_loop: event_loop.unbind(),
                loop_thread: crate::owner::thread_number(),
                target: Mutex::new(None),
            });
            *st = State::Waiting {
                fut: handle
                    .target
                    .future(handle.target.options(this.lease, this.owner), deadline),
                std_waker: Waker::from(Arc::clone(&waker)),
                waker,
                timer,
                timed_out: false,
            };
        }
        let State::Waiting {
            fut,
            waker,
            std_waker,
            timed_out,
            ..
        } = &mut *st
        else {
            return Err(PyRuntimeError::new_err(
                "cannot reuse an already awaited acquire",
            ));
        };
        // Poll first: after a wake-up the lock is usually ours now, and no asyncio future is
        // needed. Only if it is not, arm the waker with a fresh asyncio future and poll once
        // more, so that a wake-up between the two polls (which found the waker unarmed) is not
        // lost.
        let mut polled = fut.poll(&mut Context::from_waker(std_waker));
        let mut aio_fut = None;
        if polled.is_pending() && !*timed_out {
            let f = waker
                .event_loop
                .call_method0(py, intern!(py, "create_future"))?;
            *lock(py, &waker.target) = Some(f.clone_ref(py));
            polled = fut.poll(&mut Context::from_waker(std_waker));
            aio_fut = Some(f);
        }
        let expired = *timed_out;
        match (polled, aio_fut) {
            (Poll::Ready(result), _) => {
                drop(st);
                // The core future is spent.
                this.abandon(py);
                match result {
                    Ok(held) => {
                        handle.push(py, held, this.owner);
                        this.finish(py, true)
                    }
                    // The core's deadline (the same as the loop's timer).
                    Err(Error::TimedOut) => this.finish(py, false),
                    Err(e) => Err(errors::to_py(py, e)),
                }
            }
            (Poll::Pending, Some(aio_fut)) if !expired => {
                drop(st);
                aio_fut.setattr(py, intern!(py, "_asyncio_future_blocking"), true)?;
                Ok(Some(aio_fut))
            }
            (Poll::Pending, _) => {
                drop(st);
                // Timed out, and the future did not end by itself (an RwLock's, or a remote
                // scope's still waiting for its server): dropping it cancels the wait.
                this.abandon(py);
                this.finish(py, false)
            }
        }
    }
}

/// `Ok(None)` from a step, as a method's result: StopIteration(None).
fn stop_none(step: PyResult<Option<Py<PyAny>>>) -> PyResult<Py<PyAny>> {
    match step {
        Ok(Some(fut)) => Ok(fut),
        Ok(None) => Err(PyStopIteration::new_err(())),
        Err(e) => Err(e),
    }
}

/// The exception to raise for `throw(typ, val, tb)`, as a generator would build it.
fn thrown(
    py: Python<'_>,
    typ: &Bound<'_, PyAny>,
    val: Option<&Bound<'_, PyAny>>,
    tb: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyErr> {
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
    Ok(PyErr::from_value(exc))
}

#[pymethods]
impl Acquire {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Option<Py<PyAny>>> {
        Self::step(slf)
    }

    /// Resume the acquire (the value sent is ignored).
    #[pyo3(signature = (value, /))]
    fn send(slf: &Bound<'_, Self>, value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let _ = value;
        stop_none(Self::step(slf))
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
        Err(thrown(py, typ, val, tb)?)
    }

    /// Cancel the wait; nothing stays held.
    fn close(&self, py: Python<'_>) {
        self.abandon(py);
    }

    /// Timer callback: give up after one last poll.
    fn _on_timeout(&self, py: Python<'_>) -> PyResult<()> {
        let mut st = lock(py, &self.state);
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
            let pending = lock(py, &waker.target).take();
            drop(st);
            drop(ran);
            if let Some(fut) = pending {
                _resolve(fut.bind(py))?;
            }
        }
        Ok(())
    }
}

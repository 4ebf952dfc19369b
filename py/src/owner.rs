//! Owners for reentrant lock objects: the calling thread, or the current asyncio task when one
//! is running in this thread, so that a reentrant handle behaves as `threading.RLock` does for
//! threads and as a per-task RLock does inside asyncio.
//!
//! Each thread and each task gets its own number, never reused in the process, from one
//! counter: a thread keeps its number in a thread-local; a task keeps its number in a context
//! variable of its own context (a task runs every step in its own context), together with a weak
//! reference to the task, so that a child task, whose context starts as a copy of its parent's,
//! sees that the number is not its own and takes a fresh one. Nothing outlives its thread or
//! task, and no owner number can name two of them.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use keylock_core::Owner;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyWeakrefReference};

/// The next owner number; 0 is no owner.
static NEXT: AtomicU64 = AtomicU64::new(1);

fn fresh() -> Owner {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    Owner::new(id).expect("owner numbers start at 1 and a u64 does not wrap")
}

thread_local! {
    /// This thread's owner number, 0 until first asked.
    static THREAD: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's number (its owner number): unique in the process, cheap to read.
#[inline]
pub(crate) fn thread_number() -> u64 {
    thread_owner().get()
}

/// The calling thread as an owner.
fn thread_owner() -> Owner {
    THREAD.with(|cell| match Owner::new(cell.get()) {
        Some(owner) => owner,
        None => {
            let owner = fresh();
            cell.set(owner.get());
            owner
        }
    })
}

/// The functions and the context variable this module uses, looked up once.
struct Asyncio {
    get_running_loop: Py<PyAny>,
    current_task: Py<PyAny>,
    var: Py<PyAny>,
}

fn asyncio(py: Python<'_>) -> PyResult<&Asyncio> {
    static CELL: PyOnceLock<Asyncio> = PyOnceLock::new();
    CELL.get_or_try_init(py, || {
        let aio = py.import("asyncio")?;
        let var = py
            .import("contextvars")?
            .getattr("ContextVar")?
            .call1(("keylock.owner",))?;
        Ok(Asyncio {
            // Returns None outside a running loop (asyncio.get_running_loop raises instead).
            get_running_loop: aio.getattr("_get_running_loop")?.unbind(),
            current_task: aio.getattr("current_task")?.unbind(),
            var: var.unbind(),
        })
    })
}

/// The owner for an acquire or release made now: the current asyncio task if a loop is running
/// a task in this thread, else the thread.
pub(crate) fn current(py: Python<'_>) -> PyResult<Owner> {
    let aio = asyncio(py)?;
    let event_loop = aio.get_running_loop.call0(py)?;
    if event_loop.is_none(py) {
        return Ok(thread_owner());
    }
    let task = aio.current_task.call1(py, (event_loop,))?;
    if task.is_none(py) {
        // A loop callback outside any task: it runs on the loop's thread.
        return Ok(thread_owner());
    }
    let task = task.bind(py);
    let var = aio.var.bind(py);
    let mine = var.call_method1(intern!(py, "get"), (py.None(),))?;
    if let Ok(pair) = mine.cast::<PyTuple>()
        && let (Ok(r), Ok(id)) = (pair.get_item(0), pair.get_item(1))
        && let Ok(r) = r.cast::<PyWeakrefReference>()
        && r.upgrade().is_some_and(|t| t.is(task))
        && let Some(owner) = Owner::new(id.extract::<u64>()?)
    {
        return Ok(owner);
    }
    let owner = fresh();
    let entry = (PyWeakrefReference::new(task)?, owner.get());
    var.call_method1(intern!(py, "set"), (entry,))?;
    Ok(owner)
}

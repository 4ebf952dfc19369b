//! The exception hierarchy, made from the core's `Status` table: one exception per status a
//! Python caller can meet, each a subclass of `keylock.KeylockError` and of the standard
//! exception that code written for `threading` already catches (`TimeoutError`, `RuntimeError`,
//! `OverflowError`, `OSError`...). Each class carries its status's `status` name and `code`
//! number as class attributes, read from the table, so no number is written down here.
//!
//! Argument errors stay the standard `ValueError` / `TypeError` / `OverflowError`, as they are
//! for `threading.Lock`.

use keylock_core::{Error, Status};
use pyo3::exceptions::{
    PyBlockingIOError, PyException, PyOSError, PyOverflowError, PyPermissionError, PyRuntimeError,
    PyTimeoutError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// The standard exception a status's exception also derives from.
#[derive(Clone, Copy)]
enum Builtin {
    BlockingIO,
    Timeout,
    Runtime,
    Overflow,
    Permission,
    Os,
    /// A subclass of another keylock exception (named), not of a builtin directly.
    Under(&'static str),
}

/// The Python exception of each status: (class name, what it derives from, docstring). `None`
/// for statuses that are not errors (`Ok`), are argument errors (`ValueError`), or cannot reach
/// Python (`NullArgument`, `Panic`: C only).
fn spec(status: Status) -> Option<(&'static str, Builtin, &'static str)> {
    Some(match status {
        Status::WouldBlock => (
            "WouldBlockError",
            Builtin::BlockingIO,
            "The lock is held and the call was not to wait. (A non-blocking `acquire` returns \
             False instead of raising this.)",
        ),
        Status::TimedOut => (
            "LockTimeout",
            Builtin::Timeout,
            "Raised by `with` / `async with` on a handle made with a timeout when the wait runs \
             out (`acquire` returns False instead).",
        ),
        Status::NotLocked => (
            "NotLockedError",
            Builtin::Runtime,
            "Raised by `release()` of a handle that holds nothing, as threading.Lock raises \
             RuntimeError.",
        ),
        Status::NotOwner => (
            "NotOwnerError",
            Builtin::Runtime,
            "The acquisition is no longer the lock's current one (it was force-unlocked), or \
             the caller does not own it (a reentrant handle released by another thread or task, \
             as threading.RLock raises RuntimeError). The lock's current holder is untouched.",
        ),
        Status::LeaseExpired => (
            "LeaseExpiredError",
            Builtin::Under("NotOwnerError"),
            "The acquisition's lease ran out: the lock freed itself and may have had another \
             holder since, so the work done under it was not protected to its end.",
        ),
        Status::ReentrancyLimit => (
            "ReentrancyLimitError",
            Builtin::Overflow,
            "A reentrant acquire past the hold-count limit (threading.RLock raises \
             OverflowError when its count would overflow).",
        ),
        Status::CapacityExceeded => (
            "CapacityExceededError",
            Builtin::Runtime,
            "A lock table of fixed size (shared memory) is full: every entry is held or awaited.",
        ),
        Status::Incompatible => (
            "IncompatibleError",
            Builtin::Runtime,
            "A lock object made elsewhere does not match this build (another layout, version or \
             capacity, or a corrupt header).",
        ),
        Status::PermissionDenied => (
            "PermissionDeniedError",
            Builtin::Permission,
            "The operating system refused access to the lock object.",
        ),
        Status::Unavailable => (
            "UnavailableError",
            Builtin::Os,
            "The place the lock lives could not be reached (an I/O error, a refused or lost \
             connection).",
        ),
        _ => return None,
    })
}

/// The classes, made once at module init.
struct Classes {
    base: Py<PyType>,
    /// Indexed by status code.
    by_status: Vec<Option<Py<PyType>>>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn builtin<'py>(py: Python<'py>, b: Builtin, made: &[(&str, Py<PyType>)]) -> Bound<'py, PyType> {
    match b {
        Builtin::BlockingIO => py.get_type::<PyBlockingIOError>(),
        Builtin::Timeout => py.get_type::<PyTimeoutError>(),
        Builtin::Runtime => py.get_type::<PyRuntimeError>(),
        Builtin::Overflow => py.get_type::<PyOverflowError>(),
        Builtin::Permission => py.get_type::<PyPermissionError>(),
        Builtin::Os => py.get_type::<PyOSError>(),
        Builtin::Under(name) => made
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t.bind(py).clone())
            .expect("a keylock exception is declared after the one it derives from"),
    }
}

/// `type(name, bases, {...})` with keylock's module and a docstring.
fn make_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: Bound<'py, PyTuple>,
    doc: &str,
    status: Option<Status>,
) -> PyResult<Bound<'py, PyType>> {
    let ns = PyDict::new(py);
    ns.set_item("__module__", "keylock")?;
    ns.set_item("__doc__", doc)?;
    if let Some(status) = status {
        ns.set_item("status", status.name())?;
        ns.set_item("code", status.code())?;
    }
    Ok(py
        .get_type::<PyType>()
        .call1((name, bases, ns))?
        .cast_into::<PyType>()?)
}

/// Makes the hierarchy and adds every class to `m`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let classes = CLASSES.get_or_try_init(py, || -> PyResult<Classes> {
        let base = make_class(
            py,
            "KeylockError",
            PyTuple::new(py, [py.get_type::<PyException>()])?,
            "Base class of keylock's own exceptions. Each subclass also derives from the \
             standard exception that threading code already catches, and carries the `status` \
             name and `code` number that every keylock front end (C, Node, Rust) reports.",
            None,
        )?;
        let mut made: Vec<(&str, Py<PyType>)> = Vec::new();
        let mut by_status: Vec<Option<Py<PyType>>> = (0..Status::ALL.len()).map(|_| None).collect();
        for &status in Status::ALL {
            let Some((name, from, doc)) = spec(status) else {
                continue;
            };
            let parent = builtin(py, from, &made);
            let bases = match from {
                Builtin::Under(_) => PyTuple::new(py, [parent])?,
                _ => PyTuple::new(py, [base.clone(), parent])?,
            };
            let class = make_class(py, name, bases, doc, Some(status))?.unbind();
            by_status[status.code() as usize] = Some(class.clone_ref(py));
            made.push((name, class));
        }
        Ok(Classes {
            base: base.unbind(),
            by_status,
        })
    })?;
    m.add("KeylockError", classes.base.bind(py))?;
    for class in classes.by_status.iter().flatten() {
        let class = class.bind(py);
        m.add(class.name()?, class)?;
    }
    Ok(())
}

/// The exception class of `status`, if it has one.
fn class_of(py: Python<'_>, status: Status) -> Option<&Py<PyType>> {
    CLASSES
        .get(py)?
        .by_status
        .get(status.code() as usize)?
        .as_ref()
}

/// Raises the exception of `status` with `message`.
pub(crate) fn raise(py: Python<'_>, status: Status, message: impl Into<String>) -> PyErr {
    let message = message.into();
    match class_of(py, status) {
        Some(class) => PyErr::from_type(class.bind(py).clone(), message),
        None => PyRuntimeError::new_err(format!("{}: {message}", status.name())),
    }
}

/// `LockTimeout`, for `with` / `async with` whose wait ran out.
pub(crate) fn timeout(py: Python<'_>) -> PyErr {
    raise(py, Status::TimedOut, "timed out waiting for the lock")
}

/// `NotLockedError` for a handle that holds nothing (threading.Lock's message).
pub(crate) fn not_locked(py: Python<'_>) -> PyErr {
    raise(py, Status::NotLocked, "release unlocked lock")
}

/// `NotOwnerError` for a reentrant handle released by a thread or task that holds nothing
/// through it (threading.RLock's message).
pub(crate) fn not_owner(py: Python<'_>) -> PyErr {
    raise(py, Status::NotOwner, "cannot release un-acquired lock")
}

/// Maps a core error to its Python exception, by its status (the table every front end
/// shares). Argument errors are `ValueError`, as the standard library raises them.
pub(crate) fn to_py(py: Python<'_>, err: Error) -> PyErr {
    match err.status() {
        Status::InvalidArgument | Status::NullArgument => PyValueError::new_err(match err {
            Error::InvalidArgument(what) => what.to_owned(),
            other => other.to_string(),
        }),
        status => raise(py, status, err.to_string()),
    }
}

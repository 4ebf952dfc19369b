//! The exception hierarchy: keylock's errors are subclasses of the standard ones, so code that
//! catches `TimeoutError` or `RuntimeError` (as it would for `threading.Lock`) keeps working.

use keylock_core::{Error, Status};
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    keylock,
    LockTimeout,
    PyTimeoutError,
    "Raised by `with`/`async with` on a handle made with a timeout when the wait runs out."
);

create_exception!(
    keylock,
    NotLockedError,
    PyRuntimeError,
    "Raised by `release()` when the key (or stripe, or lock) is not locked."
);

/// Maps a core error to its Python exception, by its status (keylock-core's `Status`, the table
/// every front end shares). A status this module does not name yet raises `RuntimeError` with
/// the status's name and the error's text.
pub(crate) fn to_py(err: Error) -> PyErr {
    match err.status() {
        Status::NotLocked => NotLockedError::new_err("release unlocked lock"),
        Status::TimedOut => LockTimeout::new_err("timed out waiting for the lock"),
        Status::InvalidArgument => PyValueError::new_err(match err {
            Error::InvalidArgument(what) => what.to_owned(),
            other => other.to_string(),
        }),
        // WouldBlock never escapes: every try_* result is turned into `False` by the caller.
        status => PyRuntimeError::new_err(format!("{}: {err}", status.name())),
    }
}

//! The exception hierarchy: keylock's errors are subclasses of the standard ones, so code that
//! catches `TimeoutError` or `RuntimeError` (as it would for `threading.Lock`) keeps working.

use keylock_core::Error;
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

/// Maps a core error to its Python exception.
pub(crate) fn to_py(err: Error) -> PyErr {
    match err {
        Error::NotLocked => NotLockedError::new_err("release unlocked lock"),
        Error::TimedOut => LockTimeout::new_err("timed out waiting for the lock"),
        Error::InvalidArgument(what) => PyValueError::new_err(what),
        // WouldBlock never escapes: every try_* result is turned into `False` by the caller.
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

//! Argument checks: the same as `threading.Lock.acquire`'s so that a keylock handle can stand in
//! for a `threading.Lock`, and keylock's own (timeouts of handles, leases, modes).

use std::time::Duration;

use keylock_core::Mode;

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyFloat, PyString};

/// How long an acquire may wait.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Wait {
    /// Do not wait: take the lock only if it is free now.
    Try,
    /// Wait until the lock is taken (or a signal handler raises).
    Forever,
    /// Wait at most this long.
    For(Duration),
}

impl Wait {
    /// `None` (wait forever) or a number of seconds >= 0.
    pub(crate) fn from_optional_seconds(timeout: Option<f64>) -> Self {
        match timeout {
            None => Wait::Forever,
            Some(s) if s <= 0.0 => Wait::Try,
            Some(s) => Wait::For(Duration::from_secs_f64(s)),
        }
    }
}

/// `threading.TIMEOUT_MAX`, the longest timeout `threading.Lock.acquire` accepts.
fn timeout_max(py: Python<'_>) -> f64 {
    static MAX: PyOnceLock<f64> = PyOnceLock::new();
    *MAX.get_or_init(py, || {
        py.import("_thread")
            .and_then(|m| m.getattr("TIMEOUT_MAX"))
            .and_then(|v| v.extract())
            .unwrap_or(f64::MAX)
    })
}

/// Reads a number of seconds the way `threading.Lock.acquire` does: a `float`, or anything with
/// `__index__`; `TypeError` otherwise, `ValueError` for NaN.
fn seconds(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    let s = if let Ok(f) = obj.cast::<PyFloat>() {
        f.value()
    } else {
        obj.extract::<i64>()? as f64
    };
    if s.is_nan() {
        return Err(PyValueError::new_err("Invalid value NaN (not a number)"));
    }
    Ok(s)
}

/// The `blocking` argument of `acquire`: an integer (like `threading.Lock`, which rejects `None`
/// and strings), true when non-zero.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Blocking(pub(crate) bool);

impl<'a, 'py> FromPyObject<'a, 'py> for Blocking {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(b) = obj.extract::<bool>() {
            return Ok(Blocking(b));
        }
        Ok(Blocking(obj.extract::<i64>()? != 0))
    }
}

/// The `timeout` argument of `acquire`: seconds, `-1` for no limit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AcquireTimeout(pub(crate) f64);

impl<'a, 'py> FromPyObject<'a, 'py> for AcquireTimeout {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(AcquireTimeout(seconds(&obj)?))
    }
}

/// `threading.Lock.acquire(blocking, timeout)`'s checks, in its order.
pub(crate) fn acquire_wait(
    py: Python<'_>,
    blocking: Blocking,
    timeout: AcquireTimeout,
) -> PyResult<Wait> {
    let t = timeout.0;
    let unset = t == -1.0;
    if !blocking.0 {
        if !unset {
            return Err(PyValueError::new_err(
                "can't specify a timeout for a non-blocking call",
            ));
        }
        return Ok(Wait::Try);
    }
    if unset {
        return Ok(Wait::Forever);
    }
    if t < 0.0 {
        return Err(PyValueError::new_err(
            "timeout value must be a non-negative number",
        ));
    }
    if t > timeout_max(py) {
        return Err(PyOverflowError::new_err("timeout value is too large"));
    }
    Ok(if t == 0.0 {
        Wait::Try
    } else {
        Wait::For(Duration::from_secs_f64(t))
    })
}

/// keylock's own optional timeouts (`pool.lock(key, timeout=None)`, `acquire_async(timeout=None)`):
/// `None` for no limit, else seconds >= 0 (at most `threading.TIMEOUT_MAX`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OptTimeout(pub(crate) Option<f64>);

impl<'a, 'py> FromPyObject<'a, 'py> for OptTimeout {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_none() {
            return Ok(OptTimeout(None));
        }
        let t = seconds(&obj)?;
        if t < 0.0 {
            return Err(PyValueError::new_err(
                "timeout must be None or a non-negative number of seconds",
            ));
        }
        if t > timeout_max(obj.py()) {
            return Err(PyOverflowError::new_err("timeout value is too large"));
        }
        Ok(OptTimeout(Some(t)))
    }
}

/// A number of seconds > 0 and at most `threading.TIMEOUT_MAX` (a lease, an extension), as a
/// `Duration`.
fn positive_seconds(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let s = seconds(obj)?;
    if s <= 0.0 {
        return Err(PyValueError::new_err(format!(
            "{what} must be a positive number of seconds"
        )));
    }
    if s > timeout_max(obj.py()) {
        return Err(PyOverflowError::new_err(format!(
            "{what} value is too large"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

/// The `lease` argument: `None` (no lease) or seconds > 0. When a lease runs out the lock frees
/// itself and the next acquirer (with a higher fence) may take it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Lease(pub(crate) Option<Duration>);

impl<'a, 'py> FromPyObject<'a, 'py> for Lease {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_none() {
            return Ok(Lease(None));
        }
        Ok(Lease(Some(positive_seconds(&obj, "lease")?)))
    }
}

/// The `seconds` argument of `extend`: > 0.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Extension(pub(crate) Duration);

impl<'a, 'py> FromPyObject<'a, 'py> for Extension {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Extension(positive_seconds(&obj, "the extension")?))
    }
}

/// A mode by its Web Locks name: `"exclusive"` or `"shared"`.
pub(crate) fn mode(obj: &Bound<'_, PyAny>) -> PyResult<Mode> {
    let s = obj.cast::<PyString>().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err("a mode is the string 'exclusive' or 'shared'")
    })?;
    match s.to_str()? {
        "exclusive" => Ok(Mode::Exclusive),
        "shared" => Ok(Mode::Shared),
        other => Err(PyValueError::new_err(format!(
            "unknown mode {other:?}: use 'exclusive' or 'shared'"
        ))),
    }
}

//! Lock handles: `threading.Lock`-compatible views of one key, a set of keys, or one side of an
//! RwLock. This module is the Python protocol of the handle classes (`acquire`, `release`,
//! `with`, `async with`, `repr`); what a handle locks is [`crate::lock`], and how it waits is
//! [`crate::wait`].
//!
//! A handle owns no lock state: "locked" lives in the core, under the key. Two handles for the
//! same key are interchangeable, and any thread may release what another acquired, exactly as
//! with `threading.Lock`. Acquiring leaks the core's guard (the lock stays held with no guard
//! object) and `release()` calls the core's explicit unlock.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::args::{AcquireTimeout, Blocking, OptTimeout, Wait, acquire_wait};
use crate::errors::{self, LockTimeout};
use crate::key::OwnedKey;
use crate::lock::{LockHandle, Target};
use crate::wait::{self, Acquire, Ready};

/// Shows a key the way it was most likely written: as text when its bytes are UTF-8.
fn key_repr(py: Python<'_>, key: &[u8]) -> PyResult<String> {
    let obj = match std::str::from_utf8(key) {
        Ok(s) => PyString::new(py, s).into_any(),
        Err(_) => PyBytes::new(py, key).into_any(),
    };
    Ok(obj.repr()?.to_string())
}

impl LockHandle {
    fn acquire_wait(&self, py: Python<'_>, wait: Wait) -> PyResult<bool> {
        wait::acquire_blocking(py, &self.target, wait)
    }
}

#[pymethods]
impl LockHandle {
    /// Acquire the lock, blocking or non-blocking, as `threading.Lock.acquire` does.
    ///
    /// With `blocking` true (the default) wait until the lock is taken, at most `timeout`
    /// seconds if `timeout` is not -1. The GIL is released while waiting, and a signal handler
    /// that raises (Ctrl-C) interrupts the wait within 100 ms, leaving the lock not taken.
    /// Return True if the lock was taken, False if not. Arguments are checked exactly as
    /// `threading.Lock.acquire` checks them (ValueError, OverflowError past
    /// `threading.TIMEOUT_MAX`, TypeError).
    #[pyo3(
        signature = (blocking = Blocking(true), timeout = AcquireTimeout(-1.0)),
        text_signature = "($self, /, blocking=True, timeout=-1)"
    )]
    fn acquire(
        &self,
        py: Python<'_>,
        blocking: Blocking,
        timeout: AcquireTimeout,
    ) -> PyResult<bool> {
        let wait = acquire_wait(py, blocking, timeout)?;
        self.acquire_wait(py, wait)
    }

    /// Release the lock. Any thread may release it.
    ///
    /// Raises keylock.NotLockedError (a RuntimeError) if it is not locked.
    fn release(&self) -> PyResult<()> {
        self.target.release().map_err(errors::to_py)
    }

    /// Return True if the lock is held (by anyone): a non-blocking acquire would fail.
    fn locked(&self) -> bool {
        self.target.locked()
    }

    /// Acquire without blocking the event loop; return True once taken, False if `timeout`
    /// (seconds, None for no limit) ran out first.
    ///
    /// The wait occupies no thread. Cancelling the awaiting task (task.cancel(),
    /// asyncio.wait_for, asyncio.timeout) leaves the lock not taken by it.
    #[pyo3(signature = (timeout = OptTimeout(None)), text_signature = "($self, /, timeout=None)")]
    fn acquire_async(slf: &Bound<'_, Self>, timeout: OptTimeout) -> PyResult<Py<Acquire>> {
        Acquire::new(slf, timeout.0, false)
    }

    /// The `timeout` this handle was made with: the limit for `with` and `async with`.
    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.timeout
    }

    /// Acquire (within the handle's timeout, else raise keylock.LockTimeout); return True.
    fn __enter__(&self, py: Python<'_>) -> PyResult<bool> {
        if self.acquire_wait(py, Wait::from_optional_seconds(self.timeout))? {
            Ok(true)
        } else {
            Err(LockTimeout::new_err("timed out waiting for the lock"))
        }
    }

    /// Release the lock, whatever the exception.
    fn __exit__(
        &self,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.release()
    }

    /// Awaitable: acquire without blocking the event loop (within the handle's timeout, else
    /// raise keylock.LockTimeout).
    fn __aenter__(slf: &Bound<'_, Self>) -> PyResult<Py<Acquire>> {
        let timeout = slf.get().timeout;
        Acquire::new(slf, timeout, true)
    }

    /// Release the lock, whatever the exception.
    fn __aexit__(
        &self,
        py: Python<'_>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<Py<Ready>> {
        self.release()?;
        Ready::none(py)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let py = slf.py();
        let this = slf.get();
        let state = if this.target.locked() {
            "locked"
        } else {
            "unlocked"
        };
        let name = slf.get_type().qualname()?;
        let what = match &this.target {
            Target::Key { key, .. } | Target::Stripe { key, .. } => {
                format!(" key={}", key_repr(py, key)?)
            }
            Target::PoolMany { keys, .. } | Target::StripeMany { keys, .. } => {
                let shown: PyResult<Vec<String>> = keys.iter().map(|k| key_repr(py, k)).collect();
                format!(" keys=[{}]", shown?.join(", "))
            }
            Target::Read(_) | Target::Write(_) => String::new(),
        };
        Ok(format!(
            "<{state} keylock.{name} object{what} at {:#x}>",
            slf.as_ptr() as usize
        ))
    }
}

/// The lock of one key, from `KeyPool.lock(key)` or `StripedLock.lock(key)`.
///
/// Works like a `threading.Lock` (acquire/release/locked/with, and as the lock of a
/// `threading.Condition`) and with asyncio (`async with`, `await acquire_async()`).
#[pyclass(module = "keylock", name = "KeyLock", extends = LockHandle, frozen)]
pub(crate) struct KeyLock;

#[pymethods]
impl KeyLock {
    /// The key, as the bytes it stands for (see keylock.key_bytes).
    #[getter]
    fn key<'py>(slf: &Bound<'py, Self>) -> Option<Bound<'py, PyBytes>> {
        match &slf.as_super().get().target {
            Target::Key { key, .. } | Target::Stripe { key, .. } => {
                Some(PyBytes::new(slf.py(), key))
            }
            _ => None,
        }
    }
}

/// Several keys taken together, from `lock_many(keys)`: all of them or none, deadlock-free
/// whatever order other callers name them in.
///
/// Usable with `with` and `async with`, and with the same acquire/release/locked protocol as
/// KeyLock (`locked()` is True when any of the keys is held).
#[pyclass(module = "keylock", name = "ManyLock", extends = LockHandle, frozen)]
pub(crate) struct ManyLock;

#[pymethods]
impl ManyLock {
    /// The keys, as the bytes they stand for, in the order given.
    #[getter]
    fn keys<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyList>> {
        let py = slf.py();
        let keys: &[OwnedKey] = match &slf.as_super().get().target {
            Target::PoolMany { keys, .. } | Target::StripeMany { keys, .. } => keys,
            _ => &[],
        };
        PyList::new(py, keys.iter().map(|k| PyBytes::new(py, k)))
    }
}

/// The shared (read) side of an RwLock, from `RwLock.read()`. `locked()` is True while a
/// writer holds the lock.
#[pyclass(module = "keylock", name = "ReadLock", extends = LockHandle, frozen)]
pub(crate) struct ReadLock;

/// The exclusive (write) side of an RwLock, from `RwLock.write()`. `locked()` is True while
/// anyone (reader or writer) holds the lock.
#[pyclass(module = "keylock", name = "WriteLock", extends = LockHandle, frozen)]
pub(crate) struct WriteLock;

/// Makes a handle of class `C` (a subclass of LockHandle).
pub(crate) fn make<'py, C>(
    py: Python<'py>,
    sub: C,
    target: Target,
    timeout: OptTimeout,
) -> PyResult<Bound<'py, C>>
where
    C: pyo3::PyClass<BaseType = LockHandle>,
{
    Bound::new(
        py,
        PyClassInitializer::from(LockHandle::new(target, timeout)).add_subclass(sub),
    )
}

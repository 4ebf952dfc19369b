//! `keylock.RwLock`: a reader-writer lock whose readers scale (the core's adder lock).

use std::sync::Arc;

use keylock_core as core;
use pyo3::prelude::*;

use crate::args::OptTimeout;
use crate::direct;
use crate::handle::{ReadLock, WriteLock};
use crate::lock::{LockHandle, Target};

/// A reader-writer lock: any number of readers, or one writer. Readers do not contend on a
/// shared counter, so read-mostly code scales.
///
/// `rw.read()` and `rw.write()` return handles that follow threading.Lock's protocol and
/// asyncio's (`with`, `async with`, acquire/release/locked).
#[pyclass(module = "keylock", name = "RwLock", frozen)]
pub(crate) struct RwLock {
    inner: Arc<core::RwLock>,
}

#[pymethods]
impl RwLock {
    #[new]
    fn new() -> Self {
        Self {
            inner: Arc::new(core::RwLock::new()),
        }
    }

    /// Return the shared (read) handle. `timeout` (seconds, None for no limit) bounds the wait
    /// of `with` / `async with`, which raise keylock.LockTimeout when it runs out.
    #[pyo3(signature = (timeout = OptTimeout(None)), text_signature = "($self, timeout=None)")]
    fn read<'py>(&self, py: Python<'py>, timeout: OptTimeout) -> PyResult<Bound<'py, ReadLock>> {
        let target = Target::Read(Arc::clone(&self.inner));
        direct::make(
            py,
            ReadLock,
            LockHandle::new(target, timeout.0, None, false),
        )
    }

    /// Return the exclusive (write) handle. `timeout` (seconds, None for no limit) bounds the
    /// wait of `with` / `async with`, which raise keylock.LockTimeout when it runs out.
    #[pyo3(signature = (timeout = OptTimeout(None)), text_signature = "($self, timeout=None)")]
    fn write<'py>(&self, py: Python<'py>, timeout: OptTimeout) -> PyResult<Bound<'py, WriteLock>> {
        let target = Target::Write(Arc::clone(&self.inner));
        direct::make(
            py,
            WriteLock,
            LockHandle::new(target, timeout.0, None, false),
        )
    }

    /// Return True if the lock is held in any mode.
    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    /// Return True if a writer holds the lock.
    fn is_write_locked(&self) -> bool {
        self.inner.is_write_locked()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let inner = &slf.get().inner;
        let state = if inner.is_write_locked() {
            "write-locked"
        } else if inner.is_locked() {
            "read-locked"
        } else {
            "unlocked"
        };
        format!(
            "<{state} keylock.RwLock object at {:#x}>",
            slf.as_ptr() as usize
        )
    }
}

//! `keylock.KeyPool`: an exact lock per key, with memory only for the keys held or waited for.

use std::sync::Arc;

use keylock_core as core;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::OptTimeout;
use crate::handle::{self, KeyLock, ManyLock};
use crate::key::{to_key, to_owned_key, to_owned_keys};
use crate::lock::Target;

/// A lock per key, exact (two different keys never block each other), with memory only for the
/// keys held or waited for right now: the drop-in replacement for a dict of threading.Lock.
///
/// `pool.lock(key)` returns a KeyLock handle that follows threading.Lock's protocol and
/// asyncio's (`with`, `async with`, acquire/release/locked). Keys are str (UTF-8), bytes,
/// bytearray, memoryview or int (see keylock.key_bytes).
#[pyclass(module = "keylock", name = "KeyPool", frozen)]
pub(crate) struct KeyPool {
    inner: Arc<core::KeyPool>,
}

#[pymethods]
impl KeyPool {
    #[new]
    fn new() -> Self {
        Self {
            inner: Arc::new(core::KeyPool::new()),
        }
    }

    /// Return the lock handle of `key`. `timeout` (seconds, None for no limit) bounds the wait
    /// of `with` / `async with`, which raise keylock.LockTimeout when it runs out.
    #[pyo3(signature = (key, timeout = OptTimeout(None)), text_signature = "($self, key, timeout=None)")]
    fn lock<'py>(
        &self,
        key: &Bound<'py, PyAny>,
        timeout: OptTimeout,
    ) -> PyResult<Bound<'py, KeyLock>> {
        let target = Target::Key {
            pool: Arc::clone(&self.inner),
            key: to_owned_key(key)?,
        };
        handle::make(key.py(), KeyLock, target, timeout)
    }

    /// Return a handle that takes every key of `keys` together (deadlock-free, all or none) and
    /// releases them together; use it with `with` or `async with`.
    #[pyo3(signature = (keys, timeout = OptTimeout(None)), text_signature = "($self, keys, timeout=None)")]
    fn lock_many<'py>(
        &self,
        keys: &Bound<'py, PyAny>,
        timeout: OptTimeout,
    ) -> PyResult<Bound<'py, ManyLock>> {
        let target = Target::PoolMany {
            pool: Arc::clone(&self.inner),
            keys: to_owned_keys(keys)?,
        };
        handle::make(keys.py(), ManyLock, target, timeout)
    }

    /// Return True if `key` is held now.
    fn is_locked(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.inner.is_locked(&*to_key(key)?))
    }

    /// The number of keys held now.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Return counters as a dict: held (keys held now), waiting (callers waiting now),
    /// entries_in_use (keys held or awaited), entries_allocated (the pool's memory, in keys),
    /// peak_held, acquisitions, contended (acquisitions that had to wait).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("held", s.held)?;
        d.set_item("waiting", s.waiting)?;
        d.set_item("entries_in_use", s.entries_in_use)?;
        d.set_item("entries_allocated", s.entries_allocated)?;
        d.set_item("peak_held", s.peak_held)?;
        d.set_item("acquisitions", s.acquisitions)?;
        d.set_item("contended", s.contended)?;
        Ok(d)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        format!(
            "<keylock.KeyPool held={} at {:#x}>",
            slf.get().inner.len(),
            slf.as_ptr() as usize
        )
    }
}

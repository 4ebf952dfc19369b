//! `keylock.StripedLock`: a fixed array of locks; a key locks the stripe its hash picks.

use std::sync::Arc;

use keylock_core as core;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::args::OptTimeout;
use crate::errors;
use crate::handle::{self, KeyLock, ManyLock};
use crate::key::{to_key, to_owned_key, to_owned_keys};
use crate::lock::Target;

/// A fixed number of locks (rounded up to a power of two); a key locks the stripe its hash
/// picks. Memory is fixed whatever the number of keys; two keys may share a stripe and then
/// block each other. With `seed`, keys map to the same stripes in every process.
///
/// `striped.lock(key)` returns a KeyLock handle that follows threading.Lock's protocol and
/// asyncio's. Keys are str (UTF-8), bytes, bytearray, memoryview or int (see keylock.key_bytes).
#[pyclass(module = "keylock", name = "StripedLock", frozen)]
pub(crate) struct StripedLock {
    inner: Arc<core::StripedLock>,
}

#[pymethods]
impl StripedLock {
    #[new]
    #[pyo3(signature = (stripes = 1024, *, seed = None))]
    fn new(stripes: i64, seed: Option<u64>) -> PyResult<Self> {
        let n = usize::try_from(stripes)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| PyValueError::new_err("stripes must be at least 1"))?;
        let inner = match seed {
            Some(seed) => core::StripedLock::with_seed(n, seed),
            None => core::StripedLock::new(n),
        }
        .map_err(errors::to_py)?;
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The number of stripes (a power of two).
    #[getter]
    fn stripes(&self) -> usize {
        self.inner.stripes()
    }

    /// The largest number of stripes accepted.
    #[classattr]
    #[pyo3(name = "MAX_STRIPES")]
    fn max_stripes() -> usize {
        core::StripedLock::MAX_STRIPES
    }

    /// Return the index of the stripe that `key` locks.
    fn stripe_of(&self, key: &Bound<'_, PyAny>) -> PyResult<usize> {
        Ok(self.inner.stripe_of(&*to_key(key)?))
    }

    /// Return the lock handle of `key` (of its stripe). `timeout` (seconds, None for no limit)
    /// bounds the wait of `with` / `async with`, which raise keylock.LockTimeout when it runs out.
    #[pyo3(signature = (key, timeout = OptTimeout(None)), text_signature = "($self, key, timeout=None)")]
    fn lock<'py>(
        &self,
        key: &Bound<'py, PyAny>,
        timeout: OptTimeout,
    ) -> PyResult<Bound<'py, KeyLock>> {
        let target = Target::Stripe {
            lock: Arc::clone(&self.inner),
            key: to_owned_key(key)?,
        };
        handle::make(key.py(), KeyLock, target, timeout)
    }

    /// Return a handle that takes the stripes of every key of `keys` together (deadlock-free,
    /// each stripe once) and releases them together; use it with `with` or `async with`.
    #[pyo3(signature = (keys, timeout = OptTimeout(None)), text_signature = "($self, keys, timeout=None)")]
    fn lock_many<'py>(
        &self,
        keys: &Bound<'py, PyAny>,
        timeout: OptTimeout,
    ) -> PyResult<Bound<'py, ManyLock>> {
        let target = Target::StripeMany {
            lock: Arc::clone(&self.inner),
            keys: to_owned_keys(keys)?,
        };
        handle::make(keys.py(), ManyLock, target, timeout)
    }

    /// Return True if the stripe of `key` is held now (by this key or another on its stripe).
    fn is_locked(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.inner.is_locked(&*to_key(key)?))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        format!(
            "<keylock.StripedLock stripes={} at {:#x}>",
            slf.get().inner.stripes(),
            slf.as_ptr() as usize
        )
    }
}

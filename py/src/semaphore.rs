//! `keylock.Semaphore`: a keyed semaphore (at most `permits` units held per key), the core's
//! lock object opened with `OpenOptions::permits`. It is reached through the same `KeyedLock`
//! trait and the same handles as the locks: its handles ([`crate::handle::Permit`]) are one-key
//! targets carrying a weight, so acquiring, waiting, releasing, fences and leases are the lock
//! handles' code unchanged. The core decides everything (which weights it takes, who goes
//! next); this class only names the operations as a semaphore's users expect them.
//!
//! It is not a `KeyedLock` subclass: a semaphore has no modes, no reentrancy and no multi-key
//! form, so the locks' `lock` / `read` / `write` / `lock_many` would be wrong on it. It keeps a
//! `Keyed` object (not shown to Python) for its handles to point at.

use keylock_core::{self as core, Mode, OpenOptions};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::args::{Lease, OptTimeout};
use crate::direct;
use crate::errors;
use crate::handle::Permit;
use crate::key::to_owned_key;
use crate::lock::{Keyed, LockHandle, Target};
use crate::locks::{LockInfo, stats_dict};
use crate::metrics::MetricsSnapshot;

/// A number of units as the core takes it. Out of `u32`'s range it becomes a value the core
/// refuses with its own message (0 below, `u32::MAX` above), so every bad count is judged by
/// the core alone and raises the same ValueError.
fn units(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(if n < 0 { 0 } else { u32::MAX })
}

/// At most `permits` units held per key at once: per tenant, per API token, per downstream
/// host. `sem.acquire(key, weight)` returns a handle that takes `weight` units of `key` (with
/// `with`, `async with`, or acquire/release as a threading.BoundedSemaphore of one permit).
/// Strict FIFO per key: a heavy request at the head of the queue is never passed by lighter
/// ones that came after it. Every acquisition has its own fence, rising per key. With
/// `metrics=True` the semaphore counts what it does (see `metrics()`). Keys are str (UTF-8),
/// bytes, bytearray, memoryview or int (see keylock.key_bytes).
#[pyclass(module = "keylock", name = "Semaphore", frozen)]
pub(crate) struct Semaphore {
    keyed: Py<Keyed>,
}

impl Semaphore {
    fn open(py: Python<'_>, name: &str, permits: i64, metrics: bool) -> PyResult<Self> {
        let options = OpenOptions::new().permits(units(permits)).metrics(metrics);
        let keyed = Py::new(py, Keyed::open(py, name, &options)?)?;
        Ok(Self { keyed })
    }

    fn stats_of(&self, py: Python<'_>) -> PyResult<core::ScopeStats> {
        self.keyed
            .get()
            .call(py, |l| l.stats())
            .map_err(|e| errors::to_py(py, e))
    }
}

#[pymethods]
impl Semaphore {
    #[new]
    #[pyo3(signature = (permits, *, metrics = false))]
    fn new(py: Python<'_>, permits: i64, metrics: bool) -> PyResult<Self> {
        Self::open(py, "local:", permits, metrics)
    }

    /// Open the semaphore that `name` names with `permits` units per key: "local:" (in this
    /// process, the same as Semaphore(permits)), "shm:NAME" (shared by the processes of this
    /// machine), "redis://..." or "postgres://..." (shared by every process that opens the same
    /// prefix); every open of a shared one must give the same permits (IncompatibleError
    /// otherwise).
    /// `metrics=True` counts what this semaphore object does (see `metrics()`).
    #[classmethod]
    #[pyo3(name = "open", signature = (name, permits, *, metrics = false))]
    fn open_named(
        cls: &Bound<'_, PyType>,
        name: &str,
        permits: i64,
        metrics: bool,
    ) -> PyResult<Py<Self>> {
        let py = cls.py();
        Py::new(py, Self::open(py, name, permits, metrics)?)
    }

    /// Return the handle of `weight` units of `key` (it takes nothing until it is acquired):
    /// use it with `with` / `async with`, or its acquire/release. `timeout` (seconds, None for
    /// no limit) bounds the wait of `with` / `async with`, which raise keylock.LockTimeout when
    /// it runs out; `lease` (seconds) makes every acquisition through the handle end by itself
    /// after that long. A weight below 1 or above the permits raises ValueError when acquired.
    #[pyo3(
        signature = (key, weight = 1, timeout = OptTimeout(None), *, lease = Lease(None)),
        text_signature = "($self, key, weight=1, timeout=None, *, lease=None)"
    )]
    fn acquire<'py>(
        &self,
        key: &Bound<'py, PyAny>,
        weight: i64,
        timeout: OptTimeout,
        lease: Lease,
    ) -> PyResult<Bound<'py, Permit>> {
        let py = key.py();
        let target = Target::Key {
            lock: self.keyed.clone_ref(py),
            key: to_owned_key(key)?,
            mode: Mode::Exclusive,
            weight: units(weight),
        };
        direct::make(
            py,
            Permit,
            LockHandle::new(target, timeout.0, lease.0, false),
        )
    }

    /// The units per key.
    #[getter]
    fn permits(&self) -> u32 {
        self.keyed.get().inner.permits().unwrap_or(0)
    }

    /// The most permits a semaphore can have.
    #[classattr]
    #[pyo3(name = "MAX_PERMITS")]
    fn max_permits() -> u32 {
        core::KeyedSemaphore::<Vec<u8>>::MAX_PERMITS
    }

    /// The name the semaphore was opened with ("local:" for one made in this process), with a
    /// URL's password shown as `***`.
    #[getter]
    fn name(&self) -> &str {
        &self.keyed.get().name
    }

    /// Return who holds `key` (a snapshot: `units` held, `holders`, `waiters`, the newest
    /// `fence`), or None when nobody does.
    fn info(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<LockInfo>> {
        self.keyed.get().info(key)
    }

    /// End every hold of `key` whoever holds it, advancing its fence, for units left behind by
    /// holders that will never release them. Their handles then release nothing (their
    /// `release()` raises NotOwnerError). Return whether the key was held.
    fn force_release(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.keyed.get().force_unlock(key)
    }

    /// Return the semaphore object's metrics, totals since it was opened (a MetricsSnapshot;
    /// `acquired` counts acquisitions, whatever their weight), or None when it was opened
    /// without `metrics=True`.
    fn metrics(&self) -> Option<MetricsSnapshot> {
        self.keyed.get().metrics()
    }

    /// The number of keys with units held now.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.stats_of(py)?.keys_held())
    }

    /// Return the counts as a dict, the same keys as KeyPool.stats(): `held` counts keys with
    /// units held, `shared_holds` the units held.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.stats_of(py)?)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let this = slf.get();
        let held = this
            .stats_of(slf.py())
            .map_or_else(|_| "?".to_owned(), |s| s.keys_held().to_string());
        format!(
            "<keylock.Semaphore name={:?} permits={} held={held} at {:#x}>",
            this.keyed.get().name,
            this.permits(),
            slf.as_ptr() as usize
        )
    }
}

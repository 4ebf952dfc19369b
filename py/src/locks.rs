//! The keyed lock objects: `keylock.KeyedLock` (the base class, over the core's `KeyedLock`
//! trait) and its two kinds, `KeyPool` (an exact lock per key) and `StripedLock` (a fixed array
//! of locks). Both are made by `keylock_core::open_with` from a name (`"local:"` by default;
//! `"shm:NAME"` and `"redis://..."` where the build has those scopes), so every scope the core
//! knows is reached the same way and this module knows nothing about any of them.

use keylock_core::{self as core, LockKey, Mode, OpenOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::args::{Lease, OptTimeout};
use crate::direct;
use crate::errors;
use crate::gil::with_gil_released;
use crate::handle::{KeyLock, ManyLock, ReentrantKeyLock};
use crate::key::{to_key, to_owned_entries, to_owned_key};
use crate::lock::{Keyed, LockHandle, Target};
use crate::metrics::MetricsSnapshot;

impl Keyed {
    /// Opens the lock object (or semaphore) `name` names, with `options`.
    pub(crate) fn open(py: Python<'_>, name: &str, options: &OpenOptions) -> PyResult<Self> {
        // Opening a remote scope connects to it: wait with the GIL released.
        let inner = py
            .detach(|| core::open_with(name, options))
            .map_err(|e| errors::to_py(py, e))?;
        Ok(Self {
            reentrant: inner.is_reentrant(),
            // A lock object with metrics is the core's `Metered`, which gives no `as_any` (its
            // calls must go through the trait to be counted): it is treated as one that may
            // block, and calls into it let the GIL go.
            may_block: inner.as_any().is_none(),
            metered: inner.metrics().is_some(),
            inner,
            name: core::redact_scope_name(name),
            fifo: options.fifo,
        })
    }

    /// Runs `f` on the core's lock object, with the GIL released if it may block.
    #[inline]
    pub(crate) fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&dyn core::KeyedLock) -> T + Send,
    ) -> T {
        let inner = &*self.inner;
        with_gil_released(py, self.may_block, || f(inner))
    }

    /// The handle of one key in `mode`: `lock`, `read` and `write` (their Python methods are
    /// made by [`crate::vectorcall`]).
    #[inline]
    pub(crate) fn handle<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        mode: Mode,
        timeout: OptTimeout,
        lease: Lease,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = key.py();
        let reentrant = slf.get().reentrant;
        let target = Target::Key {
            lock: slf.clone().unbind(),
            key: to_owned_key(key)?,
            mode,
            weight: 1,
        };
        let handle = LockHandle::new(target, timeout.0, lease.0, reentrant);
        if reentrant && mode == Mode::Exclusive {
            Ok(direct::make(py, ReentrantKeyLock, handle)?.into_any())
        } else {
            Ok(direct::make(py, KeyLock, handle)?.into_any())
        }
    }
}

/// The options every opener takes.
fn options(
    reentrant: bool,
    fifo: bool,
    metrics: bool,
    capacity: Option<usize>,
    permissions: Option<u32>,
) -> OpenOptions {
    let mut o = OpenOptions::new()
        .reentrant(reentrant)
        .fifo(fifo)
        .metrics(metrics);
    if let Some(capacity) = capacity {
        o = o.capacity(capacity);
    }
    if let Some(permissions) = permissions {
        o = o.mode(permissions);
    }
    o
}

#[pymethods]
impl Keyed {
    /// Return a handle that takes every key of `keys` together (deadlock-free, all or none)
    /// and releases them together; use it with `with` or `async with`. Each entry is a key
    /// (taken exclusively) or a `(key, mode)` pair, mode "exclusive" or "shared".
    #[pyo3(
        signature = (keys, timeout = OptTimeout(None), *, lease = Lease(None)),
        text_signature = "($self, keys, timeout=None, *, lease=None)"
    )]
    fn lock_many<'py>(
        slf: &Bound<'py, Self>,
        keys: &Bound<'py, PyAny>,
        timeout: OptTimeout,
        lease: Lease,
    ) -> PyResult<Bound<'py, ManyLock>> {
        let target = Target::Many {
            lock: slf.clone().unbind(),
            keys: to_owned_entries(keys)?,
        };
        let handle = LockHandle::new(target, timeout.0, lease.0, slf.get().reentrant);
        direct::make(keys.py(), ManyLock, handle)
    }

    /// Free `key` whoever holds it (in either mode), advancing its fence, for a lock left
    /// behind by a holder that will never release it. The old holders' handles then release
    /// nothing (their `release()` raises NotOwnerError). Return whether the key was held.
    pub(crate) fn force_unlock(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = key.py();
        let key = to_key(key)?;
        let k = LockKey::new(&key);
        self.call(py, |l| l.force_unlock(k))
            .map_err(|e| errors::to_py(py, e))
    }

    /// Return True if `key` is held now (by this key or, in a StripedLock, by another on its
    /// stripe).
    fn is_locked(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = key.py();
        let key = to_key(key)?;
        let k = LockKey::new(&key);
        self.call(py, |l| l.is_locked(k))
            .map_err(|e| errors::to_py(py, e))
    }

    /// Return who holds `key` and how (a snapshot), or None when it is free.
    pub(crate) fn info(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<LockInfo>> {
        let py = key.py();
        let key = to_key(key)?;
        let k = LockKey::new(&key);
        let info = self
            .call(py, |l| l.info(k))
            .map_err(|e| errors::to_py(py, e))?;
        Ok(info.map(|i| LockInfo {
            fence: i.fence,
            mode: i.mode.as_str(),
            holders: i.holders,
            holds: i.holds,
            owner: i.owner.map(core::Owner::get),
            lease_remaining: i.lease_remaining.map(|d| d.as_secs_f64()),
            waiters: i.waiters,
            units: i.units,
        }))
    }

    /// The name the lock object was opened with ("local:" for one made in this process), with
    /// a URL's password shown as `***`.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Whether the lock object is reentrant: a thread (or asyncio task) that holds a key may
    /// acquire it again, and only it may release it, as with threading.RLock.
    #[getter]
    fn reentrant(&self) -> bool {
        self.reentrant
    }

    /// Whether every release hands the lock to the next waiter in order (strict FIFO, as the
    /// Web Locks API specifies) instead of letting a newcomer take a free lock first.
    #[getter]
    fn fifo(&self) -> bool {
        self.fifo
    }

    /// Return the lock object's metrics, totals since it was opened (a MetricsSnapshot), or
    /// None when it was opened without `metrics=True`.
    pub(crate) fn metrics(&self) -> Option<MetricsSnapshot> {
        self.inner.metrics().map(MetricsSnapshot::from)
    }
}

/// What `info(key)` reports about a held key: a snapshot.
#[pyclass(module = "keylock", name = "LockInfo", frozen, get_all)]
pub(crate) struct LockInfo {
    /// The current fence: the exclusive holder's, or for shared holders the one they read.
    fence: u64,
    /// "exclusive" or "shared".
    mode: &'static str,
    /// Holders now (1 for an exclusive holder).
    holders: u32,
    /// The exclusive holder's hold count (above 1 only for reentrant acquisitions).
    holds: u32,
    /// The exclusive holder's owner number, in a reentrant lock object.
    owner: Option<u64>,
    /// Seconds left on the earliest lease among the holders, if any has one.
    lease_remaining: Option<f64>,
    /// Callers waiting for the key.
    waiters: usize,
    /// A semaphore's units held now (the sum of its holders' weights); for a lock, the same as
    /// `holders`.
    units: u32,
}

#[pymethods]
impl LockInfo {
    fn __repr__(&self) -> String {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "None".to_owned());
        format!(
            "LockInfo(fence={}, mode='{}', holders={}, holds={}, owner={}, lease_remaining={}, \
             waiters={}, units={})",
            self.fence,
            self.mode,
            self.holders,
            self.holds,
            opt(self.owner.map(|o| o.to_string())),
            opt(self.lease_remaining.map(|s| format!("{s:.3}"))),
            self.waiters,
            self.units
        )
    }
}

/// A lock per key, exact (two different keys never block each other), with memory only for the
/// keys held or waited for right now: the drop-in replacement for a dict of threading.Lock.
///
/// `pool.lock(key)` returns a handle that follows threading.Lock's protocol and asyncio's
/// (`with`, `async with`, acquire/release/locked); `pool.read(key)` a shared one. With
/// `reentrant=True` handles follow threading.RLock's protocol; with `fifo=True` every release
/// hands the key to the next waiter in order; with `metrics=True` the pool counts what it does
/// (see `metrics()`). Keys are str (UTF-8), bytes, bytearray, memoryview or int (see
/// keylock.key_bytes).
#[pyclass(module = "keylock", name = "KeyPool", extends = Keyed, frozen)]
pub(crate) struct KeyPool;

impl KeyPool {
    fn init(
        py: Python<'_>,
        name: &str,
        options: &OpenOptions,
    ) -> PyResult<PyClassInitializer<Self>> {
        Ok(PyClassInitializer::from(Keyed::open(py, name, options)?).add_subclass(KeyPool))
    }

    /// The core's counts, read with the GIL released where the lock object may block (a
    /// shared-memory region counts under its table mutex, which another process may hold for a
    /// moment; a Redis scope asks its runtime).
    fn stats_of(slf: &Bound<'_, Self>) -> PyResult<core::ScopeStats> {
        let py = slf.py();
        slf.as_super()
            .get()
            .call(py, |l| l.stats())
            .map_err(|e| errors::to_py(py, e))
    }
}

#[pymethods]
impl KeyPool {
    #[new]
    #[pyo3(signature = (*, reentrant = false, fifo = false, metrics = false))]
    fn new(
        py: Python<'_>,
        reentrant: bool,
        fifo: bool,
        metrics: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        Self::init(py, "local:", &options(reentrant, fifo, metrics, None, None))
    }

    /// Open the pool that `name` names: "local:" (in this process, the same as KeyPool()),
    /// "shm:NAME" (shared by the processes of this machine) or "redis://HOST:PORT/DB", where
    /// this build has those scopes (ValueError otherwise). `capacity` (the most keys held or
    /// awaited at once) and `permissions` (of a shared-memory region this call creates) apply
    /// to fixed-size scopes only. `metrics=True` counts what this lock object does (see
    /// `metrics()`).
    #[classmethod]
    #[pyo3(signature = (name, *, reentrant = false, fifo = false, metrics = false, capacity = None, permissions = None))]
    #[allow(clippy::too_many_arguments)] // the keyword arguments of a Python classmethod
    fn open(
        cls: &Bound<'_, PyType>,
        name: &str,
        reentrant: bool,
        fifo: bool,
        metrics: bool,
        capacity: Option<usize>,
        permissions: Option<u32>,
    ) -> PyResult<Py<KeyPool>> {
        let py = cls.py();
        let o = options(reentrant, fifo, metrics, capacity, permissions);
        let init = Self::init(py, name, &o)?;
        Py::new(py, init)
    }

    /// The number of keys held now: by anyone in the scope, or, where the scope cannot tell
    /// (Redis), by this process.
    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Ok(Self::stats_of(slf)?.keys_held())
    }

    /// Return the counts as a dict, the same keys on every scope, None where the scope cannot
    /// tell: held, waiting (queued), shared_holds, held_here, waiting_here, capacity,
    /// entries_in_use, entries_allocated, peak_in_use, contended.
    fn stats<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(slf.py(), &Self::stats_of(slf)?)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let base = slf.as_super().get();
        let held = base
            .call(slf.py(), |l| l.stats())
            .map_or_else(|_| "?".to_owned(), |s| s.keys_held().to_string());
        format!(
            "<keylock.KeyPool name={:?} held={held}{} at {:#x}>",
            base.name,
            if base.reentrant { " reentrant" } else { "" },
            slf.as_ptr() as usize
        )
    }
}

/// The core's counts as the dict `stats()` returns (the same keys for every lock object).
pub(crate) fn stats_dict<'py>(
    py: Python<'py>,
    s: &core::ScopeStats,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("held", s.held)?;
    d.set_item("waiting", s.waiting)?;
    d.set_item("shared_holds", s.shared_holds)?;
    d.set_item("held_here", s.held_here)?;
    d.set_item("waiting_here", s.waiting_here)?;
    d.set_item("capacity", s.capacity)?;
    d.set_item("entries_in_use", s.entries_in_use)?;
    d.set_item("entries_allocated", s.entries_allocated)?;
    d.set_item("peak_in_use", s.peak_in_use)?;
    d.set_item("contended", s.contended)?;
    Ok(d)
}

/// A fixed number of locks (rounded up to a power of two); a key locks the stripe its hash
/// picks. Memory is fixed whatever the number of keys; two keys may share a stripe and then
/// block each other. With `seed`, keys map to the same stripes in every process.
///
/// `striped.lock(key)` returns a handle that follows threading.Lock's protocol and asyncio's;
/// `read`, `write`, `lock_many`, `reentrant`, `fifo` and `metrics` as for KeyPool. Keys are
/// str (UTF-8), bytes, bytearray, memoryview or int (see keylock.key_bytes).
#[pyclass(module = "keylock", name = "StripedLock", extends = Keyed, frozen)]
pub(crate) struct StripedLock;

/// The options of a striped lock object.
#[allow(clippy::too_many_arguments)] // the keyword arguments of the Python openers
fn striped_options(
    stripes: i64,
    seed: Option<u64>,
    reentrant: bool,
    fifo: bool,
    metrics: bool,
    capacity: Option<usize>,
    permissions: Option<u32>,
) -> PyResult<OpenOptions> {
    let n = usize::try_from(stripes)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| PyValueError::new_err("stripes must be at least 1"))?;
    let o = options(reentrant, fifo, metrics, capacity, permissions).stripes(n);
    Ok(match seed {
        Some(seed) => o.seed(seed),
        None => o,
    })
}

#[pymethods]
impl StripedLock {
    #[new]
    #[pyo3(signature = (stripes = 1024, *, seed = None, reentrant = false, fifo = false, metrics = false))]
    fn new(
        py: Python<'_>,
        stripes: i64,
        seed: Option<u64>,
        reentrant: bool,
        fifo: bool,
        metrics: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        let o = striped_options(stripes, seed, reentrant, fifo, metrics, None, None)?;
        Ok(PyClassInitializer::from(Keyed::open(py, "local:", &o)?).add_subclass(StripedLock))
    }

    /// Open the striped lock that `name` names ("local:", or "shm:NAME" / "redis://..." where
    /// this build has those scopes), with `stripes` stripes (see KeyPool.open).
    #[classmethod]
    #[pyo3(signature = (name, stripes = 1024, *, seed = None, reentrant = false, fifo = false, metrics = false, capacity = None, permissions = None))]
    #[allow(clippy::too_many_arguments)] // the keyword arguments of a Python classmethod
    fn open(
        cls: &Bound<'_, PyType>,
        name: &str,
        stripes: i64,
        seed: Option<u64>,
        reentrant: bool,
        fifo: bool,
        metrics: bool,
        capacity: Option<usize>,
        permissions: Option<u32>,
    ) -> PyResult<Py<StripedLock>> {
        let py = cls.py();
        let o = striped_options(
            stripes,
            seed,
            reentrant,
            fifo,
            metrics,
            capacity,
            permissions,
        )?;
        Py::new(
            py,
            PyClassInitializer::from(Keyed::open(py, name, &o)?).add_subclass(StripedLock),
        )
    }

    /// The number of stripes (a power of two).
    #[getter]
    fn stripes(slf: &Bound<'_, Self>) -> usize {
        slf.as_super().get().inner.stripes().unwrap_or(0)
    }

    /// The largest number of stripes accepted.
    #[classattr]
    #[pyo3(name = "MAX_STRIPES")]
    fn max_stripes() -> usize {
        core::StripedLock::MAX_STRIPES
    }

    /// Return the index of the stripe that `key` locks.
    fn stripe_of(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<usize> {
        let key = to_key(key)?;
        Ok(slf
            .as_super()
            .get()
            .inner
            .stripe_of(LockKey::new(&key))
            .unwrap_or(0))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let base = slf.as_super().get();
        format!(
            "<keylock.StripedLock name={:?} stripes={}{} at {:#x}>",
            base.name,
            base.inner.stripes().unwrap_or(0),
            if base.reentrant { " reentrant" } else { "" },
            slf.as_ptr() as usize
        )
    }
}

/// Remove the shared-memory region that `name` ("shm:NAME") names; return whether it existed.
///
/// Processes that have the region open keep using it; the next open of the name makes a new,
/// empty region. ValueError for any other name (only shared-memory regions can be removed) or
/// in a build without the shared-memory scope; keylock.PermissionDeniedError /
/// keylock.UnavailableError when the file cannot be removed.
#[pyfunction]
#[pyo3(signature = (name, /))]
pub(crate) fn unlink(py: Python<'_>, name: &str) -> PyResult<bool> {
    core::unlink(name).map_err(|e| errors::to_py(py, e))
}

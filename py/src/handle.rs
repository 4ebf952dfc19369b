//! Lock handles' Python protocol: `threading.Lock`-compatible views of one key, a set of keys,
//! or one side of an RwLock (`acquire`, `release`, `with`, `async with`, `repr`), the
//! acquisition's details (`fence`, `is_current()`, `lease_remaining()`, `extend()`), and for
//! reentrant lock objects `threading.RLock`'s protocol. What a handle locks and holds is
//! [`crate::lock`]; how it waits is [`crate::wait`].
//!
//! A handle keeps the record of each acquisition it made and releases exactly that, whichever
//! thread calls `release()` (as with `threading.Lock`). In a reentrant lock object an
//! acquisition belongs to the thread or asyncio task that made it, and only that owner may
//! release it (as with `threading.RLock`).

use std::time::Instant;

use keylock_core::{LockKey, Mode, Owner, Status};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PySequence, PyString, PyTuple};

use crate::args::{AcquireTimeout, Blocking, Extension, Lease, OptTimeout, Wait, acquire_wait};
use crate::direct::handle_classes;
use crate::errors;
use crate::key::OwnedKey;
use crate::lock::{Held, LockHandle, Target};
use crate::ready;
use crate::wait::{self, Acquire};

/// Shows a key the way it was most likely written: as text when its bytes are UTF-8.
fn key_repr(py: Python<'_>, key: &[u8]) -> PyResult<String> {
    let obj = match std::str::from_utf8(key) {
        Ok(s) => PyString::new(py, s).into_any(),
        Err(_) => PyBytes::new(py, key).into_any(),
    };
    Ok(obj.repr()?.to_string())
}

impl LockHandle {
    /// The lease of an acquire: its own, else the handle's.
    fn lease_of(&self, lease: Option<Lease>) -> Option<std::time::Duration> {
        lease.and_then(|l| l.0).or(self.lease)
    }

    /// Releases the caller's newest hold (see the module docs). `in_flight`: an exception is
    /// propagating out of a `with` block, which a refusal (the hold went stale) must not hide.
    #[inline]
    fn release_newest(&self, py: Python<'_>, in_flight: bool) -> PyResult<()> {
        if !self.reentrant && self.try_release_only_cas(py) {
            return Ok(());
        }
        let owner = self.owner(py)?;
        let Some(record) = self.take(py, owner) else {
            return Err(if self.reentrant {
                errors::not_owner(py)
            } else {
                errors::not_locked(py)
            });
        };
        match self.target.release(py, record.held, record.owner) {
            Ok(()) => Ok(()),
            Err(_) if in_flight => Ok(()),
            Err(e) => Err(errors::to_py(py, e)),
        }
    }

    /// The fence of the newest hold, if the handle holds anything that has one.
    pub(crate) fn fence(&self, py: Python<'_>) -> Option<u64> {
        self.read_newest(py, None, |r| match &r.held {
            Held::One(a) => Some(a.fence()),
            Held::Write(g) => Some(g.fence()),
            Held::Many(_) | Held::Read(_) => None,
        })
        .flatten()
    }

    /// NotLockedError for a detail of a handle that holds nothing.
    fn holds_nothing(py: Python<'_>) -> PyErr {
        errors::raise(py, Status::NotLocked, "the handle holds nothing")
    }

    /// `with`: acquire within the handle's timeout (else LockTimeout); True. (The Python
    /// method is made by [`crate::with`].)
    #[inline]
    pub(crate) fn enter(&self, py: Python<'_>) -> PyResult<bool> {
        if wait::acquire_blocking(
            py,
            self,
            Wait::from_optional_seconds(self.timeout),
            self.lease,
        )? {
            Ok(true)
        } else {
            Err(errors::timeout(py))
        }
    }

    /// The end of `with` and `async with`: release whatever the exception; `in_flight`: one is
    /// propagating, so a refusal (the hold went stale) is not raised over it.
    #[inline]
    pub(crate) fn exit(&self, py: Python<'_>, in_flight: bool) -> PyResult<()> {
        self.release_newest(py, in_flight)
    }

    /// `async with`: a free lock is taken by this call itself (the result is the done
    /// awaitable); otherwise an awaitable that waits within the handle's timeout.
    #[inline]
    pub(crate) fn aenter(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let owner = this.owner(py)?;
        // A lock object with metrics counts a failed try: there the awaitable's first poll
        // takes a free lock instead (and awaiting it does not suspend either).
        let tries = !this.target.metered() || this.timeout.is_some_and(|t| t <= 0.0);
        if tries && wait::try_acquire(py, this, this.lease, owner)? {
            return ready::get(py);
        }
        Ok(Acquire::new(slf, this.timeout, this.lease, owner, true, tries)?.into_any())
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
    /// `threading.TIMEOUT_MAX`, TypeError). `lease` (seconds; default: the handle's) ends the
    /// acquisition by itself after that long.
    #[pyo3(
        signature = (blocking = Blocking(true), timeout = AcquireTimeout(-1.0), *, lease = None),
        text_signature = "($self, /, blocking=True, timeout=-1, *, lease=None)"
    )]
    fn acquire(
        &self,
        py: Python<'_>,
        blocking: Blocking,
        timeout: AcquireTimeout,
        lease: Option<Lease>,
    ) -> PyResult<bool> {
        let wait = acquire_wait(py, blocking, timeout)?;
        wait::acquire_blocking(py, self, wait, self.lease_of(lease))
    }

    /// Release the handle's newest acquisition. Any thread may release it, except in a
    /// reentrant lock object, where only the thread or task that acquired it may.
    ///
    /// Raises keylock.NotLockedError (a RuntimeError) if the handle holds nothing;
    /// keylock.NotOwnerError (a RuntimeError) for a reentrant handle the caller holds nothing
    /// through, or for an acquisition that was force-unlocked; keylock.LeaseExpiredError when
    /// its lease ran out. The key's current holder is never touched.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.release_newest(py, false)
    }

    /// Return True if the lock is held (by anyone) so that a non-blocking acquire through this
    /// handle would fail: for a shared handle, while an exclusive holder holds it.
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        self.target.locked(py).map_err(|e| errors::to_py(py, e))
    }

    /// Acquire without blocking the event loop; return True once taken, False if `timeout`
    /// (seconds, None for no limit) ran out first.
    ///
    /// The wait occupies no thread. Cancelling the awaiting task (task.cancel(),
    /// asyncio.wait_for, asyncio.timeout) leaves the lock not taken by it.
    #[pyo3(
        signature = (timeout = OptTimeout(None), *, lease = None),
        text_signature = "($self, /, timeout=None, *, lease=None)"
    )]
    fn acquire_async(
        slf: &Bound<'_, Self>,
        timeout: OptTimeout,
        lease: Option<Lease>,
    ) -> PyResult<Py<Acquire>> {
        let this = slf.get();
        let owner = this.owner(slf.py())?;
        Acquire::new(slf, timeout.0, this.lease_of(lease), owner, false, false)
    }

    /// The `timeout` this handle was made with: the limit for `with` and `async with`.
    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.timeout
    }

    /// The `lease` this handle was made with (seconds), used by every acquire that gives none.
    #[getter]
    fn lease(&self) -> Option<f64> {
        self.lease.map(|d| d.as_secs_f64())
    }

    /// Whether the newest acquisition still holds the lock: False once it was released,
    /// force-unlocked or its lease ran out (or if the handle holds nothing).
    fn is_current(&self, py: Python<'_>) -> PyResult<bool> {
        match self.with_newest(py, None, |r| self.target.is_current(py, &r.held)) {
            Some(r) => r.map_err(|e| errors::to_py(py, e)),
            None => Ok(false),
        }
    }

    /// Seconds left on the newest acquisition's lease (0.0 once it ran out), None if it has no
    /// lease. NotLockedError if the handle holds nothing.
    fn lease_remaining(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        let now = Instant::now();
        self.read_newest(py, None, |r| {
            r.held
                .acquisitions()
                .iter()
                .filter_map(|a| a.lease_deadline())
                .map(|t| t.saturating_duration_since(now).as_secs_f64())
                .reduce(f64::min)
        })
        .ok_or_else(|| Self::holds_nothing(py))
    }

    /// Move the end of the newest acquisition's lease to `seconds` from now. Raises
    /// LeaseExpiredError if it already ran out (or NotOwnerError if it was force-unlocked), and
    /// ValueError if the acquisition has no lease.
    fn extend(&self, py: Python<'_>, seconds: Extension) -> PyResult<()> {
        let target = &self.target;
        self.with_newest(py, None, |r| target.extend(py, &mut r.held, seconds.0))
            .ok_or_else(|| Self::holds_nothing(py))?
            .map_err(|e| errors::to_py(py, e))
    }

    /// Whether the previous holder of the lock died holding it (cross-process scopes only):
    /// the data it protected may be half-changed. False if the handle holds nothing.
    #[getter]
    fn owner_died(&self, py: Python<'_>) -> bool {
        self.read_newest(py, None, |r| {
            r.held.acquisitions().iter().any(|a| a.owner_died())
        })
        .unwrap_or(false)
    }

    /// Whether the newest acquisition was lost behind the holder's back: a Redis lease that
    /// could not be renewed in time, or a force-unlock that the renewal found (the renewal runs
    /// every third of the lease). Once True it stays True, and `release()` raises
    /// NotOwnerError or LeaseExpiredError. Always False for scopes whose holders cannot lose a
    /// lock that way (in-process, shared memory), for an RwLock, and if the handle holds
    /// nothing. Asks no server (`is_current()` does).
    #[getter]
    fn lost(&self, py: Python<'_>) -> bool {
        crate::lost::signals(py, self).is_some_and(|s| s.iter().any(|s| s.is_lost()))
    }

    /// Block until the newest acquisition is lost (see `lost`) or `timeout` seconds (None: no
    /// limit) pass; return whether it was lost. The GIL is released while waiting, and a signal
    /// handler that raises (Ctrl-C) interrupts the wait. For scopes whose holders cannot lose a
    /// lock this waits out the timeout and returns False. NotLockedError if the handle holds
    /// nothing.
    #[pyo3(
        signature = (timeout = OptTimeout(None)),
        text_signature = "($self, /, timeout=None)"
    )]
    fn wait_lost(&self, py: Python<'_>, timeout: OptTimeout) -> PyResult<bool> {
        let signals = crate::lost::signals(py, self).ok_or_else(|| Self::holds_nothing(py))?;
        crate::lost::wait(py, signals, timeout.0)
    }

    /// Return an asyncio future of the running loop that is done (result None) once the newest
    /// acquisition is lost (see `lost`): await it, or race it against the work done under the
    /// lock (`asyncio.wait(..., return_when=FIRST_COMPLETED)`, `asyncio.wait_for`). Each call
    /// makes a new future; cancelling one is harmless. It never completes for scopes whose
    /// holders cannot lose a lock. NotLockedError if the handle holds nothing.
    fn lost_future(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let signals = crate::lost::signals(py, self).ok_or_else(|| Self::holds_nothing(py))?;
        crate::lost::future(py, signals)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let py = slf.py();
        let this = slf.get();
        let state = if this.target.locked(py).unwrap_or(false) {
            "locked"
        } else {
            "unlocked"
        };
        let name = slf.get_type().qualname()?;
        let what = match &this.target {
            Target::Key {
                lock,
                key,
                mode,
                weight,
            } => {
                let mut s = format!(" key={}", key_repr(py, key)?);
                if lock.get().inner.permits().is_some() {
                    s.push_str(&format!(" weight={weight}"));
                }
                if *mode == Mode::Shared {
                    s.push_str(" mode='shared'");
                }
                if this.reentrant {
                    // As threading.RLock shows its owner and count.
                    let info = lock.get().inner.info(LockKey::new(key)).ok().flatten();
                    let owner = info.and_then(|i| i.owner).map_or(0, Owner::get);
                    let count = info.map_or(0, |i| if i.owner.is_some() { i.holds } else { 0 });
                    s.push_str(&format!(" owner={owner} count={count}"));
                }
                s
            }
            Target::Many { keys, .. } => {
                let shown: PyResult<Vec<String>> =
                    keys.iter().map(|(k, _)| key_repr(py, k)).collect();
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

/// The key and mode of a one-key handle.
fn key_and_mode(handle: &LockHandle) -> Option<(&OwnedKey, Mode)> {
    match &handle.target {
        Target::Key { key, mode, .. } => Some((key, *mode)),
        _ => None,
    }
}

/// The lock of one key, from `lock(key)`, `read(key)` or `write(key)` of a KeyPool or a
/// StripedLock (of a lock object that is not reentrant).
///
/// Works like a `threading.Lock` (acquire/release/locked/with, and as the lock of a
/// `threading.Condition`) and with asyncio (`async with`, `await acquire_async()`). `mode` is
/// "exclusive" (lock, write) or "shared" (read: any number of shared holders at once).
#[pyclass(module = "keylock", name = "KeyLock", extends = LockHandle, subclass, frozen)]
pub(crate) struct KeyLock;

#[pymethods]
impl KeyLock {
    /// The key, as the bytes it stands for (see keylock.key_bytes).
    #[getter]
    fn key<'py>(slf: &Bound<'py, Self>) -> Option<Bound<'py, PyBytes>> {
        key_and_mode(slf.as_super().get()).map(|(k, _)| PyBytes::new(slf.py(), k))
    }

    /// "exclusive" or "shared".
    #[getter]
    fn mode(slf: &Bound<'_, Self>) -> &'static str {
        key_and_mode(slf.as_super().get()).map_or("exclusive", |(_, m)| m.as_str())
    }

    /// The fencing token of the handle's newest acquisition (None if it holds nothing): it
    /// rises each time the key passes to a new exclusive holder, so a store that remembers the
    /// highest fence it saw can reject a write from a holder whose lock was lost since.
    #[getter]
    fn fence(slf: &Bound<'_, Self>) -> Option<u64> {
        slf.as_super().get().fence(slf.py())
    }
}

/// The lock of one key in a reentrant KeyPool or StripedLock, from `lock(key)` or `write(key)`:
/// it follows `threading.RLock`'s protocol. The owner is the calling thread, or the current
/// asyncio task inside asyncio: the owner may acquire again (each acquire needs its release,
/// and keeps the fence), and only the owner may release (RuntimeError otherwise). Usable as the
/// lock of a `threading.Condition`, like an RLock.
#[pyclass(module = "keylock", name = "ReentrantKeyLock", extends = LockHandle, subclass, frozen)]
pub(crate) struct ReentrantKeyLock;

#[pymethods]
impl ReentrantKeyLock {
    /// The key, as the bytes it stands for (see keylock.key_bytes).
    #[getter]
    fn key<'py>(slf: &Bound<'py, Self>) -> Option<Bound<'py, PyBytes>> {
        key_and_mode(slf.as_super().get()).map(|(k, _)| PyBytes::new(slf.py(), k))
    }

    /// "exclusive" or "shared".
    #[getter]
    fn mode(slf: &Bound<'_, Self>) -> &'static str {
        key_and_mode(slf.as_super().get()).map_or("exclusive", |(_, m)| m.as_str())
    }

    /// The fencing token of the handle's newest acquisition (None if it holds nothing). A
    /// reentrant acquire keeps the holder's fence.
    #[getter]
    fn fence(slf: &Bound<'_, Self>) -> Option<u64> {
        slf.as_super().get().fence(slf.py())
    }

    /// Whether the calling thread or task holds the key through this handle (for
    /// threading.Condition).
    fn _is_owned(slf: &Bound<'_, Self>) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.as_super().get();
        let owner = this.owner(py)?;
        match this.with_newest(py, owner, |r| this.target.is_current(py, &r.held)) {
            Some(r) => r.map_err(|e| errors::to_py(py, e)),
            None => Ok(false),
        }
    }

    /// How many times the calling thread or task holds the key through this handle.
    fn _recursion_count(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let py = slf.py();
        let this = slf.as_super().get();
        Ok(this.count(py, this.owner(py)?))
    }

    /// Release every hold of the caller and return the state that `_acquire_restore` takes
    /// back (for threading.Condition.wait); RuntimeError if the caller holds nothing here.
    fn _release_save<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let this = slf.as_super().get();
        let owner = this.owner(py)?;
        let records = this.take_all(py, owner);
        if records.is_empty() {
            return Err(errors::not_owner(py));
        }
        let count = records.len();
        let mut result = Ok(());
        for record in records.into_iter().rev() {
            let r = this.target.release(py, record.held, record.owner);
            if result.is_ok() {
                result = r;
            }
        }
        result.map_err(|e| errors::to_py(py, e))?;
        PyTuple::new(py, [count as u64, owner.map_or(0, Owner::get)])
    }

    /// Take the key again as many times as `_release_save` released it (blocking). `state` is
    /// what `_release_save` returned: a 2-item sequence of ints (checked as RLock checks it).
    #[pyo3(signature = (state, /))]
    fn _acquire_restore(slf: &Bound<'_, Self>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.as_super().get();
        let bad = || {
            pyo3::exceptions::PyTypeError::new_err(
                "_acquire_restore() argument 1 must be a 2-item sequence of ints",
            )
        };
        let seq = state.cast::<PySequence>().map_err(|_| bad())?;
        if seq.len()? != 2 {
            return Err(bad());
        }
        let count: u64 = seq.get_item(0)?.extract().map_err(|_| bad())?;
        let _owner: u64 = seq.get_item(1)?.extract().map_err(|_| bad())?;
        for _ in 0..count.max(1) {
            wait::acquire_blocking(py, this, Wait::Forever, this.lease)?;
        }
        Ok(())
    }
}

/// The weight of a one-key handle (1 for a lock's).
fn weight_of(handle: &LockHandle) -> u32 {
    match &handle.target {
        Target::Key { weight, .. } => *weight,
        _ => 1,
    }
}

/// `weight` units of one key's semaphore, from `Semaphore.acquire(key, weight)`.
///
/// Works like a `threading.BoundedSemaphore` of one permit (acquire/release/locked/with; each
/// acquire takes `weight` units, and a release of a handle that holds nothing raises
/// NotLockedError, a RuntimeError) and with asyncio (`async with`, `await acquire_async()`).
/// `locked()` is True when an acquire through it would wait now. Each acquisition has its own
/// fence; `lease`, `lease_remaining()`, `extend()` and `is_current()` work as for a KeyLock.
#[pyclass(module = "keylock", name = "Permit", extends = LockHandle, subclass, frozen)]
pub(crate) struct Permit;

#[pymethods]
impl Permit {
    /// The key, as the bytes it stands for (see keylock.key_bytes).
    #[getter]
    fn key<'py>(slf: &Bound<'py, Self>) -> Option<Bound<'py, PyBytes>> {
        key_and_mode(slf.as_super().get()).map(|(k, _)| PyBytes::new(slf.py(), k))
    }

    /// The units each acquire through this handle takes.
    #[getter]
    fn weight(slf: &Bound<'_, Self>) -> u32 {
        weight_of(slf.as_super().get())
    }

    /// The fence of the handle's newest acquisition (None if it holds nothing): every
    /// acquisition of a key's units has its own, greater than every earlier one's of that key.
    #[getter]
    fn fence(slf: &Bound<'_, Self>) -> Option<u64> {
        slf.as_super().get().fence(slf.py())
    }
}

/// Several keys taken together, from `lock_many(keys)`: all of them or none, deadlock-free
/// whatever order other callers name them in, each key in its own mode.
///
/// Usable with `with` and `async with`, and with the same acquire/release/locked protocol as
/// KeyLock (`locked()` is True when any of the keys would block).
#[pyclass(module = "keylock", name = "ManyLock", extends = LockHandle, subclass, frozen)]
pub(crate) struct ManyLock;

fn entries(handle: &LockHandle) -> &[(OwnedKey, Mode)] {
    match &handle.target {
        Target::Many { keys, .. } => keys,
        _ => &[],
    }
}

#[pymethods]
impl ManyLock {
    /// The keys, as the bytes they stand for, in the order given.
    #[getter]
    fn keys<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyList>> {
        let py = slf.py();
        PyList::new(
            py,
            entries(slf.as_super().get())
                .iter()
                .map(|(k, _)| PyBytes::new(py, k)),
        )
    }

    /// The mode of each key ("exclusive" or "shared"), in the order given.
    #[getter]
    fn modes<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(
            slf.py(),
            entries(slf.as_super().get())
                .iter()
                .map(|(_, m)| m.as_str()),
        )
    }

    /// The fence of each lock the newest acquisition took (one per distinct key, or stripe),
    /// in the order of the keys' first occurrence (keys that share a stripe share one); None if
    /// the handle holds nothing.
    #[getter]
    fn fences(slf: &Bound<'_, Self>) -> Option<Vec<u64>> {
        let this = slf.as_super().get();
        this.read_newest(slf.py(), None, |r| {
            r.held.acquisitions().iter().map(|a| a.fence()).collect()
        })
    }
}

/// The shared (read) side of an RwLock, from `RwLock.read()`. `locked()` is True while a
/// writer holds the lock.
#[pyclass(module = "keylock", name = "ReadLock", extends = LockHandle, subclass, frozen)]
pub(crate) struct ReadLock;

/// The exclusive (write) side of an RwLock, from `RwLock.write()`. `locked()` is True while
/// anyone (reader or writer) holds the lock.
#[pyclass(module = "keylock", name = "WriteLock", extends = LockHandle, subclass, frozen)]
pub(crate) struct WriteLock;

#[pymethods]
impl WriteLock {
    /// The fencing token of the handle's newest write acquisition (None if it holds nothing):
    /// greater than every earlier writer's.
    #[getter]
    fn fence(slf: &Bound<'_, Self>) -> Option<u64> {
        slf.as_super().get().fence(slf.py())
    }
}

// The module shows a subtype of each (`crate::direct`), which is why each is a `subclass`.
handle_classes!(
    KeyLock,
    ReentrantKeyLock,
    Permit,
    ManyLock,
    ReadLock,
    WriteLock
);

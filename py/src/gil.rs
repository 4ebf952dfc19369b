//! [`GilCell`]: a handle's own little state, guarded by the GIL instead of a lock of its own.
//!
//! Every `with pool.lock(key)` stores the acquisition in its handle and takes it back at the
//! end. A `Mutex` there costs two atomic read-modify-writes per access, four per `with`, which
//! measured about an eighth of the whole `with` on the benchmark machine. On an interpreter
//! with a GIL the GIL already serializes every thread that touches a handle (all of them do so
//! attached), so a plain cell is enough, as long as nothing inside an access can let the GIL go:
//! that is the contract of [`GilCell::with`]. On a free-threaded interpreter (`Py_GIL_DISABLED`;
//! never the case for this crate's abi3 wheel, which pyo3 only builds for GIL interpreters, but
//! kept honest for version-specific builds) the cell is a real mutex.

use pyo3::prelude::*;

/// A value that is only touched by threads attached to the interpreter, one access at a time.
#[cfg(not(Py_GIL_DISABLED))]
pub(crate) struct GilCell<T>(std::cell::UnsafeCell<T>);

// SAFETY: the value is only reached through `with` (with a `Python` token, so by the thread
// that holds the GIL, one at a time, see `with`'s contract) or through `get_mut` (exclusive).
// `T: Send` because the thread that touches it changes.
#[cfg(not(Py_GIL_DISABLED))]
unsafe impl<T: Send> Sync for GilCell<T> {}

#[cfg(not(Py_GIL_DISABLED))]
impl<T> GilCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` on the value.
    ///
    /// # Safety
    ///
    /// `f` must not release the GIL, run Python code (which may switch threads), or re-enter
    /// this cell: it may only move values in and out and read them. Dropping a value inside `f`
    /// counts as running code (a lock guard's drop releases a lock, which wakes waiters), so `f`
    /// moves values out instead.
    #[inline]
    pub(crate) unsafe fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut T) -> R) -> R {
        let _ = py; // the token: this thread is attached, so it holds the GIL
        // SAFETY: this thread holds the GIL and keeps it for the whole of `f` (the caller's
        // contract), so no other thread is in here; `f` does not re-enter, so this is the only
        // reference.
        f(unsafe { &mut *self.0.get() })
    }

    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }
}

/// The free-threaded form: a mutex, locked detached from the interpreter while it waits.
#[cfg(Py_GIL_DISABLED)]
pub(crate) struct GilCell<T>(std::sync::Mutex<T>);

#[cfg(Py_GIL_DISABLED)]
impl<T> GilCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::sync::Mutex::new(value))
    }

    /// Runs `f` on the value, the mutex locked.
    ///
    /// # Safety
    ///
    /// As for the GIL form (the same callers); here it is only needed so that `f` cannot
    /// deadlock by running Python code with the mutex locked.
    #[inline]
    pub(crate) unsafe fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut T) -> R) -> R {
        use pyo3::sync::MutexExt;
        let mut guard = self
            .0
            .lock_py_attached(py)
            .unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs `f` with the GIL released when `may_block`, attached otherwise.
///
/// Every call from Python that can block lets the GIL go, so that the threads it waits for
/// (a remote scope's runtime, which may hand a result to Python) can run. A call into an
/// in-process lock object answers at once, and keeps the GIL: letting it go and taking it back
/// would cost more than the call.
#[inline]
pub(crate) fn with_gil_released<T, F>(py: Python<'_>, may_block: bool, f: F) -> T
where
    F: pyo3::marker::Ungil + FnOnce() -> T,
    T: pyo3::marker::Ungil,
{
    if may_block { py.detach(f) } else { f() }
}

//! `keylock._Ready`: the awaitable of an acquire or release that is already done, returned by
//! `__aexit__` (which releases at once) and by `__aenter__` when the lock was free.
//!
//! It is a native type made with three slots and no pyo3 method wrappers, because an
//! uncontended `async with` awaits it twice: `am_await` returns the object itself, and
//! `am_send` (which `await` uses) and `tp_iternext` report "done, result None" without making
//! a StopIteration. That is a few instructions each, against a pyo3 call (attach, borrow,
//! result conversion) per slot. There is one instance, shared by every such call; it holds no
//! state, so sharing it is safe from any thread.

use std::ffi::c_void;
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::spec::{generic_instance, make_type, slot};

/// `am_await`: the object is its own iterator.
unsafe extern "C" fn ready_await(slf: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: CPython calls the slot with the GIL held and a live `slf`; the new reference is
    // the caller's.
    unsafe { ffi::Py_IncRef(slf) };
    slf
}

/// `tp_iternext`: exhausted at once. NULL without an exception set is "StopIteration(None)".
unsafe extern "C" fn ready_next(_slf: *mut ffi::PyObject) -> *mut ffi::PyObject {
    ptr::null_mut()
}

/// `am_send`: done, with result None.
unsafe extern "C" fn ready_send(
    _slf: *mut ffi::PyObject,
    _arg: *mut ffi::PyObject,
    result: *mut *mut ffi::PyObject,
) -> ffi::PySendResult {
    // SAFETY: CPython passes a valid out-pointer and holds the GIL; the result is a new
    // reference to None.
    unsafe {
        ffi::Py_IncRef(ffi::Py_None());
        *result = ffi::Py_None();
    }
    ffi::PySendResult::PYGEN_RETURN
}

const DOC: &std::ffi::CStr = c"An awaitable that is already done, with result None: returned by \
    `__aexit__` (which releases at once) and by `__aenter__` when the lock was free. Awaiting it \
    neither suspends the task nor raises StopIteration. There is one, shared by every such call.";

/// The type and its one instance, made on first use.
fn ready(py: Python<'_>) -> PyResult<&Py<PyAny>> {
    static READY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    READY.get_or_try_init(py, || {
        // SAFETY: each slot is a function of its slot's signature (above) or the static doc
        // string, and the list ends with the zero slot; the instance has no fields.
        let ty = unsafe {
            make_type(
                py,
                c"keylock._Ready",
                0, // a bare object: no fields
                ffi::Py_TPFLAGS_DEFAULT,
                &mut [
                    slot(ffi::Py_am_await, ready_await as *mut c_void),
                    slot(ffi::Py_am_send, ready_send as *mut c_void),
                    slot(ffi::Py_tp_iternext, ready_next as *mut c_void),
                    slot(ffi::Py_tp_iter, ffi::PyObject_SelfIter as *mut c_void),
                    slot(ffi::Py_tp_doc, DOC.as_ptr() as *mut c_void),
                    slot(0, ptr::null_mut()),
                ],
                None,
            )
        }?;
        let instance = generic_instance(&ty)?;
        Ok(instance.unbind())
    })
}

/// The one done awaitable.
#[inline]
pub(crate) fn get(py: Python<'_>) -> PyResult<Py<PyAny>> {
    ready(py).map(|r| r.clone_ref(py))
}

/// Its type, for the module (`keylock._keylock._Ready`).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("_Ready", ready(py)?.bind(py).get_type())
}

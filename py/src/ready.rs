//! `keylock._Ready`: the awaitable of an acquire or release that is already done, returned by
//! `__aexit__` (which releases at once) and by `__aenter__` when the lock was free.
//!
//! It is a native type made with three slots and no pyo3 method wrappers, because an
//! uncontended `async with` awaits it twice: `am_await` returns the object itself, and
//! `am_send` (which `await` uses) and `tp_iternext` report "done, result None" without making
//! a StopIteration. That is a few instructions each, against a pyo3 call (attach, borrow,
//! result conversion) per slot. There is one instance, shared by every such call; it holds no
//! state, so sharing it is safe from any thread.

use std::ffi::{c_int, c_void};
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

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
        let slot = |slot: c_int, pfunc: *mut c_void| ffi::PyType_Slot { slot, pfunc };
        // CPython keeps pointers into the spec's slots only while making the type, and copies
        // the name; both live until the end of this function.
        let mut slots = [
            slot(ffi::Py_am_await, ready_await as *mut c_void),
            slot(ffi::Py_am_send, ready_send as *mut c_void),
            slot(ffi::Py_tp_iternext, ready_next as *mut c_void),
            slot(ffi::Py_tp_iter, ffi::PyObject_SelfIter as *mut c_void),
            slot(ffi::Py_tp_doc, DOC.as_ptr() as *mut c_void),
            slot(0, ptr::null_mut()),
        ];
        let mut spec = ffi::PyType_Spec {
            name: c"keylock._Ready".as_ptr(),
            basicsize: 0, // a bare object: no fields
            itemsize: 0,
            flags: ffi::Py_TPFLAGS_DEFAULT as std::ffi::c_uint,
            slots: slots.as_mut_ptr(),
        };
        // SAFETY: a valid spec, with the GIL held; the result is a new reference or NULL with
        // an exception set.
        let ty = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(&mut spec))? };
        let ty = ty.cast_into::<pyo3::types::PyType>()?;
        // SAFETY: `ty` is a live type object; the generic allocator makes a bare instance (a new
        // reference, or NULL with an exception set).
        let instance = unsafe {
            let alloc = ffi::PyType_GenericAlloc(ty.as_ptr().cast(), 0);
            Bound::from_owned_ptr_or_err(py, alloc)?
        };
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

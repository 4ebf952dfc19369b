//! Native types made from a spec (`PyType_FromSpec`), for the few objects whose every call
//! matters more than pyo3's method wrappers allow ([`crate::ready`], and the bound-method
//! slots of `crate::bound`).

use std::ffi::{CStr, c_int, c_uint, c_void};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// A type made from a spec.
///
/// # Safety
/// `slots` end with the zero slot (see [`slot`]); each slot's pointer is of the kind its slot
/// number names (a function of that slot's signature, a members or getset array, a C string),
/// and what a pointer points to lives as long as the type (CPython copies the slots array, not
/// the arrays or strings it points to); `basicsize` and `flags` agree with what the slots do
/// with an instance (and with `base`'s instances, which a subtype's are too).
pub(crate) unsafe fn make_type<'py>(
    py: Python<'py>,
    name: &'static CStr,
    basicsize: usize,
    flags: u64,
    slots: &mut [ffi::PyType_Slot],
    base: Option<&Bound<'py, PyType>>,
) -> PyResult<Bound<'py, PyType>> {
    let mut spec = ffi::PyType_Spec {
        name: name.as_ptr(),
        basicsize: basicsize as c_int,
        itemsize: 0,
        flags: flags as c_uint,
        slots: slots.as_mut_ptr(),
    };
    // SAFETY: a valid spec (the caller's contract) and a live base type, with the GIL held;
    // CPython copies what it keeps of the spec and the slots array. The result is a new
    // reference or NULL with an exception set.
    let ty = unsafe {
        let made = match base {
            Some(base) => ffi::PyType_FromSpecWithBases(&mut spec, base.as_ptr()),
            None => ffi::PyType_FromSpec(&mut spec),
        };
        Bound::from_owned_ptr_or_err(py, made)?
    };
    Ok(ty.cast_into::<PyType>()?)
}

/// One slot of a spec.
pub(crate) fn slot(slot: c_int, pfunc: *mut c_void) -> ffi::PyType_Slot {
    ffi::PyType_Slot { slot, pfunc }
}

/// A bare instance of `ty` from the generic allocator (zeroed, reference count 1).
pub(crate) fn generic_instance<'py>(ty: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `ty` is a live type object and the GIL is held (`ty.py()`); the result is a new
    // reference or NULL with an exception set.
    unsafe {
        let ob = ffi::PyType_GenericAlloc(ty.as_type_ptr(), 0);
        Bound::from_owned_ptr_or_err(ty.py(), ob)
    }
}

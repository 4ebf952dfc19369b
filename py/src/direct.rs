//! `KeyLock` handles made without pyo3's initializer chain: `pool.lock(key)` makes one per
//! call, and pyo3's way (the base type's `tp_new` called with an empty tuple, then the value
//! moved through each layer of the class chain) cost about twice the allocation itself.
//!
//! A handle made here is allocated by the type's own `tp_alloc` (zeroed, reference count 1,
//! GC-tracked as the type asks) and the `LockHandle` value written where pyo3 keeps it: the
//! object is then the one pyo3 would have made, byte for byte. That rests on what the first
//! handle, made by pyo3, shows of pyo3's layout, so the direct way is taken only once that
//! handle checked out: the value's offset (read through pyo3's own accessor) and nothing
//! outside the value and the object header that pyo3 left non-zero (the class's other parts,
//! its borrow and thread checkers and the subclass's value, are empty; the weak-reference
//! list is a pointer that starts null). Whatever fails that check keeps pyo3's way.

use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::handle::{self, KeyLock};
use crate::lock::LockHandle;

/// What making a `KeyLock` directly needs, learned from the first one pyo3 made.
struct Direct {
    /// The `KeyLock` type, kept alive.
    ty: Py<PyType>,
    alloc: ffi::allocfunc,
    /// Where the `LockHandle` value is in the object, in bytes from its start.
    offset: usize,
}

/// `None` inside once the first handle showed a layout the direct way does not handle.
static DIRECT: OnceLock<Option<Direct>> = OnceLock::new();

/// Makes a `KeyLock` handle holding `handle`.
#[inline]
pub(crate) fn make_key_lock(py: Python<'_>, handle: LockHandle) -> PyResult<Bound<'_, KeyLock>> {
    match DIRECT.get() {
        // SAFETY: `d` was learned from a `KeyLock` object (see `Direct::learn`).
        Some(Some(d)) => unsafe { d.make(py, handle) },
        Some(None) => handle::make(py, KeyLock, handle),
        None => {
            let obj = handle::make(py, KeyLock, handle)?;
            let _ = DIRECT.set(Direct::learn(&obj));
            Ok(obj)
        }
    }
}

impl Direct {
    /// How to make `KeyLock`s like `sample` (fresh from pyo3, never shared yet), if its layout
    /// is the one described in the module docs.
    fn learn(sample: &Bound<'_, KeyLock>) -> Option<Direct> {
        let ty = sample.get_type();
        let basicsize: usize = ty.getattr("__basicsize__").ok()?.extract().ok()?;
        let obj = sample.as_ptr().cast::<u8>();
        let value = std::ptr::from_ref::<LockHandle>(sample.as_super().get()).cast::<u8>();
        let offset = (value as usize).checked_sub(obj as usize)?;
        let header = std::mem::size_of::<ffi::PyObject>();
        let end = offset.checked_add(std::mem::size_of::<LockHandle>())?;
        if offset < header || end > basicsize {
            return None;
        }
        // SAFETY: the object's `basicsize` bytes are allocated, and none of the bytes read is
        // part of a value Rust holds a reference to (the `LockHandle` is skipped).
        let rest_zero = unsafe {
            let before = std::slice::from_raw_parts(obj.add(header), offset - header);
            let after = std::slice::from_raw_parts(obj.add(end), basicsize - end);
            before.iter().chain(after).all(|&b| b == 0)
        };
        if !rest_zero {
            return None;
        }
        // SAFETY: a live type object; the slot is read, not called.
        let alloc = unsafe { ffi::PyType_GetSlot(ty.as_type_ptr(), ffi::Py_tp_alloc) };
        if alloc.is_null() {
            return None;
        }
        Some(Direct {
            // SAFETY: the `tp_alloc` slot holds an `allocfunc`.
            alloc: unsafe { std::mem::transmute::<*mut std::ffi::c_void, ffi::allocfunc>(alloc) },
            ty: ty.unbind(),
            offset,
        })
    }

    /// A new `KeyLock` holding `handle`.
    ///
    /// # Safety
    /// `self` was learned from a `KeyLock` object by `learn`.
    #[inline]
    unsafe fn make<'py>(
        &self,
        py: Python<'py>,
        handle: LockHandle,
    ) -> PyResult<Bound<'py, KeyLock>> {
        let ty = self.ty.bind(py).as_type_ptr();
        // SAFETY: the type's own allocator, called as `PyType_GenericAlloc` would be, with the
        // GIL held (`py`).
        let obj = unsafe { (self.alloc)(ty, 0) };
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: a fresh, zeroed `KeyLock` object: the value goes where pyo3 keeps it (the
        // offset `learn` read), and the rest is as pyo3 leaves it (zero: see the module docs).
        // Nothing can look at the object in between (no Python code runs, and the GC cannot
        // run without an allocation).
        unsafe {
            obj.byte_add(self.offset).cast::<LockHandle>().write(handle);
            Ok(Bound::from_owned_ptr(py, obj).cast_into_unchecked())
        }
    }
}

/// Tests only: whether `KeyLock` handles are made the direct way (`None` before the first).
#[pyfunction]
pub(crate) fn _direct_handles() -> Option<bool> {
    DIRECT.get().map(Option::is_some)
}

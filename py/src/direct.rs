//! Handles made without pyo3's initializer chain: `pool.lock(key)` (and every other call that
//! returns a handle) makes one per call, and pyo3's way (the base type's `tp_new` called with
//! an empty tuple, then the value moved through each layer of the class chain) cost about twice
//! the allocation itself.
//!
//! A handle made here is allocated as a GC object that the collector does not track
//! (`PyObject_GC_New`, what `PyType_GenericAlloc` does before it zeroes the object and tracks
//! it), and the `LockHandle` value is written where pyo3 keeps it, every other byte of the
//! object zeroed: the object is then the one pyo3 would have made, byte for byte, but for the
//! tracking (below). That rests on what the first handle of the class, made by pyo3, shows of
//! pyo3's layout, so the direct way is taken only once that handle checked out: the class adds
//! no data to `LockHandle` (it is a unit struct), the value's offset is read through pyo3's own
//! accessor, and pyo3 left nothing outside the value and the object header non-zero (the
//! class's other parts, its borrow and thread checkers, are empty; the weak-reference list is a
//! pointer that starts null); and the class allocates and frees as every GC type does
//! (`PyType_GenericAlloc`, `PyObject_GC_Del`). A class that fails that check keeps pyo3's way.
//!
//! No handle is left to the cycle collector (one that pyo3 made is untracked at once, as
//! CPython does for its own containers that cannot close a cycle). pyo3 makes every class a GC
//! type, but a handle's classes have no `__traverse__` and no `__dict__`: the collector sees
//! nothing through a handle and could never break a cycle through one. Tracked, each handle was
//! linked into the collector's youngest list when made and unlinked when freed, writing to its
//! neighbours there, other objects usually out of cache by then: in the Python suite's asyncio
//! loop (100 tasks, 1,000 keys) that was about 36 ns of the 816 an `async with pool.lock(k)`
//! added. A handle is still freed with its last reference.

use std::sync::OnceLock;

use pyo3::PyClass;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::lock::LockHandle;

/// What making handles of one class directly needs, learned from its first handle: `None`
/// inside once that handle showed a layout the direct way does not handle.
pub(crate) type Cache = OnceLock<Option<Direct>>;

/// A handle class (a unit struct extending `LockHandle`), with its [`Cache`].
pub(crate) trait HandleClass: PyClass<BaseType = LockHandle> {
    fn cache() -> &'static Cache;
}

/// Makes a handle of class `C` holding `handle`.
#[inline]
pub(crate) fn make<C: HandleClass>(
    py: Python<'_>,
    sub: C,
    handle: LockHandle,
) -> PyResult<Bound<'_, C>> {
    let cache = C::cache();
    match cache.get() {
        // SAFETY: `d` was learned from an object of class `C` (see `Direct::learn`).
        Some(Some(d)) => unsafe { d.make(py, handle) },
        Some(None) => pyo3_make(py, sub, handle),
        None => {
            let obj = pyo3_make(py, sub, handle)?;
            // If another thread learned first, its answer stands: both came from handles of
            // this class.
            let _ = cache.set(Direct::learn(&obj));
            Ok(obj)
        }
    }
}

/// pyo3's way, the handle then untracked (see the module docs).
fn pyo3_make<C: HandleClass>(py: Python<'_>, sub: C, handle: LockHandle) -> PyResult<Bound<'_, C>> {
    let made = Bound::new(py, PyClassInitializer::from(handle).add_subclass(sub))?;
    // SAFETY: a live object of a GC type (pyo3's classes all are), with the GIL held (`py`).
    unsafe { ffi::PyObject_GC_UnTrack(made.as_ptr().cast()) };
    Ok(made)
}

/// How to make handles of one class without pyo3's initializer chain.
pub(crate) struct Direct {
    /// The class, kept alive.
    ty: Py<PyType>,
    /// Where the `LockHandle` value is in the object, in bytes from its start.
    offset: usize,
    /// The object's size (the type's `__basicsize__`).
    basicsize: usize,
}

impl Direct {
    /// How to make handles like `sample` (fresh from pyo3, never shared yet), if its layout is
    /// the one described in the module docs.
    fn learn<C: HandleClass>(sample: &Bound<'_, C>) -> Option<Direct> {
        if std::mem::size_of::<C>() != 0 || std::mem::needs_drop::<C>() {
            return None;
        }
        let ty = sample.as_any().get_type();
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
        // part of a value Rust holds a reference to (the `LockHandle` is skipped; `C` has no
        // bytes).
        let rest_zero = unsafe {
            let before = std::slice::from_raw_parts(obj.add(header), offset - header);
            let after = std::slice::from_raw_parts(obj.add(end), basicsize - end);
            before.iter().chain(after).all(|&b| b == 0)
        };
        if !rest_zero {
            return None;
        }
        // The class allocates and frees as any GC type does, so that a GC object allocated
        // for it directly is what its own `tp_alloc` would have made before zeroing.
        let tp = ty.as_type_ptr();
        // SAFETY: a live type object; the slots are read, not called.
        let (alloc, free, flags) = unsafe {
            (
                ffi::PyType_GetSlot(tp, ffi::Py_tp_alloc),
                ffi::PyType_GetSlot(tp, ffi::Py_tp_free),
                ffi::PyType_GetFlags(tp),
            )
        };
        let generic_alloc: ffi::allocfunc = ffi::PyType_GenericAlloc;
        let gc_del: unsafe extern "C" fn(*mut std::ffi::c_void) = ffi::PyObject_GC_Del;
        if alloc != generic_alloc as *mut std::ffi::c_void
            || free != gc_del as *mut std::ffi::c_void
            || flags & ffi::Py_TPFLAGS_HAVE_GC == 0
        {
            return None;
        }
        Some(Direct {
            ty: ty.unbind(),
            offset,
            basicsize,
        })
    }

    /// A new handle of class `C` holding `handle`.
    ///
    /// # Safety
    /// `self` was learned from an object of class `C` by `learn`.
    #[inline]
    unsafe fn make<'py, C: HandleClass>(
        &self,
        py: Python<'py>,
        handle: LockHandle,
    ) -> PyResult<Bound<'py, C>> {
        let ty = self.ty.bind(py).as_type_ptr();
        // SAFETY: a GC type (checked by `learn`), with the GIL held (`py`): an untracked object
        // of `basicsize` bytes, its header written, reference count 1.
        let obj = unsafe { ffi::PyObject_GC_New::<ffi::PyObject>(ty) };
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: the value goes where pyo3 keeps it (the offset `learn` read), and every other
        // byte after the header is zeroed, as pyo3 leaves it (see the module docs; `C` itself
        // has no bytes): `offset` and `offset + size_of::<LockHandle>()` lie within the
        // object's `basicsize` bytes (`learn` checked). Nothing can look at the object in
        // between (no Python code runs, and it is not tracked by the collector).
        unsafe {
            let base = obj.cast::<u8>();
            let header = std::mem::size_of::<ffi::PyObject>();
            let end = self.offset + std::mem::size_of::<LockHandle>();
            std::ptr::write_bytes(base.add(header), 0, self.offset - header);
            std::ptr::write_bytes(base.add(end), 0, self.basicsize - end);
            base.add(self.offset).cast::<LockHandle>().write(handle);
            Ok(Bound::from_owned_ptr(py, obj).cast_into_unchecked())
        }
    }
}

/// Declares the handle classes, each with its cache, and `_direct_handles` over them.
macro_rules! handle_classes {
    ($($class:ty),* $(,)?) => {
        $(
            impl $crate::direct::HandleClass for $class {
                fn cache() -> &'static $crate::direct::Cache {
                    static CACHE: $crate::direct::Cache = std::sync::OnceLock::new();
                    &CACHE
                }
            }
        )*

        /// Tests only: for each handle class made so far, whether the direct way makes it.
        #[pyo3::pyfunction]
        pub(crate) fn _direct_handles(
            py: pyo3::Python<'_>,
        ) -> pyo3::PyResult<pyo3::Bound<'_, pyo3::types::PyDict>> {
            $crate::direct::report(py, &[$((
                <$class as pyo3::PyClass>::NAME,
                <$class as $crate::direct::HandleClass>::cache(),
            )),*])
        }
    };
}
pub(crate) use handle_classes;

/// `_direct_handles`' dict: of `classes` (name, cache), those made so far, each with whether
/// the direct way makes it.
pub(crate) fn report<'py>(
    py: Python<'py>,
    classes: &[(&'static str, &'static Cache)],
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (name, cache) in classes {
        if let Some(direct) = cache.get() {
            out.set_item(*name, direct.is_some())?;
        }
    }
    Ok(out)
}

//! Handles made without pyo3's initializer chain: `pool.lock(key)` (and every other call that
//! returns a handle) makes one per call, and pyo3's way (the base type's `tp_new` called with
//! an empty tuple, then the value moved through each layer of the class chain) cost about twice
//! the allocation itself.
//!
//! A handle made here is allocated as a GC object that the collector does not track (from its
//! class's free list, below, or by `PyObject_GC_New`, what `PyType_GenericAlloc` does before it
//! zeroes the object and tracks it), and the `LockHandle` value is written where pyo3 keeps it,
//! every other byte of the object zeroed: the object is then the one pyo3 would have made, byte
//! for byte, but for its class (below) and the tracking (further below). That rests on what a
//! handle that pyo3 makes when the module loads (of an RwLock of its own, never acquired, then
//! dropped) shows of pyo3's layout, so the direct way is taken only if that handle checked out:
//! the class adds no data to `LockHandle` (it is a unit struct), the value's offset is read
//! through pyo3's own accessor, and pyo3 left nothing outside the value and the object header
//! non-zero (the class's other parts, its borrow and thread checkers, are empty; the
//! weak-reference list is a pointer that starts null); and pyo3's class allocates and frees as
//! every GC type does (`PyType_GenericAlloc`, `PyObject_GC_Del`). A class that fails that
//! check keeps pyo3's way, and the module shows pyo3's class itself.
//!
//! **The class users see, and its free list.** Each handle class the module shows
//! (`keylock.KeyLock` and the others) is then a subtype of pyo3's class of that name, made from
//! a spec when the module loads, with pyo3's deallocator, that adds one thing: its `tp_free`,
//! which keeps up to [`FREE_LIST`] freed handles for the next ones made (each gives back the
//! last one freed, its memory likely still in cache) and hands the rest to `PyObject_GC_Del`.
//! Every method is pyo3's, inherited. In the Python suite's asyncio loop (100 tasks, 1,000
//! keys), where each task frees a handle and makes the next one in the same step, CPython's
//! allocator took about 47 ns of each operation on the handle's 304-byte block; in paired runs
//! (before and after builds alternated) the free list took 63 ns off the time an `async with
//! pool.lock(k)` adds (12 of 12 rounds), and 6 ns off the hot one-thread `with pool.lock(k)`
//! loop (8 of 8). pyo3's own free list (`#[pyclass(freelist = ..)]`) guards its list with a
//! mutex, under the GIL too: it took 37 ns off the first and added 21 to the second. This list
//! is touched only with the GIL held; on a free-threaded interpreter nothing is kept on it.
//!
//! No handle is left to the cycle collector (one that pyo3 made is untracked at once, as
//! CPython does for its own containers that cannot close a cycle). pyo3 makes every class a GC
//! type, but a handle's classes have no `__traverse__` and no `__dict__`: the collector sees
//! nothing through a handle and could never break a cycle through one. Tracked, each handle was
//! linked into the collector's youngest list when made and unlinked when freed, writing to its
//! neighbours there, other objects usually out of cache by then: in the Python suite's asyncio
//! loop (100 tasks, 1,000 keys) that was about 36 ns of the 816 an `async with pool.lock(k)`
//! added. A handle is still freed with its last reference.

use std::cell::Cell;
use std::ffi::{CString, c_void};
use std::sync::{Arc, OnceLock};

use pyo3::PyClass;
use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use keylock_core::RwLock;

use crate::lock::{LockHandle, Target};
use crate::spec::{make_type, slot};

/// How many freed handles each class keeps for its next ones.
const FREE_LIST: usize = 32;

/// A handle class as the module shows it.
pub(crate) struct Class {
    /// The class users see: pyo3's class, subclassed to add the free list's `tp_free` where the
    /// direct way makes the handles.
    public: Py<PyType>,
    /// What making its handles directly needs, learned from a handle pyo3 made: `None` if
    /// that handle showed a layout the direct way does not handle.
    direct: Option<Direct>,
    /// Freed handles, for the next ones made directly.
    free: FreeList,
}

/// A handle class (a unit struct extending `LockHandle`), with its [`Class`], set when the
/// module loads ([`register`]).
pub(crate) trait HandleClass: PyClass<BaseType = LockHandle> {
    fn class() -> &'static OnceLock<Class>;
}

/// Adds `C`'s public class to the module under pyo3's name for it (`unit` is `C`'s one value):
/// having learned from a handle that pyo3 makes (then drops) that the direct way can make its
/// handles, a subtype of pyo3's class with the free list's `tp_free`; pyo3's class otherwise.
pub(crate) fn register<C: HandleClass>(m: &Bound<'_, PyModule>, unit: C) -> PyResult<()> {
    let py = m.py();
    let base = py.get_type::<C>();
    // A handle of an RwLock of its own, never acquired.
    let sample = LockHandle::new(Target::Read(Arc::new(RwLock::new())), None, None, false);
    let sample = pyo3_make(py, unit, sample)?;
    let direct = Direct::learn(&sample);
    drop(sample);
    let public = match direct {
        Some(_) => subtype::<C>(&base)?,
        None => base,
    };
    m.add(C::NAME, &public)?;
    let class = Class {
        public: public.unbind(),
        direct,
        free: FreeList::default(),
    };
    C::class()
        .set(class)
        .map_err(|_| PyRuntimeError::new_err(format!("{} registered twice", C::NAME)))
}

/// A subtype of `base` (pyo3's class `C`) of the same name that adds only the free list's
/// `tp_free`.
fn subtype<'py, C: HandleClass>(base: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyType>> {
    let py = base.py();
    let module: String = base.getattr(intern!(py, "__module__"))?.extract()?;
    // CPython keeps the name's pointer (before 3.12) for the type's life: the type lives as
    // long as the process (the module keeps it, and the module is never unloaded).
    let name = CString::new(format!("{module}.{}", C::NAME))?;
    let name: &'static std::ffi::CStr = Box::leak(name.into_boxed_c_str());
    // pyo3's deallocator: a subtype made from a spec would get CPython's `subtype_dealloc`,
    // which calls pyo3's after work of its own. (pyo3's class has no `tp_new`, nor then the
    // subtype: neither can be called.)
    // SAFETY: a live type object; the slot is read, not called.
    let dealloc = unsafe { ffi::PyType_GetSlot(base.as_type_ptr(), ffi::Py_tp_dealloc) };
    if dealloc.is_null() {
        return Err(PyRuntimeError::new_err(format!(
            "{} has no deallocator",
            C::NAME
        )));
    }
    let mut slots = [
        slot(ffi::Py_tp_free, free::<C> as *mut c_void),
        slot(ffi::Py_tp_dealloc, dealloc),
        slot(0, std::ptr::null_mut()),
    ];
    // SAFETY: the slots end with the zero slot, `free` is a `freefunc` and `dealloc` the
    // base's own; the subtype adds no data (`basicsize` 0 inherits the base's, which the
    // direct way learned), and inherits everything else, the GC flag and its traverse and
    // clear functions included.
    let public =
        unsafe { make_type(py, name, 0, ffi::Py_TPFLAGS_DEFAULT, &mut slots, Some(base))? };
    public.setattr(
        intern!(py, "__doc__"),
        base.getattr(intern!(py, "__doc__"))?,
    )?;
    Ok(public)
}

/// `C`'s public class (the module registered it).
pub(crate) fn public<C: HandleClass>(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    Ok(class::<C>()?.public.bind(py).clone())
}

fn class<C: HandleClass>() -> PyResult<&'static Class> {
    C::class()
        .get()
        .ok_or_else(|| PyRuntimeError::new_err(format!("{} is not registered", C::NAME)))
}

/// Makes a handle of class `C` (of its public class) holding `handle`.
#[inline]
pub(crate) fn make<C: HandleClass>(
    py: Python<'_>,
    sub: C,
    handle: LockHandle,
) -> PyResult<Bound<'_, C>> {
    let class = class::<C>()?;
    match &class.direct {
        // SAFETY: `d` was learned from an object of class `C` (see `Direct::learn`), and
        // `class` is `C`'s.
        Some(d) => unsafe { d.make(py, class, handle) },
        None => pyo3_make(py, sub, handle),
    }
}

/// pyo3's way, the handle then untracked (see the module docs).
fn pyo3_make<C: HandleClass>(py: Python<'_>, sub: C, handle: LockHandle) -> PyResult<Bound<'_, C>> {
    let made = Bound::new(py, PyClassInitializer::from(handle).add_subclass(sub))?;
    // SAFETY: a live object of a GC type (pyo3's classes all are), with the GIL held (`py`).
    unsafe { ffi::PyObject_GC_UnTrack(made.as_ptr().cast()) };
    Ok(made)
}

/// `tp_free` of `C`'s public class: keeps the handle for the next one made directly if the
/// class's list has room, else hands it to `PyObject_GC_Del`.
///
/// # Safety
/// Called by CPython (from `tp_dealloc`, the GIL held) with a handle of `C`'s public class
/// that nothing refers to any more: untracked by the collector and its value dropped.
unsafe extern "C" fn free<C: HandleClass>(obj: *mut c_void) {
    // (The public class exists only where the direct way makes the handles.)
    if !cfg!(Py_GIL_DISABLED)
        && let Some(class) = C::class().get()
        // SAFETY: the GIL is held (not a free-threaded interpreter).
        && unsafe { class.free.push(obj.cast()) }
    {
        return;
    }
    // SAFETY: a GC object of `C`'s public class, which only the direct way makes (with
    // `PyObject_GC_New`), given up by its `tp_dealloc`.
    unsafe { ffi::PyObject_GC_Del(obj) }
}

/// Up to [`FREE_LIST`] freed handles, last freed first out.
struct FreeList {
    len: Cell<usize>,
    items: [Cell<*mut ffi::PyObject>; FREE_LIST],
}

impl Default for FreeList {
    fn default() -> Self {
        FreeList {
            len: Cell::new(0),
            items: std::array::from_fn(|_| Cell::new(std::ptr::null_mut())),
        }
    }
}

// SAFETY: touched only with the GIL held (`push` and `pop` require it), so by one thread at a
// time; what it holds are freed objects that no one else refers to.
unsafe impl Sync for FreeList {}
// SAFETY: as above.
unsafe impl Send for FreeList {}

impl FreeList {
    /// Keeps `obj` if there is room.
    ///
    /// # Safety
    /// The GIL is held.
    #[inline]
    unsafe fn push(&self, obj: *mut ffi::PyObject) -> bool {
        let n = self.len.get();
        if n == FREE_LIST {
            return false;
        }
        self.items[n].set(obj);
        self.len.set(n + 1);
        true
    }

    /// The handle freed last, if any.
    ///
    /// # Safety
    /// The GIL is held.
    #[inline]
    unsafe fn pop(&self) -> Option<*mut ffi::PyObject> {
        let n = self.len.get().checked_sub(1)?;
        self.len.set(n);
        Some(self.items[n].get())
    }
}

/// How to make handles of one class without pyo3's initializer chain.
pub(crate) struct Direct {
    /// Where the `LockHandle` value is in the object, in bytes from its start.
    offset: usize,
    /// The object's size (the classes' `__basicsize__`).
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
        // pyo3's class allocates and frees as any GC type does, so that a GC object allocated
        // directly is what its own `tp_alloc` would have made before zeroing (and what the
        // public class's `tp_free` gives `PyObject_GC_Del`).
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
        Some(Direct { offset, basicsize })
    }

    /// A new handle of `C`'s public class holding `handle`.
    ///
    /// # Safety
    /// `self` was learned from an object of class `C` by `learn`, and `class` is `C`'s.
    #[inline]
    unsafe fn make<'py, C: HandleClass>(
        &self,
        py: Python<'py>,
        class: &Class,
        handle: LockHandle,
    ) -> PyResult<Bound<'py, C>> {
        let ty = class.public.bind(py).as_type_ptr();
        // A free-threaded interpreter keeps nothing on the list.
        let kept = if cfg!(Py_GIL_DISABLED) {
            None
        } else {
            // SAFETY: the GIL is held (`py`, and not a free-threaded interpreter).
            unsafe { class.free.pop() }
        };
        let obj = match kept {
            // SAFETY: a handle of this class that its `tp_free` kept, after pyo3's `tp_dealloc`
            // untracked it and dropped its value: `PyObject_Init` writes its header (a
            // reference to the type, a count of 1) as `PyObject_GC_New` does for a new one.
            Some(obj) => unsafe { ffi::PyObject_Init(obj, ty) },
            // SAFETY: a GC type (checked by `learn`), with the GIL held: an untracked object of
            // `basicsize` bytes, its header written, reference count 1.
            None => unsafe { ffi::PyObject_GC_New::<ffi::PyObject>(ty) },
        };
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

/// Declares the handle classes, each with its [`Class`], `register_handles` (the module's, for
/// them all) and `_direct_handles` over them.
macro_rules! handle_classes {
    ($($class:ident),* $(,)?) => {
        $(
            impl $crate::direct::HandleClass for $class {
                fn class() -> &'static std::sync::OnceLock<$crate::direct::Class> {
                    static CLASS: std::sync::OnceLock<$crate::direct::Class> =
                        std::sync::OnceLock::new();
                    &CLASS
                }
            }
        )*

        /// Adds the handle classes' public classes to the module.
        pub(crate) fn register_handles(
            m: &pyo3::Bound<'_, pyo3::types::PyModule>,
        ) -> pyo3::PyResult<()> {
            $($crate::direct::register::<$class>(m, $class)?;)*
            Ok(())
        }

        /// Tests only: for each handle class, whether the direct way makes its handles.
        #[pyo3::pyfunction]
        pub(crate) fn _direct_handles(
            py: pyo3::Python<'_>,
        ) -> pyo3::PyResult<pyo3::Bound<'_, pyo3::types::PyDict>> {
            $crate::direct::report(py, &[$((
                <$class as pyo3::PyClass>::NAME,
                <$class as $crate::direct::HandleClass>::class(),
            )),*])
        }
    };
}
pub(crate) use handle_classes;

/// `_direct_handles`' dict: of `classes` (name, class), those registered, each with whether
/// the direct way makes its handles.
pub(crate) fn report<'py>(
    py: Python<'py>,
    classes: &[(&'static str, &'static OnceLock<Class>)],
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (name, class) in classes {
        if let Some(class) = class.get() {
            out.set_item(*name, class.direct.is_some())?;
        }
    }
    Ok(out)
}

//! `__enter__`, `__exit__`, `__aenter__` and `__aexit__` of a lock handle, bound without
//! allocating.
//!
//! A `with` statement looks `__enter__` and `__exit__` up on the handle's type and binds each
//! to the handle through the descriptor's `__get__` (`async with`: `__aenter__` and
//! `__aexit__`). For a method descriptor that makes a new bound-method object per lookup, two
//! per block, each allocated, tracked by the garbage collector and freed: on CPython 3.11, 512
//! of the 3,254 instructions of an uncontended `with pool.lock(key):` went with them
//! (callgrind). Here the four are descriptors of their own on `LockHandle` ([`Method`]), whose
//! `__get__` hands out one of two small objects kept inside the handle ([`Slot`]) when it is
//! free, and a plain bound method (from the method descriptor made when the module loaded, kept
//! as the fallback) when it is not: when something still holds the last one handed out, as a
//! `with` block nested in another on the same handle does. Looked up on the class, they give
//! that method descriptor itself, so introspection, `type(h).__enter__(h)` and
//! `contextlib.ExitStack` see what they saw before.
//!
//! A slot handed out holds a reference to its handle, which keeps the handle (and with it the
//! slot's memory) alive for as long as anyone holds the slot; when the slot's last reference
//! goes, CPython calls its `tp_dealloc`, which frees nothing: it marks the slot free and drops
//! that reference. Calling a slot calls the method (the same functions the method descriptors
//! call), through vectorcall.
//!
//! The slots are touched only by a thread holding the GIL, which is what makes them sound; on a
//! free-threaded interpreter (never the case for the abi3 wheel) nothing here is installed and
//! the methods are the plain method descriptors.

use std::cell::{Cell, UnsafeCell};
use std::ffi::{CStr, c_void};
use std::mem::{MaybeUninit, offset_of};
use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::spec::{generic_instance, make_type, slot};

/// `Py_TPFLAGS_HAVE_VECTORCALL` (in the limited API from 3.12; CPython honours it on a type made
/// from a spec with a `__vectorcalloffset__` member since 3.9).
const HAVE_VECTORCALL: u64 = 1 << 11;
/// `PY_VECTORCALL_ARGUMENTS_OFFSET`: a flag bit of `nargsf`, not part of the count.
const ARGUMENTS_OFFSET: usize = 1 << (usize::BITS - 1);

/// Which method a descriptor or slot stands for. `__enter__` and `__aenter__` share the
/// handle's first slot, `__exit__` and `__aexit__` its second (a handle is rarely in a `with` and
/// an `async with` at once; when it is, the second gets plain bound methods).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
enum Which {
    Enter = 0,
    Exit = 1,
    AEnter = 2,
    AExit = 3,
}

impl Which {
    const ALL: [Which; 4] = [Which::Enter, Which::Exit, Which::AEnter, Which::AExit];

    fn of(n: usize) -> Which {
        Which::ALL[n & 3]
    }

    fn name(self) -> &'static str {
        ["__enter__", "__exit__", "__aenter__", "__aexit__"][self as usize]
    }

    /// The handle's slot for it.
    fn slot(self) -> usize {
        self as usize & 1
    }

    fn call(self) -> ffi::vectorcallfunc {
        match self {
            Which::Enter => enter_call,
            Which::Exit => exit_call,
            Which::AEnter => aenter_call,
            Which::AExit => aexit_call,
        }
    }
}

/// One of a handle's two bound methods at a time: a Python object living inside the handle.
#[repr(C)]
pub(crate) struct Slot {
    /// The object header, written as `PyObject_Init` writes it each time the slot is handed
    /// out.
    ob: UnsafeCell<MaybeUninit<ffi::PyObject>>,
    /// The slot's vectorcall entry (its type's `__vectorcalloffset__` points here).
    vectorcall: Cell<Option<ffi::vectorcallfunc>>,
    /// The handle, while the slot is handed out (a strong reference); null while it is free.
    owner: Cell<*mut ffi::PyObject>,
}

// SAFETY: a slot is read and written only by a thread holding the GIL (the descriptor's
// `__get__`, the slot's call and dealloc are all called by CPython with the GIL held), one at a
// time; the raw pointer is a reference owned under that same rule.
unsafe impl Send for Slot {}
// SAFETY: as above.
unsafe impl Sync for Slot {}

impl Slot {
    pub(crate) const fn new() -> Self {
        Self {
            ob: UnsafeCell::new(MaybeUninit::zeroed()),
            vectorcall: Cell::new(None),
            owner: Cell::new(ptr::null_mut()),
        }
    }
}

/// The handle's two slots.
pub(crate) struct Slots([Slot; 2]);

impl Slots {
    pub(crate) const fn new() -> Self {
        Self([Slot::new(), Slot::new()])
    }
}

/// A `METH_NOARGS` method's function: `(self, NULL)`.
pub(crate) type NoArgs =
    unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject) -> *mut ffi::PyObject;
/// A `METH_FASTCALL | METH_KEYWORDS` method's function: `(self, args, nargs, kwnames)`.
pub(crate) type FastCall = unsafe extern "C" fn(
    *mut ffi::PyObject,
    *const *mut ffi::PyObject,
    ffi::Py_ssize_t,
    *mut ffi::PyObject,
) -> *mut ffi::PyObject;

/// What the module that defines the handles tells this one: where a handle's slots are, which
/// type is the most common handle's, and the four methods' functions (the same ones their
/// method descriptors call).
pub(crate) struct Hooks {
    /// The slots of a live instance of `LockHandle` (or of a subclass).
    pub(crate) slots: unsafe fn(*mut ffi::PyObject) -> *const Slots,
    /// The most common handle's type (`KeyLock`): its instances skip the subclass check.
    pub(crate) common_type: *mut ffi::PyTypeObject,
    pub(crate) enter: NoArgs,
    pub(crate) exit: FastCall,
    pub(crate) aenter: NoArgs,
    pub(crate) aexit: FastCall,
}

/// What `install` made and was given, for the process's life.
struct Installed {
    /// `LockHandle`'s type: a descriptor binds only to instances of it.
    handle_type: usize,
    /// The most common handle's type: its instances skip the subclass check.
    common_type: usize,
    /// Where a handle's slots are.
    slots: unsafe fn(*mut ffi::PyObject) -> *const Slots,
    enter: NoArgs,
    exit: FastCall,
    aenter: NoArgs,
    aexit: FastCall,
    /// The slots' type.
    slot_type: usize,
    /// The method descriptors of `__enter__`, `__exit__`, `__aenter__` and `__aexit__` (strong
    /// references).
    methods: [usize; 4],
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Where a handle's slots are, counted from the start of its object (0 until the first bind):
/// the same for every handle, whatever its class, as a subclass's object begins with its base's.
static SLOTS_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// The slots of a live handle object: the hook's answer, kept as an offset after the first.
///
/// # Safety
/// `obj` is a live instance of `LockHandle` (or of a subclass), and the GIL is held.
#[inline(always)]
unsafe fn slots_of(installed: &Installed, obj: *mut ffi::PyObject) -> *const Slots {
    let offset = SLOTS_OFFSET.load(Ordering::Relaxed);
    if offset != 0 {
        // SAFETY: the offset of the slots inside every handle object (see SLOTS_OFFSET).
        let slots = unsafe { obj.byte_add(offset) }.cast::<Slots>();
        // SAFETY: the caller's contract.
        debug_assert_eq!(slots.cast_const(), unsafe { (installed.slots)(obj) });
        return slots;
    }
    // SAFETY: the caller's contract.
    let slots = unsafe { (installed.slots)(obj) };
    SLOTS_OFFSET.store(slots as usize - obj as usize, Ordering::Relaxed);
    slots
}

/// The descriptor object set on `LockHandle` for one method.
#[repr(C)]
struct Method {
    ob: ffi::PyObject,
    which: usize,
}

/// A plain bound method of `obj`, from the method descriptor (the fallback); NULL with an
/// exception set on failure (as for an object of another type).
///
/// # Safety
/// The GIL is held; `obj` and `ty` are borrowed references (either may be NULL, as CPython
/// passes them to `__get__`).
unsafe fn plain(
    which: Which,
    obj: *mut ffi::PyObject,
    ty: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let Some(installed) = INSTALLED.get() else {
        // (Unreachable: the descriptors exist only once `install` has set this.)
        // SAFETY: the caller's contract: the GIL is held.
        let py = unsafe { Python::assume_attached() };
        pyo3::exceptions::PyRuntimeError::new_err("keylock's handle methods are not installed")
            .restore(py);
        return ptr::null_mut();
    };
    let method = installed.methods[which as usize] as *mut ffi::PyObject;
    // SAFETY: a live method descriptor; its type's `__get__` slot is set (method descriptors
    // bind), and it takes these arguments as CPython passes them.
    unsafe {
        let get = ffi::PyType_GetSlot(ffi::Py_TYPE(method), ffi::Py_tp_descr_get);
        if get.is_null() {
            ffi::Py_IncRef(method);
            return method;
        }
        let get: ffi::descrgetfunc = std::mem::transmute(get);
        get(method, obj, ty)
    }
}

/// `Method.__get__`.
unsafe extern "C" fn method_get(
    descr: *mut ffi::PyObject,
    obj: *mut ffi::PyObject,
    ty: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls this with the GIL held, `descr` a live `Method`.
    unsafe {
        let which = Which::of((*descr.cast::<Method>()).which);
        let Some(installed) = INSTALLED.get() else {
            return plain(which, obj, ty);
        };
        if obj.is_null()
            || (ffi::Py_TYPE(obj) as usize != installed.common_type
                && ffi::PyType_IsSubtype(
                    ffi::Py_TYPE(obj),
                    installed.handle_type as *mut ffi::PyTypeObject,
                ) == 0)
        {
            // On the class, the method descriptor itself; on another object, its error.
            return plain(which, obj, ty);
        }
        let slot = &(*slots_of(installed, obj)).0[which.slot()];
        if !slot.owner.get().is_null() {
            // Still held by someone (a nested `with` on the same handle).
            return plain(which, obj, ty);
        }
        let ob = slot.ob.get().cast::<ffi::PyObject>();
        // The header as `PyObject_Init` writes it (a count of 1, the type), less what it does
        // besides: a reference to the type (the slots' type is kept for the process's life, so
        // its instances hold none) and the debug builds' reference tracing (an abi3 module
        // never loads in one that traces references).
        ob.write(ffi::PyObject {
            ob_type: installed.slot_type as *mut ffi::PyTypeObject,
            ..ffi::PyObject_HEAD_INIT
        });
        slot.vectorcall.set(Some(which.call()));
        ffi::Py_IncRef(obj);
        slot.owner.set(obj);
        ob
    }
}

impl Slot {
    /// Which method the slot is bound as (while it is handed out).
    fn which(&self) -> Which {
        let f = self.vectorcall.get();
        Which::ALL
            .into_iter()
            .find(|w| f.is_some_and(|f| ptr::fn_addr_eq(f, w.call())))
            .unwrap_or(Which::Exit)
    }
}

/// The slot behind a slot object.
///
/// # Safety
/// `ob` is a live slot object (handed out, so its owner is set).
unsafe fn slot_of<'a>(ob: *mut ffi::PyObject) -> &'a Slot {
    // SAFETY: the header is the slot's first field (repr(C)), and the slot lives inside its
    // owner, which the slot's reference keeps alive.
    unsafe { &*ob.cast::<Slot>() }
}

/// The `nargs` of a vectorcall's `nargsf`.
fn nargs_of(nargsf: usize) -> ffi::Py_ssize_t {
    (nargsf & !ARGUMENTS_OFFSET) as ffi::Py_ssize_t
}

/// Raises the TypeError of a call with arguments to a method that takes none; NULL.
#[cold]
#[inline(never)]
fn takes_no_arguments(which: Which, given: ffi::Py_ssize_t) -> *mut ffi::PyObject {
    // SAFETY: called from a slot's call, with the GIL held.
    let py = unsafe { Python::assume_attached() };
    PyTypeError::new_err(format!(
        "LockHandle.{}() takes no arguments ({given} given)",
        which.name()
    ))
    .restore(py);
    ptr::null_mut()
}

/// Calling a bound `__enter__` or `__aenter__`: no arguments, then `method` on the handle.
///
/// # Safety
/// CPython's vectorcall arguments to a live slot object, with the GIL held.
#[inline(always)]
unsafe fn call_noargs(
    which: Which,
    callable: *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
    method: NoArgs,
) -> *mut ffi::PyObject {
    // SAFETY: the caller's contract.
    unsafe {
        let owner = slot_of(callable).owner.get();
        let given = nargs_of(nargsf)
            + if kwnames.is_null() {
                0
            } else {
                ffi::PyTuple_Size(kwnames)
            };
        if given != 0 {
            return takes_no_arguments(which, given);
        }
        method(owner, ptr::null_mut())
    }
}

/// Calling a bound `__exit__` or `__aexit__`: the exception triple, taken by `method` as CPython
/// passes it.
///
/// # Safety
/// As for [`call_noargs`].
#[inline(always)]
unsafe fn call_triple(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
    method: FastCall,
) -> *mut ffi::PyObject {
    // SAFETY: the caller's contract.
    unsafe {
        let owner = slot_of(callable).owner.get();
        method(owner, args, nargs_of(nargsf), kwnames)
    }
}

/// The installed state, from a slot's call (there are slots only once it is set).
fn installed() -> &'static Installed {
    INSTALLED
        .get()
        .expect("a slot exists only after its descriptors were installed")
}

/// A slot's vectorcall entry for one method: `noargs` (`__enter__`, `__aenter__`) or `triple`
/// (`__exit__`, `__aexit__`), calling the method's function of [`Hooks`] (`$method`: its field).
/// Each is a function of its own, as a slot's entry is a plain function pointer.
macro_rules! slot_entry {
    ($fn:ident, noargs, $which:expr, $method:ident) => {
        unsafe extern "C" fn $fn(
            callable: *mut ffi::PyObject,
            _args: *const *mut ffi::PyObject,
            nargsf: usize,
            kwnames: *mut ffi::PyObject,
        ) -> *mut ffi::PyObject {
            // SAFETY: CPython calls a live slot object with the GIL held.
            unsafe { call_noargs($which, callable, nargsf, kwnames, installed().$method) }
        }
    };
    ($fn:ident, triple, $method:ident) => {
        unsafe extern "C" fn $fn(
            callable: *mut ffi::PyObject,
            args: *const *mut ffi::PyObject,
            nargsf: usize,
            kwnames: *mut ffi::PyObject,
        ) -> *mut ffi::PyObject {
            // SAFETY: CPython calls a live slot object with the GIL held and its vectorcall
            // arguments.
            unsafe { call_triple(callable, args, nargsf, kwnames, installed().$method) }
        }
    };
}

slot_entry!(enter_call, noargs, Which::Enter, enter);
slot_entry!(aenter_call, noargs, Which::AEnter, aenter);
slot_entry!(exit_call, triple, exit);
slot_entry!(aexit_call, triple, aexit);

/// A slot object called with an argument tuple (`tp_call`: `PyObject_Call`, `f(*args)`): the
/// same call through a plain bound method.
unsafe extern "C" fn slot_call(
    callable: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a live slot object with the GIL held.
    unsafe {
        let slot = slot_of(callable);
        let bound = plain(slot.which(), slot.owner.get(), ptr::null_mut());
        if bound.is_null() {
            return ptr::null_mut();
        }
        let out = ffi::PyObject_Call(bound, args, kwargs);
        ffi::Py_DecRef(bound);
        out
    }
}

/// The last reference to a slot object went: the slot is free again, and lets its handle go.
unsafe extern "C" fn slot_dealloc(ob: *mut ffi::PyObject) {
    // SAFETY: CPython calls this with the GIL held, once the slot's count reached zero.
    unsafe {
        let slot = slot_of(ob);
        let owner = slot.owner.replace(ptr::null_mut());
        slot.vectorcall.set(None);
        // Last: this may free the handle, and the slot with it.
        ffi::Py_DecRef(owner);
    }
}

/// `repr` of a slot object, as a bound method's.
unsafe extern "C" fn slot_repr(ob: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: CPython calls this with the GIL held, on a live slot object.
    unsafe {
        let py = Python::assume_attached();
        let slot = slot_of(ob);
        let name = slot.which().name();
        let owner = Borrowed::from_ptr(py, slot.owner.get());
        match owner.repr() {
            Ok(r) => format!("<bound method LockHandle.{name} of {r}>")
                .into_pyobject(py)
                .map_or(ptr::null_mut(), Bound::into_ptr),
            Err(e) => {
                e.restore(py);
                ptr::null_mut()
            }
        }
    }
}

/// An attribute of a descriptor's method descriptor (`__doc__`, `__name__`, `__qualname__`: the
/// getset's closure is its name), so that the descriptor reads as the method it binds.
unsafe extern "C" fn method_attr(
    descr: *mut ffi::PyObject,
    name: *mut c_void,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a getter with the GIL held, on a live `Method`; `name` is one of
    // the C strings `install` gave.
    unsafe {
        let which = Which::of((*descr.cast::<Method>()).which);
        match INSTALLED.get() {
            Some(installed) => ffi::PyObject_GetAttrString(
                installed.methods[which as usize] as *mut ffi::PyObject,
                name.cast(),
            ),
            None => {
                ffi::Py_IncRef(ffi::Py_None());
                ffi::Py_None()
            }
        }
    }
}

/// Replaces `LockHandle`'s `__enter__`, `__exit__`, `__aenter__` and `__aexit__` (the method
/// descriptors set when the module loaded) with the binding descriptors; `hooks` says what the
/// methods do. Nothing on a free-threaded interpreter.
pub(crate) fn install(handle_type: &Bound<'_, PyType>, hooks: Hooks) -> PyResult<()> {
    let py = handle_type.py();
    let base_flags = ffi::Py_TPFLAGS_DEFAULT
        | ffi::Py_TPFLAGS_DISALLOW_INSTANTIATION
        | ffi::Py_TPFLAGS_IMMUTABLETYPE;

    // The members of the slot type: where its vectorcall entry is, and `__self__`.
    let members: &'static mut [ffi::PyMemberDef; 3] = Box::leak(Box::new([
        ffi::PyMemberDef {
            name: c"__vectorcalloffset__".as_ptr(),
            type_code: ffi::Py_T_PYSSIZET,
            offset: offset_of!(Slot, vectorcall) as ffi::Py_ssize_t,
            flags: ffi::Py_READONLY,
            doc: ptr::null(),
        },
        ffi::PyMemberDef {
            name: c"__self__".as_ptr(),
            type_code: ffi::Py_T_OBJECT_EX,
            offset: offset_of!(Slot, owner) as ffi::Py_ssize_t,
            flags: ffi::Py_READONLY,
            doc: c"The handle the method is bound to.".as_ptr(),
        },
        ffi::PyMemberDef::default(),
    ]));
    // SAFETY: each function slot has its slot's signature (below), the members array is
    // leaked (it lives as long as the type) and ends with the zero member, the list ends with
    // the zero slot, and the instances are `Slot`s (their size is the basic size).
    let slot_type = unsafe {
        make_type(
            py,
            c"keylock._BoundHandleMethod",
            size_of::<Slot>(),
            base_flags | HAVE_VECTORCALL,
            &mut [
                slot(ffi::Py_tp_call, slot_call as *mut c_void),
                slot(ffi::Py_tp_dealloc, slot_dealloc as *mut c_void),
                slot(ffi::Py_tp_repr, slot_repr as *mut c_void),
                slot(ffi::Py_tp_members, members.as_mut_ptr().cast()),
                slot(0, ptr::null_mut()),
            ],
            None,
        )
    }?;
    let attr = |name: &'static CStr| ffi::PyGetSetDef {
        name: name.as_ptr(),
        get: Some(method_attr),
        set: None,
        doc: ptr::null(),
        closure: name.as_ptr().cast_mut().cast(),
    };
    let getset: &'static mut [ffi::PyGetSetDef; 4] = Box::leak(Box::new([
        attr(c"__doc__"),
        attr(c"__name__"),
        attr(c"__qualname__"),
        ffi::PyGetSetDef::default(),
    ]));
    // SAFETY: as for the slot type: `method_get` has the descriptor slot's signature, the
    // getset array is leaked and ends with the zero entry, and the instances are `Method`s.
    let method_type = unsafe {
        make_type(
            py,
            c"keylock._HandleMethod",
            size_of::<Method>(),
            base_flags,
            &mut [
                slot(ffi::Py_tp_descr_get, method_get as *mut c_void),
                slot(ffi::Py_tp_getset, getset.as_mut_ptr().cast()),
                slot(0, ptr::null_mut()),
            ],
            None,
        )
    }?;

    let mut methods = [0usize; 4];
    for which in Which::ALL {
        methods[which as usize] = handle_type.getattr(which.name())?.into_ptr() as usize;
    }
    let installed = Installed {
        handle_type: handle_type.as_type_ptr() as usize,
        common_type: hooks.common_type as usize,
        slots: hooks.slots,
        enter: hooks.enter,
        exit: hooks.exit,
        aenter: hooks.aenter,
        aexit: hooks.aexit,
        slot_type: slot_type.into_ptr() as usize,
        methods,
    };
    if INSTALLED.set(installed).is_err() {
        // (pyo3 initializes a module once per process, so this does not happen; were it to,
        // the descriptors of the first stay, and they know only the first's types.)
        return Ok(());
    }
    for which in Which::ALL {
        let descr = generic_instance(&method_type)?;
        // SAFETY: a fresh instance of a type whose basic size is a `Method`'s, not yet seen by
        // anyone: `which` is written before it is published.
        unsafe { (*descr.as_ptr().cast::<Method>()).which = which as usize };
        handle_type.setattr(which.name(), descr)?;
    }
    Ok(())
}

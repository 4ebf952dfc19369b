//! The methods on the path of every `with pool.lock(key):` block, made by hand as CPython
//! vectorcall method descriptors: `lock`, `read` and `write` of KeyPool and StripedLock (set on
//! their base, `KeyedLock`), and `__enter__`, `__exit__`, `__aenter__`, `__aexit__` of every
//! lock handle (set on `LockHandle`), when the module loads.
//!
//! A pyo3 method wrapper counts the thread's attachment in a thread-local on entry and exit (a
//! `__tls_get_addr` call each way in a shared library), checks the type of `self` (which the
//! method descriptor has already checked), and extracts every argument through a general
//! parser. A `with pool.lock(key):` block makes three such calls. Here each method has a path
//! for the arguments it is almost always given (`lock(key)`; `__exit__`'s three positional
//! ones, of which only whether the first is None matters), and a general one that accepts every
//! form the pyo3 signature accepted, with the same checks and messages. What the methods do is unchanged:
//! [`Keyed::handle`], [`LockHandle::enter`] and friends.
//!
//! The calls run with the thread attached (CPython calls methods with the GIL held), under a
//! `Python` token made by `assume_attached`; pyo3's attachment count stays as the caller left
//! it, so a Python reference dropped inside (on error paths) has its decref deferred to pyo3's
//! next call instead of made at once. A panic becomes `pyo3_runtime.PanicException`, as in a
//! pyo3 method.

use std::ffi::{CStr, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

use keylock_core::Mode;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple, PyType};

use crate::args::{Lease, OptTimeout};
use crate::lock::{Keyed, LockHandle};
use crate::ready;

/// A vectorcall's arguments: `nargs` positional ones, then one per name of the tuple
/// `kwnames` (NULL when there are none), all borrowed from the caller.
#[derive(Clone, Copy)]
struct Args {
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
}

impl Args {
    /// The call has exactly `n` positional arguments and no keyword ones.
    #[inline(always)]
    fn positional_only(&self, n: ffi::Py_ssize_t) -> bool {
        self.kwnames.is_null() && self.nargs == n
    }
}

/// Runs a method body with the thread's `Python` token, turning its error or panic into a raised
/// exception (NULL), as a pyo3 method wrapper does.
///
/// The error is raised inside the closure that `catch_unwind` runs, so that what comes back
/// through it is one pointer: it comes back through memory (the closure is called out of line),
/// and a `PyResult` there was stored by the closure a word at a time and loaded by the caller 16
/// bytes at a time, a load that waits for the stores to land (about 5 to 7 ns a call).
#[inline(always)]
fn call(body: impl FnOnce(Python<'_>) -> PyResult<*mut ffi::PyObject>) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a method with the thread attached (holding the GIL).
    let py = unsafe { Python::assume_attached() };
    let run = || match body(py) {
        Ok(obj) => obj,
        Err(e) => {
            e.restore(py);
            ptr::null_mut()
        }
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(obj) => obj,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("panic from Rust code");
            PanicException::new_err((msg.to_owned(),)).restore(py);
            ptr::null_mut()
        }
    }
}

/// `self` of a method of `LockHandle`.
///
/// # Safety
///
/// `slf` is a live object that is an instance of `LockHandle` (the method descriptor checks
/// that before calling), and the thread is attached.
#[inline(always)]
unsafe fn handle<'a, 'py>(
    py: Python<'py>,
    slf: &'a *mut ffi::PyObject,
) -> Borrowed<'a, 'py, LockHandle> {
    // SAFETY: the caller's contract: a live, borrowed reference to a LockHandle instance.
    unsafe { Borrowed::from_ptr(py, *slf).cast_unchecked::<LockHandle>() }
}

/// A new reference to a bool.
fn new_bool(value: bool) -> *mut ffi::PyObject {
    let obj = if value {
        // SAFETY: Py_True is a static object, valid while the interpreter runs.
        unsafe { ffi::Py_True() }
    } else {
        // SAFETY: as above.
        unsafe { ffi::Py_False() }
    };
    // SAFETY: a live object; the new reference is the caller's.
    unsafe { ffi::Py_IncRef(obj) };
    obj
}

/// A new reference to None.
fn new_none() -> *mut ffi::PyObject {
    // SAFETY: Py_None is a static object; the new reference is the caller's.
    unsafe {
        ffi::Py_IncRef(ffi::Py_None());
        ffi::Py_None()
    }
}

/// Whether an exception is propagating out of the block: `exc_type` (the first of `__exit__`'s
/// three arguments, positional or by keyword) is not None. Checks the arguments as the pyo3
/// signature `(exc_type, _exc, _tb)` did.
///
/// # Safety
///
/// `args`, `nargs` and `kwnames` are a vectorcall's arguments (`nargs` positional ones, then one
/// per name of the tuple `kwnames`, which may be NULL), and the thread is attached.
#[inline(always)]
unsafe fn in_flight(py: Python<'_>, name: &str, call: Args) -> PyResult<bool> {
    if call.positional_only(3) {
        // SAFETY: three positional arguments, borrowed from the caller.
        return Ok(unsafe { *call.args } != unsafe { ffi::Py_None() });
    }
    // SAFETY: the caller's contract.
    let [exc_type, _, _] = unsafe { parse(py, name, ["exc_type", "_exc", "_tb"], 3, 3, call) }?;
    Ok(exc_type.is_some_and(|t| !t.is_none()))
}

/// The arguments of a call by the general rules: `params` in order, the first `positional` of
/// them also by position, the first `required` of them required; each given at most once.
/// Returns them borrowed from the caller, None where not given.
///
/// # Safety
///
/// As for [`in_flight`].
#[cold]
unsafe fn parse<'a, 'py, const N: usize>(
    py: Python<'py>,
    name: &str,
    params: [&str; N],
    positional: usize,
    required: usize,
    call: Args,
) -> PyResult<[Option<Borrowed<'a, 'py, PyAny>>; N]> {
    let Args {
        args,
        nargs,
        kwnames,
    } = call;
    let nargs = usize::try_from(nargs).unwrap_or(0);
    if nargs > positional {
        let takes = if positional == required {
            format!("{positional}")
        } else {
            format!("from {required} to {positional}")
        };
        let was = if nargs == 1 { "was" } else { "were" };
        return Err(PyTypeError::new_err(format!(
            "{name}() takes {takes} positional arguments but {nargs} {was} given"
        )));
    }
    let mut given: [Option<Borrowed<'a, 'py, PyAny>>; N] = [None; N];
    for (i, slot) in given.iter_mut().enumerate().take(nargs) {
        // SAFETY: `i` < `nargs`: a live argument borrowed from the caller.
        *slot = Some(unsafe { Borrowed::from_ptr(py, *args.add(i)) });
    }
    if !kwnames.is_null() {
        // SAFETY: `kwnames` is a live tuple of str, borrowed from the caller.
        let names = unsafe { Borrowed::from_ptr(py, kwnames).cast_unchecked::<PyTuple>() };
        for (j, kw) in names.iter().enumerate() {
            let kw = kw.cast_into::<PyString>()?;
            let kw = kw.to_str()?;
            let Some(at) = params.iter().position(|p| *p == kw) else {
                return Err(PyTypeError::new_err(format!(
                    "{name}() got an unexpected keyword argument '{kw}'"
                )));
            };
            if given[at].is_some() {
                return Err(PyTypeError::new_err(format!(
                    "{name}() got multiple values for argument '{kw}'"
                )));
            }
            // SAFETY: the keyword values follow the `nargs` positional ones, one per name.
            given[at] = Some(unsafe { Borrowed::from_ptr(py, *args.add(nargs + j)) });
        }
    }
    let missing: Vec<&str> = params[..required]
        .iter()
        .zip(&given)
        .filter(|(_, v)| v.is_none())
        .map(|(p, _)| *p)
        .collect();
    if !missing.is_empty() {
        let n = missing.len();
        let arguments = if n == 1 { "argument" } else { "arguments" };
        // Listed as Python lists them: 'a'; 'a' and 'b'; 'a', 'b', and 'c'.
        let mut list = String::new();
        for (i, p) in missing.iter().enumerate() {
            if i > 0 {
                list.push_str(if n > 2 { "," } else { "" });
                list.push_str(if i == n - 1 { " and " } else { " " });
            }
            list.push_str(&format!("'{p}'"));
        }
        return Err(PyTypeError::new_err(format!(
            "{name}() missing {n} required positional {arguments}: {list}"
        )));
    }
    Ok(given)
}

/// Extracts an optional argument, noting its name on the error as pyo3 does.
fn optional<'py, T>(name: &str, arg: Option<Borrowed<'_, 'py, PyAny>>) -> PyResult<Option<T>>
where
    T: for<'a> FromPyObject<'a, 'py, Error = PyErr>,
{
    let Some(arg) = arg else { return Ok(None) };
    arg.extract::<T>().map(Some).inspect_err(|e| {
        let py = arg.py();
        let _ = e
            .value(py)
            .call_method1("add_note", (format!("while processing '{name}'"),));
    })
}

/// `lock`, `read` and `write` (`METH_FASTCALL | METH_KEYWORDS`): `(key, timeout=None, *,
/// lease=None)`.
///
/// # Safety
///
/// A vectorcall method's arguments, `slf` a `KeyedLock` (checked by the method descriptor).
#[inline(always)]
unsafe fn handle_of(
    name: &str,
    mode: Mode,
    slf: *mut ffi::PyObject,
    args: Args,
) -> *mut ffi::PyObject {
    call(|py| {
        // SAFETY: called through KeyedLock's method descriptor, which checked the type.
        let this = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<Keyed>() };
        if args.positional_only(1) {
            // SAFETY: one positional argument, borrowed from the caller.
            let key = unsafe { Borrowed::from_ptr(py, *args.args) };
            let handle = Keyed::handle(&this, &key, mode, OptTimeout(None), Lease(None))?;
            return Ok(handle.into_ptr());
        }
        // SAFETY: the caller's contract.
        let [key, timeout, lease] =
            unsafe { parse(py, name, ["key", "timeout", "lease"], 2, 1, args) }?;
        let timeout = optional::<OptTimeout>("timeout", timeout)?.unwrap_or(OptTimeout(None));
        let lease = optional::<Lease>("lease", lease)?.unwrap_or(Lease(None));
        let key = key.ok_or_else(|| PyTypeError::new_err("missing key"))?;
        Ok(Keyed::handle(&this, &key, mode, timeout, lease)?.into_ptr())
    })
}

/// The `METH_FASTCALL | METH_KEYWORDS` entry of a `KeyedLock` method that makes a handle
/// (`lock`, `read`, `write`): `$name` in its argument errors, `$mode` the handle's mode. Each is
/// its own function, as CPython calls a method through its own pointer.
macro_rules! handle_method {
    ($fn:ident, $name:literal, $mode:expr) => {
        unsafe extern "C" fn $fn(
            slf: *mut ffi::PyObject,
            args: *const *mut ffi::PyObject,
            nargs: ffi::Py_ssize_t,
            kwnames: *mut ffi::PyObject,
        ) -> *mut ffi::PyObject {
            let args = Args {
                args,
                nargs,
                kwnames,
            };
            // SAFETY: called by CPython through KeyedLock's descriptor (type checked), with
            // its vectorcall arguments.
            unsafe { handle_of($name, $mode, slf, args) }
        }
    };
}

handle_method!(lock, "KeyedLock.lock", Mode::Exclusive);
handle_method!(read, "KeyedLock.read", Mode::Shared);
handle_method!(write, "KeyedLock.write", Mode::Exclusive);

/// `__enter__` (`METH_NOARGS`).
pub(crate) unsafe extern "C" fn enter(
    slf: *mut ffi::PyObject,
    _noargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    call(|py| {
        // SAFETY: called through LockHandle's method descriptor, which checked the type.
        let this = unsafe { handle(py, &slf) };
        this.get().enter(py).map(new_bool)
    })
}

/// What `__exit__` and `__aexit__` share: the exception triple read (`name` names the method
/// in argument errors), then the handle's release.
///
/// # Safety
/// `slf` is a live, borrowed reference to a `LockHandle`, and `args` are CPython's vectorcall
/// arguments, with the thread attached.
unsafe fn exit_with(
    py: Python<'_>,
    name: &str,
    slf: &*mut ffi::PyObject,
    args: Args,
) -> PyResult<()> {
    // SAFETY: the caller's contract.
    let in_flight = unsafe { in_flight(py, name, args) }?;
    // SAFETY: the caller's contract.
    let this = unsafe { handle(py, slf) };
    this.get().exit(py, in_flight)
}

/// `__exit__` (`METH_FASTCALL | METH_KEYWORDS`).
pub(crate) unsafe extern "C" fn exit(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let args = Args {
        args,
        nargs,
        kwnames,
    };
    // SAFETY: called through LockHandle's method descriptor (type checked), with CPython's
    // vectorcall arguments and the thread attached.
    call(|py| unsafe { exit_with(py, "LockHandle.__exit__", &slf, args) }.map(|()| new_none()))
}

/// `__aenter__` (`METH_NOARGS`).
pub(crate) unsafe extern "C" fn aenter(
    slf: *mut ffi::PyObject,
    _noargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    call(|py| {
        // SAFETY: as in `enter`.
        let this = unsafe { handle(py, &slf) };
        LockHandle::aenter(&this).map(Py::into_ptr)
    })
}

/// `__aexit__` (`METH_FASTCALL | METH_KEYWORDS`).
pub(crate) unsafe extern "C" fn aexit(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let args = Args {
        args,
        nargs,
        kwnames,
    };
    call(|py| {
        // SAFETY: as in `exit`.
        unsafe { exit_with(py, "LockHandle.__aexit__", &slf, args) }?;
        ready::get(py).map(Py::into_ptr)
    })
}

/// One method: name, function, flags, docstring (its first lines are the text signature, as
/// CPython reads it for `inspect.signature`).
struct Method {
    name: &'static CStr,
    meth: ffi::PyMethodDefPointer,
    flags: c_int,
    doc: &'static CStr,
}

/// The methods of `KeyedLock`.
fn keyed_methods() -> [Method; 3] {
    let fast = ffi::METH_FASTCALL | ffi::METH_KEYWORDS;
    [
        Method {
            name: c"lock",
            meth: ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: lock,
            },
            flags: fast,
            doc: c"lock($self, key, timeout=None, *, lease=None)\n--\n\n\
                Return the exclusive lock handle of `key`. `timeout` (seconds, None for no limit) \
                bounds the wait of `with` / `async with`, which raise keylock.LockTimeout when it \
                runs out; `lease` (seconds) makes every acquisition through the handle end by \
                itself after that long. In a reentrant lock object the handle is a \
                ReentrantKeyLock.",
        },
        Method {
            name: c"read",
            meth: ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: read,
            },
            flags: fast,
            doc: c"read($self, key, timeout=None, *, lease=None)\n--\n\n\
                Return the shared lock handle of `key`: any number of shared holders at once, no \
                exclusive holder meanwhile (a shared request behind a waiting exclusive one \
                waits: FIFO per key). Same arguments as `lock`.",
        },
        Method {
            name: c"write",
            meth: ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: write,
            },
            flags: fast,
            doc: c"write($self, key, timeout=None, *, lease=None)\n--\n\n\
                Return the exclusive lock handle of `key` (the same as `lock`, named as the \
                partner of `read`).",
        },
    ]
}

/// The methods of `LockHandle`.
fn handle_methods() -> [Method; 4] {
    let fast = ffi::METH_FASTCALL | ffi::METH_KEYWORDS;
    [
        Method {
            name: c"__enter__",
            meth: ffi::PyMethodDefPointer { PyCFunction: enter },
            flags: ffi::METH_NOARGS,
            doc:
                c"__enter__($self, /)\n--\n\n\
                Acquire (within the handle's timeout, else raise keylock.LockTimeout); return True.",
        },
        Method {
            name: c"__exit__",
            meth: ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: exit,
            },
            flags: fast,
            doc: c"__exit__($self, exc_type, _exc, _tb)\n--\n\n\
                Release, whatever the exception. A release refused because the acquisition went \
                stale (its lease ran out, or it was force-unlocked) raises LeaseExpiredError / \
                NotOwnerError, unless another exception is already propagating.",
        },
        Method {
            name: c"__aenter__",
            meth: ffi::PyMethodDefPointer {
                PyCFunction: aenter,
            },
            flags: ffi::METH_NOARGS,
            doc: c"__aenter__($self, /)\n--\n\n\
                Awaitable: acquire without blocking the event loop (within the handle's timeout, \
                else raise keylock.LockTimeout). A free lock is taken by this call itself, so \
                awaiting the result suspends nothing.",
        },
        Method {
            name: c"__aexit__",
            meth: ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: aexit,
            },
            flags: fast,
            doc: c"__aexit__($self, exc_type, _exc, _tb)\n--\n\n\
                Release, whatever the exception (as `__exit__`); the awaitable is already done.",
        },
    ]
}

/// Sets `methods` on `ty`.
fn set_on(ty: &Bound<'_, PyType>, methods: impl IntoIterator<Item = Method>) -> PyResult<()> {
    let py = ty.py();
    for method in methods {
        // CPython keeps a pointer to the definition for as long as the method exists: for the
        // life of the process (the type is never freed while the module is loaded).
        let def: &'static mut ffi::PyMethodDef = Box::leak(Box::new(ffi::PyMethodDef {
            ml_name: method.name.as_ptr(),
            ml_meth: method.meth,
            ml_flags: method.flags,
            ml_doc: method.doc.as_ptr(),
        }));
        // SAFETY: a live type and a definition that outlives it; the result is a new reference
        // or NULL with an exception set.
        let descr = unsafe {
            Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), def))?
        };
        ty.setattr(method.name.to_str().unwrap_or_default(), descr)?;
    }
    Ok(())
}

/// Sets the methods on `KeyedLock` and `LockHandle` (every subclass inherits them).
pub(crate) fn install(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    set_on(&py.get_type::<Keyed>(), keyed_methods())?;
    set_on(&py.get_type::<LockHandle>(), handle_methods())
}

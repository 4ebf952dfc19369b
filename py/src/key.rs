//! Keys: every Python key becomes a byte string, by the rules every front end shares
//! (`keylock_core::keys`), so that a Python key names the same lock as the same key in C or Node.
//!
//! | Python key | bytes |
//! |---|---|
//! | `str` | its UTF-8 encoding (`"ab"` is `b"ab"`, as in C and Node); a lone surrogate raises `UnicodeEncodeError` (a `ValueError`) with the core's message |
//! | `bytes`, `bytearray`, `memoryview` | their contents (a `memoryview` is read as `tobytes()`) |
//! | `int` | 8 bytes: the value as a signed 64-bit big-endian two's-complement integer (`keys::encode_i64`); outside -2**63..2**63-1 raises `OverflowError` with the core's message |
//! | `bool` | rejected with `TypeError` (`True == 1` would silently share a key with `1`) |
//! | anything else (`float` included) | `TypeError` naming the type |
//!
//! A `str` is a sequence of code points, so the only code points without a UTF-8 form are the
//! surrogates, which in a `str` are always lone: CPython's UTF-8 codec then fails exactly where
//! the core's rule does, and its cached UTF-8 form is used as the key without a copy.
//!
//! Different Python values that give the same bytes are the same key: `"a"`, `b"a"` and
//! `bytearray(b"a")` name one lock, and so do `1` and `b"\0\0\0\0\0\0\0\x01"`.

use std::ops::Deref;

use keylock_core::Mode;
use keylock_core::keys::{self, KeyError};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyUnicodeEncodeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyInt, PyMemoryView, PyString, PyTuple};

/// A key converted to bytes, borrowing them from a Python object where it can.
pub(crate) enum Key<'py> {
    /// Bytes owned by an immutable Python object: a `bytes` key, or a `str`, which caches its
    /// UTF-8 form for its lifetime.
    Shared(Shared<'py>),
    /// A copy (of a `bytearray`, whose contents may change later).
    Owned(Vec<u8>),
    /// An `int`.
    Int(IntKey),
}

/// An `int` key's bytes, aligned to a word so that they move as one. At offset 1 of an enum (the
/// plain array's place), each move of them was two overlapping 4-byte copies, and a load of the
/// next move spanning both stores stalls until they land: in `pool.lock(k)`, whose key is moved
/// five times on its way into the handle, that was about 30 of the 38 ns it took to make the
/// handle (perf, the Python suite's asyncio loop).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct IntKey([u8; keys::INT_KEY_LEN]);

impl Deref for IntKey {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// An immutable Python object and the bytes of the key inside it.
pub(crate) struct Shared<'py> {
    obj: Bound<'py, PyAny>,
    ptr: *const u8,
    len: usize,
}

impl<'py> Shared<'py> {
    fn bytes(b: Bound<'py, PyBytes>) -> Self {
        let (ptr, len) = (b.as_bytes().as_ptr(), b.as_bytes().len());
        Shared {
            obj: b.into_any(),
            ptr,
            len,
        }
    }

    /// The UTF-8 form of a `str`, without a copy: PyUnicode_AsUTF8AndSize (limited API 3.10+)
    /// gives the str's own UTF-8 form, which CPython caches inside the str (for an ASCII str it
    /// is the str's data itself) and frees only with the str, which `obj` keeps alive.
    fn str(s: &Bound<'py, PyString>) -> PyResult<Self> {
        let utf8 = s.to_str().map_err(|e| text_error(s, e))?;
        let (ptr, len) = (utf8.as_ptr(), utf8.len());
        Ok(Shared {
            obj: s.clone().into_any(),
            ptr,
            len,
        })
    }

    #[inline]
    fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr`/`len` were read from `obj`'s immutable buffer, which lives as long as
        // `obj`, which `self` owns.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Deref for Key<'_> {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Key::Shared(s) => s.as_slice(),
            Key::Owned(v) => v,
            Key::Int(a) => a,
        }
    }
}

/// The error for a `str` that has no UTF-8 form: CPython's `UnicodeEncodeError` (same position),
/// with the core's reason. Any other error (a `MemoryError`) passes unchanged.
#[cold]
fn text_error(s: &Bound<'_, PyString>, err: PyErr) -> PyErr {
    let py = s.py();
    if !err.is_instance_of::<PyUnicodeEncodeError>(py) {
        return err;
    }
    let at = |name: &str| -> PyResult<usize> { err.value(py).getattr(name)?.extract() };
    match (at("start"), at("end")) {
        (Ok(start), Ok(end)) => PyUnicodeEncodeError::new_err((
            "utf-8",
            s.clone().unbind(),
            start,
            end,
            KeyError::LoneSurrogate.message(),
        )),
        _ => err,
    }
}

/// Converts a Python key (see the module docs for the mapping).
#[inline]
pub(crate) fn to_key<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Key<'py>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Key::Shared(Shared::str(s)?));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Key::Shared(Shared::bytes(b.clone())));
    }
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "keylock keys cannot be bool (True == 1 would share a key with 1); use int(x) or a str",
        ));
    }
    if obj.is_instance_of::<PyInt>() {
        let v: i64 = obj
            .extract()
            .map_err(|_| PyOverflowError::new_err(KeyError::IntegerOutOfRange.message()))?;
        return Ok(Key::Int(IntKey(keys::encode_i64(v))));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Key::Owned(b.to_vec()));
    }
    if obj.is_instance_of::<PyMemoryView>() {
        let bytes = obj.call_method0("tobytes")?.cast_into::<PyBytes>()?;
        return Ok(Key::Shared(Shared::bytes(bytes)));
    }
    Err(type_error(obj))
}

/// A key kept by a handle, without copying it where it can be shared.
pub(crate) enum OwnedKey {
    /// An immutable object holding the key's bytes (see [`Key::Shared`]) and those bytes.
    Bytes(SharedBytes),
    /// An `int` key.
    Int(IntKey),
    /// A copy (of a `bytearray`, whose contents may change later).
    Copied(Box<[u8]>),
}

/// An immutable Python object with the key's bytes inside it.
///
/// The object (a `bytes`, or a `str` with its cached UTF-8 form) is immutable and the reference
/// keeps it alive, so the buffer stays valid and unchanged for as long as this value exists;
/// reading it needs no Python call.
pub(crate) struct SharedBytes {
    _obj: Py<PyAny>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: the buffer is immutable and owned by `_obj`, which is Send + Sync (a Py<T> may move
// between threads and is only ever dropped through pyo3, which defers the decref to an attached
// thread); the raw pointer is only read.
unsafe impl Send for SharedBytes {}
// SAFETY: as above; `&SharedBytes` only hands out `&[u8]` to immutable memory.
unsafe impl Sync for SharedBytes {}

impl OwnedKey {
    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            // SAFETY: see `SharedBytes`: `ptr`/`len` describe the immutable buffer of `_obj`,
            // which lives at least as long as `self`.
            OwnedKey::Bytes(b) => unsafe { std::slice::from_raw_parts(b.ptr, b.len) },
            OwnedKey::Int(a) => a,
            OwnedKey::Copied(v) => v,
        }
    }
}

impl Deref for OwnedKey {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// Converts a Python key for a handle to keep (see the module docs for the mapping).
#[inline]
pub(crate) fn to_owned_key(obj: &Bound<'_, PyAny>) -> PyResult<OwnedKey> {
    Ok(match to_key(obj)? {
        Key::Shared(Shared { obj, ptr, len }) => OwnedKey::Bytes(SharedBytes {
            _obj: obj.unbind(),
            ptr,
            len,
        }),
        Key::Int(a) => OwnedKey::Int(a),
        Key::Owned(v) => OwnedKey::Copied(v.into_boxed_slice()),
    })
}

/// Converts every entry of an iterable for `lock_many`: a key (taken exclusively) or a
/// `(key, mode)` pair, mode `"exclusive"` or `"shared"`. (A tuple is never a key, so the two
/// cannot be confused.)
pub(crate) fn to_owned_entries(entries: &Bound<'_, PyAny>) -> PyResult<Vec<(OwnedKey, Mode)>> {
    if entries.is_instance_of::<PyString>() || entries.is_instance_of::<PyBytes>() {
        // A lone str or bytes is almost always a mistake for a list of keys: iterating it would
        // lock its characters one by one.
        return Err(PyTypeError::new_err(
            "lock_many takes an iterable of keys, not a single str or bytes key",
        ));
    }
    let iter = entries.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "lock_many takes an iterable of keys, not {}",
            type_name(entries)
        ))
    })?;
    let entries = iter
        .map(|entry| {
            let entry = entry?;
            if let Ok(pair) = entry.cast::<PyTuple>() {
                if pair.len() != 2 {
                    return Err(PyTypeError::new_err(
                        "a lock_many entry is a key or a (key, mode) pair",
                    ));
                }
                let mode = crate::args::mode(&pair.get_item(1)?)?;
                return Ok((to_owned_key(&pair.get_item(0)?)?, mode));
            }
            Ok((to_owned_key(&entry)?, Mode::Exclusive))
        })
        .collect::<PyResult<Vec<_>>>()?;
    if entries.is_empty() {
        return Err(PyValueError::new_err("lock_many needs at least one key"));
    }
    Ok(entries)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .qualname()
        .map(|n| format!("'{n}'"))
        .unwrap_or_else(|_| "this type".to_owned())
}

#[cold]
fn type_error(obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "keylock keys must be str, bytes, bytearray, memoryview or int, not {}",
        type_name(obj)
    ))
}

/// Return the bytes that `key` stands for: every keylock primitive locks by these bytes, so two
/// keys with the same bytes are the same key (also across C, Node and Rust).
///
/// str -> UTF-8; bytes, bytearray, memoryview -> their contents; int -> 8 bytes, signed 64-bit
/// big-endian two's complement (OverflowError outside that range); bool and other types ->
/// TypeError.
#[pyfunction]
#[pyo3(signature = (key, /))]
pub(crate) fn key_bytes<'py>(key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let bytes = to_key(key)?;
    Ok(PyBytes::new(key.py(), &bytes))
}

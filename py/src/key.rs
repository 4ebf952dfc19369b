//! Keys: every Python key becomes a byte string, the key type the core, C and Node share.
//!
//! | Python key | bytes |
//! |---|---|
//! | `str` | its UTF-8 encoding (`"ab"` is `b"ab"`, as in C and Node); lone surrogates raise `UnicodeEncodeError` |
//! | `bytes`, `bytearray`, `memoryview` | their contents (a `memoryview` is read as `tobytes()`) |
//! | `int` | 8 bytes: the value as a signed 64-bit big-endian two's-complement integer; outside -2**63..2**63-1 raises `OverflowError` |
//! | `bool` | rejected with `TypeError` (`True == 1` would silently share a key with `1`) |
//! | anything else | `TypeError` naming the type |
//!
//! Different Python values that give the same bytes are the same key: `"a"`, `b"a"` and
//! `bytearray(b"a")` name one lock, and so do `1` and `b"\0\0\0\0\0\0\0\x01"`.

use std::ops::Deref;

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyInt, PyMemoryView, PyString};

/// A key converted to bytes, borrowing from a Python `bytes` object where it can.
pub(crate) enum Key<'py> {
    /// A `bytes` object (the key itself, or the UTF-8 encoding of a `str`).
    Bytes(Bound<'py, PyBytes>),
    /// A copy (of a `bytearray`, whose contents may change later).
    Owned(Vec<u8>),
    /// An `int`.
    Int([u8; 8]),
}

impl Deref for Key<'_> {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Key::Bytes(b) => b.as_bytes(),
            Key::Owned(v) => v,
            Key::Int(a) => a,
        }
    }
}

/// Converts a Python key (see the module docs for the mapping).
#[inline]
pub(crate) fn to_key<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Key<'py>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Key::Bytes(s.encode_utf8()?));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Key::Bytes(b.clone()));
    }
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "keylock keys cannot be bool (True == 1 would share a key with 1); use int(x) or a str",
        ));
    }
    if obj.is_instance_of::<PyInt>() {
        let v: i64 = obj.extract().map_err(|_| {
            PyOverflowError::new_err(
                "int keys must fit in a signed 64-bit integer (-2**63 <= key < 2**63)",
            )
        })?;
        return Ok(Key::Int(v.to_be_bytes()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Key::Owned(b.to_vec()));
    }
    if obj.is_instance_of::<PyMemoryView>() {
        let bytes = obj.call_method0("tobytes")?.cast_into::<PyBytes>()?;
        return Ok(Key::Bytes(bytes));
    }
    Err(type_error(obj))
}

/// Converts a Python key to an owned byte string (for handles that keep their key).
#[inline]
pub(crate) fn to_owned_key(obj: &Bound<'_, PyAny>) -> PyResult<Box<[u8]>> {
    Ok(Box::from(&*to_key(obj)?))
}

/// Converts every key of an iterable (for `lock_many`).
pub(crate) fn to_owned_keys(keys: &Bound<'_, PyAny>) -> PyResult<Vec<Box<[u8]>>> {
    if keys.is_instance_of::<PyString>() || keys.is_instance_of::<PyBytes>() {
        // A lone str or bytes is almost always a mistake for a list of keys: iterating it would
        // lock its characters one by one.
        return Err(PyTypeError::new_err(
            "lock_many takes an iterable of keys, not a single str or bytes key",
        ));
    }
    let iter = keys.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "lock_many takes an iterable of keys, not {}",
            type_name(keys)
        ))
    })?;
    let keys = iter
        .map(|k| to_owned_key(&k?))
        .collect::<PyResult<Vec<_>>>()?;
    if keys.is_empty() {
        return Err(PyValueError::new_err("lock_many needs at least one key"));
    }
    Ok(keys)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .qualname()
        .map(|n| format!("'{n}'"))
        .unwrap_or_else(|_| "this type".to_owned())
}

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
    match to_key(key)? {
        Key::Bytes(b) => Ok(b),
        other => Ok(PyBytes::new(key.py(), &other)),
    }
}

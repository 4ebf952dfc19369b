//! Keys from JavaScript: a `string` (its UTF-8 bytes, so text keys agree with C and Python), or a
//! `Uint8Array` (a `Buffer` is one). The JavaScript layer rejects every other type with a
//! `TypeError` before calling in; the checks here only keep the addon sound if it is called
//! directly.

use std::ptr;

use napi::bindgen_prelude::{FromNapiValue, TypeName, ValidateNapiValue};
use napi::{Error, Result, Status, ValueType, sys};

/// Keys up to this many bytes are copied into the stack buffer, longer ones onto the heap.
const INLINE: usize = 96;

/// The bytes of one key, copied out of the JavaScript value for the duration of one call.
pub struct Key {
    /// Number of bytes used in `inline` (when `heap` is `None`).
    len: usize,
    inline: [u8; INLINE],
    heap: Option<Vec<u8>>,
}

impl Key {
    /// The key's bytes.
    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match &self.heap {
            Some(v) => v,
            None => &self.inline[..self.len],
        }
    }

    /// Reads a string as UTF-8. Lone surrogates become U+FFFD, as `Buffer.from(s)` does.
    ///
    /// Fails with `Status::StringExpected` when `value` is not a string.
    ///
    /// # Safety
    /// `env` is the current environment and `value` a value of it.
    unsafe fn from_string(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        let mut key = Key {
            len: 0,
            inline: [0; INLINE],
            heap: None,
        };
        let mut written = 0usize;
        // SAFETY: the buffer is INLINE bytes long; napi writes at most INLINE - 1 bytes and a NUL.
        let status = unsafe {
            sys::napi_get_value_string_utf8(
                env,
                value,
                key.inline.as_mut_ptr().cast(),
                INLINE,
                &mut written,
            )
        };
        check(status, "reading a string key")?;
        // napi stops before a character that does not fit (at most 4 bytes long), so a string
        // that came out shorter than INLINE - 4 bytes was copied whole.
        if written < INLINE - 4 {
            key.len = written;
            return Ok(key);
        }
        let mut full = 0usize;
        // SAFETY: a null buffer asks only for the length in bytes.
        let status =
            unsafe { sys::napi_get_value_string_utf8(env, value, ptr::null_mut(), 0, &mut full) };
        check(status, "measuring a string key")?;
        let mut heap = vec![0u8; full + 1];
        // SAFETY: `heap` has room for the `full` bytes and the NUL that napi appends.
        let status = unsafe {
            sys::napi_get_value_string_utf8(
                env,
                value,
                heap.as_mut_ptr().cast(),
                full + 1,
                &mut written,
            )
        };
        check(status, "reading a string key")?;
        heap.truncate(written);
        key.heap = Some(heap);
        Ok(key)
    }

    /// Copies the bytes a `Uint8Array` views.
    ///
    /// Fails with `Status::InvalidArg` when `value` is not a `Uint8Array`.
    ///
    /// # Safety
    /// `env` is the current environment and `value` a value of it.
    unsafe fn from_object(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        let mut is_typed = false;
        // SAFETY: plain query on a live value.
        let status = unsafe { sys::napi_is_typedarray(env, value, &mut is_typed) };
        check(status, "inspecting a key")?;
        if !is_typed {
            return Err(bad_key());
        }
        let mut kind = 0;
        let mut len = 0usize;
        let mut data = ptr::null_mut();
        // SAFETY: `value` is a typed array; null out-pointers are allowed for unused fields.
        let status = unsafe {
            sys::napi_get_typedarray_info(
                env,
                value,
                &mut kind,
                &mut len,
                &mut data,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        check(status, "reading a Uint8Array key")?;
        if kind != sys::TypedarrayType::uint8_array {
            return Err(bad_key());
        }
        let bytes: &[u8] = if len == 0 || data.is_null() {
            &[]
        } else {
            // SAFETY: napi gives the view's data pointer (already offset) and its length in
            // elements, one byte each; the memory stays valid during this synchronous call.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }
        };
        let mut key = Key {
            len: 0,
            inline: [0; INLINE],
            heap: None,
        };
        if bytes.len() <= INLINE {
            key.inline[..bytes.len()].copy_from_slice(bytes);
            key.len = bytes.len();
        } else {
            key.heap = Some(bytes.to_vec());
        }
        Ok(key)
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Key").field(&self.as_bytes()).finish()
    }
}

fn bad_key() -> Error {
    Error::new(
        Status::InvalidArg,
        "a key must be a string, a Buffer or a Uint8Array",
    )
}

fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::new(
            Status::from(status),
            format!("napi call failed while {what}"),
        ))
    }
}

impl FromNapiValue for Key {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        // Strings first, without asking the type: napi reports `string_expected` for anything
        // else, and this saves a call on the common path.
        // SAFETY: `value` is a value of `env`; a non-string fails the first napi call.
        match unsafe { Key::from_string(env, value) } {
            Err(e) if e.status == Status::StringExpected => {
                // SAFETY: as above; `from_object` checks that `value` is a typed array.
                unsafe { Key::from_object(env, value) }
            }
            other => other,
        }
    }
}

impl TypeName for Key {
    fn type_name() -> &'static str {
        "string | Uint8Array"
    }

    fn value_type() -> ValueType {
        ValueType::Unknown
    }
}

impl ValidateNapiValue for Key {}

//! Keys from JavaScript, encoded by the rules every front end shares (`keylock_core::keys`):
//!
//! | JavaScript key | bytes |
//! |---|---|
//! | `string` | its UTF-8 encoding; a lone surrogate is a `TypeError` (it is never replaced with U+FFFD, which would give two strings one lock) |
//! | `Uint8Array` (a `Buffer` is one) | the bytes it views |
//! | `number` | a safe integer (`Number.isSafeInteger`) as 8 bytes, big-endian two's complement; any other number is a `RangeError` |
//! | `bigint` | the same 8 bytes, for values from -2^63 to 2^63 - 1; others are a `RangeError` |
//!
//! Every other type is a `TypeError`. All of them carry the code `KEYLOCK_INVALID_ARGUMENT`,
//! and the message names what was given. The JavaScript layer passes keys straight through:
//! these checks are the only ones.
//!
//! Web Locks names are not keys: any string is a name ([`Name`]), encoded as WTF-8 by
//! `keylock_core::keys::encode_name_utf16`, in the core's key space for names.
//!
//! A string is read as UTF-16 code units onto the stack and encoded there: keys up to
//! [`UNITS`] code units allocate nothing.

use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::ptr;

use keylock_core::keys::{self, KeyError};
use napi::{Env, Error, JsValue, Result, Status, ValueType, sys};

/// Strings up to this many UTF-16 code units are read onto the stack.
const UNITS: usize = 64;
/// Keys up to this many bytes are kept on the stack: any string of [`UNITS`] code units, and any
/// other key this short.
const INLINE: usize = keys::utf16_max_len(UNITS);
/// The largest integer a `number` key may be: `Number.MAX_SAFE_INTEGER`. Larger numbers are not
/// exact (2^53 + 1 reads as 2^53), so two different keys could name one lock.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// The bytes of one key, copied out of the JavaScript value for the duration of one call.
pub struct Key {
    /// Number of bytes used in `inline` (when `heap` is `None`): those bytes are initialized.
    len: usize,
    /// Not zeroed when made: only the key's own bytes are ever written (and read), so a call
    /// does not clear 192 bytes of stack first (about 14 instructions an acquire).
    inline: [MaybeUninit<u8>; INLINE],
    heap: Option<Vec<u8>>,
}

/// Why a value is not a key.
#[derive(Debug)]
pub(crate) enum KeyFail {
    /// Not a key type (or a string with a lone surrogate): a `TypeError`.
    Type(Cow<'static, str>),
    /// A number or bigint outside what a key may be: a `RangeError`.
    Range(Cow<'static, str>),
    /// A Node-API call failed.
    Napi(Error),
}

impl From<Error> for KeyFail {
    fn from(e: Error) -> Self {
        KeyFail::Napi(e)
    }
}

impl KeyFail {
    /// Throws this failure as the JavaScript error it stands for, with the code
    /// `KEYLOCK_INVALID_ARGUMENT` (a Node-API failure: an `Error` with `KEYLOCK_INTERNAL`).
    ///
    /// # Safety
    /// `env` is the current call's environment, with no exception pending.
    pub(crate) unsafe fn throw(&self, env: sys::napi_env) {
        let (code, msg, throw): (&std::ffi::CStr, &str, ThrowFn) = match self {
            KeyFail::Type(m) => (c"KEYLOCK_INVALID_ARGUMENT", m, sys::napi_throw_type_error),
            KeyFail::Range(m) => (c"KEYLOCK_INVALID_ARGUMENT", m, sys::napi_throw_range_error),
            KeyFail::Napi(e) => (c"KEYLOCK_INTERNAL", &e.reason, sys::napi_throw_error),
        };
        let msg = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: both strings are NUL-terminated and live across the call.
        unsafe { throw(env, code.as_ptr(), msg.as_ptr()) };
    }
}

type ThrowFn = unsafe extern "C" fn(
    sys::napi_env,
    *const std::ffi::c_char,
    *const std::ffi::c_char,
) -> sys::napi_status;

fn key_error(e: KeyError) -> KeyFail {
    let msg = Cow::Borrowed(e.message());
    match e {
        KeyError::IntegerOutOfRange => KeyFail::Range(msg),
        _ => KeyFail::Type(msg),
    }
}

fn bad_type(what: &str) -> KeyFail {
    KeyFail::Type(Cow::Owned(format!(
        "a key must be a string, a number, a bigint, a Buffer or a Uint8Array, not {what}"
    )))
}

/// What `value` is, for a message: "a boolean", "null", "an object", ...
///
/// # Safety
/// `env` is the current environment and `value` a value of it.
unsafe fn describe(env: sys::napi_env, value: sys::napi_value) -> &'static str {
    let mut kind = sys::ValueType::napi_undefined;
    // SAFETY: a plain query on a live value.
    unsafe { sys::napi_typeof(env, value, &mut kind) };
    match ValueType::from(kind) {
        ValueType::Undefined => "undefined",
        ValueType::Null => "null",
        ValueType::Boolean => "a boolean",
        ValueType::Symbol => "a symbol",
        ValueType::Function => "a function",
        ValueType::Object => {
            let mut is_array = false;
            // SAFETY: as above.
            unsafe { sys::napi_is_array(env, value, &mut is_array) };
            if is_array { "an array" } else { "an object" }
        }
        _ => "a value of another type",
    }
}

/// `Ok` for `napi_ok`, else the error of a failed Node-API call made while doing `what`. Inline,
/// with the error made out of line: as one function it was a call with a six-register frame on
/// every key read (about 25 instructions an acquire).
#[inline(always)]
fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi_failed(status, what))
    }
}

#[cold]
#[inline(never)]
fn napi_failed(status: sys::napi_status, what: &str) -> Error {
    Error::new(
        Status::from(status),
        format!("napi call failed while {what}"),
    )
}

impl Key {
    /// An empty key, to [`read`](Key::read) into. Keys are read in place: a `Key` is a few
    /// hundred bytes, and moving one through each `Result` on the way out costs more than
    /// encoding it.
    #[inline]
    pub(crate) fn new() -> Self {
        Key {
            len: 0,
            inline: [const { MaybeUninit::uninit() }; INLINE],
            heap: None,
        }
    }

    #[inline]
    fn set_bytes(&mut self, bytes: &[u8]) {
        if bytes.len() <= INLINE {
            // SAFETY: `inline` has room for `bytes` (checked), and the two do not overlap.
            unsafe {
                ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.inline.as_mut_ptr().cast(),
                    bytes.len(),
                );
            }
            self.len = bytes.len();
            self.heap = None;
        } else {
            self.heap = Some(bytes.to_vec());
        }
    }

    /// The key's bytes.
    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match &self.heap {
            Some(v) => v,
            // SAFETY: the first `len` bytes of `inline` are initialized (see `len`).
            None => unsafe { std::slice::from_raw_parts(self.inline.as_ptr().cast(), self.len) },
        }
    }

    /// Reads the key that `value` stands for (see the module documentation) into `self`.
    ///
    /// # Safety
    /// `env` is the current environment and `value` a value of it.
    #[inline]
    pub(crate) unsafe fn read(
        &mut self,
        env: sys::napi_env,
        value: sys::napi_value,
    ) -> std::result::Result<(), KeyFail> {
        // Strings first, without asking the type: Node-API reports `string_expected` for
        // anything else, and this saves a call on the common path.
        // SAFETY: `value` is a value of `env` (caller).
        if unsafe { self.read_string(env, value)? } {
            return Ok(());
        }
        let mut kind = sys::ValueType::napi_undefined;
        // SAFETY: a plain query on a live value.
        let status = unsafe { sys::napi_typeof(env, value, &mut kind) };
        check(status, "inspecting a key")?;
        match ValueType::from(kind) {
            // SAFETY: `value` is a live number of `env`.
            ValueType::Number => unsafe { self.read_number(env, value) },
            // SAFETY: `value` is a live bigint of `env`.
            ValueType::BigInt => unsafe { self.read_bigint(env, value) },
            // SAFETY: `value` is a live object of `env`.
            ValueType::Object => unsafe { self.read_object(env, value) },
            // SAFETY: as above.
            _ => Err(bad_type(unsafe { describe(env, value) })),
        }
    }

    /// Reads a string's key; `false` when `value` is not a string.
    ///
    /// # Safety
    /// `env` is the current environment and `value` a value of it.
    #[inline]
    unsafe fn read_string(
        &mut self,
        env: sys::napi_env,
        value: sys::napi_value,
    ) -> std::result::Result<bool, KeyFail> {
        // Not zeroed first: Node-API writes the units it reports, and only those are read.
        let mut units = [const { MaybeUninit::<u16>::uninit() }; UNITS + 1];
        let mut copied = 0usize;
        // SAFETY: the buffer holds UNITS + 1 code units; Node-API writes at most UNITS of them
        // and a NUL.
        let status = unsafe {
            sys::napi_get_value_string_utf16(
                env,
                value,
                units.as_mut_ptr().cast(),
                units.len(),
                &mut copied,
            )
        };
        if status == sys::Status::napi_string_expected {
            return Ok(false);
        }
        check(status, "reading a string key")?;
        if copied == UNITS {
            // Maybe cut short: ask for the whole length.
            let mut full = 0usize;
            // SAFETY: a null buffer asks only for the length in code units.
            let status = unsafe {
                sys::napi_get_value_string_utf16(env, value, ptr::null_mut(), 0, &mut full)
            };
            check(status, "measuring a string key")?;
            if full > UNITS {
                // SAFETY: as above, for a string known to be longer than the stack buffer.
                unsafe { self.read_long_string(env, value, full)? };
                return Ok(true);
            }
        }
        // SAFETY: Node-API wrote `copied` code units (at most `UNITS`, the buffer's length less
        // the NUL; `min` keeps the read inside the buffer all the same) to the start of `units`.
        let units =
            unsafe { std::slice::from_raw_parts(units.as_ptr().cast::<u16>(), copied.min(UNITS)) };
        self.len = keys::encode_utf16_uninit(units, &mut self.inline).map_err(key_error)?;
        self.heap = None;
        Ok(true)
    }

    /// A string of `len` code units, too long for the stack.
    ///
    /// # Safety
    /// `env` is the current environment and `value` a string of it.
    #[cold]
    unsafe fn read_long_string(
        &mut self,
        env: sys::napi_env,
        value: sys::napi_value,
        len: usize,
    ) -> std::result::Result<(), KeyFail> {
        let mut units = vec![0u16; len + 1];
        let mut copied = 0usize;
        // SAFETY: `units` has room for the `len` code units and the NUL that Node-API appends.
        let status = unsafe {
            sys::napi_get_value_string_utf16(
                env,
                value,
                units.as_mut_ptr(),
                units.len(),
                &mut copied,
            )
        };
        check(status, "reading a string key")?;
        self.heap = Some(keys::encode_utf16(&units[..copied]).map_err(key_error)?);
        Ok(())
    }

    /// A number's key: it must be a safe integer.
    ///
    /// # Safety
    /// `env` is the current environment and `value` a number of it.
    unsafe fn read_number(
        &mut self,
        env: sys::napi_env,
        value: sys::napi_value,
    ) -> std::result::Result<(), KeyFail> {
        let mut v = 0f64;
        // SAFETY: a plain read of a number.
        let status = unsafe { sys::napi_get_value_double(env, value, &mut v) };
        check(status, "reading a number key")?;
        if !(v.fract() == 0.0 && v.abs() <= MAX_SAFE_INTEGER) {
            return Err(KeyFail::Range(Cow::Owned(format!(
                "a number key must be a safe integer (Number.isSafeInteger); use a bigint for \
                 larger integers. Received {}",
                js_number(v)
            ))));
        }
        // `v as i64` is exact here; -0 becomes 0, the same key as 0.
        self.set_bytes(&keys::encode_i64(v as i64));
        Ok(())
    }

    /// A bigint's key: it must fit in an `i64`.
    ///
    /// # Safety
    /// `env` is the current environment and `value` a bigint of it.
    unsafe fn read_bigint(
        &mut self,
        env: sys::napi_env,
        value: sys::napi_value,
    ) -> std::result::Result<(), KeyFail> {
        let mut v = 0i64;
        let mut lossless = false;
        // SAFETY: a plain read of a bigint.
        let status = unsafe { sys::napi_get_value_bigint_int64(env, value, &mut v, &mut lossless) };
        check(status, "reading a bigint key")?;
        if !lossless {
            return Err(key_error(KeyError::IntegerOutOfRange));
        }
        self.set_bytes(&keys::encode_i64(v));
        Ok(())
    }

    /// The bytes a `Uint8Array` views.
    ///
    /// # Safety
    /// `env` is the current environment and `value` an object of it.
    unsafe fn read_object(
        &mut self,
        env: sys::napi_env,
        value: sys::napi_value,
    ) -> std::result::Result<(), KeyFail> {
        let mut is_typed = false;
        // SAFETY: plain query on a live value.
        let status = unsafe { sys::napi_is_typedarray(env, value, &mut is_typed) };
        check(status, "inspecting a key")?;
        if !is_typed {
            // SAFETY: as above.
            return Err(bad_type(unsafe { describe(env, value) }));
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
            return Err(bad_type("another kind of typed array"));
        }
        let bytes: &[u8] = if len == 0 || data.is_null() {
            &[]
        } else {
            // SAFETY: Node-API gives the view's data pointer (already offset) and its length in
            // elements, one byte each; the memory stays valid during this synchronous call.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }
        };
        self.set_bytes(bytes);
        Ok(())
    }

    /// The key that argument `value` of a napi-rs export stands for; on failure the JavaScript
    /// error is thrown already, and the `Err` tells napi-rs so.
    pub(crate) fn from_arg(env: &Env, value: &napi::bindgen_prelude::Unknown<'_>) -> Result<Self> {
        let mut key = Key::new();
        // SAFETY: `value` is an argument of the current call of `env`.
        match unsafe { key.read(env.raw(), value.raw()) } {
            Ok(()) => Ok(key),
            Err(fail) => {
                // SAFETY: the current call's environment; no exception is pending yet.
                unsafe { fail.throw(env.raw()) };
                Err(Error::new(Status::PendingException, ""))
            }
        }
    }
}

/// A Web Locks name: the string's UTF-16 code units (what `query()` gives back) and its key
/// bytes (WTF-8).
#[derive(Debug)]
pub(crate) struct Name {
    pub(crate) units: Vec<u16>,
    pub(crate) bytes: Vec<u8>,
}

impl Name {
    /// The name `value` (a string; the JavaScript layer converts other values as WebIDL's
    /// DOMString does).
    ///
    /// # Safety
    /// `env` is the current environment and `value` a value of it.
    pub(crate) unsafe fn from_value(
        env: sys::napi_env,
        value: sys::napi_value,
    ) -> std::result::Result<Self, KeyFail> {
        let mut len = 0usize;
        // SAFETY: a null buffer asks only for the length in code units.
        let status =
            unsafe { sys::napi_get_value_string_utf16(env, value, ptr::null_mut(), 0, &mut len) };
        if status == sys::Status::napi_string_expected {
            return Err(KeyFail::Type(Cow::Borrowed("a lock name must be a string")));
        }
        check(status, "measuring a lock name")?;
        let mut units = vec![0u16; len + 1];
        let mut copied = 0usize;
        // SAFETY: `units` has room for the `len` code units and the NUL that Node-API appends.
        let status = unsafe {
            sys::napi_get_value_string_utf16(
                env,
                value,
                units.as_mut_ptr(),
                units.len(),
                &mut copied,
            )
        };
        check(status, "reading a lock name")?;
        units.truncate(copied);
        let bytes = keys::encode_name_utf16(&units);
        Ok(Name { units, bytes })
    }
}

/// `v` as JavaScript prints it, for the common cases of an error message.
fn js_number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else if v.abs() >= 1e21 {
        format!("{v:e}").replace('e', "e+")
    } else {
        format!("{v}")
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Key").field(&self.as_bytes()).finish()
    }
}

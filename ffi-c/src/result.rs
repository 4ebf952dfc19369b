//! `keylock_result`: the one result type of the C API, and the strings that describe it.
//!
//! The numbers are part of the ABI. A number is never reused: when a code is retired, its line
//! stays here as a comment so that nobody hands the number out again.

use std::ffi::c_char;

/// The result of every keylock call that can fail: `KEYLOCK_OK` (0) or one of the
/// `KEYLOCK_*` codes below. A fixed-width integer whose numbers never change and are never
/// reused, so a program may store them or switch on them. `keylock_result_str` describes any
/// value, including ones this version does not know.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
pub type keylock_result = u32;

/// Success.
pub const KEYLOCK_OK: keylock_result = 0;
/// A `_try_` call found the lock held (by another thread, or by the caller itself).
pub const KEYLOCK_WOULD_BLOCK: keylock_result = 1;
/// A `_timeout` call waited the whole timeout without getting the lock.
pub const KEYLOCK_TIMEOUT: keylock_result = 2;
/// An unlock of a key (or lock) that is not locked.
pub const KEYLOCK_NOT_LOCKED: keylock_result = 3;
/// A required pointer argument was NULL: a handle, an output pointer, a `_many` array, or a key
/// pointer whose length is not 0.
pub const KEYLOCK_NULL_ARGUMENT: keylock_result = 4;
/// An argument was out of range: `n == 0` in a `_many` call, or a length over `PTRDIFF_MAX`.
pub const KEYLOCK_INVALID_ARGUMENT: keylock_result = 5;
/// The library hit an internal error (a Rust panic), caught before it reached the caller. The
/// call did nothing that the caller must undo; please report it as a bug.
pub const KEYLOCK_PANIC: keylock_result = 6;

// Next free number: 7. Retired numbers (never to be reused): none yet.

/// Static descriptions, indexed by code. Each ends with NUL so it can go to C as is.
const DESCRIPTIONS: [&str; 7] = [
    "KEYLOCK_OK: success\0",
    "KEYLOCK_WOULD_BLOCK: the lock is held\0",
    "KEYLOCK_TIMEOUT: the timeout passed before the lock was acquired\0",
    "KEYLOCK_NOT_LOCKED: unlock of something that is not locked\0",
    "KEYLOCK_NULL_ARGUMENT: a required pointer argument was NULL\0",
    "KEYLOCK_INVALID_ARGUMENT: an argument was out of range\0",
    "KEYLOCK_PANIC: internal error in keylock (a caught Rust panic)\0",
];

const UNKNOWN: &str = "unknown keylock_result\0";

/// Describes `result` in English, starting with its macro name (e.g.
/// `"KEYLOCK_TIMEOUT: the timeout passed ..."`). Any value is accepted: one this version does
/// not know gets `"unknown keylock_result"`.
///
/// Returns a NUL-terminated static string that lives as long as the library is loaded; the
/// caller must not free or modify it. Never returns NULL.
#[unsafe(no_mangle)]
pub extern "C" fn keylock_result_str(result: keylock_result) -> *const c_char {
    // No panic is possible here: an index check and a constant.
    let text = usize::try_from(result)
        .ok()
        .and_then(|i| DESCRIPTIONS.get(i))
        .copied()
        .unwrap_or(UNKNOWN);
    text.as_ptr().cast()
}

/// The version of the library that is loaded, as `"MAJOR.MINOR.PATCH"` (for example `"0.1.0"`).
/// Compare it with the `KEYLOCK_VERSION` macro to check that the header and the library agree.
///
/// Returns a NUL-terminated static string; the caller must not free it. Never returns NULL.
#[unsafe(no_mangle)]
pub extern "C" fn keylock_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn text(code: keylock_result) -> &'static str {
        // SAFETY: keylock_result_str always returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(keylock_result_str(code)) }
            .to_str()
            .unwrap()
    }

    #[test]
    fn every_code_names_itself() {
        let codes = [
            (KEYLOCK_OK, "KEYLOCK_OK"),
            (KEYLOCK_WOULD_BLOCK, "KEYLOCK_WOULD_BLOCK"),
            (KEYLOCK_TIMEOUT, "KEYLOCK_TIMEOUT"),
            (KEYLOCK_NOT_LOCKED, "KEYLOCK_NOT_LOCKED"),
            (KEYLOCK_NULL_ARGUMENT, "KEYLOCK_NULL_ARGUMENT"),
            (KEYLOCK_INVALID_ARGUMENT, "KEYLOCK_INVALID_ARGUMENT"),
            (KEYLOCK_PANIC, "KEYLOCK_PANIC"),
        ];
        assert_eq!(codes.len(), DESCRIPTIONS.len());
        for (code, name) in codes {
            assert!(text(code).starts_with(&format!("{name}: ")), "{code}");
        }
        assert_eq!(text(7), "unknown keylock_result");
        assert_eq!(text(u32::MAX), "unknown keylock_result");
    }

    #[test]
    fn descriptions_are_single_c_strings() {
        for d in DESCRIPTIONS.iter().chain([&UNKNOWN]) {
            assert_eq!(d.find('\0'), Some(d.len() - 1), "{d:?}");
        }
    }

    #[test]
    fn version_is_the_crate_version() {
        // SAFETY: keylock_version returns a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(keylock_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}

//! `keylock_result`: the one result type of the C API, the strings that describe it, and
//! [`Fail`], the code a failed call returns (what core errors turn into).
//!
//! The numbers are part of the ABI and come from keylock-core's [`keylock_core::Status`] table,
//! which every front end shares: the `KEYLOCK_*` constants and the strings of
//! `keylock_result_str` are generated from it into `contract.rs` by `make header`. A number is
//! never reused: a retired code stays in that table as a comment.

use std::ffi::{CStr, c_char};

use crate::contract::RESULT_STRINGS;
// The type and the KEYLOCK_* codes themselves are in `contract.rs`, generated from
// keylock-core's `Status` table (`make header`), so that no number is written down twice.
pub use crate::contract::keylock_result;

/// A failed call: the code it returns to C. `?` turns core errors into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fail(pub(crate) keylock_result);

impl From<keylock_core::Error> for Fail {
    /// The error's status number, from the core's one table of statuses.
    #[inline]
    fn from(e: keylock_core::Error) -> Self {
        Fail(e.status().code())
    }
}

impl From<keylock_core::keys::KeyError> for Fail {
    #[inline]
    fn from(e: keylock_core::keys::KeyError) -> Self {
        Fail::from(keylock_core::Error::from(e))
    }
}

/// What `keylock_result_str` returns for a number this version does not know.
const UNKNOWN: &CStr = c"unknown keylock_result";

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
        .and_then(|i| RESULT_STRINGS.get(i))
        .copied()
        .unwrap_or(UNKNOWN);
    text.as_ptr()
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
    use crate::contract::*;
    use keylock_core::Status;

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
        for (code, name) in codes {
            assert!(text(code).starts_with(&format!("{name}: ")), "{code}");
        }
        for status in Status::ALL {
            assert_eq!(text(status.code()), status.to_string());
        }
        let next = Status::ALL.len() as keylock_result;
        assert_eq!(text(next), "unknown keylock_result");
        assert_eq!(text(u32::MAX), "unknown keylock_result");
    }

    #[test]
    fn version_is_the_crate_version() {
        // SAFETY: keylock_version returns a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(keylock_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}

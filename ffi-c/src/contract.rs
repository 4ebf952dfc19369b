//! The numbers the C ABI shares with every keylock front end, generated from keylock-core
//! (its `Status` table and `keys` rules) by `make header`, which also regenerates
//! include/keylock.h from them. Do not edit: add a status in core/src/status.rs, then run
//! `make header`. (`contract_rs` in ffi-c/src/tests.rs writes this file, and a test fails
//! while it differs from what the core gives.)

use std::ffi::CStr;

use crate::result::keylock_result;

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

/// An argument was out of range or malformed: `n == 0` in a `_many` call, a length over
/// `PTRDIFF_MAX`, or text that is not a key (`keylock_key_from_utf16`).
pub const KEYLOCK_INVALID_ARGUMENT: keylock_result = 5;

/// The library hit an internal error (a Rust panic), caught before it reached the caller. The
/// call did nothing that the caller must undo; please report it as a bug.
pub const KEYLOCK_PANIC: keylock_result = 6;

/// The length of an integer key (`keylock_key_from_i64`), in bytes.
pub const KEYLOCK_INT_KEY_LEN: usize = 8;

/// What `keylock_result_str` returns for each code, by number.
pub(crate) const RESULT_STRINGS: [&CStr; 7] = [
    c"KEYLOCK_OK: success",
    c"KEYLOCK_WOULD_BLOCK: the lock is held",
    c"KEYLOCK_TIMEOUT: the timeout passed before the lock was acquired",
    c"KEYLOCK_NOT_LOCKED: unlock of something that is not locked",
    c"KEYLOCK_NULL_ARGUMENT: a required pointer argument was NULL",
    c"KEYLOCK_INVALID_ARGUMENT: an argument was out of range or malformed",
    c"KEYLOCK_PANIC: internal error in keylock (a caught Rust panic)",
];

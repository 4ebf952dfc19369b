//! The numbers the C ABI shares with every keylock front end, generated from keylock-core
//! (its `Status` table and `keys` rules) by `make header`, which also regenerates
//! include/keylock.h from them. Do not edit: add a status in core/src/status.rs, then run
//! `make header`. (`contract_rs` in ffi-c/src/tests.rs writes this file, and a test fails
//! while it differs from what the core gives.)

use std::ffi::CStr;

/// The result of every keylock call that can fail: `KEYLOCK_OK` (0) or one of the
/// `KEYLOCK_*` codes below. A fixed-width integer whose numbers never change and are never
/// reused, so a program may store them or switch on them. `keylock_result_str` describes any
/// value, including ones this version does not know.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
pub type keylock_result = u32;

/// How an acquisition holds its key: `KEYLOCK_EXCLUSIVE` (one holder) or `KEYLOCK_SHARED` (any
/// number of shared holders, and no exclusive one). A fixed-width integer, like
/// `keylock_result`; any other value is refused with `KEYLOCK_INVALID_ARGUMENT`.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
pub type keylock_mode = u32;

/// Success.
pub const KEYLOCK_OK: keylock_result = 0;

/// A `_try_` call (or a timeout of 0) found the lock held, by another holder or by the
/// caller itself.
pub const KEYLOCK_WOULD_BLOCK: keylock_result = 1;

/// A `_timeout` call (or `timeout_ns`) waited the whole timeout without the lock.
pub const KEYLOCK_TIMEOUT: keylock_result = 2;

/// A release (or extend) of an empty acquisition record: never filled, or the output of a
/// failed acquire.
pub const KEYLOCK_NOT_LOCKED: keylock_result = 3;

/// A required pointer argument was NULL: a handle, an output pointer, a `_many` array, or a key
/// pointer whose length is not 0.
pub const KEYLOCK_NULL_ARGUMENT: keylock_result = 4;

/// An argument was out of range or malformed: `n == 0` in a `_many` call, a length over
/// `PTRDIFF_MAX`, an unknown mode or lock name, an acquisition record of another lock
/// object, text that is not a key (`keylock_key_from_utf16`), or a `_metrics` call on a lock
/// object opened without metrics.
pub const KEYLOCK_INVALID_ARGUMENT: keylock_result = 5;

/// The library hit an internal error (a Rust panic), caught before it reached the caller. The
/// call did nothing that the caller must undo; please report it as a bug.
pub const KEYLOCK_PANIC: keylock_result = 6;

/// A release, extend or check of an acquisition that is no longer the lock's current one
/// (force-unlocked), or a second release of the same record. Nothing changed.
pub const KEYLOCK_NOT_OWNER: keylock_result = 7;

/// A release or extend of an acquisition whose lease ran out: the lock freed itself, and
/// may have had other holders since. Nothing changed.
pub const KEYLOCK_LEASE_EXPIRED: keylock_result = 8;

/// A reentrant acquire by an owner that already holds the key the most times allowed
/// (65536).
pub const KEYLOCK_REENTRANCY_LIMIT: keylock_result = 9;

/// The lock table is full.
pub const KEYLOCK_CAPACITY_EXCEEDED: keylock_result = 10;

/// The lock object does not match this build.
pub const KEYLOCK_INCOMPATIBLE: keylock_result = 11;

/// Permission denied.
pub const KEYLOCK_PERMISSION_DENIED: keylock_result = 12;

/// The lock object could not be reached.
pub const KEYLOCK_UNAVAILABLE: keylock_result = 13;

/// `keylock_mode`: one holder at a time.
pub const KEYLOCK_EXCLUSIVE: keylock_mode = 0;

/// `keylock_mode`: any number of holders together, and no exclusive one.
pub const KEYLOCK_SHARED: keylock_mode = 1;

/// The length of an integer key (`keylock_key_from_i64`), in bytes.
pub const KEYLOCK_INT_KEY_LEN: usize = 8;

/// What `keylock_result_str` returns for each code, by number.
pub(crate) const RESULT_STRINGS: [&CStr; 14] = [
    c"KEYLOCK_OK: success",
    c"KEYLOCK_WOULD_BLOCK: the lock is held",
    c"KEYLOCK_TIMEOUT: the timeout passed before the lock was acquired",
    c"KEYLOCK_NOT_LOCKED: unlock of something that is not locked",
    c"KEYLOCK_NULL_ARGUMENT: a required pointer argument was NULL",
    c"KEYLOCK_INVALID_ARGUMENT: an argument was out of range or malformed",
    c"KEYLOCK_PANIC: internal error in keylock (a caught Rust panic)",
    c"KEYLOCK_NOT_OWNER: the acquisition is not the lock's current one",
    c"KEYLOCK_LEASE_EXPIRED: the acquisition's lease ran out",
    c"KEYLOCK_REENTRANCY_LIMIT: reentrant hold count limit reached",
    c"KEYLOCK_CAPACITY_EXCEEDED: the lock table is full",
    c"KEYLOCK_INCOMPATIBLE: the lock object does not match this build",
    c"KEYLOCK_PERMISSION_DENIED: permission denied",
    c"KEYLOCK_UNAVAILABLE: the lock object could not be reached",
];

//! The C ABI of keylock: `libkeylock.so` / `libkeylock.a`, declared by `include/keylock.h`
//! (generated from this crate by cbindgen; `make header`).
//!
//! One module per handle type ([`pool`], [`striped`], [`rwlock`]), plus [`keys`], the key
//! encoders every front end shares; [`boundary`] holds what every export shares: panic catching,
//! NULL checks, and the translation of keys, timeouts and errors. [`contract`] is generated from
//! keylock-core (`make header`): the result codes and key sizes, so that no number is copied.
//! The locking itself is keylock-core's: each export converts its arguments, calls the core, and
//! converts the answer. Explicit lock/unlock pairs map to the core's guards with `leak()` on lock
//! and the core's explicit `unlock` on unlock.

// Every export catches panics and turns them into KEYLOCK_PANIC; with panic = "abort" a panic
// would kill the C program instead, so refuse to build that way.
#[cfg(panic = "abort")]
compile_error!("keylock-ffi must be built with panic = \"unwind\" (see the workspace profiles)");

// The order of the modules is the order of the header (blank lines keep rustfmt from sorting
// them): results first, then the key encoders, then each handle type.
pub mod result;

pub mod contract;

pub mod keys;

pub mod pool;
pub mod striped;

pub mod rwlock;

mod boundary;

#[cfg(test)]
mod tests;

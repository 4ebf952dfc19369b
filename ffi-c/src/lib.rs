//! The C ABI of keylock: `libkeylock.so` / `libkeylock.a`, declared by `include/keylock.h`
//! (generated from this crate by cbindgen; `make header`).
//!
//! One module per handle type ([`pool`], [`striped`], [`rwlock`]); [`boundary`] holds what every
//! export shares: panic catching, NULL checks, and the translation of keys, timeouts and errors.
//! The locking itself is keylock-core's: each export converts its arguments, calls the core, and
//! converts the answer. Explicit lock/unlock pairs map to the core's guards with `leak()` on lock
//! and the core's explicit `unlock` on unlock.

// The order of the modules is the order of the header: results first, then each handle type.
mod boundary;
pub mod pool;
pub mod result;
pub mod rwlock;
pub mod striped;

#[cfg(test)]
mod tests;

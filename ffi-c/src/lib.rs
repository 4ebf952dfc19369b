//! The C ABI of keylock: `libkeylock.so` / `libkeylock.a`, declared by `include/keylock.h`
//! (generated from this crate by cbindgen; `make header`).
//!
//! One module per handle type ([`pool`], [`striped`], [`semaphore`], [`rwlock`]), plus
//! [`keys`], the key encoders every front end shares, [`options`] (what an acquire and an open
//! take) and [`acquisition`] (the record of one hold, in caller memory), [`stats`] (what
//! `_stats` reports), [`metrics`] (what `_metrics` reports, for objects opened with metrics).
//! [`keyed`] holds the bodies that the pool, striped and semaphore exports share, on a lock
//! object from `keylock_core::open_with` (any scope); [`boundary`] what every export shares:
//! panic catching, NULL checks, and the translation of keys. [`contract`] is generated from
//! keylock-core (`make header`): the result codes, modes and key sizes and their integer types,
//! so that no number is copied; it is the bottom layer, with [`result`] (describing results,
//! and turning core errors into them) on it, then [`options`], then [`boundary`].
//!
//! The locking itself is keylock-core's: each export converts its arguments, calls the core,
//! and converts the answer. Every acquire writes the core's record of the hold into the
//! caller's `keylock_acquisition` (the core's guard for a plain hold of an in-process object, an
//! `Acquisition` otherwise, the RwLock's guard), and every release takes it back out, so that a
//! release can only ever end the acquisition it was given.

// Every export catches panics and turns them into KEYLOCK_PANIC; with panic = "abort" a panic
// would kill the C program instead, so refuse to build that way.
#[cfg(panic = "abort")]
compile_error!("keylock-ffi must be built with panic = \"unwind\" (see the workspace profiles)");

// The order of the modules is the order of the header (blank lines keep rustfmt from sorting
// them): results first, then the key encoders, then each handle type.
pub mod result;

pub mod contract;

pub mod keys;

pub mod options;

pub mod stats;

pub mod metrics;

pub mod acquisition;

pub mod pool;
pub mod striped;

pub mod semaphore;

pub mod rwlock;

pub mod lost;

mod boundary;
mod keyed;

#[cfg(test)]
mod tests;

//! `keylock._keylock`: the native half of the `keylock` Python package.
//!
//! This crate decides nothing about locking: every acquire, release and wait is a call into
//! `keylock-core`. What it does is translate:
//! - keys ([`key`]): `str`, `bytes`, `bytearray`, `memoryview` and `int` into byte strings, by
//!   the rules every front end shares (`keylock_core::keys`);
//! - lock handles: what each locks ([`lock`]) and their `threading.Lock` protocol ([`handle`]);
//! - waiting styles ([`wait`]): a blocking acquire waits in the core with the GIL released and
//!   checks for signals between slices; an asyncio acquire polls the core's future from the event
//!   loop with a waker that posts back to the loop;
//! - errors ([`errors`]): the core's errors, by their shared `Status`, into a small hierarchy
//!   rooted in the standard exceptions.
//!
//! The Python package (`python/keylock/__init__.py`) re-exports everything defined here.

mod args;
mod errors;
mod handle;
mod key;
mod lock;
mod pool;
mod rwlock;
mod striped;
mod wait;

use pyo3::prelude::*;

/// Which wheel this build is: the oldest CPython it runs on, or a version-specific build.
#[cfg(feature = "abi3-py39")]
const BUILD: &str = "abi3, CPython >= 3.9";
#[cfg(all(feature = "abi3-py310", not(feature = "abi3-py39")))]
const BUILD: &str = "abi3, CPython >= 3.10";
#[cfg(not(any(feature = "abi3-py39", feature = "abi3-py310")))]
const BUILD: &str = "version-specific";

/// The native module. Every class is immutable (`frozen`) and shares only thread-safe core
/// objects, so the module runs without the GIL on free-threaded Python.
#[pymodule(gil_used = false)]
fn _keylock(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("_BUILD", BUILD)?;
    m.add("LockTimeout", py.get_type::<errors::LockTimeout>())?;
    m.add("NotLockedError", py.get_type::<errors::NotLockedError>())?;
    m.add_class::<pool::KeyPool>()?;
    m.add_class::<striped::StripedLock>()?;
    m.add_class::<rwlock::RwLock>()?;
    m.add_class::<lock::LockHandle>()?;
    m.add_class::<handle::KeyLock>()?;
    m.add_class::<handle::ManyLock>()?;
    m.add_class::<handle::ReadLock>()?;
    m.add_class::<handle::WriteLock>()?;
    m.add_class::<wait::Acquire>()?;
    m.add_class::<wait::Ready>()?;
    m.add_function(wrap_pyfunction!(wait::_resolve, m)?)?;
    m.add_function(wrap_pyfunction!(key::key_bytes, m)?)?;
    Ok(())
}

//! `keylock._keylock`: the native half of the `keylock` Python package.
//!
//! This crate decides nothing about locking: every acquire, release and wait is a call into
//! `keylock-core`, through its `KeyedLock` trait for the keyed locks (so every scope the core
//! opens by name works here unchanged). What it does is translate:
//! - keys ([`key`]): `str`, `bytes`, `bytearray`, `memoryview` and `int` into byte strings, by
//!   the rules every front end shares (`keylock_core::keys`);
//! - lock objects ([`locks`], [`rwlock`], the keyed semaphore [`semaphore`]) and handles: what a handle locks and the acquisitions
//!   it holds ([`lock`]), and their `threading.Lock` / `threading.RLock` protocol ([`handle`]);
//!   owners of reentrant locks are threads and asyncio tasks ([`owner`]); a lock lost behind
//!   its holder's back is told by flag, blocking wait or asyncio future ([`lost`]);
//! - metrics ([`metrics`]): what a lock object opened with metrics counted, as the core
//!   counts it, in seconds;
//! - waiting styles ([`wait`]): a blocking acquire waits in the core with the GIL released and
//!   checks for signals between slices; an asyncio acquire polls the core's future from the event
//!   loop with a waker that resolves an asyncio future;
//! - errors ([`errors`]): the core's errors, by their shared `Status`, into a small hierarchy
//!   rooted in the standard exceptions.
//!
//! The Python package (`python/keylock/__init__.py`) re-exports everything defined here.

mod args;
#[cfg(not(Py_GIL_DISABLED))]
mod bound;
mod direct;
mod errors;
mod gil;
mod handle;
mod handoff;
mod key;
mod lock;
mod locks;
mod lost;
mod metrics;
mod owner;
mod ready;
mod rwlock;
mod semaphore;
mod spec;
mod stall;
mod vectorcall;
mod wait;

use pyo3::prelude::*;

/// The native module. Every class is immutable (`frozen`) or guards its state with a mutex, and
/// shares only thread-safe core objects, so the module runs without the GIL on free-threaded
/// Python.
#[pymodule(gil_used = false)]
fn _keylock(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("_BUILD", "abi3, CPython >= 3.10")?;
    errors::register(m)?;
    m.add_class::<lock::Keyed>()?;
    m.add_class::<locks::KeyPool>()?;
    m.add_class::<locks::StripedLock>()?;
    m.add_class::<locks::LockInfo>()?;
    m.add_class::<metrics::MetricsSnapshot>()?;
    m.add_class::<metrics::HistogramSnapshot>()?;
    m.add_class::<rwlock::RwLock>()?;
    m.add_class::<semaphore::Semaphore>()?;
    m.add_class::<lock::LockHandle>()?;
    handle::register_handles(m)?;
    vectorcall::install(m)?;
    #[cfg(not(Py_GIL_DISABLED))]
    bound::install(
        &m.py().get_type::<lock::LockHandle>(),
        bound::Hooks {
            slots: lock::LockHandle::slots_of,
            common_type: direct::public::<handle::KeyLock>(m.py())?.as_type_ptr(),
            enter: vectorcall::enter,
            exit: vectorcall::exit,
            aenter: vectorcall::aenter,
            aexit: vectorcall::aexit,
        },
    )?;
    m.add_class::<wait::Acquire>()?;
    ready::register(m)?;
    handoff::register(m)?;
    m.add_function(wrap_pyfunction!(wait::_resolve, m)?)?;
    m.add_function(wrap_pyfunction!(stall::_set_waiter_stall, m)?)?;
    m.add_function(wrap_pyfunction!(stall::_stalled_waiters, m)?)?;
    m.add_function(wrap_pyfunction!(handle::_direct_handles, m)?)?;
    m.add_function(wrap_pyfunction!(key::key_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(locks::unlink, m)?)?;
    Ok(())
}

//! The synchronisation primitives the algorithms are written against.
//!
//! Under `--cfg keylock_loom` every atomic, mutex and thread operation comes from loom, so the same
//! code is model-checked (the crossbeam approach). The algorithms reach them only through this
//! module.
//!
//! A few process-wide values stay outside the model on purpose, in real builds only: the core
//! count that sizes adder tables, and the counter that gives each thread its first adder probe.
//! Loom's atomics cannot live in statics, and no interleaving of these values matters (a race
//! computes the same core count twice, or gives two threads the same first probe). They use
//! std's atomics through [`unmodelled`], and the probe itself is a std thread-local. Other places
//! name std directly, each for a reason of its own: `wait/mod.rs`'s hand-off switch for the loom
//! models (a static); the `shm` scope, whose atomics live in memory shared with other processes
//! and follow its region's layout, and the `redis` scope and `lost.rs`, which talk to a server
//! and a runtime that loom does not model. None of those is model-checked; the shared-memory
//! table is covered by its TSan and multi-process tests instead.

#[cfg(keylock_loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(not(keylock_loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize};

pub(crate) use std::sync::atomic::Ordering;

/// std's atomics and core count for process-wide statics that loom does not model (see the
/// module documentation). Only for values whose races are harmless by construction.
#[cfg(not(keylock_loom))]
pub(crate) mod unmodelled {
    pub(crate) use std::sync::atomic::{AtomicU32, AtomicUsize};
    pub(crate) use std::thread::available_parallelism;
}

#[cfg(keylock_loom)]
pub(crate) use loom::thread::{Thread, current as current_thread};
#[cfg(not(keylock_loom))]
pub(crate) use std::thread::{Thread, current as current_thread};

/// Orders a sequentially consistent store or read-modify-write before a later sequentially
/// consistent load of another location (the store-load pattern of Dekker's algorithm).
///
/// In the C++/Rust memory model, `SeqCst` accesses alone already give this: all of them form
/// one total order consistent with program order, and x86-64 compiles them to locked
/// instructions that drain the store buffer. So outside loom this is nothing. loom does not
/// model `SeqCst` loads and stores (it treats them as acquire/release; tokio-rs/loom#180) but
/// does model `SeqCst` fences, so under loom the fence stands in for the guarantee the accesses
/// carry in real builds.
#[inline(always)]
pub(crate) fn store_load_fence() {
    #[cfg(keylock_loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// A mutex for short critical sections (queue and shard bookkeeping).
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(not(keylock_loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(keylock_loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(keylock_loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(keylock_loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    #[cfg(not(keylock_loom))]
    pub(crate) const fn new(value: T) -> Self {
        Self {
            inner: parking_lot::Mutex::new(value),
        }
    }

    #[cfg(keylock_loom)]
    pub(crate) fn new(value: T) -> Self {
        Self {
            inner: loom::sync::Mutex::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(keylock_loom))]
        {
            self.inner.lock()
        }
        #[cfg(keylock_loom)]
        {
            self.inner.lock().unwrap()
        }
    }
}

/// Parks the current thread until it is unparked or `deadline` passes.
///
/// Returns `false` when the deadline has passed. Spurious returns are allowed: callers
/// re-check their condition. Under loom a timed park yields once and reports the deadline
/// as passed, so models explore a timeout racing every other step.
#[inline]
pub(crate) fn park(deadline: Option<std::time::Instant>) -> bool {
    #[cfg(not(keylock_loom))]
    {
        match deadline {
            None => {
                std::thread::park();
                true
            }
            Some(deadline) => {
                let now = std::time::Instant::now();
                if now >= deadline {
                    return false;
                }
                std::thread::park_timeout(deadline - now);
                true
            }
        }
    }
    #[cfg(keylock_loom)]
    {
        match deadline {
            None => {
                loom::thread::park();
                true
            }
            Some(_) => {
                loom::thread::yield_now();
                false
            }
        }
    }
}

/// Spins for a short, bounded number of rounds; `false` once the budget is spent.
///
/// Waiters spin only while it is cheap to do so (nobody is parked yet), then park: a
/// yield loop would burn the CPU that the holder needs on a small machine.
#[derive(Debug, Default)]
pub(crate) struct Spin {
    step: u32,
}

impl Spin {
    const LIMIT: u32 = 6;

    #[inline]
    pub(crate) fn spin(&mut self) -> bool {
        if self.step >= Self::LIMIT {
            return false;
        }
        #[cfg(not(keylock_loom))]
        for _ in 0..(1u32 << self.step) {
            std::hint::spin_loop();
        }
        #[cfg(keylock_loom)]
        loom::thread::yield_now();
        self.step += 1;
        true
    }
}

//! # keylock-core
//!
//! Locks by key: serialize work per user, per account, per row or per file path without one
//! global lock, and without a map of locks that leaks or races.
//!
//! Three primitives, each with blocking, try, timed and async acquisition, guards, explicit
//! unlocks for callers that cannot keep a guard, and deadlock-free multi-key locking:
//!
//! | type | what it gives | memory | pick it when |
//! |---|---|---|---|
//! | [`StripedLock`] | a fixed array of padded mutexes, `hash(key) & mask` | fixed | speed and fixed memory matter more than the odd false conflict between keys |
//! | [`KeyPool`] | exact per-key locks | follows the keys held or awaited | different keys must never block each other |
//! | [`RwLock`] / [`AdderRwLock`] | a reader-writer lock whose readers count on striped counters | O(cores) under contention, [`RawAdderRwLock::SIZE`] bytes otherwise | read-mostly work that must scale across cores |
//!
//! Waiting threads and async tasks stand in one queue per lock ([`wait`]), served in order with
//! eventual fairness. Futures work on any executor; dropping one cancels its wait exactly.
//!
//! What every front end (C, Python, Node) shares lives here too, so that they agree: how keys
//! become bytes ([`keys`]), and the outcome codes with their numbers and names ([`Status`]).
//!
//! ```
//! use keylock_core::{KeyPool, StripedLock, RwLock};
//!
//! let pool: KeyPool<String> = KeyPool::new();
//! let striped = StripedLock::new(1024).unwrap();
//! let rw = RwLock::new();
//!
//! let _r = rw.read();
//! let _both = pool.lock_many(["acct-1", "acct-2"]);
//! let _s = striped.lock(&42u64);
//! ```

#![warn(clippy::undocumented_unsafe_blocks)]

mod acquisition;
mod adder;
mod entry;
mod error;
#[cfg(any(feature = "shm", feature = "redis", feature = "postgres"))]
mod fork;
mod front;
mod glibc_compat;
mod guard;
mod guarded;
mod hash;
pub mod keys;
mod local;
mod lost;
mod many;
pub mod metrics;
mod open;
mod pool;
#[cfg(feature = "postgres")]
pub mod postgres;
mod redact;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod remote;
mod report;
mod rwlock;
pub mod scope;
mod semaphore;
#[cfg(all(feature = "shm", target_os = "linux"))]
pub mod shm;
mod spare;
mod stats;
mod status;
mod striped;
mod sync;
mod unlink;
pub mod wait;

pub use acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner, Wait};
pub use error::{Error, Result};
pub use guard::KeyedGuard;
pub use local::ByteStringKey;
pub use lost::{Lost, LostSignal};
pub use metrics::{HistogramSnapshot, Metered, MetricsSnapshot};
pub use open::{inspect, inspect_semaphore, open, open_with};
pub use redact::redact_scope_name;
pub use report::{KeyReport, LockId, Party};
pub use scope::{KeySpace, KeyedLock, LockKey, OpenOptions};
pub use stats::ScopeStats;
pub use status::Status;
pub use unlink::unlink;

/// The examples of the crate's README, compiled and run as doctests so they cannot go stale.
/// The crate's own README, not the repository's, so that they run in the published crate too;
/// the repository README repeats them (make test-dist checks that the two agree).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
pub use front::{
    AcquireFuture, FindKey, LockFuture, LockGuard, LockTable, Locks, ManyAcquireFuture, ManyGuard,
    ManyLockFuture, PoolAcquireFuture, PoolGuard, PoolLockFuture, PoolManyAcquireFuture,
    PoolManyGuard, PoolManyLockFuture, StripeAcquireFuture, StripeGuard, StripeLockFuture,
    StripesAcquireFuture, StripesGuard, StripesLockFuture, TakeKey,
};
pub use hash::DefaultHashBuilder;
pub use pool::{KeyBuf, KeyBytes, KeyPool, PoolBuilder, PoolRef, PoolStats, PoolTable};
pub use rwlock::{
    AdderRwLock, RawAdderRwLock, ReadFuture, ReadGuard, RwLock, WriteFuture, WriteGuard,
};
pub use semaphore::{KeyedSemaphore, OwnedPermit, Permit, SemaphoreBuilder};
pub use striped::{StripeTable, StripedLock, StripedLockBuilder, StripedStats};

/// Guards and futures are `Send` (and `Sync`), so they can be held across `.await` on a
/// multi-threaded runtime and released on another thread.
#[cfg(test)]
mod send_sync {
    use std::sync::Arc;

    use super::*;

    fn check<T: Send + Sync>() {}

    #[test]
    fn guards_and_futures_are_send_and_sync() {
        check::<StripedLock>();
        check::<KeyPool>();
        check::<RwLock>();
        check::<AdderRwLock<u8>>();
        check::<StripeGuard<&StripedLock>>();
        check::<StripesGuard<Arc<StripedLock>>>();
        check::<StripeLockFuture<Arc<StripedLock>>>();
        check::<StripesLockFuture<&StripedLock>>();
        check::<PoolGuard<&KeyPool>>();
        check::<PoolManyGuard<Arc<KeyPool<String>>>>();
        check::<PoolLockFuture<Arc<KeyPool>>>();
        check::<PoolManyLockFuture<&KeyPool<u64>>>();
        check::<ReadGuard<&RwLock>>();
        check::<WriteGuard<Arc<RwLock>>>();
        check::<ReadFuture<Arc<RwLock>>>();
        check::<WriteFuture<&RwLock>>();
        check::<lock_api::RwLockReadGuard<'static, RawAdderRwLock, u8>>();
    }
}

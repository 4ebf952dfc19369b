//! What `keylock_pool_stats` and `keylock_striped_stats` report: `keylock_stats`, a plain
//! struct in caller memory, and its translation from keylock-core's `ScopeStats`, field by
//! field. A figure the scope cannot tell is `KEYLOCK_STATS_UNKNOWN`.

use keylock_core::ScopeStats;

/// A `keylock_stats` field's value when the scope cannot tell it (a Redis scope sees only this
/// process's acquisitions; an in-process pool has no capacity).
pub const KEYLOCK_STATS_UNKNOWN: u64 = u64::MAX;

/// The counts of a pool or striped lock, the same fields at every scope: what
/// `keylock_pool_stats` and `keylock_striped_stats` report. A snapshot, which other threads
/// (and processes) may change at once; for monitoring and tests. Fields the scope cannot tell
/// are `KEYLOCK_STATS_UNKNOWN`. A waiter counts once it is queued for its key. Keys are stripes
/// for a striped lock.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct keylock_stats {
    /// Keys held now, by anyone in the scope (unknown for Redis).
    pub held: u64,
    /// Waiters queued for a key now, by anyone in the scope (unknown for Redis).
    pub waiting: u64,
    /// Shared holds now, each holder counted (unknown for Redis).
    pub shared_holds: u64,
    /// Keys held now by this handle: every holder's in this process; this open's of a `shm:`
    /// region; this process's for Redis.
    pub held_here: u64,
    /// Waiters of this handle queued now (as `held_here`).
    pub waiting_here: u64,
    /// The most keys held or awaited at once (a `shm:` region's entries, a striped lock's
    /// stripes); unknown where the object grows as it needs (an in-process pool, Redis).
    pub capacity: u64,
    /// Keys held or awaited now (unknown for Redis).
    pub entries_in_use: u64,
    /// An in-process pool's memory, in keys; unknown for other objects.
    pub entries_allocated: u64,
    /// An in-process pool's most entries in use at once, summed over shards; unknown elsewhere.
    pub peak_in_use: u64,
    /// An in-process pool's acquisitions that had to wait; unknown elsewhere.
    pub contended: u64,
}

impl keylock_stats {
    pub(crate) fn of(s: &ScopeStats) -> Self {
        let known = |n: Option<usize>| n.map_or(KEYLOCK_STATS_UNKNOWN, |n| n as u64);
        Self {
            held: known(s.held),
            waiting: known(s.waiting),
            shared_holds: known(s.shared_holds),
            held_here: s.held_here as u64,
            waiting_here: s.waiting_here as u64,
            capacity: known(s.capacity),
            entries_in_use: known(s.entries_in_use),
            entries_allocated: known(s.entries_allocated),
            peak_in_use: known(s.peak_in_use),
            contended: s.contended.unwrap_or(KEYLOCK_STATS_UNKNOWN),
        }
    }
}

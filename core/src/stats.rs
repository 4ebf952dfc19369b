//! The counts that every scope gives through [`KeyedLock::stats`](crate::KeyedLock::stats)
//! ([`ScopeStats`]).

/// The counts of a keyed lock object at any scope, from
/// [`KeyedLock::stats`](crate::KeyedLock::stats): one record, the same for a lock object in
/// this process, in shared memory, in Redis and in PostgreSQL, so that every front end shows
/// the same figures under the same names.
///
/// Figures that a scope cannot know are `None`, never a guess: a server scope (Redis,
/// PostgreSQL) sees only its own process's acquisitions and waits, so its scope-wide figures
/// are `None` and its `*_here` figures say what this process does. What each scope counts, and
/// how:
///
/// | figure | in-process (`local:`) | shared memory (`shm:`) | Redis, PostgreSQL |
/// |---|---|---|---|
/// | `held`, `waiting`, `shared_holds` | every key of the object | every key of the region, every process | `None` |
/// | `held_here`, `waiting_here` | the same as `held`, `waiting` | this open's | this process's |
/// | `capacity` | stripes (striped); `None` (pool: unbounded) | entries or stripes | `None` |
/// | `entries_in_use` | keys (stripes) held or awaited | entries (stripes) held or awaited | `None` |
/// | `entries_allocated`, `peak_in_use`, `contended` | pool only ([`PoolStats`](crate::PoolStats)) | `None` | `None` |
///
/// A waiter is counted once it is queued for its key (it will be granted, or woken to try, by a
/// release), never while it is only on its way to the queue. Every count is a snapshot: other
/// threads and processes change it at once.
///
/// ```
/// use keylock_core::{KeyedLock, LockKey, LockOptions, open};
/// let pool = open("local:").unwrap();
/// let acq = pool.acquire(LockKey::new(b"k"), &LockOptions::new()).unwrap();
/// let stats = pool.stats().unwrap();
/// assert_eq!((stats.held, stats.held_here, stats.waiting), (Some(1), 1, Some(0)));
/// assert_eq!(stats.capacity, None); // an in-process pool grows as it needs
/// pool.release(acq).unwrap();
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScopeStats {
    /// Keys (stripes, for a striped object) held now in either mode, by anyone in the scope;
    /// `None` where the scope cannot tell (Redis, PostgreSQL).
    pub held: Option<usize>,
    /// Waiters queued now for a key, by anyone in the scope; `None` where the scope cannot tell
    /// (Redis, PostgreSQL).
    pub waiting: Option<usize>,
    /// Shared acquisitions held now (each one counts, so a key held by three readers counts
    /// three), by anyone in the scope; `None` where the scope cannot tell (Redis, PostgreSQL).
    pub shared_holds: Option<usize>,
    /// Keys (stripes) held now in either mode by this lock object: in one process the same as
    /// `held`; in shared memory, by this open of the region; on a server, by this process (the keys
    /// it holds on the server).
    pub held_here: usize,
    /// Waiters of this lock object queued now: in one process the same as `waiting`; in shared
    /// memory, this open's; on a server, this process's (those queued behind another acquirer of
    /// the same process, and those queued on the server).
    pub waiting_here: usize,
    /// The most locks the scope has room for: the entries of a shared-memory pool (keys held or
    /// awaited at once), or the stripes of a striped object; `None` for one that grows as it
    /// needs (an in-process pool, Redis, PostgreSQL).
    pub capacity: Option<usize>,
    /// Keys (stripes) that occupy an entry now, held or awaited; at most `capacity`. `None`
    /// where the scope cannot tell (Redis, PostgreSQL).
    pub entries_in_use: Option<usize>,
    /// An in-process pool's memory, in keys ([`PoolStats::entries_allocated`](crate::PoolStats));
    /// `None` for other objects.
    pub entries_allocated: Option<usize>,
    /// An in-process pool's peak of keys in use ([`PoolStats::peak_in_use`](crate::PoolStats));
    /// `None` for other objects.
    pub peak_in_use: Option<usize>,
    /// An in-process pool's count of acquisitions that had to queue
    /// ([`PoolStats::contended`](crate::PoolStats)); `None` for other objects.
    pub contended: Option<u64>,
}

impl ScopeStats {
    /// Keys held now as far as this lock object can tell: [`held`](Self::held) where the scope
    /// counts every holder, else [`held_here`](Self::held_here) (a server scope: this process's).
    /// What the front ends' `len`/`size` report.
    pub fn keys_held(&self) -> usize {
        self.held.unwrap_or(self.held_here)
    }
}

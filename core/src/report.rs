//! What a scope reports of its keys, for looking at it from outside (the `keylock` command):
//! [`KeyedLock::list`](crate::KeyedLock::list) gives one [`KeyReport`] per key held or awaited
//! in a scope that other processes share (`shm:`, `redis://`, `postgres://`): the key, its
//! state as [`info`](crate::KeyedLock::info) gives it, and the processes that hold and wait
//! where the scope records them. [`inspect`](crate::inspect) opens such a scope to look at it.

use std::time::Duration;

use crate::acquisition::{LockInfo, Mode, Owner};

/// Which lock a [`KeyReport`] is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockId {
    /// A key, as the bytes every front end encodes ([`keys`](crate::keys)).
    Key(Vec<u8>),
    /// A Web Locks name, as its WTF-8 bytes ([`KeySpace::Names`](crate::KeySpace::Names)).
    Name(Vec<u8>),
    /// A stripe of a striped lock object (which keeps no keys, only their stripes).
    Stripe(usize),
}

/// A process that holds or awaits a lock, as far as the scope records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Party {
    /// Its process id: the holder's or waiter's own (shared memory), or the id of its server
    /// session's backend (PostgreSQL); `None` where the scope does not record one (Redis).
    pub pid: Option<u32>,
    /// Exclusive or shared.
    pub mode: Mode,
    /// A semaphore's units held or asked for; 1 for a lock.
    pub units: u32,
    /// The owner it gave (reentrant lock objects), if any.
    pub owner: Option<Owner>,
    /// How long it has waited, for a waiter, where the scope records when a wait began.
    pub waited: Option<Duration>,
}

/// One key (or stripe) held or awaited now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyReport {
    /// The key or stripe.
    pub id: LockId,
    /// What [`info`](crate::KeyedLock::info) says of it; `None` when nobody holds it right
    /// now (its waiters are between a release and their grant).
    pub info: Option<LockInfo>,
    /// Its holders, where the scope records them (empty on Redis, where `info` has the
    /// count).
    pub holders: Vec<Party>,
    /// Its waiters in queue order, where the scope records them (empty on Redis and
    /// PostgreSQL, where `info` has the count).
    pub waiters: Vec<Party>,
}

impl KeyReport {
    /// Waiters queued for it: the records, or `info`'s count where there are none.
    pub fn waiting(&self) -> usize {
        self.waiters
            .len()
            .max(self.info.as_ref().map_or(0, |i| i.waiters))
    }

    /// The longest wait among its waiters, where the scope records when waits began.
    pub fn longest_wait(&self) -> Option<Duration> {
        self.waiters.iter().filter_map(|w| w.waited).max()
    }
}

//! `KeyPool`: exact per-key locks whose memory follows the keys held or awaited (seed 002).
//!
//! The pool is split into shards by key hash; each shard is one short mutex over a hash index
//! and a slab of *slots*. A slot is the lock of one key: the key itself, whether it is held, a
//! generation (bumped at every acquisition), a count of reservations (waiters that will come
//! back to this slot), and the slot's queue of waiters. All of it changes only under the shard
//! mutex, so the per-key lock needs no atomics of its own: locking an uncontended key is one
//! shard lock, one index probe and one slot write.
//!
//! A slot is *in use* while its key is held or reserved. When the last holder leaves and nobody
//! is waiting, the slot becomes unused but stays indexed under its key, so taking a recently used
//! key again costs no index update. A new key gets a new slot while the shard has fewer than its
//! peak in use plus [`KeyPool::RETAINED_PER_SHARD`]; beyond that it takes the unused slot retired
//! longest ago, evicting that slot's key from the index and reusing its storage (key storage
//! included, via `ToOwned::clone_into`). So a steady workload allocates nothing after warm-up,
//! and a shard's slots never outnumber its peak of keys in use at once plus that small constant:
//! memory follows the keys held or awaited, never the keys ever seen.
//!
//! Why the classic failures of hand-made keyed-lock maps cannot happen here:
//! - *Two threads with different mutexes for one key*: there is no separate mutex object to
//!   look up and lock later. A thread that must wait takes a reservation on the slot under the
//!   same shard lock in which it found the slot held, and a slot with a reservation is never
//!   removed, so the holder's release and the waiter always meet at the same slot.
//! - *An entry leaked by a waiter that timed out*: leaving a queue drops the reservation under
//!   the shard lock, and frees the slot if that was the last reference.
//! - *Memory growing with distinct keys*: see above; `stats().entries_allocated` never exceeds
//!   `stats().peak_held` plus [`KeyPool::RETAINED_PER_SHARD`] per shard.

use std::borrow::Borrow;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;

use crate::error::{Error, Result};
use crate::hash::{DefaultHashBuilder, hash_of, random};
use crate::sync::{AtomicUsize, Mutex, MutexGuard, Ordering};
use crate::wait::{LazyWaiter, Queue, WaitList, Wake, deadline_after, wait_blocking};

/// Unused slots a shard may keep indexed beyond its peak in use, so that a working set of keys
/// larger than the concurrency is not evicted and re-inserted on every acquisition.
const RETAINED_PER_SHARD: usize = 3;

/// The lock of one key.
struct Slot<K> {
    /// The key; kept while the slot is unused so that its storage can be reused.
    key: Option<K>,
    hash: u64,
    /// Whether some caller holds this key.
    locked: bool,
    /// Bumped at every acquisition: a guard releases only the acquisition it was given.
    generation: u64,
    /// Waiters (queued, notified, or not yet polled) that will come back to this slot; the slot
    /// is not freed while this is non-zero.
    reservations: u32,
    /// Threads and tasks waiting for this key.
    waiters: WaitList,
    /// Whether the slot's number is on the shard's `retired` queue.
    retired: bool,
}

impl<K> Slot<K> {
    /// Neither held nor awaited: the slot may be evicted and reused for another key.
    #[inline]
    fn unused(&self) -> bool {
        !self.locked && self.reservations == 0 && self.waiters.is_empty()
    }
}

/// A shard's state, all under its mutex.
struct ShardState<K> {
    /// Index from key hash to slot number. Every slot is indexed under its key; unused slots
    /// stay indexed until evicted for a new key.
    index: HashTable<u32>,
    slots: Vec<Slot<K>>,
    /// Slots that became unused, oldest first; entries may have been used again since (they
    /// are skipped when popped). Each slot appears at most once.
    retired: VecDeque<u32>,
    /// Keys held now.
    held: usize,
    /// Slots in use now (held or reserved) and their peak.
    in_use: usize,
    peak_in_use: usize,
    /// Outstanding reservations (waiters).
    waiting: usize,
    acquisitions: u64,
    contended: u64,
}

struct Shard<K> {
    state: Mutex<ShardState<K>>,
    /// A copy of `state.held`, so that `len()` takes no lock.
    held: AtomicUsize,
}

/// Where a key's slot is: shard and slot number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct SlotRef {
    shard: u32,
    slot: u32,
}

impl<K> ShardState<K> {
    fn new() -> Self {
        Self {
            index: HashTable::new(),
            slots: Vec::new(),
            retired: VecDeque::new(),
            held: 0,
            in_use: 0,
            peak_in_use: 0,
            waiting: 0,
            acquisitions: 0,
            contended: 0,
        }
    }

    #[inline]
    fn find<Q>(&self, hash: u64, key: &Q) -> Option<u32>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let slots = &self.slots;
        self.index
            .find(hash, |&i| {
                slots[i as usize]
                    .key
                    .as_ref()
                    .is_some_and(|k| k.borrow() == key)
            })
            .copied()
    }

    /// The slot of `key`, giving it one if it has none: a new slot while the shard is under its
    /// allowance (peak in use plus `RETAINED_PER_SHARD`), else the unused slot retired longest
    /// ago, evicted from the index.
    #[inline]
    fn find_or_insert<Q>(&mut self, hash: u64, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(i) = self.find(hash, key) {
            return i;
        }
        let allowance = self.peak_in_use.max(self.in_use + 1) + RETAINED_PER_SHARD;
        let reuse = if self.slots.len() < allowance {
            None
        } else {
            self.evict()
        };
        let i = match reuse {
            Some(i) => {
                let slot = &mut self.slots[i as usize];
                match &mut slot.key {
                    Some(stored) => key.clone_into(stored),
                    None => slot.key = Some(key.to_owned()),
                }
                slot.hash = hash;
                i
            }
            None => {
                let i = u32::try_from(self.slots.len()).expect("more than 2^32 keys in one shard");
                self.slots.push(Slot {
                    key: Some(key.to_owned()),
                    hash,
                    locked: false,
                    generation: 0,
                    reservations: 0,
                    waiters: WaitList::new(),
                    retired: false,
                });
                i
            }
        };
        let slots = &self.slots;
        self.index
            .insert_unique(hash, i, |&j| slots[j as usize].hash);
        i
    }

    /// Takes the longest-retired slot that is still unused out of the index.
    fn evict(&mut self) -> Option<u32> {
        while let Some(i) = self.retired.pop_front() {
            let slot = &mut self.slots[i as usize];
            slot.retired = false;
            if slot.unused() {
                let hash = slot.hash;
                if let Ok(entry) = self.index.find_entry(hash, |&j| j == i) {
                    entry.remove();
                }
                return Some(i);
            }
        }
        None
    }

    /// Counts slot `i` as in use if it was not (before it is locked or reserved).
    #[inline]
    fn mark_used(&mut self, i: u32) {
        if self.slots[i as usize].unused() {
            self.in_use += 1;
            self.peak_in_use = self.peak_in_use.max(self.in_use);
        }
    }

    /// Takes slot `i` for a caller. Returns the acquisition's generation.
    #[inline]
    fn acquire(&mut self, i: u32) -> u64 {
        self.mark_used(i);
        let slot = &mut self.slots[i as usize];
        debug_assert!(!slot.locked);
        slot.locked = true;
        slot.generation += 1;
        self.held += 1;
        self.acquisitions += 1;
        slot.generation
    }

    fn reserve(&mut self, i: u32) {
        self.mark_used(i);
        self.slots[i as usize].reservations += 1;
        self.waiting += 1;
    }

    /// A reservation turns into a hold (call right after `acquire`, so that the slot never
    /// looks unused in between).
    fn consume_reservation(&mut self, i: u32) {
        self.slots[i as usize].reservations -= 1;
        self.waiting -= 1;
    }

    /// Drops a reservation that will not be used; frees the slot if nothing else needs it.
    fn unreserve(&mut self, i: u32) {
        self.slots[i as usize].reservations -= 1;
        self.waiting -= 1;
        self.free_if_unused(i);
    }

    /// After a release or a dropped reservation: a slot that became unused is counted out and
    /// retired (it stays indexed until a new key needs it).
    fn free_if_unused(&mut self, i: u32) {
        let slot = &mut self.slots[i as usize];
        if !slot.unused() {
            return;
        }
        self.in_use -= 1;
        if !slot.retired {
            slot.retired = true;
            self.retired.push_back(i);
        }
    }

    /// Releases slot `i`, if `generation` (when given) is the current acquisition. The next
    /// waiter, if any, is handed the key or notified; its wake-up is returned.
    fn release(&mut self, i: u32, generation: Option<u64>) -> Result<Option<Wake>> {
        let slot = &mut self.slots[i as usize];
        if !slot.locked || generation.is_some_and(|g| g != slot.generation) {
            return Err(Error::NotLocked);
        }
        match slot.waiters.pop_front() {
            Some(next) if next.is_due() => {
                // Hand-off: the key stays held, by the waiter now; its reservation is used up.
                slot.generation += 1;
                slot.reservations -= 1;
                self.waiting -= 1;
                self.acquisitions += 1;
                Ok(next.grant())
            }
            Some(next) => {
                slot.locked = false;
                self.held -= 1;
                Ok(next.notify())
            }
            None => {
                slot.locked = false;
                self.held -= 1;
                self.free_if_unused(i);
                Ok(None)
            }
        }
    }
}

impl<K> Shard<K> {
    fn new() -> Self {
        Self {
            state: Mutex::new(ShardState::new()),
            held: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn publish_held(&self, state: &ShardState<K>) {
        self.held.store(state.held, Ordering::Relaxed);
    }

    /// Releases and wakes outside the shard lock.
    fn release(&self, i: u32, generation: Option<u64>) -> Result<()> {
        let mut state = self.state.lock();
        let wake = state.release(i, generation)?;
        self.publish_held(&state);
        drop(state);
        if let Some(wake) = wake {
            wake.wake();
        }
        Ok(())
    }

    fn unreserve(&self, i: u32) {
        self.state.lock().unreserve(i);
    }
}

/// One reserved slot seen as a [`Queue`].
struct SlotQueue<'a, K> {
    shard: &'a Shard<K>,
    slot: u32,
}

impl<K> Queue for SlotQueue<'_, K> {
    type Locked<'b>
        = MutexGuard<'b, ShardState<K>>
    where
        Self: 'b;

    fn lock_queue<'q>(&'q self) -> Self::Locked<'q> {
        self.shard.state.lock()
    }

    fn waiters<'g, 'q>(&'q self, locked: &'g mut Self::Locked<'q>) -> &'g mut WaitList {
        &mut locked.slots[self.slot as usize].waiters
    }

    fn acquire_locked<'q>(&'q self, state: &mut Self::Locked<'q>) -> bool {
        if state.slots[self.slot as usize].locked {
            return false;
        }
        state.acquire(self.slot);
        state.consume_reservation(self.slot);
        self.shard.publish_held(state);
        true
    }

    fn leave_locked<'q>(&'q self, state: &mut Self::Locked<'q>, notified: bool) -> Option<Wake> {
        let i = self.slot;
        state.slots[i as usize].reservations -= 1;
        state.waiting -= 1;
        let wake = if notified && !state.slots[i as usize].locked {
            state.slots[i as usize]
                .waiters
                .pop_front()
                .and_then(|next| next.notify())
        } else {
            None
        };
        state.free_if_unused(i);
        wake
    }

    fn release_granted(&self) {
        // The caller was handed the key and abandons it: release the current acquisition.
        let _ = self.shard.release(self.slot, None);
    }
}

/// Counters of a [`KeyPool`], read by [`KeyPool::stats`].
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<u64> = KeyPool::new();
/// let a = pool.lock(&1);
/// let stats = pool.stats();
/// assert_eq!((stats.held, stats.entries_in_use, stats.acquisitions), (1, 1, 1));
/// drop(a);
/// assert_eq!(pool.stats().entries_in_use, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Keys held now.
    pub held: usize,
    /// Waiters now: callers queued for a key, or about to retry for one.
    pub waiting: usize,
    /// Keys that have a slot now (held, or awaited by someone). 0 once everything is released.
    pub entries_in_use: usize,
    /// Slots allocated (in use, or unused and kept for reuse): the pool's memory, in keys.
    pub entries_allocated: usize,
    /// The sum over shards of each shard's peak of slots in use (held or awaited): an upper
    /// bound on the pool's peak. `entries_allocated` never exceeds it by more than
    /// [`KeyPool::RETAINED_PER_SHARD`] per shard.
    pub peak_held: usize,
    /// Acquisitions so far.
    pub acquisitions: u64,
    /// Acquisitions of a single key that found it held and had to wait.
    pub contended: u64,
}

/// Exact per-key locks: two different keys never block each other, and memory follows the keys
/// held or awaited, never the keys ever seen.
///
/// `K` is the owned key type and lookups take its borrowed form: a `KeyPool<Vec<u8>>` (the
/// default) is locked with `&[u8]`, a `KeyPool<String>` with `&str`, a `KeyPool<u64>` with
/// `&u64`.
///
/// ```
/// use std::time::Duration;
/// use keylock_core::{Error, KeyPool};
///
/// let pool: KeyPool<String> = KeyPool::new();
/// let alice = pool.lock("alice");
/// let bob = pool.try_lock("bob").unwrap();            // other keys are never blocked
/// assert_eq!(pool.try_lock("alice").unwrap_err(), Error::WouldBlock);
/// assert_eq!(pool.try_lock_for("alice", Duration::from_millis(5)).unwrap_err(), Error::TimedOut);
/// assert_eq!(pool.len(), 2);
/// drop((alice, bob));
/// assert!(pool.is_empty());
/// assert_eq!(pool.stats().held, 0);
/// ```
pub struct KeyPool<K = Vec<u8>, S = DefaultHashBuilder> {
    shards: Box<[CachePadded<Shard<K>>]>,
    /// `shards.len() - 1`; shards are chosen by bits 32.. of the hash, the index uses the rest.
    mask: usize,
    hasher: S,
}

impl<K, S> fmt::Debug for KeyPool<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPool")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq> Default for KeyPool<K> {
    fn default() -> Self {
        Self::new()
    }
}

fn default_shards() -> usize {
    #[cfg(not(keylock_loom))]
    {
        // Enough shards that threads working on different keys rarely share a shard's cache
        // line (each shard is one padded mutex plus an empty index until used: 32 KiB for 256).
        let cores = std::thread::available_parallelism().map_or(8, |n| n.get());
        (cores * 32).next_power_of_two().clamp(256, 4096)
    }
    #[cfg(keylock_loom)]
    {
        2
    }
}

impl<K: Hash + Eq> KeyPool<K> {
    /// An empty pool with a shard count suited to this machine and a random hash seed.
    pub fn new() -> Self {
        Self::with_hasher(random())
    }
}

impl<K: Hash + Eq, S: BuildHasher> KeyPool<K, S> {
    /// An empty pool that hashes keys with `hasher`.
    pub fn with_hasher(hasher: S) -> Self {
        Self::build(default_shards(), hasher)
    }

    /// An empty pool with `shards` shards (rounded up to a power of two, at most 2^16).
    /// `Err(InvalidArgument)` when `shards` is 0 or too large.
    pub fn with_shards_and_hasher(shards: usize, hasher: S) -> Result<Self> {
        if shards == 0 || shards > 1 << 16 {
            return Err(Error::InvalidArgument("shards must be between 1 and 65536"));
        }
        Ok(Self::build(shards, hasher))
    }

    fn build(shards: usize, hasher: S) -> Self {
        let n = shards.next_power_of_two();
        Self {
            shards: (0..n).map(|_| CachePadded::new(Shard::new())).collect(),
            mask: n - 1,
            hasher,
        }
    }

    #[inline]
    fn locate<Q: Hash + ?Sized>(&self, key: &Q) -> (u32, u64) {
        let hash = hash_of(&self.hasher, key);
        (((hash >> 32) as usize & self.mask) as u32, hash)
    }

    #[inline]
    fn shard(&self, shard: u32) -> &Shard<K> {
        &self.shards[shard as usize]
    }

    /// Takes `key` if it is free; otherwise reserves its slot for a waiter.
    #[inline]
    fn acquire_or_reserve<Q>(&self, key: &Q) -> std::result::Result<(SlotRef, u64), SlotRef>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (shard_no, hash) = self.locate(key);
        let shard = self.shard(shard_no);
        let mut state = shard.state.lock();
        let slot = state.find_or_insert(hash, key);
        let at = SlotRef {
            shard: shard_no,
            slot,
        };
        if state.slots[slot as usize].locked {
            state.reserve(slot);
            state.contended += 1;
            Err(at)
        } else {
            let generation = state.acquire(slot);
            shard.publish_held(&state);
            Ok((at, generation))
        }
    }

    /// Waits for a reserved slot; on success returns the acquisition's generation.
    fn acquire_reserved(&self, at: SlotRef, deadline: Option<Instant>) -> Option<u64> {
        let shard = self.shard(at.shard);
        let try_now = || {
            let mut state = shard.state.lock();
            if state.slots[at.slot as usize].locked {
                return None;
            }
            let generation = state.acquire(at.slot);
            state.consume_reservation(at.slot);
            shard.publish_held(&state);
            Some(generation)
        };
        if let Some(generation) = try_now() {
            return Some(generation);
        }
        let mut got = None;
        let queue = SlotQueue {
            shard,
            slot: at.slot,
        };
        if !wait_blocking(&queue, deadline, || {
            got = try_now();
            got.is_some()
        }) {
            return None;
        }
        got.or_else(|| Some(shard.state.lock().slots[at.slot as usize].generation))
    }

    fn lock_until<Q>(&self, key: &Q, deadline: Option<Instant>) -> Option<(SlotRef, u64)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        match self.acquire_or_reserve(key) {
            Ok(held) => Some(held),
            Err(at) => self
                .acquire_reserved(at, deadline)
                .map(|generation| (at, generation)),
        }
    }

    /// Blocks until `key` is held.
    #[inline]
    pub fn lock<Q>(&self, key: &Q) -> PoolGuard<&Self>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (at, generation) = self
            .lock_until(key, None)
            .expect("an untimed wait always succeeds");
        PoolGuard {
            pool: Some(self),
            at,
            generation,
        }
    }

    /// Takes `key` if it is free; `Err(WouldBlock)` otherwise.
    #[inline]
    pub fn try_lock<Q>(&self, key: &Q) -> Result<PoolGuard<&Self>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (shard_no, hash) = self.locate(key);
        let shard = self.shard(shard_no);
        let mut state = shard.state.lock();
        let slot = state.find_or_insert(hash, key);
        if state.slots[slot as usize].locked {
            return Err(Error::WouldBlock);
        }
        let generation = state.acquire(slot);
        shard.publish_held(&state);
        Ok(PoolGuard {
            pool: Some(self),
            at: SlotRef {
                shard: shard_no,
                slot,
            },
            generation,
        })
    }

    /// Waits at most `timeout` for `key`; `Err(TimedOut)` when it runs out. A waiter that times
    /// out leaves no trace in the pool.
    pub fn try_lock_for<Q>(&self, key: &Q, timeout: Duration) -> Result<PoolGuard<&Self>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        match self.lock_until(key, deadline_after(timeout)) {
            Some((at, generation)) => Ok(PoolGuard {
                pool: Some(self),
                at,
                generation,
            }),
            None => Err(Error::TimedOut),
        }
    }

    /// Releases `key`, for callers that leaked its guard ([`PoolGuard::leak`]).
    /// `Err(NotLocked)` when the key is not held.
    pub fn unlock<Q>(&self, key: &Q) -> Result<()>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (shard_no, hash) = self.locate(key);
        let shard = self.shard(shard_no);
        let slot = shard.state.lock().find(hash, key).ok_or(Error::NotLocked)?;
        // The slot cannot be freed between the two locks while it is held; if it was released
        // meanwhile, `release` reports NotLocked.
        shard.release(slot, None)
    }

    /// Whether `key` is held (a snapshot).
    pub fn is_locked<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (shard_no, hash) = self.locate(key);
        let state = self.shard(shard_no).state.lock();
        state
            .find(hash, key)
            .is_some_and(|slot| state.slots[slot as usize].locked)
    }

    /// Unused slots each shard may keep (indexed under their last key) beyond its peak of keys in
    /// use: `stats().entries_allocated` never exceeds `stats().peak_held` plus this times
    /// [`shards`](Self::shards).
    pub const RETAINED_PER_SHARD: usize = RETAINED_PER_SHARD;

    /// The number of shards (a power of two).
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Keys held now (a snapshot; takes no lock).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.held.load(Ordering::Relaxed))
            .sum()
    }

    /// Whether no key is held (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pool's counters, summed over shards (each shard read under its lock).
    pub fn stats(&self) -> PoolStats {
        let mut stats = PoolStats::default();
        for shard in self.shards.iter() {
            let state = shard.state.lock();
            stats.held += state.held;
            stats.waiting += state.waiting;
            stats.entries_in_use += state.in_use;
            stats.entries_allocated += state.slots.len();
            stats.peak_held += state.peak_in_use;
            stats.acquisitions += state.acquisitions;
            stats.contended += state.contended;
        }
        stats
    }

    // ---- several keys ----

    /// Reserves the slots of `keys` and sorts them into the one global order (shard, slot):
    /// while reserved, a key keeps its slot, so every caller that shares a key sees the same
    /// order. Duplicates collapse.
    fn reserve_many<'k, Q, I>(&self, keys: I) -> Vec<SlotRef>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'k,
        I: IntoIterator<Item = &'k Q>,
    {
        let mut slots: Vec<SlotRef> = keys
            .into_iter()
            .map(|key| {
                let (shard_no, hash) = self.locate(key);
                let mut state = self.shard(shard_no).state.lock();
                let slot = state.find_or_insert(hash, key);
                state.reserve(slot);
                SlotRef {
                    shard: shard_no,
                    slot,
                }
            })
            .collect();
        slots.sort_unstable();
        let mut unique = 0;
        for i in 0..slots.len() {
            if unique > 0 && slots[unique - 1] == slots[i] {
                self.shard(slots[i].shard).unreserve(slots[i].slot);
            } else {
                slots[unique] = slots[i];
                unique += 1;
            }
        }
        slots.truncate(unique);
        slots
    }

    fn release_all(&self, held: &[(SlotRef, u64)]) {
        for &(at, generation) in held.iter().rev() {
            let _ = self.shard(at.shard).release(at.slot, Some(generation));
        }
    }

    fn lock_many_until(
        &self,
        slots: Vec<SlotRef>,
        deadline: Option<Instant>,
    ) -> Option<Vec<(SlotRef, u64)>> {
        let mut held = Vec::with_capacity(slots.len());
        for (n, &at) in slots.iter().enumerate() {
            match self.acquire_reserved(at, deadline) {
                Some(generation) => held.push((at, generation)),
                None => {
                    for rest in &slots[n + 1..] {
                        self.shard(rest.shard).unreserve(rest.slot);
                    }
                    self.release_all(&held);
                    return None;
                }
            }
        }
        Some(held)
    }

    /// Blocks until all `keys` are held. Deadlock-free: every multi-key acquire takes its keys
    /// in one canonical order, and duplicates collapse.
    ///
    /// ```
    /// use keylock_core::KeyPool;
    /// let pool: KeyPool<String> = KeyPool::new();
    /// let both = pool.lock_many(["from", "to", "from"]);
    /// assert_eq!(pool.len(), 2);
    /// drop(both);
    /// assert!(pool.is_empty());
    /// ```
    pub fn lock_many<'k, Q, I>(&self, keys: I) -> PoolManyGuard<&Self>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'k,
        I: IntoIterator<Item = &'k Q>,
    {
        let slots = self.reserve_many(keys);
        let held = self
            .lock_many_until(slots, None)
            .expect("an untimed wait always succeeds");
        PoolManyGuard {
            pool: Some(self),
            held,
        }
    }

    /// Takes all `keys` if all are free, or none; `Err(WouldBlock)` otherwise.
    pub fn try_lock_many<'k, Q, I>(&self, keys: I) -> Result<PoolManyGuard<&Self>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'k,
        I: IntoIterator<Item = &'k Q>,
    {
        let slots = self.reserve_many(keys);
        let mut held = Vec::with_capacity(slots.len());
        for (n, &at) in slots.iter().enumerate() {
            let shard = self.shard(at.shard);
            let mut state = shard.state.lock();
            if state.slots[at.slot as usize].locked {
                state.unreserve(at.slot);
                drop(state);
                for rest in &slots[n + 1..] {
                    self.shard(rest.shard).unreserve(rest.slot);
                }
                self.release_all(&held);
                return Err(Error::WouldBlock);
            }
            let generation = state.acquire(at.slot);
            state.consume_reservation(at.slot);
            shard.publish_held(&state);
            held.push((at, generation));
        }
        Ok(PoolManyGuard {
            pool: Some(self),
            held,
        })
    }

    /// Waits at most `timeout` in all for every one of `keys`: all or none.
    pub fn try_lock_many_for<'k, Q, I>(
        &self,
        keys: I,
        timeout: Duration,
    ) -> Result<PoolManyGuard<&Self>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'k,
        I: IntoIterator<Item = &'k Q>,
    {
        let deadline = deadline_after(timeout);
        let slots = self.reserve_many(keys);
        match self.lock_many_until(slots, deadline) {
            Some(held) => Ok(PoolManyGuard {
                pool: Some(self),
                held,
            }),
            None => Err(Error::TimedOut),
        }
    }

    /// Releases all `keys` (leaked guards). If any is not held, nothing is released and the
    /// result is `Err(NotLocked)`.
    pub fn unlock_many<'k, Q, I>(&self, keys: I) -> Result<()>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + 'k,
        I: IntoIterator<Item = &'k Q>,
    {
        let mut slots = Vec::new();
        for key in keys {
            let (shard_no, hash) = self.locate(key);
            let state = self.shard(shard_no).state.lock();
            match state.find(hash, key) {
                Some(slot) if state.slots[slot as usize].locked => {
                    slots.push(SlotRef {
                        shard: shard_no,
                        slot,
                    });
                }
                _ => return Err(Error::NotLocked),
            }
        }
        slots.sort_unstable();
        slots.dedup();
        for at in slots.iter().rev() {
            // Released meanwhile by someone else: nothing left to do for that key.
            let _ = self.shard(at.shard).release(at.slot, None);
        }
        Ok(())
    }

    // ---- futures ----

    /// A future that resolves to `key`'s guard, waiting in the same queue as blocking callers.
    ///
    /// The key is looked up when this is called: a free key is taken at once (the future is
    /// then ready on its first poll), and a held one gets a reservation, so the future owns no
    /// copy of the key. Dropping the future releases whichever it holds.
    pub fn lock_async<Q>(&self, key: &Q) -> PoolLockFuture<&Self>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        PoolLockFuture::new(self, self.acquire_or_reserve(key))
    }

    /// Like [`lock_async`](Self::lock_async), for an `Arc`: the future is `'static`.
    pub fn lock_async_owned<Q>(self: &Arc<Self>, key: &Q) -> PoolLockFuture<Arc<Self>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        PoolLockFuture::new(Arc::clone(self), self.acquire_or_reserve(key))
    }

    /// A future that resolves once all `keys` are held, in the canonical order.
    pub fn lock_many_async<'k, Q, I>(&self, keys: I) -> PoolManyLockFuture<&Self>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'k,
        I: IntoIterator<Item = &'k Q>,
    {
        PoolManyLockFuture::new(self, self.reserve_many(keys))
    }

    /// Like [`lock_many_async`](Self::lock_many_async), for an `Arc`: the future is `'static`.
    pub fn lock_many_async_owned<'k, Q, I>(
        self: &Arc<Self>,
        keys: I,
    ) -> PoolManyLockFuture<Arc<Self>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'k,
        I: IntoIterator<Item = &'k Q>,
    {
        PoolManyLockFuture::new(Arc::clone(self), self.reserve_many(keys))
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A handle to a pool that guards and futures can hold: `&KeyPool` or `Arc<KeyPool>`.
///
/// ```
/// use std::sync::Arc;
/// use keylock_core::{KeyPool, PoolGuard};
///
/// fn held<P: keylock_core::PoolRef>(guard: &PoolGuard<P>) -> u64 {
///     guard.generation()
/// }
/// let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
/// assert_eq!(held(&pool.lock(&1)), 1);
/// ```
pub trait PoolRef: sealed::Sealed + Deref<Target = KeyPool<Self::Key, Self::Hasher>> {
    /// The pool's key type.
    type Key: Hash + Eq;
    /// The pool's hasher.
    type Hasher: BuildHasher;
}

impl<K: Hash + Eq, S: BuildHasher> sealed::Sealed for &KeyPool<K, S> {}
impl<K: Hash + Eq, S: BuildHasher> PoolRef for &KeyPool<K, S> {
    type Key = K;
    type Hasher = S;
}
impl<K: Hash + Eq, S: BuildHasher> sealed::Sealed for Arc<KeyPool<K, S>> {}
impl<K: Hash + Eq, S: BuildHasher> PoolRef for Arc<KeyPool<K, S>> {
    type Key = K;
    type Hasher = S;
}

/// A held key; released on drop. `Send`: it may be released from another thread.
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<String> = KeyPool::new();
/// let guard = pool.lock("row-9");
/// std::thread::scope(|s| {
///     s.spawn(move || drop(guard)); // released on another thread
/// });
/// assert!(!pool.is_locked("row-9"));
///
/// pool.lock("row-9").leak();        // keep it held without a guard...
/// pool.unlock("row-9").unwrap();    // ...and release it explicitly
/// ```
#[must_use = "the key is released as soon as the guard is dropped"]
pub struct PoolGuard<P: PoolRef> {
    pool: Option<P>,
    at: SlotRef,
    generation: u64,
}

impl<P: PoolRef> PoolGuard<P> {
    /// Keeps the key held and forgets the guard; release it later with [`KeyPool::unlock`].
    pub fn leak(mut self) {
        self.pool = None;
    }

    /// This acquisition's number: it grows with every acquisition of the slot that holds the
    /// key, so two holders in a row never see the same one.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl<P: PoolRef> fmt::Debug for PoolGuard<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolGuard")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl<P: PoolRef> Drop for PoolGuard<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            // NotLocked here means an explicit unlock already released this acquisition.
            let _ = pool
                .shard(self.at.shard)
                .release(self.at.slot, Some(self.generation));
        }
    }
}

/// Several held keys; all released on drop.
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<u64> = KeyPool::new();
/// let guard = pool.lock_many([3, 1, 3].iter());
/// assert_eq!(guard.len(), 2);
/// drop(guard);
/// assert!(pool.is_empty());
/// ```
#[must_use = "the keys are released as soon as the guard is dropped"]
pub struct PoolManyGuard<P: PoolRef> {
    pool: Option<P>,
    held: Vec<(SlotRef, u64)>,
}

impl<P: PoolRef> PoolManyGuard<P> {
    /// The number of distinct keys held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether the guard holds no key (it was given none).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Keeps the keys held and forgets the guard; release them later with
    /// [`KeyPool::unlock_many`].
    pub fn leak(mut self) {
        self.pool = None;
    }
}

impl<P: PoolRef> fmt::Debug for PoolManyGuard<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolManyGuard")
            .field("keys", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl<P: PoolRef> Drop for PoolManyGuard<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.release_all(&self.held);
        }
    }
}

/// Resolves to a [`PoolGuard`]. Dropping it before then cancels the wait exactly: the waiter
/// leaves the queue, its reservation is dropped (freeing the slot if unused), and a key already
/// handed to it passes on.
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<String> = KeyPool::new();
/// futures::executor::block_on(async {
///     let guard = pool.lock_async("user:1").await;
///     assert!(pool.is_locked("user:1"));
///     drop(guard);
/// });
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct PoolLockFuture<P: PoolRef> {
    pool: Option<P>,
    at: SlotRef,
    /// `Some` when the key was free at creation and is held already.
    generation: Option<u64>,
    waiter: LazyWaiter,
}

impl<P: PoolRef> PoolLockFuture<P> {
    fn new(pool: P, start: std::result::Result<(SlotRef, u64), SlotRef>) -> Self {
        let (at, generation) = match start {
            Ok((at, generation)) => (at, Some(generation)),
            Err(at) => (at, None),
        };
        Self {
            pool: Some(pool),
            at,
            generation,
            waiter: LazyWaiter::new(),
        }
    }
}

impl<P: PoolRef> fmt::Debug for PoolLockFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolLockFuture")
            .field("ready", &self.generation.is_some())
            .finish_non_exhaustive()
    }
}

impl<P: PoolRef> Future for PoolLockFuture<P> {
    type Output = PoolGuard<P>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PoolGuard<P>> {
        // SAFETY: the waiter is never moved out of the pinned future.
        let this = unsafe { self.get_unchecked_mut() };
        let pool = this
            .pool
            .as_ref()
            .expect("PoolLockFuture polled after completion");
        if this.generation.is_none() {
            let shard = pool.shard(this.at.shard);
            // SAFETY: as above.
            let waiter = unsafe { Pin::new_unchecked(&mut this.waiter) };
            let queue = SlotQueue {
                shard,
                slot: this.at.slot,
            };
            if waiter
                .get()
                .poll(&queue, || Wake::Task(cx.waker().clone()))
                .is_pending()
            {
                return Poll::Pending;
            }
            this.generation = Some(shard.state.lock().slots[this.at.slot as usize].generation);
        }
        let generation = this.generation.take().expect("set above");
        Poll::Ready(PoolGuard {
            pool: this.pool.take(),
            at: this.at,
            generation,
        })
    }
}

impl<P: PoolRef> Drop for PoolLockFuture<P> {
    #[inline]
    fn drop(&mut self) {
        let Some(pool) = &self.pool else { return };
        let shard = pool.shard(self.at.shard);
        if let Some(generation) = self.generation {
            let _ = shard.release(self.at.slot, Some(generation));
        } else if self.waiter.is_registered() {
            // SAFETY: the future is dropped in place; the waiter was pinned inside it.
            let waiter = unsafe { Pin::new_unchecked(&mut self.waiter) };
            waiter.abandon(
                &SlotQueue {
                    shard,
                    slot: self.at.slot,
                },
                false,
            );
        } else {
            shard.unreserve(self.at.slot);
        }
    }
}

/// Resolves to a [`PoolManyGuard`]. Dropping it before then releases what it took, drops its
/// reservations and cancels the wait exactly.
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<String> = KeyPool::new();
/// futures::executor::block_on(async {
///     let both = pool.lock_many_async(["from", "to"]).await;
///     assert_eq!(both.len(), 2);
/// });
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct PoolManyLockFuture<P: PoolRef> {
    pool: Option<P>,
    /// Reserved slots in canonical order; `held.len()` of them are held.
    slots: Vec<SlotRef>,
    held: Vec<(SlotRef, u64)>,
    waiter: LazyWaiter,
}

impl<P: PoolRef> PoolManyLockFuture<P> {
    fn new(pool: P, slots: Vec<SlotRef>) -> Self {
        let held = Vec::with_capacity(slots.len());
        Self {
            pool: Some(pool),
            slots,
            held,
            waiter: LazyWaiter::new(),
        }
    }
}

impl<P: PoolRef> fmt::Debug for PoolManyLockFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolManyLockFuture")
            .field("keys", &self.slots.len())
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl<P: PoolRef> Future for PoolManyLockFuture<P> {
    type Output = PoolManyGuard<P>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PoolManyGuard<P>> {
        // SAFETY: the waiter is never moved out of the pinned future.
        let this = unsafe { self.get_unchecked_mut() };
        let pool = this
            .pool
            .as_ref()
            .expect("PoolManyLockFuture polled after completion");
        while this.held.len() < this.slots.len() {
            let at = this.slots[this.held.len()];
            let shard = pool.shard(at.shard);
            // SAFETY: as above.
            let waiter = unsafe { Pin::new_unchecked(&mut this.waiter) };
            let queue = SlotQueue {
                shard,
                slot: at.slot,
            };
            if waiter
                .get()
                .poll(&queue, || Wake::Task(cx.waker().clone()))
                .is_pending()
            {
                return Poll::Pending;
            }
            let generation = shard.state.lock().slots[at.slot as usize].generation;
            this.held.push((at, generation));
        }
        Poll::Ready(PoolManyGuard {
            pool: this.pool.take(),
            held: std::mem::take(&mut this.held),
        })
    }
}

impl<P: PoolRef> Drop for PoolManyLockFuture<P> {
    #[inline]
    fn drop(&mut self) {
        let Some(pool) = &self.pool else { return };
        let next = self.held.len();
        if next < self.slots.len() {
            let at = self.slots[next];
            let shard = pool.shard(at.shard);
            if self.waiter.is_registered() {
                // SAFETY: the future is dropped in place; the waiter was pinned inside it.
                let waiter = unsafe { Pin::new_unchecked(&mut self.waiter) };
                waiter.abandon(
                    &SlotQueue {
                        shard,
                        slot: at.slot,
                    },
                    false,
                );
            } else {
                shard.unreserve(at.slot);
            }
            for rest in &self.slots[next + 1..] {
                pool.shard(rest.shard).unreserve(rest.slot);
            }
        }
        pool.release_all(&self.held);
    }
}

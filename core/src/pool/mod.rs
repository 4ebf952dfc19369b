//! `KeyPool`: exact per-key locks (no two keys share one); a key has a slot only while it is
//! held or awaited, so memory follows the keys in use, not every key ever seen.
//!
//! The pool is split into shards by key hash (`shard`: slots, index, recycling). Each key held
//! or awaited has a slot, whose lock word is an [`Entry`](crate::entry): the same lock a stripe
//! is, so a key has both modes, fences, leases, owners and force-unlock.
//!
//! **The fast path** (an uncontended acquire of a key whose slot is indexed, and every plain
//! release) takes no shard lock: a probe of the index, one compare-and-swap on the slot's lock
//! word, a comparison of the key; one compare-and-swap to release. **The slow path** takes the
//! shard mutex: to find or make the key's slot, to queue, or to deal with holder state.
//!
//! Why the classic failures of hand-made keyed-lock maps cannot happen here:
//! - *Two threads with different mutexes for one key*: there is no separate mutex object to
//!   look up and lock later. A key's slot changes only under the shard mutex, while nobody holds,
//!   awaits or reserves it; the fast path verifies the key only after taking the slot's lock, so
//!   a slot given to another key meanwhile is let go at once.
//! - *A waiter that looked the entry up while it was being removed*: a waiter reserves its slot
//!   under the same shard mutex in which it found the key held, and a reserved slot is never
//!   recycled, so the holder's release and the waiter always meet at the same slot.
//! - *An entry leaked by a waiter that timed out*: leaving a queue drops the reservation.
//! - *Memory growing with distinct keys*: see `shard` on recycling.

mod key_buf;
mod shard;

pub use key_buf::{KeyBuf, KeyBytes};

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

use crate::acquisition::{Mode, Wait, Want};
use crate::entry::{Hold, Policy};
use crate::error::{Error, Result};
use crate::guarded;
use crate::hash::{DefaultHashBuilder, hash_of, random};
use crate::sync::{AtomicPtr, Ordering, Spin};
use crate::wait::{Attempt, Grant, Wakes};

use crate::entry::SlowState;
use crate::front::table::{Find, Table, Take};
use crate::front::{self, LockTable, Locks};
use shard::{Shard, Slot, SlotEntry, SlotRef};

/// Counters of a [`KeyPool`], read by [`KeyPool::stats`]: a scan of every shard (O(slots)),
/// meant for monitoring and tests.
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<u64> = KeyPool::new();
/// let a = pool.lock(&1);
/// let stats = pool.stats();
/// assert_eq!((stats.held, stats.entries_in_use), (1, 1));
/// drop(a);
/// assert_eq!(pool.stats().entries_in_use, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Keys held now (in either mode).
    pub held: usize,
    /// Waiters now: callers queued for a key, or about to queue or retry for one (a key's
    /// slot is kept for each of them).
    pub waiting: usize,
    /// Waiters queued for a key now (in its wait list, to be granted or woken by a release);
    /// unlike `waiting`, a caller on its way to the queue, or woken and trying again, is not
    /// counted.
    pub queued: usize,
    /// Shared acquisitions held now (a key held by three readers counts three).
    pub shared_holds: usize,
    /// Keys that need a slot now (held, or awaited by someone). 0 once everything is released.
    pub entries_in_use: usize,
    /// Slots allocated (in use, or kept for keys released recently): the pool's memory, in keys.
    pub entries_allocated: usize,
    /// The sum over shards of the most slots in use that each shard counted. Every shard keeps at
    /// most `max(retained allowance, 4 × its peak)` slots, so `entries_allocated` never exceeds
    /// `retain × 2 + 4 × peak_in_use` (see [`KeyPool::memory_bound`]).
    pub peak_in_use: usize,
    /// Acquisitions that found their key held and queued for it.
    pub contended: u64,
}

impl PoolStats {
    /// The counters as a scope's: everything is known, and all of it is this process's.
    pub(crate) fn scope(self) -> crate::stats::ScopeStats {
        crate::stats::ScopeStats {
            held: Some(self.held),
            waiting: Some(self.queued),
            shared_holds: Some(self.shared_holds),
            held_here: self.held,
            waiting_here: self.queued,
            capacity: None,
            entries_in_use: Some(self.entries_in_use),
            entries_allocated: Some(self.entries_allocated),
            peak_in_use: Some(self.peak_in_use),
            contended: Some(self.contended),
        }
    }
}

/// Options for a [`KeyPool`], from [`KeyPool::builder`].
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<String> = KeyPool::builder().shards(16).retain(0).fifo(true).build();
/// assert_eq!(pool.shards(), 16);
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct PoolBuilder<S = DefaultHashBuilder> {
    shards: usize,
    retain: usize,
    policy: Policy,
    hasher: S,
}

impl<S> PoolBuilder<S> {
    /// The number of shards, rounded up to a power of two (default 64, at most 2^16). Shards are
    /// allocated on first use.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.clamp(1, 1 << 16).next_power_of_two();
        self
    }

    /// How many released keys the pool keeps indexed, so that taking one again costs no
    /// allocation (default 1024; 0 keeps only what is in use). Spread over the shards with room
    /// for unevenness, so the pool may keep up to twice this many.
    pub fn retain(mut self, keys: usize) -> Self {
        self.retain = keys;
        self
    }

    front::policy_builder_methods!("key");

    /// A semaphore's units per key (a [`KeyedSemaphore`](crate::KeyedSemaphore) builds its
    /// pool with them; a pool with permits is never handed out as a `KeyPool`).
    pub(crate) fn permits(mut self, permits: u32) -> Self {
        self.policy.permits = permits;
        self
    }

    /// The hasher for the keys.
    pub fn hasher<T: BuildHasher>(self, hasher: T) -> PoolBuilder<T> {
        PoolBuilder {
            shards: self.shards,
            retain: self.retain,
            policy: self.policy,
            hasher,
        }
    }

    /// The pool.
    pub fn build<K>(self) -> KeyPool<K, S>
    where
        K: Hash + Eq,
        S: BuildHasher,
    {
        Locks {
            table: PoolTable::build(self),
        }
    }
}

/// Exact per-key locks: two different keys never block each other, and memory follows the keys
/// held or awaited, never the keys ever seen.
///
/// `K` is the owned key type and lookups take its borrowed form: a `KeyPool<Vec<u8>>` (the
/// default) is locked with `&[u8]`, a `KeyPool<String>` with `&str`, a `KeyPool<u64>` with
/// `&u64`, a `KeyPool<KeyBuf>` (byte strings kept in the slot when short: what
/// [`open`](crate::open) makes for `local:`) with `&KeyBytes`.
///
/// Every key has both modes ([`lock_shared`](Locks::lock_shared)), a fence that rises with each
/// exclusive acquisition, leases and force-unlock, and, in a pool built
/// [`reentrant`](PoolBuilder::reentrant), owners with hold counts.
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
pub type KeyPool<K = Vec<u8>, S = DefaultHashBuilder> = Locks<PoolTable<K, S>>;

/// The table of a [`KeyPool`]: its shards of slots, one slot per key held or awaited. Only
/// named in [`KeyPool`]'s definition; what it does is the front's ([`Locks`]).
pub struct PoolTable<K = Vec<u8>, S = DefaultHashBuilder> {
    /// Shards, made on first use.
    shards: Box<[AtomicPtr<Shard<K>>]>,
    /// `hash >> shift` is the shard (0 for one shard: `shift` is then 64 and unused).
    shift: u32,
    hasher: S,
    policy: Policy,
    /// Fresh slots each shard may allocate before it recycles.
    retain: u32,
    /// The pool for Web Locks names (the [`KeyedLock`](crate::KeyedLock) trait's other key
    /// space), made on first use with the same policy.
    names: std::sync::OnceLock<Arc<KeyPool<Vec<u8>>>>,
}

impl<K, S> fmt::Debug for PoolTable<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPool")
            .field("shards", &self.shards.len())
            .field("fifo", &self.policy.fifo)
            .field("reentrant", &self.policy.reentrant)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq> Default for KeyPool<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K, S> Drop for PoolTable<K, S> {
    fn drop(&mut self) {
        for shard in self.shards.iter() {
            let ptr = shard.load(Ordering::Acquire);
            if !ptr.is_null() {
                // SAFETY: made by `Box::into_raw` in `shard_or_init`; nothing borrows the pool
                // any more (guards and futures borrow it or hold an Arc to it).
                drop(unsafe { Box::from_raw(ptr) });
            }
        }
    }
}

// SAFETY: the shards are shared through `&KeyPool` exactly as `Shard`'s own impls allow.
unsafe impl<K: Send + Sync, S: Sync> Sync for PoolTable<K, S> {}
// SAFETY: as above; the pool owns its shards.
unsafe impl<K: Send, S: Send> Send for PoolTable<K, S> {}

impl Default for PoolBuilder {
    fn default() -> Self {
        Self {
            shards: 64,
            retain: 1024,
            policy: Policy::DEFAULT,
            hasher: random(),
        }
    }
}

impl<K: Hash + Eq> KeyPool<K> {
    /// An empty pool: no shard is allocated until a key is first locked, so this costs one
    /// small allocation.
    pub fn new() -> Self {
        PoolBuilder::default().build()
    }
}

impl KeyPool {
    /// Options: shards, retention, FIFO, reentrancy, hasher. The key type is chosen by
    /// [`PoolBuilder::build`]'s caller.
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }
}

impl<K: Hash + Eq, S: BuildHasher> KeyPool<K, S> {
    /// An empty pool with the given hasher.
    pub fn with_hasher(hasher: S) -> Self {
        PoolBuilder::default().hasher(hasher).build()
    }

    /// The pool for Web Locks names, made now if needed.
    pub(crate) fn names(&self) -> &Arc<KeyPool<Vec<u8>>> {
        self.table.names.get_or_init(|| {
            Arc::new(
                KeyPool::builder()
                    .shards(self.table.shards.len())
                    .fifo(self.table.policy.fifo)
                    .reentrant(self.table.policy.reentrant)
                    .max_holds(self.table.policy.max_holds)
                    .build(),
            )
        })
    }

    /// The names pool, if it was made.
    pub(crate) fn names_if(&self) -> Option<&Arc<KeyPool<Vec<u8>>>> {
        self.table.names.get()
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.table.shards.len()
    }

    /// The most slots the pool can hold given `peak_in_use` slots in use at once at most:
    /// twice the retention allowance plus four times the peak (see the `shard` module's
    /// recycling rules). [`PoolStats::entries_allocated`] never exceeds it.
    pub fn memory_bound(&self, peak_in_use: usize) -> usize {
        self.table.retain as usize * self.table.shards.len()
            + 4 * peak_in_use
            + 4 * self.table.shards.len()
    }

    /// The number of keys held now: a scan of every slot (O(slots)), for monitoring.
    pub fn len(&self) -> usize {
        self.stats().held
    }

    /// Whether no key is held (see [`len`](Self::len)).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters, from a scan of every shard.
    pub fn stats(&self) -> PoolStats {
        let mut stats = PoolStats::default();
        for n in 0..self.table.shards.len() as u32 {
            if let Some(shard) = self.table.shard(n) {
                let s = shard.stats();
                stats.held += s.held;
                stats.waiting += s.waiting;
                stats.queued += s.queued;
                stats.shared_holds += s.shared_holds;
                stats.entries_in_use += s.in_use;
                stats.entries_allocated += s.allocated;
                stats.peak_in_use += s.peak_in_use;
                stats.contended += s.contended;
            }
        }
        stats
    }
}

impl<K: Hash + Eq, S: BuildHasher> PoolTable<K, S> {
    fn build(b: PoolBuilder<S>) -> Self {
        let n = b.shards;
        let retain = (b.retain.saturating_mul(2))
            .div_ceil(n)
            .min(u32::MAX as usize) as u32;
        Self {
            shards: (0..n)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            shift: 64 - n.trailing_zeros(),
            hasher: b.hasher,
            policy: b.policy,
            retain,
            names: std::sync::OnceLock::new(),
        }
    }

    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        hash_of(&self.hasher, key)
    }

    #[inline]
    fn shard_no(&self, hash: u64) -> u32 {
        if self.shards.len() == 1 {
            0
        } else {
            (hash >> self.shift) as u32
        }
    }

    /// The shard `n`, if it exists.
    #[inline]
    fn shard(&self, n: u32) -> Option<&Shard<K>> {
        let ptr = self.shards[n as usize].load(Ordering::Acquire);
        // SAFETY: a non-null shard pointer was published (Release) by `shard_or_init` and is
        // freed only when the pool is dropped.
        (!ptr.is_null()).then(|| unsafe { &*ptr })
    }

    /// The shard `n`, made now if it does not exist yet.
    fn shard_or_init(&self, n: u32) -> &Shard<K> {
        if let Some(shard) = self.shard(n) {
            return shard;
        }
        let fresh = Box::into_raw(Box::new(Shard::new(n)));
        match self.shards[n as usize].compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: just published; freed only when the pool is dropped.
            Ok(_) => unsafe { &*fresh },
            Err(existing) => {
                // SAFETY: `fresh` was never published, so it is ours to free.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: `existing` was published by the thread that won, as above.
                unsafe { &*existing }
            }
        }
    }

    /// The slot an acquisition names, as a guarded entry; `InvalidArgument` for a foreign one.
    #[inline]
    fn guarded_at(&self, at: SlotRef) -> Result<SlotEntry<'_, K>> {
        match self.guarded_if(at) {
            Some(guarded) => Ok(guarded),
            None => Err(Error::InvalidArgument(
                "the acquisition belongs to another lock",
            )),
        }
    }

    /// The slot `at`, if this pool has it.
    #[inline]
    fn guarded_if(&self, at: SlotRef) -> Option<SlotEntry<'_, K>> {
        if at.shard as usize >= self.shards.len() {
            return None;
        }
        let shard = self.shard(at.shard)?;
        let slot = shard.slot_checked(at.slot)?;
        Some(SlotEntry {
            shard,
            slot,
            policy: self.policy,
        })
    }

    /// The fast path: the key's slot from the index, taken with one compare-and-swap. Always
    /// inlined: its callers are each one front end's uncontended path.
    #[inline(always)]
    fn acquire_fast<Q>(&self, hash: u64, key: &Q, mode: Mode) -> Option<(&Slot<K>, u64)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.acquire_fast_by(hash, key, |e| e.try_fast(mode, self.policy.fifo), mode, 0)
    }

    /// The fast path with `take` as the compare-and-swap on the word: a lock's in `mode`
    /// (`units` 0), or a semaphore's of `units`.
    #[inline(always)]
    fn acquire_fast_by<Q>(
        &self,
        hash: u64,
        key: &Q,
        take: impl Fn(&crate::entry::Entry) -> Option<u64>,
        mode: Mode,
        units: u32,
    ) -> Option<(&Slot<K>, u64)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let shard = self.shard(self.shard_no(hash))?;
        // The first slot whose tag matches: the key's, or (rarely) another key's, whose tag is
        // the same or which took the slot since the index was read. Then the full path looks.
        let slot = shard.probe(hash).next()?;
        let fence = take(&slot.entry)?;
        // SAFETY: we hold the slot now, so its key cannot be rewritten.
        if unsafe { slot.key_is(key) } {
            return Some((slot, fence));
        }
        self.let_go(slot, mode, fence, units);
        None
    }

    /// Releases a slot that the fast path took for another key. Out of line, so that the fast
    /// path keeps no registers or stack ready for it.
    #[cold]
    #[inline(never)]
    fn let_go(&self, slot: &Slot<K>, mode: Mode, fence: u64, units: u32) {
        let hold = Hold {
            mode,
            fence,
            ticket: 0,
            owner: None,
            units,
        };
        let _ = guarded::release(&slot.guarded(self.policy), &hold);
    }

    /// Slot `at`, which this pool handed out (no validation).
    #[inline]
    fn own_slot(&self, at: SlotRef) -> &Slot<K> {
        let ptr = self.shards[at.shard as usize].load(Ordering::Acquire);
        // SAFETY: `at` came from this pool, so its shard exists; shards live as long as the pool.
        unsafe { &*ptr }.slot(at.slot)
    }

    #[cold]
    fn acquire_slow<Q>(
        &self,
        hash: u64,
        key: &Q,
        want: &Want,
        wait: Wait,
    ) -> Result<(SlotRef, Grant)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let deadline = wait.deadline();
        let shard_no = self.shard_no(hash);
        let shard = self.shard_or_init(shard_no);
        let mut spun = !want.is_plain() || wait == Wait::No;
        loop {
            let mut locked = shard.lock();
            let n = locked.find_or_insert(hash, key, self.retain);
            let at = SlotRef {
                shard: shard_no,
                slot: n,
            };
            let mut wakes = Wakes::default();
            let entry = &shard.slot(n).entry;
            let attempt =
                entry.acquire_locked(locked.slow(n), want, false, &self.policy, &mut wakes);
            match attempt {
                Attempt::Acquired(grant) => {
                    drop(locked);
                    wakes.run();
                    return Ok((at, grant));
                }
                Attempt::Failed(error) => {
                    drop(locked);
                    wakes.run();
                    return Err(error);
                }
                Attempt::Blocked { .. } => {}
            }
            entry.settle_locked(locked.slow(n));
            if wait == Wait::No {
                drop(locked);
                wakes.run();
                return Err(Error::WouldBlock);
            }
            if !spun {
                // Spin briefly on the fast path before queueing, as parking_lot does.
                drop(locked);
                wakes.run();
                spun = true;
                let mut spin = Spin::default();
                while spin.spin() {
                    if let Some((slot, fence)) = self.acquire_fast(hash, key, want.mode) {
                        return Ok((
                            slot.at,
                            Grant {
                                fence,
                                ticket: 0,
                                lease_until: None,
                                reentered: false,
                            },
                        ));
                    }
                }
                continue;
            }
            locked.reserve(n);
            locked.count_contended();
            let guarded = locked.guarded(n, self.policy);
            wakes.run();
            return self
                .wait_reserved(&guarded, want, wait, deadline)
                .map(|g| (at, g));
        }
    }

    /// Acquires a slot the caller has reserved (the reservation is used up either way).
    fn wait_reserved(
        &self,
        guarded: &SlotEntry<'_, K>,
        want: &Want,
        wait: Wait,
        deadline: Option<Instant>,
    ) -> Result<Grant> {
        guarded::wait_queued(guarded, want, wait, deadline, false)
    }

    /// One attempt on a reserved slot with its shard locked; uses up the reservation unless
    /// the slot is taken (`Blocked`, the caller then waits or unreserves).
    fn attempt_reserved(&self, at: SlotRef, want: &Want) -> Attempt {
        match self.guarded_at(at) {
            Ok(guarded) => front::attempt(self, guarded.slot, want),
            Err(_) => Attempt::Failed(Error::InvalidArgument("no such slot")),
        }
    }

    /// Where `key`'s slot is, if it has one (stable while the key is held).
    pub(crate) fn slot_of<Q>(&self, key: &Q) -> Option<SlotRef>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let shard_no = self.shard_no(hash);
        let shard = self.shard(shard_no)?;
        let n = shard.lock().find(hash, key)?;
        Some(SlotRef {
            shard: shard_no,
            slot: n,
        })
    }
}

// The table's types are the crate's own (see `front::table::Table`).
#[allow(private_interfaces, private_bounds)]
impl<K: Hash + Eq, S: BuildHasher> Table for PoolTable<K, S> {
    type Word = Slot<K>;
    type Guarded<'a>
        = SlotEntry<'a, K>
    where
        Self: 'a;
    const NAME: &'static str = "PoolGuard";

    #[inline]
    fn entry(slot: &Slot<K>) -> &crate::entry::Entry {
        &slot.entry
    }

    #[inline]
    fn guarded<'a>(&'a self, slot: &'a Slot<K>) -> SlotEntry<'a, K> {
        slot.guarded(self.policy)
    }

    #[inline]
    fn place(&self, slot: &Slot<K>) -> u64 {
        slot.at.to_u64()
    }

    #[inline]
    fn word_if(&self, place: u64) -> Option<&Slot<K>> {
        self.guarded_if(SlotRef::from_u64(place))
            .map(|guarded| guarded.slot)
    }

    #[inline]
    fn unreserve(&self, slot: &Slot<K>) {
        slot.unreserve();
    }

    #[inline]
    fn policy(&self) -> Policy {
        self.policy
    }

    fn take_place(&self, place: u64, want: &Want, wait: Wait) -> Result<Grant> {
        let at = SlotRef::from_u64(place);
        match self.attempt_reserved(at, want) {
            Attempt::Acquired(grant) => Ok(grant),
            Attempt::Failed(e) => Err(e),
            Attempt::Blocked { .. } => {
                let guarded = self.guarded_at(at)?;
                if wait == Wait::No {
                    guarded.slot.unreserve();
                    return Err(Error::WouldBlock);
                }
                self.wait_reserved(&guarded, want, wait, wait.deadline())
            }
        }
    }
}

impl<K: Hash + Eq, S: BuildHasher> LockTable for PoolTable<K, S> {}

#[allow(private_interfaces, private_bounds)]
impl<K, S, Q> Find<Q> for PoolTable<K, S>
where
    K: Hash + Eq + Borrow<Q>,
    S: BuildHasher,
    Q: Hash + Eq + ?Sized,
{
    fn place_of(&self, key: &Q) -> Option<u64> {
        self.slot_of(key).map(SlotRef::to_u64)
    }

    fn with_key_locked<R>(
        &self,
        key: &Q,
        f: impl FnOnce(&crate::entry::Entry, &mut SlowState, &Policy, &mut Wakes) -> R,
    ) -> Option<R> {
        let hash = self.hash(key);
        let shard = self.shard(self.shard_no(hash))?;
        let mut locked = shard.lock();
        let n = locked.find(hash, key)?;
        let mut wakes = Wakes::default();
        let out = f(
            &shard.slot(n).entry,
            locked.slow(n),
            &self.policy,
            &mut wakes,
        );
        drop(locked);
        wakes.run();
        Some(out)
    }
}

#[allow(private_interfaces, private_bounds)]
impl<K, S, Q> Take<Q> for PoolTable<K, S>
where
    K: Hash + Eq + Borrow<Q>,
    S: BuildHasher,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    /// The key's hash.
    type Found = u64;

    #[inline]
    fn find(&self, key: &Q) -> u64 {
        self.hash(key)
    }

    #[inline(always)]
    fn take_fast(&self, hash: u64, key: &Q, mode: Mode) -> Option<(&Slot<K>, u64)> {
        self.acquire_fast(hash, key, mode)
    }

    #[inline(always)]
    fn take_fast_units(&self, hash: u64, key: &Q, units: u32) -> Option<(&Slot<K>, u64)> {
        let permits = self.policy.permits;
        self.acquire_fast_by(
            hash,
            key,
            |e| e.try_fast_units(units, permits),
            Mode::Shared,
            units,
        )
    }

    fn take_slow(&self, hash: u64, key: &Q, want: &Want, wait: Wait) -> Result<(&Slot<K>, Grant)> {
        let (at, grant) = self.acquire_slow(hash, key, want, wait)?;
        Ok((self.own_slot(at), grant))
    }

    /// Reserves `key`'s slot: it is not recycled until the reservation is used or dropped.
    fn reserve(&self, hash: u64, key: &Q) -> u64 {
        let shard_no = self.shard_no(hash);
        let mut locked = self.shard_or_init(shard_no).lock();
        let n = locked.find_or_insert(hash, key, self.retain);
        locked.reserve(n);
        SlotRef {
            shard: shard_no,
            slot: n,
        }
        .to_u64()
    }

    fn steal(&self, hash: u64, key: &Q, want: &Want) -> (&Slot<K>, Grant) {
        let shard_no = self.shard_no(hash);
        let shard = self.shard_or_init(shard_no);
        let mut locked = shard.lock();
        let n = locked.find_or_insert(hash, key, self.retain);
        let slot = shard.slot(n);
        let grant = slot.entry.steal_locked(locked.slow(n), want);
        drop(locked);
        (slot, grant)
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
/// fn fence<P: keylock_core::PoolRef>(guard: &PoolGuard<P>) -> u64 {
///     guard.fence()
/// }
/// let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
/// assert_eq!(fence(&pool.lock(&1)), 1);
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

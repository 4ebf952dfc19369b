//! A pool shard: slots at stable addresses, an index that can be read without a lock, and the
//! allocator that recycles unused slots.
//!
//! A **slot** is the lock of one key: an [`Entry`] (the lock word), the key, and the slot's
//! [`SlowState`] (its waiters and holders' state), plus a count of *reservations*: callers that have
//! decided to wait for this slot and will come back to it. Slots live in segments that double
//! in size and never move, so a slot's address is stable for the shard's life.
//!
//! The **index** maps a key's hash to its slot: open addressing over `AtomicU64` cells holding
//! `tag << 48 | slot address` (0 empty, 1 a tombstone; slot addresses fit in 48 bits on every
//! 64-bit platform keylock supports, which is checked when a segment is made). The shard keeps
//! the current cell array's address and mask beside its other hot fields, so a probe is one
//! load of the shard, one of the cell, and then the slot itself. It is changed only under the shard mutex
//! but read without it: the fast path probes it, takes the candidate slot's lock word with one
//! compare-and-swap, and only then compares the key (a holder's key cannot change). A probe that
//! finds nothing, or a slot that turns out to hold another key, falls back to the slow path,
//! which looks again under the mutex. So a reader racing a change sees at worst a miss.
//! Old index arrays replaced by bigger ones stay allocated until the shard is dropped (readers
//! may still be probing them); they add up to less than the current one.
//!
//! **Recycling.** A released key keeps its slot (and stays indexed), so taking it again costs no
//! allocation and no index change. A new key gets a fresh slot while the shard has fewer than
//! its retention allowance, or while it is growing; beyond that it takes a *victim*: an unused
//! slot (free, nothing queued, no reservation), preferring ones not used since the last scan.
//! When the victims run out, one scan of the shard counts the slots in use and collects new
//! victims; if more than half are in use, the shard grows to twice its size instead. Each scan
//! is paid for by the allocations it serves, and the shard never holds more than
//! `max(allowance, 4 × its peak of slots in use)` slots: memory follows the keys held or
//! awaited, never the keys ever seen.
//!
//! **Fences** must keep rising for a key even when it changes slots. When a slot is recycled,
//! its fence joins the shard's `floor`; a slot given to a key starts at least at the floor. Every
//! earlier fence of that key was issued by a slot of this shard that has since been recycled
//! (so it is at most the floor) or by this very slot.

use std::borrow::Borrow;
use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};

use crate::entry::{Entry, Policy, SlowState};
use crate::guarded::GuardedEntry;
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};

/// Slots in the first segment; segment `j` has `BASE << j`.
const BASE: u32 = 4;
const BASE_SHIFT: u32 = BASE.trailing_zeros();
/// Enough segments for 2^32 slots.
const SEGMENTS: usize = 31;
/// Index cells at first.
const INDEX_MIN: usize = 8;

const EMPTY: u64 = 0;
const TOMB: u64 = 1;

/// Bits of a cell that hold the slot's address.
const ADDR_BITS: u32 = 48;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;

#[inline]
fn tag_of(hash: u64) -> u64 {
    hash >> (64 - (64 - ADDR_BITS))
}

#[inline]
fn cell_for<K>(hash: u64, slot: &Slot<K>) -> u64 {
    let addr = slot as *const Slot<K> as u64;
    debug_assert!(addr & !ADDR_MASK == 0 && addr > TOMB);
    (tag_of(hash) << ADDR_BITS) | addr
}

/// The slot a live cell names.
///
/// # Safety
/// `cell` was read from an index of a live shard and is neither `EMPTY` nor `TOMB`: it holds
/// the address of one of that shard's slots, which live as long as the shard.
#[inline]
unsafe fn cell_slot<'a, K>(cell: u64) -> &'a Slot<K> {
    // SAFETY: as the contract says.
    unsafe { &*((cell & ADDR_MASK) as usize as *const Slot<K>) }
}

/// (segment, offset) of slot `n`.
#[inline]
fn locate(n: u32) -> (usize, usize) {
    let v = u64::from(n) + u64::from(BASE);
    let seg = (63 - v.leading_zeros() - BASE_SHIFT) as usize;
    (seg, (v - (u64::from(BASE) << seg)) as usize)
}

/// Where a key's slot is: shard and slot number. Ordered: the canonical order of multi-key
/// acquires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SlotRef {
    pub(crate) shard: u32,
    pub(crate) slot: u32,
}

impl SlotRef {
    pub(crate) fn to_u64(self) -> u64 {
        (u64::from(self.shard) << 32) | u64::from(self.slot)
    }

    pub(crate) fn from_u64(at: u64) -> Self {
        Self {
            shard: (at >> 32) as u32,
            slot: at as u32,
        }
    }
}

/// The lock of one key.
#[allow(unreachable_pub, missing_debug_implementations)] // named by the front's sealed table trait
pub struct Slot<K> {
    pub(crate) entry: Entry,
    /// The shard the slot belongs to (shards never move), and the slot's own place.
    home: *const Shard<K>,
    pub(crate) at: SlotRef,
    /// Waiters that will come back to this slot (see the module docs); the slot is not recycled
    /// while this is non-zero. Raised under the shard mutex, lowered anywhere.
    reservations: AtomicU32,
    /// The key. Written only under the shard mutex while the slot is claimed for recycling (no
    /// holder, no fast path); read by its holders and under the shard mutex.
    key: UnsafeCell<Option<K>>,
    /// Under the shard mutex only.
    slow: UnsafeCell<SlotSide>,
}

struct SlotSide {
    slow: SlowState,
    hash: u64,
}

impl<K> Slot<K> {
    fn new(home: *const Shard<K>, at: SlotRef) -> Self {
        Self {
            entry: Entry::new(),
            home,
            at,
            reservations: AtomicU32::new(0),
            key: UnsafeCell::new(None),
            slow: UnsafeCell::new(SlotSide {
                slow: SlowState::new(),
                hash: 0,
            }),
        }
    }

    /// Whether the slot holds `key`.
    ///
    /// # Safety
    /// The caller holds the slot (in either mode) or the shard mutex, so that the key cannot be
    /// rewritten meanwhile.
    #[inline]
    pub(crate) unsafe fn key_is<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        // SAFETY: the caller keeps writers out, as the contract says.
        unsafe { (*self.key.get()).as_ref() }.is_some_and(|k| k.borrow() == key)
    }

    /// The slot as a guarded entry, with `policy`.
    #[inline]
    pub(crate) fn guarded(&self, policy: Policy) -> SlotEntry<'_, K> {
        SlotEntry {
            // SAFETY: a slot lives inside its shard's segments, so the shard outlives it.
            shard: unsafe { &*self.home },
            slot: self,
            policy,
        }
    }

    /// Drops a reservation (the waiter finished, or will not wait after all).
    #[inline]
    pub(crate) fn unreserve(&self) {
        self.reservations.fetch_sub(1, Ordering::Release);
    }
}

/// An index array.
struct Index {
    mask: usize,
    cells: Box<[AtomicU64]>,
}

impl Index {
    fn new(cap: usize) -> Box<Self> {
        Box::new(Self {
            mask: cap - 1,
            cells: (0..cap).map(|_| AtomicU64::new(EMPTY)).collect(),
        })
    }
}

/// What the shard mutex guards, besides every slot's slow state.
struct ShardState {
    /// Slots allocated.
    slots: u32,
    /// Index cells holding a slot, and tombstones.
    live: usize,
    tombs: usize,
    /// Unused slots found by the last scan, to recycle.
    victims: Vec<u32>,
    /// Fresh slots may be allocated until there are this many.
    grow_until: u32,
    /// The highest fence of any slot recycled so far.
    floor: u64,
    /// The most slots in use that a scan has counted.
    peak_in_use: usize,
    /// Acquisitions that found their key held and queued.
    contended: u64,
    /// Index arrays replaced by bigger ones, kept for readers that may still probe their cells
    /// (the cells are a heap allocation of their own, so moving an `Index` leaves them put).
    retired: Vec<Index>,
}

/// One shard of a pool.
pub(crate) struct Shard<K> {
    /// The current index's cells and mask, for probes without the mutex. Published cells
    /// first, then the mask (a reader that sees a new mask sees the new cells; an old mask is
    /// within either array).
    cells: AtomicPtr<AtomicU64>,
    mask: AtomicUsize,
    /// This shard's number in its pool.
    number: u32,
    /// The current index (owner of `cells`).
    index: AtomicPtr<Index>,
    segments: [AtomicPtr<Slot<K>>; SEGMENTS],
    state: Mutex<ShardState>,
}

// SAFETY: slots are shared between threads through `&Shard`. Their cells are only touched as
// documented on `Slot` (the key under the shard mutex or by its holder, the slow state under the shard
// mutex), and keys are moved between threads only as owned values (hence `K: Send`); readers
// compare keys from several threads at once (hence `K: Sync`).
unsafe impl<K: Send + Sync> Sync for Shard<K> {}
// SAFETY: as above; the shard owns its slots and keys.
unsafe impl<K: Send> Send for Shard<K> {}

/// The shard mutex held, with one slot's slow state.
pub(crate) struct SlotLocked<'a, K> {
    _state: MutexGuard<'a, ShardState>,
    slot: &'a Slot<K>,
}

impl<K> Deref for SlotLocked<'_, K> {
    type Target = SlowState;
    fn deref(&self) -> &SlowState {
        // SAFETY: the shard mutex is held (`_state`), which guards every slot's slow state.
        unsafe { &(*self.slot.slow.get()).slow }
    }
}

impl<K> DerefMut for SlotLocked<'_, K> {
    fn deref_mut(&mut self) -> &mut SlowState {
        // SAFETY: as in `deref`, and `&mut self` is the only access through this guard.
        unsafe { &mut (*self.slot.slow.get()).slow }
    }
}

/// A slot of a shard as a [`GuardedEntry`].
#[allow(unreachable_pub, missing_debug_implementations)] // named by the front's sealed table trait
pub struct SlotEntry<'a, K> {
    pub(crate) shard: &'a Shard<K>,
    pub(crate) slot: &'a Slot<K>,
    pub(crate) policy: Policy,
}

impl<K> GuardedEntry for SlotEntry<'_, K> {
    type Locked<'b>
        = SlotLocked<'b, K>
    where
        Self: 'b;

    #[inline]
    fn entry(&self) -> &Entry {
        &self.slot.entry
    }

    #[inline]
    fn lock(&self) -> SlotLocked<'_, K> {
        SlotLocked {
            _state: self.shard.state.lock(),
            slot: self.slot,
        }
    }

    #[inline]
    fn policy(&self) -> Policy {
        self.policy
    }

    #[inline]
    fn waiter_done(&self) {
        self.slot.unreserve();
    }
}

/// The shard mutex held, for finding and making slots.
pub(crate) struct ShardLocked<'a, K> {
    shard: &'a Shard<K>,
    state: MutexGuard<'a, ShardState>,
}

/// Counters of one shard, gathered by a scan.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ShardStats {
    pub(crate) held: usize,
    pub(crate) waiting: usize,
    pub(crate) queued: usize,
    pub(crate) shared_holds: usize,
    pub(crate) in_use: usize,
    pub(crate) allocated: usize,
    pub(crate) peak_in_use: usize,
    pub(crate) contended: u64,
}

impl<K> Shard<K> {
    pub(crate) fn new(number: u32) -> Self {
        let index = Box::into_raw(Index::new(INDEX_MIN));
        // SAFETY: just made; freed only when the shard is dropped.
        let cells = unsafe { (*index).cells.as_ptr().cast_mut() };
        Self {
            cells: AtomicPtr::new(cells),
            mask: AtomicUsize::new(INDEX_MIN - 1),
            number,
            index: AtomicPtr::new(index),
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            state: Mutex::new(ShardState {
                slots: 0,
                live: 0,
                tombs: 0,
                victims: Vec::new(),
                grow_until: 0,
                floor: 0,
                peak_in_use: 0,
                contended: 0,
                retired: Vec::new(),
            }),
        }
    }

    /// Slot `n`, which must have been allocated (every slot number in an index cell was).
    #[inline]
    pub(crate) fn slot(&self, n: u32) -> &Slot<K> {
        let (seg, off) = locate(n);
        let base = self.segments[seg].load(Ordering::Acquire);
        debug_assert!(!base.is_null());
        // SAFETY: slot `n` was allocated (its segment pointer was published with Release
        // before any index cell or guard could name it) and segments are freed only when the
        // shard is dropped; `off` is within the segment by `locate`.
        unsafe { &*base.add(off) }
    }

    /// Slot `n` if it exists (has been allocated): for numbers from outside (acquisition
    /// records), which must be checked.
    #[inline]
    pub(crate) fn slot_checked(&self, n: u32) -> Option<&Slot<K>> {
        let (seg, off) = locate(n);
        let base = self.segments.get(seg)?.load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: the segment exists (published with Release before any slot number in it was
        // handed out), is freed only when the shard is dropped, and `off` is within it.
        Some(unsafe { &*base.add(off) })
    }

    /// The slots whose tag matches `hash`'s, in probe order. Read without the mutex (the fast
    /// path takes the first candidate's lock word, then compares its key, and leaves anything
    /// else to the slow path), a candidate must be verified so; under it, by comparing keys.
    #[inline]
    pub(crate) fn probe(&self, hash: u64) -> Probe<'_, K> {
        let mask = self.mask.load(Ordering::Acquire);
        let cells = self.cells.load(Ordering::Acquire);
        Probe {
            cells,
            mask,
            pos: hash as usize & mask,
            left: mask + 1,
            tag: tag_of(hash),
            _shard: std::marker::PhantomData,
        }
    }

    /// Locks the shard.
    #[inline]
    pub(crate) fn lock(&self) -> ShardLocked<'_, K> {
        ShardLocked {
            shard: self,
            state: self.state.lock(),
        }
    }

    /// Counters, from a scan under the mutex.
    pub(crate) fn stats(&self) -> ShardStats {
        let locked = self.lock();
        let mut stats = ShardStats {
            allocated: locked.state.slots as usize,
            peak_in_use: locked.state.peak_in_use,
            contended: locked.state.contended,
            ..ShardStats::default()
        };
        for n in 0..locked.state.slots {
            let slot = self.slot(n);
            if slot.entry.is_held() {
                stats.held += 1;
            }
            stats.waiting += slot.reservations.load(Ordering::Acquire) as usize;
            stats.shared_holds += slot.entry.shared_holders();
            // SAFETY: we hold the shard mutex, under which the wait list changes.
            stats.queued += unsafe { (*slot.slow.get()).slow.waiters.len() };
            if locked.in_use(slot) {
                stats.in_use += 1;
            }
        }
        stats.peak_in_use = stats.peak_in_use.max(stats.in_use);
        stats
    }
}

impl<K> Drop for Shard<K> {
    fn drop(&mut self) {
        for seg in 0..SEGMENTS {
            let base = self.segments[seg].load(Ordering::Relaxed);
            if base.is_null() {
                continue;
            }
            let len = (BASE as usize) << seg;
            // SAFETY: the segment was made by `Box::into_raw` of a boxed slice of `len` slots in
            // `grow_segment`, and nothing else can reach it once the shard is being dropped.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, len)) });
        }
        // SAFETY: the current index was made by `Box::into_raw` and is ours alone now.
        drop(unsafe { Box::from_raw(self.index.load(Ordering::Relaxed)) });
    }
}

/// Candidate slots for a hash, from an index read without the mutex.
pub(crate) struct Probe<'a, K> {
    cells: *const AtomicU64,
    mask: usize,
    pos: usize,
    left: usize,
    tag: u64,
    _shard: std::marker::PhantomData<&'a Shard<K>>,
}

impl<'a, K> Iterator for Probe<'a, K> {
    type Item = &'a Slot<K>;

    #[inline]
    fn next(&mut self) -> Option<&'a Slot<K>> {
        while self.left > 0 {
            // SAFETY: `cells` has at least `mask + 1` cells (a mask is published only after
            // its array, and older masks are smaller), and cell arrays are freed only when the
            // shard is dropped, which the `'a` borrow of the shard rules out.
            let cell = unsafe { &*self.cells.add(self.pos) }.load(Ordering::Acquire);
            self.pos = (self.pos + 1) & self.mask;
            self.left -= 1;
            if cell == EMPTY {
                self.left = 0;
                return None;
            }
            if cell != TOMB && cell >> ADDR_BITS == self.tag {
                // SAFETY: a live cell of this shard's index.
                return Some(unsafe { cell_slot(cell) });
            }
        }
        None
    }
}

impl<'a, K> ShardLocked<'a, K> {
    /// The slot as a guarded entry, with the shard mutex released.
    pub(crate) fn guarded(self, slot: u32, policy: Policy) -> SlotEntry<'a, K> {
        SlotEntry {
            shard: self.shard,
            slot: self.shard.slot(slot),
            policy,
        }
    }

    /// Slot `n`'s slow state, under the mutex.
    pub(crate) fn slow(&mut self, n: u32) -> &mut SlowState {
        let slot = self.shard.slot(n);
        // SAFETY: we hold the shard mutex, which guards every slot's slow state, and `&mut self`
        // keeps this the only reference made through this guard.
        unsafe { &mut (*slot.slow.get()).slow }
    }

    fn hash_of(&self, n: u32) -> u64 {
        // SAFETY: as in `slow`; a shared read.
        unsafe { (*self.shard.slot(n).slow.get()).hash }
    }

    /// Counts one more acquisition that had to wait.
    pub(crate) fn count_contended(&mut self) {
        self.state.contended += 1;
    }

    /// Reserves slot `n` for a waiter: it will not be recycled until the reservation is
    /// dropped.
    pub(crate) fn reserve(&mut self, n: u32) {
        self.shard
            .slot(n)
            .reservations
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a slot is in use: held, queued or reserved, or with holder state.
    fn in_use(&self, slot: &Slot<K>) -> bool {
        // SAFETY: we hold the shard mutex (slow state reads).
        let slow = unsafe { &(*slot.slow.get()).slow };
        !slot.entry.looks_unused()
            || slot.reservations.load(Ordering::Acquire) != 0
            || !slow.waiters.is_empty()
            || slow.has_holder_state()
    }

    /// The slot of `key` (with hash `hash`), looked up under the mutex.
    pub(crate) fn find<Q>(&self, hash: u64, key: &Q) -> Option<u32>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.shard
            .probe(hash)
            // SAFETY: we hold the shard mutex, so the key is not being rewritten.
            .find(|slot| unsafe { slot.key_is(key) })
            .map(|slot| slot.at.slot)
    }

    /// The slot of `key`, giving it one if it has none (see the module docs on recycling).
    pub(crate) fn find_or_insert<Q>(&mut self, hash: u64, key: &Q, retain: u32) -> u32
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(n) = self.find(hash, key) {
            return n;
        }
        let n = self.allocate(retain);
        let slot = self.shard.slot(n);
        // SAFETY: slot `n` is claimed (SLOW, no holder, no fast path can take it) or fresh,
        // and we hold the shard mutex: nobody reads or writes its key or slow state meanwhile.
        unsafe {
            match &mut *slot.key.get() {
                Some(stored) => key.clone_into(stored),
                stored @ None => *stored = Some(key.to_owned()),
            }
            (*slot.slow.get()).hash = hash;
        }
        // Open the slot before indexing it: the index cell is what lets the fast path reach
        // the slot, and it must find the slot's word as reopened here.
        slot.entry.reopen(self.state.floor, false);
        self.index_insert(hash, n);
        n
    }

    /// A slot for a new key, claimed: fresh, or recycled.
    fn allocate(&mut self, retain: u32) -> u32 {
        loop {
            let slots = self.state.slots;
            if slots < retain || slots < self.state.grow_until {
                return self.fresh();
            }
            while let Some(v) = self.state.victims.pop() {
                if self.try_recycle(v) {
                    return v;
                }
            }
            // Out of victims: scan for new ones, or grow.
            let (in_use, victims) = self.scan();
            self.state.peak_in_use = self.state.peak_in_use.max(in_use);
            if in_use * 2 > slots as usize || victims.is_empty() {
                self.state.grow_until = slots.saturating_mul(2).max(BASE);
                continue;
            }
            self.state.victims = victims;
        }
    }

    /// Counts the slots in use and collects the unused ones, preferring those not used since
    /// the last scan (their `REF` bit is clear); clears the bits for the next round.
    fn scan(&mut self) -> (usize, Vec<u32>) {
        let mut in_use = 0;
        let mut cold = Vec::new();
        let mut warm = Vec::new();
        for n in 0..self.state.slots {
            let slot = self.shard.slot(n);
            if self.in_use(slot) {
                in_use += 1;
                continue;
            }
            if slot.entry.referenced() {
                // Second chance: clear REF; it is a victim only if no cold slot is found.
                let _ = slot.entry.try_claim(true);
                warm.push(n);
            } else {
                cold.push(n);
            }
        }
        // Victims are popped from the back: put the coldest last.
        let victims = if cold.is_empty() { warm } else { cold };
        (in_use, victims.into_iter().rev().collect())
    }

    /// Claims slot `v` for another key if it is still unused; takes it out of the index.
    fn try_recycle(&mut self, v: u32) -> bool {
        let slot = self.shard.slot(v);
        if !slot.entry.try_claim(false) {
            return false;
        }
        if self.in_use_claimed(slot) {
            slot.entry.unclaim();
            return false;
        }
        self.state.floor = self.state.floor.max(slot.entry.fence());
        let hash = self.hash_of(v);
        self.index_remove(hash, v);
        true
    }

    /// Like `in_use`, for a slot we have claimed (its word shows SLOW).
    fn in_use_claimed(&self, slot: &Slot<K>) -> bool {
        // SAFETY: we hold the shard mutex (slow state reads).
        let slow = unsafe { &(*slot.slow.get()).slow };
        slot.reservations.load(Ordering::Acquire) != 0
            || !slow.waiters.is_empty()
            || slow.has_holder_state()
    }

    /// A fresh slot, allocating its segment if needed. Fresh slots are claimed too: their
    /// word is free, and nothing can name them until they are indexed.
    fn fresh(&mut self) -> u32 {
        let n = self.state.slots;
        let (seg, off) = locate(n);
        if off == 0 {
            let len = (BASE as usize) << seg;
            let home: *const Shard<K> = self.shard;
            let shard = self.shard.number;
            let segment: Box<[Slot<K>]> = (0..len as u32)
                .map(|i| Slot::new(home, SlotRef { shard, slot: n + i }))
                .collect();
            let base = Box::into_raw(segment).cast::<Slot<K>>();
            // Index cells hold slot addresses in 48 bits: true of every 64-bit platform's
            // user-space heap that keylock supports (x86-64, AArch64 with 48-bit addresses).
            let end = base as usize as u64 + (len * std::mem::size_of::<Slot<K>>()) as u64;
            assert!(
                end <= ADDR_MASK,
                "keylock: a heap address above 2^48; this platform is not supported"
            );
            self.shard.segments[seg].store(base, Ordering::Release);
        }
        self.state.slots = n + 1;
        n
    }

    /// Adds `hash -> n` to the index, growing or cleaning it first if it is too full.
    fn index_insert(&mut self, hash: u64, n: u32) {
        // SAFETY: the current index is freed only on drop; we hold the mutex, so it is also
        // not replaced while we use it.
        let mut index = unsafe { &*self.shard.index.load(Ordering::Acquire) };
        if (self.state.live + self.state.tombs + 1) * 2 > index.cells.len() {
            if (self.state.live + 1) * 4 > index.cells.len() {
                index = self.index_grow(index.cells.len() * 2);
            } else {
                self.index_rebuild(index);
            }
        }
        let mut pos = hash as usize & index.mask;
        loop {
            let cell = index.cells[pos].load(Ordering::Relaxed);
            if cell == EMPTY || cell == TOMB {
                if cell == TOMB {
                    self.state.tombs -= 1;
                }
                index.cells[pos].store(cell_for(hash, self.shard.slot(n)), Ordering::Release);
                self.state.live += 1;
                return;
            }
            pos = (pos + 1) & index.mask;
        }
    }

    /// Takes `hash -> n` out of the index.
    fn index_remove(&mut self, hash: u64, n: u32) {
        // SAFETY: as in `index_insert`.
        let index = unsafe { &*self.shard.index.load(Ordering::Acquire) };
        let want = cell_for(hash, self.shard.slot(n));
        let mut pos = hash as usize & index.mask;
        for _ in 0..index.cells.len() {
            let cell = index.cells[pos].load(Ordering::Relaxed);
            if cell == EMPTY {
                break;
            }
            if cell == want {
                index.cells[pos].store(TOMB, Ordering::Release);
                self.state.live -= 1;
                self.state.tombs += 1;
                return;
            }
            pos = (pos + 1) & index.mask;
        }
        debug_assert!(false, "slot {n} was not indexed");
    }

    /// The live cells of `index`.
    fn live_cells(index: &Index) -> Vec<u64> {
        index
            .cells
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .filter(|&c| c != EMPTY && c != TOMB)
            .collect()
    }

    /// Places `cells` in `index`, which must have room.
    fn place(&self, index: &Index, cells: &[u64]) {
        for &cell in cells {
            // SAFETY: a live cell of this shard's index; we hold the mutex (slow state read).
            let hash = unsafe { (*cell_slot::<K>(cell).slow.get()).hash };
            let mut pos = hash as usize & index.mask;
            while index.cells[pos].load(Ordering::Relaxed) != EMPTY {
                pos = (pos + 1) & index.mask;
            }
            index.cells[pos].store(cell, Ordering::Release);
        }
    }

    /// Replaces the index with one of `cap` cells; the old one is retired, not freed.
    fn index_grow(&mut self, cap: usize) -> &'a Index {
        // SAFETY: as in `index_insert`.
        let old = unsafe { &*self.shard.index.load(Ordering::Acquire) };
        let cells = Self::live_cells(old);
        let new = Index::new(cap);
        self.place(&new, &cells);
        let new = Box::into_raw(new);
        let old = self.shard.index.swap(new, Ordering::AcqRel);
        // Publish the cells before the mask (see `Shard::cells`).
        // SAFETY: just published; freed only when the shard is dropped.
        let cells = unsafe { (*new).cells.as_ptr().cast_mut() };
        self.shard.cells.store(cells, Ordering::Release);
        self.shard.mask.store(cap - 1, Ordering::Release);
        // SAFETY: `old` came from `Box::into_raw`; readers may still probe it, so it is kept
        // (not freed) until the shard is dropped.
        self.state.retired.push(*unsafe { Box::from_raw(old) });
        self.state.tombs = 0;
        // SAFETY: just published; freed only on drop.
        unsafe { &*new }
    }

    /// Rewrites the index in place without tombstones. Readers probing meanwhile may miss a
    /// key; they then take the slow path, which waits for this mutex.
    fn index_rebuild(&mut self, index: &Index) {
        let cells = Self::live_cells(index);
        for cell in index.cells.iter() {
            cell.store(EMPTY, Ordering::Release);
        }
        self.place(index, &cells);
        self.state.tombs = 0;
    }
}

#[cfg(all(test, not(keylock_loom)))]
mod tests {
    use super::*;

    #[test]
    fn segments_tile_the_slot_numbers() {
        let mut expect = (0usize, 0usize);
        for n in 0..10_000u32 {
            assert_eq!(locate(n), expect, "slot {n}");
            expect.1 += 1;
            if expect.1 == (BASE as usize) << expect.0 {
                expect = (expect.0 + 1, 0);
            }
        }
    }

    #[test]
    fn cells_round_trip() {
        let shard: Shard<u64> = Shard::new(3);
        let slot = Slot::new(&shard, SlotRef { shard: 3, slot: 9 });
        for hash in [0u64, u64::MAX, 0x1234_5678_9abc_def0] {
            let cell = cell_for(hash, &slot);
            assert!(cell != EMPTY && cell != TOMB);
            // SAFETY: `slot` is alive for the whole test.
            let back: &Slot<u64> = unsafe { cell_slot(cell) };
            assert!(std::ptr::eq(back, &slot));
            assert_eq!(cell >> ADDR_BITS, tag_of(hash));
        }
    }
}

//! The state of one lock, and every rule about it: a stripe, a pool key and the RwLock's writer
//! side are each one [`Entry`].
//!
//! An entry is a 64-bit lock word plus the high half of its fence. The word alone decides the
//! uncontended cases, with one compare-and-swap to acquire and one to release (the fast path).
//! Everything else (waiters, leases, owners and hold counts, force-unlock, the fence wrapping
//! round) happens in the slow path, under the lock that guards the entry's [`SlowState`]: the stripe's
//! queue mutex, or the pool shard's mutex.
//!
//! # The lock word
//!
//! ```text
//!  63                                19 18             4   3     2      1      0
//! +------------------------------------+----------------+-----+------+--------+------+
//! |        fence, low 45 bits          | shared holders | REF | SLOW | QUEUED | EXCL |
//! +------------------------------------+----------------+-----+------+--------+------+
//! ```
//!
//! - `EXCL`: held by one exclusive holder.
//! - `QUEUED`: the wait list may be non-empty, so a release must take the slow path and look at
//!   it, and no shared acquire may join current holders ahead of the queue (FIFO: a shared
//!   request behind a waiting exclusive one waits). Set and cleared only under the queue lock.
//! - `SLOW`: the holders' state does not fit in the word (a lease, an owner and hold count), or
//!   the entry is being changed under the queue lock (a pool slot given to another key, the
//!   fence wrapping). Every acquire and release then takes the slow path. Set and cleared only
//!   under the queue lock; outside those transient changes, `SLOW` is set exactly when
//!   [`SlowState`] has holder state.
//! - `REF`: set by every acquire; the pool's eviction clears it (second chance), so that
//!   recently used keys keep their entries.
//! - shared holders: 15 bits, so at most [`MAX_SHARED`] at once; further shared requests wait.
//! - fence: the low 45 bits of the current fence; the high bits are in [`Entry`]'s `hi`, which
//!   changes only when the low bits wrap round, under the queue lock while the entry is `SLOW`.
//!
//! # Semaphores
//!
//! A lock object with `permits` (a [`KeyedSemaphore`](crate::KeyedSemaphore)) uses the same word
//! by another rule: the holders field counts *units* held (at most `permits`), every
//! acquisition takes its weight in units and advances the fence (so every permit has a fence of
//! its own, and fences rise per key across all acquisitions), and `EXCL` is never set. A word
//! without `SLOW` has at most one holder, which the word describes whole (its units, and the
//! fence, which is its own): its release is one compare-and-swap of that exact word. A second
//! holder lists both beside the word ([`SlowState`]) and sets `SLOW`, so releases look their
//! acquisition up there until the list empties. Waiters are served strictly in order: a request
//! whose units do not fit waits, and so does everyone behind it (a heavy request at the head is
//! never starved by light ones arriving after it; light requests do not pass it, as in tokio's
//! semaphore, since letting them pass is what starves it).
//!
//! A release checks its acquisition's fence *in the same compare-and-swap* that frees the lock,
//! so a stale release (after a force-unlock, a lease expiry, or a release already made) can
//! never free a later holder: the word it expects no longer exists.
//!
//! # Fences
//!
//! An exclusive acquisition adds one to the fence; so do a force-unlock and the end of an
//! exclusive lease. Shared holders read the current fence (the one the last exclusive holder or
//! force-unlock left), so a shared acquisition's identity is "shared, in this fence's epoch":
//! anything that ends the epoch ends its holders.

use std::time::Instant;

use crate::acquisition::{LockInfo, Mode, Owner, Want};
use crate::error::Error;
use crate::sync::{AtomicU64, Ordering};
use crate::wait::{Attempt, FairClock, Grant, WaitList, Wakes};

/// Bit 0: held by one exclusive holder.
const EXCL: u64 = 1 << 0;
/// Bit 1: waiters may be queued (see the module docs).
const QUEUED: u64 = 1 << 1;
/// Bit 2: every operation takes the slow path (see the module docs).
const SLOW: u64 = 1 << 2;
/// Bit 3: used since the pool's eviction hand last passed.
pub(crate) const REF: u64 = 1 << 3;
const READER_SHIFT: u32 = 4;
const READER_ONE: u64 = 1 << READER_SHIFT;
const READER_BITS: u32 = 15;
const READERS: u64 = ((1 << READER_BITS) - 1) << READER_SHIFT;
/// The most shared holders one entry can have at once; further shared requests wait.
pub(crate) const MAX_SHARED: u64 = (1 << READER_BITS) - 1;
const FENCE_SHIFT: u32 = READER_SHIFT + READER_BITS;
const FENCE_ONE: u64 = 1 << FENCE_SHIFT;
/// Bits of the fence kept in the word.
const LO_BITS: u32 = 64 - FENCE_SHIFT;
const LO_MAX: u64 = (1 << LO_BITS) - 1;

#[inline]
const fn lo(word: u64) -> u64 {
    word >> FENCE_SHIFT
}

#[inline]
const fn readers(word: u64) -> u64 {
    (word & READERS) >> READER_SHIFT
}

#[inline]
const fn with_lo(word: u64, lo: u64) -> u64 {
    (word & (FENCE_ONE - 1)) | (lo << FENCE_SHIFT)
}

/// How a lock object serves its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Hand every release to the next waiter and never let a newcomer take a lock that has
    /// waiters (strict FIFO, as Web Locks specifies). Otherwise a released lock may be taken by
    /// a running caller before the woken waiter gets to it, unless that waiter has waited
    /// [`FAIR_AFTER`](crate::wait::FAIR_AFTER) and the entry has not handed its lock over that
    /// way for as long (eventual fairness, parking_lot's choice, with its fair-unlock timer).
    pub(crate) fifo: bool,
    /// An exclusive acquire by the owner that holds the entry exclusively succeeds at once.
    pub(crate) reentrant: bool,
    /// The largest hold count of a reentrant holder.
    pub(crate) max_holds: u32,
    /// A semaphore's units per key (see the module docs); 0 for a lock.
    pub(crate) permits: u32,
}

impl Policy {
    /// The default reentrant hold-count limit (2^16).
    pub(crate) const DEFAULT_MAX_HOLDS: u32 = 1 << 16;

    pub(crate) const DEFAULT: Policy = Policy {
        fifo: false,
        reentrant: false,
        max_holds: Self::DEFAULT_MAX_HOLDS,
        permits: 0,
    };

    /// The most permits a semaphore can have per key.
    pub(crate) const MAX_PERMITS: u32 = MAX_SHARED as u32;

    /// `want` as this policy sees it: owners matter only to reentrant locks; a semaphore's
    /// acquire takes `units` (its weight), a lock's none. A weight the policy refuses becomes
    /// `u32::MAX` units, which [`Entry::acquire_locked`] refuses with `InvalidArgument`.
    #[inline]
    pub(crate) fn normalize(&self, mut want: Want) -> Want {
        if !self.reentrant {
            want.owner = None;
        }
        if self.permits == 0 {
            want.units = if want.units == 1 { 0 } else { u32::MAX };
        } else {
            want.mode = Mode::Shared;
            if want.units == 0 {
                want.units = u32::MAX;
            }
        }
        want
    }

    /// Why `want` (normalized) cannot be served by this policy, if it cannot.
    #[inline]
    fn refuses(&self, want: &Want) -> Option<Error> {
        if self.permits == 0 {
            (want.units != 0).then_some(Error::InvalidArgument(
                "a lock's acquisition has weight 1; only a semaphore takes more units",
            ))
        } else {
            (want.units == 0 || want.units > self.permits).then_some(Error::InvalidArgument(
                "a semaphore's weight is at least 1 and at most its permits",
            ))
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Holder state that does not fit in the word; present exactly while the word has `SLOW`.
#[derive(Debug, Default)]
struct HolderDetail {
    /// The exclusive holder's owner (reentrant locks).
    owner: Option<Owner>,
    /// The exclusive holder's hold count (1 unless reentered).
    holds: u32,
    /// When the exclusive holder's lease ends.
    lease: Option<Instant>,
    /// Leased shared holders: (ticket, when the lease ends).
    shared: Vec<(u64, Instant)>,
    /// A semaphore's holders, while there are several or any has a lease.
    units: Vec<UnitHold>,
}

/// One holder of a semaphore's units, listed beside the word.
#[derive(Debug, Clone, Copy)]
struct UnitHold {
    fence: u64,
    units: u32,
    lease: Option<Instant>,
}

impl HolderDetail {
    fn is_empty(&self) -> bool {
        self.owner.is_none()
            && self.lease.is_none()
            && self.shared.is_empty()
            && self.units.is_empty()
    }

    fn earliest(&self) -> Option<Instant> {
        let shared = self
            .shared
            .iter()
            .map(|&(_, t)| t)
            .chain(self.units.iter().filter_map(|u| u.lease))
            .min();
        match (self.lease, shared) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// What lives beside an entry under its queue lock: its waiters and its holders' extra state.
#[derive(Debug, Default)]
pub(crate) struct SlowState {
    pub(crate) waiters: WaitList,
    /// Exclusive waiters that were notified (unlinked, the lock released for them) and have not
    /// come back yet. While any is out, `QUEUED` stays set, so that no shared request joins or
    /// takes the lock ahead of the writer it queued behind (FIFO between modes).
    notified: u32,
    ext: Option<Box<HolderDetail>>,
    /// Tickets for leased shared holders, never reused within this entry.
    next_ticket: u64,
    /// When this entry last handed its lock to a waiting thread (eventual fairness).
    fair: FairClock,
}

impl SlowState {
    pub(crate) const fn new() -> Self {
        Self {
            waiters: WaitList::new(),
            notified: 0,
            ext: None,
            next_ticket: 0,
            fair: FairClock::new(),
        }
    }

    /// Whether holder state is kept here (the entry is then `SLOW`).
    #[inline]
    pub(crate) fn has_holder_state(&self) -> bool {
        self.ext.is_some()
    }

    /// When the earliest lease among the holders ends.
    pub(crate) fn earliest_lease(&self) -> Option<Instant> {
        self.ext.as_ref().and_then(|e| e.earliest())
    }
}

/// An acquisition as the entry sees it: enough to check it is still current and to end it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) mode: Mode,
    pub(crate) fence: u64,
    pub(crate) ticket: u64,
    pub(crate) owner: Option<Owner>,
    /// A semaphore's units held (0 for a lock's hold).
    pub(crate) units: u32,
}

impl Hold {
    /// The hold a grant for `want` gives.
    pub(crate) fn of(want: &Want, grant: Grant) -> Self {
        Self {
            mode: if grant.reentered {
                Mode::Exclusive
            } else if want.units != 0 {
                Mode::Shared
            } else {
                want.mode
            },
            fence: grant.fence,
            ticket: grant.ticket,
            owner: want.owner,
            units: want.units,
        }
    }
}

/// A guard's record of its hold: the fence and mode inline, the rest (lease, owner, ticket)
/// boxed, since plain acquisitions have none of it and a guard should stay a few words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GuardHold {
    pub(crate) fence: u64,
    /// The mode and the units in one number (see [`shape`]) in the low half, so that a lock's
    /// release tests one thing, as it did before semaphores, and a permit without a lease is
    /// released by the fast path too; [`BOXED`] when `extra` is there. One word: a plain
    /// exclusive hold is `kind == 0`, one test of one value, which the compiler settles on the
    /// path where the guard was made (with two fields it tested them where the fast path's
    /// guard and the slow path's meet: StripedLock's loop, 71 instructions against 66). A whole
    /// word also leaves no padding bytes: a guard that moves (out of a future, say) is copied
    /// word by word (with padding beside a `u32`, StripedLock's `lock_async` awaited in a task
    /// took 64 instructions, 55 without).
    kind: u64,
    extra: Option<Box<HoldExtra>>,
}

/// A hold's mode and units as one number: 0 exclusive, 1 shared, `1 + units` a semaphore's.
#[inline]
pub(crate) const fn shape(mode: Mode, units: u32) -> u32 {
    if units != 0 {
        units.saturating_add(1)
    } else {
        mode as u32
    }
}

/// The mode of a hold of `shape`.
#[inline]
pub(crate) const fn shape_mode(shape: u32) -> Mode {
    if shape == 0 {
        Mode::Exclusive
    } else {
        Mode::Shared
    }
}

/// [`GuardHold`]'s `kind` bit for a record with its `extra` boxed.
const BOXED: u64 = 1 << 32;

/// The units of a hold of `shape` (0 for a lock's).
#[inline]
pub(crate) const fn shape_units(shape: u32) -> u32 {
    shape.saturating_sub(1)
}

/// What a [`GuardHold`] boxes: a lease, an owner, a ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HoldExtra {
    ticket: u64,
    owner: Option<Owner>,
    lease_until: Option<Instant>,
}

impl GuardHold {
    /// A plain hold (no lease, no owner).
    #[inline]
    pub(crate) fn plain(mode: Mode, fence: u64) -> Self {
        Self {
            fence,
            kind: mode as u64,
            extra: None,
        }
    }

    /// The record as its three words, moved out (a call out of line gets them in registers,
    /// where the record itself would be passed through memory).
    #[inline]
    pub(crate) fn into_parts(self) -> (u64, u64, Option<Box<HoldExtra>>) {
        (self.fence, self.kind, self.extra)
    }

    /// The record of [`into_parts`](Self::into_parts)'s words.
    #[inline]
    pub(crate) fn from_parts(fence: u64, kind: u64, extra: Option<Box<HoldExtra>>) -> Self {
        Self { fence, kind, extra }
    }

    /// The record of a grant for `want`.
    #[inline]
    pub(crate) fn of(want: &Want, grant: Grant) -> Self {
        let hold = Hold::of(want, grant);
        let extra =
            (hold.ticket != 0 || hold.owner.is_some() || grant.lease_until.is_some()).then(|| {
                Box::new(HoldExtra {
                    ticket: hold.ticket,
                    owner: hold.owner,
                    lease_until: grant.lease_until,
                })
            });
        Self {
            fence: hold.fence,
            kind: u64::from(shape(hold.mode, hold.units)) | if extra.is_some() { BOXED } else { 0 },
            extra,
        }
    }

    /// The hold's mode and units (see [`shape`]).
    #[inline]
    pub(crate) fn shape(&self) -> u32 {
        self.kind as u32
    }

    /// Sets the hold's mode and units (see [`shape`]).
    #[inline]
    pub(crate) fn set_shape(&mut self, shape: u32) {
        self.kind = (self.kind & BOXED) | u64::from(shape);
    }

    /// Whether the hold is plain (nothing boxed), so the fast path can release it.
    #[inline]
    pub(crate) fn is_plain(&self) -> bool {
        self.kind & BOXED == 0
    }

    /// Whether the hold is plain and exclusive: the guard's inline release.
    #[inline]
    pub(crate) fn is_plain_exclusive(&self) -> bool {
        self.kind == 0
    }

    /// The entry's view of the hold.
    #[inline]
    pub(crate) fn hold(&self) -> Hold {
        Hold {
            mode: self.mode(),
            fence: self.fence,
            ticket: self.extra.as_ref().map_or(0, |e| e.ticket),
            owner: self.extra.as_ref().and_then(|e| e.owner),
            units: shape_units(self.shape()),
        }
    }

    /// The hold's mode.
    #[inline]
    pub(crate) fn mode(&self) -> Mode {
        shape_mode(self.shape())
    }

    /// When the lease ends, if there is one.
    #[inline]
    pub(crate) fn lease_until(&self) -> Option<Instant> {
        self.extra.as_ref().and_then(|e| e.lease_until)
    }

    /// Records a new lease end (after a successful extend).
    pub(crate) fn set_lease(&mut self, until: Instant) {
        match self.extra.as_mut() {
            Some(e) => e.lease_until = Some(until),
            None => {
                self.extra = Some(Box::new(HoldExtra {
                    ticket: 0,
                    owner: None,
                    lease_until: Some(until),
                }));
                self.kind |= BOXED;
            }
        }
    }
}

/// When a lease of `lease` taken now ends (far in the future for an absurdly long one).
pub(crate) fn lease_end(lease: std::time::Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(lease)
        .unwrap_or(now + std::time::Duration::from_secs(1 << 40))
}

/// One lock: the word and the high half of the fence. See the module docs.
#[derive(Debug)]
pub(crate) struct Entry {
    word: AtomicU64,
    hi: AtomicU64,
}

impl Default for Entry {
    fn default() -> Self {
        Self::new()
    }
}

impl Entry {
    #[cfg(not(keylock_loom))]
    pub(crate) const fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
            hi: AtomicU64::new(0),
        }
    }

    #[cfg(keylock_loom)]
    pub(crate) fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
            hi: AtomicU64::new(0),
        }
    }

    /// The full fence of a word read from this entry.
    #[inline]
    fn fence_of(&self, word: u64) -> u64 {
        (self.hi.load(Ordering::Acquire) << LO_BITS) | lo(word)
    }

    /// The current fence (a snapshot).
    #[inline]
    pub(crate) fn fence(&self) -> u64 {
        self.fence_of(self.word.load(Ordering::Acquire))
    }

    /// Whether anyone holds the entry, in either mode (a snapshot; leases that ended but were
    /// not yet noticed still count).
    #[inline]
    pub(crate) fn is_held(&self) -> bool {
        self.word.load(Ordering::Relaxed) & (EXCL | READERS) != 0
    }

    /// The number of shared holders (a snapshot, as [`is_held`](Self::is_held)).
    #[inline]
    pub(crate) fn shared_holders(&self) -> usize {
        readers(self.word.load(Ordering::Relaxed)) as usize
    }

    /// Whether waiters may be queued (a snapshot).
    #[inline]
    pub(crate) fn is_queued(&self) -> bool {
        self.word.load(Ordering::Relaxed) & QUEUED != 0
    }

    // ---- fast path ----

    /// Takes the entry in `mode` with one compare-and-swap, if the word alone allows it.
    /// Returns the acquisition's fence. `fifo`: do not take a free lock that has waiters.
    #[inline]
    pub(crate) fn try_fast(&self, mode: Mode, fifo: bool) -> Option<u64> {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let new = match mode {
                Mode::Exclusive => {
                    let busy = EXCL | SLOW | READERS | if fifo { QUEUED } else { 0 };
                    if word & busy != 0 || lo(word) == LO_MAX {
                        return None;
                    }
                    (word + FENCE_ONE) | EXCL | REF
                }
                Mode::Shared => {
                    if word & (EXCL | SLOW | QUEUED) != 0 || readers(word) == MAX_SHARED {
                        return None;
                    }
                    (word + READER_ONE) | REF
                }
            };
            match self
                .word
                .compare_exchange_weak(word, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(self.fence_of(new)),
                Err(now) => word = now,
            }
        }
    }

    /// Releases a plain acquisition with one compare-and-swap, if the word alone allows it:
    /// `false` sends the caller to the slow path (waiters to wake, holder state, or an
    /// acquisition that is not current, which the slow path reports).
    #[inline]
    pub(crate) fn release_fast(&self, mode: Mode, fence: u64) -> bool {
        if mode == Mode::Exclusive {
            return self.release_exclusive_cas(fence) || self.release_exclusive_rest(fence);
        }
        self.release_fast_loop(mode, fence & LO_MAX)
    }

    /// The exclusive fast release once [`release_exclusive_cas`](Self::release_exclusive_cas)
    /// failed: the word without `REF` (cleared by the pool's eviction hand); `false` for the
    /// slow path otherwise.
    #[inline]
    pub(crate) fn release_exclusive_rest(&self, fence: u64) -> bool {
        if cfg!(keylock_mutant_unfenced) {
            return self.release_fast_loop(Mode::Exclusive, fence & LO_MAX);
        }
        self.release_fast_unref(fence & LO_MAX)
    }

    /// The exclusive fast release's one compare-and-swap: a plain exclusive holder's word is
    /// exactly this (an acquire sets REF); anything else (REF cleared by the pool's eviction
    /// hand, QUEUED, SLOW, another fence) is `false`, for [`release_fast`](Self::release_fast)
    /// and the slow path to sort out. (In the `keylock_mutant_unfenced` build always `false`:
    /// there the fence-blind loop releases.)
    #[inline]
    pub(crate) fn release_exclusive_cas(&self, fence: u64) -> bool {
        if cfg!(keylock_mutant_unfenced) {
            return false;
        }
        let held = ((fence & LO_MAX) << FENCE_SHIFT) | EXCL | REF;
        self.word
            .compare_exchange(held, held & !EXCL, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes `units` units of a free semaphore entry with one compare-and-swap (the word then
    /// describes its sole holder; see the module docs). `None` when the entry is held, queued
    /// or `SLOW`, and for a weight the semaphore refuses (the slow path says why).
    #[inline]
    pub(crate) fn try_fast_units(&self, units: u32, permits: u32) -> Option<u64> {
        if units == 0 || units > permits {
            return None;
        }
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if word & (EXCL | SLOW | QUEUED | READERS) != 0 || lo(word) == LO_MAX {
                return None;
            }
            let new = (word + FENCE_ONE + u64::from(units) * READER_ONE) | REF;
            match self
                .word
                .compare_exchange_weak(word, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(self.fence_of(new)),
                Err(now) => word = now,
            }
        }
    }

    /// Releases a semaphore's sole holder with one compare-and-swap of the exact word it left
    /// (its fence and units; `REF` set or cleared by the pool's eviction hand). Anything else
    /// (other holders listed, waiters, a lease, a stale hold) goes to the slow path.
    #[inline]
    pub(crate) fn release_fast_units(&self, fence: u64, units: u32) -> bool {
        let held = ((fence & LO_MAX) << FENCE_SHIFT) | (u64::from(units) << READER_SHIFT);
        let free = held & !READERS;
        self.word
            .compare_exchange(held | REF, free | REF, Ordering::Release, Ordering::Relaxed)
            .is_ok()
            || self
                .word
                .compare_exchange(held, free, Ordering::Release, Ordering::Relaxed)
                .is_ok()
    }

    /// The fast release of a plain hold: a lock's (`units` 0) or a semaphore's.
    #[inline]
    pub(crate) fn release_fast_hold(&self, mode: Mode, fence: u64, units: u32) -> bool {
        if units == 0 {
            self.release_fast(mode, fence)
        } else {
            self.release_fast_units(fence, units)
        }
    }

    /// The fast release of a plain hold of [`shape`]: an exclusive hold (the common case)
    /// costs the one test it did before semaphores.
    #[inline]
    pub(crate) fn release_fast_shape(&self, shape: u32, fence: u64) -> bool {
        match shape {
            0 => self.release_fast(Mode::Exclusive, fence),
            1 => self.release_fast(Mode::Shared, fence),
            n => self.release_fast_units(fence, n - 1),
        }
    }

    /// The fast release of a shared hold (and of any hold in the `keylock_mutant_unfenced`
    /// build): the word must be read first, for the holder count.
    #[inline(never)]
    fn release_fast_loop(&self, mode: Mode, want_lo: u64) -> bool {
        // `keylock_mutant_unfenced`: a deliberately broken build for `make loom-mutants`,
        // whose release ignores the fence, as the old stripe release did.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            #[cfg(keylock_mutant_unfenced)]
            let want_lo = lo(word);
            let new = match mode {
                Mode::Exclusive => {
                    if word & !REF != (want_lo << FENCE_SHIFT) | EXCL {
                        return false;
                    }
                    word & !EXCL
                }
                Mode::Shared => {
                    let n = readers(word);
                    if word & (EXCL | SLOW) != 0
                        || lo(word) != want_lo
                        || n == 0
                        || (n == 1 && word & QUEUED != 0)
                    {
                        return false;
                    }
                    word - READER_ONE
                }
            };
            match self
                .word
                .compare_exchange_weak(word, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => word = now,
            }
        }
    }

    /// The exclusive fast release when the pool's eviction hand has cleared `REF`.
    #[cold]
    fn release_fast_unref(&self, want_lo: u64) -> bool {
        let held = (want_lo << FENCE_SHIFT) | EXCL;
        self.word
            .compare_exchange(
                held,
                want_lo << FENCE_SHIFT,
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Whether `hold` is still current, read from the word alone (a snapshot). Leased shared
    /// holds need the slow path ([`Entry::is_current_locked`]).
    #[inline]
    pub(crate) fn is_current_fast(&self, hold: &Hold) -> bool {
        let word = self.word.load(Ordering::Acquire);
        if self.fence_of(word) != hold.fence {
            return false;
        }
        match hold.mode {
            Mode::Exclusive => word & EXCL != 0,
            Mode::Shared => word & EXCL == 0 && readers(word) > 0,
        }
    }

    // ---- slow path: every function below requires the queue lock that guards `slow` ----

    /// Stores `word`'s update `f` with a compare-and-swap loop: under the queue lock the word
    /// can still be changed by fast-path shared acquires and releases (when neither `QUEUED` nor
    /// `SLOW` is set), so every slow-path change goes through here. `f` returns `None` to give up.
    #[inline]
    fn update(&self, mut f: impl FnMut(u64) -> Option<u64>) -> Option<(u64, u64)> {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            let new = f(word)?;
            match self
                .word
                .compare_exchange(word, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some((word, new)),
                Err(now) => word = now,
            }
        }
    }

    /// `word` with the fence advanced by one, wrapping the low bits into `hi` when they are
    /// full. Call only with the queue lock held and the entry free of holders; the caller
    /// stores the returned word (it does, through `set_claimed`, when `wrapped`).
    fn advance(&self, word: u64) -> (u64, bool) {
        if lo(word) == LO_MAX {
            (with_lo(word, 0), true)
        } else {
            (word + FENCE_ONE, false)
        }
    }

    /// Applies a change that advances the fence, handling a wrap: the entry is first claimed
    /// (`SLOW`, so no fast path runs), then `hi` is raised, then the final word is stored.
    /// Requires the queue lock. `make` builds the new word from the current one (advanced) and
    /// returns `None` when the change no longer applies. Returns (old, new).
    fn update_advancing(&self, mut make: impl FnMut(u64) -> Option<u64>) -> Option<(u64, u64)> {
        loop {
            let word = self.word.load(Ordering::Acquire);
            let (advanced, wrapped) = self.advance(word);
            let new = make(advanced)?;
            if !wrapped {
                if self
                    .word
                    .compare_exchange(word, new, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Some((word, new));
                }
                continue;
            }
            // Claim: with SLOW set, fast paths stop and the word is ours until we store it.
            if self
                .word
                .compare_exchange(word, word | SLOW, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            let hi = self.hi.load(Ordering::Relaxed);
            self.hi.store(hi + 1, Ordering::Release);
            self.word.store(new, Ordering::Release);
            return Some((word, new));
        }
    }

    /// Whether the word, read now, is held against a plain request in `mode`, so that an
    /// attempt with the queue locked would be blocked unless the word changes first: held in a
    /// conflicting mode, and no slow state (a lease that may have run out) to look at.
    #[inline]
    pub(crate) fn held_against(&self, mode: Mode) -> bool {
        let word = self.word.load(Ordering::Acquire);
        word & SLOW == 0 && !Self::compatible(word, mode)
    }

    /// Whether a waiter queued ahead of a request blocks it: FIFO for everyone in `fifo` mode;
    /// otherwise only shared requests that would join current holders.
    #[inline]
    fn compatible(word: u64, mode: Mode) -> bool {
        match mode {
            Mode::Exclusive => word & (EXCL | READERS) == 0,
            Mode::Shared => word & EXCL == 0 && readers(word) < MAX_SHARED,
        }
    }

    /// The `SLOW` and `QUEUED` bits a word should carry given the slow state.
    #[inline]
    fn flags_for(word: u64, slow: &SlowState) -> u64 {
        let mut word = word & !(SLOW | QUEUED);
        if slow.ext.is_some() {
            word |= SLOW;
        }
        if !slow.waiters.is_empty() || slow.notified > 0 {
            word |= QUEUED;
        }
        word
    }

    /// Records the holder state `want` needs, for an acquisition just made. Returns its
    /// ticket (leased shared holds) and its lease's end.
    fn add_holder(slow: &mut SlowState, want: &Want) -> (u64, Option<Instant>) {
        let lease_until = want.lease.map(lease_end);
        if want.is_plain() {
            return (0, None);
        }
        (Self::add_holder_state(slow, want, lease_until), lease_until)
    }

    fn add_holder_state(slow: &mut SlowState, want: &Want, lease_until: Option<Instant>) -> u64 {
        match want.mode {
            Mode::Exclusive => {
                let ext = slow.ext.get_or_insert_with(Default::default);
                ext.owner = want.owner;
                ext.holds = 1;
                ext.lease = lease_until;
                0
            }
            Mode::Shared => match lease_until {
                Some(until) => {
                    slow.next_ticket += 1;
                    let ticket = slow.next_ticket;
                    let ext = slow.ext.get_or_insert_with(Default::default);
                    ext.shared.push((ticket, until));
                    ticket
                }
                None => 0,
            },
        }
    }

    /// Drops the exclusive holder's state.
    fn clear_exclusive(slow: &mut SlowState) {
        if let Some(ext) = slow.ext.as_mut() {
            ext.owner = None;
            ext.holds = 0;
            ext.lease = None;
            if ext.is_empty() {
                slow.ext = None;
            }
        }
    }

    /// Whether `units` more units of a semaphore with `permits` fit in `word`.
    /// (`keylock_mutant_overfull`: a deliberately broken build for `make loom-mutants`, which
    /// lets one unit too many in.)
    #[inline]
    fn units_fit(word: u64, units: u32, permits: u32) -> bool {
        let cap = u64::from(permits) + u64::from(cfg!(keylock_mutant_overfull));
        word & EXCL == 0 && readers(word) + u64::from(units) <= cap.min(MAX_SHARED)
    }

    /// Takes `want.units` units of a semaphore's entry, if they fit now (the caller has checked
    /// that nobody queued is ahead). Advances the fence: the grant's fence is the acquisition's
    /// own. See the module docs for when holders are listed beside the word.
    fn take_units_locked(&self, slow: &mut SlowState, want: &Want, permits: u32) -> Option<Grant> {
        let units = want.units;
        let lease_until = want.lease.map(lease_end);
        loop {
            let word = self.word.load(Ordering::Acquire);
            if !Self::units_fit(word, units, permits) {
                return None;
            }
            if word & SLOW == 0 && readers(word) > 0 {
                // A sole holder, described by the word: list it, and set SLOW so that no fast
                // path changes the word while holders are listed.
                if self
                    .word
                    .compare_exchange(word, word | SLOW, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    slow.ext
                        .get_or_insert_with(Default::default)
                        .units
                        .push(UnitHold {
                            fence: self.fence_of(word),
                            units: readers(word) as u32,
                            lease: None,
                        });
                }
                continue;
            }
            let listed = word & SLOW != 0 || lease_until.is_some();
            let done = self.update_advancing(|w| {
                // A fast-path acquire may have taken the word meanwhile: start again.
                let sole = w & SLOW == 0 && readers(w) > 0;
                (Self::units_fit(w, units, permits) && !sole).then(|| {
                    (w + u64::from(units) * READER_ONE) | REF | if listed { SLOW } else { 0 }
                })
            });
            let Some((_, new)) = done else { continue };
            let fence = self.fence_of(new);
            if listed {
                slow.ext
                    .get_or_insert_with(Default::default)
                    .units
                    .push(UnitHold {
                        fence,
                        units,
                        lease: lease_until,
                    });
            }
            return Some(Grant {
                fence,
                ticket: 0,
                lease_until,
                reentered: false,
            });
        }
    }

    /// A semaphore's acquire with the queue lock held: as [`acquire_locked`](Self::acquire_locked)
    /// for a lock, but nobody passes a waiter (strict FIFO).
    fn acquire_units_locked(
        &self,
        slow: &mut SlowState,
        want: &Want,
        front: bool,
        policy: &Policy,
    ) -> Attempt {
        let ahead = !front && (!slow.waiters.is_empty() || slow.notified > 0);
        let mut queued_now = false;
        loop {
            if !ahead && let Some(grant) = self.take_units_locked(slow, want, policy.permits) {
                self.fix_flags(slow);
                return Attempt::Acquired(grant);
            }
            if self.word.load(Ordering::Acquire) & QUEUED != 0 || queued_now {
                return Attempt::Blocked {
                    recheck_at: slow.earliest_lease(),
                };
            }
            // Announce the waiter, then look again (as for a lock): a release after this sees
            // QUEUED and takes the slow path, which finds our node.
            let _ = self.update(|w| Some(w | QUEUED));
            queued_now = true;
        }
    }

    /// Whether the semaphore hold `hold` is current: listed beside the word, or the word's
    /// sole holder.
    fn units_current(&self, slow: &SlowState, hold: &Hold, word: u64) -> bool {
        match slow.ext.as_deref() {
            Some(ext) => ext
                .units
                .iter()
                .any(|u| u.fence == hold.fence && u.units == hold.units),
            None => {
                word & (SLOW | EXCL) == 0
                    && readers(word) == u64::from(hold.units)
                    && self.fence_of(word) == hold.fence
            }
        }
    }

    /// Takes the entry for `want` now if the word and the queue allow it; else sets `QUEUED`
    /// (so that releases look at the queue) and reports `Blocked`. `front`: the caller was
    /// notified and lost, so nobody queued is ahead of it.
    pub(crate) fn acquire_locked(
        &self,
        slow: &mut SlowState,
        want: &Want,
        front: bool,
        policy: &Policy,
        wakes: &mut Wakes,
    ) -> Attempt {
        if front {
            // A notified waiter is back.
            debug_assert!(slow.notified > 0);
            slow.notified = slow.notified.saturating_sub(1);
        }
        self.expire_locked(slow, policy, wakes);
        if let Some(error) = policy.refuses(want) {
            return Attempt::Failed(error);
        }
        if want.units != 0 {
            return self.acquire_units_locked(slow, want, front, policy);
        }
        // Reentrancy: the exclusive holder's owner asks again (in either mode).
        if let (true, Some(owner)) = (policy.reentrant, want.owner) {
            let word = self.word.load(Ordering::Acquire);
            if let Some(ext) = slow.ext.as_mut().filter(|e| e.owner == Some(owner)) {
                debug_assert!(word & EXCL != 0);
                if ext.holds >= policy.max_holds {
                    return Attempt::Failed(Error::ReentrancyLimit);
                }
                ext.holds += 1;
                return Attempt::Acquired(Grant {
                    fence: self.fence_of(word),
                    ticket: 0,
                    lease_until: ext.lease,
                    reentered: true,
                });
            }
        }
        // Someone asked before us: queued, or notified and on the way back. An exclusive request
        // may still take a free lock ahead of them (eventual fairness) unless `fifo`; a shared
        // one never goes ahead of them.
        let ahead = !front && (!slow.waiters.is_empty() || slow.notified > 0);
        let mut queued_now = false;
        loop {
            let word = self.word.load(Ordering::Acquire);
            let blocked_by_queue = ahead && (policy.fifo || want.mode == Mode::Shared);
            if !Self::compatible(word, want.mode) || blocked_by_queue {
                if word & QUEUED != 0 || queued_now {
                    return Attempt::Blocked {
                        recheck_at: slow.earliest_lease(),
                    };
                }
                // Announce the waiter first, then look again: a release that ran before this
                // saw no QUEUED and freed the lock (we take it below); one that runs after must
                // take the queue lock we hold, and so will find our node.
                let _ = self.update(|w| Some(w | QUEUED));
                queued_now = true;
                continue;
            }
            let done = match want.mode {
                Mode::Exclusive => self.update_advancing(|w| {
                    if !Self::compatible(w, Mode::Exclusive) {
                        return None;
                    }
                    Some(w | EXCL | REF)
                }),
                Mode::Shared => self.update(|w| {
                    if !Self::compatible(w, Mode::Shared) {
                        return None;
                    }
                    Some((w + READER_ONE) | REF)
                }),
            };
            let Some((_, new)) = done else { continue };
            let (ticket, lease_until) = Self::add_holder(slow, want);
            self.fix_flags(slow);
            return Attempt::Acquired(Grant {
                fence: self.fence_of(new),
                ticket,
                lease_until,
                reentered: false,
            });
        }
    }

    /// Clears a `QUEUED` bit that an attempt set for a waiter that did not queue after all.
    pub(crate) fn settle_locked(&self, slow: &SlowState) {
        self.fix_flags(slow);
    }

    /// Makes `SLOW` and `QUEUED` match the slow state after a change to it.
    #[inline]
    fn fix_flags(&self, slow: &SlowState) {
        let _ = self.update(|w| {
            let fixed = Self::flags_for(w, slow);
            (fixed != w).then_some(fixed)
        });
    }

    /// Ends the holds whose leases have run out; the fence advances for an exclusive one. The
    /// freed entry is handed on to waiters. Returns whether anything ended.
    ///
    /// Every acquire and release under the queue lock calls this; an entry without leases (no
    /// `ext`) returns here, inline, and only one with leases calls the body.
    #[inline]
    pub(crate) fn expire_locked(
        &self,
        slow: &mut SlowState,
        policy: &Policy,
        wakes: &mut Wakes,
    ) -> bool {
        slow.ext.is_some() && self.expire_leases(slow, policy, wakes)
    }

    /// [`expire_locked`](Self::expire_locked) for an entry with an `ext`.
    #[inline(never)]
    fn expire_leases(&self, slow: &mut SlowState, policy: &Policy, wakes: &mut Wakes) -> bool {
        let Some(earliest) = slow.earliest_lease() else {
            return false;
        };
        let now = Instant::now();
        if earliest > now {
            return false;
        }
        let ext = slow.ext.as_mut().expect("a lease is kept in ext");
        if ext.lease.is_some_and(|t| t <= now) {
            // The exclusive holder's lease ended: free the entry and advance the fence.
            let _ = self.update_advancing(|w| Some(w & !EXCL));
            Self::clear_exclusive(slow);
        }
        if let Some(ext) = slow.ext.as_mut() {
            let before = ext.shared.len();
            ext.shared.retain(|&(_, t)| t > now);
            let ended = (before - ext.shared.len()) as u64;
            if ended > 0 {
                let _ = self.update(|w| Some(w - ended * READER_ONE));
            }
            let held: u64 = ext.units.iter().map(|u| u64::from(u.units)).sum();
            ext.units.retain(|u| u.lease.is_none_or(|t| t > now));
            let left: u64 = ext.units.iter().map(|u| u64::from(u.units)).sum();
            if held > left {
                let _ = self.update(|w| Some(w - (held - left) * READER_ONE));
            }
            if ext.is_empty() {
                slow.ext = None;
            }
        }
        self.fix_flags(slow);
        self.dispatch_locked(slow, policy, wakes);
        true
    }

    /// Hands the entry on to the waiters at the head of the queue that it can serve now: one
    /// exclusive waiter, or every shared waiter up to the next exclusive one. A waiter that is
    /// due (or every waiter, in `fifo` mode) is granted the lock directly; otherwise the head is
    /// notified and competes for it, unless a waiter notified before is still on its way back.
    /// Clears `QUEUED` when the queue empties.
    pub(crate) fn dispatch_locked(&self, slow: &mut SlowState, policy: &Policy, wakes: &mut Wakes) {
        while let Some(want) = slow.waiters.front_want() {
            if want.units != 0 {
                // A semaphore grants its head whenever the head's units fit, and stops at the
                // first that does not (strict FIFO).
                let Some(grant) = self.take_units_locked(slow, &want, policy.permits) else {
                    break;
                };
                let head = slow.waiters.pop_front().expect("the list has a head");
                wakes.push(head.grant(grant));
                continue;
            }
            if want.mode == Mode::Exclusive
                && !slow.waiters.front_is_due(policy.fifo, &mut slow.fair)
            {
                // Notify: the lock stays free and the waiter competes for it again (a running
                // caller may take it first: eventual fairness).
                // At most one notified waiter is on its way back at a time: waking another
                // for each release would only send more threads to find the lock taken again
                // (and the releaser into the kernel each time). The one out comes back and
                // competes, or hands its notification on if it leaves; a due waiter is still
                // granted the lock below.
                if !Self::compatible(self.word.load(Ordering::Acquire), want.mode)
                    || slow.notified > 0
                {
                    break;
                }
                let head = slow.waiters.pop_front().expect("the list has a head");
                slow.notified += 1;
                wakes.push(head.notify());
                break;
            }
            // Grant: take the entry on the head's behalf, checking compatibility in the same
            // compare-and-swap (a fast-path acquirer may take a free lock at any moment).
            // (`keylock_mutant_unchecked_grant`: a deliberately broken build for
            // `make loom-mutants`, which checks compatibility before the CAS instead.)
            let checked = !cfg!(keylock_mutant_unchecked_grant)
                || Self::compatible(self.word.load(Ordering::Acquire), want.mode);
            let ok =
                |w: u64| cfg!(keylock_mutant_unchecked_grant) || Self::compatible(w, want.mode);
            let done = if !checked {
                None
            } else {
                match want.mode {
                    Mode::Exclusive => self.update_advancing(|w| ok(w).then_some(w | EXCL | REF)),
                    Mode::Shared => self.update(|w| ok(w).then_some((w + READER_ONE) | REF)),
                }
            };
            let Some((_, new)) = done else { break };
            let head = slow.waiters.pop_front().expect("the list has a head");
            let (ticket, lease_until) = Self::add_holder(slow, &want);
            let fence = self.fence_of(new);
            wakes.push(head.grant(Grant {
                fence,
                ticket,
                lease_until,
                reentered: false,
            }));
            if want.mode == Mode::Exclusive {
                break;
            }
        }
        self.fix_flags(slow);
    }

    /// The queue lock is held and a waiter has left without the lock (`notified`: it had been
    /// notified and not come back): hand on what it leaves.
    pub(crate) fn leave_locked(
        &self,
        slow: &mut SlowState,
        notified: bool,
        policy: &Policy,
        wakes: &mut Wakes,
    ) {
        if notified {
            slow.notified = slow.notified.saturating_sub(1);
        }
        self.dispatch_locked(slow, policy, wakes);
    }

    /// Whether `hold` is the current acquisition (or one of the current shared ones).
    fn check_locked(&self, slow: &SlowState, hold: &Hold, word: u64) -> bool {
        if hold.units != 0 {
            return self.units_current(slow, hold, word);
        }
        if self.fence_of(word) != hold.fence && !cfg!(keylock_mutant_unfenced) {
            return false;
        }
        match hold.mode {
            Mode::Exclusive => {
                word & EXCL != 0
                    && slow
                        .ext
                        .as_ref()
                        .and_then(|e| e.owner)
                        .is_none_or(|owner| hold.owner == Some(owner))
            }
            Mode::Shared => {
                word & EXCL == 0
                    && readers(word) > 0
                    && (hold.ticket == 0
                        || slow
                            .ext
                            .as_ref()
                            .is_some_and(|e| e.shared.iter().any(|&(t, _)| t == hold.ticket)))
            }
        }
    }

    /// Whether `hold` is current, after ending what has expired.
    pub(crate) fn is_current_locked(
        &self,
        slow: &mut SlowState,
        hold: &Hold,
        policy: &Policy,
        wakes: &mut Wakes,
    ) -> bool {
        self.expire_locked(slow, policy, wakes);
        self.check_locked(slow, hold, self.word.load(Ordering::Acquire))
    }

    /// Releases `hold` (one hold of a reentrant holder). `Err(stale)` when it is not current;
    /// the caller says which error that is (`NotOwner` or `LeaseExpired`).
    pub(crate) fn release_locked(
        &self,
        slow: &mut SlowState,
        hold: &Hold,
        policy: &Policy,
        wakes: &mut Wakes,
    ) -> Result<(), ()> {
        self.expire_locked(slow, policy, wakes);
        let word = self.word.load(Ordering::Acquire);
        if !self.check_locked(slow, hold, word) {
            return Err(());
        }
        if hold.units != 0 {
            if let Some(ext) = slow.ext.as_mut() {
                ext.units.retain(|u| u.fence != hold.fence);
                if ext.is_empty() {
                    slow.ext = None;
                }
            }
            let _ = self.update(|w| Some(w - u64::from(hold.units) * READER_ONE));
            self.fix_flags(slow);
            self.dispatch_locked(slow, policy, wakes);
            return Ok(());
        }
        match hold.mode {
            Mode::Exclusive => {
                if let Some(ext) = slow.ext.as_mut()
                    && ext.holds > 1
                {
                    ext.holds -= 1;
                    return Ok(());
                }
                Self::clear_exclusive(slow);
                let _ = self.update(|w| Some(w & !EXCL));
            }
            Mode::Shared => {
                if hold.ticket != 0
                    && let Some(ext) = slow.ext.as_mut()
                {
                    ext.shared.retain(|&(t, _)| t != hold.ticket);
                    if ext.is_empty() {
                        slow.ext = None;
                    }
                }
                let _ = self.update(|w| Some(w - READER_ONE));
            }
        }
        self.fix_flags(slow);
        self.dispatch_locked(slow, policy, wakes);
        Ok(())
    }

    /// Sets a new lease end for `hold`. `Err(None)` when it is not current, `Err(Some(e))` for
    /// an acquisition without a lease.
    pub(crate) fn extend_locked(
        &self,
        slow: &mut SlowState,
        hold: &Hold,
        until: Instant,
        policy: &Policy,
        wakes: &mut Wakes,
    ) -> Result<(), Option<Error>> {
        self.expire_locked(slow, policy, wakes);
        let word = self.word.load(Ordering::Acquire);
        if !self.check_locked(slow, hold, word) {
            return Err(None);
        }
        let no_lease = Some(Error::InvalidArgument("the acquisition has no lease"));
        let ext = slow.ext.as_mut().ok_or(no_lease.clone())?;
        if hold.units != 0 {
            return match ext.units.iter_mut().find(|u| u.fence == hold.fence) {
                Some(UnitHold {
                    lease: Some(lease), ..
                }) => {
                    *lease = until;
                    Ok(())
                }
                _ => Err(no_lease),
            };
        }
        match hold.mode {
            Mode::Exclusive => match ext.lease.as_mut() {
                Some(lease) => *lease = until,
                None => return Err(no_lease),
            },
            Mode::Shared => match ext.shared.iter_mut().find(|(t, _)| *t == hold.ticket) {
                Some((_, lease)) if hold.ticket != 0 => *lease = until,
                _ => return Err(no_lease),
            },
        }
        Ok(())
    }

    /// Frees the entry whoever holds it, advancing the fence; hands it on to waiters. Returns
    /// whether it was held.
    pub(crate) fn force_unlock_locked(
        &self,
        slow: &mut SlowState,
        policy: &Policy,
        wakes: &mut Wakes,
    ) -> bool {
        self.expire_locked(slow, policy, wakes);
        let done =
            self.update_advancing(|w| (w & (EXCL | READERS) != 0).then_some(w & !(EXCL | READERS)));
        if done.is_none() {
            return false;
        }
        slow.ext = None;
        self.fix_flags(slow);
        self.dispatch_locked(slow, policy, wakes);
        true
    }

    /// Frees the entry whoever holds it and takes it exclusively for `want` in the same
    /// compare-and-swap, ahead of every queued waiter (the Web Locks `steal`). The fence
    /// advances once, so every previous holder's acquisition is stale. The queue is left as it
    /// was: its head is served when this holder releases. Returns the grant.
    pub(crate) fn steal_locked(&self, slow: &mut SlowState, want: &Want) -> Grant {
        debug_assert_eq!(want.mode, Mode::Exclusive);
        let (_, new) = self
            .update_advancing(|w| Some((w & !(EXCL | READERS)) | EXCL | REF))
            .expect("the change always applies");
        slow.ext = None;
        let (ticket, lease_until) = Self::add_holder(slow, want);
        self.fix_flags(slow);
        Grant {
            fence: self.fence_of(new),
            ticket,
            lease_until,
            reentered: false,
        }
    }

    /// A snapshot of the holders, after ending what has expired; `None` when free.
    pub(crate) fn info_locked(
        &self,
        slow: &mut SlowState,
        policy: &Policy,
        wakes: &mut Wakes,
    ) -> Option<LockInfo> {
        self.expire_locked(slow, policy, wakes);
        let word = self.word.load(Ordering::Acquire);
        let waiters = slow.waiters.len();
        let ext = slow.ext.as_deref();
        let lease_remaining = ext
            .and_then(HolderDetail::earliest)
            .map(|t| t.saturating_duration_since(Instant::now()));
        if word & EXCL != 0 {
            Some(LockInfo {
                fence: self.fence_of(word),
                mode: Mode::Exclusive,
                holders: 1,
                holds: ext.map_or(1, |e| e.holds.max(1)),
                owner: ext.and_then(|e| e.owner),
                lease_remaining,
                waiters,
                units: 1,
            })
        } else if readers(word) > 0 {
            let units = readers(word) as u32;
            Some(LockInfo {
                fence: self.fence_of(word),
                mode: Mode::Shared,
                holders: if policy.permits == 0 {
                    units
                } else {
                    ext.map_or(1, |e| e.units.len() as u32)
                },
                holds: 1,
                owner: None,
                lease_remaining,
                waiters,
                units,
            })
        } else {
            None
        }
    }

    // ---- pool slots: recycling an entry for another key (shard lock held) ----

    /// Claims a free, unused entry so that it can be given to another key: succeeds only if
    /// nobody holds it and nothing is queued or kept beside it; the entry then stays `SLOW`
    /// (no fast path can take it) until [`Entry::reopen`]. Clears `REF` first if it is set and
    /// `second_chance` (the eviction hand gives recently used entries another round) and fails.
    pub(crate) fn try_claim(&self, second_chance: bool) -> bool {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & (EXCL | READERS | QUEUED | SLOW) != 0 {
                return false;
            }
            let (new, claims) = if second_chance && word & REF != 0 {
                (word & !REF, false)
            } else {
                (word | SLOW, true)
            };
            match self
                .word
                .compare_exchange(word, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return claims,
                Err(now) => word = now,
            }
        }
    }

    /// Whether the word shows the entry unused (free, nothing queued, no holder state): a
    /// candidate for recycling.
    #[inline]
    pub(crate) fn looks_unused(&self) -> bool {
        self.word.load(Ordering::Relaxed) & (EXCL | READERS | QUEUED | SLOW) == 0
    }

    /// Whether the `REF` bit is set.
    #[inline]
    pub(crate) fn referenced(&self) -> bool {
        self.word.load(Ordering::Relaxed) & REF != 0
    }

    /// Ends a claim: the entry's fence becomes at least `floor` and the entry is free (or held
    /// exclusively by the claimer, with `hold`, returning its fence).
    pub(crate) fn reopen(&self, floor: u64, hold: bool) -> u64 {
        let current = self.fence();
        let base = current.max(floor);
        // The claimed word is ours: no fast path runs while SLOW is set.
        let (hi, mut lo_part) = (base >> LO_BITS, base & LO_MAX);
        let mut hi = hi;
        let mut word = 0;
        if hold {
            if lo_part == LO_MAX {
                hi += 1;
                lo_part = 0;
            } else {
                lo_part += 1;
            }
            word |= EXCL | REF;
        }
        self.hi.store(hi, Ordering::Relaxed);
        self.word.store(with_lo(word, lo_part), Ordering::Release);
        (hi << LO_BITS) | lo_part
    }

    /// Ends a claim without recycling: the entry goes back as it was (free), `REF` cleared.
    pub(crate) fn unclaim(&self) {
        let _ = self.update(|w| Some(w & !(SLOW | REF)));
    }

    /// Test hook: sets the fence (the entry must be free and unqueued).
    #[cfg(all(test, not(keylock_loom)))]
    pub(crate) fn set_fence_for_test(&self, fence: u64) {
        self.hi.store(fence >> LO_BITS, Ordering::Relaxed);
        self.word
            .store(with_lo(0, fence & LO_MAX), Ordering::Relaxed);
    }
}

#[cfg(all(test, not(keylock_loom)))]
mod tests {
    use super::*;

    fn plain(mode: Mode) -> Want {
        Want {
            mode,
            lease: None,
            owner: None,
            units: 0,
        }
    }

    #[test]
    fn word_layout_adds_up() {
        assert_eq!(FENCE_SHIFT + LO_BITS, 64);
        assert_eq!(READERS & (EXCL | QUEUED | SLOW | REF), 0);
        assert_eq!(READERS >> READER_SHIFT, MAX_SHARED);
        assert_eq!(LO_MAX << FENCE_SHIFT | (FENCE_ONE - 1), u64::MAX);
    }

    #[test]
    fn fast_exclusive_round_trip_advances_the_fence() {
        let e = Entry::new();
        let f1 = e.try_fast(Mode::Exclusive, false).unwrap();
        assert_eq!(f1, 1);
        assert!(e.try_fast(Mode::Exclusive, false).is_none());
        assert!(e.try_fast(Mode::Shared, false).is_none());
        assert!(
            !e.release_fast(Mode::Exclusive, f1 + 1),
            "a wrong fence never releases"
        );
        assert!(e.release_fast(Mode::Exclusive, f1));
        assert!(!e.release_fast(Mode::Exclusive, f1), "released twice");
        assert_eq!(e.try_fast(Mode::Exclusive, false), Some(2));
    }

    #[test]
    fn shared_holders_read_the_current_fence() {
        let e = Entry::new();
        let f = e.try_fast(Mode::Exclusive, false).unwrap();
        assert!(e.release_fast(Mode::Exclusive, f));
        assert_eq!(e.try_fast(Mode::Shared, false), Some(f));
        assert_eq!(e.try_fast(Mode::Shared, false), Some(f));
        assert!(e.try_fast(Mode::Exclusive, false).is_none());
        assert!(e.release_fast(Mode::Shared, f));
        assert!(e.release_fast(Mode::Shared, f));
        assert!(!e.release_fast(Mode::Shared, f), "no shared holder left");
    }

    #[test]
    fn the_fence_wraps_into_the_high_bits_and_keeps_rising() {
        let e = Entry::new();
        let mut slow = SlowState::new();
        let mut wakes = Wakes::default();
        let start = (3 << LO_BITS) | (LO_MAX - 1);
        e.set_fence_for_test(start);
        let a = e.try_fast(Mode::Exclusive, false).unwrap();
        assert_eq!(a, start + 1);
        assert!(e.release_fast(Mode::Exclusive, a));
        // The low bits are full: the fast path declines, the slow path wraps.
        assert!(e.try_fast(Mode::Exclusive, false).is_none());
        let want = plain(Mode::Exclusive);
        let b = match e.acquire_locked(&mut slow, &want, false, &Policy::DEFAULT, &mut wakes) {
            Attempt::Acquired(g) => g.fence,
            other => panic!("{other:?}"),
        };
        assert_eq!(b, 4 << LO_BITS);
        assert!(b > a);
        assert!(e.release_fast(Mode::Exclusive, b));
        assert_eq!(e.try_fast(Mode::Exclusive, false), Some(b + 1));
        wakes.run();
    }

    #[test]
    fn one_notified_waiter_is_out_at_a_time() {
        use crate::wait::{NOTIFIED, WAITING, WaitNode};
        use std::ptr::NonNull;
        let e = Entry::new();
        let mut slow = SlowState::new();
        let policy = Policy::DEFAULT;
        let mut wakes = Wakes::default();
        let want = plain(Mode::Exclusive);
        let release = |e: &Entry, slow: &mut SlowState, fence, wakes: &mut Wakes| {
            let hold = Hold::of(
                &want,
                Grant {
                    fence,
                    ..Grant::default()
                },
            );
            assert!(e.release_locked(slow, &hold, &policy, wakes).is_ok());
        };
        let take = |e: &Entry, slow: &mut SlowState, front, wakes: &mut Wakes| match e
            .acquire_locked(slow, &want, front, &policy, wakes)
        {
            Attempt::Acquired(g) => g.fence,
            other => panic!("{other:?}"),
        };
        // A holder, and three waiting threads (none has waited long: each is notified, not
        // handed the lock).
        let f = take(&e, &mut slow, false, &mut wakes);
        let (a, b, c) = (WaitNode::new(), WaitNode::new(), WaitNode::new());
        // SAFETY: the nodes outlive the list's use of them and do not move while linked; this
        // test holds the slow state the list lives in.
        unsafe {
            for node in [&a, &b, &c] {
                slow.waiters.push(NonNull::from(node), false);
            }
        }
        e.fix_flags(&slow);
        assert!(e.is_queued());
        // The release notifies the head only.
        release(&e, &mut slow, f, &mut wakes);
        assert_eq!((a.state(), b.state()), (NOTIFIED, WAITING));
        // A running thread takes the free lock before `a` is back, and releases it: `a` is
        // still out, so nobody else is woken.
        let g = e.try_fast(Mode::Exclusive, false).expect("free");
        release(&e, &mut slow, g, &mut wakes);
        assert_eq!(b.state(), WAITING, "a second waiter woken, one still out");
        // `a` gives up (a timeout) instead of coming back: its notification passes to `b`.
        e.leave_locked(&mut slow, true, &policy, &mut wakes);
        assert_eq!((b.state(), c.state()), (NOTIFIED, WAITING));
        // `b` comes back and takes the lock; its release notifies `c`.
        let h = take(&e, &mut slow, true, &mut wakes);
        release(&e, &mut slow, h, &mut wakes);
        assert_eq!(c.state(), NOTIFIED);
        // `c` comes back, takes the lock and releases it; nobody is left queued.
        let i = take(&e, &mut slow, true, &mut wakes);
        release(&e, &mut slow, i, &mut wakes);
        assert!(!e.is_queued());
        assert!(!e.is_held());
        wakes.run();
    }

    #[test]
    fn force_unlock_at_the_wrap_keeps_the_fence_rising() {
        let e = Entry::new();
        let mut slow = SlowState::new();
        let mut wakes = Wakes::default();
        e.set_fence_for_test(LO_MAX - 1);
        let a = e.try_fast(Mode::Exclusive, false).unwrap();
        assert_eq!(a, LO_MAX);
        assert!(e.force_unlock_locked(&mut slow, &Policy::DEFAULT, &mut wakes));
        assert_eq!(e.fence(), 1 << LO_BITS);
        assert!(!e.release_fast(Mode::Exclusive, a));
        wakes.run();
    }
}

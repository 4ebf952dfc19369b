//! The one front of the in-process keyed primitives: [`Locks`], whose methods are the public
//! API of [`KeyPool`](crate::KeyPool) and [`StripedLock`](crate::StripedLock), and the guards
//! and futures they hand out, all written once over a table of lock words.
//!
//! A *table* is where a keyed primitive keeps its lock words: a pool's slots (one per key held or
//! awaited, recycled when free) or a striped lock's fixed stripes. The front asks a table
//! for a key's lock word (its fast path, its slow path, its place kept for a waiter), the
//! [`GuardedEntry`] (the word plus the lock over its waiters) where a slow path runs, and the place
//! number an [`Acquisition`](crate::Acquisition) records. Everything else (the options, fast and
//! slow release, leases, staleness, waiting and cancelling futures, several keys at once) is
//! here, once.
//!
//! A new keyed primitive is a new table: implement the traits of [`table`] and [`LockTable`]
//! for it, and `Locks` over it has every method, guard and future of the others.

mod aliases;
mod future;
mod guard;
mod locks;

use std::time::{Duration, Instant};

pub use aliases::*;
pub(crate) use future::One;
pub use future::{AcquireFuture, LockFuture, ManyAcquireFuture, ManyLockFuture};
pub use guard::{LockGuard, ManyGuard};
pub use locks::Locks;

use crate::acquisition::{Acquisition, Mode, Owner, Wait, Want};
use crate::entry::{Entry, Hold, lease_end};
use crate::error::{Error, Result};
use crate::guarded::{EntryQueue, GuardedEntry};
use crate::wait::{Attempt, Queue, Wakes};

pub(crate) mod table {
    use super::{Entry, GuardedEntry, Mode, Result, Want};
    use crate::entry::{Policy, SlowState};
    use crate::wait::{Grant, Wakes};

    /// What the front needs of a table (sealed: only this crate's primitives are tables).
    ///
    /// Its types are the crate's own (declared `pub` in private modules, so that a public
    /// guard may name them in its bounds): nobody outside can name or implement it.
    ///
    /// A place is a `u64` that names one lock word of the table, as
    /// [`Acquisition::at`](crate::Acquisition) records it. The canonical order of a multi-key
    /// acquire is the order of places.
    #[allow(private_interfaces, private_bounds)]
    pub trait Table {
        /// One lock word of the table with what surrounds it (a slot, a stripe). Words never
        /// move while the table lives.
        type Word;
        /// A word seen as a guarded entry: the word plus the lock that guards its waiters.
        type Guarded<'a>: GuardedEntry
        where
            Self: 'a;

        /// The word's lock word.
        fn entry(word: &Self::Word) -> &Entry;
        /// The word as a guarded entry.
        fn guarded<'a>(&'a self, word: &'a Self::Word) -> Self::Guarded<'a>;
        /// The word's place.
        fn place(&self, word: &Self::Word) -> u64;
        /// The word at `place`, if this table has one there. A place that [`Take::reserve`]
        /// gave always has its word until its reservation is used or dropped: a waiting
        /// future finds its queued waiter's word again through it, to unlink the waiter before
        /// the waiter's memory goes, and could not do that if this returned `None`.
        fn word_if(&self, place: u64) -> Option<&Self::Word>;
        /// The word at `place`; `InvalidArgument` when this table has none there.
        #[inline]
        fn word(&self, place: u64) -> Result<&Self::Word> {
            self.word_if(place).ok_or(crate::Error::InvalidArgument(
                "the acquisition belongs to another lock",
            ))
        }
        /// Drops a waiter's reservation on `word`, which it will not use after all. A table
        /// whose words are never recycled has none.
        fn unreserve(&self, _word: &Self::Word) {}
        /// The grant policy every word of this table follows.
        fn policy(&self) -> Policy;
        /// One step of a multi-key acquire: takes the word at `place` (which [`Take::reserve`]
        /// gave) for `want`, waiting as `wait` says. The reservation is used up either way.
        fn take_place(&self, place: u64, want: &Want, wait: crate::Wait) -> Result<Grant>;
        /// The name guards and futures of this table show in `Debug`.
        const NAME: &'static str;
    }

    /// A table that finds the lock word of a key of type `Q` without adding one.
    #[allow(private_interfaces, private_bounds)]
    pub trait Find<Q: ?Sized>: Table {
        /// The place of `key`'s lock word, if the table has one for it now.
        fn place_of(&self, key: &Q) -> Option<u64>;
        /// Runs `f` on `key`'s lock word with its entry locked, if the table has one for it;
        /// the wake-ups `f` collects run after the guarded entry is unlocked.
        fn with_key_locked<R>(
            &self,
            key: &Q,
            f: impl FnOnce(&Entry, &mut SlowState, &Policy, &mut Wakes) -> R,
        ) -> Option<R>;
    }

    /// A table that acquires the lock word of a key of type `Q` (making it if needed).
    #[allow(private_interfaces, private_bounds)]
    pub trait Take<Q: ?Sized>: Find<Q> {
        /// What finding a key computes once for all its tries: its hash, its stripe.
        type Found: Copy;
        /// Looks `key` up.
        fn find(&self, key: &Q) -> Self::Found;
        /// The fast path: `key`'s word taken in `mode` with one compare-and-swap, and its
        /// fence; `None` when that is not possible (take the slow path).
        fn take_fast(&self, found: Self::Found, key: &Q, mode: Mode) -> Option<(&Self::Word, u64)>;
        /// A semaphore's fast path: `units` of `key`'s free word with one compare-and-swap,
        /// and the acquisition's fence. A table without semaphores has none.
        #[inline]
        fn take_fast_units(
            &self,
            _found: Self::Found,
            _key: &Q,
            _units: u32,
        ) -> Option<(&Self::Word, u64)> {
            None
        }
        /// The place of `word`, which `take_fast` took for `found` (a table that knows it from
        /// its lookup says so without arithmetic).
        #[inline]
        fn place_found(&self, _found: Self::Found, word: &Self::Word) -> u64 {
            self.place(word)
        }
        /// The slow path: `key`'s word acquired for `want`, waiting as `wait` says.
        fn take_slow(
            &self,
            found: Self::Found,
            key: &Q,
            want: &Want,
            wait: crate::Wait,
        ) -> Result<(&Self::Word, Grant)>;
        /// `key`'s place, kept for a waiter that comes back to it later (a pool reserves the
        /// key's slot, so that it is not recycled meanwhile; see [`Table::unreserve`]).
        fn reserve(&self, found: Self::Found, key: &Q) -> u64;
        /// Frees `key`'s word whoever holds it and takes it exclusively for `want`, ahead of
        /// every queued waiter.
        fn steal(&self, found: Self::Found, key: &Q, want: &Want) -> (&Self::Word, Grant);
    }
}

/// A table of lock words that the front's guards and futures work over: a [`KeyPool`]'s slots
/// or a [`StripedLock`]'s stripes. Sealed: its methods are this crate's.
///
/// [`KeyPool`]: crate::KeyPool
/// [`StripedLock`]: crate::StripedLock
pub trait LockTable: table::Table {}

/// The error a wait that ran out reports: `WouldBlock` for a try, `TimedOut` otherwise.
pub(crate) fn ran_out(wait: Wait) -> Error {
    match wait {
        Wait::No => Error::WouldBlock,
        _ => Error::TimedOut,
    }
}

/// The guarded entry at `place`.
fn guarded_at<T: LockTable + ?Sized>(table: &T, place: u64) -> Result<T::Guarded<'_>> {
    Ok(table.guarded(table.word(place)?))
}

/// One attempt on `word` with its guarded entry locked. `Blocked` leaves no trace, and keeps the
/// caller's reservation (if the table has them) for its wait; any other outcome uses it up.
pub(crate) fn attempt<T: LockTable + ?Sized>(table: &T, word: &T::Word, want: &Want) -> Attempt {
    let guarded = table.guarded(word);
    let queue = EntryQueue(&guarded);
    let mut locked = guarded.lock();
    let mut wakes = Wakes::default();
    let attempt = queue.acquire_locked(&mut locked, want, false, &mut wakes);
    if matches!(attempt, Attempt::Blocked { .. }) {
        guarded.entry().settle_locked(&locked);
    }
    drop(locked);
    wakes.run();
    attempt
}

/// Releases `hold` at `place`; `Err(())` when it is not current (the caller names the error).
pub(crate) fn release_at<T: LockTable + ?Sized>(
    table: &T,
    place: u64,
    hold: &Hold,
) -> std::result::Result<(), ()> {
    match guarded_at(table, place) {
        Ok(guarded) => crate::guarded::release(&guarded, hold),
        Err(_) => Err(()),
    }
}

/// Releases holds of one caller, newest first; a stale one is left alone.
pub(crate) fn release_all<T: LockTable + ?Sized>(table: &T, held: &[Held]) {
    for (place, hold, _) in held.iter().rev() {
        let _ = release_at(table, *place, hold);
    }
}

/// The hold an acquisition record names, released or checked on behalf of `owner`.
fn hold_of(acq: &Acquisition, owner: Option<Owner>) -> Hold {
    Hold {
        mode: acq.mode,
        fence: acq.fence,
        ticket: acq.ticket,
        owner,
        units: acq.units,
    }
}

/// Releases `acq` on behalf of `owner` (a lock object's `release_as`): `NotOwner` or
/// `LeaseExpired` when it is no longer current, `InvalidArgument` for another table's.
pub(crate) fn release_acquisition<T: LockTable + ?Sized>(
    table: &T,
    acq: Acquisition,
    owner: Option<Owner>,
) -> Result<()> {
    let guarded = guarded_at(table, acq.at)?;
    crate::guarded::release(&guarded, &hold_of(&acq, owner)).map_err(|()| acq.stale_error())
}

/// Whether `acq` is current and, in a reentrant lock, held by `owner` (`is_current_as`).
pub(crate) fn acquisition_is_current<T: LockTable + ?Sized>(
    table: &T,
    acq: &Acquisition,
    owner: Option<Owner>,
) -> bool {
    guarded_at(table, acq.at)
        .is_ok_and(|guarded| crate::guarded::is_current(&guarded, &hold_of(acq, owner)))
}

/// Moves the end of `acq`'s lease to `lease` from now and updates the record (`extend`).
pub(crate) fn extend_acquisition<T: LockTable + ?Sized>(
    table: &T,
    acq: &mut Acquisition,
    lease: Duration,
) -> Result<()> {
    let guarded = guarded_at(table, acq.at)?;
    let until = lease_end(lease);
    crate::guarded::extend(&guarded, &hold_of(acq, acq.owner), until)
        .map_err(|e| e.unwrap_or_else(|| acq.stale_error()))?;
    acq.lease_until = Some(until);
    Ok(())
}

/// One lock word held by a multi-key acquire: its place, the hold, and the lease's end.
pub(crate) type Held = (u64, Hold, Option<Instant>);

/// A multi-key plan: places in canonical order, each once with the strongest mode asked of it.
pub(crate) type Plan = Vec<(u64, Mode)>;

/// A table that finds the lock word of a key of type `Q`: a pool finds the key's slot (if it
/// has one), a striped lock its stripe. Sealed, like [`LockTable`]: what a lookup does is
/// this crate's.
pub trait FindKey<Q: ?Sized>: LockTable + table::Find<Q> {}
impl<T: LockTable + table::Find<Q>, Q: ?Sized> FindKey<Q> for T {}

/// A table that acquires the lock word of a key of type `Q`, making one if it needs to: a pool
/// gives the key a slot, a striped lock takes its stripe. Sealed, like [`LockTable`].
pub trait TakeKey<Q: ?Sized>: FindKey<Q> + table::Take<Q> {}
impl<T: FindKey<Q> + table::Take<Q>, Q: ?Sized> TakeKey<Q> for T {}

/// The builder methods that set a keyed primitive's grant policy (`fifo`, `reentrant`,
/// `max_holds`), written once for every builder with a `policy` field. `$what` names what a
/// holder holds ("key", "stripe") in their docs.
macro_rules! policy_builder_methods {
    ($what:literal) => {
        #[doc = concat!(
            "Strict FIFO per ", $what, ": every release hands the ", $what, " to the next \
             waiter, and nobody takes a ", $what, " that has waiters (as Web Locks specifies). \
             Default: eventual fairness, see [`crate::wait::FAIR_AFTER`]."
        )]
        pub fn fifo(mut self, fifo: bool) -> Self {
            self.policy.fifo = fifo;
            self
        }

        #[doc = concat!(
            "Reentrant ", $what, "s: an exclusive acquire by the [`Owner`](crate::Owner) that \
             holds the ", $what, " exclusively raises its hold count instead of waiting."
        )]
        pub fn reentrant(mut self, reentrant: bool) -> Self {
            self.policy.reentrant = reentrant;
            self
        }

        /// The largest hold count of a reentrant holder (default 2^16); past it an acquire
        /// fails with [`Error::ReentrancyLimit`](crate::Error::ReentrancyLimit).
        pub fn max_holds(mut self, max_holds: u32) -> Self {
            self.policy.max_holds = max_holds.max(1);
            self
        }
    };
}
pub(crate) use policy_builder_methods;

//! Guards of held lock words: each carries its acquisition and releases only that.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::table::Find;
use super::table::Table;
use super::{FindKey, Held, LockTable, release_all, release_at};
use crate::acquisition::{Acquisition, Mode, Want};
use crate::entry::{GuardHold, Hold, HoldExtra, lease_end, shape_units};
use crate::error::{Error, Result};
use crate::guarded;
use crate::wait::Grant;

/// The record of one acquisition at `place`.
fn acquisition(place: u64, hold: &Hold, lease_until: Option<Instant>) -> Acquisition {
    Acquisition {
        fence: hold.fence,
        at: place,
        ticket: hold.ticket,
        owner: hold.owner,
        lease_until,
        mode: hold.mode,
        owner_died: false,
        units: hold.units,
        metered_since: None,
    }
}

/// A held key (of a [`KeyPool`](crate::KeyPool)) or stripe (of a
/// [`StripedLock`](crate::StripedLock)); released on drop. `Send`: it may be released from
/// another thread. `P` is how the guard holds its lock object: `&KeyPool`, `Arc<StripedLock>`...
///
/// The guard releases only its own acquisition: after a `force_unlock` or the end of its lease
/// it releases nothing, and [`release`](Self::release) says why.
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
/// let acq = pool.lock("row-9").into_acquisition(); // keep it held without a guard...
/// pool.release(acq).unwrap();                      // ...and release exactly that later
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard<P>
where
    P: Deref,
    P::Target: LockTable,
{
    /// `None` once released or handed out.
    table: Option<P>,
    /// The lock word: words never move, and the guard keeps the table (and so the word) alive.
    word: NonNull<<P::Target as super::table::Table>::Word>,
    /// Dropped by the guard's own drop, which skips it where it knows the record owns nothing
    /// (a plain hold released inline), so that no check of the boxed part follows that path.
    rec: ManuallyDrop<GuardHold>,
}

// SAFETY: the guard owns a table handle and points into that table's words, which are shared
// between threads exactly as `&Table` shares them (hence `Table: Sync`, part of `LockTable`).
unsafe impl<P: Deref + Send> Send for LockGuard<P> where P::Target: LockTable + Sync {}
// SAFETY: `&LockGuard` only reads the word's atomic state or locks its guarded entry.
unsafe impl<P: Deref + Sync> Sync for LockGuard<P> where P::Target: LockTable + Sync {}

impl<P> LockGuard<P>
where
    P: Deref,
    P::Target: LockTable,
{
    /// A guard of `word`, granted to `want`.
    #[inline]
    pub(crate) fn new(
        table: P,
        word: &<P::Target as super::table::Table>::Word,
        want: &Want,
        grant: Grant,
    ) -> Self {
        Self::of_record(table, word, GuardHold::of(want, grant))
    }

    /// A guard of the word at `word`, granted to `want` (for callers whose borrow of the word
    /// would otherwise tie up the table handle).
    #[inline]
    pub(crate) fn from_ptr(
        table: P,
        word: NonNull<<P::Target as super::table::Table>::Word>,
        want: &Want,
        grant: Grant,
    ) -> Self {
        Self {
            word,
            table: Some(table),
            rec: ManuallyDrop::new(GuardHold::of(want, grant)),
        }
    }

    /// A guard of `word` with its record.
    #[inline]
    pub(crate) fn of_record(
        table: P,
        word: &<P::Target as super::table::Table>::Word,
        rec: GuardHold,
    ) -> Self {
        Self {
            word: NonNull::from(word),
            table: Some(table),
            rec: ManuallyDrop::new(rec),
        }
    }

    /// A guard of `word`, taken on the fast path.
    #[inline]
    pub(crate) fn plain(
        table: P,
        word: &<P::Target as super::table::Table>::Word,
        mode: Mode,
        fence: u64,
    ) -> Self {
        Self {
            word: NonNull::from(word),
            table: Some(table),
            rec: ManuallyDrop::new(GuardHold::plain(mode, fence)),
        }
    }

    /// A guard of the word at `word`, taken on the fast path.
    #[inline]
    pub(crate) fn plain_at(
        table: P,
        word: NonNull<<P::Target as super::table::Table>::Word>,
        shape: u32,
        fence: u64,
    ) -> Self {
        let mut rec = GuardHold::plain(Mode::Exclusive, fence);
        rec.set_shape(shape);
        Self {
            word,
            table: Some(table),
            rec: ManuallyDrop::new(rec),
        }
    }

    /// The word.
    #[inline]
    fn word(&self) -> &<P::Target as super::table::Table>::Word {
        // SAFETY: the word belongs to the table this guard holds (`table` is Some whenever
        // this is called), and words live as long as their table.
        unsafe { self.word.as_ref() }
    }

    /// The fencing token (see [`Acquisition::fence`]).
    pub fn fence(&self) -> u64 {
        self.rec.fence
    }

    /// Shared or exclusive.
    pub fn mode(&self) -> Mode {
        self.rec.mode()
    }

    /// Whether the previous holder died holding the lock (see [`Acquisition::owner_died`]).
    /// Always `false` here: this lock object lives in one process, where a holder cannot die
    /// and leave its key held. (The cross-process scopes' guard is
    /// [`KeyedGuard`](crate::KeyedGuard).)
    pub fn owner_died(&self) -> bool {
        false
    }

    /// Whether this acquisition is still current (not force-unlocked, lease not ended).
    pub fn is_current(&self) -> bool {
        match &self.table {
            Some(table) => guarded::is_current(&table.guarded(self.word()), &self.rec.hold()),
            None => false,
        }
    }

    /// Time left on the lease, if the acquisition has one (zero once it has ended).
    pub fn lease_remaining(&self) -> Option<Duration> {
        self.rec
            .lease_until()
            .map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Moves the end of the lease to `lease` from now. `LeaseExpired` (or `NotOwner`) when the
    /// acquisition is no longer current; `InvalidArgument` when it has no lease.
    pub fn extend(&mut self, lease: Duration) -> Result<()> {
        let table = self.table.as_ref().ok_or(Error::NotOwner)?;
        let until = lease_end(lease);
        let extended = guarded::extend(&table.guarded(self.word()), &self.rec.hold(), until);
        match extended {
            Ok(()) => {
                self.rec.set_lease(until);
                Ok(())
            }
            Err(e) => Err(e.unwrap_or_else(|| self.acquisition().stale_error())),
        }
    }

    /// Releases the lock now, saying whether this acquisition was still current:
    /// `Err(NotOwner)` after a force-unlock, `Err(LeaseExpired)` after its lease ended.
    /// (Dropping the guard does the same, silently.)
    #[inline]
    pub fn release(mut self) -> Result<()> {
        let table = self.table.take().ok_or(Error::NotOwner)?;
        let entry = <P::Target as super::table::Table>::entry(self.word());
        if self.rec.is_plain() && entry.release_fast_shape(self.rec.shape(), self.rec.fence) {
            return Ok(());
        }
        self.release_rest(&table)
    }

    #[cold]
    #[inline(never)]
    fn release_rest(&self, table: &P::Target) -> Result<()> {
        guarded::release(&table.guarded(self.word()), &self.rec.hold()).map_err(|()| {
            acquisition(
                table.place(self.word()),
                &self.rec.hold(),
                self.rec.lease_until(),
            )
            .stale_error()
        })
    }

    /// Keeps the lock held and forgets the guard; release it later with the lock object's
    /// `release` (for example [`KeyPool::release`](crate::KeyPool::release)).
    pub fn into_acquisition(mut self) -> Acquisition {
        let acq = self.acquisition();
        self.table = None;
        acq
    }

    fn acquisition(&self) -> Acquisition {
        let table = self.table.as_ref().expect("a live guard has its table");
        acquisition(
            table.place(self.word()),
            &self.rec.hold(),
            self.rec.lease_until(),
        )
    }

    /// The place of the word held, as the acquisition records it.
    pub(crate) fn place(&self) -> u64 {
        let table = self.table.as_ref().expect("a live guard has its table");
        table.place(self.word())
    }
}

impl<P> fmt::Debug for LockGuard<P>
where
    P: Deref,
    P::Target: LockTable,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct(<P::Target as super::table::Table>::NAME);
        if self.table.is_some() {
            d.field("at", &self.place());
        }
        d.field("fence", &self.rec.fence)
            .field("mode", &self.rec.mode())
            .finish()
    }
}

impl<P> Drop for LockGuard<P>
where
    P: Deref,
    P::Target: LockTable,
{
    #[inline]
    fn drop(&mut self) {
        // A plain exclusive hold (the common case) is released here, with one compare-and-swap
        // of the exact word it left; everything else is out of line, so that the drop stays
        // small enough to inline where the guard dies. Nothing out of line gets the record by
        // reference, so that the guard needs no place in memory where it dies (StripedLock's
        // loop, bench/before_after.py: 78 instructions with the record passed by reference,
        // 66 without).
        if self.rec.is_plain_exclusive() {
            // A plain record has nothing boxed: nothing to drop.
            if let Some(table) = &self.table {
                let fence = self.rec.fence;
                if !<P::Target as super::table::Table>::entry(self.word())
                    .release_exclusive_cas(fence)
                {
                    release_exclusive_on_drop(&**table, self.word(), fence);
                }
            }
            return;
        }
        // SAFETY: the record is used no more: it is moved out once, here.
        let (fence, kind, extra) = unsafe { ManuallyDrop::take(&mut self.rec) }.into_parts();
        match &self.table {
            Some(table) => release_on_drop(&**table, self.word(), fence, kind, extra),
            None => drop_record(extra),
        }
    }
}

/// Drops a released guard's record, out of line (it may box a lease, an owner, a ticket).
#[cold]
#[inline(never)]
fn drop_record(extra: Option<Box<HoldExtra>>) {
    drop(extra);
}

/// A plain exclusive hold's release once its inline compare-and-swap failed.
#[inline(never)]
fn release_exclusive_on_drop<T: LockTable + ?Sized>(table: &T, word: &T::Word, fence: u64) {
    if !T::entry(word).release_exclusive_rest(fence) {
        release_slow(table, word, &GuardHold::plain(Mode::Exclusive, fence));
    }
}

/// A guard's release beyond the inline case: the fast paths of shared holds and permits, then
/// waiters to wake, holder state, or a hold that is not current any more (force-unlocked,
/// lease ended: nothing of ours to release).
#[inline(never)]
fn release_on_drop<T: LockTable + ?Sized>(
    table: &T,
    word: &T::Word,
    fence: u64,
    kind: u64,
    extra: Option<Box<HoldExtra>>,
) {
    // A semaphore's plain permit is released here, a plain shared hold by a function of its
    // own (a plain exclusive hold never comes here: the drop releases it, or
    // `release_exclusive_on_drop` when its compare-and-swap failed), and the rest out of line.
    // Every call is the function's last step, so that it keeps nothing saved across one
    // (KeyedSemaphore's acquire(1)+release, bench/semaphore.py: 136 instructions with the
    // shared hold's loop of compare-and-swaps called from here, five registers saved for what
    // followed it; 126 so).
    if extra.is_none() {
        let units = shape_units(GuardHold::from_parts(fence, kind, None).shape());
        if units == 0 {
            return release_shared_on_drop(table, word, fence, kind);
        }
        if T::entry(word).release_fast_units(fence, units) {
            return;
        }
    }
    release_rest_on_drop(table, word, fence, kind, extra);
}

/// A plain shared hold's release: its fast path (a loop of compare-and-swaps), then the rest.
#[inline(never)]
fn release_shared_on_drop<T: LockTable + ?Sized>(table: &T, word: &T::Word, fence: u64, kind: u64) {
    let shape = GuardHold::from_parts(fence, kind, None).shape();
    if !T::entry(word).release_fast_shape(shape, fence) {
        release_rest_on_drop(table, word, fence, kind, None);
    }
}

/// [`release_on_drop`] past the fast release.
#[cold]
#[inline(never)]
fn release_rest_on_drop<T: LockTable + ?Sized>(
    table: &T,
    word: &T::Word,
    fence: u64,
    kind: u64,
    extra: Option<Box<HoldExtra>>,
) {
    release_slow(table, word, &GuardHold::from_parts(fence, kind, extra));
}

/// The rest of a guard's release, out of line: waiters to wake, holder state, or a hold that is
/// not current any more (force-unlocked, lease ended: nothing of ours to release).
#[cold]
#[inline(never)]
fn release_slow<T: LockTable + ?Sized>(table: &T, word: &T::Word, rec: &GuardHold) {
    let guarded = table.guarded(word);
    let hold = rec.hold();
    // A plain hold is here because its fast paths failed (`release_on_drop`): straight to the
    // entry's lock, without trying them a third time.
    let _ = if rec.is_plain() {
        guarded::release_slow(&guarded, &hold)
    } else {
        guarded::release(&guarded, &hold)
    };
}

/// Several held keys or stripes, taken deadlock-free in the canonical order; all released on
/// drop.
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<u64> = KeyPool::new();
/// let guard = pool.lock_many([3, 1, 3].iter());
/// assert_eq!(guard.len(), 2);
/// drop(guard);
/// assert!(pool.is_empty());
/// ```
#[must_use = "the locks are released as soon as the guard is dropped"]
pub struct ManyGuard<P>
where
    P: Deref,
    P::Target: LockTable,
{
    table: Option<P>,
    /// Each word held, in the canonical order, with its hold and lease end.
    held: Vec<Held>,
}

impl<P> ManyGuard<P>
where
    P: Deref,
    P::Target: LockTable,
{
    pub(crate) fn new(table: P, held: Vec<Held>) -> Self {
        Self {
            table: Some(table),
            held,
        }
    }

    /// The number of distinct locks held (keys, or stripes).
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether the guard holds nothing (it was given no keys).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The fence of each lock held, in the canonical order (not the order the keys were given:
    /// see `fence_of`).
    pub fn fences(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.held.iter().map(|(_, hold, _)| hold.fence)
    }

    /// The fence of `key`'s lock, if this guard holds it.
    ///
    /// ```
    /// use keylock_core::KeyPool;
    /// let pool: KeyPool<String> = KeyPool::new();
    /// drop(pool.lock("b"));
    /// let both = pool.lock_many(["a", "b"]);
    /// assert_eq!(both.fence_of("b"), Some(2));
    /// assert_eq!(both.fence_of("a"), Some(1));
    /// assert_eq!(both.fence_of("c"), None);
    /// ```
    pub fn fence_of<Q: ?Sized>(&self, key: &Q) -> Option<u64>
    where
        P::Target: FindKey<Q>,
    {
        let place = self.table.as_ref()?.place_of(key)?;
        self.held
            .iter()
            .find(|(held, _, _)| *held == place)
            .map(|(_, hold, _)| hold.fence)
    }

    /// The places held, in the canonical order.
    pub(crate) fn places(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.held.iter().map(|(place, _, _)| *place)
    }

    /// Whether the previous holder of any of the locks held died holding it (see
    /// [`Acquisition::owner_died`]); always `false` in one process, as for the one-lock guard.
    pub fn owner_died(&self) -> bool {
        false
    }

    /// Releases every lock now; the first stale acquisition's error, if any (the others are
    /// released all the same).
    pub fn release(mut self) -> Result<()> {
        let table = self.table.take().ok_or(Error::NotOwner)?;
        let mut result = Ok(());
        for (place, hold, lease) in self.held.iter().rev() {
            if release_at(&*table, *place, hold).is_err() && result.is_ok() {
                result = Err(acquisition(*place, hold, *lease).stale_error());
            }
        }
        result
    }

    /// Keeps the locks held and forgets the guard: one acquisition per lock, to release with
    /// the lock object's `release`.
    pub fn into_acquisitions(mut self) -> Vec<Acquisition> {
        self.table = None;
        self.held
            .iter()
            .map(|(place, h, l)| acquisition(*place, h, *l))
            .collect()
    }
}

impl<P> fmt::Debug for ManyGuard<P>
where
    P: Deref,
    P::Target: LockTable,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(<P::Target as super::table::Table>::NAME)
            .field("at", &self.places().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<P> Drop for ManyGuard<P>
where
    P: Deref,
    P::Target: LockTable,
{
    #[inline]
    fn drop(&mut self) {
        if let Some(table) = &self.table {
            release_all(&**table, &self.held);
        }
    }
}

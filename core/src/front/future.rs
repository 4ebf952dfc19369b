//! Futures that acquire lock words, waiting in the same queues as blocked threads.
//!
//! A future looks its word up when it is made: a free one is taken at once, a held one is
//! waited for (a pool's slot is reserved for the wait, so the future owns no copy of the key and
//! the slot is not recycled under it). Dropping a future cancels exactly: a waiter leaves the
//! queue and drops its reservation, a lock already granted to it passes on, a lock it holds is
//! released.

use std::fmt;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};
use std::time::Instant;

use super::table::Table;
use super::{Held, LockGuard, LockTable, ManyGuard, Plan, attempt, ran_out, release_all};
use crate::acquisition::{Mode, Wait, Want};
use crate::entry::Hold;
use crate::error::{Error, Result};
use crate::guarded::{EntryQueue, GuardedEntry};
use crate::spare;
use crate::wait::{Attempt, Grant, LazyWaiter, Waiter, timer};

/// An async acquire of one word. The uncontended case, the word taken on its fast path when
/// the future was made, is kept as scalars (the guard is made when the future is polled), so
/// that the future stays a few words, nothing large is moved, and the uncontended async path
/// costs what the blocking one does. Everything else is boxed: it allocates anyway (a queue
/// node) or is rare.
pub(crate) enum One<P>
where
    P: Deref,
    P::Target: LockTable,
{
    /// Taken on the fast path; `table` is `None` once the guard was handed out.
    Taken {
        table: Option<P>,
        word: NonNull<<P::Target as Table>::Word>,
        /// The hold's mode and units ([`shape`](crate::entry::shape)).
        shape: u32,
        fence: u64,
    },
    /// Dropped out of line by `One`'s `Drop`, so that dropping an uncontended future stays
    /// small enough to inline.
    Slow(ManuallyDrop<Box<Slow<P>>>),
}

/// An async acquire past the fast path: granted, failed, or waiting; `Done` once polled to the
/// end.
// `allow`, not `expect`: whether the waiting variant is large enough for the lint depends on the
// platform and the build's cfgs (the queue node's fields).
#[allow(
    clippy::large_enum_variant,
    reason = "always boxed: the waiting variant keeps its queue node in that box"
)]
pub(crate) enum Slow<P>
where
    P: Deref,
    P::Target: LockTable,
{
    Ready(LockGuard<P>),
    Failed(Error),
    Waiting(Waiting<P>),
    Done,
}

// SAFETY: `word` points into the table that `table` keeps; the future is as Send and Sync as
// the guard it stands for (see `LockGuard`'s impls).
unsafe impl<P: Deref + Send> Send for One<P> where P::Target: LockTable + Sync {}
// SAFETY: as above.
unsafe impl<P: Deref + Sync> Sync for One<P> where P::Target: LockTable + Sync {}

impl<P> One<P>
where
    P: Deref,
    P::Target: LockTable,
{
    /// The future of a word taken on its fast path.
    #[inline]
    pub(crate) fn taken(
        table: P,
        word: &<P::Target as Table>::Word,
        mode: Mode,
        fence: u64,
    ) -> Self {
        One::Taken {
            table: Some(table),
            word: NonNull::from(word),
            shape: mode as u32,
            fence,
        }
    }

    /// The future of a semaphore's `units` taken on the fast path.
    #[inline]
    pub(crate) fn taken_units(
        table: P,
        word: &<P::Target as Table>::Word,
        units: u32,
        fence: u64,
    ) -> Self {
        One::Taken {
            table: Some(table),
            word: NonNull::from(word),
            shape: crate::entry::shape(Mode::Shared, units),
            fence,
        }
    }

    /// The rest of an async acquire once the word's fast path failed: one attempt with its entry
    /// locked (unless it would surely fail), then a wait. The caller holds a reservation on the
    /// word if its table has them; it is used up or handed to the wait.
    #[inline(always)]
    pub(crate) fn after_fast_path(table: P, place: u64, want: Want, wait: Wait) -> Self {
        // The slow start returns one pointer (in a register), so that a caller's fast path
        // and this one meet without the future going through memory. A plain request that waits
        // for as long as it takes (`lock_async`, `lock_shared_async`) is passed as its mode
        // alone: the whole request and wait would be written to memory on the fast path too,
        // for the slow start to read (5 instructions of an uncontended `lock_async`). Inlined
        // always: with two calls in it, the compiler kept it out of line, and the future came
        // back through memory (10 instructions more, not 5 fewer).
        let slow = if want == Want::of_mode(want.mode) && wait == Wait::Forever {
            Self::start_slow_plain(table, place, want.mode)
        } else {
            Self::start_slow(table, place, want, wait)
        };
        One::Slow(ManuallyDrop::new(slow))
    }

    /// [`start_slow`](Self::start_slow) of a plain request in `mode` that waits for as long as
    /// it takes.
    #[cold]
    #[inline(never)]
    fn start_slow_plain(table: P, place: u64, mode: Mode) -> Box<Slow<P>> {
        Self::start_slow(table, place, Want::of_mode(mode), Wait::Forever)
    }

    #[cold]
    #[inline(never)]
    fn start_slow(table: P, place: u64, want: Want, wait: Wait) -> Box<Slow<P>> {
        let word = match table.word(place) {
            Ok(word) => NonNull::from(word),
            Err(e) => return spare::boxed(Slow::Failed(e)),
        };
        // SAFETY: the word lives as long as the table, which `table` keeps.
        let word_ref = unsafe { word.as_ref() };
        // A plain wait without a limit for a word that is held against it (and has no leases
        // that may have run out) goes straight to its first poll, which tries again with the
        // entry's queue locked and queues there: the attempt would find it blocked, and cost
        // the entry's lock twice per wait (and its `QUEUED` flag set and cleared in between).
        // The future is then made as if the word was looked at once, when it was held.
        if wait == Wait::Forever
            && want == Want::of_mode(want.mode)
            && table.guarded(word_ref).entry().held_against(want.mode)
        {
            return spare::boxed_with(|| {
                Slow::Waiting(Waiting::new(table, word, want, wait, None))
            });
        }
        let slow = match attempt(&*table, word_ref, &want) {
            Attempt::Acquired(grant) => Slow::Ready(LockGuard::from_ptr(table, word, &want, grant)),
            Attempt::Failed(e) => Slow::Failed(e),
            Attempt::Blocked { .. } if wait == Wait::No => {
                table.unreserve(word_ref);
                Slow::Failed(Error::WouldBlock)
            }
            // The reservation (if any) is kept for the wait.
            Attempt::Blocked { .. } => {
                Slow::Waiting(Waiting::new(table, word, want, wait, wait.deadline()))
            }
        };
        // Boxed before the waiter is first polled (it is not registered yet, so it may move):
        // from here on the box keeps it in place.
        spare::boxed(slow)
    }

    #[inline]
    fn poll_one(&mut self, cx: &mut Context<'_>) -> Poll<Result<LockGuard<P>>> {
        if let Some(guard) = self.take_taken() {
            return Poll::Ready(Ok(guard));
        }
        match self {
            One::Taken { .. } => panic!("lock future polled after completion"),
            One::Slow(slow) => slow.poll_slow(cx),
        }
    }

    /// The guard of a word taken on the fast path, if this future is that and still has it.
    #[inline]
    fn take_taken(&mut self) -> Option<LockGuard<P>> {
        match self {
            One::Taken {
                table,
                word,
                shape,
                fence,
            } => Some(LockGuard::plain_at(table.take()?, *word, *shape, *fence)),
            One::Slow(_) => None,
        }
    }

    fn is_ready(&self) -> bool {
        match self {
            One::Taken { table, .. } => table.is_some(),
            One::Slow(slow) => matches!(***slow, Slow::Ready(_)),
        }
    }
}

impl<P> Drop for One<P>
where
    P: Deref,
    P::Target: LockTable,
{
    #[inline]
    fn drop(&mut self) {
        match self {
            // Taken at creation and never handed out: release it.
            One::Taken {
                table,
                word,
                shape,
                fence,
            } => {
                if let Some(table) = table.take() {
                    release_taken(table, *word, *shape, *fence);
                }
            }
            One::Slow(slow) => drop_slow(slow),
        }
    }
}

/// Drops a slow future (out of line: see `One::Slow`).
#[cold]
#[inline(never)]
fn drop_slow<P>(slow: &mut ManuallyDrop<Box<Slow<P>>>)
where
    P: Deref,
    P::Target: LockTable,
{
    // SAFETY: called once, from `One`'s `drop`, which never touches `slow` again.
    spare::unbox(unsafe { ManuallyDrop::take(slow) })
}

/// Releases a word a future took and never handed out (out of line: rare, and it keeps the
/// uncontended future's drop small).
#[cold]
#[inline(never)]
fn release_taken<P>(table: P, word: NonNull<<P::Target as Table>::Word>, shape: u32, fence: u64)
where
    P: Deref,
    P::Target: LockTable,
{
    drop(LockGuard::plain_at(table, word, shape, fence));
}

impl<P> Slow<P>
where
    P: Deref,
    P::Target: LockTable,
{
    #[cold]
    fn poll_slow(&mut self, cx: &mut Context<'_>) -> Poll<Result<LockGuard<P>>> {
        if let Slow::Waiting(w) = self {
            let (table, result) = match w.poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(done) => done,
            };
            let want = w.want;
            *self = Slow::Done;
            return Poll::Ready(
                result.map(|(word, grant)| LockGuard::from_ptr(table, word, &want, grant)),
            );
        }
        match std::mem::replace(self, Slow::Done) {
            Slow::Ready(guard) => Poll::Ready(Ok(guard)),
            Slow::Failed(e) => Poll::Ready(Err(e)),
            Slow::Waiting(_) | Slow::Done => panic!("lock future polled after completion"),
        }
    }
}

/// A future waiting for its word.
pub(crate) struct Waiting<P>
where
    P: Deref,
    P::Target: LockTable,
{
    /// `None` once finished (the reservation is then used up or dropped).
    table: Option<P>,
    /// The word waited for: a reserved place always has its word (`Table::word_if`), and words
    /// live as long as their table, which `table` keeps until the wait ends.
    word: WordPtr<P>,
    want: Want,
    wait: Wait,
    deadline: Option<Instant>,
    /// The waiter has been polled, so the reservation is its to use up.
    polled: bool,
    /// The queue node, in place: the node needs no box of its own (so a contended acquire
    /// allocates once), because a `Waiting` never moves while its waiter is registered. It is
    /// made only as `Slow::Waiting` in `One::start_slow`, which boxes it before the waiter is
    /// first polled, and never leaves that box: `Slow::poll_slow` replaces it in place
    /// (dropping it there) and moves out only the other variants, and `One` keeps the box until
    /// it drops it. Its `Drop` abandons a registered waiter, so the node is unlinked before its
    /// memory goes. Hence [`pinned`] may pin it where it is.
    waiter: Waiter,
}

/// The waiter of a [`Waiting`], pinned where it is.
///
/// # Safety
/// `waiter` is the `waiter` field of a `Waiting` (whose docs say why it never moves).
unsafe fn pinned(waiter: &mut Waiter) -> Pin<&mut Waiter> {
    // SAFETY: the caller's contract.
    unsafe { Pin::new_unchecked(waiter) }
}

impl<P> Waiting<P>
where
    P: Deref,
    P::Target: LockTable,
{
    /// The wait for `word` (at a place `table` keeps reserved, if its table has reservations),
    /// not polled yet, until `deadline` (`wait`'s).
    #[inline(always)]
    fn new(table: P, word: WordPtr<P>, want: Want, wait: Wait, deadline: Option<Instant>) -> Self {
        Waiting {
            deadline,
            table: Some(table),
            word,
            want,
            wait,
            polled: false,
            waiter: Waiter::new(),
        }
    }

    /// Polls the wait; when it ends, the table handle is handed back with the outcome: the
    /// word and its grant, or the error.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<WaitEnd<P>> {
        let table = self.table.as_ref().expect("a waiting future has its table");
        // SAFETY: the word lives as long as the table, which `table` keeps (see `word`).
        let word = unsafe { self.word.as_ref() };
        let result = {
            let guarded = table.guarded(word);
            let queue = EntryQueue(&guarded);
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                if self.polled {
                    // SAFETY: the field of this `Waiting`.
                    unsafe { pinned(&mut self.waiter) }
                        .abandon(&queue, true)
                        .ok_or_else(|| ran_out(self.wait))
                } else {
                    table.unreserve(word);
                    Err(ran_out(self.wait))
                }
            } else {
                self.polled = true;
                // SAFETY: the field of this `Waiting`.
                match unsafe { pinned(&mut self.waiter) }.poll_task(&queue, &self.want, cx) {
                    Poll::Ready(result) => result,
                    Poll::Pending => {
                        if let Some(d) = self.deadline {
                            timer::wake_at(d, cx.waker().clone());
                        }
                        return Poll::Pending;
                    }
                }
            }
        };
        let word = self.word;
        Poll::Ready((
            self.table.take().expect("checked above"),
            result.map(|grant| (word, grant)),
        ))
    }
}

/// A pointer to a word of the table behind `P`.
type WordPtr<P> = NonNull<<<P as Deref>::Target as Table>::Word>;

/// How a wait ended: the table handle, and the word with its grant or the error.
type WaitEnd<P> = (P, Result<(WordPtr<P>, Grant)>);

impl<P> Drop for Waiting<P>
where
    P: Deref,
    P::Target: LockTable,
{
    fn drop(&mut self) {
        let Some(table) = &self.table else { return };
        // SAFETY: the word lives as long as the table, which `table` keeps (see `word`).
        let word = unsafe { self.word.as_ref() };
        if !self.polled {
            table.unreserve(word);
        } else {
            let guarded = table.guarded(word);
            let queue = EntryQueue(&guarded);
            // SAFETY: the field of this `Waiting` (dropped in place, as its docs say).
            let _ = unsafe { pinned(&mut self.waiter) }.abandon(&queue, false);
        }
    }
}

/// Resolves to a [`LockGuard`]. Dropping it before then cancels the wait exactly: the waiter
/// leaves the queue, its reservation is dropped, and a lock already handed to it passes on.
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
pub struct LockFuture<P>(One<P>)
where
    P: Deref,
    P::Target: LockTable;

impl<P> LockFuture<P>
where
    P: Deref,
    P::Target: LockTable,
{
    pub(crate) fn new(one: One<P>) -> Self {
        Self(one)
    }
}

impl<P> Future for LockFuture<P>
where
    P: Deref,
    P::Target: LockTable,
{
    type Output = LockGuard<P>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LockGuard<P>> {
        let one = &mut self.get_mut().0;
        // The uncontended case builds the guard straight into the answer.
        if let Some(guard) = one.take_taken() {
            return Poll::Ready(guard);
        }
        one.poll_one(cx).map(untimed)
    }
}

/// Resolves to `Ok(`[`LockGuard`]`)`, or to the error that ended the wait (`TimedOut`,
/// `ReentrancyLimit`, ...). Dropping it cancels the wait exactly.
///
/// ```
/// use std::time::Duration;
/// use keylock_core::{Error, KeyPool, LockOptions, Wait};
/// let pool: KeyPool<String> = KeyPool::new();
/// let _held = pool.lock("k");
/// let opts = LockOptions::new().wait(Wait::For(Duration::from_millis(5)));
/// let late = futures::executor::block_on(pool.lock_with_async("k", opts));
/// assert_eq!(late.unwrap_err(), Error::TimedOut);
/// assert_eq!(pool.stats().waiting, 0);
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct AcquireFuture<P>(One<P>)
where
    P: Deref,
    P::Target: LockTable;

impl<P> AcquireFuture<P>
where
    P: Deref,
    P::Target: LockTable,
{
    pub(crate) fn new(one: One<P>) -> Self {
        Self(one)
    }
}

impl<P> Future for AcquireFuture<P>
where
    P: Deref,
    P::Target: LockTable,
{
    type Output = Result<LockGuard<P>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.poll_one(cx)
    }
}

/// Several words, awaited one after another in the canonical order.
pub(crate) struct Many<P>
where
    P: Deref,
    P::Target: LockTable,
{
    table: Option<P>,
    /// The plan (reserved words, if the table has reservations); `held.len()` of them are held.
    plan: Plan,
    base: Want,
    wait: Wait,
    deadline: Option<Instant>,
    held: Vec<Held>,
    waiter: LazyWaiter,
    /// The waiter has been polled for the current word (its reservation is the waiter's).
    polled: bool,
}

impl<P> Many<P>
where
    P: Deref,
    P::Target: LockTable,
{
    /// A future for `plan`, whose words the caller has reserved (if its table has
    /// reservations).
    pub(crate) fn new(table: P, plan: Plan, base: Want, wait: Wait) -> Self {
        let held = Vec::with_capacity(plan.len());
        Self {
            table: Some(table),
            plan,
            base,
            wait,
            deadline: wait.deadline(),
            held,
            waiter: LazyWaiter::new(),
            polled: false,
        }
    }

    /// Drops the reservations of the plan's words from `from` on.
    fn unreserve_from(table: &P::Target, plan: &Plan, from: usize) {
        for &(rest, _) in plan.iter().skip(from) {
            if let Ok(word) = table.word(rest) {
                table.unreserve(word);
            }
        }
    }

    /// Gives up: drops the reservations not used yet (after the current one) and what is held.
    fn give_up(&mut self, table: &P, error: Error) -> Poll<Result<ManyGuard<P>>> {
        Self::unreserve_from(table, &self.plan, self.held.len() + 1);
        release_all(&**table, &self.held);
        self.held.clear();
        self.plan.clear();
        self.table = None;
        Poll::Ready(Err(error))
    }

    fn poll_many(&mut self, cx: &mut Context<'_>) -> Poll<Result<ManyGuard<P>>> {
        let table = self
            .table
            .take()
            .expect("lock future polled after completion");
        while self.held.len() < self.plan.len() {
            let (place, mode) = self.plan[self.held.len()];
            let want = Want { mode, ..self.base };
            // `None`: still waiting. (The guarded entry borrows the table, so the table is put back
            // only once the guarded entry is gone.)
            let got = match table.word(place) {
                Ok(word) => self.poll_word(&*table, word, &want, cx),
                Err(e) => Some(Err(e)),
            };
            let Some(got) = got else {
                self.table = Some(table);
                return Poll::Pending;
            };
            self.polled = false;
            match got {
                Ok(grant) => self
                    .held
                    .push((place, Hold::of(&want, grant), grant.lease_until)),
                Err(e) => return self.give_up(&table, e),
            }
        }
        Poll::Ready(Ok(ManyGuard::new(table, std::mem::take(&mut self.held))))
    }

    /// Polls for `word`, the plan's next; `None` while it waits.
    fn poll_word(
        &mut self,
        table: &P::Target,
        word: &<P::Target as Table>::Word,
        want: &Want,
        cx: &mut Context<'_>,
    ) -> Option<Result<Grant>> {
        let guarded = table.guarded(word);
        let queue = EntryQueue(&guarded);
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            let grant = if self.polled {
                self.waiter.abandon(&queue, true)
            } else {
                // The time is up before this word's wait began (a try, or a deadline reached
                // on the words before it): one attempt without waiting, as a blocking acquire
                // makes.
                match attempt(table, word, want) {
                    Attempt::Acquired(grant) => Some(grant),
                    Attempt::Failed(e) => return Some(Err(e)),
                    Attempt::Blocked { .. } => {
                        table.unreserve(word);
                        None
                    }
                }
            };
            return Some(grant.ok_or_else(|| ran_out(self.wait)));
        }
        self.polled = true;
        match self.waiter.poll(&queue, want, cx) {
            Poll::Ready(result) => Some(result),
            Poll::Pending => {
                if let Some(d) = self.deadline {
                    timer::wake_at(d, cx.waker().clone());
                }
                None
            }
        }
    }
}

impl<P> Drop for Many<P>
where
    P: Deref,
    P::Target: LockTable,
{
    fn drop(&mut self) {
        let Some(table) = &self.table else { return };
        let next = self.held.len();
        if next < self.plan.len() {
            let (place, _) = self.plan[next];
            if self.polled {
                if let Ok(word) = table.word(place) {
                    let _ = self
                        .waiter
                        .abandon(&EntryQueue(&table.guarded(word)), false);
                }
                Self::unreserve_from(table, &self.plan, next + 1);
            } else {
                Self::unreserve_from(table, &self.plan, next);
            }
        }
        release_all(&**table, &self.held);
    }
}

/// Resolves to a [`ManyGuard`]. Dropping it before then releases what it took, drops its
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
pub struct ManyLockFuture<P>(Many<P>)
where
    P: Deref,
    P::Target: LockTable;

impl<P> ManyLockFuture<P>
where
    P: Deref,
    P::Target: LockTable,
{
    pub(crate) fn new(table: P, plan: Plan) -> Self {
        Self(Many::new(table, plan, Want::EXCLUSIVE, Wait::Forever))
    }
}

impl<P> Future for ManyLockFuture<P>
where
    P: Deref,
    P::Target: LockTable,
{
    type Output = ManyGuard<P>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ManyGuard<P>> {
        self.get_mut().0.poll_many(cx).map(untimed)
    }
}

/// Resolves to `Ok(`[`ManyGuard`]`)` once every key is held in its mode, or to the error that
/// ended the wait, holding nothing. Dropping it cancels exactly.
#[must_use = "futures do nothing unless polled"]
pub struct ManyAcquireFuture<P>(Many<P>)
where
    P: Deref,
    P::Target: LockTable;

impl<P> ManyAcquireFuture<P>
where
    P: Deref,
    P::Target: LockTable,
{
    pub(crate) fn new(table: P, plan: Plan, base: Want, wait: Wait) -> Self {
        Self(Many::new(table, plan, base, wait))
    }
}

impl<P> Future for ManyAcquireFuture<P>
where
    P: Deref,
    P::Target: LockTable,
{
    type Output = Result<ManyGuard<P>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.poll_many(cx)
    }
}

/// The outcome of a plain untimed acquire, which has no way to fail.
fn untimed<T>(result: Result<T>) -> T {
    match result {
        Ok(held) => held,
        Err(e) => unreachable!("an untimed plain acquire failed: {e}"),
    }
}

/// `Debug` for the one-lock futures: the table's name and whether it is ready.
macro_rules! debug_one {
    ($($ty:ident),*) => {$(
        impl<P> fmt::Debug for $ty<P>
        where
            P: Deref,
            P::Target: LockTable,
        {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("ready", &self.0.is_ready())
                    .finish_non_exhaustive()
            }
        }
    )*};
}
debug_one!(LockFuture, AcquireFuture);

/// `Debug` for the multi-lock futures: how many locks, how many held.
macro_rules! debug_many {
    ($($ty:ident),*) => {$(
        impl<P> fmt::Debug for $ty<P>
        where
            P: Deref,
            P::Target: LockTable,
        {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("locks", &self.0.plan.len())
                    .field("held", &self.0.held.len())
                    .finish_non_exhaustive()
            }
        }
    )*};
}
debug_many!(ManyLockFuture, ManyAcquireFuture);

// The futures pin nothing: their queue nodes are boxed (in the box of a one-key future's slow
// state, `Waiting`, or a `LazyWaiter`'s own), so moving one is harmless whatever `P` is.
impl<P: Deref> Unpin for LockFuture<P> where P::Target: LockTable {}
impl<P: Deref> Unpin for AcquireFuture<P> where P::Target: LockTable {}
impl<P: Deref> Unpin for ManyLockFuture<P> where P::Target: LockTable {}
impl<P: Deref> Unpin for ManyAcquireFuture<P> where P::Target: LockTable {}

//! Waiting: one queue per lock, shared by parked threads and async tasks.
//!
//! Every lock in keylock that can make a caller wait keeps its waiters in a `WaitList`: an
//! intrusive, doubly linked FIFO of `WaitNode`s, guarded by a lock that belongs to the lock
//! being waited for (a stripe's queue mutex, a pool shard, the reader gate of an RwLock). A
//! blocked thread's node lives on its stack; a future makes its node on the heap the first time
//! it has to wait (so that an uncontended future stays three words long). Either way a waiter
//! costs one node and nothing else.
//!
//! A node records *how* to wake its owner (`Wake`): unpark a thread, or call a
//! [`std::task::Waker`]. Threads and tasks therefore stand in the same queue and are served in
//! the same order.
//!
//! # Hand-off protocol
//!
//! A releasing holder pops the head of the queue and either
//! - **hands the lock off** (`GRANTED`): the lock stays held and now belongs to the waiter; or
//! - **notifies** it (`NOTIFIED`): the lock is released and the waiter competes for it again,
//!   going back to the *front* of the queue if it loses.
//!
//! At most one notified waiter is out per lock: while it is on its way back, releases notify
//! nobody else (it competes when it comes back, or passes its notification on if it leaves).
//! Waking one more thread per release would only send it to find the lock taken again, and the
//! releasing thread into the kernel every time: on a 16-core machine, with 8 threads on 4 hot
//! keys, that made throughput the rate of wake-ups.
//!
//! Notifying lets a running thread re-take a lock without a context switch (throughput, the
//! parking_lot way); a thread at the head that has waited longer than [`FAIR_AFTER`] is handed
//! the lock, at most once per [`FAIR_AFTER`] per entry (its fairness clock), so nobody starves
//! and a hot key is not handed to a sleeping thread at every release (eventual fairness, with
//! parking_lot's fair-unlock timer). An async task is always handed the lock: a task
//! woken to compete would only come back for one more poll. A shared request never takes a lock
//! ahead of a notified writer (FIFO between modes), and a lock object built `fifo` hands every
//! release to the next waiter.
//!
//! # Custom wake-ups (for front ends)
//!
//! Every async acquire in keylock returns an ordinary [`Future`]. A front end with its own event
//! loop needs no special API: poll the future with a [`Waker`] whose `wake` posts "poll again"
//! to the loop (Python's `loop.call_soon_threadsafe`, a Node.js threadsafe function), and drop
//! the future to cancel. For a blocking wait that must stay interruptible (a signal check every
//! few milliseconds), use [`block_on_until`], which keeps the waiter's place in the queue between
//! slices:
//!
//! ```
//! use std::pin::pin;
//! use std::task::Poll;
//! use std::time::{Duration, Instant};
//! use keylock_core::{wait::block_on_until, KeyPool};
//!
//! let pool: KeyPool = KeyPool::new();
//! let mut fut = pin!(pool.lock_async(b"job-7".as_slice()));
//! let guard = loop {
//!     match block_on_until(fut.as_mut(), Some(Instant::now() + Duration::from_millis(50))) {
//!         Poll::Ready(guard) => break guard,
//!         Poll::Pending => { /* check for signals, then wait again */ }
//!     }
//! };
//! assert!(pool.is_locked(b"job-7".as_slice()));
//! drop(guard);
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake as StdWake, Waker};
use std::time::{Duration, Instant};

use crate::acquisition::Want;
use crate::error::Result;
use crate::sync::{Thread, current_thread, park};

mod list;
pub(crate) mod timer;

pub(crate) use list::{GRANTED, Grant, NOTIFIED, WAITING, WaitList, WaitNode};

/// A waiting thread that has waited this long is handed the lock directly instead of competing
/// for it, at the next release that finds it at the head of the queue; a lock object in this
/// process hands a key (or stripe) over this way at most once per this long (parking_lot's fair
/// unlock timer). The `shm:` scope hands its key to every waiter that has waited this long.
///
/// ```
/// assert_eq!(keylock_core::wait::FAIR_AFTER, std::time::Duration::from_micros(500));
/// ```
pub const FAIR_AFTER: Duration = Duration::from_micros(500);

/// An entry's clock for eventual fairness (kept under its queue lock): when it last handed its
/// lock to a waiting thread. Handing every release to a sleeping thread once the waiters have
/// all waited [`FAIR_AFTER`] (as any hot key's soon have) leaves the lock idle for a wake-up on
/// every release, so that throughput falls to the rate of wake-ups; spaced out, the hand-offs
/// still bound how long a waiter can be passed over.
#[derive(Debug, Default)]
pub(crate) struct FairClock {
    #[cfg(not(keylock_loom))]
    next: Option<Instant>,
}

impl FairClock {
    pub(crate) const fn new() -> Self {
        Self {
            #[cfg(not(keylock_loom))]
            next: None,
        }
    }

    /// Whether a thread that first queued at `since` is due to be handed the lock now: it has
    /// waited [`FAIR_AFTER`], and the entry's last such hand-off is at least that long ago. A
    /// `true` starts the next interval (if the hand-off then finds the lock taken by a running
    /// caller, the waiter stays at the head and is due again at the interval's end).
    #[cfg(not(keylock_loom))]
    #[inline]
    pub(crate) fn due(&mut self, since: Option<Instant>) -> bool {
        let Some(since) = since else { return false };
        let now = Instant::now();
        if now.duration_since(since) < FAIR_AFTER || self.next.is_some_and(|n| now < n) {
            return false;
        }
        self.next = Some(now + FAIR_AFTER);
        true
    }
}

/// Under loom, time does not pass, so the fairness rule is replaced by this switch: the models
/// run once with plain notification and once with hand-off to every waiter.
#[cfg(keylock_loom)]
static LOOM_HAND_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Loom models only: hand every released lock directly to the next waiter (`true`) or notify it
/// (`false`, the default).
#[cfg(keylock_loom)]
#[doc(hidden)]
pub fn loom_hand_off(on: bool) {
    LOOM_HAND_OFF.store(on, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(keylock_loom)]
pub(crate) fn loom_hand_off_on() -> bool {
    LOOM_HAND_OFF.load(std::sync::atomic::Ordering::Relaxed)
}

/// How to wake the owner of a node.
#[derive(Debug)]
pub(crate) enum Wake {
    /// A thread parked in a blocking acquire.
    Thread(Thread),
    /// An async task.
    Task(Waker),
}

impl Wake {
    pub(crate) fn wake(self) {
        match self {
            Wake::Thread(thread) => thread.unpark(),
            Wake::Task(waker) => waker.wake(),
        }
    }
}

/// Wake-ups collected under a queue lock, to run after it is released (a release can wake a
/// whole batch of shared waiters). One wake-up needs no allocation.
#[derive(Debug, Default)]
#[must_use = "wake-ups must be run once the queue lock is released"]
pub(crate) struct Wakes {
    first: Option<Wake>,
    rest: Vec<Wake>,
}

impl Wakes {
    #[inline]
    pub(crate) fn push(&mut self, wake: Option<Wake>) {
        let Some(wake) = wake else { return };
        if self.first.is_none() {
            self.first = Some(wake);
        } else {
            self.rest.push(wake);
        }
    }

    /// Runs them all. Call with no keylock lock held.
    ///
    /// Inline, so that the common case (nothing to wake: every uncontended acquire and release
    /// under the queue lock) costs a test; the wake-ups themselves are out of line.
    #[inline(always)]
    pub(crate) fn run(self) {
        let Wakes { first, rest } = self;
        match first {
            Some(first) => Self::run_all(first, rest),
            // `rest` is only pushed to once `first` is there: empty, nothing to free.
            None => drop(rest),
        }
    }

    #[inline(never)]
    fn run_all(first: Wake, rest: Vec<Wake>) {
        first.wake();
        // One wake-up (an exclusive hand-off) leaves `rest` unallocated: nothing to iterate
        // or free (bench/async_contended.py, held across an await: 1,561 instructions an
        // operation with the loop's iterator made and dropped for it, 1,545 without).
        if rest.capacity() != 0 {
            Self::run_rest(rest);
        }
    }

    #[inline(never)]
    fn run_rest(rest: Vec<Wake>) {
        for wake in rest {
            wake.wake();
        }
    }
}

/// The outcome of an attempt made with the queue locked.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// The lock is held now, as described.
    Acquired(Grant),
    /// The request cannot succeed (a reentrancy limit, say); the waiter leaves with this error.
    Failed(crate::Error),
    /// The lock is taken. The queue's releases will look at the waiters (the caller links its
    /// node before unlocking). `recheck_at`: a time at which the holder may stop holding without
    /// a release (its lease ends), so the waiter should look again then.
    Blocked { recheck_at: Option<Instant> },
}

/// A lock whose waiters stand in a [`WaitList`]: the per-primitive half of the protocol.
///
/// The generic half ([`Waiter`]) enqueues, refreshes wakers, and cancels exactly; the
/// implementor says what "take the lock" and "release it" mean.
pub(crate) trait Queue {
    /// The held queue lock.
    type Locked<'a>
    where
        Self: 'a;

    /// Locks the queue.
    fn lock_queue<'q>(&'q self) -> Self::Locked<'q>;

    /// The waiters, given the held queue lock.
    fn waiters<'g, 'q>(&'q self, locked: &'g mut Self::Locked<'q>) -> &'g mut WaitList;

    /// With the queue locked, for a waiter about to queue: take the lock for `want` if it can
    /// be taken now, else make sure the holder's release will look at the queue. `front`: the
    /// waiter was notified before and lost the race, so nobody queued is ahead of it.
    /// Wake-ups of others (a lease that ended handed the lock on) go to `wakes`.
    fn acquire_locked<'q>(
        &'q self,
        locked: &mut Self::Locked<'q>,
        want: &Want,
        front: bool,
        wakes: &mut Wakes,
    ) -> Attempt;

    /// With the queue locked, for a queued waiter that looks again (a timer fired): end what
    /// has ended by itself (leases) and hand the lock on, collecting wake-ups. Returns when to
    /// look again.
    fn refresh_locked<'q>(
        &'q self,
        _locked: &mut Self::Locked<'q>,
        _wakes: &mut Wakes,
    ) -> Option<Instant> {
        None
    }

    /// With the queue locked, for a waiter leaving without the lock (already unlinked).
    /// `notified` says it had been notified: then, if the lock is free, the next waiter must be
    /// notified in its place. Wake-ups go to `wakes`, to run after unlocking.
    fn leave_locked<'q>(&'q self, locked: &mut Self::Locked<'q>, notified: bool, wakes: &mut Wakes);

    /// Releases a lock that was granted to a waiter that no longer wants it.
    fn release_granted(&self, grant: Grant, want: &Want);

    /// Called, with no lock held, when a waiter takes up a lock that was granted to it while it
    /// was queued (the other ways of finishing go through `acquire_locked` or `leave_locked`).
    fn granted_seen(&self) {}
}

/// The result of polling a [`Waiter`].
#[derive(Debug)]
pub(crate) enum WaitPoll {
    /// Done: the lock is held (as granted), or the request failed.
    Ready(Result<Grant>),
    /// Still waiting; look again at this time even without a wake-up (a lease ends then).
    Pending(Option<Instant>),
}

/// A waiter: a node plus whether it is registered with a queue.
///
/// It must be pinned while registered. Every registered waiter is finished by `poll` returning
/// `Ready` or by `abandon`; the owning future's `Drop` calls `abandon`.
#[derive(Debug)]
pub(crate) struct Waiter {
    node: WaitNode,
    /// True from the moment the node is linked until the waiter has consumed its completion.
    registered: bool,
}

// SAFETY: the node's links are only touched under the queue's lock, its state is atomic, and the
// wake handle it carries (Thread or Waker) is Send + Sync.
unsafe impl Send for Waiter {}
// SAFETY: `&Waiter` gives no access to anything but the atomic state.
unsafe impl Sync for Waiter {}

impl Default for Waiter {
    fn default() -> Self {
        Self::new()
    }
}

impl Waiter {
    pub(crate) fn new() -> Self {
        Self {
            node: WaitNode::new(),
            registered: false,
        }
    }

    /// Whether the waiter is registered with a queue (linked, or completed but not yet seen).
    pub(crate) fn is_registered(&self) -> bool {
        self.registered
    }

    fn parts(self: Pin<&mut Self>) -> (&WaitNode, &mut bool) {
        // SAFETY: we never move the node out; only the `registered` flag is handed out mutably.
        let this = unsafe { self.get_unchecked_mut() };
        (&this.node, &mut this.registered)
    }

    /// The grant a `GRANTED` node carries.
    fn granted(node: &WaitNode) -> Grant {
        // SAFETY: the node is unlinked and its final state was published (we read `GRANTED`
        // with Acquire), so nobody else touches its links any more.
        unsafe { node.links().grant }
    }

    /// Tries to acquire through `queue`: takes the lock, or queues (keeping its place across
    /// polls) and returns `Pending` until it was granted the lock or notified and then won it.
    pub(crate) fn poll<Q: Queue + ?Sized>(
        self: Pin<&mut Self>,
        queue: &Q,
        want: &Want,
        wake: impl Fn() -> Wake,
    ) -> WaitPoll {
        let (node, registered) = self.parts();
        let mut front = false;
        if *registered {
            match node.state() {
                GRANTED => {
                    *registered = false;
                    queue.granted_seen();
                    return WaitPoll::Ready(Ok(Self::granted(node)));
                }
                NOTIFIED => {
                    *registered = false;
                    front = true;
                }
                _ => {
                    let mut locked = queue.lock_queue();
                    match node.state() {
                        WAITING => {
                            // SAFETY: the node is linked and we hold the queue lock.
                            let links = unsafe { node.links() };
                            let fresh = match (&links.wake, wake()) {
                                (Some(Wake::Task(old)), Wake::Task(new)) if old.will_wake(&new) => {
                                    None
                                }
                                (_, new) => Some(new),
                            };
                            if let Some(new) = fresh {
                                links.wake = Some(new);
                            }
                            let mut wakes = Wakes::default();
                            let recheck = queue.refresh_locked(&mut locked, &mut wakes);
                            let state = node.state();
                            drop(locked);
                            wakes.run();
                            return match state {
                                GRANTED => {
                                    *registered = false;
                                    queue.granted_seen();
                                    WaitPoll::Ready(Ok(Self::granted(node)))
                                }
                                _ => WaitPoll::Pending(recheck),
                            };
                        }
                        GRANTED => {
                            drop(locked);
                            *registered = false;
                            queue.granted_seen();
                            return WaitPoll::Ready(Ok(Self::granted(node)));
                        }
                        _ => {
                            *registered = false;
                            return Self::enqueue(
                                node, registered, queue, locked, want, wake, true,
                            );
                        }
                    }
                }
            }
        }
        let locked = queue.lock_queue();
        Self::enqueue(node, registered, queue, locked, want, wake, front)
    }

    fn enqueue<'q, Q: Queue + ?Sized>(
        node: &WaitNode,
        registered: &mut bool,
        queue: &'q Q,
        mut locked: Q::Locked<'q>,
        want: &Want,
        wake: impl Fn() -> Wake,
        front: bool,
    ) -> WaitPoll {
        let mut wakes = Wakes::default();
        let recheck_at = match queue.acquire_locked(&mut locked, want, front, &mut wakes) {
            Attempt::Acquired(grant) => {
                drop(locked);
                wakes.run();
                return WaitPoll::Ready(Ok(grant));
            }
            Attempt::Failed(error) => {
                drop(locked);
                wakes.run();
                return WaitPoll::Ready(Err(error));
            }
            Attempt::Blocked { recheck_at } => recheck_at,
        };
        // SAFETY: the node is not linked (not registered), we hold the queue lock, and the
        // waiter is pinned: it stays put until `poll` sees its completion or `abandon` unlinks it.
        unsafe {
            let links = node.links();
            links.wake = Some(wake());
            links.want = *want;
            // Only a thread's wait is timed: a task is always handed the lock (see
            // `Completion::is_due`), so it needs no clock read.
            #[cfg(not(keylock_loom))]
            if links.since.is_none() && matches!(links.wake, Some(Wake::Thread(_))) {
                links.since = Some(Instant::now());
            }
            node.set_waiting();
            queue
                .waiters(&mut locked)
                .push(std::ptr::NonNull::from(node), front);
        }
        *registered = true;
        drop(locked);
        wakes.run();
        WaitPoll::Pending(recheck_at)
    }

    /// Leaves the queue without the lock. If the lock had already been granted, its grant is
    /// returned when `keep_granted` and the lock released otherwise; if the waiter had been
    /// notified, the notification passes to the next waiter.
    pub(crate) fn abandon<Q: Queue + ?Sized>(
        self: Pin<&mut Self>,
        queue: &Q,
        keep_granted: bool,
    ) -> Option<Grant> {
        let (node, registered) = self.parts();
        if !*registered {
            return None;
        }
        *registered = false;
        let mut locked = queue.lock_queue();
        let mut wakes = Wakes::default();
        match node.state() {
            WAITING => {
                // SAFETY: the node is linked in this queue (WAITING under the queue lock).
                unsafe {
                    queue
                        .waiters(&mut locked)
                        .remove(std::ptr::NonNull::from(node))
                };
                queue.leave_locked(&mut locked, false, &mut wakes);
            }
            NOTIFIED => queue.leave_locked(&mut locked, true, &mut wakes),
            _ => {
                drop(locked);
                queue.granted_seen();
                let grant = Self::granted(node);
                if keep_granted {
                    return Some(grant);
                }
                // SAFETY: as in `granted`: the node is ours again.
                let want = unsafe { node.links().want };
                queue.release_granted(grant, &want);
                return None;
            }
        }
        drop(locked);
        wakes.run();
        None
    }

    /// [`poll`](Self::poll) for an async task: the task in `cx` is the one woken, and a pending
    /// wait that should look again at some time (a lease ends then) gets a timer for it.
    pub(crate) fn poll_task<Q: Queue + ?Sized>(
        self: Pin<&mut Self>,
        queue: &Q,
        want: &Want,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Grant>> {
        match self.poll(queue, want, || Wake::Task(cx.waker().clone())) {
            WaitPoll::Ready(result) => Poll::Ready(result),
            WaitPoll::Pending(recheck) => {
                if let Some(at) = recheck {
                    timer::wake_at(at, cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    /// Whether a registered waiter may have been completed (granted or notified) since it last
    /// looked. A parked thread re-polls when this turns true.
    fn completed(&self) -> bool {
        self.node.state() != WAITING
    }
}

/// A future's [`Waiter`], made on first need. A future whose lock is free on its first poll
/// never makes one; a future that must wait allocates its one queue node here, on the heap, so
/// that the future itself stays a few words long and cheap to move (the uncontended async path
/// then costs about what the blocking one does). `Unpin`: the waiter is pinned by its box.
#[derive(Debug, Default)]
pub(crate) struct LazyWaiter(Option<Pin<Box<Waiter>>>);

impl LazyWaiter {
    pub(crate) const fn new() -> Self {
        Self(None)
    }

    /// Whether a waiter exists and is registered with a queue.
    #[inline]
    pub(crate) fn is_registered(&self) -> bool {
        self.0.as_ref().is_some_and(|w| w.is_registered())
    }

    /// Polls the waiter (made now if it does not exist yet) for `queue`, waking the task in
    /// `cx`; a pending wait that should look again at some time gets a timer for it.
    pub(crate) fn poll<Q: Queue + ?Sized>(
        &mut self,
        queue: &Q,
        want: &Want,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Grant>> {
        let waiter = self.0.get_or_insert_with(|| Box::pin(Waiter::new()));
        waiter.as_mut().poll_task(queue, want, cx)
    }

    /// [`Waiter::abandon`], if a waiter exists.
    pub(crate) fn abandon<Q: Queue + ?Sized>(
        &mut self,
        queue: &Q,
        keep_granted: bool,
    ) -> Option<Grant> {
        match self.0.as_mut() {
            Some(waiter) => waiter.as_mut().abandon(queue, keep_granted),
            None => None,
        }
    }
}

/// Blocks the current thread until `queue`'s lock is taken for `want`, or `deadline` passes
/// (then `Ok(None)`). `try_fast` is the caller's lock-free attempt, retried while spinning.
pub(crate) fn wait_blocking<Q: Queue + ?Sized>(
    queue: &Q,
    want: &Want,
    deadline: Option<Instant>,
    mut try_fast: impl FnMut() -> Option<Grant>,
) -> Result<Option<Grant>> {
    let mut spin = crate::sync::Spin::default();
    while spin.spin() {
        if let Some(grant) = try_fast() {
            return Ok(Some(grant));
        }
    }
    let mut waiter = std::pin::pin!(Waiter::new());
    let thread = current_thread();
    loop {
        let recheck = match waiter
            .as_mut()
            .poll(queue, want, || Wake::Thread(thread.clone()))
        {
            WaitPoll::Ready(result) => return result.map(Some),
            WaitPoll::Pending(recheck) => recheck,
        };
        loop {
            if waiter.completed() {
                break;
            }
            let until = match (deadline, recheck) {
                (Some(d), Some(r)) => Some(d.min(r)),
                (d, r) => d.or(r),
            };
            if !park(until) {
                if recheck.is_some_and(|r| deadline.is_none_or(|d| r < d)) && !past(deadline) {
                    break; // a lease ended: look again
                }
                return Ok(waiter.as_mut().abandon(queue, true));
            }
        }
    }
}

/// Whether `deadline` has passed (never, for `None`).
#[inline]
fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// The deadline `timeout` from now; `None` (wait forever) when it lies beyond what `Instant`
/// can represent.
#[inline]
pub(crate) fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// A waker that unparks one thread.
struct ThreadWaker(Thread);

impl StdWake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `fut` once on the current thread, with a waker that unparks this thread, and never
/// parks: a lock that is free is taken (`Poll::Ready`), and a lock that is taken has `fut`'s
/// waiter standing in its queue when this returns (`Poll::Pending`), so that every request made
/// after it queues behind it.
///
/// A keylock future joins its lock's queue on its first poll. A front end that hands the wait to
/// another context before polling (Python lets go of the GIL, then waits) would otherwise leave a
/// window in which the waiter is counted but not queued, and a newcomer could pass it. Calling
/// this first, before letting go, closes that window; [`block_on_until`] then waits in the queue
/// place it kept.
pub fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    let waker = Waker::from(Arc::new(ThreadWaker(current_thread())));
    fut.poll(&mut Context::from_waker(&waker))
}

/// Polls `fut` on the current thread, parking between polls, until it is ready or `until`
/// passes (`None`: no limit). Returns `Poll::Pending` when `until` passed first.
///
/// The future keeps its place in its lock's queue across calls, so a caller can wait in slices
/// and do something between them (Python checks for signals) without losing its turn. Dropping
/// the future cancels the wait.
pub fn block_on_until<F: Future + ?Sized>(
    mut fut: Pin<&mut F>,
    until: Option<Instant>,
) -> Poll<F::Output> {
    let waker = Waker::from(Arc::new(ThreadWaker(current_thread())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Poll::Ready(out);
        }
        if !park(until) {
            return fut.as_mut().poll(&mut cx);
        }
    }
}

#[cfg(all(test, not(keylock_loom)))]
mod tests {
    use std::time::{Duration, Instant};

    use super::{FAIR_AFTER, FairClock};

    #[test]
    fn the_fair_clock_hands_over_to_a_long_waiter_once_per_interval() {
        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .expect("the clock reaches a second back");
        let later = Instant::now() + Duration::from_secs(3600);
        let mut clock = FairClock::new();
        // A waiter with no start, or one that has not waited FAIR_AFTER, is not due.
        assert!(!clock.due(None));
        assert!(!clock.due(Some(later)));
        assert_eq!(clock.next, None);
        // One that has: due, and the next hand-off waits FAIR_AFTER from now.
        let before = Instant::now();
        assert!(clock.due(Some(long_ago)));
        let next = clock.next.expect("the interval started");
        assert!(next >= before + FAIR_AFTER);
        // Within the interval nobody is due, however long they waited; after it, they are.
        clock.next = Some(later);
        assert!(!clock.due(Some(long_ago)));
        clock.next = Some(before);
        assert!(clock.due(Some(long_ago)));
    }
}

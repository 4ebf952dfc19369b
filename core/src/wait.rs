//! Waiting: one queue per lock, shared by parked threads and async tasks.
//!
//! Every lock in keylock that can make a caller wait keeps its waiters in a [`WaitList`]: an
//! intrusive, doubly linked FIFO of [`WaitNode`]s, guarded by a lock that belongs to the lock
//! being waited for (a stripe's queue mutex, a pool shard, the reader gate of an RwLock). A
//! blocked thread's node lives on its stack; a future makes its node on the heap the first time
//! it has to wait (so that an uncontended future stays three words long). Either way a waiter
//! costs one node and nothing else.
//!
//! A node records *how* to wake its owner ([`Wake`]): unpark a thread, or call a
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
//! Notifying lets a running thread re-take a lock without a context switch (throughput, the
//! parking_lot way); a waiter that has waited longer than [`FAIR_AFTER`] is always handed the
//! lock, so nobody starves (eventual fairness).
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

use std::cell::UnsafeCell;
use std::future::Future;
use std::marker::PhantomPinned;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::{Context, Poll, Wake as StdWake, Waker};
use std::time::{Duration, Instant};

use crate::sync::{AtomicU8, Ordering, Thread, current_thread, park};

/// A waiter that has waited this long is handed the lock directly instead of competing for it.
///
/// ```
/// assert_eq!(keylock_core::wait::FAIR_AFTER, std::time::Duration::from_micros(500));
/// ```
pub const FAIR_AFTER: Duration = Duration::from_micros(500);

/// Node states. A node is `WAITING` while linked in a list; the releasing side unlinks it and
/// then stores `NOTIFIED` or `GRANTED` as its very last access to the node.
const WAITING: u8 = 0;
/// Unlinked; the lock was released for this waiter to compete for.
const NOTIFIED: u8 = 1;
/// Unlinked; the lock is held on this waiter's behalf.
const GRANTED: u8 = 2;

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

/// The part of a node that only the holder of the queue's lock may touch.
#[derive(Debug)]
struct Links {
    prev: Option<NonNull<WaitNode>>,
    next: Option<NonNull<WaitNode>>,
    wake: Option<Wake>,
    /// When this waiter first queued (for eventual fairness).
    #[cfg(not(keylock_loom))]
    since: Option<Instant>,
    /// Whether this waiter was notified before and lost the race (it then queues at the front).
    requeued: bool,
}

/// One waiter's place in a [`WaitList`].
#[derive(Debug)]
pub(crate) struct WaitNode {
    /// `WAITING`, `NOTIFIED` or `GRANTED` (see the constants above).
    state: AtomicU8,
    /// Guarded by the lock of the list the node is (or was last) linked in.
    links: UnsafeCell<Links>,
    _pin: PhantomPinned,
}

impl WaitNode {
    fn new() -> Self {
        Self {
            state: AtomicU8::new(WAITING),
            links: UnsafeCell::new(Links {
                prev: None,
                next: None,
                wake: None,
                #[cfg(not(keylock_loom))]
                since: None,
                requeued: false,
            }),
            _pin: PhantomPinned,
        }
    }

    #[inline]
    fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }
}

/// An intrusive FIFO of waiters. It has no lock of its own: every method requires the lock that
/// guards the list, which the type system cannot see, hence `unsafe`.
#[derive(Debug, Default)]
pub(crate) struct WaitList {
    head: Option<NonNull<WaitNode>>,
    tail: Option<NonNull<WaitNode>>,
}

// SAFETY: a WaitList holds pointers to nodes whose linked state is only touched with the list's
// guarding lock held, from whichever thread holds that lock; the nodes' owners keep them alive and
// pinned while linked (see `Waiter`).
unsafe impl Send for WaitList {}

impl WaitList {
    pub(crate) const fn new() -> Self {
        Self {
            head: None,
            tail: None,
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Links `node` at the back (or the front, for a waiter that was notified and lost).
    ///
    /// # Safety
    /// The caller holds the list's lock, `node` is not linked anywhere, and it stays pinned and
    /// alive until it is unlinked by `pop_front` or `remove`.
    unsafe fn push(&mut self, node: NonNull<WaitNode>, front: bool) {
        // SAFETY: the caller holds the list lock and owns the unlinked node.
        let links = unsafe { &mut *node.as_ref().links.get() };
        if front {
            links.prev = None;
            links.next = self.head;
            match self.head {
                // SAFETY: linked nodes are alive and guarded by the list lock we hold.
                Some(head) => unsafe { (*head.as_ref().links.get()).prev = Some(node) },
                None => self.tail = Some(node),
            }
            self.head = Some(node);
        } else {
            links.next = None;
            links.prev = self.tail;
            match self.tail {
                // SAFETY: as above.
                Some(tail) => unsafe { (*tail.as_ref().links.get()).next = Some(node) },
                None => self.head = Some(node),
            }
            self.tail = Some(node);
        }
    }

    /// Unlinks `node`.
    ///
    /// # Safety
    /// The caller holds the list's lock and `node` is linked in this list.
    unsafe fn remove(&mut self, node: NonNull<WaitNode>) {
        // SAFETY: the node is linked here, so alive, and we hold the list lock.
        let links = unsafe { &mut *node.as_ref().links.get() };
        match links.prev {
            // SAFETY: neighbours of a linked node are linked, alive and guarded by our lock.
            Some(prev) => unsafe { (*prev.as_ref().links.get()).next = links.next },
            None => self.head = links.next,
        }
        match links.next {
            // SAFETY: as above.
            Some(next) => unsafe { (*next.as_ref().links.get()).prev = links.prev },
            None => self.tail = links.prev,
        }
        links.prev = None;
        links.next = None;
    }

    /// Unlinks the head and tells whether it should be handed the lock (eventual fairness).
    /// The caller then completes it with [`Completion::grant`] or [`Completion::notify`].
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<Completion> {
        let node = self.head?;
        // SAFETY: `node` is the linked head; the caller holds the list lock (it has `&mut self`,
        // and every WaitList lives inside the data its lock guards).
        unsafe { self.remove(node) };
        Some(Completion { node })
    }
}

/// A node just unlinked by [`WaitList::pop_front`]; it must be completed while the list's lock is
/// still held, and the returned [`Wake`] invoked after releasing it.
#[derive(Debug)]
#[must_use]
pub(crate) struct Completion {
    node: NonNull<WaitNode>,
}

impl Completion {
    /// Whether this waiter has waited long enough to be handed the lock rather than notified.
    pub(crate) fn is_due(&self) -> bool {
        // SAFETY: the node was unlinked under the list lock, which the caller still holds, and
        // its owner cannot free it before we store its final state.
        let links = unsafe { &*self.node.as_ref().links.get() };
        #[cfg(not(keylock_loom))]
        {
            links.requeued || links.since.is_some_and(|t| t.elapsed() >= FAIR_AFTER)
        }
        #[cfg(keylock_loom)]
        {
            links.requeued || LOOM_HAND_OFF.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    /// The waiter now holds the lock.
    pub(crate) fn grant(self) -> Option<Wake> {
        self.finish(GRANTED)
    }

    /// The lock was released; the waiter competes for it again.
    pub(crate) fn notify(self) -> Option<Wake> {
        self.finish(NOTIFIED)
    }

    fn finish(self, state: u8) -> Option<Wake> {
        // SAFETY: as in `is_due`. Taking the wake handle out before publishing the state means
        // the store below is our last access to the node: after it the owner may free it.
        unsafe {
            let node = self.node.as_ref();
            let wake = (*node.links.get()).wake.take();
            node.state.store(state, Ordering::Release);
            wake
        }
    }
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

    /// With the queue locked, for a waiter about to queue: take the lock if it is free, else
    /// make sure the holder's release will look at the queue. Returns whether it was taken.
    fn acquire_locked<'q>(&'q self, locked: &mut Self::Locked<'q>) -> bool;

    /// With the queue locked, for a waiter leaving without the lock (already unlinked).
    /// `notified` says it had been notified: then, if the lock is free, the next waiter must be
    /// notified in its place. Returns that waiter's wake-up, to call after unlocking.
    fn leave_locked<'q>(&'q self, locked: &mut Self::Locked<'q>, notified: bool) -> Option<Wake>;

    /// Releases a lock that was granted to a waiter that no longer wants it.
    fn release_granted(&self);
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

    /// Tries to acquire through `queue`: takes the lock, or queues (keeping its place across
    /// polls) and returns `Pending` until it was granted the lock or notified and then won it.
    pub(crate) fn poll<Q: Queue + ?Sized>(
        self: Pin<&mut Self>,
        queue: &Q,
        wake: impl Fn() -> Wake,
    ) -> Poll<()> {
        let (node, registered) = self.parts();
        let mut front = false;
        if *registered {
            match node.state() {
                GRANTED => {
                    *registered = false;
                    return Poll::Ready(());
                }
                NOTIFIED => {
                    *registered = false;
                    front = true;
                }
                _ => {
                    let locked = queue.lock_queue();
                    match node.state() {
                        WAITING => {
                            // SAFETY: the node is linked and we hold the queue lock.
                            let links = unsafe { &mut *node.links.get() };
                            let fresh = match (&links.wake, wake()) {
                                (Some(Wake::Task(old)), Wake::Task(new)) if old.will_wake(&new) => {
                                    None
                                }
                                (_, new) => Some(new),
                            };
                            if let Some(new) = fresh {
                                links.wake = Some(new);
                            }
                            return Poll::Pending;
                        }
                        GRANTED => {
                            *registered = false;
                            return Poll::Ready(());
                        }
                        _ => {
                            *registered = false;
                            return Self::enqueue(node, registered, queue, locked, wake, true);
                        }
                    }
                }
            }
        }
        let locked = queue.lock_queue();
        Self::enqueue(node, registered, queue, locked, wake, front)
    }

    fn enqueue<'q, Q: Queue + ?Sized>(
        node: &WaitNode,
        registered: &mut bool,
        queue: &'q Q,
        mut locked: Q::Locked<'q>,
        wake: impl Fn() -> Wake,
        front: bool,
    ) -> Poll<()> {
        if queue.acquire_locked(&mut locked) {
            return Poll::Ready(());
        }
        // SAFETY: the node is not linked (not registered), we hold the queue lock, and the
        // waiter is pinned: it stays put until `poll` sees its completion or `abandon` unlinks it.
        unsafe {
            let links = &mut *node.links.get();
            links.wake = Some(wake());
            links.requeued = front;
            #[cfg(not(keylock_loom))]
            if links.since.is_none() {
                links.since = Some(Instant::now());
            }
            node.state.store(WAITING, Ordering::Relaxed);
            queue.waiters(&mut locked).push(NonNull::from(node), front);
        }
        *registered = true;
        Poll::Pending
    }

    /// Leaves the queue without the lock. If the lock had already been granted, it is kept when
    /// `keep_granted` (the return value is then `true`) and otherwise released; if the waiter had
    /// been notified, the notification passes to the next waiter.
    pub(crate) fn abandon<Q: Queue + ?Sized>(
        self: Pin<&mut Self>,
        queue: &Q,
        keep_granted: bool,
    ) -> bool {
        let (node, registered) = self.parts();
        if !*registered {
            return false;
        }
        *registered = false;
        let mut locked = queue.lock_queue();
        let wake = match node.state() {
            WAITING => {
                // SAFETY: the node is linked in this queue (WAITING under the queue lock).
                unsafe { queue.waiters(&mut locked).remove(NonNull::from(node)) };
                queue.leave_locked(&mut locked, false)
            }
            NOTIFIED => queue.leave_locked(&mut locked, true),
            _ => {
                drop(locked);
                if !keep_granted {
                    queue.release_granted();
                }
                return keep_granted;
            }
        };
        drop(locked);
        if let Some(wake) = wake {
            wake.wake();
        }
        false
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
/// then costs about what the blocking one does).
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

    /// The waiter, made now if it does not exist yet.
    pub(crate) fn get(self: Pin<&mut Self>) -> Pin<&mut Waiter> {
        // The waiter is pinned by its box; the LazyWaiter itself need not stay put.
        Pin::into_inner(self)
            .0
            .get_or_insert_with(|| Box::pin(Waiter::new()))
            .as_mut()
    }

    /// [`Waiter::abandon`], if a waiter exists.
    pub(crate) fn abandon<Q: Queue + ?Sized>(
        self: Pin<&mut Self>,
        queue: &Q,
        keep_granted: bool,
    ) -> bool {
        match Pin::into_inner(self).0.as_mut() {
            Some(waiter) => waiter.as_mut().abandon(queue, keep_granted),
            None => false,
        }
    }
}

/// Blocks the current thread until `queue`'s lock is taken or `deadline` passes.
/// `try_fast` is the caller's lock-free attempt, retried while spinning.
pub(crate) fn wait_blocking<Q: Queue + ?Sized>(
    queue: &Q,
    deadline: Option<Instant>,
    mut try_fast: impl FnMut() -> bool,
) -> bool {
    let mut spin = crate::sync::Spin::default();
    while spin.spin() {
        if try_fast() {
            return true;
        }
    }
    let mut waiter = std::pin::pin!(Waiter::new());
    let thread = current_thread();
    loop {
        if waiter
            .as_mut()
            .poll(queue, || Wake::Thread(thread.clone()))
            .is_ready()
        {
            return true;
        }
        loop {
            if waiter.completed() {
                break;
            }
            if !park(deadline) {
                return waiter.as_mut().abandon(queue, true);
            }
        }
    }
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

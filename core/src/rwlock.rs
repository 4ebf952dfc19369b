//! The adder reader-writer lock: writer-preferring, with readers counted in two striped
//! increment-only counters (entries and exits) instead of one shared reader count.
//!
//! Readers announce themselves on `ingress` and leave on `egress`, two striped increment-only
//! counters ([`Adder`]), so readers on different cores touch different cache lines. A writer
//! takes the writer mutex, raises `phase` (which turns new readers away), then waits until
//! `egress.sum() == ingress.sum()`, **reading egress first**: a reader that arrives between the
//! two reads is then counted in ingress but not egress, so the writer keeps waiting (and that
//! reader sees the raised phase and backs out). Read in the other order, a reader that entered
//! and left in between would be counted in egress only, and the sums could match while another
//! reader is still inside. (The loom model `rw_writer_excludes_readers` fails when built with
//! `--cfg keylock_swap_rw_order`, which swaps the two reads.)
//!
//! Waiting: readers that find a writer park in the gate's queue; the writer's release grants all
//! of them at once (counting them in ingress before it lowers the phase), so waiting readers get
//! a turn between two writers. Writers queue on the writer mutex. A writer draining readers waits
//! in a single wake-up slot that leaving readers fire.
//!
//! Preference: writers are preferred (C-RW-WP). Once a writer holds the writer mutex, readers
//! that arrive wait until it is done, even if readers are inside. Readers already waiting when a
//! writer leaves go before the next writer, so a stream of writers cannot starve them; a stream
//! of readers cannot starve a writer either, since new readers stop entering once it arrives.

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::acquisition::{Mode, Wait, Want};
use crate::adder::Adder;
use crate::entry::{Hold, Policy};
use crate::error::{Error, Result};
use crate::guarded::{self, EntryFuture, RawLock, RawLockEntry};
use crate::sync::{
    AtomicU8, Mutex, MutexGuard, Ordering, Spin, current_thread, park, store_load_fence,
};
use crate::wait::{
    Attempt, Grant, LazyWaiter, Queue, WaitList, Wake, Wakes, deadline_after, wait_blocking,
};

/// `phase`: no writer.
const NONE: u8 = 0;
/// `phase`: a writer holds the writer mutex and waits for readers to leave. New readers wait.
const DRAINING: u8 = 1;
/// `phase`: a writer holds the lock.
const HELD: u8 = 2;

/// What the reader gate's lock guards.
#[derive(Debug, Default)]
struct Gate {
    /// Readers waiting for the writer to leave.
    readers: WaitList,
    /// The draining writer's wake-up, fired by a reader leaving.
    drain: Option<Wake>,
}

/// The raw adder reader-writer lock, for use with [`lock_api`].
///
/// One uncontended lock is [`RawAdderRwLock::SIZE`] bytes; under contention each reader counter
/// grows to at most one cache-padded cell per core (the next power of two at or above the
/// available parallelism), allocated once and kept until the lock is dropped.
///
/// ```
/// use keylock_core::AdderRwLock;
///
/// let lock = AdderRwLock::new(5);
/// {
///     let a = lock.read();
///     let b = lock.read();
///     assert_eq!(*a + *b, 10);
/// }
/// *lock.write() += 1;
/// assert_eq!(*lock.read(), 6);
/// ```
#[derive(Debug)]
pub struct RawAdderRwLock {
    /// Serialises writers; holds both parked threads and async tasks. Its fence numbers the
    /// write acquisitions.
    writer: RawLock,
    /// `NONE`, `DRAINING` or `HELD` (see the constants).
    phase: AtomicU8,
    /// Readers that announced themselves.
    ingress: Adder,
    /// Readers that left (or backed out).
    egress: Adder,
    /// Waiting readers and the draining writer's wake-up.
    gate: Mutex<Gate>,
}

impl Default for RawAdderRwLock {
    fn default() -> Self {
        Self::new()
    }
}

impl RawAdderRwLock {
    /// Bytes taken by one lock that has never been contended.
    pub const SIZE: usize = std::mem::size_of::<Self>();

    /// A new, unlocked lock.
    #[cfg(not(keylock_loom))]
    pub const fn new() -> Self {
        Self {
            writer: RawLock::new(),
            phase: AtomicU8::new(NONE),
            ingress: Adder::new(),
            egress: Adder::new(),
            gate: Mutex::new(Gate {
                readers: WaitList::new(),
                drain: None,
            }),
        }
    }

    /// A new, unlocked lock.
    #[cfg(keylock_loom)]
    pub fn new() -> Self {
        Self {
            writer: RawLock::new(),
            phase: AtomicU8::new(NONE),
            ingress: Adder::new(),
            egress: Adder::new(),
            gate: Mutex::new(Gate::default()),
        }
    }

    /// Heap bytes held by the reader counters' cells (0 until readers have collided).
    pub fn heap_bytes(&self) -> usize {
        (self.ingress.cells() + self.egress.cells())
            * std::mem::size_of::<crossbeam_utils::CachePadded<usize>>()
    }

    // ---- readers ----

    #[inline]
    fn try_read_fast(&self) -> bool {
        self.ingress.increment();
        store_load_fence();
        if self.phase.load(Ordering::SeqCst) == NONE {
            return true;
        }
        self.back_out();
        false
    }

    /// A reader that counted itself in while a writer is present takes itself out again.
    #[cold]
    fn back_out(&self) {
        self.egress.increment();
        self.wake_drainer();
    }

    #[cold]
    fn wake_drainer(&self) {
        let wake = self.gate.lock().drain.take();
        if let Some(wake) = wake {
            wake.wake();
        }
    }

    #[inline]
    fn read_until(&self, deadline: Option<Instant>) -> bool {
        self.try_read_fast() || self.read_slow(deadline)
    }

    #[cold]
    fn read_slow(&self, deadline: Option<Instant>) -> bool {
        let got = wait_blocking(&ReaderGate(self), &Want::SHARED, deadline, || {
            (self.phase.load(Ordering::Relaxed) == NONE && self.try_read_fast())
                .then(Grant::default)
        });
        matches!(got, Ok(Some(_)))
    }

    #[inline]
    fn read_release(&self) {
        self.egress.increment();
        store_load_fence();
        if self.phase.load(Ordering::SeqCst) != NONE {
            self.wake_drainer();
        }
    }

    // ---- writers ----

    fn drained(&self) -> bool {
        // Egress first: see the module documentation. The swapped order exists only so that a
        // test can show the loom model catching it.
        #[cfg(not(keylock_swap_rw_order))]
        {
            let egress = self.egress.sum();
            let ingress = self.ingress.sum();
            egress == ingress
        }
        #[cfg(keylock_swap_rw_order)]
        {
            let ingress = self.ingress.sum();
            let egress = self.egress.sum();
            egress == ingress
        }
    }

    /// The writer mutex as a guarded entry.
    #[inline]
    fn writer(&self) -> RawLockEntry<'_> {
        RawLockEntry {
            lock: &self.writer,
            policy: Policy::DEFAULT,
        }
    }

    /// Takes the write lock, waiting until `deadline`; returns its fence.
    fn write_until(&self, deadline: Option<Instant>) -> Option<u64> {
        let wait = deadline.map_or(Wait::Forever, Wait::Until);
        let fence = guarded::acquire(&self.writer(), &Want::EXCLUSIVE, wait)
            .ok()?
            .fence;
        self.phase.store(DRAINING, Ordering::SeqCst);
        store_load_fence();
        if self.drain_until(deadline) {
            self.phase.store(HELD, Ordering::Relaxed);
            Some(fence)
        } else {
            self.write_release(fence);
            None
        }
    }

    fn drain_until(&self, deadline: Option<Instant>) -> bool {
        let mut spin = Spin::default();
        loop {
            if self.drained() {
                return true;
            }
            if !spin.spin() {
                break;
            }
        }
        let thread = current_thread();
        loop {
            if let Poll::Ready(()) = self.poll_drain(|| Wake::Thread(thread.clone())) {
                return true;
            }
            if !park(deadline) {
                self.gate.lock().drain = None;
                return self.drained();
            }
        }
    }

    fn poll_drain(&self, wake: impl FnOnce() -> Wake) -> Poll<()> {
        if self.drained() {
            return Poll::Ready(());
        }
        let mut gate = self.gate.lock();
        if self.drained() {
            gate.drain = None;
            return Poll::Ready(());
        }
        gate.drain = Some(wake());
        Poll::Pending
    }

    /// Ends the write (or the attempt at one) numbered `fence`: waiting readers are counted in
    /// and granted, then the phase drops and the writer mutex passes on.
    ///
    /// Readers are granted one per gate lock so that each wake-up runs with no lock held (a
    /// front end's waker may need a lock of its own, such as Python's GIL). Readers that queue
    /// meanwhile are granted too: the phase stays raised until the queue is empty.
    fn write_release(&self, fence: u64) {
        loop {
            let mut gate = self.gate.lock();
            gate.drain = None;
            let Some(reader) = gate.readers.pop_front() else {
                self.phase.store(NONE, Ordering::SeqCst);
                break;
            };
            self.ingress.increment();
            let wake = reader.grant(Grant::default());
            drop(gate);
            if let Some(wake) = wake {
                wake.wake();
            }
        }
        let hold = Hold {
            mode: Mode::Exclusive,
            fence,
            ticket: 0,
            owner: None,
            units: 0,
        };
        // The caller holds the writer mutex with this fence: the release cannot be refused.
        let _ = guarded::release(&self.writer(), &hold);
    }

    /// Takes the write lock if nobody holds the lock; its fence.
    fn try_write_now(&self) -> Option<u64> {
        let fence = self.writer.entry.try_fast(Mode::Exclusive, false)?;
        self.phase.store(DRAINING, Ordering::SeqCst);
        store_load_fence();
        if self.drained() {
            self.phase.store(HELD, Ordering::Relaxed);
            Some(fence)
        } else {
            self.write_release(fence);
            None
        }
    }
}

/// The reader side as a [`Queue`]: readers wait in the gate until the writer leaves.
struct ReaderGate<'a>(&'a RawAdderRwLock);

impl Queue for ReaderGate<'_> {
    type Locked<'a>
        = MutexGuard<'a, Gate>
    where
        Self: 'a;

    fn lock_queue<'q>(&'q self) -> Self::Locked<'q> {
        self.0.gate.lock()
    }

    fn waiters<'g, 'q>(&'q self, locked: &'g mut Self::Locked<'q>) -> &'g mut WaitList {
        &mut locked.readers
    }

    fn acquire_locked<'q>(
        &'q self,
        _locked: &mut Self::Locked<'q>,
        _want: &Want,
        _front: bool,
        _wakes: &mut Wakes,
    ) -> Attempt {
        let lock = self.0;
        lock.ingress.increment();
        store_load_fence();
        if lock.phase.load(Ordering::SeqCst) == NONE {
            return Attempt::Acquired(Grant::default());
        }
        // Back out. The draining writer needs no wake-up for this: both increments happen under
        // the gate lock, and the writer's last check before it sleeps is made under it too.
        lock.egress.increment();
        Attempt::Blocked { recheck_at: None }
    }

    fn leave_locked<'q>(
        &'q self,
        _locked: &mut Self::Locked<'q>,
        _notified: bool,
        _wakes: &mut Wakes,
    ) {
        // Readers are only ever granted, never notified: nothing to pass on.
    }

    fn release_granted(&self, _grant: Grant, _want: &Want) {
        self.0.read_release();
    }
}

// SAFETY: a shared lock is released only by `unlock_shared` after a successful shared acquire
// and an exclusive one likewise; readers exclude writers and writers exclude everyone, as argued
// in the module documentation and checked by the loom models.
unsafe impl lock_api::RawRwLock for RawAdderRwLock {
    #[cfg(not(keylock_loom))]
    #[allow(clippy::declare_interior_mutable_const)] // lock_api's required initialiser
    const INIT: Self = Self::new();
    #[cfg(keylock_loom)]
    #[allow(clippy::declare_interior_mutable_const)] // lock_api's required initialiser
    const INIT: Self = panic!("loom builds construct locks with RawAdderRwLock::new");

    /// Guards may be sent to and released on another thread.
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock_shared(&self) {
        self.read_until(None);
    }

    #[inline]
    fn try_lock_shared(&self) -> bool {
        self.try_read_fast()
    }

    #[inline]
    unsafe fn unlock_shared(&self) {
        self.read_release();
    }

    fn lock_exclusive(&self) {
        self.write_until(None);
    }

    fn try_lock_exclusive(&self) -> bool {
        self.try_write_now().is_some()
    }

    unsafe fn unlock_exclusive(&self) {
        // lock_api's contract: the caller holds the write lock, so the current fence is its own.
        self.write_release(self.writer.entry.fence());
    }

    fn is_locked(&self) -> bool {
        self.phase.load(Ordering::Relaxed) != NONE || self.egress.sum() != self.ingress.sum()
    }

    fn is_locked_exclusive(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == HELD
    }
}

// SAFETY: the timed variants give up only after removing every trace of the attempt.
unsafe impl lock_api::RawRwLockTimed for RawAdderRwLock {
    type Duration = Duration;
    type Instant = Instant;

    fn try_lock_shared_for(&self, timeout: Duration) -> bool {
        self.read_until(deadline_after(timeout))
    }

    fn try_lock_shared_until(&self, deadline: Instant) -> bool {
        self.read_until(Some(deadline))
    }

    fn try_lock_exclusive_for(&self, timeout: Duration) -> bool {
        self.write_until(deadline_after(timeout)).is_some()
    }

    fn try_lock_exclusive_until(&self, deadline: Instant) -> bool {
        self.write_until(Some(deadline)).is_some()
    }
}

/// A reader-writer lock that protects `T`, built on [`RawAdderRwLock`] with [`lock_api`].
///
/// ```
/// use keylock_core::AdderRwLock;
/// static CONFIG: AdderRwLock<u32> = AdderRwLock::new(1);
/// assert_eq!(*CONFIG.read(), 1);
/// *CONFIG.write() = 2;
/// assert_eq!(*CONFIG.try_read_for(std::time::Duration::from_millis(1)).unwrap(), 2);
/// ```
pub type AdderRwLock<T> = lock_api::RwLock<RawAdderRwLock, T>;

/// A reader-writer lock that protects no data: keylock's `RwLock` for callers that pair
/// acquire and release themselves (the C, Python and Node front ends), with guards, timeouts
/// and futures. Each write acquisition has a fence ([`WriteGuard::fence`]) that rises with
/// every writer.
///
/// ```
/// use std::time::Duration;
/// use keylock_core::{Error, RwLock};
///
/// let rw = RwLock::new();
/// let r1 = rw.read();
/// let r2 = rw.try_read().unwrap();
/// assert_eq!(rw.try_write().unwrap_err(), Error::WouldBlock);
/// drop((r1, r2));
/// let w = rw.try_write_for(Duration::from_millis(10)).unwrap();
/// assert!(rw.is_write_locked());
/// drop(w);
/// assert!(!rw.is_locked());
/// ```
#[derive(Debug, Default)]
pub struct RwLock {
    raw: RawAdderRwLock,
}

/// A held read lock; released on drop (or by [`release`](Self::release)), exactly once.
///
/// ```
/// use keylock_core::RwLock;
/// let rw = RwLock::new();
/// let guard = rw.read();
/// assert!(rw.is_locked() && !rw.is_write_locked());
/// guard.release();
/// assert!(!rw.is_locked());
/// ```
#[derive(Debug)]
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct ReadGuard<P: Deref<Target = RwLock>> {
    lock: P,
}

/// A held write lock; released on drop (or by [`release`](Self::release)), exactly once.
///
/// ```
/// use keylock_core::RwLock;
/// let rw = RwLock::new();
/// let first = rw.write().fence();
/// let second = rw.write();
/// assert!(second.fence() > first);
/// assert!(rw.try_read().is_err());
/// second.release();
/// assert!(!rw.is_locked());
/// ```
#[derive(Debug)]
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct WriteGuard<P: Deref<Target = RwLock>> {
    lock: P,
    fence: u64,
}

impl<P: Deref<Target = RwLock>> ReadGuard<P> {
    /// Releases the read lock now (as dropping the guard does).
    pub fn release(self) {
        drop(self);
    }
}

impl<P: Deref<Target = RwLock>> Drop for ReadGuard<P> {
    #[inline]
    fn drop(&mut self) {
        self.lock.raw.read_release();
    }
}

impl<P: Deref<Target = RwLock>> WriteGuard<P> {
    /// This write acquisition's fence: greater than every earlier writer's.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Releases the write lock now (as dropping the guard does).
    pub fn release(self) {
        drop(self);
    }
}

impl<P: Deref<Target = RwLock>> Drop for WriteGuard<P> {
    #[inline]
    fn drop(&mut self) {
        self.lock.raw.write_release(self.fence);
    }
}

impl RwLock {
    /// A new, unlocked lock.
    #[cfg(not(keylock_loom))]
    pub const fn new() -> Self {
        Self {
            raw: RawAdderRwLock::new(),
        }
    }

    /// A new, unlocked lock.
    #[cfg(keylock_loom)]
    pub fn new() -> Self {
        Self {
            raw: RawAdderRwLock::new(),
        }
    }

    /// The raw lock underneath.
    pub fn raw(&self) -> &RawAdderRwLock {
        &self.raw
    }

    fn read_guard<P: Deref<Target = RwLock>>(lock: P) -> ReadGuard<P> {
        ReadGuard { lock }
    }

    fn write_guard<P: Deref<Target = RwLock>>(lock: P, fence: u64) -> WriteGuard<P> {
        WriteGuard { lock, fence }
    }

    /// Blocks until a read lock is held.
    #[inline]
    pub fn read(&self) -> ReadGuard<&Self> {
        self.raw.read_until(None);
        Self::read_guard(self)
    }

    /// Like [`read`](Self::read), for an `Arc`: the guard is `'static`.
    pub fn read_owned(self: &Arc<Self>) -> ReadGuard<Arc<Self>> {
        self.raw.read_until(None);
        Self::read_guard(Arc::clone(self))
    }

    /// Takes a read lock if no writer is present; `Err(WouldBlock)` otherwise.
    #[inline]
    pub fn try_read(&self) -> Result<ReadGuard<&Self>> {
        if self.raw.try_read_fast() {
            Ok(Self::read_guard(self))
        } else {
            Err(Error::WouldBlock)
        }
    }

    /// Waits at most `timeout` for a read lock; `Err(TimedOut)` when it runs out.
    pub fn try_read_for(&self, timeout: Duration) -> Result<ReadGuard<&Self>> {
        if self.raw.read_until(deadline_after(timeout)) {
            Ok(Self::read_guard(self))
        } else {
            Err(Error::TimedOut)
        }
    }

    /// Reads as `wait` says, for an `Arc` (the front ends' form).
    pub fn read_with_owned(self: &Arc<Self>, wait: Wait) -> Result<ReadGuard<Arc<Self>>> {
        let got = match wait {
            Wait::No => self.raw.try_read_fast(),
            w => self.raw.read_until(w.deadline()),
        };
        if got {
            Ok(Self::read_guard(Arc::clone(self)))
        } else {
            Err(wait.failure())
        }
    }

    /// Blocks until the write lock is held.
    pub fn write(&self) -> WriteGuard<&Self> {
        let fence = self
            .raw
            .write_until(None)
            .expect("an untimed write succeeds");
        Self::write_guard(self, fence)
    }

    /// Takes the write lock if nobody holds the lock; `Err(WouldBlock)` otherwise.
    pub fn try_write(&self) -> Result<WriteGuard<&Self>> {
        match self.raw.try_write_now() {
            Some(fence) => Ok(Self::write_guard(self, fence)),
            None => Err(Error::WouldBlock),
        }
    }

    /// Waits at most `timeout` for the write lock; `Err(TimedOut)` when it runs out.
    pub fn try_write_for(&self, timeout: Duration) -> Result<WriteGuard<&Self>> {
        match self.raw.write_until(deadline_after(timeout)) {
            Some(fence) => Ok(Self::write_guard(self, fence)),
            None => Err(Error::TimedOut),
        }
    }

    /// Writes as `wait` says, for an `Arc` (the front ends' form).
    pub fn write_with_owned(self: &Arc<Self>, wait: Wait) -> Result<WriteGuard<Arc<Self>>> {
        let fence = match wait {
            Wait::No => self.raw.try_write_now(),
            w => self.raw.write_until(w.deadline()),
        };
        match fence {
            Some(fence) => Ok(Self::write_guard(Arc::clone(self), fence)),
            None => Err(wait.failure()),
        }
    }

    /// Whether any reader or writer holds the lock (a snapshot).
    pub fn is_locked(&self) -> bool {
        lock_api::RawRwLock::is_locked(&self.raw)
    }

    /// Whether a writer holds the lock (a snapshot).
    pub fn is_write_locked(&self) -> bool {
        lock_api::RawRwLock::is_locked_exclusive(&self.raw)
    }

    /// A future that resolves to a read guard, waiting in the same queue as blocking readers.
    pub fn read_async(&self) -> ReadFuture<&Self> {
        ReadFuture {
            lock: Some(self),
            waiter: LazyWaiter::new(),
        }
    }

    /// A future that resolves to the write guard.
    pub fn write_async(&self) -> WriteFuture<&Self> {
        WriteFuture {
            lock: Some(self),
            fut: EntryFuture::new(),
            draining: None,
        }
    }

    /// Like [`read_async`](Self::read_async), for an `Arc`: the future is `'static`.
    pub fn read_async_owned(self: &Arc<Self>) -> ReadFuture<Arc<Self>> {
        ReadFuture {
            lock: Some(Arc::clone(self)),
            waiter: LazyWaiter::new(),
        }
    }

    /// Like [`write_async`](Self::write_async), for an `Arc`: the future is `'static`.
    pub fn write_async_owned(self: &Arc<Self>) -> WriteFuture<Arc<Self>> {
        WriteFuture {
            lock: Some(Arc::clone(self)),
            fut: EntryFuture::new(),
            draining: None,
        }
    }
}

/// Resolves to a [`ReadGuard`]. Dropping it before then cancels the wait exactly.
///
/// ```
/// use keylock_core::RwLock;
/// let rw = RwLock::new();
/// futures::executor::block_on(async {
///     let a = rw.read_async().await;
///     let b = rw.read_async().await; // readers share
///     drop((a, b));
/// });
/// ```
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct ReadFuture<P: Deref<Target = RwLock>> {
    lock: Option<P>,
    waiter: LazyWaiter,
}

impl<P: Deref<Target = RwLock>> Future for ReadFuture<P> {
    type Output = ReadGuard<P>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ReadGuard<P>> {
        let this = self.get_mut();
        let lock = this
            .lock
            .as_ref()
            .expect("ReadFuture polled after completion");
        let raw = &lock.raw;
        let ready = (!this.waiter.is_registered() && raw.try_read_fast())
            || this
                .waiter
                .poll(&ReaderGate(raw), &Want::SHARED, cx)
                .is_ready();
        if ready {
            Poll::Ready(RwLock::read_guard(this.lock.take().expect("checked above")))
        } else {
            Poll::Pending
        }
    }
}

impl<P: Deref<Target = RwLock>> Drop for ReadFuture<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            self.waiter.abandon(&ReaderGate(&lock.raw), false);
        }
    }
}

/// Resolves to a [`WriteGuard`]. Dropping it before then cancels the wait exactly.
///
/// ```
/// use std::sync::Arc;
/// use keylock_core::RwLock;
/// let rw = Arc::new(RwLock::new());
/// let fut = rw.write_async_owned(); // 'static: can be spawned
/// let guard = futures::executor::block_on(fut);
/// assert!(rw.is_write_locked());
/// drop(guard);
/// ```
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct WriteFuture<P: Deref<Target = RwLock>> {
    lock: Option<P>,
    fut: EntryFuture,
    /// The writer mutex is held (with this fence) and readers are draining.
    draining: Option<u64>,
}

impl<P: Deref<Target = RwLock>> Future for WriteFuture<P> {
    type Output = WriteGuard<P>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<WriteGuard<P>> {
        let this = self.get_mut();
        let lock = this
            .lock
            .as_ref()
            .expect("WriteFuture polled after completion");
        let raw = &lock.raw;
        let fence = match this.draining {
            Some(fence) => fence,
            None => {
                let fence = match this.fut.poll(&raw.writer(), &Want::EXCLUSIVE, None, cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(grant)) => grant.fence,
                    // A plain untimed acquire has no way to fail.
                    Poll::Ready(Err(e)) => unreachable!("an untimed plain acquire failed: {e}"),
                };
                raw.phase.store(DRAINING, Ordering::SeqCst);
                store_load_fence();
                this.draining = Some(fence);
                fence
            }
        };
        match raw.poll_drain(|| Wake::Task(cx.waker().clone())) {
            Poll::Ready(()) => {
                raw.phase.store(HELD, Ordering::Relaxed);
                this.draining = None;
                let lock = this.lock.take().expect("checked above");
                Poll::Ready(RwLock::write_guard(lock, fence))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<P: Deref<Target = RwLock>> Drop for WriteFuture<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            match self.draining {
                Some(fence) => lock.raw.write_release(fence),
                None => self.fut.cancel(&lock.raw.writer()),
            }
        }
    }
}

// The futures pin nothing: their queue nodes are boxed (`LazyWaiter`), so moving them is
// harmless whatever `P` is.
impl<P: Deref<Target = RwLock>> Unpin for ReadFuture<P> {}
impl<P: Deref<Target = RwLock>> Unpin for WriteFuture<P> {}

//! The adder reader-writer lock (seed 001, C-RW-WP with LongAdder reader counts).
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

use crate::adder::Adder;
use crate::error::{Error, Result};
use crate::raw_mutex::RawMutex;
use crate::sync::{
    AtomicU8, Mutex, MutexGuard, Ordering, Spin, current_thread, park, store_load_fence,
};
use crate::wait::{LazyWaiter, Queue, WaitList, Wake, deadline_after, wait_blocking};

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
    /// Serialises writers; holds both parked threads and async tasks.
    writer: RawMutex,
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
            writer: RawMutex::new(),
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
            writer: RawMutex::new(),
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
        wait_blocking(&ReaderGate(self), deadline, || {
            self.phase.load(Ordering::Relaxed) == NONE && self.try_read_fast()
        })
    }

    #[inline]
    fn read_release(&self) {
        self.egress.increment();
        store_load_fence();
        if self.phase.load(Ordering::SeqCst) != NONE {
            self.wake_drainer();
        }
    }

    /// Releases a read lock, checking first that some reader holds it.
    ///
    /// The check is exact when no other reader is entering or leaving at the same moment; an
    /// unmatched call racing with real readers cannot always be told apart from a real release.
    fn read_release_checked(&self) -> Result<()> {
        // Only the counts decide: the phase can still say HELD while a leaving writer grants the
        // readers that queued behind it, and those readers already hold the lock.
        let egress = self.egress.sum();
        let ingress = self.ingress.sum();
        if egress >= ingress {
            return Err(Error::NotLocked);
        }
        self.read_release();
        Ok(())
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

    fn write_until(&self, deadline: Option<Instant>) -> bool {
        if !self.writer.lock(deadline) {
            return false;
        }
        self.phase.store(DRAINING, Ordering::SeqCst);
        store_load_fence();
        if self.drain_until(deadline) {
            self.phase.store(HELD, Ordering::Relaxed);
            true
        } else {
            self.write_release();
            false
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

    /// Ends a write (or an attempt at one): waiting readers are counted in and granted, then the
    /// phase drops and the writer mutex passes on.
    ///
    /// Readers are granted one per gate lock so that each wake-up runs with no lock held (a
    /// front end's waker may need a lock of its own, such as Python's GIL). Readers that queue
    /// meanwhile are granted too: the phase stays raised until the queue is empty.
    fn write_release(&self) {
        loop {
            let mut gate = self.gate.lock();
            gate.drain = None;
            let Some(reader) = gate.readers.pop_front() else {
                self.phase.store(NONE, Ordering::SeqCst);
                break;
            };
            self.ingress.increment();
            let wake = reader.grant();
            drop(gate);
            if let Some(wake) = wake {
                wake.wake();
            }
        }
        self.writer.unlock();
    }

    fn try_write_now(&self) -> bool {
        if !self.writer.try_lock() {
            return false;
        }
        self.phase.store(DRAINING, Ordering::SeqCst);
        store_load_fence();
        if self.drained() {
            self.phase.store(HELD, Ordering::Relaxed);
            true
        } else {
            self.write_release();
            false
        }
    }

    fn write_release_checked(&self) -> Result<()> {
        if self.phase.load(Ordering::Acquire) != HELD {
            return Err(Error::NotLocked);
        }
        self.write_release();
        Ok(())
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

    fn acquire_locked<'q>(&'q self, _locked: &mut Self::Locked<'q>) -> bool {
        let lock = self.0;
        lock.ingress.increment();
        store_load_fence();
        if lock.phase.load(Ordering::SeqCst) == NONE {
            return true;
        }
        // Back out. The draining writer needs no wake-up for this: both increments happen under
        // the gate lock, and the writer's last check before it sleeps is made under it too.
        lock.egress.increment();
        false
    }

    fn leave_locked<'q>(&'q self, _locked: &mut Self::Locked<'q>, _notified: bool) -> Option<Wake> {
        // Readers are only ever granted, never notified: nothing to pass on.
        None
    }

    fn release_granted(&self) {
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
        self.try_write_now()
    }

    unsafe fn unlock_exclusive(&self) {
        self.write_release();
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
        self.write_until(deadline_after(timeout))
    }

    fn try_lock_exclusive_until(&self, deadline: Instant) -> bool {
        self.write_until(Some(deadline))
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
/// acquire and release themselves (the C, Python and Node front ends), with guards, timeouts,
/// explicit unlocks and futures.
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

/// A held read lock; released on drop.
///
/// ```
/// use keylock_core::RwLock;
/// let rw = RwLock::new();
/// let guard = rw.read();
/// assert!(rw.is_locked() && !rw.is_write_locked());
/// guard.leak();
/// rw.read_unlock().unwrap();
/// ```
#[derive(Debug)]
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct ReadGuard<P: Deref<Target = RwLock>> {
    lock: Option<P>,
}

/// A held write lock; released on drop.
///
/// ```
/// use keylock_core::RwLock;
/// let rw = RwLock::new();
/// rw.write().leak();
/// assert!(rw.try_read().is_err());
/// rw.write_unlock().unwrap();
/// assert!(!rw.is_locked());
/// ```
#[derive(Debug)]
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct WriteGuard<P: Deref<Target = RwLock>> {
    lock: Option<P>,
}

impl<P: Deref<Target = RwLock>> ReadGuard<P> {
    /// Keeps the read lock held and forgets the guard; release it later with
    /// [`RwLock::read_unlock`].
    pub fn leak(mut self) {
        self.lock = None;
    }
}

impl<P: Deref<Target = RwLock>> Drop for ReadGuard<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            lock.raw.read_release();
        }
    }
}

impl<P: Deref<Target = RwLock>> WriteGuard<P> {
    /// Keeps the write lock held and forgets the guard; release it later with
    /// [`RwLock::write_unlock`].
    pub fn leak(mut self) {
        self.lock = None;
    }
}

impl<P: Deref<Target = RwLock>> Drop for WriteGuard<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            lock.raw.write_release();
        }
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

    /// Blocks until a read lock is held.
    #[inline]
    pub fn read(&self) -> ReadGuard<&Self> {
        self.raw.read_until(None);
        ReadGuard { lock: Some(self) }
    }

    /// Takes a read lock if no writer is present; `Err(WouldBlock)` otherwise.
    #[inline]
    pub fn try_read(&self) -> Result<ReadGuard<&Self>> {
        if self.raw.try_read_fast() {
            Ok(ReadGuard { lock: Some(self) })
        } else {
            Err(Error::WouldBlock)
        }
    }

    /// Waits at most `timeout` for a read lock; `Err(TimedOut)` when it runs out.
    pub fn try_read_for(&self, timeout: Duration) -> Result<ReadGuard<&Self>> {
        if self.raw.read_until(deadline_after(timeout)) {
            Ok(ReadGuard { lock: Some(self) })
        } else {
            Err(Error::TimedOut)
        }
    }

    /// Blocks until the write lock is held.
    pub fn write(&self) -> WriteGuard<&Self> {
        self.raw.write_until(None);
        WriteGuard { lock: Some(self) }
    }

    /// Takes the write lock if nobody holds the lock; `Err(WouldBlock)` otherwise.
    pub fn try_write(&self) -> Result<WriteGuard<&Self>> {
        if self.raw.try_write_now() {
            Ok(WriteGuard { lock: Some(self) })
        } else {
            Err(Error::WouldBlock)
        }
    }

    /// Waits at most `timeout` for the write lock; `Err(TimedOut)` when it runs out.
    pub fn try_write_for(&self, timeout: Duration) -> Result<WriteGuard<&Self>> {
        if self.raw.write_until(deadline_after(timeout)) {
            Ok(WriteGuard { lock: Some(self) })
        } else {
            Err(Error::TimedOut)
        }
    }

    /// Releases a read lock whose guard was leaked. `Err(NotLocked)` when no reader holds it
    /// (exact when no other reader is entering or leaving at that moment).
    pub fn read_unlock(&self) -> Result<()> {
        self.raw.read_release_checked()
    }

    /// Releases the write lock whose guard was leaked; `Err(NotLocked)` when no writer holds it.
    pub fn write_unlock(&self) -> Result<()> {
        self.raw.write_release_checked()
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
            waiter: LazyWaiter::new(),
            draining: false,
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
            waiter: LazyWaiter::new(),
            draining: false,
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
        // SAFETY: the waiter is never moved out of the pinned future.
        let this = unsafe { self.get_unchecked_mut() };
        let lock = this
            .lock
            .as_ref()
            .expect("ReadFuture polled after completion");
        let raw = &lock.raw;
        // SAFETY: as above.
        let waiter = unsafe { Pin::new_unchecked(&mut this.waiter) };
        let ready = (!waiter.is_registered() && raw.try_read_fast())
            || waiter
                .get()
                .poll(&ReaderGate(raw), || Wake::Task(cx.waker().clone()))
                .is_ready();
        if ready {
            Poll::Ready(ReadGuard {
                lock: this.lock.take(),
            })
        } else {
            Poll::Pending
        }
    }
}

impl<P: Deref<Target = RwLock>> Drop for ReadFuture<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            // SAFETY: the future is being dropped in place; the waiter was pinned inside it.
            let waiter = unsafe { Pin::new_unchecked(&mut self.waiter) };
            waiter.abandon(&ReaderGate(&lock.raw), false);
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
    waiter: LazyWaiter,
    /// The writer mutex is held and readers are draining.
    draining: bool,
}

impl<P: Deref<Target = RwLock>> Future for WriteFuture<P> {
    type Output = WriteGuard<P>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<WriteGuard<P>> {
        // SAFETY: the waiter is never moved out of the pinned future.
        let this = unsafe { self.get_unchecked_mut() };
        let lock = this
            .lock
            .as_ref()
            .expect("WriteFuture polled after completion");
        let raw = &lock.raw;
        if !this.draining {
            // SAFETY: as above.
            let waiter = unsafe { Pin::new_unchecked(&mut this.waiter) };
            let held = (!waiter.is_registered() && raw.writer.try_lock())
                || waiter
                    .get()
                    .poll(&raw.writer, || Wake::Task(cx.waker().clone()))
                    .is_ready();
            if !held {
                return Poll::Pending;
            }
            raw.phase.store(DRAINING, Ordering::SeqCst);
            store_load_fence();
            this.draining = true;
        }
        match raw.poll_drain(|| Wake::Task(cx.waker().clone())) {
            Poll::Ready(()) => {
                raw.phase.store(HELD, Ordering::Relaxed);
                this.draining = false;
                Poll::Ready(WriteGuard {
                    lock: this.lock.take(),
                })
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<P: Deref<Target = RwLock>> Drop for WriteFuture<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            if self.draining {
                lock.raw.write_release();
            } else {
                // SAFETY: the future is being dropped in place; the waiter was pinned inside it.
                let waiter = unsafe { Pin::new_unchecked(&mut self.waiter) };
                waiter.abandon(&lock.raw.writer, false);
            }
        }
    }
}

//! Async waiting without threads: how a pending `lock()` promise is served.
//!
//! Each JavaScript thread (the main thread and every worker) has one [`Reactor`], created by
//! `init` when the module loads there. A pending acquisition is the core's owned future (for
//! example `KeyPool::lock_async_owned`), boxed and kept in the reactor's table under a numeric
//! id. It is polled with a [`Waker`] of our own whose `wake` pushes the id onto a queue.
//!
//! - Woken from another thread (a worker released a shared lock), the waker also posts one call
//!   per batch through a Node-API threadsafe function. That call runs on the JavaScript thread:
//!   it drains the queue, polls each future again and hands the [`Record`] of every future that
//!   completed to the JavaScript dispatcher, which resolves the promises. (A future stores its
//!   acquisition in its lock's slab itself, see `locks.rs`; the record says where.)
//! - Woken from the JavaScript thread itself (its own release handed the lock to one of its
//!   waiters), no call is posted: the release reports it (`status::LOCAL_WAKE`) and `lib/waiting.js`
//!   drains the queue at once with `runReady`, so the waiter is served before `release()`
//!   returns, as with a pure-JavaScript lock. An entry point that cannot report such a wake-up
//!   posts the call instead ([`flush_local`]).
//!
//! No thread, from libuv's pool or elsewhere, is ever parked on a lock: a waiter costs a boxed
//! future, a waker and a table entry. Dropping the future (timeout, abort, worker exit) removes
//! the waiter from the core's queue, or passes the lock on if it had just been handed to it.
//!
//! # Keeping the event loop alive
//!
//! The threadsafe function is created unreferenced, so pending waiters alone do not keep a
//! thread's event loop running: a process whose only pending work is lock waiters exits, as it
//! would with a pure-JavaScript lock. A waiter must keep its thread alive when the lock can be
//! released by *another* thread, which is only possible for the shared locks of
//! `KeyPool.shared(name)` and friends. For those, every thread records its activity on the lock
//! (locks it holds plus waiters it has pending, see [`crate::shared::Presence`]), each counted
//! once, from before the core can grant or queue it until it is released, fails or is cancelled
//! (so a thread about to hold the lock is never seen idle by another thread's waiter); a waiter
//! keeps its thread alive while some other thread is active on the same lock. The reactor counts such
//! waiters and references the threadsafe function while the count is above zero. The decision is
//! made when the waiter starts, again at every poll that leaves it pending, and, for waiters that
//! do not keep the thread alive, whenever this thread releases a shared lock (after which the
//! lock may have been handed to another thread). A waiter on a lock that other processes can
//! release (a shared-memory or Redis scope) always keeps its thread alive. Finally, a wake-up
//! that this thread posted to itself and that goes by the threadsafe function keeps the loop
//! alive until it is delivered.
//!
//! The same queue carries notices that a Web Locks request of this thread lost its lock to a
//! `steal` made elsewhere ([`Mailbox::post_stolen`]), and notices that a guard lost its lock
//! behind its back ([`Mailbox::post_lost`]: a Redis lease that could not be renewed).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use napi::bindgen_prelude::{Function, Unknown};
use napi::threadsafe_function::{
    ThreadsafeCallContext, ThreadsafeFunction, ThreadsafeFunctionCallMode,
};
use napi::{Env, Result, Status, sys};

use crate::records;
use crate::shared::Presence;
use crate::thread::thread_id;

/// Flags of a [`Record`]'s last word: polling the waiter panicked (reject it).
pub(crate) const FAILED: u32 = 1 << 2;
/// Flags of a [`Record`]'s last word: a notice that Web Locks request `id` lost its lock to a
/// steal (reject its promise with an `AbortError`).
pub(crate) const STOLEN: u32 = 1 << 3;
/// Set in a queued id that is a stolen notice rather than a waiter.
const STOLEN_ID: u32 = 1 << 30;
/// Flags of a [`Record`]'s last word: a notice that the guard watched under `id` lost its lock
/// (a remote lease that could not be renewed, or a force-unlock seen at renewal).
pub(crate) const LOST: u32 = 1 << 4;
/// Set in a queued id that is a lost notice rather than a waiter.
const LOST_ID: u32 = 1 << 29;

/// What an acquisition reports to JavaScript when it ends: `[slot, fence low 32 bits, fence high
/// 32 bits, flags]`. `slot` is the acquisition's number in its lock's slab (0: it failed, and
/// the flags carry its status above bit 8; see `locks.rs`).
pub(crate) type Record = [u32; 4];

/// The acquisition a waiter runs: the core's future, mapped to store what it acquired and
/// report where. Polled only on its JavaScript thread, so it need not be `Send`.
pub(crate) type Acquire = Pin<Box<dyn Future<Output = Record>>>;

/// Who can release the lock a waiter waits for, and so whether the waiter keeps its thread
/// alive (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) enum Liveness {
    /// Only this thread: a lock of its own.
    Private,
    /// Other threads of this process too: a lock of `KeyPool.shared(name)` and friends.
    Shared(Presence),
    /// Other processes too (shared memory, Redis): always.
    External,
}

impl Liveness {
    fn presence(&self) -> Option<&Presence> {
        match self {
            Liveness::Shared(p) => Some(p),
            _ => None,
        }
    }

    /// Counts one more acquisition of this thread on a lock of other threads. Called *before*
    /// the core can grant or queue it: a waiter of another thread that looks meanwhile must
    /// find this thread active, or it could stay dormant and miss the release that this
    /// acquisition's holder will make (see the module documentation).
    pub(crate) fn enter(&self) {
        if let Liveness::Shared(p) = self {
            p.enter();
        }
    }

    /// Undoes [`Liveness::enter`]: a release, or an acquisition that failed or was cancelled.
    pub(crate) fn leave(&self) {
        if let Liveness::Shared(p) = self {
            p.leave();
        }
    }

    /// A release by this thread: uncounts it and, on a lock of other threads, lets this
    /// thread's dormant waiters look again ([`after_shared_release`]).
    pub(crate) fn released(&self) {
        if let Liveness::Shared(p) = self {
            p.leave();
            after_shared_release();
        }
    }

    /// Settles an acquisition counted with [`Liveness::enter`] once its `record` is known: a
    /// granted one stays counted as held, a failed one is uncounted. Returns `record`.
    pub(crate) fn settle(&self, record: Record) -> Record {
        if record[0] == 0 {
            self.leave();
        }
        record
    }

    /// Runs a synchronous acquire (`acquire` gives its record), counted from before it starts.
    pub(crate) fn counted(&self, acquire: impl FnOnce() -> Record) -> Record {
        self.enter();
        self.settle(acquire())
    }
}

/// The threadsafe function: no value per call (ids travel through [`Notifier::queue`]), the
/// JavaScript function takes no argument (it calls `runReady` itself), no error-first
/// argument, created weak.
type Tsfn = ThreadsafeFunction<(), Unknown<'static>, (), Status, false, true>;

thread_local! {
    static REACTOR: RefCell<Option<Reactor>> = const { RefCell::new(None) };
    static LOOP_REF: LoopRef = const { LoopRef::new() };
}

/// Whether this thread's threadsafe function keeps the event loop alive. Kept apart from the
/// reactor because wakers on this thread reach it while the reactor is borrowed (a future that
/// wakes another waiter of the same thread while it is polled or dropped).
struct LoopRef {
    /// The environment and threadsafe function to (un)reference; null until `init`.
    env: Cell<sys::napi_env>,
    tsfn: Cell<sys::napi_threadsafe_function>,
    /// Pending waiters that keep the loop alive.
    keep_alive: Cell<usize>,
    /// A wake-up posted from this thread and not yet delivered.
    delivery: Cell<bool>,
    /// Whether the threadsafe function is referenced now.
    referenced: Cell<bool>,
}

impl LoopRef {
    const fn new() -> Self {
        Self {
            env: Cell::new(std::ptr::null_mut()),
            tsfn: Cell::new(std::ptr::null_mut()),
            keep_alive: Cell::new(0),
            delivery: Cell::new(false),
            referenced: Cell::new(false),
        }
    }

    /// References or unreferences the threadsafe function to match the counts.
    fn update(&self) {
        let want = self.keep_alive.get() > 0 || self.delivery.get();
        if want == self.referenced.get() || self.tsfn.get().is_null() {
            return;
        }
        self.referenced.set(want);
        // SAFETY: we are on the environment's JavaScript thread (the only thread that touches
        // this thread-local), and `tsfn` is alive: `detach` clears it before the reactor (which
        // owns the threadsafe function) goes away.
        unsafe {
            if want {
                sys::napi_ref_threadsafe_function(self.env.get(), self.tsfn.get());
            } else {
                sys::napi_unref_threadsafe_function(self.env.get(), self.tsfn.get());
            }
        }
    }

    fn detach(&self) {
        self.tsfn.set(std::ptr::null_mut());
        self.env.set(std::ptr::null_mut());
    }
}

/// The part of a reactor that wakers on other threads reach.
struct Notifier {
    /// Ids of waiters woken since the JavaScript thread last drained them, and whether a
    /// threadsafe-function call to drain them is on its way.
    queue: Mutex<Queue>,
    tsfn: Tsfn,
    /// The JavaScript thread this notifier posts to ([`thread_id`]).
    owner: u64,
}

#[derive(Default)]
struct Queue {
    ids: Vec<u32>,
    scheduled: bool,
}

impl Notifier {
    /// Queues a wake-up. From another thread, a threadsafe-function call carries it to the
    /// JavaScript thread (one call per batch). From the JavaScript thread itself (a release that
    /// handed the lock to a waiter of the same thread), no call is made: the entry point that
    /// caused it reports it ([`take_local_wake`]) and `lib/waiting.js` drains it before that call
    /// returns, or, where an entry point cannot report it, [`flush_local`] schedules the call.
    fn post(&self, id: u32) {
        let local = thread_id() == self.owner;
        let schedule = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.ids.push(id);
            let schedule = !local && !queue.scheduled;
            queue.scheduled |= schedule;
            schedule
        };
        if local {
            LOOP_REF.with(|r| r.delivery.set(true));
        } else if schedule {
            self.schedule();
        }
    }

    fn schedule(&self) {
        // Fails only while the environment shuts down; its waiters are being dropped then.
        let _ = self.tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
    }

    /// Queues a notice that this thread's Web Locks request `request` was stolen from.
    fn post_stolen(&self, request: u32) {
        self.post(request | STOLEN_ID);
    }

    /// Queues a notice that the guard this thread watches under `watch` lost its lock.
    fn post_lost(&self, watch: u32) {
        self.post(watch | LOST_ID);
    }

    /// Moves the queued ids into `into` (empty; its buffer becomes the queue's, so neither side
    /// allocates once both have grown); the next post from another thread schedules a new call.
    fn drain_into(&self, into: &mut Vec<u32>) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.scheduled = false;
        std::mem::swap(&mut queue.ids, into);
    }

    /// Makes sure a threadsafe-function call will drain the queue.
    fn ensure_scheduled(&self) {
        let schedule = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let schedule = !queue.scheduled && !queue.ids.is_empty();
            queue.scheduled |= schedule;
            schedule
        };
        if schedule {
            self.schedule();
        }
    }
}

/// Where another thread sends this thread a notice ([`mailbox`]).
#[derive(Clone)]
pub(crate) struct Mailbox(Arc<Notifier>);

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Mailbox").field(&self.0.owner).finish()
    }
}

impl Mailbox {
    /// Tells the thread that its Web Locks request `request` lost its lock to a steal.
    pub(crate) fn post_stolen(&self, request: u32) {
        self.0.post_stolen(request & !STOLEN_ID);
    }

    /// Tells the thread that the guard it watches under `watch` lost its lock. Called from
    /// whichever thread finds out (the Redis scope's renewal task).
    pub(crate) fn post_lost(&self, watch: u32) {
        self.0.post_lost(watch & !(STOLEN_ID | LOST_ID));
    }
}

/// This thread's mailbox.
pub(crate) fn mailbox() -> Result<Mailbox> {
    with_reactor(|r| Mailbox(r.notifier.clone()))
}

/// The waker of one waiter.
struct WaiterWaker {
    notifier: Arc<Notifier>,
    id: u32,
}

impl Wake for WaiterWaker {
    fn wake(self: Arc<Self>) {
        self.notifier.post(self.id);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.notifier.post(self.id);
    }
}

/// The pending waiters of a thread, by id. Ids are slot numbers plus one, so a lookup is an
/// index; a freed slot is reused by the next waiter (a wake-up still queued for the old one then
/// polls the new one once, which is harmless).
#[derive(Default)]
struct Slab {
    slots: Vec<Option<Pending>>,
    free: Vec<u32>,
    len: usize,
}

impl Slab {
    /// The id the next `insert` will use.
    fn vacant(&self) -> u32 {
        match self.free.last() {
            Some(&id) => id,
            None => self.slots.len() as u32 + 1,
        }
    }

    fn insert(&mut self, p: Pending) -> u32 {
        self.len += 1;
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize - 1] = Some(p);
                id
            }
            None => {
                self.slots.push(Some(p));
                self.slots.len() as u32
            }
        }
    }

    fn get(&self, id: u32) -> Option<&Pending> {
        self.slots.get((id as usize).wrapping_sub(1))?.as_ref()
    }

    fn get_mut(&mut self, id: u32) -> Option<&mut Pending> {
        self.slots.get_mut((id as usize).wrapping_sub(1))?.as_mut()
    }

    fn remove(&mut self, id: u32) -> Option<Pending> {
        let p = self.slots.get_mut((id as usize).wrapping_sub(1))?.take()?;
        self.free.push(id);
        self.len -= 1;
        Some(p)
    }

    fn ids(&self) -> impl Iterator<Item = (u32, &Pending)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i as u32 + 1, p.as_ref()?)))
    }
}

/// One pending acquisition.
struct Pending {
    fut: Acquire,
    waker: Waker,
    /// Who else can release its lock.
    live: Liveness,
    /// Whether this waiter currently counts in [`LoopRef::keep_alive`].
    keeps_alive: bool,
}

/// Per-thread state of the waiting machinery (see the module documentation).
struct Reactor {
    notifier: Arc<Notifier>,
    pending: Slab,
    /// Pending waiters on shared locks that do not keep the loop alive now (re-examined when this
    /// thread releases a shared lock).
    dormant: usize,
    /// The wakers of ended waiters, by id less one, for the next waiter with the same id (a
    /// waker is just the id and the notifier, so one is made per id, not per wait).
    wakers: Vec<Option<Waker>>,
    /// The buffer [`run_ready`] drains woken ids into, kept between calls.
    woken: Vec<u32>,
    /// The buffer [`run_ready`] gathers completions in, kept between calls.
    done: Vec<u32>,
}

impl Reactor {
    /// The waker for waiter `id`: a kept one, or a new one.
    fn waker_for(&mut self, id: u32) -> Waker {
        let kept = self
            .wakers
            .get_mut((id as usize).wrapping_sub(1))
            .and_then(Option::take);
        kept.unwrap_or_else(|| {
            Waker::from(Arc::new(WaiterWaker {
                notifier: self.notifier.clone(),
                id,
            }))
        })
    }

    /// Keeps `waker`, the waker of waiter `id`, for the next waiter with that id. (A clone the
    /// core still holds can wake that next waiter once, which only polls it once more.)
    fn keep_waker(&mut self, id: u32, waker: Waker) {
        let i = id as usize - 1;
        if self.wakers.len() <= i {
            self.wakers.resize_with(i + 1, || None);
        }
        self.wakers[i] = Some(waker);
    }

    /// Sets whether `id` keeps the loop alive, and (un)references the threadsafe function when
    /// the count crosses zero.
    fn set_keep_alive(&mut self, id: u32, keep: bool) {
        let Some(p) = self.pending.get_mut(id) else {
            return;
        };
        if p.keeps_alive == keep {
            return;
        }
        p.keeps_alive = keep;
        if keep {
            self.dormant -= 1;
        } else {
            self.dormant += 1;
        }
        LOOP_REF.with(|r| {
            let n = r.keep_alive.get();
            r.keep_alive.set(if keep { n + 1 } else { n - 1 });
            r.update();
        });
    }

    /// Removes a waiter and undoes its bookkeeping; its future, for the caller to drop.
    /// `acquired` tells whether its activity on a shared lock turns into a hold (kept) or ends
    /// (removed).
    fn remove(&mut self, id: u32, acquired: bool) -> Option<Acquire> {
        if self
            .pending
            .get(id)
            .is_some_and(|p| p.keeps_alive || p.live.presence().is_some())
        {
            self.set_keep_alive(id, false);
        }
        let p = self.pending.remove(id)?;
        if let Some(presence) = p.live.presence() {
            self.dormant -= 1;
            if !acquired {
                presence.leave();
            }
        } else if matches!(p.live, Liveness::External) {
            // Counted as dormant by `set_keep_alive(false)` above; it is gone, not dormant.
            self.dormant -= 1;
        }
        self.keep_waker(id, p.waker);
        Some(p.fut)
    }

    /// Re-decides whether a pending waiter on a lock of other threads keeps the loop alive.
    fn review(&mut self, id: u32) {
        let keep = match self.pending.get(id).map(|p| &p.live) {
            Some(Liveness::Shared(presence)) => presence.others_active(),
            _ => return,
        };
        self.set_keep_alive(id, keep);
    }

    /// Polls waiter `id` once; returns its record to dispatch when it completed (or failed).
    fn poll(&mut self, id: u32) -> Option<[u32; records::completion::WORDS]> {
        let Pending { fut, waker, .. } = self.pending.get_mut(id)?;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            fut.as_mut().poll(&mut Context::from_waker(waker))
        }));
        match outcome {
            Ok(Poll::Pending) => {
                self.review(id);
                None
            }
            Ok(Poll::Ready(record)) => {
                let p = self.remove(id, record[0] != 0);
                drop(p);
                Some(records::completion_of(id, &record))
            }
            Err(_) => {
                // The future is unusable after a panic; dropping it may panic again.
                let p = self.remove(id, false);
                let _ = catch_unwind(AssertUnwindSafe(move || drop(p)));
                Some(records::notice(id, FAILED))
            }
        }
    }
}

fn with_reactor<R>(f: impl FnOnce(&mut Reactor) -> R) -> Result<R> {
    REACTOR.with(|cell| match cell.borrow_mut().as_mut() {
        Some(reactor) => Ok(f(reactor)),
        None => Err(napi::Error::new(
            Status::GenericFailure,
            "keylock: the native module was not initialised on this thread",
        )),
    })
}

/// Creates this thread's reactor. `drain()` is called on this thread when waiters were woken
/// from another thread; it calls `runReady`, which polls them and hands JavaScript the records
/// of those that completed, five numbers each: the waiter's id and its [`Record`] (or a stolen
/// notice). A second call on the same thread keeps the first function.
pub(crate) fn init(env: &Env, drain: Function<'_, (), Unknown<'static>>) -> Result<()> {
    if REACTOR.with(|cell| cell.borrow().is_some()) {
        return Ok(());
    }
    let tsfn: Tsfn = drain
        .build_threadsafe_function::<()>()
        .callee_handled::<false>()
        .weak::<true>()
        // JavaScript's `drain` calls `runReady`, which polls the woken waiters.
        .build_callback(|_ctx: ThreadsafeCallContext<()>| Ok(()))?;
    LOOP_REF.with(|r| {
        r.env.set(env.raw());
        r.tsfn.set(tsfn.raw());
    });
    let notifier = Arc::new(Notifier {
        queue: Mutex::new(Queue::default()),
        tsfn,
        owner: thread_id(),
    });
    REACTOR.with(|cell| {
        *cell.borrow_mut() = Some(Reactor {
            notifier,
            pending: Slab::default(),
            dormant: 0,
            wakers: Vec::new(),
            woken: Vec::new(),
            done: Vec::new(),
        })
    });
    // When the environment goes away (a worker ends), drop every pending future: that cancels
    // the waiters in the core, exactly as a timeout would.
    env.add_env_cleanup_hook((), |()| {
        // Nothing may unwind out of a cleanup hook.
        let _ = catch_unwind(|| {
            LOOP_REF.with(LoopRef::detach);
            let reactor = REACTOR.with(|cell| cell.borrow_mut().take());
            if let Some(mut reactor) = reactor {
                let ids: Vec<u32> = reactor.pending.ids().map(|(id, _)| id).collect();
                for id in ids {
                    let p = reactor.remove(id, false);
                    let _ = catch_unwind(AssertUnwindSafe(move || drop(p)));
                }
            }
        });
    })?;
    Ok(())
}

/// Whether this thread posted a wake-up to itself that is not delivered yet; the caller then
/// reports it to `lib/waiting.js`, which drains it at once with `runReady`.
#[inline]
pub(crate) fn take_local_wake() -> bool {
    LOOP_REF.with(|r| r.delivery.get())
}

/// Called at the end of every entry point that cannot report a wake-up of this thread, and
/// after a lock handle gave back what it held as it was dropped (see `Keyed`'s `Drop`): if a
/// wake-up is pending, a threadsafe-function call delivers it on the event loop's next turn (and
/// keeps the loop alive until then). Does nothing once the thread's locals are gone (a handle
/// dropped as its thread ends).
#[inline]
pub(crate) fn flush_local() {
    if !LOOP_REF.try_with(|r| r.delivery.get()).unwrap_or(false) {
        return;
    }
    let _ = LOOP_REF.try_with(LoopRef::update);
    let _ = REACTOR.try_with(|cell| {
        if let Ok(guard) = cell.try_borrow()
            && let Some(reactor) = guard.as_ref()
        {
            reactor.notifier.ensure_scheduled();
        }
    });
}

/// Polls every woken waiter of this thread and hands `deliver` the records to dispatch (five
/// numbers each, see [`init`]), returning what it returns. Runs for each threadsafe-function
/// call, and directly when a release woke a waiter of this same thread. The records' buffer is
/// the reactor's, kept between calls (a new one cost an allocation per call).
pub(crate) fn run_ready(deliver: impl FnOnce(&[u32]) -> u32) -> u32 {
    REACTOR.with(|cell| {
        let mut guard = cell.borrow_mut();
        let Some(reactor) = guard.as_mut() else {
            return deliver(&[]);
        };
        let mut done = std::mem::take(&mut reactor.done);
        done.clear();
        let mut woken = std::mem::take(&mut reactor.woken);
        // Polling (or dropping) a future may wake another waiter of this thread: go round
        // again, a bounded number of times (a future that woke itself on every poll would
        // otherwise hold the thread); what is left then goes by the threadsafe function.
        for _ in 0..16 {
            LOOP_REF.with(|r| r.delivery.set(false));
            reactor.notifier.drain_into(&mut woken);
            if woken.is_empty() {
                break;
            }
            for id in woken.drain(..) {
                if id & STOLEN_ID != 0 {
                    done.extend(records::notice(id & !STOLEN_ID, STOLEN));
                    continue;
                }
                if id & LOST_ID != 0 {
                    done.extend(records::notice(id & !LOST_ID, LOST));
                    continue;
                }
                // A cancelled waiter's id may still be queued; `poll` then finds nothing.
                if let Some(d) = reactor.poll(id) {
                    done.extend(d);
                }
            }
        }
        reactor.woken = woken;
        if LOOP_REF.with(|r| r.delivery.get()) {
            reactor.notifier.ensure_scheduled();
        }
        LOOP_REF.with(LoopRef::update);
        let n = deliver(&done);
        reactor.done = done;
        n
    })
}

/// Polls `fut` once with the waker of the next waiter [`start`] will make on this thread: for
/// an acquire that must be enqueued (its first poll) before its waiter starts, as a Web Locks
/// request is under the registry's mutex. `start` then polls it again under the same id.
pub(crate) fn poll_once<T>(fut: Pin<&mut (dyn Future<Output = T> + Send)>) -> Option<T> {
    let (waker, id) = with_reactor(|r| {
        let id = r.pending.vacant();
        (r.waker_for(id), id)
    })
    .ok()?;
    let polled = fut.poll(&mut Context::from_waker(&waker));
    let _ = with_reactor(|r| r.keep_waker(id, waker));
    match polled {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// How [`start`] went.
#[derive(Debug)]
pub(crate) enum Started {
    /// Done on the first poll (acquired at once, or failed at once): its record. An acquired
    /// lock of other threads is counted as held.
    Done(Record),
    /// Pending: the id under which the dispatcher will report it.
    Waiting(u32),
}

/// Starts an acquisition: polls it once, and keeps it as a waiter if it is pending. The caller
/// counted it on `live` ([`Liveness::enter`]) before it made `fut` (a future may take its lock
/// as it is made); a granted one stays counted as held, a failed one is uncounted.
pub(crate) fn start(fut: Acquire, live: Liveness) -> Result<Started> {
    let started = start_in(fut, live);
    // The first poll may have woken a waiter of this thread (its own, even).
    flush_local();
    started
}

fn start_in(fut: Acquire, live: Liveness) -> Result<Started> {
    // The first poll runs outside the reactor's borrow: it may store into a lock's slab and
    // call into the core, which is free to wake waiters of this thread.
    let (waker, id) = match with_reactor(|r| {
        let id = r.pending.vacant();
        (r.waker_for(id), id)
    }) {
        Ok(found) => found,
        Err(e) => {
            live.leave();
            return Err(e);
        }
    };
    let mut fut = fut;
    if let Poll::Ready(record) = fut.as_mut().poll(&mut Context::from_waker(&waker)) {
        let _ = with_reactor(|r| r.keep_waker(id, waker));
        return Ok(Started::Done(live.settle(record)));
    }
    with_reactor(move |reactor| {
        let mode = match live {
            Liveness::Private => 0,
            Liveness::Shared(_) => 1,
            Liveness::External => 2,
        };
        let inserted = reactor.pending.insert(Pending {
            fut,
            waker,
            live,
            keeps_alive: false,
        });
        // Nothing else starts on this thread between `vacant` and here.
        debug_assert_eq!(inserted, id);
        match mode {
            1 => {
                reactor.dormant += 1;
                reactor.review(inserted);
            }
            2 => {
                reactor.dormant += 1;
                reactor.set_keep_alive(inserted, true);
            }
            _ => {}
        }
        Started::Waiting(inserted)
    })
}

/// Cancels a pending acquisition (timeout, abort). Returns whether it was still pending; `false`
/// means it had already been dispatched.
pub(crate) fn cancel(id: u32) -> Result<bool> {
    let removed = with_reactor(|reactor| reactor.remove(id, false))?;
    let was_pending = removed.is_some();
    // Dropping the future may pass the lock to another waiter of this thread.
    drop(removed);
    flush_local();
    Ok(was_pending)
}

/// Called after this thread released a shared lock: waiters that did not keep the loop alive
/// look again, as the lock may now belong to another thread.
fn after_shared_release() {
    REACTOR.with(|cell| {
        let mut guard = cell.borrow_mut();
        let Some(reactor) = guard.as_mut() else {
            return;
        };
        if reactor.dormant == 0 {
            return;
        }
        let ids: Vec<u32> = reactor
            .pending
            .ids()
            .filter(|(_, p)| p.live.presence().is_some() && !p.keeps_alive)
            .map(|(id, _)| id)
            .collect();
        for id in ids {
            reactor.review(id);
        }
    });
}

/// Counts of this thread's waiters, for tests: `[pending, keeping the loop alive]`.
pub(crate) fn counts() -> Result<[u32; 2]> {
    with_reactor(|r| {
        [
            r.pending.len as u32,
            LOOP_REF.with(|l| l.keep_alive.get()) as u32,
        ]
    })
}

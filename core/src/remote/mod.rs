//! The one front of the scopes whose locks live on a server (Redis, PostgreSQL): local
//! queueing and coalescing in front of the server, the records of acquisitions, leases and
//! their renewal, the lost signal, and the [`KeyedLock`] trait, written once over the
//! [`Server`] calls that each such scope implements.
//!
//! # Local coalescing
//!
//! Within one process, waiters for a key queue in an in-process [`KeyPool`] first, and the
//! process holds at most one remote acquisition per key: local shared holders share one remote
//! shared hold, and an owner's reentrant holds share its exclusive one (same fence). Exclusive
//! local holders do not hand the remote hold to each other: each local exclusive holder takes
//! its own remote acquisition (one round trip to acquire, one to release), because the fence
//! must rise per holder and another process's waiter, queued on the server, must get its turn.
//! (Keeping the remote hold across local hand-offs would save one round trip per hand-off and
//! still need one to mint the next fence; it would also let a busy process starve other
//! processes.) A semaphore scope's local layer is a semaphore of the same permits, so at most
//! that many local holders of a key go to the server, each for a remote hold of its own.
//!
//! # Blocking callers
//!
//! A blocking call from a thread outside any runtime drives a *lane* of its own: a
//! current-thread runtime and a view of the server ([`Server::lane`]) whose connections belong
//! to it, so the call's I/O runs on the caller's thread, with the same code and bounds as on the
//! scope's runtime. Handing each call to the scope's runtime and back would cost two
//! cross-thread wake-ups per round trip. Lanes are kept for reuse (at most [`IDLE_LANES`]
//! idle), so a process makes about one per thread that calls at once. Async calls, renewals,
//! and blocking calls made inside some runtime (where another cannot be driven) run on the
//! scope's runtime, as every call does in a scope without lanes.
//!
//! # Leases
//!
//! Every remote acquisition is confirmed by its holder's process every third of the scope's
//! lease ([`hold`]); one not confirmed for a whole lease is given up as lost, and its
//! [`LostSignal`] fires. An acquisition's own [`LockOptions::lease`] ends it (on the server
//! too) when it runs out.

mod hold;
mod server;
pub(crate) mod url;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::runtime::{Handle, Runtime};
use tokio::sync::oneshot;

use self::hold::Hold;
pub(crate) use self::server::{RemoteGrant, RemoteInfo, RemoteKey, Server, recorded_permits};
use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner, Wait};
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::many;
use crate::pool::{KeyBuf, KeyPool};
use crate::report::{KeyReport, LockId};
use crate::scope::{AcquireFuture, AcquireManyFuture, KeySpace, KeyedLock, LockKey, OpenOptions};
use crate::stats::ScopeStats;

/// The most idle lanes a scope keeps (see [Blocking callers](self#blocking-callers)).
const IDLE_LANES: usize = 16;

/// Per-key locks on a server. See the [module docs](self).
pub(crate) struct RemoteLock<S: Server> {
    inner: Arc<Inner<S>>,
    /// The scope's own runtime (one thread): connections, waits, renewals. Callers need none.
    runtime: Option<Runtime>,
}

struct Inner<S: Server> {
    remote: Arc<S>,
    handle: Handle,
    /// Local queueing and reentrancy: a key here is its space byte and its bytes. A
    /// semaphore scope's is a semaphore of the same permits, so that at most that many local
    /// holders of a key go to the server, each for its own remote hold.
    local: Arc<dyn KeyedLock>,
    /// A semaphore scope's units per key (0 for locks).
    permits: u32,
    /// Serializes the making of a key's remote hold among local acquirers, so that they share
    /// one.
    gate: Arc<KeyPool<KeyBuf>>,
    /// The process's remote hold of each key.
    slots: Mutex<HashMap<Vec<u8>, Slot>>,
    /// Live acquisitions by id (the `at` of their records).
    records: Mutex<HashMap<u64, Record>>,
    next: AtomicU64,
    reentrant: bool,
    /// Idle lanes, for the next blocking calls.
    lanes: Arc<Mutex<Vec<Lane<S>>>>,
    /// [`renewals`] found no live hold and waits for [`holds_again`](Self::holds_again)
    /// (read and written under the `slots` lock).
    dormant: AtomicBool,
    holds_again: Arc<tokio::sync::Notify>,
    /// The fork generation the scope was opened in: a child of `fork()` has the parent's
    /// connections (the same sockets) without the parent's threads, so it must not use them.
    fork_gen: u64,
}

/// A blocking caller's runtime and view of the server (see
/// [Blocking callers](self#blocking-callers)), used by one caller at a time.
struct Lane<S: Server> {
    rt: Option<Runtime>,
    server: Arc<S>,
    fork_gen: u64,
}

impl<S: Server> Lane<S> {
    fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.rt
            .as_ref()
            .expect("a lane's runtime lives as long as it")
            .block_on(fut)
    }
}

impl<S: Server> Drop for Lane<S> {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            forked_or(self.fork_gen, rt, Runtime::shutdown_background);
        }
    }
}

/// Ends `rt` with `end`; in a child of `fork()` (the scope was opened in generation `opened`),
/// leaks it instead: its sockets and its poller are shared with the parent, and taking a socket
/// out of the poller there would take it out of the parent's too.
fn forked_or(opened: u64, rt: Runtime, end: impl FnOnce(Runtime)) {
    if crate::fork::fork_generation() == opened {
        // Never blocks: the last user of a scope may drop it inside some runtime.
        end(rt);
    } else {
        std::mem::forget(rt);
    }
}

/// Keeps `lane` for the next blocking call, if fewer than [`IDLE_LANES`] are idle.
fn shelve<S: Server>(lanes: &Mutex<Vec<Lane<S>>>, lane: Lane<S>) {
    let mut idle = lanes.lock();
    if idle.len() < IDLE_LANES {
        idle.push(lane);
        return;
    }
    drop(idle);
    drop(lane);
}

enum Slot {
    Live(Arc<Hold>),
    /// The last user released it; its remote release is in flight.
    Releasing(Arc<tokio::sync::Notify>),
}

struct Record {
    local: Acquisition,
    hold: Arc<Hold>,
    lkey: Vec<u8>,
}

impl<S: Server> RemoteLock<S> {
    /// Starts the scope's runtime, connects there with `connect` (bounded by the server's own
    /// `connect_timeout`, which `connect` applies) and puts the local layer in front: a
    /// [`KeyedSemaphore`](crate::KeyedSemaphore) of `options.permits` for a semaphore scope,
    /// else a [`KeyPool`] as reentrant and fair as `options` say. Refuses the options that
    /// only other scopes take (`InvalidArgument`).
    pub(crate) fn start<F>(options: &OpenOptions, connect: impl FnOnce(Handle) -> F) -> Result<Self>
    where
        F: Future<Output = Result<Arc<S>>> + Send + 'static,
    {
        if options.stripes.is_some() {
            return Err(Error::InvalidArgument(
                "a server scope has exact keys, not stripes",
            ));
        }
        if options.capacity.is_some() || options.mode.is_some() {
            return Err(Error::InvalidArgument(
                "capacity and mode apply to shared-memory scopes only",
            ));
        }
        // A semaphore of the permits given is checked before connecting.
        let given: Option<Arc<dyn KeyedLock>> = match options.permits {
            Some(p) => {
                if options.reentrant || options.fifo {
                    return Err(Error::InvalidArgument(
                        "a semaphore has no owners, and is always FIFO",
                    ));
                }
                Some(Arc::new(
                    crate::KeyedSemaphore::builder(p).build::<KeyBuf>()?,
                ))
            }
            None => None,
        };
        let fork_gen = crate::fork::watch_forks();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("keylock-remote")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::Unavailable(format!("cannot start the {} runtime: {e}", S::KIND).into())
            })?;
        let handle = runtime.handle().clone();
        let remote = match run_on(&handle, connect(handle.clone())) {
            Ok(remote) => remote,
            Err(e) => {
                // Never a blocking drop: the caller may be inside an async runtime.
                runtime.shutdown_background();
                return Err(e);
            }
        };
        // The server knows the permits: those given, or those found recorded under the
        // prefix ([`inspect_semaphore`](crate::inspect_semaphore)).
        let permits = remote.permits();
        let local: Arc<dyn KeyedLock> = match given {
            Some(local) => local,
            None if permits != 0 => {
                match crate::KeyedSemaphore::builder(permits).build::<KeyBuf>() {
                    Ok(local) => Arc::new(local),
                    Err(e) => {
                        runtime.shutdown_background();
                        return Err(e);
                    }
                }
            }
            None => Arc::new(
                KeyPool::builder()
                    .reentrant(options.reentrant)
                    .fifo(options.fifo)
                    .build::<KeyBuf>(),
            ),
        };
        let lost = remote.take_lost();
        let inner = Arc::new(Inner {
            remote,
            handle,
            local,
            permits,
            gate: Arc::new(KeyPool::new()),
            slots: Mutex::new(HashMap::new()),
            records: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            reentrant: options.reentrant,
            lanes: Arc::new(Mutex::new(Vec::new())),
            dormant: AtomicBool::new(false),
            holds_again: Arc::new(tokio::sync::Notify::new()),
            fork_gen,
        });
        runtime.spawn(renewals(Arc::downgrade(&inner)));
        if let Some(mut lost) = lost {
            let inner = Arc::downgrade(&inner);
            runtime.spawn(async move {
                while let Some(token) = lost.recv().await {
                    let Some(inner) = inner.upgrade() else {
                        return;
                    };
                    inner.lose_token(&token);
                }
            });
        }
        Ok(Self {
            inner,
            runtime: Some(runtime),
        })
    }
}

impl<S: Server> Drop for RemoteLock<S> {
    fn drop(&mut self) {
        // Never blocks (a scope may be dropped inside some async runtime). Holds still alive
        // stop renewing and end with their leases.
        if let Some(rt) = self.runtime.take() {
            forked_or(self.inner.fork_gen, rt, Runtime::shutdown_background);
        }
    }
}

impl<S: Server> fmt::Debug for RemoteLock<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(S::KIND)
            .field("url", self.inner.remote.url())
            .field("reentrant", &self.inner.reentrant)
            .field("held", &self.inner.records.lock().len())
            .finish()
    }
}

/// Starts the renewal of every live hold, every sixth of the lease, while the scope lives (see
/// [`Inner::watch`]); while the process holds nothing, it waits for the next hold instead, so an
/// idle scope's thread sleeps.
async fn renewals<S: Server>(inner: std::sync::Weak<Inner<S>>) {
    loop {
        let Some(period) = inner.upgrade().map(|i| i.remote.lease() / 6) else {
            return;
        };
        tokio::time::sleep(period).await;
        let Some(scope) = inner.upgrade() else {
            return;
        };
        let live: Vec<Arc<Hold>> = {
            let slots = scope.slots.lock();
            if slots.is_empty() {
                scope.dormant.store(true, Ordering::Relaxed);
            }
            slots
                .values()
                .filter_map(|slot| match slot {
                    Slot::Live(hold) => Some(Arc::clone(hold)),
                    Slot::Releasing(_) => None,
                })
                .collect()
        };
        for hold in &live {
            scope.watch(hold);
        }
        if live.is_empty() && scope.dormant.load(Ordering::Relaxed) {
            // The scope is not kept alive while this waits.
            let holds_again = Arc::clone(&scope.holds_again);
            drop(scope);
            holds_again.notified().await;
        }
    }
}

/// Runs `fut` on the scope's runtime and waits for it on this thread (which needs no runtime,
/// and may even be inside another one).
fn run_on<T: Send + 'static>(
    handle: &Handle,
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let wait = || rx.recv().unwrap_or_else(|_| Err(closed()));
    // On a worker of a multi-threaded runtime (the scope's own, when a lost signal's callback
    // releases its acquisition there), the worker hands its tasks to another thread while this
    // one waits, so the future can run; anywhere else, waiting blocks nothing it needs.
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

fn closed() -> Error {
    Error::Unavailable("the scope was closed".into())
}

/// Waits for `fut` on this thread, parking between polls.
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(out) = crate::wait::block_on_until(fut.as_mut(), None) {
            return out;
        }
    }
}

fn local_key(space: KeySpace, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(space as u8);
    k.extend_from_slice(key);
    k
}

/// A local acquisition that is released if the acquire that took it does not finish.
struct LocalHold<'a> {
    pool: &'a dyn KeyedLock,
    acq: Option<Acquisition>,
}

impl<'a> LocalHold<'a> {
    fn new(pool: &'a dyn KeyedLock, acq: Acquisition) -> Self {
        Self {
            pool,
            acq: Some(acq),
        }
    }

    fn take(mut self) -> Acquisition {
        self.acq.take().expect("taken once")
    }
}

impl Drop for LocalHold<'_> {
    fn drop(&mut self) {
        if let Some(acq) = self.acq.take() {
            let owner = acq.owner();
            let _ = self.pool.release_as(acq, owner);
        }
    }
}

/// Remote grants on their way to the acquirer: released if nobody takes them (the acquire's
/// future was dropped while the script ran).
struct Granted<S: Server> {
    remote: Arc<S>,
    handle: Handle,
    keys: Vec<RemoteKey>,
    token: String,
    grants: Vec<RemoteGrant>,
    /// When the acquire was sent, and the lease it asked for: the server holds it at least until
    /// `sent + lease`.
    sent: Instant,
    lease: Duration,
    armed: bool,
}

impl<S: Server> Granted<S> {
    /// The holds (their renewals start when [`Inner::watch`] says).
    fn into_holds(mut self, owner: Option<Owner>) -> Vec<Arc<Hold>> {
        self.armed = false;
        self.keys
            .iter()
            .zip(&self.grants)
            .map(|(k, g)| {
                Hold::new(
                    k.clone(),
                    self.token.clone(),
                    g.fence,
                    g.died,
                    owner.filter(|_| k.mode == Mode::Exclusive),
                    self.sent,
                    self.lease,
                )
            })
            .collect()
    }
}

impl<S: Server> Drop for Granted<S> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let remote = Arc::clone(&self.remote);
        let keys = std::mem::take(&mut self.keys);
        let token = std::mem::take(&mut self.token);
        self.handle.spawn(async move {
            for k in &keys {
                let _ = remote.release(k, &token).await;
            }
        });
    }
}

/// One remote acquire of `keys` on `server` (the scope's own, or a lane's view of it), for a
/// fresh token of the scope's; the grants are the scope's to renew and release.
async fn attempt<S: Server>(
    server: &Arc<S>,
    scope: Arc<S>,
    handle: Handle,
    keys: Vec<RemoteKey>,
    plan: Plan,
    cancelled: impl Future<Output = ()> + Send,
) -> Result<Granted<S>> {
    let token = scope.fresh_id();
    let lease = plan.lease(&*scope);
    let sent = Instant::now();
    let grants = server
        .acquire(
            &keys,
            &token,
            lease,
            plan.deadline,
            plan.try_only,
            cancelled,
        )
        .await?;
    Ok(Granted {
        remote: scope,
        handle,
        keys,
        token,
        grants,
        sent,
        lease,
        armed: true,
    })
}

/// How an acquire waits, worked out once.
#[derive(Clone, Copy)]
struct Plan {
    opts: LockOptions,
    deadline: Option<Instant>,
    try_only: bool,
}

impl Plan {
    fn new(opts: &LockOptions) -> Self {
        let wait = many::one_deadline(opts.wait);
        Self {
            opts: LockOptions { wait, ..*opts },
            deadline: wait.deadline(),
            try_only: matches!(opts.wait, Wait::No),
        }
    }

    /// The remote lease: the scope's, or the acquire's own if shorter.
    fn lease(&self, remote: &impl Server) -> Duration {
        self.opts
            .lease
            .map_or(remote.lease(), |l| l.min(remote.lease()))
    }

    fn gate_opts(&self) -> LockOptions {
        LockOptions::new().wait(self.opts.wait)
    }
}

impl<S: Server> Inner<S> {
    /// A lane for a blocking call on this thread; `None` where the call goes through the
    /// scope's runtime: the scope has no lanes, or this thread is in some runtime's context
    /// (which cannot drive another).
    fn lane(&self) -> Option<Lane<S>> {
        if Handle::try_current().is_ok() {
            return None;
        }
        if let Some(lane) = self.lanes.lock().pop() {
            return Some(lane);
        }
        let server = self.remote.lane()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        Some(Lane {
            rt: Some(rt),
            server,
            fork_gen: self.fork_gen,
        })
    }

    /// Takes `lane` back once the work it runs in the background has ended: at once, or after
    /// that work, driven meanwhile on one of the scope's blocking threads.
    fn put_back(&self, lane: Lane<S>) {
        if !lane.server.busy() {
            shelve(&self.lanes, lane);
            return;
        }
        let lanes = Arc::clone(&self.lanes);
        self.handle.spawn_blocking(move || {
            lane.block_on(lane.server.settle());
            shelve(&lanes, lane);
        });
    }

    /// `Unavailable` in a child of `fork()`: the scope's connections and runtime are the
    /// parent's.
    fn check_fork(&self) -> Result<()> {
        if crate::fork::fork_generation() == self.fork_gen {
            return Ok(());
        }
        Err(Error::Unavailable(
            format!(
                "this {} scope was opened before fork(); open it again in the child",
                S::KIND
            )
            .into(),
        ))
    }

    /// Runs `f` with a lane for this blocking call (or `None`: see [`lane`](Self::lane)), and
    /// takes the lane back after.
    fn on_lane<T>(&self, f: impl FnOnce(Option<&Lane<S>>) -> T) -> T {
        let lane = self.lane();
        let out = f(lane.as_ref());
        if let Some(lane) = lane {
            self.put_back(lane);
        }
        out
    }

    /// Runs one server call for a blocking caller and waits for it: on a lane where it can,
    /// else on the scope's runtime.
    fn call<T, F>(&self, call: impl FnOnce(Arc<S>) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.on_lane(|lane| match lane {
            Some(lane) => lane.block_on(call(Arc::clone(&lane.server))),
            None => run_on(&self.handle, call(Arc::clone(&self.remote))),
        })
    }

    /// Waits for an acquire made by `acquire` on this thread: given a lane's view of the server
    /// where it can have one.
    fn wait_for<T, F: Future<Output = T>>(&self, acquire: impl FnOnce(Option<Arc<S>>) -> F) -> T {
        self.on_lane(|lane| match lane {
            Some(lane) => lane.block_on(acquire(Some(Arc::clone(&lane.server)))),
            None => block_on(acquire(None)),
        })
    }

    /// Starts `hold`'s renewal on the scope's runtime, unless it has started (or the hold has
    /// ended). A hold's first renewal is due a third of its lease after it was granted; the
    /// renewals of holds whose users set no deadline are started by [`renewals`] at most a
    /// sixth of the lease after that, so a hold released before then never wakes the runtime.
    /// A hold with a user's deadline is watched at once: its end must come on time.
    fn watch(&self, hold: &Arc<Hold>) {
        if hold.start_renewal() {
            self.handle
                .spawn(Arc::clone(hold).renew_loop(Arc::clone(&self.remote)));
        }
    }

    /// Adds user `id` to `hold` with its own lease deadline, which the renewal must watch.
    fn add_user(&self, hold: &Arc<Hold>, id: u64, deadline: Option<Instant>) {
        hold.add_user(id, deadline);
        if deadline.is_some() {
            self.watch(hold);
        }
    }

    /// The server says `token`'s hold is lost: its users learn it now.
    fn lose_token(&self, token: &str) {
        for slot in self.slots.lock().values() {
            if let Slot::Live(hold) = slot
                && hold.token == token
            {
                hold.lose(false);
            }
        }
    }

    /// Takes fresh remote holds of `keys` (all or none): on `lane` (a blocking caller's, which
    /// this thread drives), else on the scope's runtime, where dropping the future cancels the
    /// wait and releases anything granted meanwhile.
    ///
    /// Either way every call to the server runs on a runtime, even a blocking caller's first
    /// attempt: only there can a command have a deadline for its whole reply (a blocking socket
    /// can bound each read, not the reply).
    async fn remote_acquire(
        &self,
        keys: Vec<RemoteKey>,
        plan: Plan,
        lane: Option<Arc<S>>,
    ) -> Result<Vec<Arc<Hold>>> {
        let granted = match lane {
            Some(lane) => {
                let (scope, handle) = (Arc::clone(&self.remote), self.handle.clone());
                attempt(&lane, scope, handle, keys, plan, std::future::pending()).await?
            }
            None => {
                let remote = Arc::clone(&self.remote);
                let handle = self.handle.clone();
                let (mut tx, rx) = oneshot::channel::<Result<Granted<S>>>();
                self.handle.spawn(async move {
                    let out = {
                        let closed = tx.closed();
                        attempt(&Arc::clone(&remote), remote, handle, keys, plan, closed).await
                    };
                    // If the acquirer is gone, `out` comes back and its drop releases the
                    // grants.
                    let _ = tx.send(out);
                });
                rx.await.unwrap_or_else(|_| Err(closed()))?
            }
        };
        Ok(granted.into_holds(plan.opts.owner))
    }

    /// The hold that a new local acquisition of `lkey` can share, or a wait for a release in
    /// flight; `None` if it needs a fresh one.
    fn join(
        &self,
        lkey: &[u8],
        id: u64,
        plan: &Plan,
    ) -> Option<std::result::Result<Arc<Hold>, Arc<tokio::sync::Notify>>> {
        let slots = self.slots.lock();
        match slots.get(lkey)? {
            Slot::Live(h) if h.joinable(plan.opts.mode, plan.opts.owner, self.reentrant) => {
                self.add_user(h, id, plan_deadline(plan));
                Some(Ok(Arc::clone(h)))
            }
            Slot::Live(_) => None,
            Slot::Releasing(done) => Some(Err(Arc::clone(done))),
        }
    }

    /// Makes `hold` the key's live hold, with user `id`.
    fn install(&self, lkey: &[u8], hold: &Arc<Hold>, id: u64, plan: &Plan) {
        self.add_user(hold, id, plan_deadline(plan));
        let mut slots = self.slots.lock();
        slots.insert(lkey.to_vec(), Slot::Live(Arc::clone(hold)));
        if self.dormant.load(Ordering::Relaxed) {
            self.dormant.store(false, Ordering::Relaxed);
            self.holds_again.notify_one();
        }
    }

    fn record(&self, id: u64, local: Acquisition, hold: &Arc<Hold>, lkey: Vec<u8>) -> Acquisition {
        let acq = Acquisition {
            fence: hold.fence,
            at: id,
            ticket: 0,
            owner: local.owner(),
            lease_until: local.lease_deadline(),
            mode: local.mode(),
            owner_died: hold.died,
            units: local.units,
            metered_since: None,
        };
        self.records.lock().insert(
            id,
            Record {
                local,
                hold: Arc::clone(hold),
                lkey,
            },
        );
        acq
    }

    /// `InvalidArgument` for what this scope does not take: a weight other than 1 in a lock
    /// scope, a Web Locks name in a semaphore scope. (A semaphore's weight is checked by its
    /// local semaphore before anything goes to the server.)
    fn check_request(&self, space: KeySpace, opts: &LockOptions) -> Result<()> {
        if self.permits == 0 {
            return opts.check_lock_weight();
        }
        if space == KeySpace::Names {
            return Err(Error::InvalidArgument("a semaphore's keys are plain keys"));
        }
        Ok(())
    }

    /// The units a remote request of this scope takes (0 in a lock scope).
    fn units(&self, opts: &LockOptions) -> u32 {
        if self.permits == 0 { 0 } else { opts.weight }
    }

    /// One key: local queue, then the key's shared hold or a fresh remote one.
    async fn acquire_one(
        self: Arc<Self>,
        space: KeySpace,
        key: Vec<u8>,
        opts: LockOptions,
        lane: Option<Arc<S>>,
    ) -> Result<Acquisition> {
        self.check_request(space, &opts)?;
        let plan = Plan::new(&opts);
        let lkey = local_key(space, &key);
        let local = Arc::clone(&self.local)
            .acquire_async(LockKey::new(&lkey), &plan.opts)
            .await?;
        let local = LocalHold::new(&*self.local, local);
        let gate = Arc::clone(&self.gate)
            .acquire_async(LockKey::new(&lkey), &plan.gate_opts())
            .await?;
        let _gate = LocalHold::new(&*self.gate, gate);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let hold = loop {
            match self.join(&lkey, id, &plan) {
                Some(Ok(hold)) => break hold,
                Some(Err(done)) => {
                    let notified = done.notified();
                    if matches!(self.slots.lock().get(&lkey), Some(Slot::Releasing(d)) if Arc::ptr_eq(d, &done))
                    {
                        notified.await;
                    }
                }
                None => {
                    let keys = vec![RemoteKey {
                        space,
                        key: key.clone(),
                        mode: plan.opts.mode,
                        units: self.units(&plan.opts),
                    }];
                    let hold = self
                        .remote_acquire(keys, plan, lane.clone())
                        .await?
                        .remove(0);
                    self.install(&lkey, &hold, id, &plan);
                    break hold;
                }
            }
        };
        Ok(self.record(id, local.take(), &hold, lkey))
    }

    /// Several keys: every local one in one order, then one script for those not shared.
    async fn acquire_many(
        self: Arc<Self>,
        keys: Vec<(KeySpace, Vec<u8>, Mode)>,
        opts: LockOptions,
        lane: Option<Arc<S>>,
    ) -> Result<Vec<Acquisition>> {
        for (space, _, _) in &keys {
            self.check_request(*space, &opts)?;
        }
        let plan = Plan::new(&opts);
        // One canonical order (space, then bytes) to take them in, duplicates collapsed to
        // the strongest mode; each remembers its first position among the caller's keys.
        let steps = many::plan(
            keys.into_iter()
                .map(|(s, k, m)| (local_key(s, &k), (s, k), m)),
        );
        let firsts: Vec<usize> = steps.iter().map(|step| step.first).collect();
        let keys: Vec<(Vec<u8>, KeySpace, Vec<u8>, Mode)> = steps
            .into_iter()
            .map(|step| (step.lock, step.what.0, step.what.1, step.mode))
            .collect();
        let mut locals = Vec::with_capacity(keys.len());
        for (lkey, _, _, mode) in &keys {
            let o = LockOptions {
                mode: *mode,
                ..plan.opts
            };
            let acq = Arc::clone(&self.local)
                .acquire_async(LockKey::new(lkey), &o)
                .await?;
            locals.push(LocalHold::new(&*self.local, acq));
        }
        let mut gates = Vec::with_capacity(keys.len());
        for (lkey, ..) in &keys {
            let g = Arc::clone(&self.gate)
                .acquire_async(LockKey::new(lkey), &plan.gate_opts())
                .await?;
            gates.push(LocalHold::new(&*self.gate, g));
        }
        // Join what this process holds already; the rest in one script.
        let ids: Vec<u64> = keys
            .iter()
            .map(|_| self.next.fetch_add(1, Ordering::Relaxed))
            .collect();
        let mut holds: Vec<Option<Arc<Hold>>> = Vec::with_capacity(keys.len());
        let mut joined: Vec<(u64, Arc<Hold>)> = Vec::new();
        let unjoin = |joined: &[(u64, Arc<Hold>)]| {
            for (id, h) in joined {
                h.users.lock().remove(id);
            }
        };
        for ((lkey, _, _, mode), id) in keys.iter().zip(&ids) {
            let p = Plan {
                opts: LockOptions {
                    mode: *mode,
                    ..plan.opts
                },
                ..plan
            };
            match self.join(lkey, *id, &p) {
                Some(Ok(h)) => {
                    joined.push((*id, Arc::clone(&h)));
                    holds.push(Some(h));
                }
                // A release in flight: that key is taken afresh (its server-side release is
                // already queued ahead of this acquire on the same connection).
                Some(Err(_)) | None => holds.push(None),
            }
        }
        let fresh: Vec<RemoteKey> = keys
            .iter()
            .zip(&holds)
            .filter(|(_, h)| h.is_none())
            .map(|((_, space, key, mode), _)| RemoteKey {
                space: *space,
                key: key.clone(),
                mode: *mode,
                units: self.units(&plan.opts),
            })
            .collect();
        let mut got = if fresh.is_empty() {
            Vec::new()
        } else {
            match self.remote_acquire(fresh, plan, lane).await {
                Ok(h) => h,
                Err(e) => {
                    unjoin(&joined);
                    return Err(e);
                }
            }
        }
        .into_iter();
        let mut out = Vec::with_capacity(keys.len());
        let placed = keys.into_iter().zip(ids).zip(firsts);
        for ((((lkey, _, _, mode), id), first), (local, h)) in
            placed.zip(locals.into_iter().zip(holds))
        {
            let hold = match h {
                Some(h) => h,
                None => {
                    let h = got.next().expect("one grant per fresh key");
                    let p = Plan {
                        opts: LockOptions { mode, ..plan.opts },
                        ..plan
                    };
                    self.install(&lkey, &h, id, &p);
                    h
                }
            };
            out.push((first, self.record(id, local.take(), &hold, lkey)));
        }
        drop(gates);
        Ok(many::in_key_order(out))
    }

    /// Ends one acquisition: the remote hold if it was its last user, then the local one.
    fn release(&self, acq: Acquisition, owner: Option<Owner>) -> Result<()> {
        let rec = {
            let mut records = self.records.lock();
            match records.get(&acq.at) {
                Some(r) if r.hold.fence == acq.fence && r.local.mode() == acq.mode => {}
                _ => return Err(Error::NotOwner),
            }
            if self.reentrant && owner.is_some() && owner != records[&acq.at].local.owner() {
                return Err(Error::NotOwner);
            }
            records.remove(&acq.at).expect("checked above")
        };
        let Record { local, hold, lkey } = rec;
        let done = {
            let mut slots = self.slots.lock();
            let mut users = hold.users.lock();
            users.remove(&acq.at);
            if users.is_empty() {
                let done = Arc::new(tokio::sync::Notify::new());
                if matches!(slots.get(&lkey), Some(Slot::Live(h)) if Arc::ptr_eq(h, &hold)) {
                    slots.insert(lkey.clone(), Slot::Releasing(Arc::clone(&done)));
                }
                Some(done)
            } else {
                None
            }
        };
        let remote_result = match done {
            None if hold.lost.is_lost() => Err(stale(&hold, &local)),
            None => Ok(()),
            Some(done) => {
                hold.halt();
                let h = Arc::clone(&hold);
                let r =
                    self.call(move |remote| async move { remote.release(&h.key, &h.token).await });
                {
                    let mut slots = self.slots.lock();
                    if matches!(slots.get(&lkey), Some(Slot::Releasing(d)) if Arc::ptr_eq(d, &done))
                    {
                        slots.remove(&lkey);
                    }
                }
                done.notify_waiters();
                match r {
                    Ok(true) if !hold.lost.is_lost() => Ok(()),
                    Ok(_) => Err(stale(&hold, &local)),
                    Err(e) => Err(e),
                }
            }
        };
        let local_owner = owner.or(local.owner());
        let local_result = self.local.release_as(local, local_owner);
        remote_result.and(local_result)
    }
}

/// The error for a hold that was lost: its lease ran out, or it was taken away.
fn stale(hold: &Hold, local: &Acquisition) -> Error {
    let lapsed = local.lease_deadline().is_some_and(|t| Instant::now() >= t);
    if lapsed || hold.expired.load(Ordering::Acquire) {
        Error::LeaseExpired
    } else {
        Error::NotOwner
    }
}

fn plan_deadline(plan: &Plan) -> Option<Instant> {
    plan.opts.lease.and_then(|l| Instant::now().checked_add(l))
}

impl<S: Server> KeyedLock for RemoteLock<S> {
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        let inner = &self.inner;
        inner.check_fork()?;
        inner.wait_for(|lane| {
            Arc::clone(inner).acquire_one(key.space, key.bytes.to_vec(), *opts, lane)
        })
    }

    fn acquire_async(self: Arc<Self>, key: LockKey<'_>, opts: &LockOptions) -> AcquireFuture {
        if let Err(e) = self.inner.check_fork() {
            return Box::pin(std::future::ready(Err(e)));
        }
        let fut = Arc::clone(&self.inner).acquire_one(key.space, key.bytes.to_vec(), *opts, None);
        // The future keeps the scope (and its runtime) alive.
        Box::pin(async move {
            let out = fut.await;
            drop(self);
            out
        })
    }

    fn acquire_many(
        &self,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> Result<Vec<Acquisition>> {
        let inner = &self.inner;
        inner.check_fork()?;
        inner.wait_for(|lane| Arc::clone(inner).acquire_many(owned_keys(keys), *opts, lane))
    }

    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> AcquireManyFuture {
        if let Err(e) = self.inner.check_fork() {
            return Box::pin(std::future::ready(Err(e)));
        }
        let fut = Arc::clone(&self.inner).acquire_many(owned_keys(keys), *opts, None);
        Box::pin(async move {
            let out = fut.await;
            drop(self);
            out
        })
    }

    fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
        self.inner.check_fork()?;
        self.inner.release(acquisition, owner)
    }

    fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        let inner = &self.inner;
        inner.check_fork()?;
        let (hold, until) = {
            let mut records = inner.records.lock();
            let rec = match records.get_mut(&acquisition.at) {
                Some(r) if r.hold.fence == acquisition.fence => r,
                _ => return Err(Error::NotOwner),
            };
            if rec.hold.lost.is_lost() {
                return Err(stale(&rec.hold, &rec.local));
            }
            inner.local.extend(&mut rec.local, lease)?;
            let until = rec.local.lease_deadline();
            inner.add_user(&rec.hold, acquisition.at, until);
            (Arc::clone(&rec.hold), until)
        };
        let h = Arc::clone(&hold);
        let ms = lease.min(inner.remote.lease());
        let sent = Instant::now();
        let ok =
            inner.call(move |remote| async move { remote.renew(&h.key, &h.token, ms).await })?;
        if !ok {
            hold.lose(false);
            return Err(Error::NotOwner);
        }
        hold.confirm(sent + ms);
        acquisition.lease_until = until;
        Ok(())
    }

    fn is_current_as(&self, acquisition: &Acquisition, owner: Option<Owner>) -> Result<bool> {
        let inner = &self.inner;
        inner.check_fork()?;
        let hold = {
            let records = inner.records.lock();
            match records.get(&acquisition.at) {
                Some(r) if r.hold.fence == acquisition.fence => {
                    let owner = owner.or(r.local.owner());
                    if r.hold.lost.is_lost()
                        || !KeyedLock::is_current_as(&*inner.local, &r.local, owner)?
                    {
                        return Ok(false);
                    }
                    Arc::clone(&r.hold)
                }
                _ => return Ok(false),
            }
        };
        inner.call(move |remote| async move { remote.check(&hold.key, &hold.token).await })
    }

    fn force_unlock(&self, key: LockKey<'_>) -> Result<bool> {
        let inner = &self.inner;
        inner.check_fork()?;
        let (space, bytes) = (key.space, key.bytes.to_vec());
        let was = inner.call(move |remote| async move { remote.force(space, &bytes).await })?;
        let lkey = local_key(key.space, key.bytes);
        if let Some(Slot::Live(h)) = inner.slots.lock().remove(&lkey) {
            h.lose(false);
        }
        inner.local.force_unlock(LockKey::new(&lkey))?;
        Ok(was)
    }

    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>> {
        let inner = &self.inner;
        inner.check_fork()?;
        let (space, bytes) = (key.space, key.bytes.to_vec());
        let Some(r) = inner.call(move |remote| async move { remote.info(space, &bytes).await })?
        else {
            return Ok(None);
        };
        let lkey = local_key(key.space, key.bytes);
        let local = inner.local.info(LockKey::new(&lkey))?;
        Ok(Some(LockInfo {
            fence: r.fence,
            mode: r.mode,
            holders: r.holders,
            holds: local
                .filter(|l| l.mode == Mode::Exclusive)
                .map_or(1, |l| l.holds),
            owner: local.and_then(|l| l.owner),
            lease_remaining: r.lease_remaining,
            waiters: r.waiters + local.map_or(0, |l| l.waiters),
            units: if inner.permits == 0 {
                r.holders
            } else {
                r.units
            },
        }))
    }

    /// The server's keys for the prefix, each with what `info` says of it (the holders and
    /// waiters by count: the server keeps no process ids). A key freed between the two steps
    /// is left out.
    fn list(&self) -> Result<Vec<KeyReport>> {
        self.inner.check_fork()?;
        let keys = self
            .inner
            .call(|remote| async move { remote.keys().await })?;
        let mut out = Vec::with_capacity(keys.len());
        for (space, bytes) in keys {
            let Some(info) = self.info(LockKey {
                space,
                bytes: &bytes,
            })?
            else {
                continue;
            };
            out.push(KeyReport {
                id: match space {
                    KeySpace::Keys => LockId::Key(bytes),
                    KeySpace::Names => LockId::Name(bytes),
                },
                info: Some(info),
                holders: Vec::new(),
                waiters: Vec::new(),
            });
        }
        Ok(out)
    }

    fn is_reentrant(&self) -> bool {
        self.inner.reentrant
    }

    fn permits(&self) -> Option<u32> {
        (self.inner.permits != 0).then_some(self.inner.permits)
    }

    fn steal(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        if self.inner.permits != 0 {
            return Err(Error::InvalidArgument(
                "a semaphore's units cannot be stolen; use force_release",
            ));
        }
        if opts.mode != Mode::Exclusive {
            return Err(Error::InvalidArgument(
                "only an exclusive request may steal",
            ));
        }
        self.force_unlock(key)?;
        self.acquire(key, opts)
    }

    /// This process's counts only: what the server could tell (keys held, waiters queued,
    /// across processes) needs a scan of the prefix's keys, which costs the server O(keys), so
    /// the scope-wide figures are `None`. `held_here`: the keys this process holds on the
    /// server (its local holders share one remote hold per key); `waiting_here`: its acquires
    /// queued behind another acquirer of the same key in this process (for the key, or for the
    /// making of its shared remote hold), plus those queued on the server. Reads no network, so it never fails.
    fn stats(&self) -> Result<ScopeStats> {
        let inner = &self.inner;
        let held_here = inner
            .slots
            .lock()
            .values()
            .filter(|s| matches!(s, Slot::Live(_)))
            .count();
        let waiting_here = inner.local.stats()?.waiting_here
            + inner.gate.stats().queued
            + inner.remote.queued_here();
        Ok(ScopeStats {
            held_here,
            waiting_here,
            ..ScopeStats::default()
        })
    }

    fn lost_signal(&self, acquisition: &Acquisition) -> Option<LostSignal> {
        let records = self.inner.records.lock();
        records
            .get(&acquisition.at)
            .filter(|r| r.hold.fence == acquisition.fence)
            .map(|r| r.hold.lost.clone())
    }
}

fn owned_keys(keys: &[(LockKey<'_>, Mode)]) -> Vec<(KeySpace, Vec<u8>, Mode)> {
    keys.iter()
        .map(|(k, m)| (k.space, k.bytes.to_vec(), *m))
        .collect()
}

//! The PostgreSQL scope: per-key locks shared by every process that opens the same database and
//! prefix, with the same operations as in-process locks (cargo feature `postgres`).
//!
//! ```no_run
//! use keylock_core::{open, LockKey, LockOptions};
//!
//! let locks = open("postgres://app:secret@127.0.0.1:5432/orders?prefix=billing").unwrap();
//! let acq = locks.acquire(LockKey::new(b"invoice:17"), &LockOptions::new()).unwrap();
//! // Pass acq.fence() to whatever the lock protects; it rejects anything older.
//! locks.release(acq).unwrap();
//! ```
//!
//! The URL's form and options are in `url.rs`; [`open`](crate::open) gives the lock object as a
//! [`KeyedLock`]. Its local layer (queueing in the process, one remote hold per key, records,
//! lost signals) is the one front of every server scope; this module is the server's half.
//! The tables and functions, and why each is as it is, are in `sql.rs`.
//!
//! # Why advisory locks, and a table beside them
//!
//! PostgreSQL's session-level advisory locks do what a server-side lock must: the server queues
//! the waiters and wakes them (nothing polls), and it frees every lock of a session as soon as
//! it sees the session end, so a holder killed with kill -9 frees its keys at once. Row locks
//! would need a transaction open per hold, a connection each. Advisory locks are numbers, so a
//! table gives every key a number of its own the first time it is locked (never a hash: two keys
//! never block each other), and a logged sequence gives every exclusive acquisition its fence,
//! rising across sessions, force-unlocks and server restarts. The key numbers and who holds
//! what (for `info` and `owner_died`) are in unlogged tables: no acquire flushes WAL for them,
//! not even a key's first, and a crash, which ends every session, empties them.
//!
//! Each operation is one function call, one round trip: an uncontended acquire, a release, a
//! renewal, `info` and a force-unlock.
//!
//! # Connections
//!
//! A scope object opens one connection (its main session) at open. Uncontended acquires,
//! releases of what it granted, renewals, `info` and force-unlocks all go there, pipelined.
//! A request that must wait is sent, with its deadline as `lock_timeout`, on a session of its
//! own, where the server blocks it until the key is free; what it is then granted lives in that
//! session, which serves no other wait until its holds are released. So a process has one
//! connection, plus one per request waiting on the server at once and per session still
//! holding what it waited for, at most [`MAX_EXTRA_SESSIONS`] more (further waiters queue in the
//! process until one is free); up to 4 idle ones are kept for the next waits. Within a process,
//! a key has at most one remote request at a time (the local layer queues the others), so the
//! extra sessions are bounded by the keys contended at once.
//!
//! # Fairness
//!
//! The server grants a key's advisory lock in the order its requests queued, and a shared
//! request does not pass a queued exclusive one (Web Locks' order): across processes, a key is
//! FIFO. Within a process the local layer is FIFO when the scope is opened `fifo`.
//!
//! # Leases, the lost signal, and a dead holder
//!
//! A hold lasts as long as its session. Its process checks it every third of the URL's `lease`
//! (one call on the session that holds it); a session whose connection ended, or a hold found
//! force-unlocked, fires the hold's [`LostSignal`](crate::LostSignal) at that check, and one
//! that cannot be confirmed for a whole lease is given up as lost. An acquisition's own
//! [`LockOptions::lease`](crate::LockOptions::lease) ends it, on the server too, when it runs
//! out.
//!
//! A holder killed on a host that stays up frees its keys at once: the kernel closes its
//! socket, and the backend, waiting to read, ends its session. A holder whose host vanishes
//! (a power cut, a partition) is noticed by the server's keepalives, which every session sets
//! from the lease: the first probe after a sixth of the lease of silence, then one every
//! twelfth, and the session ends after three unanswered ones (and `tcp_user_timeout` bounds
//! unacknowledged data the same way): within about 5/12 of the lease, 12.5 s with the default
//! 30 s. The next holder sees [`owner_died`](crate::Acquisition::owner_died) and a higher fence.
//!
//! # Force-unlock
//!
//! A session's advisory lock can only be released by that session, so a force-unlock gives the
//! key a fresh lock number: new requests take the key at once, with a higher fence. The old
//! holder still has the old number; the force-unlock notifies it (`NOTIFY`, which every scope
//! object's main session listens for), and its process lets the old number go and fires the
//! hold's lost signal at once. Requests that were already queued on the old number then move to
//! the new one. (A holder that misses the notification learns at its next check.)
//!
//! # TLS
//!
//! The URL's `sslmode`, `sslrootcert`, `sslcert` and `sslkey`, with libpq's meanings
//! (`tls.rs`): every session of the scope object (and a cancel) connects the same way, through
//! rustls.
//!
//! # Failures, poolers and replicas
//!
//! - The server unreachable: `Unavailable`, naming the redacted URL; opening takes at most
//!   `connect_timeout`, and a call at most `timeout`. A wrong password or missing privilege:
//!   `PermissionDenied`. A password never appears in an error, `Debug`, or log line.
//! - A server restarted mid-hold: every session ends, so every lock is freed; the holders'
//!   next checks fire their lost signals, and their releases report the hold lost. No grant is
//!   made twice: a lock is only ever granted by the server, in a session that the scope checks
//!   is its own. Fences keep rising across the restart (a crash can skip fences, not repeat
//!   them, whatever the server's `synchronous_commit`: see `sql.rs`).
//! - **PgBouncer in session mode** works: each connection is a session of its own, and the
//!   pooler's `DISCARD ALL` frees a departed client's locks. **In transaction or statement
//!   mode** session locks would stay with a server connection that other clients then use, so
//!   the scope refuses: every connection claims its session at start, and every call checks that
//!   it still runs there; otherwise the open or the call fails with `Incompatible` ("a pooler in
//!   transaction or statement mode?"), never with a grant.
//! - **Replicas** cannot take advisory locks (a hot standby refuses them), so point the URL at
//!   the primary. **Failover** ends every session: the locks are gone with the old primary,
//!   every holder learns it at its next check, and the new primary grants afresh. Fences are
//!   safe across a failover only if the sequence's last values reached the replica
//!   (synchronous replication); with asynchronous replication a promoted replica can be behind,
//!   and fences can then repeat.
//!
//! # Semaphores
//!
//! Opened with [`OpenOptions::permits`](crate::OpenOptions::permits), the scope is a keyed
//! semaphore: at most that many units of a key held at once across every process that opens
//! the prefix (the first open records the permits; an open with others is `Incompatible`).
//! Advisory locks do not count, so the units are rows, each with a session lock of its own that
//! tells whether its holder's session lives; every call on a key runs under the key's guard
//! and never waits on the server. A request that does not fit is queued there and served
//! strictly in order; its process waits, woken by the `NOTIFY` of a release, a cancel or a
//! force-unlock of the key, and looks again every third of the lease for holders and waiters
//! whose sessions ended (a death notifies nobody): their units come back then, and the next
//! holder sees `owner_died`. An uncontended acquire is one call, a release one; the sweep
//! drops idle keys' rows. The tables and functions are in `sql.rs`, the client's half in
//! `semaphore.rs`.

mod semaphore;
mod session;
mod sql;
mod tls;
mod url;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_postgres::error::SqlState;
use tokio_postgres_rustls::MakeRustlsConnect;

use self::semaphore::HoldCall;
use self::session::{Note, Session, error, timed_out};
use self::url::PostgresUrl;
use crate::acquisition::Mode;
use crate::error::{Error, Result};
use crate::remote::{RemoteGrant, RemoteInfo, RemoteKey, RemoteLock, Server};
use crate::scope::{KeySpace, KeyedLock, OpenOptions};

/// The most sessions a scope object opens besides its main one (for requests waiting on the
/// server, and for what they were granted).
pub const MAX_EXTRA_SESSIONS: usize = 32;
/// Idle waiting sessions kept for the next waits.
const IDLE_SESSIONS: usize = 4;
/// The keys one sweep call reads (and holds the guards of, in one short transaction).
const SWEEP_BATCH: i32 = 100;

/// Opens the PostgreSQL scope that `url` names, as a [`KeyedLock`] (what
/// [`open_with`](crate::open_with) does for `postgres://` and `postgresql://`). Fails with
/// `InvalidArgument` for a malformed URL or options this scope does not take,
/// `PermissionDenied` for refused credentials, `Incompatible` behind a pooler that does not
/// keep sessions, and `Unavailable` when the server cannot be reached within `connect_timeout`.
pub fn open(url: &str, options: &OpenOptions) -> Result<Arc<dyn KeyedLock>> {
    let url = PostgresUrl::parse(url)?;
    let tls = url.tls.connector()?;
    let permits = options.permits.unwrap_or(0);
    let recorded = options.recorded_permits;
    let lock = RemoteLock::start(options, move |_| async move {
        let (notes, heard) = unbounded_channel();
        let sem = permits != 0 || recorded;
        let main = Session::open(&url, &tls, true, None, sem, Some(notes.clone())).await?;
        let permits = if recorded {
            PgServer::recorded_permits(&main, &url).await?
        } else {
            permits
        };
        let sweep = url.sweep;
        let server = Arc::new(PgServer::new(url, tls, main, notes, permits)?);
        if permits != 0 && !recorded {
            server.claim_permits().await?;
        }
        tokio::spawn(PgServer::watch_notes(Arc::downgrade(&server), heard));
        if let Some(every) = sweep {
            tokio::spawn(PgServer::sweep_idle(Arc::downgrade(&server), every));
        }
        Ok(server)
    })?;
    Ok(Arc::new(lock))
}

/// The PostgreSQL scope's calls to its server. See the [module docs](self).
pub(crate) struct PgServer {
    url: PostgresUrl,
    /// How every session connects (TLS as the URL asks).
    tls: MakeRustlsConnect,
    /// The main session; replaced when its connection ends.
    main: Mutex<Arc<Session>>,
    /// Held while a main session is being made.
    reconnecting: tokio::sync::Mutex<()>,
    /// Idle extra sessions holding nothing, for the next waits.
    idle: Mutex<Vec<Arc<Session>>>,
    /// One permit per extra session.
    slots: Arc<Semaphore>,
    /// What each token holds: (token, space, key) -> where.
    holds: Mutex<HashMap<HoldKey, HeldIn>>,
    /// Where the main session sends what it hears (force-unlocks, freed units).
    notes: UnboundedSender<Note>,
    /// A semaphore scope's units per key (0 for locks).
    permits: u32,
    /// A semaphore scope's waiting requests, by key number: woken when the key's units are
    /// freed.
    freed: Mutex<HashMap<i64, (Arc<tokio::sync::Notify>, usize)>>,
    /// The tokens of holds found force-unlocked, for the front to fire their lost signals;
    /// the receiver until the front takes it.
    lost: UnboundedSender<String>,
    lost_here: Mutex<Option<UnboundedReceiver<String>>>,
    /// Random, per scope: tokens start with it.
    id: String,
    next: AtomicU64,
    queued: AtomicUsize,
    /// Acquires and releases sent, so far: a sweep runs only after some.
    calls: AtomicU64,
}

/// A token's hold of one key: (token, space, key).
type HoldKey = (String, KeySpace, Vec<u8>);

/// Where a hold is.
struct HeldIn {
    /// Its lock number; a semaphore hold's own number.
    number: i64,
    mode: Mode,
    /// The session it was granted in.
    session: Arc<Session>,
    /// A semaphore hold's key number.
    sem: Option<i64>,
}

/// What an acquire call answered: the grants with their lock numbers, or nothing.
type Answer = Option<Vec<(i64, RemoteGrant)>>;

impl PgServer {
    fn new(
        url: PostgresUrl,
        tls: MakeRustlsConnect,
        main: Arc<Session>,
        notes: UnboundedSender<Note>,
        permits: u32,
    ) -> Result<Self> {
        let mut seed = [0u8; 16];
        getrandom::fill(&mut seed)
            .map_err(|e| Error::Unavailable(format!("no random numbers for tokens: {e}").into()))?;
        let (lost_tx, lost_rx) = unbounded_channel();
        Ok(Self {
            url,
            tls,
            main: Mutex::new(main),
            reconnecting: tokio::sync::Mutex::new(()),
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(MAX_EXTRA_SESSIONS)),
            holds: Mutex::new(HashMap::new()),
            notes,
            permits,
            freed: Mutex::new(HashMap::new()),
            lost: lost_tx,
            lost_here: Mutex::new(Some(lost_rx)),
            id: seed.iter().map(|b| format!("{b:02x}")).collect(),
            next: AtomicU64::new(1),
            queued: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
        })
    }

    /// The main session, connected again if its connection ended.
    async fn main(&self) -> Result<Arc<Session>> {
        let s = Arc::clone(&self.main.lock());
        if !s.is_closed() {
            return Ok(s);
        }
        let _one = self.reconnecting.lock().await;
        let s = Arc::clone(&self.main.lock());
        if !s.is_closed() {
            return Ok(s);
        }
        let fresh = Session::open(
            &self.url,
            &self.tls,
            false,
            None,
            self.permits != 0,
            Some(self.notes.clone()),
        )
        .await?;
        *self.main.lock() = Arc::clone(&fresh);
        Ok(fresh)
    }

    /// `fut` within the URL's `timeout`.
    async fn bounded<T>(
        &self,
        fut: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        session::bounded(&self.url, self.url.options.timeout, fut).await
    }

    /// An extra session holding nothing, for one wait; `None` if `deadline` passed first.
    async fn waiting_session(&self, deadline: Option<Instant>) -> Result<Option<Arc<Session>>> {
        loop {
            let s = self.idle.lock().pop();
            match s {
                Some(s) if !s.is_closed() => return Ok(Some(s)),
                Some(_) => continue,
                None => break,
            }
        }
        let permit = Arc::clone(&self.slots).acquire_owned();
        let permit = match deadline {
            None => permit.await,
            Some(d) => match tokio::time::timeout_at(d.into(), permit).await {
                Ok(p) => p,
                Err(_) => return Ok(None),
            },
        }
        .map_err(|_| Error::Unavailable("the PostgreSQL scope was closed".into()))?;
        // Another wait may have finished with its session meanwhile.
        if let Some(s) = self.idle.lock().pop().filter(|s| !s.is_closed()) {
            return Ok(Some(s));
        }
        Session::open(&self.url, &self.tls, false, Some(permit), false, None)
            .await
            .map(Some)
    }

    /// Puts a session that holds nothing back among the idle ones (or closes it).
    fn done_with(&self, s: Arc<Session>) {
        if s.holding.load(Ordering::Acquire) != 0 || s.is_closed() {
            return;
        }
        if Arc::ptr_eq(&s, &self.main.lock()) {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_SESSIONS && !idle.iter().any(|i| Arc::ptr_eq(i, &s)) {
            idle.push(s);
        }
    }

    /// One acquire call on `s`; `wait_ms`: `None` for a try, `Some(0)` for no limit.
    async fn call_acquire(
        &self,
        s: &Session,
        keys: &[RemoteKey],
        token: &str,
        wait_ms: Option<i64>,
    ) -> std::result::Result<Answer, tokio_postgres::Error> {
        let spaces: Vec<i16> = keys.iter().map(|k| i16::from(k.space as u8)).collect();
        let bytes: Vec<&[u8]> = keys.iter().map(|k| &k.key[..]).collect();
        let modes: String = keys
            .iter()
            .map(|k| if k.mode == Mode::Exclusive { 'x' } else { 's' })
            .collect();
        let row = s
            .client
            .query_one(
                &s.st.acquire,
                &[
                    &s.pid,
                    &self.url.options.prefix,
                    &spaces,
                    &bytes,
                    &modes,
                    &token,
                    &wait_ms,
                ],
            )
            .await?;
        let ids: Option<Vec<i64>> = row.get(0);
        let fences: Option<Vec<i64>> = row.get(1);
        let dieds: Option<Vec<bool>> = row.get(2);
        Ok(match (ids, fences, dieds) {
            (Some(ids), Some(fences), Some(dieds)) if ids.len() == keys.len() => Some(
                ids.into_iter()
                    .zip(fences.into_iter().zip(dieds))
                    .map(|(id, (fence, died))| {
                        (
                            id,
                            RemoteGrant {
                                fence: u64::try_from(fence).unwrap_or(0),
                                died,
                            },
                        )
                    })
                    .collect(),
            ),
            _ => None,
        })
    }

    /// Records what `token` was granted in `s`.
    fn record(
        &self,
        s: &Arc<Session>,
        keys: &[RemoteKey],
        token: &str,
        answer: Vec<(i64, RemoteGrant)>,
    ) -> Vec<RemoteGrant> {
        let mut holds = self.holds.lock();
        s.holding.fetch_add(keys.len(), Ordering::AcqRel);
        keys.iter()
            .zip(answer)
            .map(|(k, (id, grant))| {
                holds.insert(
                    (token.to_owned(), k.space, k.key.clone()),
                    HeldIn {
                        number: id,
                        mode: k.mode,
                        session: Arc::clone(s),
                        sem: None,
                    },
                );
                grant
            })
            .collect()
    }

    /// Undoes, in the background and in `s` (after the call whose answer was lost), whatever
    /// `token` was granted there.
    fn forget(&self, s: Arc<Session>, token: &str) {
        let token = token.to_owned();
        tokio::spawn(async move {
            let _ = s.client.query_one(&s.st.forget, &[&s.pid, &token]).await;
        });
    }

    /// Where `token` holds `key`: the lock number (a semaphore hold's own number), the
    /// session, and a semaphore hold's key number.
    fn hold_of(&self, key: &RemoteKey, token: &str) -> Option<(i64, Arc<Session>, Option<i64>)> {
        self.holds
            .lock()
            .get(&(token.to_owned(), key.space, key.key.clone()))
            .map(|h| (h.number, Arc::clone(&h.session), h.sem))
    }

    /// Handles what the main session hears, while the scope lives: force-unlocks, and a
    /// semaphore key's freed units.
    async fn watch_notes(server: std::sync::Weak<Self>, mut heard: UnboundedReceiver<Note>) {
        while let Some(note) = heard.recv().await {
            let Some(server) = server.upgrade() else {
                return;
            };
            match note {
                Note::Forced(old) => server.forced(old).await,
                Note::Freed(sem) => server.wake(sem),
            }
        }
    }

    /// Every `every`, while the scope lives, drops the rows of the prefix's idle keys
    /// (`keylock_sweep`), when this scope object took or released anything since its last
    /// sweep: a workload that locks ever-new keys leaves no row per key behind. A round reads
    /// the whole prefix in batches on the main session, each one short and never waiting. A
    /// round cut short (the server unreachable, another process sweeping the prefix) is run
    /// again at the next tick.
    async fn sweep_idle(server: std::sync::Weak<Self>, every: Duration) {
        let mut seen = 0;
        loop {
            tokio::time::sleep(every).await;
            let Some(server) = server.upgrade() else {
                return;
            };
            let calls = server.calls.load(Ordering::Relaxed);
            if calls != seen && server.sweep_round().await {
                seen = calls;
            }
        }
    }

    /// One round of the sweep over the prefix; whether it reached the prefix's end.
    async fn sweep_round(&self) -> bool {
        if self.permits != 0 {
            return self.sweep_units().await;
        }
        let mut after: (Option<i16>, Option<Vec<u8>>) = (None, None);
        loop {
            let Ok(s) = self.main().await else {
                return false;
            };
            let swept = self
                .bounded(s.client.query_one(
                    "SELECT dropped, last_space, last_key FROM keylock_sweep($1, $2, $3, $4)",
                    &[&self.url.options.prefix, &after.0, &after.1, &SWEEP_BATCH],
                ))
                .await;
            let Ok(row) = swept else {
                return false;
            };
            if row.get::<_, Option<i32>>(0).is_none() {
                return false;
            }
            match row.get::<_, Option<Vec<u8>>>(2) {
                Some(last) => after = (row.get(1), Some(last)),
                None => return true,
            }
        }
    }

    /// Lock number `old` was force-unlocked: each hold of it here lets the old number go now
    /// (requests queued on it then move to the key's new number), and the front hears that
    /// the hold was lost.
    async fn forced(&self, old: i64) {
        let hit: Vec<(HoldKey, Mode)> = self
            .holds
            .lock()
            .iter()
            .filter(|(_, h)| h.number == old)
            .map(|(k, h)| (k.clone(), h.mode))
            .collect();
        for ((token, space, key), mode) in hit {
            let key = RemoteKey {
                space,
                key,
                mode,
                units: 0,
            };
            let _ = Server::release(self, &key, &token).await;
            let _ = self.lost.send(token);
        }
    }
}

impl Server for PgServer {
    const KIND: &'static str = "PostgreSQL";

    fn url(&self) -> &dyn fmt::Debug {
        &self.url
    }

    fn lease(&self) -> Duration {
        self.url.options.lease
    }

    fn permits(&self) -> u32 {
        self.permits
    }

    fn fresh_id(&self) -> String {
        format!("{}:{}", self.id, self.next.fetch_add(1, Ordering::Relaxed))
    }

    fn queued_here(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    fn take_lost(&self) -> Option<UnboundedReceiver<String>> {
        self.lost_here.lock().take()
    }

    async fn acquire(
        self: &Arc<Self>,
        keys: &[RemoteKey],
        token: &str,
        _lease: Duration,
        deadline: Option<Instant>,
        try_only: bool,
        cancelled: impl Future<Output = ()> + Send,
    ) -> Result<Vec<RemoteGrant>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.permits != 0 {
            return self
                .acquire_units(keys, token, deadline, try_only, cancelled)
                .await;
        }
        // First a try on the main session: every uncontended acquire is this one call.
        let main = self.main().await?;
        let tried = tokio::time::timeout(
            self.url.options.timeout,
            self.call_acquire(&main, keys, token, None),
        )
        .await;
        match tried {
            Ok(Ok(Some(answer))) => return Ok(self.record(&main, keys, token, answer)),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                self.forget(main, token);
                return Err(error(&self.url, &e));
            }
            Err(_) => {
                self.forget(main, token);
                return Err(timed_out(&self.url, self.url.options.timeout));
            }
        }
        if try_only {
            return Err(Error::WouldBlock);
        }
        // Then a wait on a session of its own, which the server blocks until the keys are free
        // or the deadline passes.
        let mut cancelled = std::pin::pin!(cancelled);
        let s = tokio::select! {
            s = self.waiting_session(deadline) => match s? {
                Some(s) => s,
                None => return Err(Error::TimedOut),
            },
            () = &mut cancelled => return Err(Error::TimedOut),
        };
        let wait_ms = match deadline {
            None => 0,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now()).as_millis();
                if left == 0 {
                    self.done_with(s);
                    return Err(Error::TimedOut);
                }
                i64::try_from(left).unwrap_or(i64::MAX)
            }
        };
        self.queued.fetch_add(1, Ordering::Relaxed);
        let answer = {
            let call = self.call_acquire(&s, keys, token, Some(wait_ms));
            let mut call = std::pin::pin!(call);
            tokio::select! {
                r = &mut call => (r, false),
                () = &mut cancelled => {
                    // Ask the server to stop waiting, then read how the call ended: it may
                    // have been granted just before.
                    let _ = s.client.cancel_token().cancel_query(self.tls.clone()).await;
                    (call.await, true)
                }
            }
        };
        self.queued.fetch_sub(1, Ordering::Relaxed);
        // A session that was sent a cancel is never used again: the cancel travels apart from
        // the call (over a connection of its own) and could still arrive after the call ended,
        // cutting off whatever the session ran next. Its end frees whatever it had.
        match answer {
            (Ok(Some(answer)), false) => Ok(self.record(&s, keys, token, answer)),
            (Ok(Some(_)), true) => {
                self.forget(s, token);
                Err(Error::TimedOut)
            }
            (Ok(None), true) => Err(Error::TimedOut),
            (Ok(None), false) => {
                self.done_with(s);
                Err(Error::TimedOut)
            }
            // A wait that ended in an error may have left something taken in its session
            // (the function lets go of what it took, but a session that broke off cannot):
            // the session is dropped, never reused, and its end frees whatever it had.
            (Err(_), true) => Err(Error::TimedOut),
            (Err(e), false) => {
                let deadlock = e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED);
                if deadlock {
                    return Err(Error::Unavailable(
                        format!(
                            "PostgreSQL at {}: the server found a deadlock between this request \
                             and others (keys held while waiting for keys in another order)",
                            self.url.name.redacted()
                        )
                        .into(),
                    ));
                }
                Err(error(&self.url, &e))
            }
        }
    }

    async fn release(&self, key: &RemoteKey, token: &str) -> Result<bool> {
        let Some((id, s, sem)) = self.hold_of(key, token) else {
            return Ok(false);
        };
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mode = if key.mode == Mode::Exclusive {
            "x"
        } else {
            "s"
        };
        let out = if s.is_closed() {
            // The session ended, and its locks with it.
            Ok(false)
        } else if let Some(sem) = sem {
            self.hold_call(HoldCall::Release, &s, token, sem, id).await
        } else {
            self.bounded(
                s.client
                    .query_one(&s.st.release, &[&s.pid, &id, &token, &mode]),
            )
            .await
            .map(|row| row.get::<_, bool>(0))
        };
        if out.is_ok() || s.is_closed() {
            let removed = self
                .holds
                .lock()
                .remove(&(token.to_owned(), key.space, key.key.clone()));
            if removed.is_some() {
                s.holding.fetch_sub(1, Ordering::AcqRel);
                self.done_with(s);
            }
        }
        out
    }

    async fn renew(&self, key: &RemoteKey, token: &str, _lease: Duration) -> Result<bool> {
        self.check(key, token).await
    }

    async fn check(&self, key: &RemoteKey, token: &str) -> Result<bool> {
        let Some((id, s, sem)) = self.hold_of(key, token) else {
            return Ok(false);
        };
        if s.is_closed() {
            return Ok(false);
        }
        if let Some(sem) = sem {
            return self.hold_call(HoldCall::Check, &s, token, sem, id).await;
        }
        let mode = if key.mode == Mode::Exclusive {
            "x"
        } else {
            "s"
        };
        let row = self
            .bounded(
                s.client
                    .query_one(&s.st.check, &[&s.pid, &id, &token, &mode]),
            )
            .await?;
        Ok(row.get(0))
    }

    async fn force(&self, space: KeySpace, key: &[u8]) -> Result<bool> {
        if self.permits != 0 {
            return self.force_units(space, key).await;
        }
        let s = self.main().await?;
        let sp = i16::from(space as u8);
        let row = self
            .bounded(
                s.client
                    .query_one(&s.st.force, &[&self.url.options.prefix, &sp, &key]),
            )
            .await?;
        Ok(row.get(0))
    }

    async fn keys(&self) -> Result<Vec<(KeySpace, Vec<u8>)>> {
        let s = self.main().await?;
        let query = if self.permits == 0 {
            sql::KEYS
        } else {
            sql::SEM_KEYS
        };
        let rows = self
            .bounded(s.client.query(query, &[&self.url.options.prefix]))
            .await?;
        rows.iter()
            .map(|r| {
                let space = match r.get::<_, i16>(0) {
                    0 => KeySpace::Keys,
                    1 => KeySpace::Names,
                    _ => {
                        return Err(Error::Incompatible(
                            "keylock_keys holds a key space this build does not know".into(),
                        ));
                    }
                };
                Ok((space, r.get::<_, Vec<u8>>(1)))
            })
            .collect()
    }

    async fn info(&self, space: KeySpace, key: &[u8]) -> Result<Option<RemoteInfo>> {
        if self.permits != 0 {
            return self.info_units(space, key).await;
        }
        let s = self.main().await?;
        let sp = i16::from(space as u8);
        let row = self
            .bounded(
                s.client
                    .query_opt(&s.st.info, &[&self.url.options.prefix, &sp, &key]),
            )
            .await?;
        Ok(row.map(|r| {
            let exclusive: bool = r.get(0);
            let fence: i64 = r.get(1);
            let holders: i32 = r.get(2);
            let waiters: i32 = r.get(3);
            RemoteInfo {
                fence: u64::try_from(fence).unwrap_or(0),
                mode: if exclusive {
                    Mode::Exclusive
                } else {
                    Mode::Shared
                },
                holders: u32::try_from(holders).unwrap_or(0),
                lease_remaining: None,
                waiters: usize::try_from(waiters).unwrap_or(0),
                units: 0,
            }
        }))
    }
}

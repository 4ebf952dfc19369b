//! The remote half of the scope: the scripts' calls, and the wait loop that blocks on a
//! waiter's own list (`BLPOP`) between attempts. Everything here runs on the scope's runtime.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::Value;
use redis::aio::MultiplexedConnection;

use super::conn::{CmdConn, Conns};
use super::scripts::{Names, Scripts, mode_char};
use crate::acquisition::Mode;
use crate::error::{Error, Result};
use crate::remote::{RemoteGrant, RemoteInfo, RemoteKey, Server};
use crate::scope::KeySpace;

/// The longest a waiter blocks before it looks again by itself (the bounded safety re-check).
/// Waiters are woken by push; this only bounds how long a lost wake-up costs: a waiter ahead
/// that died is dropped from the queue when its registration (its block and the slack below)
/// lapses, so it holds the queue up for at most about `MAX_BLOCK + REGISTRATION_SLACK`.
const MAX_BLOCK: Duration = Duration::from_secs(5);
/// The shortest block (a lease about to end: look again right after it).
const MIN_BLOCK: Duration = Duration::from_millis(2);
/// The least time an attempt sent behind a block must have for its reply before the deadline
/// (else the block goes alone, and the attempt after it).
const REPLY_ROOM: Duration = Duration::from_millis(50);
/// The longest a wait that ran out of time waits for its cleanups (its leave, the release of
/// what its last attempt may have been granted) before it returns: a healthy Redis answers in
/// far less, and a slow one finishes them in the background.
const LEAVE_ROOM: Duration = Duration::from_millis(50);
/// How much longer a waiter's registration lives than its block, to cover the round trips.
const REGISTRATION_SLACK: Duration = Duration::from_secs(1);

/// The Redis scope's calls to its server: the scripts, and the wait loop.
///
/// The scope's own instance runs on the scope's runtime; a blocking caller's lane has a view of
/// its own ([`Server::lane`]): the same scope, with connections made on the lane's runtime.
pub(crate) struct RedisServer {
    pub(crate) conns: Arc<Conns>,
    common: Arc<Common>,
    /// The undoing this view runs in the background (see [`Background`]).
    background: Arc<Background>,
}

/// What every view of a scope shares.
pub(crate) struct Common {
    scripts: Scripts,
    names: Names,
    notify: Vec<u8>,
    /// Random, per scope: tokens and waiter ids start with it.
    id: String,
    next: AtomicU64,
    /// The lease of every remote acquisition (renewed while it lives).
    lease: Duration,
    /// A semaphore scope's units per key (0 for locks).
    permits: u32,
    /// This process's acquires that are queued in Redis now (from the script that queued them
    /// to the end of their wait), for [`stats`](crate::KeyedLock::stats).
    queued_here: AtomicUsize,
}

/// Tasks a view started to undo an attempt (on the connection the attempt went on, so they
/// must run on the runtime that connection belongs to), counted so that a lane is not handed
/// to its next caller, nor left undriven, before they end.
#[derive(Default)]
struct Background {
    running: AtomicUsize,
    done: tokio::sync::Notify,
}

impl std::ops::Deref for RedisServer {
    type Target = Common;

    fn deref(&self) -> &Common {
        &self.common
    }
}

/// One acquire counted in [`Common::queued_here`] while this lives.
struct QueuedHere<'a>(&'a AtomicUsize);

impl<'a> QueuedHere<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for QueuedHere<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl RedisServer {
    pub(crate) fn new(conns: Arc<Conns>, permits: u32) -> Result<Self> {
        let mut seed = [0u8; 16];
        getrandom::fill(&mut seed)
            .map_err(|e| Error::Unavailable(format!("no random numbers for tokens: {e}").into()))?;
        let id = seed.iter().map(|b| format!("{b:02x}")).collect();
        let names = Names::new(&conns.url.options.prefix, permits != 0);
        Ok(Self {
            common: Arc::new(Common {
                notify: names.notify(),
                names,
                lease: conns.url.options.lease,
                permits,
                scripts: Scripts::new(),
                id,
                next: AtomicU64::new(1),
                queued_here: AtomicUsize::new(0),
            }),
            conns,
            background: Arc::default(),
        })
    }

    /// Runs `fut` on the current runtime, counted in [`Background`] until it ends.
    fn in_background(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let background = Arc::clone(&self.background);
        background.running.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            fut.await;
            if background.running.fetch_sub(1, Ordering::AcqRel) == 1 {
                background.done.notify_waiters();
            }
        });
    }

    /// Loads the scripts by `cutoff`, so that the first acquire is one round trip too.
    pub(crate) async fn load(&self, cutoff: Instant) -> Result<()> {
        for script in self.scripts.all() {
            let c = self.conns.cmd(cutoff).await?;
            let mut con = c.conn.clone();
            match self.conns.by(cutoff, script.load_async(&mut con)).await {
                Ok(sha) if sha == script.get_hash() => {}
                Ok(_) => {
                    self.conns.discard(c.generation);
                    return Err(self.conns.unexpected_reply());
                }
                Err(e) => {
                    self.conns.discard(c.generation);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The permits a semaphore's first open recorded under the prefix
    /// ([`inspect_semaphore`](crate::inspect_semaphore)); `Incompatible` where there are none.
    pub(crate) async fn recorded_permits(conns: &Conns, cutoff: Instant) -> Result<u32> {
        let name = Names::new(&conns.url.options.prefix, true).permits();
        let recorded: Option<Vec<u8>> = conns
            .query(cutoff, redis::cmd("GET").arg(&name[..]))
            .await?;
        crate::remote::recorded_permits(recorded.map(|r| {
            std::str::from_utf8(&r)
                .ok()
                .and_then(|p| p.parse::<i64>().ok())
        }))
    }

    /// Records this scope's permits under the prefix, or checks them against those already
    /// recorded: every process that opens a semaphore scope must agree (`Incompatible`
    /// otherwise). Nothing for a lock scope.
    pub(crate) async fn claim_permits(&self, cutoff: Instant) -> Result<()> {
        if self.permits == 0 {
            return Ok(());
        }
        let args = [self.permits.to_string().into_bytes()];
        let v = self
            .call(
                &self.scripts.permits,
                &[self.names.permits()],
                &args,
                cutoff,
                None,
            )
            .await
            .map_err(|f| f.error)?;
        match int(&v) {
            Some(p) if p == i64::from(self.permits) => Ok(()),
            Some(p) => Err(Error::Incompatible(
                format!(
                    "this prefix's semaphore has {p} permits per key, not {}",
                    self.permits
                )
                .into(),
            )),
            None => Err(self.conns.unexpected_reply()),
        }
    }

    /// A key's mode as the scripts spell it: a lock's mode char, or a semaphore's units and
    /// permits.
    fn mode_arg(&self, k: &RemoteKey) -> Vec<u8> {
        if k.units == 0 {
            mode_char(k.mode).as_bytes().to_vec()
        } else {
            format!("u{}.{}.", k.units, self.permits).into_bytes()
        }
    }

    /// A token or waiter id no other holder, in any process, has.
    pub(crate) fn fresh_id(&self) -> String {
        format!("{}:{}", self.id, self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The names of `keys` (four each: see [`Names::lock`]), then the scope's fence floor: the
    /// KEYS of the scripts (`check` takes the first two).
    fn keys_of<'a>(&self, keys: impl IntoIterator<Item = &'a RemoteKey>) -> Vec<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = keys
            .into_iter()
            .flat_map(|k| self.names.lock(k.space, &k.key))
            .collect();
        names.push(self.names.floor());
        names
    }

    /// When a command started now must have its whole reply: `timeout` from now, or the
    /// caller's deadline if sooner.
    fn cutoff(&self, deadline: Option<Instant>) -> Instant {
        let own = Instant::now() + self.conns.url.options.timeout;
        deadline.map_or(own, |d| own.min(d))
    }

    /// `script` with `keys` and `args`, and a fresh request id as its last ARGV, which the
    /// reply must carry: the invocation and the id.
    fn invocation<'a>(
        &self,
        script: &'a redis::Script,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> (redis::ScriptInvocation<'a>, String) {
        let id = self.fresh_id();
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(&k[..]);
        }
        for a in args {
            inv.arg(&a[..]);
        }
        inv.arg(id.as_bytes());
        (inv, id)
    }

    /// The acquire script's ARGV for an attempt: the notify prefix, the token, the waiter, the
    /// lease, how long the waiter stays registered if it must wait (0 for a try) and each key's
    /// mode.
    fn acquire_args(
        &self,
        keys: &[RemoteKey],
        token: &str,
        waiter: &str,
        lease: Duration,
        registration: u64,
    ) -> Vec<Vec<u8>> {
        let mut args = vec![
            self.notify.clone(),
            token.as_bytes().to_vec(),
            waiter.as_bytes().to_vec(),
            millis(lease).to_string().into_bytes(),
            registration.to_string().into_bytes(),
        ];
        args.extend(keys.iter().map(|k| self.mode_arg(k)));
        args
    }

    /// Runs a script that takes the notify prefix as its first ARGV (all but `check`).
    async fn eval(
        &self,
        script: &redis::Script,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        cutoff: Instant,
        on: Option<CmdConn>,
    ) -> std::result::Result<Value, Failed> {
        let mut all = Vec::with_capacity(args.len() + 1);
        all.push(self.notify.clone());
        all.extend_from_slice(args);
        self.call(script, keys, &all, cutoff, on).await
    }

    /// Runs `script` with `keys` and `args` (and a fresh request id, which the reply must
    /// carry), on connection `on` if given, else the command connection; its whole reply must
    /// come by `cutoff`.
    ///
    /// A connection that fails, is cut off, or gives a reply that is not the answer to this
    /// request is discarded. A connection found torn (a server restart since its last use, or
    /// a reply lost on the way) is replaced and the script sent once more: every script is
    /// safe to repeat (an acquire by the same token gives the same grant).
    async fn call(
        &self,
        script: &redis::Script,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        cutoff: Instant,
        mut on: Option<CmdConn>,
    ) -> std::result::Result<Value, Failed> {
        let (inv, id) = self.invocation(script, keys, args);
        let mut retried = false;
        loop {
            let c = match on.take() {
                Some(c) => c,
                None => self.conns.cmd(cutoff).await.map_err(|error| Failed {
                    cut: Instant::now() >= cutoff,
                    error,
                    conn: None,
                })?,
            };
            let started = Instant::now();
            let mut con = c.conn.clone();
            let reply =
                tokio::time::timeout_at(cutoff.into(), inv.invoke_async::<Value>(&mut con)).await;
            let (error, cut) = match reply {
                Ok(Ok(v)) => match answer(v, &id) {
                    Some(v) => return Ok(v),
                    None => (self.conns.unexpected_reply(), false),
                },
                Ok(Err(e)) if !retried && (e.is_io_error() || e.is_connection_dropped()) => {
                    self.conns.discard(c.generation);
                    retried = true;
                    continue;
                }
                Ok(Err(e)) => (self.conns.error(&e), false),
                Err(_) => (self.conns.timed_out(started.elapsed()), true),
            };
            self.conns.discard(c.generation);
            return Err(Failed {
                error,
                cut,
                conn: Some(c),
            });
        }
    }

    /// Undoes an attempt whose outcome is unknown: releases `token` on every key and takes
    /// `waiter` out of the queues, first on `conn` (the connection the attempt went on, so
    /// that Redis runs this after it), then, for a release that got no answer there, on the
    /// command connection. Both are safe to repeat.
    async fn forget(
        self: Arc<Self>,
        conn: Option<CmdConn>,
        keys: Vec<RemoteKey>,
        token: String,
        waiter: String,
    ) {
        for k in &keys {
            if self.release_on(k, &token, conn.clone()).await.is_err() && conn.is_some() {
                let _ = self.release_on(k, &token, None).await;
            }
        }
        if self.leave(&keys, &waiter, conn.clone()).await.is_err() && conn.is_some() {
            let _ = self.leave(&keys, &waiter, None).await;
        }
    }

    /// Blocks on the waiter's own list for at most `wait` (and not past `deadline`), on `con`
    /// (a connection of its own). With `then` (the next attempt), Redis runs that attempt on the
    /// same connection right after the block ends, so that a wake-up costs no round trip more:
    /// its reply, if it ran. `None`: the block ended and the loop's next attempt is to be sent.
    ///
    /// An error whose [`Failed::conn`] is set left the attempt's outcome unknown: it is to be
    /// undone on that connection (after the attempt, if Redis runs it).
    async fn block(
        &self,
        con: MultiplexedConnection,
        waiter: &str,
        wait: Duration,
        deadline: Option<Instant>,
        then: Option<&(redis::ScriptInvocation<'_>, String)>,
    ) -> std::result::Result<Option<Value>, Failed> {
        let own = Instant::now() + wait + self.conns.url.options.timeout;
        let cutoff = deadline.map_or(own, |d| own.min(d));
        let list = self.names.notify_list(waiter);
        let mut pipe = redis::pipe();
        // Each reply as it came, server errors included (told apart below).
        pipe.ignore_errors();
        pipe.cmd("BLPOP")
            .arg(&list[..])
            .arg(format!("{:.3}", wait.as_secs_f64()));
        if let Some((inv, _)) = then {
            pipe.invoke_script(inv);
        }
        let mut query = con.clone();
        let reply =
            tokio::time::timeout_at(cutoff.into(), pipe.query_async::<Vec<Value>>(&mut query))
                .await;
        // The attempt may have run: undone on this connection.
        let unknown = |error: Error, cut: bool| Failed {
            error,
            cut,
            conn: then.map(|_| CmdConn::of_blocker(con.clone())),
        };
        match reply {
            Ok(Ok(mut items)) if items.len() == 1 + usize::from(then.is_some()) => {
                // Nothing pushed in time, or a push to this waiter's own list: the answer to
                // this request (a BLPOP reply names its list).
                let woke = items.remove(0);
                let answered = match &woke {
                    Value::ServerError(e) => {
                        return Err(unknown(self.conns.error(&e.clone().into()), false));
                    }
                    Value::Nil => true,
                    Value::Array(pair) => {
                        pair.len() == 2 && matches!(&pair[0], Value::BulkString(l) if *l == list)
                    }
                    _ => false,
                };
                if !answered {
                    return Err(unknown(self.conns.unexpected_reply(), false));
                }
                let attempt = match (then, items.pop()) {
                    // The scripts were flushed: the attempt did not run, and the next one
                    // (sent alone) loads them.
                    (Some(_), Some(Value::ServerError(e)))
                        if e.kind() == Some(redis::ServerErrorKind::NoScript) =>
                    {
                        None
                    }
                    (Some(_), Some(Value::ServerError(e))) => {
                        return Err(unknown(self.conns.error(&e.into()), false));
                    }
                    (Some((_, id)), Some(v)) => match answer(v, id) {
                        Some(v) => Some(v),
                        None => return Err(unknown(self.conns.unexpected_reply(), false)),
                    },
                    _ => None,
                };
                self.conns.idle(con);
                Ok(attempt)
            }
            // Any other reply does not answer this request: the connection is dropped.
            Ok(Ok(_)) => Err(unknown(self.conns.unexpected_reply(), false)),
            // A connection torn since it was last used (a server restart): dropped here, and the
            // next attempt (the same token: it finds the grant, if the one sent here ran) says
            // whether Redis is really gone.
            Ok(Err(e)) if e.is_io_error() || e.is_connection_dropped() => Ok(None),
            Ok(Err(e)) => Err(unknown(self.conns.error(&e), false)),
            // Cut off by the deadline: the loop's next turn ends the acquire.
            Err(_) if then.is_none() && deadline.is_some_and(|d| Instant::now() >= d) => Ok(None),
            Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                Err(unknown(Error::TimedOut, true))
            }
            Err(_) => Err(unknown(
                self.conns.timed_out(wait + self.conns.url.options.timeout),
                false,
            )),
        }
    }

    async fn leave(&self, keys: &[RemoteKey], waiter: &str, on: Option<CmdConn>) -> Result<()> {
        let mut args = vec![waiter.as_bytes().to_vec()];
        args.extend(keys.iter().map(|k| self.mode_arg(k)));
        let cutoff = self.cutoff(None);
        self.eval(&self.scripts.leave, &self.keys_of(keys), &args, cutoff, on)
            .await
            .map(drop)
            .map_err(|f| f.error)
    }

    async fn release_on(&self, key: &RemoteKey, token: &str, on: Option<CmdConn>) -> Result<bool> {
        let args = [token.as_bytes().to_vec(), self.mode_arg(key)];
        let cutoff = self.cutoff(None);
        let v = self
            .eval(
                &self.scripts.release,
                &self.keys_of([key]),
                &args,
                cutoff,
                on,
            )
            .await
            .map_err(|f| f.error)?;
        self.flag(&v)
    }

    /// A script's 0-or-1 answer.
    fn flag(&self, v: &Value) -> Result<bool> {
        match int(v) {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(self.conns.unexpected_reply()),
        }
    }
}

impl Server for RedisServer {
    const KIND: &'static str = "Redis";

    fn url(&self) -> &dyn std::fmt::Debug {
        &self.conns.url
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    fn permits(&self) -> u32 {
        self.common.permits
    }

    fn fresh_id(&self) -> String {
        RedisServer::fresh_id(self)
    }

    fn queued_here(&self) -> usize {
        self.queued_here.load(Ordering::Relaxed)
    }

    fn lane(&self) -> Option<Arc<Self>> {
        Some(Arc::new(Self {
            conns: self.conns.sibling(),
            common: Arc::clone(&self.common),
            background: Arc::default(),
        }))
    }

    fn busy(&self) -> bool {
        self.background.running.load(Ordering::Acquire) != 0
    }

    async fn settle(&self) {
        loop {
            let done = self.background.done.notified();
            if !self.busy() {
                return;
            }
            done.await;
        }
    }

    /// Takes every key of `keys` or none, waiting (by push) until `deadline`; `try_only`
    /// neither waits nor queues. Stops waiting, leaving the queue, once `cancelled` resolves.
    ///
    /// The deadline bounds everything, the commands included: a command it cuts off ends the
    /// acquire with `TimedOut` (one cut off by the URL's `timeout` with `Unavailable`). An
    /// attempt whose outcome is unknown (its reply lost, cut off, or not an answer) may have
    /// taken the keys on the server: its token is released and its waiter taken out of the
    /// queues in the background, on the same connection (so Redis runs that after the
    /// attempt), and the key is never left held by a token nobody has.
    async fn acquire(
        self: &Arc<Self>,
        keys: &[RemoteKey],
        token: &str,
        lease: Duration,
        deadline: Option<Instant>,
        try_only: bool,
        cancelled: impl Future<Output = ()> + Send,
    ) -> Result<Vec<RemoteGrant>> {
        let waiter = self.fresh_id();
        // A try is bounded by the URL's timeout alone.
        let deadline = deadline.filter(|_| !try_only);
        let mut cancelled = std::pin::pin!(cancelled);
        let mut queued = false;
        let names = self.keys_of(keys);
        // The cleanups this acquire started (each runs in the background, so that it ends even
        // if this future is dropped): a receiver each, told when it is done.
        let cleanups = parking_lot::Mutex::new(Vec::new());
        let cleanup = |fut: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>| {
            let (done, heard) = tokio::sync::oneshot::channel::<()>();
            self.in_background(async move {
                fut.await;
                let _ = done.send(());
            });
            cleanups.lock().push(heard);
        };
        let result = async {
            let mut counted = None;
            // Undoes an attempt whose outcome is unknown, on the connection it went on.
            let undo = |conn: Option<CmdConn>| {
                cleanup(Box::pin(Arc::clone(self).forget(
                    conn,
                    keys.to_vec(),
                    token.to_owned(),
                    waiter.clone(),
                )));
            };
            // The registration an attempt sent now asks for: the longest block after it. An
            // attempt with no time left to wait (a zero timeout, or a deadline already past at
            // the first attempt; a queued waiter sends none then) does not queue, and so has no
            // queue to leave before it returns (see the end of this function).
            let registration = |now: Instant| {
                let remaining = deadline.map(|d| d.saturating_duration_since(now));
                let block = remaining.map_or(MAX_BLOCK, |r| r.min(MAX_BLOCK));
                if try_only || remaining.is_some_and(|r| r.is_zero()) {
                    0
                } else {
                    millis(block + REGISTRATION_SLACK)
                }
            };
            // The reply of the attempt Redis ran right after the last block.
            let mut ran: Option<Value> = None;
            loop {
                let now = Instant::now();
                let remaining = deadline.map(|d| d.saturating_duration_since(now));
                if ran.is_none() && queued && remaining.is_some_and(|r| r.is_zero()) {
                    return Err(Error::TimedOut);
                }
                let block = remaining.map_or(MAX_BLOCK, |r| r.min(MAX_BLOCK));
                let mut by_deadline = false;
                let reply = match ran.take() {
                    Some(v) => Ok(v),
                    None => {
                        let args =
                            self.acquire_args(keys, token, &waiter, lease, registration(now));
                        let cutoff = self.cutoff(deadline);
                        by_deadline = deadline.is_some_and(|d| d <= cutoff);
                        self.call(&self.scripts.acquire, &names, &args, cutoff, None)
                            .await
                    }
                };
                let parsed = match reply {
                    Ok(v) => parse_acquire(&v, keys.len()).ok_or_else(|| Failed {
                        error: self.conns.unexpected_reply(),
                        cut: false,
                        conn: None,
                    }),
                    Err(f) => Err(f),
                };
                let hint = match parsed {
                    Ok(Ok(grants)) => return Ok(grants),
                    Ok(Err(hint)) => hint,
                    Err(f) => {
                        let cut = f.cut && by_deadline;
                        undo(f.conn);
                        return Err(if cut { Error::TimedOut } else { f.error });
                    }
                };
                if try_only {
                    return Err(Error::WouldBlock);
                }
                if !queued && remaining.is_some_and(|r| r.is_zero()) {
                    // A first attempt with no time left: it did not queue, so nothing to leave.
                    return Err(Error::TimedOut);
                }
                queued = true;
                if counted.is_none() {
                    counted = Some(QueuedHere::new(&self.queued_here));
                }
                if remaining.is_some_and(|r| r.is_zero()) {
                    return Err(Error::TimedOut);
                }
                let wait = Duration::from_millis(hint.max(0) as u64)
                    .max(MIN_BLOCK)
                    .min(block.max(MIN_BLOCK));
                let own = Instant::now() + wait + self.conns.url.options.timeout;
                let con = match self
                    .conns
                    .blocker(deadline.map_or(own, |d| own.min(d)))
                    .await
                {
                    Ok(con) => con,
                    // The deadline came first: the loop's next turn says so.
                    Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => continue,
                    Err(e) => return Err(e),
                };
                // The next attempt goes right behind the block, unless the deadline may come
                // before its reply does.
                let sent = Instant::now();
                let then = deadline
                    .is_none_or(|d| sent + wait + REPLY_ROOM < d)
                    .then(|| {
                        let args =
                            self.acquire_args(keys, token, &waiter, lease, registration(sent));
                        self.invocation(&self.scripts.acquire, &names, &args)
                    });
                let woke = tokio::select! {
                    r = self.block(con.clone(), &waiter, wait, deadline, then.as_ref()) => r,
                    () = &mut cancelled => {
                        if then.is_some() {
                            // The attempt may still run: undone behind it.
                            undo(Some(CmdConn::of_blocker(con)));
                        }
                        return Err(Error::TimedOut);
                    }
                };
                match woke {
                    Ok(reply) => ran = reply,
                    Err(f) => {
                        if f.conn.is_some() {
                            undo(f.conn);
                        }
                        return Err(f.error);
                    }
                }
            }
        }
        .await;
        if result.is_err() && queued {
            let (remote, keys, waiter) = (Arc::clone(self), keys.to_vec(), waiter.clone());
            cleanup(Box::pin(async move {
                let _ = remote.leave(&keys, &waiter, None).await;
            }));
        }
        let cleanups = cleanups.into_inner();
        if matches!(result, Err(Error::TimedOut)) && !cleanups.is_empty() {
            // A wait that ran out of time (or was cancelled) returns once its waiter has left
            // the queue and whatever its last attempt may have taken is given back: one round
            // trip more, and at most `LEAVE_ROOM` (or the URL's timeout, if shorter) past the
            // deadline. Returned before, the waiter stood in the queue until its leave arrived,
            // and a release meanwhile woke it and kept the free key from a try made right after
            // the timeout (and a late grant held the key as long). A failed acquire does not
            // wait: Redis is likely failing these commands as well.
            let room = LEAVE_ROOM.min(self.conns.url.options.timeout);
            let all = async {
                for heard in cleanups {
                    let _ = heard.await;
                }
            };
            let _ = tokio::time::timeout(room, all).await;
        }
        result
    }

    /// Releases one key's hold; `false` if it was not the token's any more.
    async fn release(&self, key: &RemoteKey, token: &str) -> Result<bool> {
        self.release_on(key, token, None).await
    }

    /// Moves the hold's lease end to `lease` from now; `false` if it is lost.
    async fn renew(&self, key: &RemoteKey, token: &str, lease: Duration) -> Result<bool> {
        let args = [
            token.as_bytes().to_vec(),
            self.mode_arg(key),
            millis(lease).to_string().into_bytes(),
        ];
        let cutoff = self.cutoff(None);
        let v = self
            .eval(
                &self.scripts.renew,
                &self.keys_of([key]),
                &args,
                cutoff,
                None,
            )
            .await
            .map_err(|f| f.error)?;
        self.flag(&v)
    }

    /// Whether the hold is current.
    async fn check(&self, key: &RemoteKey, token: &str) -> Result<bool> {
        let keys: Vec<Vec<u8>> = self.keys_of([key]).into_iter().take(2).collect();
        let args = [token.as_bytes().to_vec(), self.mode_arg(key)];
        let cutoff = self.cutoff(None);
        let v = self
            .call(&self.scripts.check, &keys, &args, cutoff, None)
            .await
            .map_err(|f| f.error)?;
        self.flag(&v)
    }

    /// Frees the key whoever holds it; whether it was held.
    async fn force(&self, space: KeySpace, key: &[u8]) -> Result<bool> {
        let k = RemoteKey {
            space,
            key: key.to_vec(),
            mode: Mode::Exclusive,
            units: 0,
        };
        let cutoff = self.cutoff(None);
        let v = self
            .eval(&self.scripts.force, &self.keys_of([&k]), &[], cutoff, None)
            .await
            .map_err(|f| f.error)?;
        self.flag(&v)
    }

    /// The keys with a name on the server (held, queued for, or with a died mark or a lapsed
    /// waiter that nobody has tidied yet; `list` asks `info` which are held), by `SCAN` over the
    /// prefix's names.
    async fn keys(&self) -> Result<Vec<(KeySpace, Vec<u8>)>> {
        let pattern = self.names.scan_pattern();
        let mut found = std::collections::BTreeSet::new();
        let mut cursor = 0u64;
        loop {
            let (next, names): (u64, Vec<Vec<u8>>) = self
                .conns
                .query(
                    self.cutoff(None),
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern[..])
                        .arg("COUNT")
                        .arg(1000),
                )
                .await?;
            found.extend(names.iter().filter_map(|n| self.names.key_of(n)));
            if next == 0 {
                return Ok(found.into_iter().collect());
            }
            cursor = next;
        }
    }

    /// A snapshot of the key: `None` when free.
    async fn info(&self, space: KeySpace, key: &[u8]) -> Result<Option<RemoteInfo>> {
        let k = RemoteKey {
            space,
            key: key.to_vec(),
            mode: Mode::Exclusive,
            units: 0,
        };
        let cutoff = self.cutoff(None);
        let v = self
            .eval(&self.scripts.info, &self.keys_of([&k]), &[], cutoff, None)
            .await
            .map_err(|f| f.error)?;
        let f = ints(&v, 7).ok_or_else(|| self.conns.unexpected_reply())?;
        let (exclusive, fence, x_left, shared, s_left, waiters, units) =
            (f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
        if exclusive == 0 && shared == 0 {
            return Ok(None);
        }
        let left = if exclusive == 1 { x_left } else { s_left };
        Ok(Some(RemoteInfo {
            fence: fence.max(0) as u64,
            mode: if exclusive == 1 {
                Mode::Exclusive
            } else {
                Mode::Shared
            },
            holders: if exclusive == 1 {
                1
            } else {
                shared.max(0) as u32
            },
            lease_remaining: Some(Duration::from_millis(left.max(0) as u64)),
            waiters: waiters.max(0) as usize,
            units: units.max(0) as u32,
        }))
    }
}

/// A script call that gave no answer.
pub(crate) struct Failed {
    pub(crate) error: Error,
    /// Cut off by its cutoff (rather than failed).
    cut: bool,
    /// The connection it was sent on, if it was sent (the script may have run).
    conn: Option<CmdConn>,
}

/// The result in a script's reply `{id, result}`, if `id` is this request's.
fn answer(v: Value, id: &str) -> Option<Value> {
    match v {
        Value::Array(mut items)
            if items.len() == 2
                && matches!(&items[0], Value::BulkString(got) if got == id.as_bytes()) =>
        {
            items.pop()
        }
        _ => None,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn ints(v: &Value, n: usize) -> Option<Vec<i64>> {
    match v {
        Value::Array(items) if items.len() >= n => items.iter().map(int).collect(),
        _ => None,
    }
}

/// The acquire script's reply: the grants, or how long to wait before looking again (ms);
/// `None` if it is not an acquire's reply for `keys` keys.
fn parse_acquire(v: &Value, keys: usize) -> Option<std::result::Result<Vec<RemoteGrant>, i64>> {
    let items = match v {
        Value::Array(items) if !items.is_empty() => items,
        _ => return None,
    };
    match int(&items[0])? {
        1 if items.len() == 1 + 2 * keys => Some(Ok(items[1..]
            .chunks(2)
            .map(|c| {
                Some(RemoteGrant {
                    fence: u64::try_from(int(&c[0])?).ok()?,
                    died: int(&c[1])? != 0,
                })
            })
            .collect::<Option<_>>()?)),
        0 if items.len() == 2 => Some(Err(int(&items[1])?)),
        _ => None,
    }
}

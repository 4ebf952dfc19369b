//! The remote half of the scope: the scripts' calls, and the wait loop that blocks on a
//! waiter's own list (`BLPOP`) between attempts. Everything here runs on the scope's runtime.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

use super::conn::Conns;
use super::scripts::{Names, Scripts, mode_char};
use crate::acquisition::Mode;
use crate::error::{Error, Result};
use crate::scope::KeySpace;

/// The longest a waiter blocks before it looks again by itself (the bounded safety re-check).
/// Waiters are woken by push; this only bounds how long a lost wake-up costs: a waiter ahead
/// that died is dropped from the queue when its registration (its block and the slack below)
/// lapses, so it holds the queue up for at most about `MAX_BLOCK + REGISTRATION_SLACK`.
const MAX_BLOCK: Duration = Duration::from_secs(5);
/// The shortest block (a lease about to end: look again right after it).
const MIN_BLOCK: Duration = Duration::from_millis(2);
/// How much longer a waiter's registration lives than its block, to cover the round trips.
const REGISTRATION_SLACK: Duration = Duration::from_secs(1);

/// One key of a remote request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteKey {
    pub(crate) space: KeySpace,
    pub(crate) key: Vec<u8>,
    pub(crate) mode: Mode,
}

/// What an acquire got for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) fence: u64,
    /// The previous exclusive hold ended by its lease (its holder died or stalled).
    pub(crate) died: bool,
}

pub(crate) struct Remote {
    pub(crate) conns: Arc<Conns>,
    scripts: Scripts,
    names: Names,
    notify: Vec<u8>,
    /// Random, per scope: tokens and waiter ids start with it.
    id: String,
    next: AtomicU64,
    /// The lease of every remote acquisition (renewed while it lives).
    pub(crate) lease: Duration,
    /// This process's acquires that are queued in Redis now (from the script that queued them
    /// to the end of their wait), for [`stats`](crate::KeyedLock::stats).
    pub(crate) queued_here: AtomicUsize,
}

/// One acquire counted in [`Remote::queued_here`] while this lives.
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

impl Remote {
    pub(crate) fn new(conns: Arc<Conns>) -> Result<Self> {
        let mut seed = [0u8; 16];
        getrandom::fill(&mut seed)
            .map_err(|e| Error::Unavailable(format!("no random numbers for tokens: {e}").into()))?;
        let id = seed.iter().map(|b| format!("{b:02x}")).collect();
        let names = Names::new(&conns.url.prefix);
        Ok(Self {
            notify: names.notify(),
            names,
            lease: conns.url.lease,
            conns,
            scripts: Scripts::new(),
            id,
            next: AtomicU64::new(1),
            queued_here: AtomicUsize::new(0),
        })
    }

    /// Loads the scripts, so that the first acquire is one round trip too.
    pub(crate) async fn load(&self) -> Result<()> {
        for script in self.scripts.all() {
            let mut con = self.conns.cmd();
            self.conns.run(script.load_async(&mut con)).await?;
        }
        Ok(())
    }

    /// A token or waiter id no other holder, in any process, has.
    pub(crate) fn fresh_id(&self) -> String {
        format!("{}:{}", self.id, self.next.fetch_add(1, Ordering::Relaxed))
    }

    fn keys_of<'a>(&self, keys: impl IntoIterator<Item = &'a RemoteKey>) -> Vec<Vec<u8>> {
        keys.into_iter()
            .flat_map(|k| self.names.lock(k.space, &k.key))
            .collect()
    }

    async fn eval(
        &self,
        script: &redis::Script,
        keys: Vec<Vec<u8>>,
        args: Vec<Vec<u8>>,
    ) -> Result<Value> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        inv.arg(&self.notify[..]);
        for a in args {
            inv.arg(a);
        }
        let mut con = self.conns.cmd();
        match tokio::time::timeout(self.conns.url.timeout, inv.invoke_async(&mut con)).await {
            // A connection torn since its last use (a server restart): the manager reconnects,
            // and the script runs again (every script is safe to repeat: acquire by the same
            // token gives the same grant).
            Ok(Err(e)) if e.is_io_error() || e.is_connection_dropped() => {
                self.conns.run(inv.invoke_async(&mut con)).await
            }
            Ok(r) => r.map_err(|e| self.conns.error(&e)),
            Err(_) => Err(Error::Unavailable(
                format!(
                    "{}: no answer within {:?}",
                    self.conns.url.redacted(),
                    self.conns.url.timeout
                )
                .into(),
            )),
        }
    }

    /// One attempt at every key of `keys` (or none), on this thread, without queueing: the
    /// grants, or `None` if a key is taken (or others wait for it first).
    pub(crate) fn try_here(
        &self,
        keys: &[RemoteKey],
        token: &str,
        lease: Duration,
    ) -> Result<Option<Vec<Grant>>> {
        let waiter = self.fresh_id();
        let mut inv = self.scripts.acquire.prepare_invoke();
        for k in self.keys_of(keys) {
            inv.key(k);
        }
        inv.arg(&self.notify[..])
            .arg(token)
            .arg(&waiter)
            .arg(millis(lease))
            .arg(0);
        for k in keys {
            inv.arg(mode_char(k.mode));
        }
        let reply: Value = self.conns.on_this_thread(|con| inv.invoke(con))?;
        Ok(parse_acquire(&reply, keys.len())?.ok())
    }

    /// [`release`](Self::release) on this thread.
    pub(crate) fn release_here(&self, key: &RemoteKey, token: &str) -> Result<bool> {
        let mut inv = self.scripts.release.prepare_invoke();
        for k in self.keys_of([key]) {
            inv.key(k);
        }
        inv.arg(&self.notify[..])
            .arg(token)
            .arg(mode_char(key.mode));
        let reply: Value = self.conns.on_this_thread(|con| inv.invoke(con))?;
        int(&reply).map(|n| n == 1)
    }

    /// Takes every key of `keys` or none, waiting (by push) until `deadline`; `try_only`
    /// neither waits nor queues. Stops waiting, leaving the queue, once `cancelled` resolves.
    pub(crate) async fn acquire(
        &self,
        keys: &[RemoteKey],
        token: &str,
        lease: Duration,
        deadline: Option<Instant>,
        try_only: bool,
        cancelled: impl Future<Output = ()>,
    ) -> Result<Vec<Grant>> {
        let waiter = self.fresh_id();
        let mut cancelled = std::pin::pin!(cancelled);
        let mut queued = false;
        let result = async {
            let mut counted = None;
            loop {
                let now = Instant::now();
                let remaining = deadline.map(|d| d.saturating_duration_since(now));
                let block = remaining.map_or(MAX_BLOCK, |r| r.min(MAX_BLOCK));
                let registration = if try_only {
                    0
                } else {
                    millis(block + REGISTRATION_SLACK)
                };
                let mut args = vec![
                    token.as_bytes().to_vec(),
                    waiter.as_bytes().to_vec(),
                    millis(lease).to_string().into_bytes(),
                    registration.to_string().into_bytes(),
                ];
                args.extend(keys.iter().map(|k| mode_char(k.mode).as_bytes().to_vec()));
                let reply = self
                    .eval(&self.scripts.acquire, self.keys_of(keys), args)
                    .await?;
                let hint = match parse_acquire(&reply, keys.len())? {
                    Ok(grants) => return Ok(grants),
                    Err(hint) => hint,
                };
                if try_only {
                    return Err(Error::WouldBlock);
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
                tokio::select! {
                    r = self.block(&waiter, wait) => r?,
                    () = &mut cancelled => return Err(Error::TimedOut),
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    // One last look, so that a wake-up at the deadline is not wasted.
                    let reply = self.eval(&self.scripts.acquire, self.keys_of(keys), {
                        let mut a = vec![
                            token.as_bytes().to_vec(),
                            waiter.as_bytes().to_vec(),
                            millis(lease).to_string().into_bytes(),
                            b"0".to_vec(),
                        ];
                        a.extend(keys.iter().map(|k| mode_char(k.mode).as_bytes().to_vec()));
                        a
                    });
                    return match parse_acquire(&reply.await?, keys.len())? {
                        Ok(grants) => Ok(grants),
                        Err(_) => Err(Error::TimedOut),
                    };
                }
            }
        }
        .await;
        if result.is_err() && queued {
            let _ = self.leave(keys, &waiter).await;
        }
        result
    }

    /// Blocks on the waiter's own list for at most `wait`.
    async fn block(&self, waiter: &str, wait: Duration) -> Result<()> {
        let mut con = self.conns.blocker().await?;
        let list = self.names.notify_list(waiter);
        let cmd = redis::cmd("BLPOP")
            .arg(list)
            .arg(format!("{:.3}", wait.as_secs_f64()))
            .clone();
        let limit = wait + self.conns.url.timeout;
        match tokio::time::timeout(limit, cmd.query_async::<Value>(&mut con)).await {
            Ok(Ok(_)) => {
                self.conns.idle(con);
                Ok(())
            }
            // A connection torn since it was last used (a server restart): dropped here, and
            // the next attempt's script, on the self-healing command connection, says whether
            // Redis is really gone.
            Ok(Err(e)) if e.is_io_error() || e.is_connection_dropped() => Ok(()),
            Ok(Err(e)) => Err(self.conns.error(&e)),
            Err(_) => Err(Error::Unavailable(
                format!(
                    "{}: a blocked wait got no answer",
                    self.conns.url.redacted()
                )
                .into(),
            )),
        }
    }

    async fn leave(&self, keys: &[RemoteKey], waiter: &str) -> Result<()> {
        let mut args = vec![waiter.as_bytes().to_vec()];
        args.extend(keys.iter().map(|k| mode_char(k.mode).as_bytes().to_vec()));
        self.eval(&self.scripts.leave, self.keys_of(keys), args)
            .await
            .map(drop)
    }

    /// Releases one key's hold; `false` if it was not the token's any more.
    pub(crate) async fn release(&self, key: &RemoteKey, token: &str) -> Result<bool> {
        let args = vec![
            token.as_bytes().to_vec(),
            mode_char(key.mode).as_bytes().to_vec(),
        ];
        int(&self
            .eval(&self.scripts.release, self.keys_of([key]), args)
            .await?)
        .map(|n| n == 1)
    }

    /// Moves the hold's lease end to `lease` from now; `false` if it is lost.
    pub(crate) async fn renew(
        &self,
        key: &RemoteKey,
        token: &str,
        lease: Duration,
    ) -> Result<bool> {
        let args = vec![
            token.as_bytes().to_vec(),
            mode_char(key.mode).as_bytes().to_vec(),
            millis(lease).to_string().into_bytes(),
        ];
        int(&self
            .eval(&self.scripts.renew, self.keys_of([key]), args)
            .await?)
        .map(|n| n == 1)
    }

    /// Whether the hold is current.
    pub(crate) async fn check(&self, key: &RemoteKey, token: &str) -> Result<bool> {
        let mut inv = self.scripts.check.prepare_invoke();
        for k in self.keys_of([key]).into_iter().take(2) {
            inv.key(k);
        }
        inv.arg(token).arg(mode_char(key.mode));
        let mut con = self.conns.cmd();
        let v: Value = self.conns.run(inv.invoke_async(&mut con)).await?;
        int(&v).map(|n| n == 1)
    }

    /// Frees the key whoever holds it; whether it was held.
    pub(crate) async fn force(&self, space: KeySpace, key: &[u8]) -> Result<bool> {
        let k = RemoteKey {
            space,
            key: key.to_vec(),
            mode: Mode::Exclusive,
        };
        int(&self
            .eval(&self.scripts.force, self.keys_of([&k]), vec![])
            .await?)
        .map(|n| n == 1)
    }

    /// A snapshot of the key: `None` when free.
    pub(crate) async fn info(&self, space: KeySpace, key: &[u8]) -> Result<Option<RemoteInfo>> {
        let k = RemoteKey {
            space,
            key: key.to_vec(),
            mode: Mode::Exclusive,
        };
        let v = self
            .eval(&self.scripts.info, self.keys_of([&k]), vec![])
            .await?;
        let f = ints(&v, 6)?;
        let (exclusive, fence, x_left, shared, s_left, waiters) =
            (f[0], f[1], f[2], f[3], f[4], f[5]);
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
            lease_remaining: Duration::from_millis(left.max(0) as u64),
            waiters: waiters.max(0) as usize,
        }))
    }
}

/// What [`Remote::info`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteInfo {
    pub(crate) fence: u64,
    pub(crate) mode: Mode,
    pub(crate) holders: u32,
    pub(crate) lease_remaining: Duration,
    pub(crate) waiters: usize,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn bad_reply() -> Error {
    Error::Unavailable("unexpected reply from Redis (is it Redis 7 or later?)".into())
}

fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(n) => Ok(*n),
        _ => Err(bad_reply()),
    }
}

fn ints(v: &Value, n: usize) -> Result<Vec<i64>> {
    match v {
        Value::Array(items) if items.len() >= n => items.iter().map(int).collect(),
        _ => Err(bad_reply()),
    }
}

/// The acquire script's reply: the grants, or how long to wait before looking again (ms).
fn parse_acquire(v: &Value, keys: usize) -> Result<std::result::Result<Vec<Grant>, i64>> {
    let items = match v {
        Value::Array(items) if !items.is_empty() => items,
        _ => return Err(bad_reply()),
    };
    match int(&items[0])? {
        1 if items.len() == 1 + 2 * keys => Ok(Ok(items[1..]
            .chunks(2)
            .map(|c| {
                Ok(Grant {
                    fence: u64::try_from(int(&c[0])?).map_err(|_| bad_reply())?,
                    died: int(&c[1])? != 0,
                })
            })
            .collect::<Result<_>>()?)),
        0 if items.len() == 2 => Ok(Err(int(&items[1])?)),
        _ => Err(bad_reply()),
    }
}

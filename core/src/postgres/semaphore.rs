//! The PostgreSQL scope as a keyed semaphore (opened with `permits`): the client's half of the
//! functions and tables `sql.rs` describes under "The keyed semaphore".
//!
//! Every call runs on the main session, and none waits on the server: a request that does not
//! fit is queued there (a ticket) and its process waits here, woken by the `NOTIFY` of a
//! release, a cancel or a force-unlock of the key (heard by the main session), and looking
//! again every third of the lease for holders and waiters whose sessions ended, which notify
//! nobody. Each look is one call, which grants the request once it is at the queue's head and
//! fits. A request that ends without its grant (a timeout, a cancel, an error, or its future
//! dropped) gives up its place and whatever it took in the background, so that no ticket is
//! left at the head of a queue by a request nobody waits for.

use std::collections::hash_map::Entry;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::Notify;

use super::session::{self, SemStatements, Session};
use super::url::PostgresUrl;
use super::{HeldIn, PgServer, SWEEP_BATCH};
use crate::acquisition::Mode;
use crate::error::{Error, Result};
use crate::remote::{RemoteGrant, RemoteInfo, RemoteKey};
use crate::scope::KeySpace;

/// Ends, in the background, whatever a semaphore request's token holds or awaits in its
/// session, unless the request was granted (`armed` false).
struct Undo {
    session: Arc<Session>,
    token: String,
    armed: bool,
}

impl Drop for Undo {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Not on a runtime (never, for a request): the session's end frees it all.
            return;
        };
        let session = Arc::clone(&self.session);
        let token = std::mem::take(&mut self.token);
        runtime.spawn(async move {
            if let Some(st) = session.st.sem.as_ref() {
                let _ = session
                    .client
                    .query_one(&st.forget, &[&session.pid, &token])
                    .await;
            }
        });
    }
}

/// A request queued on the server: its interest in the key's freed units, and its count among
/// this process's queued requests (`stats`), while it lives.
struct Waiting {
    server: Arc<PgServer>,
    sem: i64,
    notify: Arc<Notify>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.server.queued.fetch_sub(1, Ordering::Relaxed);
        let mut freed = self.server.freed.lock();
        if let Entry::Occupied(mut e) = freed.entry(self.sem) {
            e.get_mut().1 -= 1;
            if e.get().1 == 0 {
                e.remove();
            }
        }
    }
}

/// What [`PgServer::hold_call`] asks of a hold.
#[derive(Debug, Clone, Copy)]
pub(super) enum HoldCall {
    Release,
    Check,
}

/// How an acquire call answered.
enum Answer {
    Granted {
        sem: i64,
        hold: i64,
        grant: RemoteGrant,
    },
    Busy,
    Queued {
        sem: i64,
        ticket: i64,
    },
}

fn statements(s: &Session) -> Result<&SemStatements> {
    s.st.sem
        .as_ref()
        .ok_or(Error::InvalidArgument("not a semaphore scope's session"))
}

fn space_of(space: KeySpace) -> i16 {
    i16::from(space as u8)
}

impl PgServer {
    /// Records this scope's permits for its prefix, or checks them against those recorded by
    /// the prefix's first open: `Incompatible` if they differ.
    pub(super) async fn claim_permits(&self) -> Result<()> {
        let s = self.main().await?;
        let permits = i32::try_from(self.permits)
            .map_err(|_| Error::InvalidArgument("permits: at most 2^31 - 1"))?;
        let row = self
            .bounded(s.client.query_one(
                "SELECT keylock_sem_permits($1, $2)",
                &[&self.url.options.prefix, &permits],
            ))
            .await?;
        let recorded: i32 = row.get(0);
        if recorded != permits {
            return Err(Error::Incompatible(
                format!(
                    "this prefix's semaphore has {recorded} permits per key, not {}",
                    self.permits
                )
                .into(),
            ));
        }
        Ok(())
    }

    /// The permits a semaphore's first open recorded for the URL's prefix
    /// ([`inspect_semaphore`](crate::inspect_semaphore)), read in session `s` (its functions
    /// installed) within the URL's `connect_timeout`; `Incompatible` where there are none.
    pub(super) async fn recorded_permits(s: &Session, url: &PostgresUrl) -> Result<u32> {
        let prefix = [&url.options.prefix as &(dyn tokio_postgres::types::ToSql + Sync)];
        let read = s.client.query_opt(
            "SELECT permits FROM keylock_permits WHERE prefix = $1",
            &prefix,
        );
        let row = session::bounded(url, url.options.connect_timeout, read).await?;
        crate::remote::recorded_permits(row.map(|r| Some(i64::from(r.get::<_, i32>(0)))))
    }

    /// Wakes this process's requests waiting for semaphore key `sem`.
    pub(super) fn wake(&self, sem: i64) {
        if let Some((notify, _)) = self.freed.lock().get(&sem) {
            notify.notify_waiters();
        }
    }

    fn waiting_on(self: &Arc<Self>, sem: i64) -> Waiting {
        self.queued.fetch_add(1, Ordering::Relaxed);
        let notify = {
            let mut freed = self.freed.lock();
            let e = freed
                .entry(sem)
                .or_insert_with(|| (Arc::new(Notify::new()), 0));
            e.1 += 1;
            Arc::clone(&e.0)
        };
        Waiting {
            server: Arc::clone(self),
            sem,
            notify,
        }
    }

    /// Takes every key's units or none for `token` (in key order, each one's units kept while
    /// the next are awaited), waiting until `deadline`; `try_only` neither waits nor queues.
    pub(super) async fn acquire_units(
        self: &Arc<Self>,
        keys: &[RemoteKey],
        token: &str,
        deadline: Option<Instant>,
        try_only: bool,
        cancelled: impl Future<Output = ()> + Send,
    ) -> Result<Vec<RemoteGrant>> {
        let s = self.main().await?;
        let mut undo = Undo {
            session: Arc::clone(&s),
            token: token.to_owned(),
            armed: false,
        };
        let mut cancelled = std::pin::pin!(cancelled);
        let mut got = Vec::with_capacity(keys.len());
        for k in keys {
            let taken = self
                .take_units(
                    &s,
                    k,
                    token,
                    deadline,
                    try_only,
                    cancelled.as_mut(),
                    &mut undo,
                )
                .await?;
            got.push(taken);
        }
        undo.armed = false;
        let mut holds = self.holds.lock();
        s.holding.fetch_add(keys.len(), Ordering::AcqRel);
        Ok(keys
            .iter()
            .zip(got)
            .map(|(k, (sem, hold, grant))| {
                holds.insert(
                    (token.to_owned(), k.space, k.key.clone()),
                    HeldIn {
                        number: hold,
                        mode: k.mode,
                        session: Arc::clone(&s),
                        sem: Some(sem),
                    },
                );
                grant
            })
            .collect())
    }

    /// One key's units: (the key's number, the hold's number, the grant).
    #[allow(clippy::too_many_arguments)]
    async fn take_units(
        self: &Arc<Self>,
        s: &Arc<Session>,
        k: &RemoteKey,
        token: &str,
        deadline: Option<Instant>,
        try_only: bool,
        mut cancelled: Pin<&mut impl Future<Output = ()>>,
        undo: &mut Undo,
    ) -> Result<(i64, i64, RemoteGrant)> {
        let mut ticket: Option<i64> = None;
        let mut waiting: Option<Waiting> = None;
        loop {
            // Listening before the call: a freeing after it wakes this request.
            let notify = waiting.as_ref().map(|w| Arc::clone(&w.notify));
            let mut freed = notify.as_ref().map(|n| Box::pin(n.notified()));
            if let Some(f) = freed.as_mut() {
                f.as_mut().enable();
            }
            let before = undo.armed;
            // An answer that never comes may have granted or queued.
            undo.armed = true;
            match self.call_take(s, k, token, ticket, !try_only).await? {
                Answer::Granted { sem, hold, grant } => return Ok((sem, hold, grant)),
                Answer::Busy => {
                    undo.armed = before;
                    return Err(Error::WouldBlock);
                }
                Answer::Queued { sem, ticket: t } => {
                    ticket = Some(t);
                    if waiting.is_none() {
                        // Units freed between that call and now woke nobody: look once more.
                        waiting = Some(self.waiting_on(sem));
                        continue;
                    }
                }
            }
            let until = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            let heard = async {
                match freed.as_mut() {
                    Some(f) => f.as_mut().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = heard => {}
                // Its session ended: the next call says so.
                () = s.ended() => {}
                () = tokio::time::sleep(self.url.options.lease / 3) => {}
                () = until => return Err(Error::TimedOut),
                () = cancelled.as_mut() => return Err(Error::TimedOut),
            }
        }
    }

    /// One `keylock_sem_acquire` call.
    async fn call_take(
        &self,
        s: &Session,
        k: &RemoteKey,
        token: &str,
        ticket: Option<i64>,
        wait: bool,
    ) -> Result<Answer> {
        let st = statements(s)?;
        let units = i32::try_from(k.units)
            .map_err(|_| Error::InvalidArgument("a weight of at most 2^31 - 1"))?;
        let permits = i32::try_from(self.permits)
            .map_err(|_| Error::InvalidArgument("permits: at most 2^31 - 1"))?;
        let row = self
            .bounded(s.client.query_one(
                &st.acquire,
                &[
                    &s.pid,
                    &self.url.options.prefix,
                    &space_of(k.space),
                    &k.key,
                    &units,
                    &permits,
                    &token,
                    &ticket,
                    &wait,
                ],
            ))
            .await?;
        let state: &str = row.get(0);
        let sem: i64 = row.get(1);
        Ok(match state {
            "granted" => {
                let fence: i64 = row.get(4);
                Answer::Granted {
                    sem,
                    hold: row.get(3),
                    grant: RemoteGrant {
                        fence: u64::try_from(fence).unwrap_or(0),
                        died: row.get(5),
                    },
                }
            }
            "queued" => Answer::Queued {
                sem,
                ticket: row.get(2),
            },
            _ => Answer::Busy,
        })
    }

    /// A call about `token`'s semaphore hold `hold` of key `sem`, in the session that holds
    /// it: its release (whether it was still the token's) or its check (whether it still is).
    pub(super) async fn hold_call(
        &self,
        call: HoldCall,
        s: &Session,
        token: &str,
        sem: i64,
        hold: i64,
    ) -> Result<bool> {
        let st = statements(s)?;
        let statement = match call {
            HoldCall::Release => &st.release,
            HoldCall::Check => &st.check,
        };
        let row = self
            .bounded(
                s.client
                    .query_one(statement, &[&s.pid, &sem, &hold, &token]),
            )
            .await?;
        Ok(row.get(0))
    }

    /// One round of the semaphore sweep over the prefix (`keylock_sem_sweep`, in batches until
    /// one drops fewer than a batch); whether it ended without an error.
    pub(super) async fn sweep_units(&self) -> bool {
        loop {
            let Ok(s) = self.main().await else {
                return false;
            };
            let swept = self
                .bounded(s.client.query_one(
                    "SELECT keylock_sem_sweep($1, $2)",
                    &[&self.url.options.prefix, &SWEEP_BATCH],
                ))
                .await;
            match swept {
                Ok(row) if row.get::<_, i32>(0) < SWEEP_BATCH => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }

    /// Frees every unit of a semaphore key; whether any was held.
    pub(super) async fn force_units(&self, space: KeySpace, key: &[u8]) -> Result<bool> {
        let s = self.main().await?;
        let row = self
            .bounded(s.client.query_one(
                "SELECT keylock_sem_force($1, $2, $3)",
                &[&self.url.options.prefix, &space_of(space), &key],
            ))
            .await?;
        Ok(row.get(0))
    }

    /// A semaphore key: its holders (as shared holders), units held, waiters and highest fence.
    pub(super) async fn info_units(
        &self,
        space: KeySpace,
        key: &[u8],
    ) -> Result<Option<RemoteInfo>> {
        let s = self.main().await?;
        let row = self
            .bounded(s.client.query_opt(
                "SELECT units, holders, waiters, fence FROM keylock_sem_info($1, $2, $3)",
                &[&self.url.options.prefix, &space_of(space), &key],
            ))
            .await?;
        Ok(row.map(|r| {
            let units: i64 = r.get(0);
            let holders: i32 = r.get(1);
            let waiters: i32 = r.get(2);
            let fence: i64 = r.get(3);
            RemoteInfo {
                fence: u64::try_from(fence).unwrap_or(0),
                mode: Mode::Shared,
                holders: u32::try_from(holders).unwrap_or(0),
                lease_remaining: None,
                waiters: usize::try_from(waiters).unwrap_or(0),
                units: u32::try_from(units).unwrap_or(u32::MAX),
            }
        }))
    }
}

//! One server session: a connection to PostgreSQL, the backend it runs in, and the scope's
//! functions prepared on it. Session-level advisory locks belong to the session that took them,
//! so a hold is released in the session it was granted in, and a session's end frees its holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::{try_join_all, try_join4};
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc::UnboundedSender;
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, Client, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::sql;
use super::url::PostgresUrl;
use crate::error::{Error, Result};

/// The lock functions' statements, in [`Statements`]' order.
const LOCK_STATEMENTS: [&str; 6] = [
    "SELECT ids, fences, dieds FROM keylock_acquire($1, $2, $3, $4, $5, $6, $7)",
    "SELECT keylock_release($1, $2, $3, $4)",
    "SELECT keylock_forget($1, $2)",
    "SELECT keylock_check($1, $2, $3, $4)",
    "SELECT keylock_force($1, $2, $3)",
    "SELECT exclusive, fence, holders, waiters FROM keylock_info($1, $2, $3)",
];

/// The semaphore functions' statements, in [`SemStatements`]' order.
const SEM_STATEMENTS: [&str; 4] = [
    "SELECT state, id, tk, hold, fence, died \
     FROM keylock_sem_acquire($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    "SELECT keylock_sem_release($1, $2, $3, $4)",
    "SELECT keylock_sem_check($1, $2, $3, $4)",
    "SELECT keylock_sem_forget($1, $2)",
];

/// The statements of the scope's functions, prepared once per session.
pub(crate) struct Statements {
    pub(crate) acquire: Statement,
    pub(crate) release: Statement,
    pub(crate) forget: Statement,
    pub(crate) check: Statement,
    pub(crate) force: Statement,
    pub(crate) info: Statement,
    /// A semaphore scope's: `None` in a lock scope's sessions.
    pub(crate) sem: Option<SemStatements>,
}

/// The statements of the keyed semaphore's functions.
pub(crate) struct SemStatements {
    pub(crate) acquire: Statement,
    pub(crate) release: Statement,
    pub(crate) check: Statement,
    pub(crate) forget: Statement,
}

/// What the main session hears on the channels it listens to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Note {
    /// A force-unlock: the old lock number, or a semaphore hold's number.
    Forced(i64),
    /// A semaphore key with waiters had units freed (its number).
    Freed(i64),
}

pub(crate) struct Session {
    pub(crate) client: Client,
    /// The backend's pid: every call checks it still runs there.
    pub(crate) pid: i32,
    pub(crate) st: Statements,
    /// The connection ended (closed, failed, or the server went away): its holds are gone.
    closed: Arc<Closed>,
    /// Holds granted in this session and not released yet.
    pub(crate) holding: AtomicUsize,
    /// A waiting session's place among the scope's extra connections (none for the main one).
    _slot: Option<OwnedSemaphorePermit>,
}

impl Session {
    /// Connects, applies the session settings, installs the functions if `install` (the main
    /// session of an open) and claims the session. Bounded by the URL's `connect_timeout`.
    /// With `notes`, the session listens for force-unlocks (and, in a semaphore scope
    /// (`sem`), for freed units) and sends what it hears there.
    pub(crate) async fn open(
        url: &PostgresUrl,
        tls: &MakeRustlsConnect,
        install: bool,
        slot: Option<OwnedSemaphorePermit>,
        sem: bool,
        notes: Option<UnboundedSender<Note>>,
    ) -> Result<Arc<Session>> {
        let connect = Self::connect(url, tls, install, slot, sem, notes);
        match tokio::time::timeout(url.options.connect_timeout, connect).await {
            Ok(r) => r,
            Err(_) => Err(Error::Unavailable(
                format!(
                    "PostgreSQL at {}: no connection within connect_timeout ({} ms)",
                    url.name.redacted(),
                    url.options.connect_timeout.as_millis()
                )
                .into(),
            )),
        }
    }

    async fn connect(
        url: &PostgresUrl,
        tls: &MakeRustlsConnect,
        install: bool,
        slot: Option<OwnedSemaphorePermit>,
        sem: bool,
        notes: Option<UnboundedSender<Note>>,
    ) -> Result<Arc<Session>> {
        let (client, mut conn) = url
            .config()
            .connect(tls.clone())
            .await
            .map_err(|e| error(url, &e))?;
        let closed = Arc::new(Closed::default());
        let ended = Arc::clone(&closed);
        let listen = notes.is_some();
        // The connection's task: it runs the protocol, and hands on the notifications of
        // force-unlocks and freed units (notices are dropped).
        tokio::spawn(async move {
            while let Some(Ok(message)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                if let (AsyncMessage::Notification(n), Some(notes)) = (message, &notes)
                    && let Ok(id) = n.payload().parse::<i64>()
                {
                    let _ = notes.send(if n.channel() == sql::SEM_FREED {
                        Note::Freed(id)
                    } else {
                        Note::Forced(id)
                    });
                }
            }
            ended.flag.store(true, Ordering::Release);
            ended.notify.notify_waiters();
        });
        let fail = |e: tokio_postgres::Error| error(url, &e);
        client
            .batch_execute(&url.session_settings())
            .await
            .map_err(fail)?;
        if install {
            install_functions(&client).await.map_err(fail)?;
        }
        // Everything else goes in one round trip: tokio-postgres pipelines the requests of
        // futures polled together, and the server answers them in order.
        let channels = match (listen, sem) {
            (false, _) => None,
            (true, false) => Some(format!("LISTEN {}", sql::FORCES)),
            (true, true) => Some(format!("LISTEN {}; LISTEN {}", sql::FORCES, sql::SEM_FREED)),
        };
        let listening = async {
            match &channels {
                Some(c) => client.batch_execute(c).await,
                None => Ok(()),
            }
        };
        let sem_sql: &[&str] = if sem { &SEM_STATEMENTS } else { &[] };
        let (pid, (), lock, sem) = try_join4(
            client.query_one("SELECT keylock_session()", &[]),
            listening,
            try_join_all(LOCK_STATEMENTS.map(|q| client.prepare(q))),
            try_join_all(sem_sql.iter().map(|q| client.prepare(q))),
        )
        .await
        .map_err(fail)?;
        let pid: i32 = pid.get(0);
        // `try_join_all` gives as many as it was given: six, and four or none.
        let sem = match <[Statement; 4]>::try_from(sem) {
            Ok([acquire, release, check, forget]) => Some(SemStatements {
                acquire,
                release,
                check,
                forget,
            }),
            Err(_) => None,
        };
        let Ok([acquire, release, forget, check, force, info]) = <[Statement; 6]>::try_from(lock)
        else {
            unreachable!("six statements prepared, six answered")
        };
        let st = Statements {
            acquire,
            release,
            forget,
            check,
            force,
            info,
            sem,
        };
        Ok(Arc::new(Session {
            client,
            pid,
            st,
            closed,
            holding: AtomicUsize::new(0),
            _slot: slot,
        }))
    }

    /// Whether the connection has ended (its holds are gone with its session).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.flag.load(Ordering::Acquire) || self.client.is_closed()
    }

    /// Resolves once the connection's task has seen it end: a request waiting in this session
    /// (whose place in a queue went with it) hears it at once.
    pub(crate) async fn ended(&self) {
        loop {
            let heard = self.closed.notify.notified();
            let mut heard = std::pin::pin!(heard);
            heard.as_mut().enable();
            if self.closed.flag.load(Ordering::Acquire) {
                return;
            }
            heard.await;
        }
    }
}

/// A connection's end, as its task saw it.
#[derive(Default)]
struct Closed {
    flag: AtomicBool,
    notify: tokio::sync::Notify,
}

/// Installs the tables and functions, once per version, serialized among processes. A
/// database that has this version already needs no DDL, so a role without `CREATE` can use
/// what another role installed. Installs only move forward: a database with a newer build's
/// version keeps it (a newer version keeps every call an older one makes), so processes of two
/// builds running at once, as in a rolling upgrade, never swap the functions back and forth
/// under each other's calls.
async fn install_functions(client: &Client) -> std::result::Result<(), tokio_postgres::Error> {
    let current = |v: Option<i32>| v.is_some_and(|v| v >= sql::VERSION);
    let installed = client
        .query_one("SELECT max(version) FROM keylock_schema", &[])
        .await
        .ok()
        .and_then(|row| row.get::<_, Option<i32>>(0));
    if current(installed) {
        return Ok(());
    }
    client.batch_execute(sql::INSTALL).await?;
    let version: Option<i32> = client
        .query_one("SELECT max(version) FROM keylock_schema", &[])
        .await?
        .get(0);
    if !current(version) {
        client.batch_execute(sql::SCHEMA).await?;
        client.execute("DELETE FROM keylock_schema", &[]).await?;
        client
            .execute("INSERT INTO keylock_schema VALUES ($1)", &[&sql::VERSION])
            .await?;
    }
    client.batch_execute("COMMIT").await
}

/// The scope's error for a client error: the server's own message (never the password), and
/// refused credentials or privileges as `PermissionDenied`.
pub(crate) fn error(url: &PostgresUrl, e: &tokio_postgres::Error) -> Error {
    let text = match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => {
            // The client's own errors name their cause apart (a TLS handshake's: which check
            // of the certificate failed).
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                text = format!("{text}: {c}");
                cause = c.source();
            }
            text
        }
    };
    let text = format!(
        "PostgreSQL at {}: {}",
        url.name.redacted(),
        url.name.scrub(&text)
    );
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                || *c == SqlState::INSUFFICIENT_PRIVILEGE =>
        {
            Error::PermissionDenied(text.into())
        }
        Some(c) if c.code() == "55KL1" || c.code() == "55KL2" => Error::Incompatible(text.into()),
        // The session lost the statements this connection prepared in it: a pooler moved the
        // connection to another server session.
        Some(c) if *c == SqlState::INVALID_SQL_STATEMENT_NAME => Error::Incompatible(
            format!(
                "{text} (the server session changed under this connection: a pooler in \
                 transaction or statement mode? keylock needs a session of its own)"
            )
            .into(),
        ),
        _ => Error::Unavailable(text.into()),
    }
}

/// Runs `fut` for at most `limit`: its result, with its error as [`error`] gives it, or
/// [`timed_out`].
pub(crate) async fn bounded<T>(
    url: &PostgresUrl,
    limit: Duration,
    fut: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
) -> Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(|e| error(url, &e)),
        Err(_) => Err(timed_out(url, limit)),
    }
}

/// The scope's error for a call that `timeout` cut off.
pub(crate) fn timed_out(url: &PostgresUrl, after: Duration) -> Error {
    Error::Unavailable(
        format!(
            "PostgreSQL at {}: timed out waiting for the server (after {} ms)",
            url.name.redacted(),
            after.as_millis()
        )
        .into(),
    )
}

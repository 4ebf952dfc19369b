//! Connections: one multiplexed connection for commands, and a small pool of dedicated
//! connections for waiters blocked in `BLPOP` (a blocked command holds its connection, so
//! waiters must not share the command connection).
//!
//! Every command has a cutoff, an instant by which its whole reply must have arrived (not a
//! limit on each read), and every error names the redacted URL, never the password. A
//! connection that failed, was abandoned mid-reply, or gave a reply that does not answer its
//! request is discarded, never reused: a connection one reply behind would hand each command
//! the previous command's reply.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo,
};

use super::url::RedisUrl;
use crate::error::{Error, Result};

/// Idle blocking connections kept for reuse: the scope's runtime serves every async waiter, a
/// blocking caller's lane one waiter at a time.
const IDLE_BLOCKERS: usize = 16;
const IDLE_BLOCKERS_OF_A_LANE: usize = 1;

/// The command connection, and which one it is (so that a caller that saw it fail discards
/// that one, never a newer one another caller made meanwhile).
#[derive(Clone)]
pub(crate) struct CmdConn {
    pub(crate) generation: u64,
    pub(crate) conn: MultiplexedConnection,
}

impl CmdConn {
    /// A waiter's blocking connection, used for one command behind its block: generation 0,
    /// which no command connection has (they count from 1), so a failure there discards none.
    pub(crate) fn of_blocker(conn: MultiplexedConnection) -> Self {
        CmdConn {
            generation: 0,
            conn,
        }
    }
}

pub(crate) struct Conns {
    pub(crate) url: RedisUrl,
    client: Client,
    /// The command connection; `None` after it was discarded (the next command makes one).
    cmd: Mutex<Option<CmdConn>>,
    /// Held while a command connection is being made, so that callers make one between them.
    connecting: tokio::sync::Mutex<()>,
    generations: AtomicU64,
    idle: Mutex<Vec<MultiplexedConnection>>,
    idle_cap: usize,
}

impl Conns {
    /// Connects by `cutoff` (the first connection is made now, so a bad address or password
    /// fails here).
    pub(crate) async fn connect(url: RedisUrl, cutoff: Instant) -> Result<Arc<Conns>> {
        let client = client(&url)?;
        let conns = Arc::new(Conns {
            url,
            client,
            cmd: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            generations: AtomicU64::new(1),
            idle: Mutex::new(Vec::new()),
            idle_cap: IDLE_BLOCKERS,
        });
        conns.cmd(cutoff).await?;
        Ok(conns)
    }

    /// Connections of their own to the same server, none made yet: each is made on the runtime
    /// of the command that first needs it (a blocking caller's lane), and belongs to it.
    pub(crate) fn sibling(&self) -> Arc<Conns> {
        Arc::new(Conns {
            url: self.url.clone(),
            client: self.client.clone(),
            cmd: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            generations: AtomicU64::new(1),
            idle: Mutex::new(Vec::new()),
            idle_cap: IDLE_BLOCKERS_OF_A_LANE,
        })
    }

    /// The command connection (cheap to clone; commands on clones are pipelined together),
    /// made now if there is none, by `cutoff` at the latest.
    pub(crate) async fn cmd(&self, cutoff: Instant) -> Result<CmdConn> {
        if let Some(c) = self.cmd.lock().clone() {
            return Ok(c);
        }
        let limit = cutoff.min(Instant::now() + self.url.options.connect_timeout);
        self.by(limit, async {
            let _one = self.connecting.lock().await;
            if let Some(c) = self.cmd.lock().clone() {
                return Ok(c);
            }
            let conn = self
                .client
                .get_multiplexed_async_connection_with_config(&self.config())
                .await?;
            let c = CmdConn {
                generation: self.generations.fetch_add(1, Ordering::Relaxed),
                conn,
            };
            *self.cmd.lock() = Some(c.clone());
            Ok(c)
        })
        .await
    }

    /// Stops handing out command connection `generation` (if it is still the current one).
    pub(crate) fn discard(&self, generation: u64) {
        let mut cmd = self.cmd.lock();
        if cmd.as_ref().is_some_and(|c| c.generation == generation) {
            *cmd = None;
        }
    }

    /// A connection of its own for one blocked waiter.
    pub(crate) async fn blocker(&self, cutoff: Instant) -> Result<MultiplexedConnection> {
        if let Some(c) = self.idle.lock().pop() {
            return Ok(c);
        }
        let limit = cutoff.min(Instant::now() + self.url.options.connect_timeout);
        self.by(limit, async {
            self.client
                .get_multiplexed_async_connection_with_config(&self.config())
                .await
        })
        .await
    }

    /// Gives a blocking connection back after a reply that answered its request.
    pub(crate) fn idle(&self, conn: MultiplexedConnection) {
        let mut idle = self.idle.lock();
        if idle.len() < self.idle_cap {
            idle.push(conn);
        }
    }

    /// Connections bound only by the cutoffs of the commands on them (the client's own
    /// response timeout would be one more limit, per command, that no caller chose).
    fn config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.url.options.connect_timeout))
            .set_response_timeout(None)
    }

    /// Runs `fut` until `cutoff`: its result, or `Unavailable` if it did not finish by then.
    pub(crate) async fn by<T>(
        &self,
        cutoff: Instant,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        match tokio::time::timeout_at(cutoff.into(), fut).await {
            Ok(Ok(v)) => Ok(v),
            // The client's own connection timeout: the same words as ours.
            Ok(Err(e)) if e.is_timeout() => Err(self.timed_out(started.elapsed())),
            Ok(Err(e)) => Err(self.error(&e)),
            Err(_) => Err(self.timed_out(started.elapsed())),
        }
    }

    /// Runs one plain command on the command connection, its reply due by `cutoff`; a
    /// connection that fails or is cut off is discarded.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        cutoff: Instant,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        let c = self.cmd(cutoff).await?;
        let mut con = c.conn.clone();
        let reply = self.by(cutoff, cmd.query_async::<T>(&mut con)).await;
        if reply.is_err() {
            self.discard(c.generation);
        }
        reply
    }

    /// The error for a command that got no (whole) reply within `waited`.
    pub(crate) fn timed_out(&self, waited: Duration) -> Error {
        Error::Unavailable(
            format!(
                "{}: timed out waiting for Redis (after {} ms)",
                self.url.name.redacted(),
                waited.as_millis()
            )
            .into(),
        )
    }

    /// The error for a reply that is not the answer to the request it came for (a stale reply
    /// on a connection one behind, or not the shape the command returns).
    pub(crate) fn unexpected_reply(&self) -> Error {
        Error::Unavailable(
            format!(
                "{}: a reply from Redis did not answer its request (the connection was dropped)",
                self.url.name.redacted()
            )
            .into(),
        )
    }

    /// The error for a failed command or connection.
    pub(crate) fn error(&self, e: &redis::RedisError) -> Error {
        error(&self.url, e)
    }
}

/// The client for `url`: address, TLS, database and credentials.
fn client(url: &RedisUrl) -> Result<Client> {
    let addr = if url.tls {
        // rustls needs a process-wide crypto provider; install ring's unless one is set.
        let _ = rustls::crypto::ring::default_provider().install_default();
        ConnectionAddr::TcpTls {
            host: url.host.clone(),
            port: url.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(url.host.clone(), url.port)
    };
    let mut redis_info = RedisConnectionInfo::default()
        .set_db(url.db)
        .set_lib_name("keylock", env!("CARGO_PKG_VERSION"));
    if let Some(user) = &url.username {
        redis_info = redis_info.set_username(user);
    }
    if let Some(password) = url.name.password() {
        redis_info = redis_info.set_password(password);
    }
    let info = addr
        .into_connection_info()
        .map_err(|e| error(url, &e))?
        .set_redis_settings(redis_info);
    Client::open(info).map_err(|e| error(url, &e))
}

/// Maps a client error to keylock's: refused credentials are `PermissionDenied`, everything
/// else (refused or lost connections, server errors) `Unavailable`. The text names the
/// redacted URL and is scrubbed of the password in case the client quoted it.
pub(crate) fn error(url: &RedisUrl, e: &redis::RedisError) -> Error {
    let text = url.name.scrub(&e.to_string());
    let auth = matches!(e.kind(), redis::ErrorKind::AuthenticationFailed)
        || text.contains("WRONGPASS")
        || text.contains("NOAUTH")
        || text.contains("invalid password");
    let what = format!("{}: {text}", url.name.redacted());
    if auth {
        Error::PermissionDenied(format!("authentication failed: {what}").into())
    } else {
        Error::Unavailable(what.into())
    }
}

//! Connections: one multiplexed, self-reconnecting connection for commands, and a small pool of
//! dedicated connections for waiters blocked in `BLPOP` (a blocked command holds its connection,
//! so waiters must not share the command connection). Every step is bounded by the URL's
//! timeouts, and every error names the redacted URL, never the password.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo,
};

use super::url::RedisUrl;
use crate::error::{Error, Result};

/// Idle blocking connections kept for reuse.
const IDLE_BLOCKERS: usize = 16;

pub(crate) struct Conns {
    pub(crate) url: RedisUrl,
    client: Client,
    pub(crate) manager: ConnectionManager,
    idle: Mutex<Vec<MultiplexedConnection>>,
    /// Idle plain (blocking) connections, for calls made on a caller's own thread.
    plain: Mutex<Vec<redis::Connection>>,
}

impl Conns {
    /// Connects (the first connection is made now, so a bad address or password fails here).
    pub(crate) async fn connect(url: RedisUrl) -> Result<Arc<Conns>> {
        let client = client(&url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(url.connect_timeout))
            .set_response_timeout(Some(url.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let manager = bounded(&url, url.connect_timeout + url.timeout, async {
            ConnectionManager::new_with_config(client.clone(), config).await
        })
        .await?;
        Ok(Arc::new(Conns {
            url,
            client,
            manager,
            idle: Mutex::new(Vec::new()),
            plain: Mutex::new(Vec::new()),
        }))
    }

    /// The command connection (cheap to clone; commands on clones are pipelined together).
    pub(crate) fn cmd(&self) -> ConnectionManager {
        self.manager.clone()
    }

    /// A connection of its own for one blocked waiter.
    pub(crate) async fn blocker(&self) -> Result<MultiplexedConnection> {
        if let Some(c) = self.idle.lock().pop() {
            return Ok(c);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.url.connect_timeout))
            .set_response_timeout(None);
        bounded(&self.url, self.url.connect_timeout, async {
            self.client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        })
        .await
    }

    /// Gives a blocking connection back after a clean reply.
    pub(crate) fn idle(&self, conn: MultiplexedConnection) {
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_BLOCKERS {
            idle.push(conn);
        }
    }

    /// Runs `f` on a plain connection on this thread (no hop to the scope's runtime: what a
    /// blocking acquire's first attempt and a release use). The connection goes back to the
    /// pool only after a clean reply; one that failed or timed out is dropped. A pooled
    /// connection found torn (the server restarted since it was last used) is replaced once.
    pub(crate) fn on_this_thread<T>(
        &self,
        mut f: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut pooled = self.plain.lock().pop();
        loop {
            let was_pooled = pooled.is_some();
            let mut con = match pooled.take() {
                Some(c) => c,
                None => self.plain_connection()?,
            };
            match f(&mut con) {
                Ok(v) => {
                    let mut plain = self.plain.lock();
                    if plain.len() < IDLE_BLOCKERS {
                        plain.push(con);
                    }
                    return Ok(v);
                }
                Err(e) if was_pooled && (e.is_io_error() || e.is_connection_dropped()) => {
                    // Every idle one is as old: drop them all and start afresh.
                    self.plain.lock().clear();
                }
                Err(e) => return Err(self.error(&e)),
            }
        }
    }

    fn plain_connection(&self) -> Result<redis::Connection> {
        let c = self
            .client
            .get_connection_with_timeout(self.url.connect_timeout)
            .map_err(|e| self.error(&e))?;
        c.set_read_timeout(Some(self.url.timeout))
            .and_then(|()| c.set_write_timeout(Some(self.url.timeout)))
            .map_err(|e| self.error(&e))?;
        Ok(c)
    }

    /// Runs one command future within the URL's command timeout.
    pub(crate) async fn run<T>(
        &self,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        bounded(&self.url, self.url.timeout, fut).await
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
    if let Some(password) = url.password() {
        redis_info = redis_info.set_password(password);
    }
    let info = addr
        .into_connection_info()
        .map_err(|e| error(url, &e))?
        .set_redis_settings(redis_info);
    Client::open(info).map_err(|e| error(url, &e))
}

async fn bounded<T>(
    url: &RedisUrl,
    limit: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(error(url, &e)),
        Err(_) => Err(Error::Unavailable(
            format!("{}: no answer within {limit:?}", url.redacted()).into(),
        )),
    }
}

/// Maps a client error to keylock's: refused credentials are `PermissionDenied`, everything
/// else (refused or lost connections, timeouts, server errors) `Unavailable`. The text names
/// the redacted URL and is scrubbed of the password in case the client quoted it.
pub(crate) fn error(url: &RedisUrl, e: &redis::RedisError) -> Error {
    let text = url.scrub(&e.to_string());
    let auth = matches!(e.kind(), redis::ErrorKind::AuthenticationFailed)
        || text.contains("WRONGPASS")
        || text.contains("NOAUTH")
        || text.contains("invalid password");
    let what = format!("{}: {text}", url.redacted());
    if auth {
        Error::PermissionDenied(format!("authentication failed: {what}").into())
    } else {
        Error::Unavailable(what.into())
    }
}

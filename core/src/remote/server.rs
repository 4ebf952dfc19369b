//! [`Server`]: what a scope whose locks live on a server (Redis, PostgreSQL) implements, the
//! calls that the one front of those scopes ([`RemoteLock`](super::RemoteLock)) makes. Each
//! call runs on a tokio runtime (the scope's, or a blocking caller's lane, on a view of the
//! server from [`Server::lane`]) and speaks for one remote acquisition, named by a token that
//! no other acquisition, in any process, has.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquisition::Mode;
use crate::error::{Error, Result};
use crate::scope::KeySpace;

/// One key of a remote request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteKey {
    pub(crate) space: KeySpace,
    pub(crate) key: Vec<u8>,
    pub(crate) mode: Mode,
    /// A semaphore's units (0 for a lock's key).
    pub(crate) units: u32,
}

/// What an acquire got for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemoteGrant {
    pub(crate) fence: u64,
    /// The previous exclusive hold ended without a release (its holder died or stalled).
    pub(crate) died: bool,
}

/// What [`Server::info`] found about a held key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteInfo {
    pub(crate) fence: u64,
    pub(crate) mode: Mode,
    /// Remote holds: 1 for an exclusive hold, one per process for shared holders.
    pub(crate) holders: u32,
    /// Until the hold's lease ends on the server; `None` where a hold has no lease there (it
    /// lasts as long as its holder's session).
    pub(crate) lease_remaining: Option<Duration>,
    /// Requests queued on the server, from every process.
    pub(crate) waiters: usize,
    /// A semaphore's units held.
    pub(crate) units: u32,
}

/// The calls a server scope makes. See the [module docs](self).
///
/// Every call is safe to repeat: a release of a token that holds nothing says `false`, and an
/// acquire by the same token gives the same grant.
pub(crate) trait Server: Send + Sync + 'static {
    /// What the scope is called in messages ("Redis", "PostgreSQL").
    const KIND: &'static str;

    /// The URL, with its password redacted, for `Debug` and errors.
    fn url(&self) -> &dyn fmt::Debug;

    /// How long a remote acquisition lasts unconfirmed: its holder's process confirms it every
    /// third of this ([`renew`](Self::renew)), and gives it up as lost once it has not been
    /// confirmed for this long.
    fn lease(&self) -> Duration;

    /// A semaphore scope's units per key, as it was opened with them or found them recorded
    /// (0 for a lock scope).
    fn permits(&self) -> u32;

    /// A token no other acquisition, in any process, has.
    fn fresh_id(&self) -> String;

    /// This process's acquires queued on the server now, for [`stats`](crate::KeyedLock::stats).
    fn queued_here(&self) -> usize;

    /// A view of this scope for a blocking caller's lane: the same scope, with connections of
    /// its own, each made on (and belonging to) the runtime of the first call that needs it.
    /// `None` (the default) for a scope without such views: its blocking calls go through its
    /// runtime.
    fn lane(&self) -> Option<Arc<Self>> {
        None
    }

    /// Whether work this view started in the background (undoing an attempt whose outcome is
    /// unknown) is still running.
    fn busy(&self) -> bool {
        false
    }

    /// Resolves once this view is no longer [`busy`](Self::busy).
    fn settle(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// The tokens of holds the server says were lost behind their holders' backs (a
    /// force-unlock it announces), for the front to fire their lost signals at once; taken
    /// once, at start. `None` (the default) for a server whose holders learn it at renewal.
    fn take_lost(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<String>> {
        None
    }

    /// Takes every key of `keys` or none for `token`, waiting (pushed, never polled) until
    /// `deadline`; `try_only` neither waits nor queues. Stops waiting (`TimedOut`) once
    /// `cancelled` resolves. An attempt whose outcome is unknown is undone in the background:
    /// a key is never left held by a token nobody has.
    fn acquire(
        self: &Arc<Self>,
        keys: &[RemoteKey],
        token: &str,
        lease: Duration,
        deadline: Option<Instant>,
        try_only: bool,
        cancelled: impl Future<Output = ()> + Send,
    ) -> impl Future<Output = Result<Vec<RemoteGrant>>> + Send;

    /// Releases `token`'s hold of `key`; `false` if it was not the token's any more.
    fn release(&self, key: &RemoteKey, token: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Confirms `token`'s hold of `key` for `lease` more; `false` if it is lost.
    fn renew(
        &self,
        key: &RemoteKey,
        token: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Whether `token` still holds `key`.
    fn check(&self, key: &RemoteKey, token: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Frees `key` whoever holds it, so that the next holder's fence is higher; whether it was
    /// held.
    fn force(&self, space: KeySpace, key: &[u8]) -> impl Future<Output = Result<bool>> + Send;

    /// A snapshot of `key`; `None` when free.
    fn info(
        &self,
        space: KeySpace,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<RemoteInfo>>> + Send;

    /// The keys of this scope's prefix that are held or awaited on the server now, in any
    /// order (each once): for [`KeyedLock::list`](crate::KeyedLock::list), which then asks
    /// `info` of each. It costs the server a pass over the prefix's keys.
    fn keys(&self) -> impl Future<Output = Result<Vec<(KeySpace, Vec<u8>)>>> + Send;
}

/// The permits a semaphore's first open recorded under a prefix, as a server read them
/// ([`inspect_semaphore`](crate::inspect_semaphore)): `None` where nothing is recorded,
/// `Some(None)` where the record is not an integer. Anything but a number of permits is
/// `Incompatible`.
pub(crate) fn recorded_permits(found: Option<Option<i64>>) -> Result<u32> {
    let recorded = found.ok_or_else(|| {
        Error::Incompatible("no keyed semaphore was opened under this prefix".into())
    })?;
    recorded
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| (1..=crate::entry::Policy::MAX_PERMITS).contains(&p))
        .ok_or_else(|| {
            Error::Incompatible(
                "the permits recorded under this prefix are not a number of permits".into(),
            )
        })
}

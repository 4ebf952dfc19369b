//! The Redis scope: per-key locks shared by every process that opens the same Redis URL and
//! prefix, with the same operations as in-process locks (cargo feature `redis`).
//!
//! ```no_run
//! use keylock_core::{open, LockKey, LockOptions};
//!
//! let locks = open("redis://127.0.0.1:6379/0?prefix=app").unwrap();
//! let acq = locks.acquire(LockKey::new(b"invoice:17"), &LockOptions::new()).unwrap();
//! // Pass acq.fence() to whatever the lock protects; it rejects anything older.
//! let lost = locks.lost_signal(&acq).unwrap(); // fires if the lock is lost behind our back
//! assert!(!lost.is_lost());
//! locks.release(acq).unwrap();
//! ```
//!
//! The URL's form and options are in [`url`](self#url) (below); [`open`](crate::open) gives the
//! lock object as a [`KeyedLock`]. Its local layer (queueing, coalescing, records, renewal) is
//! the one front of every server scope; this module is the server's half.
//!
//! # How a lock lives in Redis
//!
//! Each operation is one Lua script, atomic on the server and one round trip
//! ([`scripts`](self#scripts)): an uncontended acquire and a release are one `EVALSHA` each.
//!
//! - **Acquire** checks and sets the lock with a random token (unique per acquisition, in any
//!   process) and a lease, and mints the fence in the same step: every exclusive acquisition
//!   gets `HINCRBY fence 1` of the key's counter, so its fence is strictly greater than every
//!   earlier one of that key; shared holders read the current fence. A multi-key acquire is
//!   the same script over all its keys: every key or none.
//! - **Release** is compare-and-delete on the token: a stale release (after a force-unlock or a
//!   lease's end) finds another token, or none, and changes nothing (`NotOwner`,
//!   `LeaseExpired`).
//! - **Force-unlock** and the **end of an exclusive lease** advance the fence, so the next
//!   holder's (and the next shared holders') fence is above the lost holder's. A lease's end
//!   is seen by the next script that looks at the key (the server's clock decides).
//! - **Fences never go backwards** for a key while Redis keeps its data. A restart that loses
//!   the data (no persistence, or the last second of writes with `appendfsync everysec`)
//!   restarts the counters at 0: fences then repeat. With `appendonly yes` and
//!   `appendfsync always` they keep rising across restarts (tested). A key's counter lives in
//!   its hash, which is dropped with the rest of the key's names once the key is free (nothing
//!   held, nobody queued, no died mark for the next holder to learn): an idle key takes no
//!   memory. Dropping it raises the scope's *fence floor* (one value per prefix) to the key's
//!   fence, and a hash made again starts from the floor, so the key's next fence is above
//!   every fence it had.
//!
//! # Leases and renewal
//!
//! Every remote acquisition has a lease: the URL's `lease` (default 30 s), or the acquire's own
//! [`LockOptions::lease`](crate::LockOptions::lease) if shorter. The holder's process renews it every third of the lease
//! while the acquisition lives, up to the acquisition's own lease deadline if it has one
//! (which then ends it, as in every scope). Renewal is bounded: if Redis cannot be reached for
//! the lease's remaining time, or says the token is gone, the holder gives the lock up, and its
//! `LostSignal` ([`KeyedLock::lost_signal`]) fires; [`KeyedLock::is_current`] then reports
//! `false`. A holder that is killed stops renewing, and the next acquirer gets the key once the
//! lease ends, with a higher fence, and [`Acquisition::owner_died`](crate::Acquisition::owner_died) set. So does a hold still
//! alive when its lock object is dropped (the drop never blocks to release it).
//!
//! # Waiting
//!
//! Waiting is by push, never by polling: a waiter that cannot have a key queues in the key's
//! FIFO queue in Redis in the same script that found the key taken, then blocks (`BLPOP`) on a
//! list of its own; a release (or a lease's end, a force-unlock, a waiter leaving) pushes to
//! the list of the head waiter whose mode fits. Since the waiter queued itself in the failing
//! script, a release between the failed attempt and the block leaves its push in the list:
//! nothing is missed. Shared waiters behind a shared head are woken in a chain as each is
//! granted; a shared request queued behind a waiting exclusive one waits (FIFO, as Web Locks
//! specify). A waiter also looks again by itself when the holder's lease is due to end, and at
//! least every 5 s (a bounded safety re-check). A waiter that times out or is cancelled leaves
//! the queue; one whose process died is dropped when its registration lapses (at most 6 s
//! after its last look), so a killed waiter holds the queue up for at most that long.
//!
//! A contended acquire costs one script that queues it, one `BLPOP` per wake-up, and one
//! script that takes the key, sent behind the `BLPOP` on the same connection: Redis runs it as
//! soon as the block ends, so a wake-up costs no round trip more. An attempt sent that way whose
//! outcome the waiter cannot learn (its wait cancelled, or cut off) is undone behind it on that
//! connection. `info` reports the key as Redis sees it (`holders` counts remote
//! holds, one per process for shared holders; `waiters` adds this process's local waiters to
//! the queue in Redis); `holds` and `owner` are this process's, when it holds the key.
//!
//! # Local coalescing
//!
//! Within one process, waiters for a key queue in an in-process `KeyPool` first, and the
//! process holds at most one remote acquisition per key (shared holders share one, an owner's
//! reentrant holds share its exclusive one); each local exclusive holder takes its own remote
//! acquisition, so that the fence rises per holder. BENCHMARKS.md has the local hand-off
//! latency this choice gives.
//!
//! # Semaphores
//!
//! Opened with [`OpenOptions::permits`](crate::OpenOptions::permits), the scope is a keyed semaphore: at most that many
//! units of a key held at once across every process that opens the prefix. Its keys live in a
//! space of their own under the prefix (a lock scope of the same prefix never meets them), and
//! the permits are recorded under the prefix at the first open; an open with other permits is
//! `Incompatible`. Each acquisition is one remote hold with a token, its units and a fence of its
//! own (`HINCRBY`, as for an exclusive hold), renewed and lost as a lock's is; a release gives its
//! units back and wakes the head waiter if its units now fit. Waiters are served strictly in
//! order (a heavy request at the head is not passed). A holder that dies stops renewing: its
//! units come back when its lease ends, and the next holder sees `owner_died`. Locally, a
//! semaphore of the same permits queues this process's requests first, so at most `permits`
//! of them per key go to Redis.
//!
//! # Failures, and what Redis can guarantee
//!
//! - Redis unreachable at acquire: `Error::Unavailable` naming the redacted URL, never a false
//!   success. Opening (connecting, the handshake, loading the scripts) takes at most
//!   `connect_timeout`. Every command must have its whole reply within `timeout` (a deadline
//!   for the reply, not a limit on each read), and an acquire's own timeout bounds the acquire,
//!   its commands included: a command its deadline cuts off ends it with `TimedOut`, one that
//!   `timeout` cuts off with `Unavailable` ("timed out waiting for Redis (after N ms)").
//! - Each script's reply carries the id of its request, and a reply without it (a stale reply
//!   on a connection one behind, or a reply of the wrong shape) is never read as an answer:
//!   the connection is discarded and the call fails with `Unavailable`. A connection that
//!   failed or was cut off mid-reply is discarded too, never reused.
//! - An acquire whose reply was lost may still have run on the server. If the connection was
//!   torn, the script is sent once more with the same token on a fresh connection (an acquire
//!   by the same token gives the same grant); if that fails too, or the reply was cut off or
//!   unreadable, the token is released (and the waiter taken out of the queues) in the
//!   background, on the same connection so that Redis runs it after the lost attempt. The key
//!   is not left held by an acquisition nobody has (unless Redis cannot be reached for that
//!   release either: then its lease ends it).
//! - A wrong password: `Error::PermissionDenied`. A password never appears in an error, in
//!   `Debug`, or in a log line: every message names the URL with the password as `***`.
//! - Redis restarted while a lock is held: the holder's renewals fail; once its lease has run
//!   out unconfirmed it learns it lost the lock. If the data survived (AOF), the key stays held
//!   by the old token until the lease ends, and the next holder's fence is higher.
//! - **A single Redis** gives mutual exclusion between processes whose clocks run at the same
//!   rate, as long as the server keeps its data and its clock does not jump: the fence, checked
//!   by the protected resource, keeps a stalled holder (GC pause, partition longer than the
//!   lease) from doing harm, which the lease alone cannot.
//! - **Redis with a replica and failover** cannot guarantee mutual exclusion: replication is
//!   asynchronous, so an acquire acknowledged by the old primary may be missing on the promoted
//!   replica, which then grants the key again, and its fence counter may be behind (a fence can
//!   repeat). `WAIT` would narrow the window without closing it. Use one Redis (with AOF) for
//!   locks that must hold, and the fences for safety; Redlock's multi-primary scheme is not
//!   implemented.
//! - **Redis Cluster**: every name of a scope shares one hash tag (`{PREFIX}`), so a multi-key
//!   acquire is one script on one slot, as the cluster requires. The client used here talks to
//!   one server; a cluster needs a cluster client (not done), and then the keys of one
//!   `acquire_many` must share a hash tag (the prefix makes them).
//!
//! # URL
//!
//! `redis://[USER[:PASSWORD]@]HOST[:PORT][/DB][?prefix=NAME&lease=30s&connect_timeout=5s&timeout=5s]`,
//! `rediss://` for TLS (rustls, the platform's root certificates). Unknown options are refused.
//!
//! # Scripts
//!
//! The Lua sources are in `core/src/redis/lua.rs` (its `PRELUDE` documents the data model).

mod conn;
mod lua;
mod remote;
mod scripts;
mod url;

use std::sync::Arc;
use std::time::Instant;

use self::conn::Conns;
pub(crate) use self::remote::RedisServer;
use self::url::RedisUrl;
use crate::error::Result;
use crate::remote::RemoteLock;
use crate::scope::{KeyedLock, OpenOptions};

/// Opens the Redis scope that `url` names, as a [`KeyedLock`] (what [`open_with`](crate::open_with)
/// does for `redis://` and `rediss://`). Fails with `InvalidArgument` for a malformed URL or
/// options a Redis scope does not take, `PermissionDenied` for refused credentials, and
/// `Unavailable` when the server cannot be reached within `connect_timeout`.
pub fn open(url: &str, options: &OpenOptions) -> Result<Arc<dyn KeyedLock>> {
    Ok(Arc::new(connect(url, options)?))
}

/// The Redis scope's lock object.
pub(crate) type RedisLock = RemoteLock<RedisServer>;

/// Connects to the Redis that `url` names (see [`open`]).
pub(crate) fn connect(url: &str, options: &OpenOptions) -> Result<RedisLock> {
    let url = RedisUrl::parse(url)?;
    let permits = options.permits.unwrap_or(0);
    let recorded = options.recorded_permits;
    RemoteLock::start(options, move |_| async move {
        // `connect_timeout` bounds the whole of opening: connecting, the handshake and loading
        // the scripts.
        let cutoff = Instant::now() + url.options.connect_timeout;
        let conns = Conns::connect(url, cutoff).await?;
        let permits = if recorded {
            RedisServer::recorded_permits(&conns, cutoff).await?
        } else {
            permits
        };
        let server = RedisServer::new(conns, permits)?;
        server.load(cutoff).await?;
        // An open for recorded permits only reads them: it never writes a record.
        if !recorded {
            server.claim_permits(cutoff).await?;
        }
        Ok(Arc::new(server))
    })
}

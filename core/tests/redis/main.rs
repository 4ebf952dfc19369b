//! The Redis scope against a real `redis-server` (one per test, on a free loopback port).
//!
//! Run with `cargo test -p keylock-core --features redis --test redis` (`make test-redis`
//! installs Debian's `redis-server` first when it is missing). Some tests start child
//! processes: they run this same binary's `child_process_entry` test with `KEYLOCK_REDIS_CHILD`
//! set.

#[path = "../common/certs.rs"]
mod certs;
mod children;
#[path = "../common/mod.rs"]
mod common;
#[path = "../common/server_semaphore.rs"]
mod contract;
mod failures;
#[path = "../common/server_grant_policy.rs"]
mod grant_policy;
#[path = "../common/grant_policy.rs"]
mod grant_table;
mod hostile;
mod processes;
mod proxy;
mod semantics;
mod semaphore;
mod server;
mod stats;
mod tls;

use std::sync::Arc;

pub(crate) use common::{wait_until, within};
use keylock_core::{KeyedLock, LockKey};

use server::Server;

/// Opens the scope at `server` with URL options `query`.
pub(crate) fn open(server: &Server, query: &str) -> Arc<dyn KeyedLock> {
    keylock_core::open(&server.url(query)).expect("open the Redis scope")
}

pub(crate) fn key(s: &str) -> LockKey<'_> {
    LockKey::new(s.as_bytes())
}

/// The names on `server` under scope prefix `prefix`, sorted.
pub(crate) fn names_under(server: &Server, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{prefix}}}:*"))
        .query(&mut server.client())
        .unwrap();
    names.sort();
    names
}

/// The grant policy table against Redis, where the policy is coded again in Lua.
#[test]
fn redis_follows_the_grant_policy() {
    let server = Arc::new(Server::start());
    grant_policy::follows_the_grant_policy(Arc::new(move |prefix: &str| {
        open(&server, &format!("prefix={prefix}"))
    }));
}

/// The entry point of the child processes some tests start (a no-op otherwise).
#[test]
fn child_process_entry() {
    if let Ok(role) = std::env::var("KEYLOCK_REDIS_CHILD") {
        children::run(&role);
    }
}

//! The Redis scope against a real `redis-server` (one per test, on a free loopback port).
//!
//! Run with `cargo test -p keylock-core --features redis --test redis` (`make test-redis`
//! installs Debian's `redis-server` first when it is missing). Some tests start child
//! processes: they run this same binary's `child_process_entry` test with `KEYLOCK_REDIS_CHILD`
//! set.

mod children;
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
use std::sync::mpsc;
use std::time::Duration;

use keylock_core::{KeyedLock, LockKey};

use server::Server;

/// Opens the scope at `server` with URL options `query`.
pub(crate) fn open(server: &Server, query: &str) -> Arc<dyn KeyedLock> {
    keylock_core::open(&server.url(query)).expect("open the Redis scope")
}

pub(crate) fn key(s: &str) -> LockKey<'_> {
    LockKey::new(s.as_bytes())
}

/// Runs `f` on its own thread and fails the test if it takes longer than `limit`, so that a
/// hang shows up as a deadlock instead of a stuck test run.
pub(crate) fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(_) => panic!("no result within {limit:?}: deadlock or lost wake-up"),
    }
}

/// Waits until `cond` holds; fails the test after 20 s.
pub(crate) fn wait_until(mut cond: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < until,
            "condition not reached within 20 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
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

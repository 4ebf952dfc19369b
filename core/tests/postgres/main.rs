//! The PostgreSQL scope against a real server: Debian's postgresql-15, a cluster of its own
//! per test (initdb in a temporary directory, a free loopback port, stopped by its PID), and
//! Debian's pgbouncer in front of it where a test says so. Never a mock.
//!
//! Run with `cargo test -p keylock-core --features postgres --test postgres` (`make
//! postgres-server` installs the server and pgbouncer first when they are missing). The kill -9
//! test runs this same binary's `child_process_entry` test with `KEYLOCK_PG_CHILD` set.

#[path = "../common/certs.rs"]
mod certs;
#[path = "../common/mod.rs"]
mod common;
#[path = "../common/server_semaphore.rs"]
mod contract;
mod faults;
#[path = "../common/server_grant_policy.rs"]
mod grant_policy;
#[path = "../common/grant_policy.rs"]
mod grant_table;
mod semantics;
mod semaphore;
mod server;
mod sweep;
mod tls;

use std::sync::Arc;
use std::time::Instant;

pub(crate) use common::{wait_until, within};
use keylock_core::{KeyedLock, LockKey};
use server::{Bouncer, PoolMode, Server};

/// Opens the scope at `url`.
pub(crate) fn open(url: &str) -> Arc<dyn KeyedLock> {
    keylock_core::open(url).expect("open the PostgreSQL scope")
}

pub(crate) fn key(s: &str) -> LockKey<'_> {
    LockKey::new(s.as_bytes())
}

/// The grant policy table against PostgreSQL, whose lock manager is the policy.
#[test]
fn postgres_follows_the_grant_policy() {
    let server = Arc::new(Server::start());
    grant_policy::follows_the_grant_policy(Arc::new(move |prefix: &str| open(&server.url(prefix))));
}

/// The entry point of the child processes some tests start (a no-op otherwise).
#[test]
fn child_process_entry() {
    if let Ok(role) = std::env::var("KEYLOCK_PG_CHILD") {
        faults::child(&role);
    }
}

/// Whether a process with this PID exists (kill with signal 0 only checks).
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 sends nothing; kill only looks the PID up.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// The PIDs of `pid`'s children, from /proc (the postmaster's backends and helpers).
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces and parentheses, so skip past the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// The harness itself: a real server starts, answers, keeps its data across a fast restart and
/// an immediate shutdown (a crash), takes extra settings, pgbouncer pools in front of it in both
/// modes, and nothing is left running once they are dropped.
#[test]
fn harness_starts_restarts_and_pools() {
    let t = Instant::now();
    let mut pg = Server::start();
    eprintln!("postgres started in {:?} (initdb included)", t.elapsed());
    assert_eq!(pg.psql("select 1"), "1\n");
    let tuned = Server::with_settings(&[("tcp_keepalives_idle", "7")]);
    assert_eq!(tuned.psql("show tcp_keepalives_idle"), "7\n");
    assert_ne!(tuned.port(), pg.port());
    assert_ne!(tuned.password(), pg.password());
    assert!(
        pg.url("app")
            .ends_with(&format!(":{}/keylock?prefix=app", pg.port()))
    );
    assert!(pg.url("app").contains(pg.password()));

    pg.psql("create table kept (v int); insert into kept values (42)");
    let before = pg.pid();
    let t = Instant::now();
    pg.restart();
    eprintln!("postgres restarted in {:?}", t.elapsed());
    assert!(
        !alive(before),
        "the old postmaster {before} is still running"
    );
    assert_eq!(pg.psql("select v from kept"), "42\n");

    // A committed row survives an immediate shutdown: the restart replays the WAL.
    pg.psql("insert into kept values (43)");
    pg.kill();
    let t = Instant::now();
    pg.restart();
    eprintln!("postgres recovered in {:?}", t.elapsed());
    assert_eq!(pg.psql("select v from kept order by v"), "42\n43\n");

    let session = Bouncer::start(&pg, PoolMode::Session);
    let transaction = Bouncer::start(&pg, PoolMode::Transaction);
    assert_ne!(session.port(), pg.port());
    assert!(
        transaction
            .url("app")
            .contains(&format!(":{}/", transaction.port()))
    );
    for b in [&session, &transaction] {
        assert_eq!(b.psql("select count(*) from kept"), "2\n");
    }

    let mut pids = vec![pg.pid(), tuned.pid(), session.pid(), transaction.pid()];
    pids.extend(children(pg.pid()));
    assert!(pids.len() > 4, "the postmaster has no children: {pids:?}");
    drop(session);
    drop(transaction);
    drop(tuned);
    drop(pg);
    for pid in pids {
        assert!(!alive(pid), "PID {pid} is still running");
    }
}

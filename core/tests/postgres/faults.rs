//! Faults: holders killed with kill -9, the server stopped and restarted under holders,
//! pgbouncer in both pooling modes, a silent server, and bad URLs and credentials.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keylock_core::{Error, LockOptions, OpenOptions, Wait};

use crate::server::{Bouncer, PoolMode, Server};
use crate::{key, open, wait_until, within};

/// What a child process does: `hold` opens the scope at `KEYLOCK_PG_URL`, takes `k`, prints
/// `held FENCE`, and sleeps until it is killed.
pub(crate) fn child(role: &str) {
    assert_eq!(role, "hold");
    let url = std::env::var("KEYLOCK_PG_URL").unwrap();
    let scope = open(&url);
    let acq = scope.acquire(key("k"), &LockOptions::new()).unwrap();
    println!("held {}", acq.fence());
    std::thread::sleep(Duration::from_secs(600));
}

/// A holder killed with SIGKILL frees its key as soon as the server sees its connection close:
/// the next holder (blocked on the server meanwhile) gets it with `owner_died` and a higher
/// fence. The recovery times (kill to grant) are printed as a distribution; the assertion is
/// only a hang bound.
#[test]
fn killed_holders_free_their_keys() {
    within(Duration::from_secs(240), || {
        let pg = Server::start();
        let url = pg.url("kill");
        let waiter = open(&url);
        let mut last = 0;
        let mut times = Vec::new();
        for round in 0..20 {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "child_process_entry",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("KEYLOCK_PG_CHILD", "hold")
                .env("KEYLOCK_PG_URL", &url)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let fence: u64 = loop {
                let line = lines.next().expect("the child ended early").unwrap();
                if let Some(at) = line.find("held ") {
                    break line[at + 5..].trim().parse().unwrap();
                }
            };
            assert!(fence > last, "round {round}: fences rise");
            let w = Arc::clone(&waiter);
            let blocked = std::thread::spawn(move || {
                let got = w.acquire(
                    key("k"),
                    &LockOptions::new().wait(Wait::For(Duration::from_secs(30))),
                );
                (got, Instant::now())
            });
            wait_until(|| {
                waiter
                    .info(key("k"))
                    .unwrap()
                    .is_some_and(|i| i.waiters == 1)
            });
            let killed = Instant::now();
            child.kill().unwrap();
            child.wait().unwrap();
            let (got, at) = blocked.join().unwrap();
            let acq = got.unwrap_or_else(|e| panic!("round {round}: {e}"));
            times.push(at.duration_since(killed));
            assert!(
                acq.owner_died(),
                "round {round}: the next holder sees owner_died"
            );
            assert!(acq.fence() > fence, "round {round}: a higher fence");
            last = acq.fence();
            waiter.release(acq).unwrap();
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        eprintln!(
            "kill -9 recovery over {} rounds: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            times.len(),
            ms(times[times.len() / 2]),
            ms(times[times.len() * 99 / 100]),
            ms(times[times.len() - 1]),
        );
        assert!(times[times.len() - 1] < Duration::from_secs(10));
    });
}

/// A server restart mid-hold: the holder's lost signal fires, its release is refused, nobody
/// is granted twice, and fences keep rising across a clean restart and across a crash.
#[test]
fn server_restart_mid_hold() {
    within(Duration::from_secs(120), || {
        let mut pg = Server::start();
        let url = format!("{}&lease=1500ms&timeout=1s", pg.url("restart"));
        let (a, b) = (open(&url), open(&url));
        let x = a.acquire(key("k"), &LockOptions::new()).unwrap();
        let lost = a.lost_signal(&x).unwrap();
        pg.restart();
        let t = Instant::now();
        wait_until(|| lost.is_lost());
        eprintln!("lost signal {:?} after the restart", t.elapsed());
        assert!(!a.is_current(&x).unwrap());
        let y = b
            .acquire(
                key("k"),
                &LockOptions::new().wait(Wait::For(Duration::from_secs(10))),
            )
            .unwrap();
        assert!(y.fence() > x.fence(), "fences rise across a restart");
        assert!(
            a.release(x).is_err(),
            "a hold lost to a restart cannot be released"
        );
        assert!(matches!(
            a.acquire(key("k"), &LockOptions::new().wait(Wait::No)),
            Err(Error::WouldBlock)
        ));
        let yf = y.fence();
        b.release(y).unwrap();
        // A crash (immediate shutdown): fences still never repeat.
        let mut fence = yf;
        for _ in 0..40 {
            let acq = b.acquire(key("k"), &LockOptions::new()).unwrap();
            fence = acq.fence();
            b.release(acq).unwrap();
        }
        // `a` holds another key through the crash. The crash empties the unlogged tables (the
        // keys' numbers and who holds what): the key gets a fresh number, `b` takes it, and
        // `a`'s hold is lost, not granted twice.
        let c = a.acquire(key("c"), &LockOptions::new()).unwrap();
        let c_lost = a.lost_signal(&c).unwrap();
        pg.kill();
        let down = b.acquire(key("k"), &LockOptions::new().wait(Wait::No));
        assert!(matches!(down, Err(Error::Unavailable(_))), "{down:?}");
        pg.restart();
        let z = b
            .acquire(
                key("k"),
                &LockOptions::new().wait(Wait::For(Duration::from_secs(10))),
            )
            .unwrap();
        assert!(z.fence() > fence, "after a crash: {} > {fence}", z.fence());
        b.release(z).unwrap();
        wait_until(|| c_lost.is_lost());
        let c2 = b
            .acquire(key("c"), &LockOptions::new().wait(Wait::No))
            .expect("free after the crash");
        assert!(c2.fence() > c.fence() && !c2.owner_died());
        assert!(!a.is_current(&c).unwrap());
        assert!(a.release(c).is_err(), "a hold lost to a crash");
        assert!(b.is_current(&c2).unwrap());
        b.release(c2).unwrap();
    });
}

/// Fences never repeat after a crash on a server whose commits are asynchronous
/// (`synchronous_commit = off`, a common setting for speed), where a commit returns before its
/// WAL is flushed. The fence sequence logs 32 values ahead, in WAL that only a flush keeps: so
/// 100 fences drawn after a checkpoint, then an immediate shutdown with the WAL writer asleep,
/// would lose that WAL, and the sequence would give the same values again (fence 100 twice,
/// before functions version 11). A round for each kind of grant that draws a fence:
/// exclusive, shared and a semaphore's.
#[test]
fn fences_never_repeat_after_a_crash_with_asynchronous_commit() {
    within(Duration::from_secs(180), || {
        let mut pg =
            Server::with_settings(&[("synchronous_commit", "off"), ("wal_writer_delay", "10s")]);
        let (url, sem_url) = (pg.url("async"), pg.url("asyncsem"));
        let mut last = 0;
        for round in ["exclusive", "shared", "semaphore"] {
            let scope = if round == "semaphore" {
                keylock_core::open_with(&sem_url, &OpenOptions::new().permits(2)).unwrap()
            } else {
                open(&url)
            };
            let opts = if round == "shared" {
                LockOptions::new().shared()
            } else {
                LockOptions::new()
            };
            pg.psql("CHECKPOINT");
            for i in 0..100 {
                let acq = scope.acquire(key(&format!("k{}", i % 3)), &opts).unwrap();
                assert!(
                    acq.fence() > last,
                    "{round}: fences rise: {} > {last}",
                    acq.fence()
                );
                last = acq.fence();
                scope.release(acq).unwrap();
            }
            drop(scope);
            pg.kill();
            pg.restart();
        }
        let b = open(&url);
        let after = b.acquire(key("k0"), &LockOptions::new()).unwrap();
        assert!(
            after.fence() > last,
            "after the last crash: {} > {last}",
            after.fence()
        );
        b.release(after).unwrap();
    });
}

#[test]
fn pgbouncer_in_session_mode_works() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        let bouncer = Bouncer::start(&pg, PoolMode::Session);
        let (a, b) = (open(&bouncer.url("pool")), open(&bouncer.url("pool")));
        let x = a.acquire(key("k"), &LockOptions::new()).unwrap();
        assert!(matches!(
            b.acquire(key("k"), &LockOptions::new().wait(Wait::No)),
            Err(Error::WouldBlock)
        ));
        let b2 = Arc::clone(&b);
        let waiter = std::thread::spawn(move || b2.acquire(key("k"), &LockOptions::new()));
        wait_until(|| a.info(key("k")).unwrap().unwrap().waiters == 1);
        let xf = x.fence();
        a.release(x).unwrap();
        let y = waiter.join().unwrap().unwrap();
        assert!(y.fence() > xf);
        b.release(y).unwrap();
        // A client that goes away frees its keys (pgbouncer resets the server session).
        let c = open(&bouncer.url("pool"));
        let _held = c.acquire(key("gone"), &LockOptions::new()).unwrap();
        drop(c);
        let got = a
            .acquire(
                key("gone"),
                &LockOptions::new().wait(Wait::For(Duration::from_secs(10))),
            )
            .unwrap();
        a.release(got).unwrap();
    });
}

/// In transaction mode session locks would outlive the client's turn on a server connection:
/// the scope must fail with `Incompatible`, never grant a key twice. With one server connection
/// behind the pooler, every client shares one server session.
#[test]
fn pgbouncer_in_transaction_mode_fails_clearly() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        let bouncer = Bouncer::with_pool(&pg, PoolMode::Transaction, 1);
        let url = bouncer.url("txn");
        let first = keylock_core::open(&url);
        let second = keylock_core::open(&url);
        let mut refused = 0;
        let mut granted = Vec::new();
        for scope in [first, second] {
            match scope {
                Err(Error::Incompatible(msg)) => {
                    assert!(msg.contains("pooler"), "{msg}");
                    refused += 1;
                }
                Ok(s) => match s.acquire(key("k"), &LockOptions::new().wait(Wait::No)) {
                    Ok(acq) => granted.push((s, acq)),
                    Err(Error::Incompatible(_)) => refused += 1,
                    Err(e) => panic!("neither a grant nor Incompatible: {e}"),
                },
                Err(e) => panic!("neither a scope nor Incompatible: {e}"),
            }
        }
        assert!(granted.len() <= 1, "the key was granted twice");
        assert!(
            refused >= 1,
            "two clients in one server session must be refused"
        );
    });
}

#[test]
fn bad_urls_and_credentials() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        let port = pg.port();
        for bad in [
            format!("postgre://keylock@127.0.0.1:{port}/keylock"),
            format!("postgres://keylock@127.0.0.1:{port}"),
            format!("postgres://127.0.0.1:{port}/keylock"),
            "postgres://keylock@127.0.0.1:0/keylock".to_owned(),
            "postgres://keylock@127.0.0.1:70000/keylock".to_owned(),
            format!("postgres://keylock@127.0.0.1:{port}/keylock?nope=1"),
        ] {
            let got = keylock_core::open(&bad);
            assert!(
                matches!(got, Err(Error::InvalidArgument(_))),
                "{bad}: {got:?}"
            );
        }
        let wrong = format!(
            "postgres://keylock:not-{}@127.0.0.1:{port}/keylock",
            pg.password()
        );
        match keylock_core::open(&wrong) {
            Err(Error::PermissionDenied(msg)) => assert!(!msg.contains("not-"), "{msg}"),
            other => panic!("a wrong password: {other:?}"),
        }
        let nobody = format!(
            "postgres://nobody:{}@127.0.0.1:{port}/keylock",
            pg.password()
        );
        assert!(matches!(
            keylock_core::open(&nobody),
            Err(Error::PermissionDenied(_))
        ));
        let no_db = format!("postgres://keylock:{}@127.0.0.1:{port}/nodb", pg.password());
        match keylock_core::open(&no_db) {
            Err(Error::Unavailable(msg)) => {
                assert!(
                    msg.contains("nodb") && !msg.contains(pg.password()),
                    "{msg}"
                )
            }
            other => panic!("a missing database: {other:?}"),
        }
    });
}

/// A server that accepts and never answers: the open is bounded by `connect_timeout`.
#[test]
fn a_silent_server_is_bounded_by_connect_timeout() {
    within(Duration::from_secs(30), || {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let _keep = std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                held.push(conn);
            }
        });
        let t = Instant::now();
        let got = keylock_core::open(&format!(
            "postgres://u:p@127.0.0.1:{port}/db?connect_timeout=500ms"
        ));
        assert!(matches!(got, Err(Error::Unavailable(_))), "{got:?}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    });
}

/// A role without `CREATE` uses the tables and functions another role installed, and on a
/// database where nothing is installed its open is `PermissionDenied`, saying why.
#[test]
fn a_role_without_create_privilege() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        // (PostgreSQL 15 grants no CREATE on schema public to other roles.)
        pg.psql("CREATE ROLE app LOGIN PASSWORD 'app-pw'");
        pg.psql("CREATE DATABASE fresh");
        let limited = |db: &str| format!("postgres://app:app-pw@127.0.0.1:{}/{db}", pg.port());
        match keylock_core::open(&limited("fresh")) {
            Err(Error::PermissionDenied(msg)) => {
                assert!(
                    msg.contains("permission denied") && !msg.contains("app-pw"),
                    "{msg}"
                )
            }
            other => panic!("a role that cannot create the tables: {other:?}"),
        }
        // Installed by the owner, then granted.
        let owner = open(&pg.url("shared"));
        owner
            .release(owner.acquire(key("k"), &LockOptions::new()).unwrap())
            .unwrap();
        pg.psql(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO app; \
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO app",
        );
        let app = open(&format!("{}?prefix=shared", limited("keylock")));
        let x = app.acquire(key("k"), &LockOptions::new()).unwrap();
        assert!(matches!(
            owner.acquire(key("k"), &LockOptions::new().wait(Wait::No)),
            Err(Error::WouldBlock)
        ));
        app.release(x).unwrap();
    });
}

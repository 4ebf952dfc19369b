//! What the PostgreSQL scope promises, between scope objects of one server (each its own
//! client as far as the server knows).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use keylock_core::{Error, LockKey, LockOptions, Mode, OpenOptions, Wait, open_with};

use crate::server::Server;
use crate::{key, open, wait_until, within};

fn try_opts() -> LockOptions {
    LockOptions::new().wait(Wait::No)
}

#[test]
fn exclusive_and_shared_across_scope_objects() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        let (a, b) = (open(&pg.url("sem")), open(&pg.url("sem")));
        let x = a.acquire(key("k"), &LockOptions::new()).unwrap();
        assert!(matches!(
            b.acquire(key("k"), &try_opts()),
            Err(Error::WouldBlock)
        ));
        assert!(matches!(
            b.acquire(key("k"), &try_opts().mode(Mode::Shared)),
            Err(Error::WouldBlock)
        ));
        let info = b.info(key("k")).unwrap().expect("held");
        assert_eq!(
            (info.mode, info.holders, info.fence),
            (Mode::Exclusive, 1, x.fence())
        );
        assert!(info.lease_remaining.is_none());
        let xf = x.fence();
        a.release(x).unwrap();
        assert!(
            b.info(key("k")).unwrap().is_none(),
            "free after the release"
        );

        let y = b.acquire(key("k"), &try_opts()).unwrap();
        assert!(y.fence() > xf, "fences rise per key across clients");
        let yf = y.fence();
        b.release(y).unwrap();
        let s1 = a.acquire(key("k"), &try_opts().mode(Mode::Shared)).unwrap();
        let s2 = b.acquire(key("k"), &try_opts().mode(Mode::Shared)).unwrap();
        assert!(s1.fence() > yf);
        assert_eq!(
            s1.fence(),
            s2.fence(),
            "shared holders at once share a fence"
        );
        let info = a.info(key("k")).unwrap().unwrap();
        assert_eq!((info.mode, info.holders), (Mode::Shared, 2));
        assert!(matches!(
            a.acquire(key("k"), &try_opts()),
            Err(Error::WouldBlock)
        ));
        a.release(s1).unwrap();
        b.release(s2).unwrap();
        // Web Locks names and plain keys never meet.
        let n = a.acquire(LockKey::name(b"k"), &try_opts()).unwrap();
        let p = b.acquire(key("k"), &try_opts()).unwrap();
        a.release(n).unwrap();
        b.release(p).unwrap();
        // Prefixes never meet either.
        let other = open(&pg.url("other"));
        let q = a.acquire(key("k"), &try_opts()).unwrap();
        other
            .release(other.acquire(key("k"), &try_opts()).unwrap())
            .unwrap();
        a.release(q).unwrap();
    });
}

/// Two keys never block each other, even where PostgreSQL's own text hash (what an
/// application's `pg_advisory_lock(hashtext(key))` would lock) gives them the same number.
#[test]
fn keys_whose_hashes_collide_never_block_each_other() {
    within(Duration::from_secs(120), || {
        let pg = Server::start();
        let pair = pg.psql(
            "SELECT string_agg(k, ',') FROM (SELECT 'key:' || i AS k, hashtext('key:' || i) AS h \
             FROM generate_series(1, 300000) i) t GROUP BY h HAVING count(*) > 1 LIMIT 1",
        );
        let pair: Vec<&str> = pair.trim().split(',').collect();
        assert!(
            pair.len() >= 2,
            "no hashtext collision among 300,000 keys: {pair:?}"
        );
        let (a, b) = (open(&pg.url("hash")), open(&pg.url("hash")));
        let x = a.acquire(key(pair[0]), &try_opts()).unwrap();
        let y = b
            .acquire(key(pair[1]), &try_opts())
            .expect("a key whose hash collides with a held key's is still free");
        assert!(matches!(
            b.acquire(key(pair[0]), &try_opts()),
            Err(Error::WouldBlock)
        ));
        a.release(x).unwrap();
        b.release(y).unwrap();
        // Many keys at once: exactly the held ones are taken.
        let held: Vec<_> = (0..300)
            .map(|i| a.acquire(key(&format!("m{i}")), &try_opts()).unwrap())
            .collect();
        for i in 0..600 {
            let got = b.acquire(key(&format!("m{i}")), &try_opts());
            match (i < 300, got) {
                (true, Err(Error::WouldBlock)) => {}
                (false, Ok(acq)) => b.release(acq).unwrap(),
                (held, other) => panic!("key m{i} (held: {held}): {other:?}"),
            }
        }
        for acq in held {
            a.release(acq).unwrap();
        }
    });
}

#[test]
fn try_timed_blocking_and_async() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        let url = pg.url("wait");
        let (a, b) = (open(&url), open(&url));
        let x = a.acquire(key("k"), &LockOptions::new()).unwrap();
        let t = Instant::now();
        let r = b.acquire(
            key("k"),
            &LockOptions::new().wait(Wait::For(Duration::from_millis(300))),
        );
        assert!(matches!(r, Err(Error::TimedOut)), "{r:?}");
        assert!(
            t.elapsed() >= Duration::from_millis(290),
            "{:?}",
            t.elapsed()
        );
        wait_until(|| a.info(key("k")).unwrap().unwrap().waiters == 0);

        // A blocking waiter is queued on the server, and woken by the release (pushed).
        let b2 = Arc::clone(&b);
        let waiter = std::thread::spawn(move || b2.acquire(key("k"), &LockOptions::new()));
        wait_until(|| a.info(key("k")).unwrap().unwrap().waiters == 1);
        assert_eq!(b.stats().unwrap().waiting_here, 1);
        let xf = x.fence();
        a.release(x).unwrap();
        let y = waiter.join().unwrap().unwrap();
        assert!(y.fence() > xf && !y.owner_died());
        let yf = y.fence();

        // Async: a future that waits, and one dropped while it waits (cancelled), which leaves
        // nothing queued on the server.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let pending = Arc::clone(&a).acquire_async(key("k"), &LockOptions::new());
            let cut = tokio::time::timeout(Duration::from_millis(300), pending).await;
            assert!(cut.is_err(), "still waiting while b holds");
        });
        wait_until(|| a.info(key("k")).unwrap().unwrap().waiters == 0);
        let got = rt.block_on(async {
            let fut = Arc::clone(&a).acquire_async(key("k"), &LockOptions::new());
            let releaser = {
                let b = Arc::clone(&b);
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(100));
                    b.release(y).unwrap();
                })
            };
            let got = fut.await;
            releaser.join().unwrap();
            got
        });
        let z = got.unwrap();
        assert!(z.fence() > yf);
        a.release(z).unwrap();
        assert!(a.info(key("k")).unwrap().is_none());
    });
}

#[test]
fn acquire_many_is_all_or_nothing() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        let url = pg.url("many");
        let (a, b) = (open(&url), open(&url));
        let keys = [
            (key("k1"), Mode::Exclusive),
            (key("k2"), Mode::Exclusive),
            (key("k3"), Mode::Shared),
        ];
        let held = b.acquire(key("k2"), &try_opts()).unwrap();
        assert!(matches!(
            a.acquire_many(&keys, &try_opts()),
            Err(Error::WouldBlock)
        ));
        assert!(!b.is_locked(key("k1")).unwrap() && !b.is_locked(key("k3")).unwrap());
        assert!(matches!(
            a.acquire_many(
                &keys,
                &LockOptions::new().wait(Wait::For(Duration::from_millis(200)))
            ),
            Err(Error::TimedOut)
        ));
        assert!(
            !b.is_locked(key("k1")).unwrap(),
            "nothing kept after a timeout"
        );
        // A wait cancelled (its future dropped) after the server gave it k1 and while it waits
        // for k2 keeps nothing either.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let fut = Arc::clone(&a).acquire_many_async(&keys, &LockOptions::new());
            assert!(
                tokio::time::timeout(Duration::from_millis(400), fut)
                    .await
                    .is_err()
            );
        });
        wait_until(|| {
            !b.is_locked(key("k1")).unwrap() && b.info(key("k2")).unwrap().unwrap().waiters == 0
        });
        let b2 = Arc::clone(&b);
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            b2.release(held).unwrap();
        });
        let got = a.acquire_many(&keys, &LockOptions::new()).unwrap();
        releaser.join().unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[2].mode(), Mode::Shared);
        // Each failed call had recorded k1 as its own before it met k2 held: none of those
        // records may outlive its call, or k1 would look held by an owner that died.
        assert!(
            got.iter().all(|acq| !acq.owner_died()),
            "a failed call left its record behind"
        );
        for acq in got {
            a.release(acq).unwrap();
        }
    });
}

/// Threads of several scope objects on a few keys: never two inside a key at once, and the
/// count is exact.
#[test]
fn contended_threads_never_overlap() {
    within(Duration::from_secs(120), || {
        let pg = Server::start();
        threads_never_overlap(&pg.url("stress"), 60, 0);
    });
}

/// Threads of three scope objects at `url`, two each, `rounds` acquires per thread on the keys
/// `c0` to `c3`, blocking, timed and try, every `shared_every`th one shared (none with 0):
/// holders counted inside, never an exclusive one beside another holder, exclusive fences
/// rising per key, nobody dead, every blocking and timed acquire granted, nothing held after.
pub(crate) fn threads_never_overlap(url: &str, rounds: usize, shared_every: usize) {
    // Per key: exclusive holders inside, shared holders inside.
    let inside: Arc<Vec<(AtomicUsize, AtomicUsize)>> = Arc::new(
        (0..4)
            .map(|_| (AtomicUsize::new(0), AtomicUsize::new(0)))
            .collect(),
    );
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..3)
        .flat_map(|_| {
            let scope = open(url);
            (0..2).map(move |t| (Arc::clone(&scope), t))
        })
        .map(|(scope, t)| {
            let (inside, done) = (Arc::clone(&inside), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut last = [0u64; 4];
                for i in 0..rounds {
                    let k = (i * 3 + t) % 4;
                    let name = format!("c{k}");
                    let mode = if shared_every > 0 && i % shared_every == shared_every - 1 {
                        Mode::Shared
                    } else {
                        Mode::Exclusive
                    };
                    let wait = match i % 3 {
                        0 => Wait::Forever,
                        1 => Wait::For(Duration::from_secs(30)),
                        _ => Wait::No,
                    };
                    let opts = LockOptions::new().mode(mode).wait(wait);
                    let acq = match scope.acquire(key(&name), &opts) {
                        Ok(acq) => acq,
                        Err(Error::WouldBlock) => continue,
                        Err(e) => panic!("{e}"),
                    };
                    let (ex, sh) = &inside[k];
                    if mode == Mode::Exclusive {
                        assert_eq!(ex.fetch_add(1, Ordering::SeqCst), 0, "two in {name}");
                        assert_eq!(sh.load(Ordering::SeqCst), 0, "readers in {name}");
                        assert!(acq.fence() > last[k], "fences rise per key");
                        last[k] = acq.fence();
                    } else {
                        sh.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(ex.load(Ordering::SeqCst), 0, "a writer in {name}");
                    }
                    assert!(!acq.owner_died(), "nobody died: every holder released");
                    std::thread::sleep(Duration::from_micros(250));
                    if mode == Mode::Exclusive {
                        ex.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        sh.fetch_sub(1, Ordering::SeqCst);
                    }
                    scope.release(acq).unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let waited = (0..rounds).filter(|i| i % 3 != 2).count();
    assert!(
        done.load(Ordering::Relaxed) >= 6 * waited,
        "the blocking and timed ones all ran"
    );
    let check = open(url);
    for k in 0..4 {
        assert!(!check.is_locked(key(&format!("c{k}"))).unwrap());
    }
}

#[test]
fn force_unlock_moves_the_key_and_the_old_holder_learns() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        // A long scope lease (a check every 10 s): the old holder must hear of the
        // force-unlock from the server's notification, well before its next check.
        let url = format!("{}&lease=30s", pg.url("force"));
        let (a, b, c) = (open(&url), open(&url), open(&url));
        let learns = |lost: &keylock_core::LostSignal| {
            let t = Instant::now();
            wait_until(|| lost.is_lost());
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        };

        // Nobody queued: the key is free at once for a new request.
        let x = a.acquire(key("k"), &LockOptions::new()).unwrap();
        let lost = a.lost_signal(&x).expect("a server hold has a lost signal");
        assert!(b.force_unlock(key("k")).unwrap());
        assert!(
            !b.force_unlock(key("free")).unwrap(),
            "a free key was not held"
        );
        let y = b
            .acquire(key("k"), &try_opts())
            .expect("free at once for a new request");
        assert!(y.fence() > x.fence());
        assert!(!y.owner_died(), "force-unlocked, not dead");
        learns(&lost);
        assert!(!a.is_current(&x).unwrap());
        assert!(matches!(a.release(x), Err(Error::NotOwner)));
        let yf = y.fence();
        b.release(y).unwrap();

        // A waiter queued before the force-unlock: once the old holder lets the old number go
        // (told by the notification), the waiter moves to the key's new number and, first in
        // line, gets the key.
        let x = a.acquire(key("k"), &LockOptions::new()).unwrap();
        assert!(x.fence() > yf);
        let lost = a.lost_signal(&x).unwrap();
        let c2 = Arc::clone(&c);
        let queued = std::thread::spawn(move || {
            c2.acquire(
                key("k"),
                &LockOptions::new().wait(Wait::For(Duration::from_secs(5))),
            )
        });
        wait_until(|| b.info(key("k")).unwrap().unwrap().waiters == 1);
        assert!(b.force_unlock(key("k")).unwrap());
        let z = queued
            .join()
            .unwrap()
            .expect("the queued waiter moved to the new number");
        assert!(z.fence() > x.fence() && !z.owner_died());
        learns(&lost);
        assert!(matches!(a.release(x), Err(Error::NotOwner)));
        assert!(matches!(
            b.acquire(key("k"), &try_opts()),
            Err(Error::WouldBlock)
        ));
        c.release(z).unwrap();
    });
}

#[test]
fn an_acquisitions_own_lease_ends_it() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        // The scope's own lease is long (a check every 10 s): the acquisition's lease must
        // end the hold by itself, well before.
        let url = format!("{}&lease=30s", pg.url("lease"));
        let (a, b) = (open(&url), open(&url));
        let x = a
            .acquire(
                key("k"),
                &LockOptions::new().lease(Duration::from_millis(400)),
            )
            .unwrap();
        let t = Instant::now();
        let y = b
            .acquire(
                key("k"),
                &LockOptions::new().wait(Wait::For(Duration::from_secs(5))),
            )
            .unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(350),
            "{:?}",
            t.elapsed()
        );
        assert!(y.fence() > x.fence());
        assert!(matches!(a.release(x), Err(Error::LeaseExpired)));
        b.release(y).unwrap();
    });
}

#[test]
fn reentrant_owners_and_stats() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        let url = pg.url("reent");
        let r = open_with(&url, &OpenOptions::new().reentrant(true)).unwrap();
        let other = open(&url);
        let owner = keylock_core::Owner::new(7).unwrap();
        let opts = LockOptions::new().owner(owner);
        let one = r.acquire(key("k"), &opts).unwrap();
        let two = r.acquire(key("k"), &opts).unwrap();
        assert_eq!(
            one.fence(),
            two.fence(),
            "an owner's holds share one remote hold"
        );
        assert_eq!(r.stats().unwrap().held_here, 1);
        r.release(two).unwrap();
        assert!(other.is_locked(key("k")).unwrap());
        r.release(one).unwrap();
        assert!(!other.is_locked(key("k")).unwrap());
        assert_eq!(r.stats().unwrap().held_here, 0);
    });
}

/// An open replaces the functions an older build installed, and keeps a newer build's, so two
/// builds running at once never swap them back and forth under each other's calls.
#[test]
fn installs_only_move_forward() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        let url = pg.url("versions");
        let ours = {
            let _first = open(&url);
            pg.schema_version()
        };
        assert_eq!(
            pg.psql("SELECT relpersistence FROM pg_class WHERE relname = 'keylock_keys'"),
            "u\n",
            "the key table is unlogged"
        );
        // A newer build's install, marked in a helper's body (the same result).
        let body = |marker: &str| {
            pg.psql(&format!(
                "CREATE OR REPLACE FUNCTION keylock_g1(id bigint) RETURNS int LANGUAGE sql \
                 IMMUTABLE PARALLEL SAFE AS $$ SELECT (1802305536 + (id >> 32))::int /* {marker} */ $$"
            ))
        };
        let marked = || {
            pg.psql("SELECT prosrc FROM pg_proc WHERE proname = 'keylock_g1'")
                .contains("newer")
        };
        body("newer");
        pg.set_schema_version(ours + 1);
        let locks = open(&url);
        let a = locks.acquire(key("k"), &LockOptions::new()).unwrap();
        locks.release(a).unwrap();
        assert!(marked(), "a newer build's functions were replaced");
        assert_eq!(pg.schema_version(), ours + 1);
        // An older build's install (version 6's owner table had two columns fewer): replaced
        // at the next open, and the columns added.
        pg.set_schema_version(ours - 1);
        pg.psql("ALTER TABLE keylock_owners DROP COLUMN died, DROP COLUMN retired");
        let locks = open(&url);
        assert!(!marked(), "an older build's functions were kept");
        assert_eq!(pg.schema_version(), ours);
        let a = locks.acquire(key("k"), &LockOptions::new()).unwrap();
        assert!(locks.force_unlock(key("k")).unwrap());
        assert!(matches!(locks.release(a), Err(Error::NotOwner)));
    });
}

/// A newer build's install takes no table lock that calls hold: a call taking several keys
/// keeps its first keys' rows of the owner table while it waits for the next, and an install
/// waiting for that would stop every new call behind it.
#[test]
fn an_install_waits_for_no_call() {
    within(Duration::from_secs(120), || {
        let pg = Server::start();
        let url = pg.url("upgrade");
        drop(open(&url));
        let ours = pg.schema_version();
        let blocker = "SELECT pg_sleep(60) /* blocker */";
        // Its session, found by its query's text (the other session's query holds the pattern
        // only as two halves).
        let session = "FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
                       AND query LIKE '%/* blo' || 'cker */%'";
        let alive = || pg.psql(&format!("SELECT count(*) {session}"));
        std::thread::scope(|s| {
            // A row lock on the owner table, as such a call holds it.
            let held = s.spawn(|| {
                pg.psql(&format!(
                    "BEGIN; LOCK TABLE keylock_owners IN ROW EXCLUSIVE MODE; {blocker}; COMMIT"
                ))
            });
            wait_until(|| alive() == "1\n");
            pg.set_schema_version(ours - 1);
            let locks = open(&url);
            assert_eq!(alive(), "1\n", "the install waited for the call");
            let a = locks.acquire(key("k"), &LockOptions::new()).unwrap();
            locks.release(a).unwrap();
            pg.psql(&format!("SELECT pg_terminate_backend(pid) {session}"));
            // Its psql fails once its session is ended.
            assert!(held.join().is_err());
        });
    });
}

#[test]
fn what_the_scope_refuses() {
    within(Duration::from_secs(60), || {
        let pg = Server::start();
        let url = pg.url("refuse");
        let striped = open_with(&url, &OpenOptions::new().stripes(8));
        assert!(matches!(striped, Err(Error::InvalidArgument(_))));
        let a = open(&url);
        assert!(matches!(
            a.acquire(key("k"), &LockOptions::new().weight(2)),
            Err(Error::InvalidArgument(_))
        ));
        let shown = format!("{a:?}");
        assert!(
            shown.contains(":***@") && !shown.contains(pg.password()),
            "{shown}"
        );
    });
}

/// A child of fork() must not act as its parent's scope (it has the parent's sessions, not its
/// threads): every call answers `Unavailable` at once, dropping the scope there leaves the
/// parent's sessions alone, and a fresh open works.
#[test]
fn a_forked_child_gets_unavailable_and_leaves_the_parent_alone() {
    let pg = Server::start();
    let url = pg.url("fork");
    let locks = open(&url);
    let held = locks.acquire(key("k"), &LockOptions::new()).unwrap();
    // SAFETY: the child makes a few calls and leaves with _exit, never returning into the
    // test harness; glibc's malloc is usable after fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let unavailable = |r: Result<(), Error>| matches!(r, Err(Error::Unavailable(_)));
        let inherited = unavailable(locks.acquire(key("other"), &try_opts()).map(drop))
            && unavailable(locks.info(key("k")).map(drop))
            && unavailable(locks.is_current(&held).map(drop));
        drop(locks);
        let fresh = keylock_core::open(&url)
            .is_ok_and(|l| matches!(l.acquire(key("k"), &try_opts()), Err(Error::WouldBlock)));
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(if inherited && fresh { 0 } else { 1 }) };
    }
    assert!(
        crate::common::child_succeeded(pid, Duration::from_secs(30)),
        "the forked child misbehaved or hung"
    );
    // The parent's scope works on, and still holds its key.
    within(Duration::from_secs(20), move || {
        assert!(locks.is_current(&held).unwrap());
        locks.release(held).unwrap();
        for _ in 0..20 {
            let acq = locks.acquire(key("k"), &LockOptions::new()).unwrap();
            locks.release(acq).unwrap();
        }
    });
}

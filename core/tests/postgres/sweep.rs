//! The rows of idle keys: dropped by the sweep, and never at the cost of a grant. A key is
//! idle when no session holds or awaits its number and no holder died holding it.

use std::sync::Arc;
use std::time::Duration;

use keylock_core::{Error, LockOptions, Mode, Wait};

use crate::semantics::threads_never_overlap;
use crate::server::Server;
use crate::{key, open, wait_until, within};

/// How many rows the keylock tables hold: "keys owners holds".
fn rows(pg: &Server) -> String {
    pg.psql(
        "SELECT (SELECT count(*) FROM keylock_keys) || ' ' || \
         (SELECT count(*) FROM keylock_owners) || ' ' || (SELECT count(*) FROM keylock_holds)",
    )
    .trim()
    .to_owned()
}

/// One sweep of `prefix`, run here rather than by a scope object: how many keys it dropped.
fn sweep(pg: &Server, prefix: &str) -> String {
    pg.psql(&format!(
        "SELECT dropped FROM keylock_sweep('{prefix}', NULL, NULL, 100)"
    ))
    .trim()
    .to_owned()
}

fn shared() -> LockOptions {
    LockOptions::new().mode(Mode::Shared)
}

#[test]
fn idle_keys_leave_no_rows_and_their_fences_still_rise() {
    within(Duration::from_secs(90), || {
        let pg = Server::start();
        let url = format!("{}&sweep=50ms", pg.url("sweep"));
        let (a, b) = (open(&url), open(&url));
        let mut top = 0;
        for i in 0..100 {
            let x = a
                .acquire(key(&format!("x{i}")), &LockOptions::new())
                .unwrap();
            let s = a.acquire(key(&format!("s{i}")), &shared()).unwrap();
            top = top.max(x.fence()).max(s.fence());
            a.release(x).unwrap();
            a.release(s).unwrap();
        }
        // Kept: a key held exclusively (and awaited), one held shared, and one whose holder
        // died holding it, until the next holder has learned so.
        let held = a.acquire(key("held"), &LockOptions::new()).unwrap();
        let reader = a.acquire(key("reader"), &shared()).unwrap();
        let d = open(&format!("{}&sweep=off", pg.url("sweep")));
        let dead = d.acquire(key("died"), &LockOptions::new()).unwrap();
        top = top.max(held.fence()).max(reader.fence()).max(dead.fence());
        let b2 = Arc::clone(&b);
        let waiter = std::thread::spawn(move || {
            b2.acquire(
                key("held"),
                &LockOptions::new().wait(Wait::For(Duration::from_secs(30))),
            )
        });
        wait_until(|| a.info(key("held")).unwrap().is_some_and(|i| i.waiters == 1));
        assert_eq!(
            pg.psql(
                "SELECT count(pg_terminate_backend(w.pid)) FROM keylock_owners w \
                 JOIN keylock_keys k USING (lock_id) \
                 WHERE k.key = convert_to('died', 'UTF8') AND w.held"
            ),
            "1\n"
        );
        wait_until(|| !a.is_locked(key("died")).unwrap());
        // A key taken after the death: its rows gone show a sweep ran since. Left then: keys
        // held, reader, died; owners: held, died; holds: the reader's.
        let tick = a.acquire(key("tick"), &LockOptions::new()).unwrap();
        a.release(tick).unwrap();
        wait_until(|| rows(&pg) == "3 2 1");
        let again = a.acquire(key("died"), &LockOptions::new()).unwrap();
        assert!(
            again.owner_died(),
            "the died mark was kept for the next holder"
        );
        assert!(again.fence() > top);
        top = again.fence();
        a.release(again).unwrap();
        a.release(held).unwrap();
        let got = waiter.join().unwrap().expect("the waiter gets the key");
        assert!(got.fence() > top && !got.owner_died());
        top = got.fence();
        b.release(got).unwrap();
        // Force-unlocked keys: their old numbers' rows go too once nobody holds them.
        for (name, opts) in [("forced", LockOptions::new()), ("forced-s", shared())] {
            let old = a.acquire(key(name), &opts).unwrap();
            top = top.max(old.fence());
            let lost = a.lost_signal(&old).unwrap();
            assert!(b.force_unlock(key(name)).unwrap());
            wait_until(|| lost.is_lost());
            assert!(matches!(a.release(old), Err(Error::NotOwner)));
        }
        a.release(reader).unwrap();
        wait_until(|| rows(&pg) == "0 0 0");
        // A key made again counts its fences on from every fence before.
        for name in ["x0", "held", "died", "forced"] {
            let x = a.acquire(key(name), &LockOptions::new()).unwrap();
            assert!(x.fence() > top, "{name}: {} after {top}", x.fence());
            assert!(!x.owner_died());
            top = x.fence();
            a.release(x).unwrap();
        }
        drop(d);
    });
}

/// The race the guard closes: a call reads a key's number; the key, idle, is dropped before
/// the call asks for the number's lock; the call must not be granted the old number, which no
/// other call would ask for any more. The scope's `keylock_k1` is replaced with one that waits
/// while a row of `pause` exists: a call stops there after it read the number and before it
/// asks for the lock.
#[test]
fn a_number_read_before_its_key_was_dropped_is_never_granted() {
    within(Duration::from_secs(90), || {
        let pg = Server::start();
        let url = format!("{}&sweep=off", pg.url("race"));
        let (a, b) = (open(&url), open(&url));
        pg.psql(
            "CREATE TABLE pause (x int); \
             CREATE OR REPLACE FUNCTION keylock_k1(id bigint) RETURNS int LANGUAGE plpgsql AS $$ \
             BEGIN \
                 WHILE EXISTS (SELECT 1 FROM pause) LOOP PERFORM pg_sleep(0.01); END LOOP; \
                 RETURN (1802240000 + (id >> 32))::int; \
             END $$",
        );
        for (name, mode) in [("k-x", Mode::Exclusive), ("k-s", Mode::Shared)] {
            let opts = LockOptions::new().mode(mode).wait(Wait::No);
            let first = a.acquire(key(name), &opts).unwrap();
            a.release(first).unwrap();
            pg.psql("INSERT INTO pause VALUES (1)");
            let a2 = Arc::clone(&a);
            let caller = std::thread::spawn(move || a2.acquire(key(name), &opts));
            wait_until(|| {
                pg.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'")
                    == "1\n"
            });
            assert_eq!(sweep(&pg, "race"), "1", "{name}: the idle key was dropped");
            pg.psql("DELETE FROM pause");
            let got = caller
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{name}: the key is free: {e}"));
            assert!(
                matches!(
                    b.acquire(key(name), &LockOptions::new().wait(Wait::No)),
                    Err(Error::WouldBlock)
                ),
                "{name}: two holders, one of them on the dropped number"
            );
            assert!(a.is_current(&got).unwrap());
            a.release(got).unwrap();
            let x = b
                .acquire(key(name), &LockOptions::new().wait(Wait::No))
                .unwrap();
            b.release(x).unwrap();
            assert_eq!(sweep(&pg, "race"), "1");
        }
    });
}

/// An exclusive grant recording itself holds its owner row: the sweep keeps the key (it never
/// waits for the row), and drops it once the row is free.
#[test]
fn a_key_whose_owner_row_is_locked_is_kept() {
    within(Duration::from_secs(90), || {
        let pg = Server::start();
        let url = format!("{}&sweep=off", pg.url("locked"));
        let a = open(&url);
        let x = a.acquire(key("k"), &LockOptions::new()).unwrap();
        a.release(x).unwrap();
        assert_eq!(rows(&pg), "1 1 0");
        let blocker = "SELECT pg_sleep(60) /* row-blocker */";
        let session = "FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
                       AND query LIKE '%/* row-bl' || 'ocker */%'";
        std::thread::scope(|s| {
            let held = s.spawn(|| {
                pg.psql(&format!(
                    "BEGIN; SELECT 1 FROM keylock_owners FOR UPDATE; {blocker}; COMMIT"
                ))
            });
            wait_until(|| pg.psql(&format!("SELECT count(*) {session}")) == "1\n");
            assert_eq!(sweep(&pg, "locked"), "0");
            assert_eq!(rows(&pg), "1 1 0");
            pg.psql(&format!("SELECT pg_terminate_backend(pid) {session}"));
            assert!(held.join().is_err());
        });
        assert_eq!(sweep(&pg, "locked"), "1");
        assert_eq!(rows(&pg), "0 0 0");
    });
}

/// Threads of three scope objects, exclusive and shared, on four keys, while every scope
/// object sweeps every 5 ms: the checks of `threads_never_overlap`, and the keys were dropped
/// and made again meanwhile, and nothing is left behind.
#[test]
fn grants_stay_exclusive_while_keys_are_swept() {
    within(Duration::from_secs(180), || {
        let pg = Server::start();
        let url = format!("{}&sweep=5ms", pg.url("churn"));
        threads_never_overlap(&url, 150, 4);
        let numbers: i64 = pg
            .psql("SELECT last_value FROM keylock_lock_ids")
            .trim()
            .parse()
            .unwrap();
        eprintln!("4 keys were given {numbers} numbers over the run");
        assert!(numbers > 4, "no key was ever dropped and made again");
        // The scope objects above are gone; this one sweeps once it has taken something.
        let check = open(&url);
        let x = check.acquire(key("c0"), &LockOptions::new()).unwrap();
        check.release(x).unwrap();
        wait_until(|| rows(&pg) == "0 0 0");
    });
}

/// A round that another session's sweep of the prefix cut short is run again at the next tick,
/// though the scope object takes nothing more.
#[test]
fn a_round_cut_short_is_run_again() {
    within(Duration::from_secs(90), || {
        let pg = Server::start();
        let a = open(&format!("{}&sweep=50ms", pg.url("short")));
        let blocker = "SELECT pg_sleep(60) /* sweep-blocker */";
        let session = "FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
                       AND query LIKE '%/* sweep-bl' || 'ocker */%'";
        std::thread::scope(|s| {
            // The prefix's sweep lock, as another process's sweep holds it.
            let held = s.spawn(|| {
                pg.psql(&format!(
                    "BEGIN; SELECT pg_advisory_xact_lock(1802502144, hashtext('short')); \
                     {blocker}; COMMIT"
                ))
            });
            wait_until(|| pg.psql(&format!("SELECT count(*) {session}")) == "1\n");
            let x = a.acquire(key("k"), &LockOptions::new()).unwrap();
            a.release(x).unwrap();
            // Rounds at 50 ms ticks meanwhile, each cut short.
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(rows(&pg), "1 1 0");
            pg.psql(&format!("SELECT pg_terminate_backend(pid) {session}"));
            assert!(held.join().is_err());
        });
        wait_until(|| rows(&pg) == "0 0 0");
    });
}

/// A force-unlock that read a key's number before the key was dropped finds, once it has the
/// number's guard, a session on the old number (one that read it before the drop too, and will
/// let it go): the key has no number to move, so nothing is reported held and no row is made
/// for the old number. The scope's `keylock_g1` is replaced with one that waits while `pause`
/// names the calling session (or no session), so the force-unlock stops after its read.
#[test]
fn a_force_unlock_of_a_key_dropped_since_its_read_frees_nothing() {
    within(Duration::from_secs(90), || {
        let pg = Server::start();
        let url = format!("{}&sweep=off", pg.url("gone"));
        let (a, b) = (open(&url), open(&url));
        let x = a.acquire(key("k"), &LockOptions::new()).unwrap();
        a.release(x).unwrap();
        let id = pg.psql("SELECT lock_id FROM keylock_keys");
        let id = id.trim();
        pg.psql(
            "CREATE TABLE pause (pid int); \
             CREATE OR REPLACE FUNCTION keylock_g1(id bigint) RETURNS int LANGUAGE plpgsql AS $$ \
             BEGIN \
                 WHILE EXISTS (SELECT 1 FROM pause \
                               WHERE pid IS NULL OR pid = pg_backend_pid()) LOOP \
                     PERFORM pg_sleep(0.01); \
                 END LOOP; \
                 RETURN (1802305536 + (id >> 32))::int; \
             END $$; \
             INSERT INTO pause VALUES (NULL)",
        );
        let paused = "FROM pg_stat_activity WHERE wait_event = 'PgSleep'";
        let blocker = "SELECT pg_sleep(60) /* number-holder */";
        let holder = "FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
                      AND query LIKE '%/* number-h' || 'older */%'";
        std::thread::scope(|s| {
            let forced = s.spawn(|| b.force_unlock(key("k")));
            wait_until(|| pg.psql(&format!("SELECT count(*) {paused}")) == "1\n");
            pg.psql(&format!("UPDATE pause SET pid = (SELECT pid {paused})"));
            assert_eq!(sweep(&pg, "gone"), "1");
            // A session on the old number, as a call that read it before the drop.
            let held = s.spawn(|| {
                pg.psql(&format!(
                    "SELECT pg_advisory_lock(keylock_k1({id}), keylock_k2({id})); {blocker}"
                ))
            });
            wait_until(|| pg.psql(&format!("SELECT count(*) {holder}")) == "1\n");
            pg.psql("DELETE FROM pause");
            assert!(
                !forced.join().unwrap().unwrap(),
                "the key had no number to move"
            );
            assert_eq!(rows(&pg), "0 0 0", "no row for the old number");
            pg.psql(&format!("SELECT pg_terminate_backend(pid) {holder}"));
            assert!(held.join().is_err());
        });
        let x = a
            .acquire(key("k"), &LockOptions::new().wait(Wait::No))
            .unwrap();
        a.release(x).unwrap();
    });
}

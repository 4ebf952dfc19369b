//! The keyed semaphore on PostgreSQL: the contract every server scope keeps
//! (`tests/common/server_semaphore.rs`), and what is PostgreSQL's own: a release wakes a waiter
//! by `NOTIFY` (not at its next look), a holder or a waiter whose session ended is passed over,
//! several keys are taken all or none, and the tables keep no row of an idle key.

use std::sync::Arc;
use std::time::Duration;

use keylock_core::{Error, Mode, OpenOptions, Wait};

use crate::contract::{self, SemOpener, bounded, units};
use crate::server::Server;
use crate::{key, wait_until, within};

fn opener(server: &Arc<Server>) -> SemOpener {
    let server = Arc::clone(server);
    contract::opener(move |query| server.url(&format!("{query}&sweep=200ms")))
}

/// The rows the semaphore tables hold: (keys, holds, places in queues).
fn rows(server: &Server) -> (u64, u64, u64) {
    let out = server.psql(
        "SELECT (SELECT count(*) FROM keylock_sems) || ' ' || \
         (SELECT count(*) FROM keylock_sem_holds) || ' ' || \
         (SELECT count(*) FROM keylock_sem_queue)",
    );
    let n: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (n[0], n[1], n[2])
}

/// Every key's rows gone: its holds and places at once, the key itself at the next sweep
/// (every 200 ms in these tests, while a scope object that took or released something lives).
fn no_rows_left(server: &Server) {
    wait_until(|| rows(server) == (0, 0, 0));
}

/// As [`no_rows_left`] once every scope object of `prefix` is gone: the sweep is run here.
fn swept_clean(server: &Server, prefix: &str) {
    wait_until(|| {
        server.psql(&format!("SELECT keylock_sem_sweep('{prefix}', 1000)"));
        rows(server) == (0, 0, 0)
    });
}

#[test]
fn weights_fences_and_release_by_acquisition() {
    let server = Arc::new(Server::start());
    bounded(
        opener(&server),
        contract::weights_fences_and_release_by_acquisition,
    );
    swept_clean(&server, "sem");
}

#[test]
fn bad_input_is_refused() {
    bounded(
        opener(&Arc::new(Server::start())),
        contract::bad_input_is_refused,
    );
}

#[test]
fn a_heavy_head_is_not_passed_by_light_requests() {
    let server = Arc::new(Server::start());
    bounded(
        opener(&server),
        contract::a_heavy_head_is_not_passed_by_light_requests,
    );
    swept_clean(&server, "fifo");
}

#[test]
fn occupancy_never_exceeds_permits_across_scopes() {
    let server = Arc::new(Server::start());
    bounded(
        opener(&server),
        contract::occupancy_never_exceeds_permits_across_scopes,
    );
    swept_clean(&server, "occ");
}

#[test]
fn a_dead_holders_units_come_back_with_owner_died() {
    // A holder's session ends with its scope object: the waiter finds it dead at its next look
    // (a third of the 1 s lease), or at once if it looks after the session ended.
    let server = Arc::new(Server::start());
    bounded(opener(&server), |o| {
        contract::a_dead_holders_units_come_back_with_owner_died(o, "dead&lease=1s")
    });
    swept_clean(&server, "dead");
}

#[test]
fn a_force_released_permit_fires_its_lost_signal() {
    // The holder's process hears of it at once (NOTIFY on its main session).
    bounded(opener(&Arc::new(Server::start())), |o| {
        contract::a_force_released_permit_fires_its_lost_signal(o, "lost&lease=600s")
    });
}

/// A release wakes the waiting request by `NOTIFY`: with a 600 s lease its next look would be
/// 200 s away, and the grant must come well within the test's bound.
#[test]
fn a_release_wakes_a_waiter_at_once() {
    // Bounded: a hang fails as a deadlock.
    within(Duration::from_secs(180), || {
        let server = Server::start();
        let url = server.url("wake&lease=600s&sweep=200ms");
        let sem = |_| keylock_core::open_with(&url, &OpenOptions::new().permits(2)).unwrap();
        let (a, b) = (sem(0), sem(1));
        for round in 0..5 {
            let held = a.acquire(key("k"), &units(2)).unwrap();
            let w = Arc::clone(&b);
            let waiter = std::thread::spawn(move || {
                let got = w.acquire(key("k"), &units(1)).unwrap();
                w.release(got).unwrap();
            });
            wait_until(|| a.info(key("k")).unwrap().is_some_and(|i| i.waiters == 1));
            // The waiting request counts in its process's stats (once its process has heard
            // that it was queued, which the server shows a moment before).
            wait_until(|| b.stats().unwrap().waiting_here == 1);
            a.release(held).unwrap();
            within(Duration::from_secs(20), move || waiter.join().unwrap());
            assert_eq!(b.stats().unwrap().waiting_here, 0, "round {round}");
            let (_, holds, queued) = rows(&server);
            assert_eq!((holds, queued), (0, 0), "round {round}");
        }
        // The scope objects live, and took and released: their sweep drops the idle key.
        no_rows_left(&server);
    });
}

/// A waiter at the head of the queue whose session ends is passed over: the request behind it
/// is granted once units are freed.
#[test]
fn a_waiter_whose_session_ended_is_passed_over() {
    // Bounded: a hang fails as a deadlock.
    within(Duration::from_secs(180), || {
        let server = Server::start();
        let url = server.url("gone&lease=3s&sweep=200ms");
        let sem = |_| keylock_core::open_with(&url, &OpenOptions::new().permits(4)).unwrap();
        let (a, b, c) = (sem(0), sem(1), sem(2));
        let held = a.acquire(key("k"), &units(3)).unwrap();
        let heavy = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.acquire(key("k"), &units(4)))
        };
        wait_until(|| a.info(key("k")).unwrap().is_some_and(|i| i.waiters == 1));
        let light = {
            let c = Arc::clone(&c);
            std::thread::spawn(move || c.acquire(key("k"), &units(1)))
        };
        wait_until(|| a.info(key("k")).unwrap().is_some_and(|i| i.waiters == 2));
        // The heavy waiter's session ends (its connection is cut by the server).
        server.psql("SELECT pg_terminate_backend(pid) FROM keylock_sem_queue WHERE units = 4");
        let got = within(Duration::from_secs(20), move || light.join().unwrap()).unwrap();
        assert_eq!(got.weight(), 1);
        c.release(got).unwrap();
        let lost = within(Duration::from_secs(20), move || heavy.join().unwrap());
        assert!(lost.is_err(), "the request whose session ended: {lost:?}");
        a.release(held).unwrap();
        no_rows_left(&server);
    });
}

/// `info` counts only the holders and waiters whose sessions live, as the next acquire does: a
/// holder whose session ended, and then a waiter whose session ended, are not shown (with a
/// 600 s lease nobody looks again meanwhile, so their rows stay until the next acquire).
#[test]
fn info_counts_only_live_sessions() {
    // Bounded: a hang fails as a deadlock.
    within(Duration::from_secs(180), || {
        let server = Server::start();
        let url = server.url("live&lease=600s&sweep=off");
        let sem = |_| keylock_core::open_with(&url, &OpenOptions::new().permits(3)).unwrap();
        let (a, b, c) = (sem(0), sem(1), sem(2));
        let gone = a.acquire(key("k"), &units(2)).unwrap();
        let stays = c.acquire(key("k"), &units(1)).unwrap();
        let before = c.info(key("k")).unwrap().unwrap();
        assert_eq!((before.units, before.holders), (3, 2));
        server.psql(&format!(
            "SELECT pg_terminate_backend(pid) FROM keylock_sem_holds WHERE fence = {}",
            gone.fence()
        ));
        wait_until(|| c.info(key("k")).unwrap().unwrap().units == 1);
        let after = c.info(key("k")).unwrap().unwrap();
        assert_eq!((after.holders, after.fence), (1, stays.fence()));
        // A waiter behind a full key, whose session then ends.
        let full = c.acquire(key("k"), &units(2)).unwrap();
        let waiter = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.acquire(key("k"), &units(1)))
        };
        wait_until(|| c.info(key("k")).unwrap().unwrap().waiters == 1);
        server.psql("SELECT pg_terminate_backend(pid) FROM keylock_sem_queue");
        wait_until(|| c.info(key("k")).unwrap().unwrap().waiters == 0);
        // Its process hears that its session ended at once, not at its next look (200 s).
        let lost = within(Duration::from_secs(20), move || waiter.join().unwrap());
        assert!(matches!(lost, Err(Error::Unavailable(_))), "{lost:?}");
        assert_eq!(c.info(key("k")).unwrap().unwrap().units, 3);
        c.release(full).unwrap();
        c.release(stays).unwrap();
        assert_eq!(
            c.info(key("k")).unwrap(),
            None,
            "the dead holder is not counted"
        );
        drop(a);
    });
}

/// Several keys are taken all or none: a request that times out on its second key gives back
/// what it took of the first.
#[test]
fn several_keys_are_taken_all_or_none() {
    // Bounded: a hang fails as a deadlock.
    within(Duration::from_secs(180), || {
        let server = Server::start();
        let url = server.url("many&sweep=200ms");
        let sem = |_| keylock_core::open_with(&url, &OpenOptions::new().permits(2)).unwrap();
        let (a, b) = (sem(0), sem(1));
        let held = a.acquire(key("b"), &units(2)).unwrap();
        let timed = units(1).wait(Wait::For(Duration::from_millis(300)));
        assert_eq!(
            b.acquire_many(
                &[(key("a"), Mode::Shared), (key("b"), Mode::Shared)],
                &timed
            )
            .unwrap_err(),
            Error::TimedOut
        );
        // All of `a` is free again (the request's units there were given back).
        wait_until(|| match a.acquire(key("a"), &units(2).wait(Wait::No)) {
            Ok(x) => {
                a.release(x).unwrap();
                true
            }
            Err(e) => {
                assert_eq!(e, Error::WouldBlock);
                false
            }
        });
        a.release(held).unwrap();
        let both = b
            .acquire_many(
                &[(key("a"), Mode::Shared), (key("b"), Mode::Shared)],
                &units(1),
            )
            .unwrap();
        assert_eq!(both.len(), 2);
        for x in both {
            b.release(x).unwrap();
        }
        no_rows_left(&server);
    });
}

/// Permits recorded for a prefix that are not a number of permits (a row someone changed) are
/// refused as such when a semaphore is opened to be looked at, never taken as some number.
#[test]
fn recorded_permits_that_are_not_a_number_are_refused() {
    let server = Server::start();
    let url = server.url("odd");
    drop(keylock_core::open_with(&url, &OpenOptions::new().permits(2)).unwrap());
    for bad in [0, -3, 40000] {
        server.psql(&format!(
            "UPDATE keylock_permits SET permits = {bad} WHERE prefix = 'odd'"
        ));
        let seen = keylock_core::inspect_semaphore(&url);
        assert!(
            matches!(&seen, Err(Error::Incompatible(m)) if m.contains("not a number of permits")),
            "{bad}: {:?}",
            seen.map(|s| s.permits())
        );
    }
    server.psql("UPDATE keylock_permits SET permits = 5 WHERE prefix = 'odd'");
    let seen = keylock_core::inspect_semaphore(&url).unwrap();
    assert_eq!(seen.permits(), Some(5));
}

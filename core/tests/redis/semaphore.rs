//! The keyed semaphore on Redis: the contract every server scope keeps
//! (`tests/common/server_semaphore.rs`), and what is Redis's own: a killed process's units
//! coming back within its lease, the names a key leaves, one script per acquire and release.

use std::sync::Arc;
use std::time::Duration;

use keylock_core::{Error, OpenOptions, Wait};

use crate::children::{read_tagged, spawn};
use crate::contract::{self, SemOpener, bounded, units};
use crate::{Server, key, names_under, within};

fn opener(server: &Arc<Server>) -> SemOpener {
    let server = Arc::clone(server);
    contract::opener(move |query| server.url(&format!("prefix={query}")))
}

#[test]
fn weights_fences_and_release_by_acquisition() {
    let open = opener(&Arc::new(Server::start()));
    bounded(open, contract::weights_fences_and_release_by_acquisition);
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
    let open = opener(&Arc::new(Server::start()));
    bounded(open, contract::a_heavy_head_is_not_passed_by_light_requests);
}

#[test]
fn occupancy_never_exceeds_permits_across_scopes() {
    let open = opener(&Arc::new(Server::start()));
    bounded(
        open,
        contract::occupancy_never_exceeds_permits_across_scopes,
    );
}

#[test]
fn a_dead_holders_units_come_back_with_owner_died() {
    let server = Arc::new(Server::start());
    bounded(opener(&server), |o| {
        contract::a_dead_holders_units_come_back_with_owner_died(o, "dead&lease=300ms");
    });
    // Every unit back: the key keeps no names (the scope's permits and fence floor remain).
    assert_eq!(
        names_under(&server, "dead"),
        ["{dead}:fence", "{dead}:permits"]
    );
}

#[test]
fn a_killed_holders_units_come_back_within_its_lease() {
    let server = Server::start();
    let url = server.url("prefix=kill&lease=1s");
    let mut child = spawn("hold-units", &[("KEYLOCK_REDIS_URL", url.clone())]);
    let fence: u64 = read_tagged(&mut child, "@fence").parse().unwrap();
    // This process's holds have a long lease: a loaded machine may delay a renewal past 1 s.
    let long = server.url("prefix=kill&lease=30s");
    let sem = keylock_core::open_with(&long, &OpenOptions::new().permits(3)).unwrap();
    // One unit is free while the child holds two.
    let one = sem.acquire(key("gpu"), &units(1).wait(Wait::No)).unwrap();
    assert_eq!(
        sem.acquire(key("gpu"), &units(2).wait(Wait::No))
            .unwrap_err(),
        Error::WouldBlock
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let got = within(Duration::from_secs(30), move || {
        let acq = sem.acquire(
            key("gpu"),
            &units(2).wait(Wait::For(Duration::from_secs(3))),
        );
        (acq, sem)
    });
    let (two, sem) = got;
    let two = two.expect("the dead holder's units come back within its lease + 2 s");
    assert!(two.owner_died(), "the next holder learns a holder died");
    assert!(two.fence() > fence && two.fence() > one.fence());
    assert_eq!(sem.info(key("gpu")).unwrap().unwrap().units, 3);
    sem.release(two).unwrap();
    sem.release(one).unwrap();
    assert_eq!(sem.info(key("gpu")).unwrap(), None);
}

/// The scripts Redis ran (`EVALSHA` calls), from its own counters.
fn evalsha_calls(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn an_uncontended_acquire_and_a_release_are_one_round_trip_each() {
    const OPS: u64 = 200;
    let server = Server::start();
    // A long lease: its renewals (every third of it) never fall inside the loop.
    let sem = keylock_core::open_with(
        &server.url("prefix=rt&lease=120s"),
        &OpenOptions::new().permits(2),
    )
    .unwrap();
    let mut con = redis::Client::open(server.url("").as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let before = evalsha_calls(&mut con);
    for i in 0..OPS {
        let k = format!("k{}", i % 8);
        let acq = sem.acquire(key(&k), &units(1 + (i % 2) as u32)).unwrap();
        sem.release(acq).unwrap();
    }
    assert_eq!(evalsha_calls(&mut con) - before, 2 * OPS);
}

#[test]
fn a_force_released_permit_fires_its_lost_signal() {
    // The holder hears of it at its renewal, every third of the lease.
    bounded(opener(&Arc::new(Server::start())), |o| {
        contract::a_force_released_permit_fires_its_lost_signal(o, "lost&lease=300ms");
    });
}

/// Permits recorded under a prefix that are not a number of permits (another program's key,
/// or a corrupted one) are refused as such when a semaphore is opened to be looked at, never
/// taken as some number.
#[test]
fn recorded_permits_that_are_not_a_number_are_refused() {
    let server = Server::start();
    let mut con = server.client();
    // Writes the prefix's permits record anew, with `cmd` (SET, or RPUSH for a list).
    let mut record = |cmd: &str, value: &str| {
        let _: () = redis::cmd("DEL")
            .arg("{odd}:permits")
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd(cmd)
            .arg("{odd}:permits")
            .arg(value)
            .query(&mut con)
            .unwrap();
    };
    let seen = || keylock_core::inspect_semaphore(&server.url("prefix=odd"));
    for bad in ["many", "0", "-3", "40000", ""] {
        record("SET", bad);
        let s = seen();
        assert!(
            matches!(&s, Err(Error::Incompatible(m)) if m.contains("not a number of permits")),
            "{bad:?}: {:?}",
            s.map(|s| s.permits())
        );
    }
    // A record of another type than a string.
    record("RPUSH", "3");
    let s = seen();
    assert!(
        matches!(&s, Err(Error::Unavailable(m)) if m.contains("WRONGTYPE")),
        "a list: {:?}",
        s.map(|s| s.permits())
    );
    record("SET", "5");
    assert_eq!(seen().unwrap().permits(), Some(5));
}

/// Opening a semaphore to look at it reads the recorded permits and writes nothing: it runs
/// no script (the one that records permits could write a record that vanished).
#[test]
fn an_inspector_runs_no_script() {
    let server = Server::start();
    let url = server.url("prefix=seen");
    let s = keylock_core::open_with(&url, &OpenOptions::new().permits(4)).unwrap();
    drop(s);
    let mut con = server.client();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    let seen = keylock_core::inspect_semaphore(&url).unwrap();
    assert_eq!(seen.permits(), Some(4));
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    let ran: Vec<&str> = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_eval") || l.starts_with("cmdstat_fcall"))
        .collect();
    assert!(ran.is_empty(), "an inspector ran a script: {ran:?}");
    assert!(stats.contains("cmdstat_get:"), "no GET seen: {stats}");
}

//! The keyed semaphore on Redis: units shared by every process that opens the same prefix with
//! the same permits, counted inside the critical section (never more than the permits), strict
//! FIFO with a heavy request at the head, a fence per acquisition, force-release, a dead
//! holder's units coming back with `owner_died`, and a permits mismatch refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use keylock_core::{Error, KeyedLock, LockKey, LockOptions, Mode, OpenOptions, Wait};

use crate::children::{read_tagged, spawn};
use crate::{Server, key, names_under, wait_until, within};

fn open_sem(server: &Server, query: &str, permits: u32) -> Arc<dyn KeyedLock> {
    keylock_core::open_with(&server.url(query), &OpenOptions::new().permits(permits))
        .expect("open the Redis semaphore")
}

fn units(w: u32) -> LockOptions {
    LockOptions::new().weight(w)
}

#[test]
fn weights_fences_and_release_by_acquisition() {
    let server = Server::start();
    let a = open_sem(&server, "prefix=sem", 3);
    let b = open_sem(&server, "prefix=sem", 3);
    assert_eq!(a.permits(), Some(3));
    let two = a.acquire(key("k"), &units(2)).unwrap();
    let one = b.acquire(key("k"), &units(1).wait(Wait::No)).unwrap();
    assert!(one.fence() > two.fence(), "a fence per acquisition");
    assert_eq!((two.weight(), one.weight()), (2, 1));
    assert_eq!(
        b.acquire(key("k"), &units(1).wait(Wait::No)).unwrap_err(),
        Error::WouldBlock
    );
    let timed = units(1).wait(Wait::For(Duration::from_millis(150)));
    assert_eq!(a.acquire(key("k"), &timed).unwrap_err(), Error::TimedOut);
    let info = b.info(key("k")).unwrap().unwrap();
    assert_eq!((info.units, info.holders, info.mode), (3, 2, Mode::Shared));
    // Another key, and the same key in a lock scope of the same prefix, are never blocked.
    let other = b.acquire(key("other"), &units(3)).unwrap();
    let lock = crate::open(&server, "prefix=sem");
    let l = lock
        .acquire(key("k"), &LockOptions::new().wait(Wait::No))
        .unwrap();
    lock.release(l).unwrap();
    b.release(other).unwrap();
    a.release(two).unwrap();
    assert_eq!(b.info(key("k")).unwrap().unwrap().units, 1);
    // Force-release ends every hold; the stale release is refused and frees nobody later.
    assert!(a.force_unlock(key("k")).unwrap());
    let next = a.acquire(key("k"), &units(3)).unwrap();
    assert!(
        next.fence() > one.fence() + 1,
        "the fence rises across a force-release"
    );
    assert_eq!(b.release(one).unwrap_err(), Error::NotOwner);
    assert_eq!(a.info(key("k")).unwrap().unwrap().units, 3);
    a.release(next).unwrap();
    assert_eq!(a.info(key("k")).unwrap(), None);
}

#[test]
fn bad_input_is_refused() {
    let server = Server::start();
    let a = open_sem(&server, "prefix=bad", 2);
    for w in [0, 3] {
        assert!(matches!(
            a.acquire(key("k"), &units(w)),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        a.acquire(LockKey::name(b"k"), &units(1)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.steal(key("k"), &LockOptions::new()),
        Err(Error::InvalidArgument(_))
    ));
    // Every process that opens the prefix must agree on the permits.
    let other = keylock_core::open_with(&server.url("prefix=bad"), &OpenOptions::new().permits(3));
    assert!(matches!(other, Err(Error::Incompatible(_))), "{other:?}");
    // A lock scope takes weight 1 only.
    let lock = crate::open(&server, "prefix=bad");
    assert!(matches!(
        lock.acquire(key("k"), &units(2)),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(a.info(key("k")).unwrap(), None);
}

#[test]
fn a_heavy_head_is_not_passed_by_light_requests() {
    let server = Server::start();
    let a = open_sem(&server, "prefix=fifo", 4);
    let b = open_sem(&server, "prefix=fifo", 4);
    let c = open_sem(&server, "prefix=fifo", 4);
    let held = a.acquire(key("k"), &units(3)).unwrap();
    let heavy = {
        let b = Arc::clone(&b);
        std::thread::spawn(move || b.acquire(key("k"), &units(4)))
    };
    wait_until(|| a.info(key("k")).unwrap().unwrap().waiters != 0);
    // One unit is free, but the heavy request is ahead.
    let light = units(1).wait(Wait::For(Duration::from_millis(200)));
    assert_eq!(c.acquire(key("k"), &light).unwrap_err(), Error::TimedOut);
    a.release(held).unwrap();
    let got = within(Duration::from_secs(20), move || heavy.join().unwrap()).unwrap();
    assert_eq!(got.weight(), 4);
    b.release(got).unwrap();
    assert_eq!(a.info(key("k")).unwrap(), None);
}

#[test]
fn occupancy_never_exceeds_permits_across_scopes() {
    const PERMITS: u32 = 3;
    const THREADS: usize = 4;
    const ROUNDS: usize = 40;
    let server = Server::start();
    let scopes: Vec<Arc<dyn KeyedLock>> = (0..2)
        .map(|_| open_sem(&server, "prefix=occ", PERMITS))
        .collect();
    let inside = Arc::new(AtomicU32::new(0));
    let max = Arc::new(AtomicU32::new(0));
    let (done, timed_out) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let scope = Arc::clone(&scopes[t % 2]);
            let (inside, max) = (Arc::clone(&inside), Arc::clone(&max));
            let (done, timed_out) = (Arc::clone(&done), Arc::clone(&timed_out));
            std::thread::spawn(move || {
                for i in 0..ROUNDS {
                    let w = 1 + ((t + i) % 3) as u32;
                    let opts = match i % 4 {
                        3 => units(w).wait(Wait::For(Duration::from_millis(5))),
                        _ => units(w),
                    };
                    match scope.acquire(key("k"), &opts) {
                        Ok(acq) => {
                            let now = inside.fetch_add(w, SeqCst) + w;
                            max.fetch_max(now, SeqCst);
                            assert!(now <= PERMITS, "{now} units inside");
                            std::thread::sleep(Duration::from_micros(300));
                            inside.fetch_sub(w, SeqCst);
                            scope.release(acq).unwrap();
                            done.fetch_add(1, SeqCst);
                        }
                        Err(e) => {
                            assert_eq!(e, Error::TimedOut);
                            timed_out.fetch_add(1, SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    within(Duration::from_secs(120), move || {
        for t in threads {
            t.join().unwrap();
        }
    });
    assert_eq!(done.load(SeqCst) + timed_out.load(SeqCst), THREADS * ROUNDS);
    assert!(max.load(SeqCst) <= PERMITS);
    assert!(
        max.load(SeqCst) > 1,
        "holders overlapped as the permits allow"
    );
    assert_eq!(scopes[0].info(key("k")).unwrap(), None);
}

#[test]
fn a_dead_holders_units_come_back_with_owner_died() {
    let server = Server::start();
    let dying = open_sem(&server, "prefix=dead&lease=300ms", 2);
    let b = open_sem(&server, "prefix=dead&lease=300ms", 2);
    let held = dying.acquire(key("k"), &units(2)).unwrap();
    let fence = held.fence();
    // The holder's scope goes away without releasing (a record releases nothing when it is
    // dropped): its renewals stop.
    let _ = held;
    drop(dying);
    let next = within(Duration::from_secs(20), move || {
        let got = b.acquire(key("k"), &units(1)).unwrap();
        (b, got)
    });
    let (b, got) = next;
    assert!(
        got.owner_died(),
        "the next holder learns its predecessor died"
    );
    assert!(got.fence() > fence);
    b.release(got).unwrap();
    assert_eq!(b.info(key("k")).unwrap(), None);
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
    let sem = open_sem(&server, "prefix=rt&lease=120s", 2);
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
    let server = Server::start();
    let holder = open_sem(&server, "prefix=lost&lease=300ms", 2);
    let other = open_sem(&server, "prefix=lost&lease=300ms", 2);
    let acq = holder.acquire(key("k"), &units(2)).unwrap();
    let lost = holder
        .lost_signal(&acq)
        .expect("a Redis permit has a lost signal");
    assert!(!lost.is_lost());
    assert!(other.force_unlock(key("k")).unwrap());
    // The holder's renewal (every third of the lease) finds its token gone.
    wait_until(|| lost.is_lost());
    assert!(!holder.is_current(&acq).unwrap());
    assert!(matches!(
        holder.release(acq),
        Err(Error::NotOwner | Error::LeaseExpired)
    ));
    // The units were free for the next holder all along.
    let next = other.acquire(key("k"), &units(2).wait(Wait::No)).unwrap();
    other.release(next).unwrap();
}

//! A holder that releases and re-takes a key in a tight loop, in this process, against one
//! waiting thread: the loop may take the key ahead of the waiter (it never sleeps; the waiter
//! must wake up first), but the waiter gets in while the loop goes on, whether by winning the
//! race after a notify or by the entry's fairness hand-off (`FAIR_AFTER`; the clock itself is
//! tested in `wait`'s unit tests), and the two are never inside together.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Occupancy, within};
use keylock_core::{KeyedLock, LockKey, LockOptions, OpenOptions, open_with};

const KEY: LockKey<'static> = LockKey::new(b"hot");
const LIMIT: Duration = Duration::from_secs(30);

/// The looping holder against one waiting thread: the waiter gets the key while the loop
/// goes on, and nobody is ever inside with another. Returns the loop's rounds.
fn waiter_gets_in(locks: Arc<dyn KeyedLock>) -> u64 {
    within(LIMIT, move || {
        let plain = LockOptions::new();
        let occupancy = Arc::new(Occupancy::new(1));
        let got = Arc::new(AtomicBool::new(false));
        let mut held = locks.acquire(KEY, &plain).unwrap();
        let mut inside = occupancy.hold(0);
        let waiter = {
            let (locks, occupancy, got) =
                (Arc::clone(&locks), Arc::clone(&occupancy), Arc::clone(&got));
            std::thread::spawn(move || {
                let acq = locks.acquire(KEY, &LockOptions::new()).unwrap();
                let inside = occupancy.hold(0);
                got.store(true, Ordering::SeqCst);
                inside.complete();
                locks.release(acq).unwrap();
            })
        };
        while locks.info(KEY).unwrap().map_or(0, |i| i.waiters) < 1 {
            std::thread::yield_now();
        }
        let mut rounds = 0u64;
        while !got.load(Ordering::SeqCst) {
            inside.complete();
            locks.release(held).unwrap();
            held = locks.acquire(KEY, &plain).unwrap();
            inside = occupancy.hold(0);
            rounds += 1;
        }
        inside.complete();
        locks.release(held).unwrap();
        waiter.join().unwrap();
        occupancy.check();
        rounds
    })
}

#[test]
fn a_looping_holder_does_not_starve_a_waiting_thread() {
    for (kind, options) in [
        ("pool", OpenOptions::new()),
        ("striped", OpenOptions::new().stripes(64)),
    ] {
        let rounds = waiter_gets_in(open_with("local:", &options).unwrap());
        assert!(rounds > 0, "{kind}: the loop never released");
    }
}

//! A holder that releases and re-takes a key in a tight loop, in this process, against one
//! waiting thread: the loop may take the key ahead of the waiter (it never sleeps; the waiter
//! must wake up first), but the waiter gets in while the loop goes on, whether by winning the
//! race after a notify or by the entry's fairness hand-off (`FAIR_AFTER`; the clock itself is
//! tested in `wait`'s unit tests), and the two are never inside together.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use common::within;
use keylock_core::{KeyedLock, LockKey, LockOptions, OpenOptions, open_with};

const KEY: LockKey<'static> = LockKey::new(b"hot");
const LIMIT: Duration = Duration::from_secs(30);

/// Counts a holder in, checking that nobody else is inside (`leave` counts it out before its
/// release).
fn enter(inside: &AtomicU32) {
    assert_eq!(
        inside.fetch_add(1, Ordering::SeqCst),
        0,
        "two holders at once"
    );
}

fn leave(inside: &AtomicU32) {
    inside.fetch_sub(1, Ordering::SeqCst);
}

/// The looping holder against one waiting thread: the waiter gets the key while the loop
/// goes on, and the two are never inside together. Returns the loop's rounds.
fn waiter_gets_in(locks: Arc<dyn KeyedLock>) -> u64 {
    within(LIMIT, move || {
        let plain = LockOptions::new();
        let inside = Arc::new(AtomicU32::new(0));
        let got = Arc::new(AtomicBool::new(false));
        let mut held = locks.acquire(KEY, &plain).unwrap();
        enter(&inside);
        let waiter = {
            let (locks, inside, got) = (Arc::clone(&locks), Arc::clone(&inside), Arc::clone(&got));
            std::thread::spawn(move || {
                let acq = locks.acquire(KEY, &LockOptions::new()).unwrap();
                enter(&inside);
                got.store(true, Ordering::SeqCst);
                leave(&inside);
                locks.release(acq).unwrap();
            })
        };
        while locks.info(KEY).unwrap().map_or(0, |i| i.waiters) < 1 {
            std::thread::yield_now();
        }
        let rounds = AtomicU64::new(0);
        while !got.load(Ordering::SeqCst) {
            leave(&inside);
            locks.release(held).unwrap();
            held = locks.acquire(KEY, &plain).unwrap();
            enter(&inside);
            rounds.fetch_add(1, Ordering::Relaxed);
        }
        leave(&inside);
        locks.release(held).unwrap();
        waiter.join().unwrap();
        assert_eq!(inside.load(Ordering::SeqCst), 0);
        rounds.load(Ordering::Relaxed)
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

//! Keyed semaphores in the host scope (`shm:NAME` opened with `permits`), in one process: two
//! opens of one region act as two processes (each open has its own process slot). Exact counts
//! and orders, every test under a deadline so that a hang fails it; no timing assertions. A
//! holder killed with SIGKILL is in `shm_procs.rs`.
#![cfg(all(feature = "shm", target_os = "linux"))]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use common::within;
use keylock_core::shm;
use keylock_core::{Error, KeyedLock, LockKey, LockOptions, Mode, OpenOptions, Wait};

const LIMIT: Duration = Duration::from_secs(60);

/// A region name unique to this test run, unlinked when dropped.
struct Name(String);

impl Name {
    fn new(test: &str) -> Name {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "sem-{}-{test}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let _ = shm::unlink(&name);
        Name(name)
    }

    fn scoped(&self) -> String {
        format!("shm:{}", self.0)
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = shm::unlink(&self.0);
    }
}

fn sem(name: &Name, permits: u32) -> Arc<dyn KeyedLock> {
    keylock_core::open_with(&name.scoped(), &OpenOptions::new().permits(permits)).unwrap()
}

fn k(bytes: &[u8]) -> LockKey<'_> {
    LockKey::new(bytes)
}

fn w(weight: u32) -> LockOptions {
    LockOptions::new().weight(weight)
}

fn try_w(weight: u32) -> LockOptions {
    w(weight).wait(Wait::No)
}

/// Waits (under the test's deadline) until `key` has `waiters` waiters.
fn until_waiters(lock: &dyn KeyedLock, key: &[u8], waiters: usize) {
    while lock
        .info(k(key))
        .unwrap()
        .is_none_or(|i| i.waiters < waiters)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn units_are_counted_per_key_across_opens() {
    within(LIMIT, || {
        let n = Name::new("units");
        let a = sem(&n, 3);
        let b = sem(&n, 3);
        assert_eq!((a.permits(), b.permits()), (Some(3), Some(3)));
        let two = a.acquire(k(b"gpu"), &w(2)).unwrap();
        assert_eq!((two.weight(), two.mode()), (2, Mode::Shared));
        let one = b.acquire(k(b"gpu"), &try_w(1)).unwrap();
        assert_eq!(one.weight(), 1);
        assert_eq!(
            b.acquire(k(b"gpu"), &try_w(1)).unwrap_err(),
            Error::WouldBlock
        );
        // Another key has units of its own.
        let other = b.acquire(k(b"cpu"), &try_w(3)).unwrap();
        let info = a.info(k(b"gpu")).unwrap().unwrap();
        assert_eq!((info.units, info.holders, info.waiters), (3, 2, 0));
        assert!(a.would_wait(k(b"gpu"), &w(1)).unwrap());
        a.release(two).unwrap();
        assert!(!a.would_wait(k(b"gpu"), &w(2)).unwrap());
        assert!(a.would_wait(k(b"gpu"), &w(3)).unwrap());
        let info = b.info(k(b"gpu")).unwrap().unwrap();
        assert_eq!((info.units, info.holders), (1, 1));
        let stats = a.stats().unwrap();
        assert_eq!((stats.held, stats.shared_holds), (Some(2), Some(4)));
        b.release(one).unwrap();
        b.release(other).unwrap();
        assert_eq!(a.info(k(b"gpu")).unwrap(), None);
    });
}

#[test]
fn threads_of_two_opens_never_hold_more_than_the_permits() {
    const PERMITS: u32 = 4;
    const THREADS: usize = 6;
    const ROUNDS: usize = 150;
    within(LIMIT, || {
        let n = Name::new("threads");
        let opens = [sem(&n, PERMITS), sem(&n, PERMITS)];
        let inside = Arc::new(AtomicU32::new(0));
        let peak = Arc::new(AtomicU32::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let lock = Arc::clone(&opens[t % 2]);
                let (inside, peak, done) = (inside.clone(), peak.clone(), done.clone());
                std::thread::spawn(move || {
                    for i in 0..ROUNDS {
                        let weight = 1 + ((t + i) % 3) as u32;
                        let key = if i % 5 == 0 { &b"other"[..] } else { b"hot" };
                        let acq = if i % 7 == 0 {
                            let fut = Arc::clone(&lock).acquire_async(k(key), &w(weight));
                            futures::executor::block_on(fut).unwrap()
                        } else {
                            lock.acquire(k(key), &w(weight)).unwrap()
                        };
                        assert_eq!(acq.weight(), weight);
                        if key == b"hot" {
                            let now = inside.fetch_add(weight, Ordering::SeqCst) + weight;
                            assert!(now <= PERMITS, "{now} units held of {PERMITS}");
                            peak.fetch_max(now, Ordering::SeqCst);
                            std::thread::yield_now();
                            inside.fetch_sub(weight, Ordering::SeqCst);
                        }
                        lock.release(acq).unwrap();
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), THREADS * ROUNDS);
        assert!(peak.load(Ordering::SeqCst) <= PERMITS);
        assert_eq!(opens[0].info(k(b"hot")).unwrap(), None);
        assert_eq!(opens[1].stats().unwrap().waiting, Some(0));
    });
}

#[test]
fn a_heavy_waiter_at_the_head_is_not_passed() {
    within(LIMIT, || {
        let n = Name::new("fifo");
        let a = sem(&n, 3);
        let b = sem(&n, 3);
        let one = a.acquire(k(b"q"), &w(1)).unwrap();
        // The heavy request waits for all 3 units.
        let heavy = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.acquire(k(b"q"), &w(3)).unwrap())
        };
        until_waiters(&*a, b"q", 1);
        // 2 units are free, but a light request may not pass the heavy one: neither a try
        // nor a timed acquire, from either open.
        assert_eq!(
            a.acquire(k(b"q"), &try_w(1)).unwrap_err(),
            Error::WouldBlock
        );
        let timed = w(1).wait(Wait::For(Duration::from_millis(30)));
        assert_eq!(a.acquire(k(b"q"), &timed).unwrap_err(), Error::TimedOut);
        assert_eq!(b.acquire(k(b"q"), &timed).unwrap_err(), Error::TimedOut);
        // A light waiter queues behind it, and goes after it.
        let light = {
            let a = Arc::clone(&a);
            std::thread::spawn(move || a.acquire(k(b"q"), &w(1)).unwrap())
        };
        until_waiters(&*a, b"q", 2);
        a.release(one).unwrap();
        let heavy = heavy.join().unwrap();
        assert_eq!(heavy.weight(), 3);
        let info = a.info(k(b"q")).unwrap().unwrap();
        assert_eq!((info.units, info.waiters), (3, 1));
        b.release(heavy).unwrap();
        let light = light.join().unwrap();
        a.release(light).unwrap();
        assert_eq!(a.info(k(b"q")).unwrap(), None);
    });
}

#[test]
fn each_acquisition_has_a_fence_of_its_own_rising_per_key() {
    within(LIMIT, || {
        let n = Name::new("fences");
        let a = sem(&n, 5);
        let b = sem(&n, 5);
        let mut last = 0;
        let mut held = Vec::new();
        for i in 0..5u32 {
            let by = if i % 2 == 0 { &a } else { &b };
            let acq = by.acquire(k(b"f"), &w(1)).unwrap();
            assert!(acq.fence() > last, "fence {} after {last}", acq.fence());
            last = acq.fence();
            held.push((by, acq));
        }
        assert_eq!(a.info(k(b"f")).unwrap().unwrap().fence, last);
        for (by, acq) in held.drain(..) {
            by.release(acq).unwrap();
        }
        let again = a.acquire(k(b"f"), &w(5)).unwrap();
        assert!(again.fence() > last);
        a.release(again).unwrap();
    });
}

#[test]
fn force_unlock_ends_every_hold_and_stale_releases_are_refused() {
    within(LIMIT, || {
        let n = Name::new("force");
        let a = sem(&n, 3);
        let b = sem(&n, 3);
        let one = a.acquire(k(b"f"), &w(1)).unwrap();
        let two = b.acquire(k(b"f"), &w(2)).unwrap();
        let top = two.fence().max(one.fence());
        assert!(b.force_unlock(k(b"f")).unwrap());
        assert!(!a.is_current(&one).unwrap());
        assert_eq!(a.info(k(b"f")).unwrap(), None);
        // A newcomer gets all the units, with a higher fence.
        let all = a.acquire(k(b"f"), &try_w(3)).unwrap();
        assert!(all.fence() > top);
        // The stale releases free nothing.
        assert_eq!(a.release(one).unwrap_err(), Error::NotOwner);
        assert_eq!(b.release(two).unwrap_err(), Error::NotOwner);
        assert_eq!(a.info(k(b"f")).unwrap().unwrap().units, 3);
        assert!(a.is_current(&all).unwrap());
        a.release(all).unwrap();
        assert!(!b.force_unlock(k(b"f")).unwrap(), "nothing held");
    });
}

#[test]
fn permits_must_match_at_every_open() {
    let n = Name::new("mismatch");
    let _a = sem(&n, 3);
    for (opts, expected) in [
        (OpenOptions::new().permits(4), "a semaphore of 3 permits"),
        (OpenOptions::new(), "a lock, not a semaphore"),
    ] {
        match keylock_core::open_with(&n.scoped(), &opts) {
            Err(Error::Incompatible(what)) => {
                assert!(what.contains(expected), "{what}");
                assert!(what.contains(&n.0), "{what}");
            }
            other => panic!("{opts:?}: {other:?}"),
        }
    }
    // A lock region opened as a semaphore.
    let l = Name::new("lock");
    let _lock = keylock_core::open(&l.scoped()).unwrap();
    match keylock_core::open_with(&l.scoped(), &OpenOptions::new().permits(3)) {
        Err(Error::Incompatible(what)) => {
            assert!(what.contains("a lock, not a semaphore"), "{what}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn what_a_semaphore_does_not_take_is_refused() {
    let n = Name::new("refused");
    for permits in [0, 32768] {
        assert!(matches!(
            keylock_core::open_with(&n.scoped(), &OpenOptions::new().permits(permits)),
            Err(Error::InvalidArgument(_))
        ));
    }
    let mut striped = OpenOptions::new().permits(2);
    striped.stripes = Some(4);
    let mut reentrant = OpenOptions::new().permits(2);
    reentrant.reentrant = true;
    for opts in [striped, reentrant] {
        assert!(matches!(
            keylock_core::open_with(&n.scoped(), &opts),
            Err(Error::InvalidArgument(_))
        ));
    }
    let a = sem(&n, 2);
    for weight in [0, 3] {
        assert!(matches!(
            a.acquire(k(b"x"), &w(weight)),
            Err(Error::InvalidArgument(_))
        ));
        let fut = Arc::clone(&a).acquire_async(k(b"x"), &w(weight));
        assert!(matches!(
            futures::executor::block_on(fut),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        a.acquire(LockKey::name(b"web"), &w(1)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.steal(k(b"x"), &LockOptions::new()),
        Err(Error::InvalidArgument(_))
    ));
    // A lock region refuses a weight other than 1.
    let l = Name::new("lock-weight");
    let lock = keylock_core::open(&l.scoped()).unwrap();
    assert!(matches!(
        lock.acquire(k(b"x"), &w(2)),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(lock.permits(), None);
}

#[test]
fn a_lease_end_gives_the_units_back_and_moves_the_fence() {
    within(LIMIT, || {
        let n = Name::new("lease");
        let a = sem(&n, 2);
        let b = sem(&n, 2);
        let mut leased = a
            .acquire(k(b"l"), &w(2).lease(Duration::from_millis(40)))
            .unwrap();
        // The holder may extend while it holds.
        a.extend(&mut leased, Duration::from_millis(40)).unwrap();
        // A waiter gets the units once the lease ends, with a higher fence.
        let next = b.acquire(k(b"l"), &w(1)).unwrap();
        assert!(next.fence() > leased.fence());
        assert!(!next.owner_died(), "a lease end is not a death");
        assert_eq!(a.release(leased).unwrap_err(), Error::LeaseExpired);
        assert_eq!(b.info(k(b"l")).unwrap().unwrap().units, 1);
        b.release(next).unwrap();
    });
}

#[test]
fn closing_an_open_while_holding_units_reports_owner_died() {
    within(LIMIT, || {
        let n = Name::new("close");
        let a = sem(&n, 3);
        let b = sem(&n, 3);
        let dead = a.acquire(k(b"c"), &w(3)).unwrap();
        let waiter = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.acquire(k(b"c"), &w(2)).unwrap())
        };
        until_waiters(&*b, b"c", 1);
        // Never released: the open closes with the units held.
        let fence = dead.fence();
        let _unreleased = dead;
        drop(a);
        let next = waiter.join().unwrap();
        assert!(next.owner_died(), "the next holder is told");
        assert!(next.fence() > fence);
        let more = b.acquire(k(b"c"), &try_w(1)).unwrap();
        assert!(!more.owner_died(), "owner_died is reported once");
        b.release(next).unwrap();
        b.release(more).unwrap();
        assert_eq!(b.info(k(b"c")).unwrap(), None);
    });
}

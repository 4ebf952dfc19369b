//! Ownership (issue 12): fences, releases of exactly one's own acquisition, leases,
//! reentrancy and force-unlock, under contention, for the pool and the striped lock.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::within;
use keylock_core::{Error, KeyPool, LockOptions, Mode, Owner, StripedLock, Wait};

const LIMIT: Duration = Duration::from_secs(120);

/// Fences rise strictly per key across 8 threads, while a pool that keeps no released key
/// indexed recycles the key's slot between acquisitions (other keys take it).
#[test]
fn fences_rise_across_threads_and_slot_recycling() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::builder().shards(1).retain(0).build());
        // The last fence seen for each of 4 keys, written only by its holder.
        let last: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (pool, last) = (pool.clone(), last.clone());
                thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let key = (i + t) % 4;
                        let g = pool.lock(&key);
                        let before = last[key as usize].swap(g.fence(), Ordering::SeqCst);
                        assert!(g.fence() > before, "fence {} after {before}", g.fence());
                        drop(g);
                        // Other keys, so that key's slot is recycled now and then.
                        drop(pool.lock(&(1000 + t * 100_000 + i)));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(pool.is_empty());
    });
}

/// A guard whose key was force-unlocked never releases the next holder, on both primitives,
/// while other threads keep acquiring the key.
#[test]
fn stale_guards_never_release_the_next_holder() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
        let striped = Arc::new(StripedLock::new(4).unwrap());
        for _ in 0..2_000 {
            let stale = pool.lock(&1);
            let stale_s = striped.lock(&1u64);
            assert!(pool.force_unlock(&1));
            assert!(striped.force_unlock(&1u64));
            let fresh = pool.lock(&1);
            let fresh_s = striped.lock(&1u64);
            assert!(fresh.fence() > stale.fence());
            assert!(fresh_s.fence() > stale_s.fence());
            assert_eq!(stale.release(), Err(Error::NotOwner));
            drop(stale_s);
            assert!(
                pool.try_lock(&1).is_err(),
                "the stale release freed the new holder"
            );
            assert!(striped.try_lock(&1u64).is_err());
            assert!(fresh.is_current() && fresh_s.is_current());
        }
        assert!(!pool.is_locked(&1) && !striped.is_locked(&1u64));
    });
}

/// A holder that never releases is replaced within its lease plus a small bound, and its own
/// release then reports `LeaseExpired`.
#[test]
fn lease_hand_over() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<String>> = Arc::new(KeyPool::new());
        let lease = Duration::from_millis(100);
        let held = pool
            .lock_with("job", LockOptions::new().lease(lease))
            .unwrap();
        let started = Instant::now();
        let waiter = {
            let pool = pool.clone();
            thread::spawn(move || {
                let g = pool.lock("job");
                (Instant::now(), g.fence())
            })
        };
        let (got_at, fence) = waiter.join().unwrap();
        let waited = got_at - started;
        assert!(
            waited >= lease,
            "taken over after {waited:?}, before the lease ended"
        );
        // The bound: the waiter parks until the lease's end and takes over at once. A loaded
        // machine can delay the wake-up; 5 s is far beyond any scheduling delay.
        assert!(waited < lease + Duration::from_secs(5), "{waited:?}");
        assert!(fence > held.fence());
        assert!(!held.is_current());
        assert_eq!(held.release(), Err(Error::LeaseExpired));
        assert!(!pool.is_locked("job"));
    });
}

/// The same hand-over for an async waiter, which needs the core's timer to wake it at the
/// lease's end (nobody releases).
#[test]
fn lease_hand_over_to_an_async_waiter() {
    within(LIMIT, || {
        let striped = Arc::new(StripedLock::new(16).unwrap());
        let held = striped
            .lock_with("k", LockOptions::new().lease(Duration::from_millis(50)))
            .unwrap();
        let next = futures::executor::block_on(striped.lock_async("k"));
        assert!(next.fence() > held.fence());
        assert_eq!(held.release(), Err(Error::LeaseExpired));
    });
}

/// An idle expired key is simply free at the next look; extending keeps a lease alive.
#[test]
fn expired_keys_are_free_and_extend_keeps_them() {
    let pool: KeyPool<u64> = KeyPool::new();
    let g = pool
        .lock_with(&1, LockOptions::new().lease(Duration::from_millis(20)))
        .unwrap();
    thread::sleep(Duration::from_millis(40));
    assert!(!pool.is_locked(&1));
    assert!(pool.info(&1).is_none());
    assert_eq!(g.release(), Err(Error::LeaseExpired));

    // Extending moves the lease's end (no timing involved: a long lease made longer).
    let mut g = pool
        .lock_with(&2, LockOptions::new().lease(Duration::from_secs(10)))
        .unwrap();
    g.extend(Duration::from_secs(600)).unwrap();
    assert!(g.lease_remaining().unwrap() > Duration::from_secs(300));
    assert!(pool.info(&2).unwrap().lease_remaining.unwrap() > Duration::from_secs(300));
    assert!(g.is_current());
    g.release().unwrap();
    let mut plain = pool.lock(&3);
    assert_eq!(
        plain.extend(Duration::from_secs(1)),
        Err(Error::InvalidArgument("the acquisition has no lease"))
    );
}

/// Reentrancy: the owner nests (same fence, hold count), others wait, the limit is an error,
/// and only the owner may release.
#[test]
fn reentrancy_nests_and_limits() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> =
            Arc::new(KeyPool::builder().reentrant(true).max_holds(3).build());
        let me = Owner::new(1).unwrap();
        let other = Owner::new(2).unwrap();
        let opts = LockOptions::new().owner(me).wait(Wait::No);
        let a = pool.lock_with(&9, opts).unwrap();
        let b = pool.lock_with(&9, opts).unwrap();
        let c = pool.lock_with(&9, opts).unwrap();
        assert_eq!(a.fence(), c.fence());
        assert_eq!(pool.info(&9).unwrap().holds, 3);
        assert_eq!(
            pool.lock_with(&9, opts).unwrap_err(),
            Error::ReentrancyLimit
        );
        let theirs = LockOptions::new().owner(other).wait(Wait::No);
        assert_eq!(pool.lock_with(&9, theirs).unwrap_err(), Error::WouldBlock);
        // Only the owner may release a hold: a release on behalf of another owner is refused
        // and releases nothing (its record is used up, so that hold stays until forced).
        let c = c.into_acquisition();
        assert!(pool.is_current_as(&c, Some(me)));
        assert!(!pool.is_current_as(&c, Some(other)));
        assert_eq!(pool.release_as(c, Some(other)), Err(Error::NotOwner));
        assert_eq!(pool.info(&9).unwrap().holds, 3);
        drop(b);
        drop(a);
        assert_eq!(pool.info(&9).unwrap().holds, 1);
        assert!(pool.force_unlock(&9));
        assert!(pool.lock_with(&9, theirs).is_ok());
    });
}

/// `try_release_cas` releases only a plain exclusive hold whose word is exactly as its acquire
/// left it, and changes nothing otherwise: with a waiter queued it leaves the key held and the
/// waiter waiting (the full release then hands the key over), a shared hold or one with a lease
/// is not its to release, and a record force-unlocked since releases nothing. For the pool and
/// the striped lock.
#[test]
fn try_release_cas_leaves_what_it_cannot_release() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<String>> = Arc::new(KeyPool::new());
        drop(pool.lock("k")); // the key's slot, which the fast path needs
        let striped = Arc::new(StripedLock::new(4).unwrap());
        let waited = |locked: &dyn Fn() -> bool, waiters: &dyn Fn() -> usize| {
            while waiters() == 0 {
                assert!(locked());
                thread::yield_now();
            }
        };

        // A waiter queued behind a fast hold.
        let acq = pool.try_acquire_fast("k", Mode::Exclusive).unwrap();
        let waiter = {
            let pool = pool.clone();
            thread::spawn(move || pool.lock("k").fence())
        };
        waited(&|| pool.is_locked("k"), &|| {
            pool.info("k").map_or(0, |i| i.waiters)
        });
        assert!(!pool.try_release_cas(&acq));
        assert!(pool.is_locked("k") && pool.info("k").unwrap().waiters == 1);
        let fence = acq.fence();
        pool.release(acq).unwrap();
        assert!(waiter.join().unwrap() > fence);
        assert!(!pool.is_locked("k"));

        let acq = striped.try_acquire_fast("k", Mode::Exclusive).unwrap();
        let waiter = {
            let striped = striped.clone();
            thread::spawn(move || striped.lock("k").fence())
        };
        waited(&|| striped.is_locked("k"), &|| {
            striped.info("k").map_or(0, |i| i.waiters)
        });
        assert!(!striped.try_release_cas(&acq));
        assert!(striped.is_locked("k") && striped.info("k").unwrap().waiters == 1);
        let fence = acq.fence();
        striped.release(acq).unwrap();
        assert!(waiter.join().unwrap() > fence);
        assert!(!striped.is_locked("k"));

        // A shared hold, and one with a lease: not this step's.
        let shared = striped.try_acquire_fast("k", Mode::Shared).unwrap();
        assert!(!striped.try_release_cas(&shared));
        assert!(striped.is_locked("k"));
        striped.release(shared).unwrap();
        let leased = striped
            .lock_with("k", LockOptions::new().lease(Duration::from_secs(60)))
            .unwrap()
            .into_acquisition();
        assert!(!striped.try_release_cas(&leased));
        assert!(striped.is_locked("k"));
        striped.release(leased).unwrap();

        // A record force-unlocked since releases nothing, not even the next holder.
        let stale = pool.try_acquire_fast("k", Mode::Exclusive).unwrap();
        assert!(pool.force_unlock("k"));
        let next = pool.lock("k");
        assert!(!pool.try_release_cas(&stale));
        assert!(pool.is_locked("k") && next.is_current());
        assert_eq!(pool.release(stale), Err(Error::NotOwner));
        drop(next);
        assert!(!pool.is_locked("k") && !striped.is_locked("k"));
    });
}

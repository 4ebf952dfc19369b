//! KeyPool: the failures of hand-made keyed-lock maps, each shown impossible, and memory that
//! follows the keys in use rather than the keys ever seen.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{Occupancy, within};
use keylock_core::{Error, KeyPool};

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn ten_million_distinct_keys_leave_nothing() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
        let threads: Vec<_> = (0..2u64)
            .map(|t| {
                let pool = pool.clone();
                thread::spawn(move || {
                    // Under ThreadSanitizer (`make tsan` sets KEYLOCK_TSAN) every access is
                    // instrumented: a tenth of the keys still recycles every slot many times.
                    let per_thread = if std::env::var_os("KEYLOCK_TSAN").is_some() {
                        500_000
                    } else {
                        5_000_000u64
                    };
                    for i in 0..per_thread {
                        let _g = pool.lock(&(i * 2 + t));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let stats = pool.stats();
        assert_eq!(stats.held, 0);
        assert_eq!(stats.entries_in_use, 0);
        // Memory follows the keys in use: two threads hold at most one key each (and a waiter
        // at most one more), so each shard counted at most a handful in use at once, and slots
        // are bounded by the retention allowance plus four times those peaks, not by the ten
        // million keys seen.
        assert!(stats.peak_in_use <= 4 * pool.shards(), "{stats:?}");
        assert!(
            stats.entries_allocated <= pool.memory_bound(stats.peak_in_use),
            "{stats:?}"
        );
        assert!(stats.entries_allocated < 10_000, "{stats:?}");
    });
}

#[test]
fn byte_keys_reuse_their_storage() {
    let pool: KeyPool = KeyPool::new();
    for i in 0..10_000u32 {
        let key = format!("user:{i}");
        let g = pool.lock(key.as_bytes());
        assert!(pool.is_locked(key.as_bytes()));
        drop(g);
    }
    let stats = pool.stats();
    assert_eq!(stats.entries_in_use, 0);
    // One key at a time: at most one slot in use per shard, plus the retained allowance,
    // whatever the number of keys seen.
    assert!(stats.peak_in_use <= pool.shards(), "{stats:?}");
    assert!(
        stats.entries_allocated <= pool.memory_bound(stats.peak_in_use),
        "{stats:?}"
    );
}

/// The classic race: a holder removes the map entry while a waiter, which already looked it up,
/// is about to lock it; a third thread then makes a fresh entry and the two "exclusive" holders
/// run together. Here every key is locked and released constantly, so slots are freed and
/// reused all the time, and an [`Occupancy`] per key catches any overlap.
#[test]
fn no_two_holders_of_one_key_while_slots_recycle() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
        let occupancy = Arc::new(Occupancy::new(4));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (pool, occupancy) = (pool.clone(), occupancy.clone());
                thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let key = (i + t) % 4;
                        let g = pool.lock(&key);
                        let inside = occupancy.hold(key as usize);
                        std::hint::spin_loop();
                        inside.complete();
                        drop(g);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        occupancy.check();
        assert_eq!(occupancy.completed(), 8 * 20_000);
        assert_eq!(pool.stats().entries_in_use, 0);
    });
}

#[test]
fn timed_out_waiters_leave_no_entry() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<String>> = Arc::new(KeyPool::new());
        let held = pool.lock("busy");
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let pool = pool.clone();
                thread::spawn(move || {
                    let err = pool
                        .try_lock_for("busy", Duration::from_millis(5 + i))
                        .unwrap_err();
                    assert_eq!(err, Error::TimedOut);
                    // Waiting on a key nobody else wants: times out too, and must vanish.
                    let own = format!("own-{i}");
                    let g = pool.lock(own.as_str());
                    let other = pool.clone();
                    let own2 = own.clone();
                    thread::spawn(move || {
                        other
                            .try_lock_for(own2.as_str(), Duration::from_millis(1))
                            .unwrap_err()
                    })
                    .join()
                    .unwrap();
                    drop(g);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let stats = pool.stats();
        assert_eq!(stats.waiting, 0);
        assert_eq!(
            stats.entries_in_use, 1,
            "only the held key has a slot: {stats:?}"
        );
        drop(held);
        let stats = pool.stats();
        assert_eq!(stats.entries_in_use, 0);
        assert_eq!(stats.held, 0);
    });
}

#[test]
fn acquisitions_release_only_themselves() {
    let pool: KeyPool = KeyPool::new();
    assert!(!pool.force_unlock(b"nope".as_slice()));
    let acq = pool.lock(b"k".as_slice()).into_acquisition();
    assert!(pool.is_locked(b"k".as_slice()));
    assert_eq!(pool.len(), 1);
    pool.release(acq).unwrap();
    // A guard whose key was force-unlocked does not release the next holder's acquisition.
    let stale = pool.lock(b"k".as_slice());
    assert!(pool.force_unlock(b"k".as_slice()));
    let fresh = pool.lock(b"k".as_slice());
    assert!(fresh.fence() > stale.fence());
    assert_eq!(stale.release(), Err(Error::NotOwner));
    assert!(pool.is_locked(b"k".as_slice()));
    drop(fresh);
    assert!(!pool.is_locked(b"k".as_slice()));
    // Many: one acquisition per distinct key.
    let keys: [&[u8]; 3] = [b"a", b"b", b"a"];
    let acqs = pool.lock_many(keys).into_acquisitions();
    assert_eq!((acqs.len(), pool.len()), (2, 2));
    for acq in acqs {
        pool.release(acq).unwrap();
    }
    assert!(pool.is_empty());
    assert_eq!(pool.stats().entries_in_use, 0);
}

#[test]
fn try_and_timed_many_are_all_or_nothing() {
    within(LIMIT, || {
        let pool: KeyPool<u64> = KeyPool::new();
        let g = pool.lock(&3);
        assert_eq!(
            pool.try_lock_many([1u64, 2, 3].iter()).unwrap_err(),
            Error::WouldBlock
        );
        assert_eq!(
            pool.try_lock_many_for([1u64, 2, 3].iter(), Duration::from_millis(5))
                .unwrap_err(),
            Error::TimedOut
        );
        assert!(!pool.is_locked(&1) && !pool.is_locked(&2));
        assert_eq!(pool.stats().entries_in_use, 1);
        assert_eq!(pool.stats().waiting, 0);
        drop(g);
        let all = pool.try_lock_many([1u64, 2, 3, 2].iter()).unwrap();
        assert_eq!(all.len(), 3);
        drop(all);
        assert_eq!(pool.stats().entries_in_use, 0);
    });
}

#[test]
fn lock_many_opposite_orders_do_not_deadlock() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let pool = pool.clone();
                thread::spawn(move || {
                    for i in 0..5_000u64 {
                        let (a, b) = (i % 5, (i * 3 + t) % 5);
                        let keys = if t % 2 == 0 { [a, b] } else { [b, a] };
                        let _g = pool.lock_many(keys.iter());
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

#[test]
fn guards_are_send_and_release_from_other_threads() {
    let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
    let g = pool.lock(&1);
    thread::scope(|s| {
        s.spawn(move || drop(g));
    });
    assert!(!pool.is_locked(&1));
    let acq = pool.lock(&2).into_acquisition();
    let p2 = pool.clone();
    thread::spawn(move || p2.release(acq).unwrap())
        .join()
        .unwrap();
    assert!(pool.is_empty());
}

//! Metrics on lock objects: exact counts under a workload with a known number of grants,
//! waits, timeouts, failed tries, cancels, lease ends, losses and force-unlocks, at the
//! in-process and shared-memory scopes, for a key pool, a striped lock and a semaphore; and
//! nothing counted (no metrics at all) when they are off.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use futures::FutureExt;
use keylock_core::{
    Error, KeyedLock, LockKey, LockOptions, Metered, MetricsSnapshot, Mode, OpenOptions, Wait,
    open_with,
};

const K: LockKey<'static> = LockKey::new(b"k");
const K2: LockKey<'static> = LockKey::new(b"k2");

/// Waits (at most 10 s, else the test fails as a hang) until `locks` has `n` waiters queued.
fn until_waiting(locks: &dyn KeyedLock, n: usize) {
    let end = Instant::now() + Duration::from_secs(10);
    while locks.stats().unwrap().waiting_here != n {
        assert!(Instant::now() < end, "the waiter never queued");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Runs the workload on `locks` and checks every count it must give.
fn workload(locks: Arc<dyn KeyedLock>) {
    let m0 = locks.metrics().expect("metrics are on");
    assert_eq!(m0, locks.metrics().unwrap());
    assert_eq!((m0.acquired, m0.wait.count(), m0.hold.count()), (0, 0, 0));

    // 1 grant at once.
    let held = locks.acquire(K, &LockOptions::new()).unwrap();
    // 1 failed try, 1 timeout (contended), 1 cancelled async wait (contended).
    let tried = locks.acquire(K, &LockOptions::new().wait(Wait::No));
    assert!(matches!(tried, Err(Error::WouldBlock)));
    let timed = locks.acquire(
        K,
        &LockOptions::new().wait(Wait::For(Duration::from_millis(30))),
    );
    assert!(matches!(timed, Err(Error::TimedOut)));
    let pending = locks.clone().acquire_async(K, &LockOptions::new());
    assert!(pending.now_or_never().is_none());
    // An async try that fails: a failed try, not a cancel.
    let tried_async = locks
        .clone()
        .acquire_async(K, &LockOptions::new().wait(Wait::No))
        .now_or_never();
    assert!(matches!(tried_async, Some(Err(Error::WouldBlock))));

    // 1 contended grant: a thread waits, the holder lets go after 20 ms.
    let inside = Arc::new(AtomicUsize::new(0));
    let waiter = {
        let locks = locks.clone();
        let inside = inside.clone();
        thread::spawn(move || {
            let acq = locks.acquire(K, &LockOptions::new()).unwrap();
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
            inside.fetch_sub(1, Ordering::SeqCst);
            locks.release(acq).unwrap();
        })
    };
    until_waiting(&*locks, 1);
    thread::sleep(Duration::from_millis(20));
    locks.release(held).unwrap();
    waiter.join().unwrap();

    let m = locks.metrics().unwrap();
    assert_eq!(m.acquired, 2);
    assert_eq!(m.contended, 3, "the timeout, the cancel and the waiter");
    assert_eq!((m.would_block, m.timed_out, m.cancelled), (2, 1, 1));
    assert_eq!((m.wait.count(), m.hold.count()), (2, 2));
    assert_eq!(m.wait.buckets[0], 1, "the grant at once waited 0 ns");
    assert!(
        m.wait.max_ns >= 20_000_000,
        "the waiter waited at least 20 ms: {m:?}"
    );
    assert!(
        m.hold.max_ns >= 20_000_000,
        "the first hold lasted at least 20 ms: {m:?}"
    );
    assert!(m.wait.quantile(1.0).unwrap() >= Duration::from_millis(20));

    // A lease that ends before the release: 1 grant, 1 lease expired, no hold recorded.
    let leased = locks
        .acquire(K, &LockOptions::new().lease(Duration::from_millis(10)))
        .unwrap();
    thread::sleep(Duration::from_millis(30));
    assert_eq!(locks.release(leased), Err(Error::LeaseExpired));
    // A force-unlock: 1 grant, 1 force-unlock, 1 loss at the release.
    let forced = locks.acquire(K2, &LockOptions::new()).unwrap();
    assert!(locks.force_unlock(K2).unwrap());
    assert!(!locks.force_unlock(K2).unwrap(), "a free key: not counted");
    assert_eq!(locks.release(forced), Err(Error::NotOwner));
    // Several keys at once: 1 call, 2 grants, 2 holds.
    let many = locks
        .acquire_many(
            &[(K, Mode::Exclusive), (K2, Mode::Exclusive)],
            &LockOptions::new(),
        )
        .unwrap();
    let n = many.len() as u64;
    for acq in many {
        locks.release(acq).unwrap();
    }
    // Async, granted at once, leased and extended (the hold is still timed from its grant).
    let mut acq = locks
        .clone()
        .acquire_async(K, &LockOptions::new().lease(Duration::from_secs(60)))
        .now_or_never()
        .unwrap()
        .unwrap();
    locks.extend(&mut acq, Duration::from_secs(120)).unwrap();
    assert!(locks.is_current(&acq).unwrap());
    locks.release(acq).unwrap();

    let m: MetricsSnapshot = locks.metrics().unwrap();
    assert_eq!(m.acquired, 2 + 2 + n + 1);
    assert_eq!((m.lease_expired, m.lost, m.force_unlocked), (1, 1, 1));
    assert_eq!(
        (m.contended, m.timed_out, m.cancelled, m.would_block),
        (3, 1, 1, 2)
    );
    assert_eq!(m.owner_died, 0);
    assert_eq!(m.wait.count(), 2 + 2 + 1 + 1, "one per granted call");
    assert_eq!(m.hold.count(), 2 + n + 1, "one per released acquisition");
}

#[test]
fn counts_are_exact_in_a_key_pool() {
    workload(open_with("local:", &OpenOptions::new().metrics(true)).unwrap());
}

#[test]
fn counts_are_exact_in_a_striped_lock() {
    // Two stripes picked so that k and k2 differ: keys that share a stripe are one lock.
    for seed in 0.. {
        let locks = open_with(
            "local:",
            &OpenOptions::new().stripes(64).seed(seed).metrics(true),
        )
        .unwrap();
        if locks.stripe_of(K) != locks.stripe_of(K2) {
            workload(locks);
            return;
        }
    }
}

#[test]
fn counts_are_exact_in_a_semaphore_of_one_permit() {
    workload(open_with("local:", &OpenOptions::new().permits(1).metrics(true)).unwrap());
}

#[cfg(all(feature = "shm", target_os = "linux"))]
#[test]
fn counts_are_exact_in_shared_memory() {
    let name = format!("shm:kl-metrics-{}", std::process::id());
    let locks = open_with(&name, &OpenOptions::new().metrics(true)).unwrap();
    // A metered host scope gives no object to call around the layer: every call is counted.
    assert!(locks.as_host().is_none());
    workload(locks);
    keylock_core::unlink(&name).unwrap();
}

#[test]
fn nothing_is_counted_when_metrics_are_off() {
    let locks = open_with("local:", &OpenOptions::new()).unwrap();
    let acq = locks.acquire(K, &LockOptions::new()).unwrap();
    locks.release(acq).unwrap();
    assert_eq!(locks.metrics(), None);
    // The scope's own object, with no layer in between: the fast paths stay as they are.
    assert!(locks.as_any().is_some());
}

#[test]
fn a_wrapped_lock_object_counts_per_object() {
    let pool: Arc<dyn KeyedLock> = Arc::new(keylock_core::KeyPool::<Vec<u8>>::new());
    let a = Arc::new(Metered::new(pool.clone(), "a"));
    let b = Arc::new(Metered::new(pool.clone(), "b"));
    let held = a.acquire(K, &LockOptions::new()).unwrap();
    assert!(matches!(
        b.acquire(K, &LockOptions::new().wait(Wait::No)),
        Err(Error::WouldBlock)
    ));
    a.release(held).unwrap();
    let (ma, mb) = (a.metrics().unwrap(), b.metrics().unwrap());
    assert_eq!((ma.acquired, ma.would_block), (1, 0));
    assert_eq!((mb.acquired, mb.would_block), (0, 1));
    assert_eq!(pool.metrics(), None);
}

#[test]
fn many_threads_count_every_grant() {
    let locks = open_with("local:", &OpenOptions::new().metrics(true)).unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let locks = locks.clone();
            let inside = inside.clone();
            thread::spawn(move || {
                for _ in 0..500 {
                    let acq = locks.acquire(K, &LockOptions::new()).unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    locks.release(acq).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let m = locks.metrics().unwrap();
    assert_eq!(
        (m.acquired, m.wait.count(), m.hold.count()),
        (2000, 2000, 2000)
    );
    assert_eq!((m.timed_out, m.would_block, m.cancelled), (0, 0, 0));
    assert!(m.contended <= 2000);
    assert_eq!(
        m.wait.buckets[0],
        2000 - m.contended,
        "every grant at once waited 0 ns, every contended one more"
    );
}

#[cfg(feature = "metrics")]
#[test]
fn the_metrics_facade_gets_every_count_labelled_with_the_lock() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let locks = open_with("local:", &OpenOptions::new().metrics(true)).unwrap();
        let held = locks.acquire(K, &LockOptions::new()).unwrap();
        let tried = locks.acquire(K, &LockOptions::new().wait(Wait::No));
        assert!(matches!(tried, Err(Error::WouldBlock)));
        locks.release(held).unwrap();
    });
    let mut seen = std::collections::BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: Vec<_> = key
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        assert_eq!(labels, [("lock".to_owned(), "local:".to_owned())]);
        let value = match value {
            DebugValue::Counter(n) => n,
            DebugValue::Histogram(v) => v.len() as u64,
            DebugValue::Gauge(_) => panic!("keylock sends no gauges"),
        };
        seen.insert(key.key().name().to_owned(), value);
    }
    assert_eq!(seen["keylock_acquired_total"], 1);
    assert_eq!(seen["keylock_would_block_total"], 1);
    assert_eq!(seen["keylock_contended_total"], 0);
    assert_eq!(seen["keylock_wait_seconds"], 1);
    assert_eq!(seen["keylock_hold_seconds"], 1);
    assert_eq!(seen.len(), 11, "nine counters and two histograms: {seen:?}");
}

#[test]
fn histogram_bounds_and_quantiles() {
    use keylock_core::HistogramSnapshot;
    assert_eq!(HistogramSnapshot::upper_bound_ns(0), 0);
    assert_eq!(HistogramSnapshot::upper_bound_ns(1), 1);
    assert_eq!(HistogramSnapshot::upper_bound_ns(10), 1023);
    assert_eq!(HistogramSnapshot::upper_bound_ns(63), u64::MAX);
    assert_eq!(HistogramSnapshot::upper_bound_ns(usize::MAX), u64::MAX);
    let mut buckets = [0; keylock_core::metrics::BUCKETS];
    buckets[0] = 4;
    buckets[20] = 1; // 2^19 to 2^20 - 1 ns
    let h = HistogramSnapshot::new(buckets, 600_000, 600_000);
    assert_eq!(h.count(), 5);
    assert_eq!(h.quantile(0.8), Some(Duration::ZERO));
    assert_eq!(
        h.quantile(0.81),
        Some(Duration::from_nanos(600_000)),
        "capped at the max"
    );
    assert_eq!(h.quantile(f64::NAN), Some(Duration::from_nanos(600_000)));
    let empty = HistogramSnapshot::new([0; keylock_core::metrics::BUCKETS], 0, 0);
    assert_eq!(empty.quantile(0.5), None);
}

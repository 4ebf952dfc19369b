//! The keyed semaphore: at most `permits` units of a key held at once (measured by counting the
//! units inside), weights, strict FIFO with a heavy request at the head, fences per acquisition,
//! leases, force-release, stale releases, several keys at once, async cancellation storms, and
//! the semaphore through the scopes' trait. Every test that waits runs under a deadline.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::thread;
use std::time::Duration;

use common::within;
use keylock_core::{
    Error, KeyPool, KeyedLock, KeyedSemaphore, LockKey, LockOptions, OpenOptions, Wait, open_with,
};

const LIMIT: Duration = Duration::from_secs(120);

/// Units inside a critical section, per key: the test's own count of what the semaphore admits.
struct Units {
    permits: u32,
    inside: Vec<AtomicU32>,
    max: Vec<AtomicU32>,
    over: AtomicUsize,
    entered: AtomicUsize,
}

impl Units {
    fn new(keys: usize, permits: u32) -> Self {
        Self {
            permits,
            inside: (0..keys).map(|_| AtomicU32::new(0)).collect(),
            max: (0..keys).map(|_| AtomicU32::new(0)).collect(),
            over: AtomicUsize::new(0),
            entered: AtomicUsize::new(0),
        }
    }

    fn enter(&self, key: usize, weight: u32) {
        self.entered.fetch_add(1, SeqCst);
        let now = self.inside[key].fetch_add(weight, SeqCst) + weight;
        self.max[key].fetch_max(now, SeqCst);
        if now > self.permits {
            self.over.fetch_add(1, SeqCst);
        }
    }

    fn leave(&self, key: usize, weight: u32) {
        self.inside[key].fetch_sub(weight, SeqCst);
    }

    /// Never more than `permits` units inside; the most seen is returned per key.
    fn check(&self) -> Vec<u32> {
        assert_eq!(self.over.load(SeqCst), 0, "more units inside than permits");
        assert!(
            self.inside.iter().all(|n| n.load(SeqCst) == 0),
            "still inside"
        );
        self.max.iter().map(|m| m.load(SeqCst)).collect()
    }
}

#[test]
fn weights_fit_and_fences_rise_per_acquisition() {
    let sem: KeyedSemaphore<String> = KeyedSemaphore::new(4).unwrap();
    assert_eq!(sem.permits(), 4);
    let a = sem.acquire("k", 1).unwrap();
    let b = sem.acquire("k", 2).unwrap();
    let c = sem.try_acquire("k", 1).unwrap();
    assert!(a.fence() < b.fence() && b.fence() < c.fence());
    assert_eq!(a.into_acquisition().weight(), 1);
    // `a` went into a record that is dropped unreleased: its unit stays held.
    assert_eq!(sem.try_acquire("k", 1).unwrap_err(), Error::WouldBlock);
    let info = sem.info("k").unwrap();
    assert_eq!((info.units, info.holders, info.waiters), (4, 3, 0));
    assert_eq!(info.fence, c.fence());
    assert_eq!(
        sem.try_acquire_for("k", 1, Duration::from_millis(20))
            .unwrap_err(),
        Error::TimedOut
    );
    drop(b);
    assert_eq!(sem.info("k").unwrap().units, 2);
    let d = sem.try_acquire("k", 2).unwrap();
    assert!(d.fence() > c.fence());
    // Another key is never blocked.
    drop(sem.try_acquire("other", 4).unwrap());
    assert!(sem.force_release("k"));
    drop((c, d));
    assert!(sem.info("k").is_none());
    assert_eq!(sem.stats().held, 0);
    assert_eq!(
        sem.stats().entries_in_use,
        0,
        "memory follows the keys held or awaited"
    );
}

#[test]
fn bad_permits_and_weights_are_clear_errors() {
    let invalid = |r: Result<KeyedSemaphore<u64>, Error>| {
        assert!(matches!(r.unwrap_err(), Error::InvalidArgument(_)));
    };
    invalid(KeyedSemaphore::new(0));
    invalid(KeyedSemaphore::new(KeyedSemaphore::<u64>::MAX_PERMITS + 1));
    let sem: KeyedSemaphore<u64> = KeyedSemaphore::new(KeyedSemaphore::<u64>::MAX_PERMITS).unwrap();
    drop(sem.acquire(&1, KeyedSemaphore::<u64>::MAX_PERMITS).unwrap());
    let sem: KeyedSemaphore<u64> = KeyedSemaphore::new(3).unwrap();
    for weight in [0, 4, u32::MAX] {
        assert!(matches!(
            sem.acquire(&1, weight).unwrap_err(),
            Error::InvalidArgument(_)
        ));
        assert!(matches!(
            sem.try_acquire(&1, weight).unwrap_err(),
            Error::InvalidArgument(_)
        ));
        let fut = sem.acquire_async(&1, weight);
        assert!(matches!(
            futures::executor::block_on(fut).unwrap_err(),
            Error::InvalidArgument(_)
        ));
    }
    assert!(sem.info(&1).is_none(), "a refused acquire leaves nothing");
    assert_eq!(sem.stats().entries_in_use, 0);
    // A lock takes weight 1 only.
    let pool: KeyPool<u64> = KeyPool::new();
    let two = LockOptions::new().weight(2);
    assert!(matches!(
        pool.lock_with(&1, two).unwrap_err(),
        Error::InvalidArgument(_)
    ));
    let bytes: KeyPool = KeyPool::new();
    assert!(matches!(
        (&bytes as &dyn KeyedLock).acquire(LockKey::new(b"k"), &two),
        Err(Error::InvalidArgument(_))
    ));
    drop(pool.lock_with(&1, LockOptions::new().weight(1)).unwrap());
    // Semaphores do not steal.
    let sem = open_with("local:", &OpenOptions::new().permits(2)).unwrap();
    assert!(matches!(
        sem.steal(LockKey::new(b"k"), &LockOptions::new()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        open_with("local:", &OpenOptions::new().permits(2).stripes(4)),
        Err(Error::InvalidArgument(_))
    ));
    // A shared-memory semaphore has no stripes either (and a build without the shm scope
    // refuses the name itself).
    assert!(matches!(
        open_with(
            "shm:a-semaphore-without-stripes",
            &OpenOptions::new().permits(2).stripes(4)
        ),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_heavy_head_is_not_passed_by_light_requests() {
    within(LIMIT, || {
        let sem: Arc<KeyedSemaphore<u64>> = Arc::new(KeyedSemaphore::new(4).unwrap());
        let held = sem.acquire(&1, 3).unwrap().into_acquisition();
        let heavy = {
            let sem = sem.clone();
            thread::spawn(move || {
                let permit = sem.acquire(&1, 4).unwrap();
                permit.fence()
            })
        };
        while sem.info(&1).unwrap().waiters == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        // One unit is free, but the heavy request is ahead: light requests wait behind it.
        assert_eq!(sem.try_acquire(&1, 1).unwrap_err(), Error::WouldBlock);
        assert_eq!(
            sem.try_acquire_for(&1, 1, Duration::from_millis(30))
                .unwrap_err(),
            Error::TimedOut
        );
        let light = {
            let sem = sem.clone();
            thread::spawn(move || sem.acquire(&1, 1).unwrap().fence())
        };
        while sem.info(&1).unwrap().waiters < 2 {
            thread::sleep(Duration::from_millis(1));
        }
        sem.release(held).unwrap();
        let heavy_fence = heavy.join().unwrap();
        let light_fence = light.join().unwrap();
        assert!(heavy_fence < light_fence, "served in arrival order");
        assert!(sem.info(&1).is_none());
    });
}

#[test]
fn stale_releases_are_refused_and_free_nothing() {
    let sem: KeyedSemaphore<u64> = KeyedSemaphore::new(2).unwrap();
    // The sole holder, released after another joined (the holders move beside the word).
    let a = sem.acquire(&1, 1).unwrap().into_acquisition();
    let b = sem.acquire(&1, 1).unwrap().into_acquisition();
    sem.release(a).unwrap();
    assert_eq!(sem.info(&1).unwrap().units, 1);
    sem.release(b).unwrap();
    assert!(sem.info(&1).is_none());
    // Force-release ends every hold; their releases are refused and free no later holder.
    let a = sem.acquire(&1, 1).unwrap().into_acquisition();
    let b = sem.acquire(&1, 1).unwrap().into_acquisition();
    let before = b.fence();
    assert!(sem.force_release(&1));
    assert!(!sem.is_current(&a) && !sem.is_current(&b));
    let c = sem.acquire(&1, 2).unwrap();
    assert!(c.fence() > before, "the fence rises across a force-release");
    assert_eq!(sem.release(a), Err(Error::NotOwner));
    assert_eq!(sem.release(b), Err(Error::NotOwner));
    assert_eq!(sem.info(&1).unwrap().units, 2);
    drop(c);
    // A sole holder force-released: its stale record never frees the next sole holder.
    let a = sem.acquire(&1, 2).unwrap().into_acquisition();
    assert!(sem.force_release(&1));
    let d = sem.acquire(&1, 2).unwrap();
    assert_eq!(sem.release(a), Err(Error::NotOwner));
    assert_eq!(sem.info(&1).unwrap().units, 2);
    drop(d);
    assert!(sem.info(&1).is_none());
}

#[test]
fn leases_end_by_themselves_and_extend() {
    let sem: KeyedSemaphore<u64> = KeyedSemaphore::new(2).unwrap();
    let leased = LockOptions::new()
        .weight(2)
        .lease(Duration::from_millis(40));
    let a = sem.acquire_with(&1, leased).unwrap().into_acquisition();
    assert!(a.lease_deadline().is_some());
    thread::sleep(Duration::from_millis(80));
    let b = sem.try_acquire(&1, 2).expect("the lease ended");
    assert!(b.fence() > a.fence());
    assert_eq!(sem.release(a), Err(Error::LeaseExpired));
    let mut plain = b.into_acquisition();
    assert!(matches!(
        sem.extend(&mut plain, Duration::from_secs(1)),
        Err(Error::InvalidArgument(_))
    ));
    sem.release(plain).unwrap();
    let mut c = sem
        .acquire_with(&1, LockOptions::new().lease(Duration::from_millis(30)))
        .unwrap()
        .into_acquisition();
    sem.extend(&mut c, Duration::from_secs(60)).unwrap();
    thread::sleep(Duration::from_millis(60));
    assert!(sem.is_current(&c), "extended");
    assert_eq!(sem.try_acquire(&1, 2).unwrap_err(), Error::WouldBlock);
    sem.release(c).unwrap();
    assert!(sem.info(&1).is_none());
}

#[test]
fn several_keys_all_or_none() {
    within(LIMIT, || {
        let sem: KeyedSemaphore<u64> = KeyedSemaphore::new(3).unwrap();
        let two = LockOptions::new().weight(2);
        let g = sem.acquire_many([&1, &2, &1], two).unwrap();
        assert_eq!(g.len(), 2, "a key named twice is taken once");
        assert_eq!(
            (sem.info(&1).unwrap().units, sem.info(&2).unwrap().units),
            (2, 2)
        );
        // Key 3 is free but key 2 is not: nothing is taken.
        assert_eq!(
            sem.acquire_many([&3, &2], two.wait(Wait::No)).unwrap_err(),
            Error::WouldBlock
        );
        assert!(sem.info(&3).is_none());
        drop(
            sem.acquire_many([&3, &2], LockOptions::new().wait(Wait::No))
                .unwrap(),
        );
        drop(g);
        assert!(sem.info(&1).is_none() && sem.info(&2).is_none());
    });
}

/// Threads with weights 1..=3 on 4 keys, each acquire blocking, try or timed: exact counts of
/// acquisitions and never more than `permits` units of a key inside.
#[test]
fn occupancy_never_exceeds_permits_under_threads() {
    const KEYS: usize = 4;
    const PERMITS: u32 = 4;
    const THREADS: usize = 4;
    const ROUNDS: usize = 3000;
    within(LIMIT, || {
        let sem: Arc<KeyedSemaphore<u64>> = Arc::new(KeyedSemaphore::new(PERMITS).unwrap());
        let units = Arc::new(Units::new(KEYS, PERMITS));
        let acquired = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (sem, units) = (sem.clone(), units.clone());
                let (acquired, failed) = (acquired.clone(), failed.clone());
                thread::spawn(move || {
                    for i in 0..ROUNDS {
                        let key = (i * 7 + t) % KEYS;
                        let weight = 1 + ((i + t) % 3) as u32;
                        let got = match i % 3 {
                            0 => Ok(sem.acquire(&(key as u64), weight).unwrap()),
                            1 => sem.try_acquire(&(key as u64), weight),
                            _ => sem.try_acquire_for(
                                &(key as u64),
                                weight,
                                Duration::from_micros(50),
                            ),
                        };
                        match got {
                            Ok(permit) => {
                                units.enter(key, weight);
                                std::hint::spin_loop();
                                units.leave(key, weight);
                                drop(permit);
                                acquired.fetch_add(1, SeqCst);
                            }
                            Err(e) => {
                                assert!(matches!(e, Error::WouldBlock | Error::TimedOut), "{e}");
                                failed.fetch_add(1, SeqCst);
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let max = units.check();
        assert_eq!(
            acquired.load(SeqCst) + failed.load(SeqCst),
            THREADS * ROUNDS
        );
        assert_eq!(units.entered.load(SeqCst), acquired.load(SeqCst));
        assert!(max.iter().all(|&m| m <= PERMITS), "{max:?}");
        assert!(
            max.iter().any(|&m| m > 1),
            "holders overlapped as permits allow: {max:?}"
        );
        assert_eq!(sem.stats().held, 0);
        assert_eq!(sem.stats().entries_in_use, 0);
    });
}

/// Tasks on a runtime, a third of them cancelled by a timeout while waiting or while holding:
/// never more than `permits` units inside, and nothing held or queued afterwards.
#[test]
fn tokio_cancellation_storm_leaves_no_permit_held() {
    const KEYS: usize = 3;
    const PERMITS: u32 = 3;
    const TASKS: usize = 300;
    const ROUNDS: usize = 20;
    within(LIMIT, || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let sem: Arc<KeyedSemaphore<u64>> = Arc::new(KeyedSemaphore::new(PERMITS).unwrap());
        let units = Arc::new(Units::new(KEYS, PERMITS));
        let done = Arc::new(AtomicUsize::new(0));
        let cancelled = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            let tasks: Vec<_> = (0..TASKS)
                .map(|t| {
                    let (sem, units) = (sem.clone(), units.clone());
                    let (done, cancelled) = (done.clone(), cancelled.clone());
                    tokio::spawn(async move {
                        for i in 0..ROUNDS {
                            let key = (t + i) % KEYS;
                            let weight = 1 + ((t * 3 + i) % 3) as u32;
                            let body = async {
                                let permit = sem
                                    .acquire_with_async_owned(
                                        &(key as u64),
                                        LockOptions::new().weight(weight),
                                    )
                                    .await
                                    .unwrap();
                                units.enter(key, weight);
                                // Dropped before the permit, also when a timeout cancels
                                // this future at the await (locals drop in reverse order).
                                let leave = scopeguard(|| units.leave(key, weight));
                                tokio::task::yield_now().await;
                                drop(leave);
                                drop(permit);
                            };
                            if (t + i) % 3 == 0 {
                                match tokio::time::timeout(Duration::from_micros(200), body).await {
                                    Ok(()) => done.fetch_add(1, SeqCst),
                                    Err(_) => cancelled.fetch_add(1, SeqCst),
                                };
                            } else {
                                body.await;
                                done.fetch_add(1, SeqCst);
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        units.check();
        assert_eq!(done.load(SeqCst) + cancelled.load(SeqCst), TASKS * ROUNDS);
        for key in 0..KEYS as u64 {
            assert!(sem.info(&key).is_none(), "key {key} left held or queued");
        }
        assert_eq!(sem.stats().queued, 0);
        assert_eq!(sem.stats().entries_in_use, 0);
    });
}

/// Runs `f` when dropped (a cancelled future leaves its critical section through it).
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

#[test]
fn through_the_scopes_trait() {
    within(LIMIT, || {
        let sem = open_with("local:", &OpenOptions::new().permits(3)).unwrap();
        assert_eq!(sem.permits(), Some(3));
        let two = LockOptions::new().weight(2);
        let a = sem.acquire(LockKey::new(b"k"), &two).unwrap();
        assert_eq!(a.weight(), 2);
        let b = sem
            .acquire(LockKey::new(b"k"), &LockOptions::new().wait(Wait::No))
            .unwrap();
        assert!(b.fence() > a.fence());
        assert_eq!(
            sem.acquire(LockKey::new(b"k"), &LockOptions::new().wait(Wait::No))
                .unwrap_err(),
            Error::WouldBlock
        );
        let info = sem.info(LockKey::new(b"k")).unwrap().unwrap();
        assert_eq!((info.units, info.holders), (3, 2));
        sem.release(a).unwrap();
        let many = sem
            .acquire_many(
                &[
                    (LockKey::new(b"x"), keylock_core::Mode::Exclusive),
                    (LockKey::new(b"k"), keylock_core::Mode::Exclusive),
                ],
                &two,
            )
            .unwrap();
        assert_eq!(many.len(), 2);
        assert_eq!(many[0].weight(), 2);
        for acq in many {
            sem.release(acq).unwrap();
        }
        let fut = Arc::clone(&sem).acquire_async(LockKey::new(b"k"), &two);
        let c = futures::executor::block_on(fut).unwrap();
        sem.release(c).unwrap();
        sem.release(b).unwrap();
        assert!(sem.info(LockKey::new(b"k")).unwrap().is_none());
        let stats = sem.stats().unwrap();
        assert_eq!(stats.held, Some(0));
    });
}

// ---- a property test against a sequential model ----

mod model {
    use std::collections::BTreeMap;

    use keylock_core::{Acquisition, Error, KeyedSemaphore, LockOptions, Wait};
    use proptest::prelude::*;

    const PERMITS: u32 = 3;
    const KEYS: u8 = 4;

    #[derive(Debug, Clone)]
    pub(super) enum Op {
        /// `try_acquire(key, weight)` (weights past the permits and 0 included); keep the
        /// permit as a guard (`true`) or as a record.
        Acquire(u8, u32, bool),
        /// Release the n-th kept holder (modulo their number).
        Release(usize),
        ForceRelease(u8),
        /// `acquire_many` over these keys with this weight, as a try.
        Many(Vec<u8>, u32),
    }

    pub(super) fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..KEYS, 0..=PERMITS + 1, any::<bool>()).prop_map(|(k, w, g)| Op::Acquire(k, w, g)),
            3 => any::<usize>().prop_map(Op::Release),
            1 => (0..KEYS).prop_map(Op::ForceRelease),
            1 => (proptest::collection::vec(0..KEYS, 1..4), 1..=PERMITS).prop_map(|(k, w)| Op::Many(k, w)),
        ]
    }

    enum Kept<'a> {
        Guard(keylock_core::Permit<'a, u64>),
        Record(Acquisition),
        Many(keylock_core::ManyGuard<&'a keylock_core::KeyPool<u64>>),
    }

    /// One kept holder: what it is, and per key the units the model says it holds (and
    /// whether they are still current).
    struct Holder<'a> {
        kept: Kept<'a>,
        units: Vec<(u8, u32)>,
        current: bool,
    }

    pub(super) fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
        let sem: KeyedSemaphore<u64> = KeyedSemaphore::new(PERMITS).unwrap();
        let mut held: Vec<Holder<'_>> = Vec::new();
        let mut last_fence: BTreeMap<u8, u64> = BTreeMap::new();
        let units_of = |held: &Vec<Holder<'_>>, key: u8| -> u32 {
            held.iter()
                .filter(|h| h.current)
                .flat_map(|h| h.units.iter())
                .filter(|(k, _)| *k == key)
                .map(|(_, u)| u)
                .sum()
        };
        for op in ops {
            match op {
                Op::Acquire(key, weight, guard) => {
                    let got = sem.try_acquire(&u64::from(key), weight);
                    if weight == 0 || weight > PERMITS {
                        prop_assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
                        continue;
                    }
                    let fits = units_of(&held, key) + weight <= PERMITS;
                    match got {
                        Ok(permit) => {
                            prop_assert!(fits, "granted {weight} of key {key} past the permits");
                            let fence = permit.fence();
                            prop_assert!(last_fence.get(&key).is_none_or(|&f| fence > f));
                            last_fence.insert(key, fence);
                            let kept = if guard {
                                Kept::Guard(permit)
                            } else {
                                Kept::Record(permit.into_acquisition())
                            };
                            held.push(Holder {
                                kept,
                                units: vec![(key, weight)],
                                current: true,
                            });
                        }
                        Err(e) => {
                            prop_assert_eq!(e, Error::WouldBlock);
                            prop_assert!(!fits, "refused {} of key {} with room", weight, key);
                        }
                    }
                }
                Op::Release(n) => {
                    if held.is_empty() {
                        continue;
                    }
                    let h = held.remove(n % held.len());
                    match h.kept {
                        Kept::Guard(g) => {
                            let r = g.release();
                            prop_assert_eq!(r.is_ok(), h.current, "{:?}", r);
                        }
                        Kept::Record(acq) => {
                            let r = sem.release(acq);
                            if h.current {
                                prop_assert_eq!(r, Ok(()));
                            } else {
                                prop_assert_eq!(r, Err(Error::NotOwner));
                            }
                        }
                        Kept::Many(g) => drop(g),
                    }
                }
                Op::ForceRelease(key) => {
                    let was = units_of(&held, key) > 0;
                    prop_assert_eq!(sem.force_release(&u64::from(key)), was);
                    for h in held.iter_mut() {
                        if h.units.iter().any(|(k, _)| *k == key) {
                            // A multi-key guard's other keys stay held by the model's count
                            // only while it is current: drop its units of this key.
                            h.units.retain(|(k, _)| *k != key);
                            if h.units.is_empty() {
                                h.current = false;
                            }
                        }
                    }
                }
                Op::Many(keys, weight) => {
                    let mut distinct = keys.clone();
                    distinct.sort_unstable();
                    distinct.dedup();
                    let fits = distinct
                        .iter()
                        .all(|&k| units_of(&held, k) + weight <= PERMITS);
                    let wanted: Vec<u64> = keys.iter().map(|&k| u64::from(k)).collect();
                    let got = sem.acquire_many(
                        wanted.iter(),
                        LockOptions::new().weight(weight).wait(Wait::No),
                    );
                    match got {
                        Ok(g) => {
                            prop_assert!(fits, "granted many past the permits");
                            prop_assert_eq!(g.len(), distinct.len());
                            held.push(Holder {
                                kept: Kept::Many(g),
                                units: distinct.iter().map(|&k| (k, weight)).collect(),
                                current: true,
                            });
                        }
                        Err(e) => {
                            prop_assert_eq!(e, Error::WouldBlock);
                            prop_assert!(!fits, "refused many with room");
                        }
                    }
                }
            }
            for key in 0..KEYS {
                let units = units_of(&held, key);
                let info = sem.info(&u64::from(key));
                prop_assert_eq!(info.map_or(0, |i| i.units), units, "units of key {}", key);
            }
        }
        for h in held {
            if let Kept::Record(acq) = h.kept {
                // A record is released by the semaphore, never by being dropped.
                let _ = sem.release(acq);
            }
        }
        for key in 0..KEYS {
            prop_assert!(sem.info(&u64::from(key)).is_none());
        }
        prop_assert_eq!(sem.stats().entries_in_use, 0);
        Ok(())
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    #[test]
    fn semaphore_matches_model(ops in proptest::collection::vec(model::op(), 1..40)) {
        model::run(ops)?;
    }
}

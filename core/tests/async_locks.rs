//! Async acquisition: exact counts with tasks and threads on the same keys, a cancellation
//! storm, multi-key futures without deadlock, and executor independence. Every critical section
//! is counted by an [`Occupancy`]: one holder at a time, and each entry completed or (only where
//! a timeout can cancel it) interrupted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Occupancy, Racy, within};
use keylock_core::{KeyPool, RwLock, StripedLock};

const LIMIT: Duration = Duration::from_secs(120);
const KEYS: usize = 16;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap()
}

fn assert_send<T: Send>(_: &T) {}

#[test]
fn tokio_pool_tasks_and_threads_exact_counts() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
        let counts: Arc<Vec<Racy>> = Arc::new((0..KEYS).map(|_| Racy::new()).collect());
        let occupancy = Arc::new(Occupancy::new(KEYS));
        const TASKS: usize = 1000;
        const PER_TASK: usize = 20;
        const THREADS: usize = 4;
        const PER_THREAD: usize = 2000;
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pool, counts, occupancy) = (pool.clone(), counts.clone(), occupancy.clone());
                std::thread::spawn(move || {
                    for i in 0..PER_THREAD {
                        let key = ((i + t) % KEYS) as u64;
                        let _g = pool.lock(&key);
                        let inside = occupancy.hold(key as usize);
                        counts[key as usize].bump();
                        inside.complete();
                    }
                })
            })
            .collect();
        runtime().block_on(async {
            let tasks: Vec<_> = (0..TASKS)
                .map(|t| {
                    let (pool, counts) = (pool.clone(), counts.clone());
                    let occupancy = occupancy.clone();
                    tokio::spawn(async move {
                        for i in 0..PER_TASK {
                            let key = ((i * 7 + t) % KEYS) as u64;
                            let guard = pool.lock_async_owned(&key).await;
                            assert_send(&guard);
                            let inside = occupancy.hold(key as usize);
                            counts[key as usize].bump();
                            if i % 5 == 0 {
                                // Hold the key across an await point.
                                tokio::task::yield_now().await;
                            }
                            inside.complete();
                            drop(guard);
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        for t in threads {
            t.join().unwrap();
        }
        occupancy.check();
        assert_eq!(
            occupancy.completed(),
            TASKS * PER_TASK + THREADS * PER_THREAD
        );
        let total: u64 = counts.iter().map(Racy::get).sum();
        assert_eq!(total, (TASKS * PER_TASK + THREADS * PER_THREAD) as u64);
        assert_eq!(pool.stats().held, 0);
        assert_eq!(pool.stats().waiting, 0);
    });
}

#[test]
fn tokio_striped_tasks_and_threads_exact_counts() {
    within(LIMIT, || {
        let lock = Arc::new(StripedLock::new(4).unwrap());
        let counts: Arc<Vec<Racy>> = Arc::new((0..4).map(|_| Racy::new()).collect());
        let occupancy = Arc::new(Occupancy::new(4));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (lock, counts, occupancy) = (lock.clone(), counts.clone(), occupancy.clone());
                std::thread::spawn(move || {
                    for i in 0..2000u64 {
                        let key = i + t;
                        let g = lock.lock(&key);
                        let inside = occupancy.hold(g.stripe());
                        counts[g.stripe()].bump();
                        inside.complete();
                    }
                })
            })
            .collect();
        runtime().block_on(async {
            let tasks: Vec<_> = (0..1000u64)
                .map(|t| {
                    let (lock, counts, occupancy) =
                        (lock.clone(), counts.clone(), occupancy.clone());
                    tokio::spawn(async move {
                        for i in 0..20u64 {
                            let g = lock.lock_async_owned(&(t * 31 + i)).await;
                            let inside = occupancy.hold(g.stripe());
                            counts[g.stripe()].bump();
                            tokio::task::yield_now().await;
                            inside.complete();
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        for t in threads {
            t.join().unwrap();
        }
        occupancy.check();
        assert_eq!(occupancy.completed(), 1000 * 20 + 4 * 2000);
        let total: u64 = counts.iter().map(Racy::get).sum();
        assert_eq!(total, 1000 * 20 + 4 * 2000);
        for k in 0..64u64 {
            assert!(!lock.is_locked(&k));
        }
    });
}

/// Timeouts cancel tasks at every point: while queued, while being handed a lock, and inside the
/// critical section at its await. A cancel inside legitimately leaves an entry without its
/// increment, so the test checks what holds whatever the timing: one holder per key (and per
/// stripe, and no reader beside a writer), every entry completed or interrupted, increments
/// equal to completed entries, and nothing held or queued afterwards.
#[test]
fn tokio_cancellation_storm_leaves_nothing_behind() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
        let striped = Arc::new(StripedLock::new(2).unwrap());
        let rw = Arc::new(RwLock::new());
        let counts: Arc<Vec<Racy>> = Arc::new((0..4).map(|_| Racy::new()).collect());
        let in_pool = Arc::new(Occupancy::new(4));
        let in_stripe = Arc::new(Occupancy::new(striped.stripes()));
        let in_rw = Arc::new(Occupancy::new(1));
        let done = Arc::new(AtomicUsize::new(0));
        let cancelled = Arc::new(AtomicUsize::new(0));
        runtime().block_on(async {
            let tasks: Vec<_> = (0..4000u64)
                .map(|t| {
                    let (pool, striped, rw) = (pool.clone(), striped.clone(), rw.clone());
                    let (done, cancelled) = (done.clone(), cancelled.clone());
                    let (counts, in_pool) = (counts.clone(), in_pool.clone());
                    let (in_stripe, in_rw) = (in_stripe.clone(), in_rw.clone());
                    tokio::spawn(async move {
                        let key = t % 4;
                        // Timeouts from 0 to ~300 µs: many expire while waiting, some exactly
                        // while the lock is being handed over, some inside.
                        let limit = Duration::from_micros((t * 37) % 300);
                        let work = async {
                            // Each Inside is declared after its guard, so it is dropped first.
                            let read = if t % 5 == 0 {
                                None
                            } else {
                                Some(rw.read_async_owned().await)
                            };
                            let reading = read.as_ref().map(|_| in_rw.hold_shared(0));
                            let _g = pool.lock_async_owned(&key).await;
                            let holding = in_pool.hold(key as usize);
                            let s = striped.lock_async_owned(&key).await;
                            let striping = in_stripe.hold(s.stripe());
                            let v = counts[key as usize].load();
                            tokio::task::yield_now().await;
                            counts[key as usize].store(v + 1);
                            striping.complete();
                            holding.complete();
                            if let Some(reading) = reading {
                                reading.complete();
                            }
                        };
                        let write = async {
                            let _w = rw.write_async_owned().await;
                            let writing = in_rw.hold(0);
                            tokio::task::yield_now().await;
                            writing.complete();
                        };
                        let outcome = if t % 50 == 0 {
                            tokio::time::timeout(limit, write).await
                        } else {
                            tokio::time::timeout(limit, work).await
                        };
                        match outcome {
                            Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                            Err(_) => cancelled.fetch_add(1, Ordering::Relaxed),
                        };
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        assert_eq!(
            done.load(Ordering::Relaxed) + cancelled.load(Ordering::Relaxed),
            4000
        );
        in_pool.check();
        in_stripe.check();
        in_rw.check();
        let total: u64 = counts.iter().map(Racy::get).sum();
        assert_eq!(total, in_pool.completed() as u64);
        let stats = pool.stats();
        assert_eq!(stats.held, 0, "{stats:?}");
        assert_eq!(stats.waiting, 0, "{stats:?}");
        assert!(pool.is_empty());
        for k in 0..4u64 {
            assert!(!striped.is_locked(&k));
            // A new acquire succeeds at once.
            drop(pool.try_lock(&k).unwrap());
            drop(striped.try_lock(&k).unwrap());
        }
        assert!(!rw.is_locked());
        drop(rw.try_write().unwrap());
        drop(rw.try_read().unwrap());
    });
}

#[test]
fn tokio_lock_many_async_overlapping_sets_finish() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
        let striped = Arc::new(StripedLock::new(16).unwrap());
        let counts: Arc<Vec<Racy>> = Arc::new((0..8).map(|_| Racy::new()).collect());
        let in_pool = Arc::new(Occupancy::new(8));
        let in_stripe = Arc::new(Occupancy::new(striped.stripes()));
        runtime().block_on(async {
            let tasks: Vec<_> = (0..400usize)
                .map(|t| {
                    let (pool, striped, counts) = (pool.clone(), striped.clone(), counts.clone());
                    let (in_pool, in_stripe) = (in_pool.clone(), in_stripe.clone());
                    tokio::spawn(async move {
                        for i in 0..10usize {
                            // Overlapping sets in opposite orders: a naive lock order deadlocks.
                            let a = ((t + i) % 8) as u64;
                            let b = ((t * 3 + 1) % 8) as u64;
                            let keys = if t % 2 == 0 { [a, b, a] } else { [b, a, b] };
                            let g = pool.lock_many_async_owned(keys.iter()).await;
                            let mut holding = vec![in_pool.hold(a as usize)];
                            counts[a as usize].bump();
                            if a != b {
                                holding.push(in_pool.hold(b as usize));
                                counts[b as usize].bump();
                            }
                            tokio::task::yield_now().await;
                            holding.into_iter().for_each(|h| h.complete());
                            drop(g);
                            let s = striped.lock_many_async_owned(keys.iter()).await;
                            let striping: Vec<_> = s.stripes().map(|i| in_stripe.hold(i)).collect();
                            tokio::task::yield_now().await;
                            striping.into_iter().for_each(|h| h.complete());
                            drop(s);
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        let expected: u64 = (0..400usize)
            .flat_map(|t| (0..10usize).map(move |i| (t, i)))
            .map(|(t, i)| if (t + i) % 8 == (t * 3 + 1) % 8 { 1 } else { 2 })
            .sum();
        in_pool.check();
        in_stripe.check();
        assert_eq!(in_pool.completed() as u64, expected);
        let total: u64 = counts.iter().map(Racy::get).sum();
        assert_eq!(total, expected);
        assert!(pool.is_empty());
        assert_eq!(pool.stats().waiting, 0);
    });
}

#[test]
fn works_on_futures_executor() {
    within(LIMIT, || {
        let pool: KeyPool<String> = KeyPool::new();
        let rw = RwLock::new();
        let striped = StripedLock::new(4).unwrap();
        futures::executor::block_on(async {
            let g = pool.lock_async("a").await;
            let r = rw.read_async().await;
            let s = striped.lock_async("a").await;
            assert!(pool.is_locked("a"));
            drop((g, r, s));
            let w = rw.write_async().await;
            assert!(rw.is_write_locked());
            drop(w);
        });
        // Two threads, each running 100 tasks on futures' single-threaded executor, contend
        // with this thread's blocking locks on one key.
        let pool = Arc::new(pool);
        let counter = Arc::new(Racy::new());
        let occupancy = Arc::new(Occupancy::new(1));
        let executors: Vec<_> = (0..2)
            .map(|_| {
                let (pool, counter, occupancy) = (pool.clone(), counter.clone(), occupancy.clone());
                std::thread::spawn(move || {
                    let tasks = (0..100).map(|_| {
                        let (pool, counter, occupancy) =
                            (pool.clone(), counter.clone(), occupancy.clone());
                        async move {
                            for _ in 0..10 {
                                let _g = pool.lock_async_owned("hot").await;
                                let inside = occupancy.hold(0);
                                counter.bump();
                                inside.complete();
                            }
                        }
                    });
                    futures::executor::block_on(futures::future::join_all(tasks));
                })
            })
            .collect();
        for _ in 0..2000 {
            let _g = pool.lock("hot");
            let inside = occupancy.hold(0);
            counter.bump();
            inside.complete();
        }
        for e in executors {
            e.join().unwrap();
        }
        occupancy.check();
        assert_eq!(occupancy.completed(), 4000);
        assert_eq!(counter.get(), 4000);
        assert!(pool.is_empty());
    });
}

#[test]
fn dropped_future_that_was_granted_passes_the_lock_on() {
    within(LIMIT, || {
        use std::future::Future;
        use std::pin::pin;
        use std::task::{Context, Waker};
        let pool: KeyPool<u64> = KeyPool::new();
        let striped = StripedLock::new(1).unwrap();
        let first = pool.lock(&1);
        let held = striped.lock(&1);
        let mut cx = Context::from_waker(Waker::noop());
        {
            let mut waiting = pin!(pool.lock_async(&1));
            let mut waiting_s = pin!(striped.lock_async(&1));
            assert!(waiting.as_mut().poll(&mut cx).is_pending());
            assert!(waiting_s.as_mut().poll(&mut cx).is_pending());
            // Let the waiter age past the fairness threshold so the release hands off to it.
            std::thread::sleep(Duration::from_millis(2));
            drop(first);
            drop(held);
            // Handed over but never polled again: dropping must pass the locks on.
        }
        assert!(!pool.is_locked(&1));
        assert!(!striped.is_locked(&1));
        assert!(pool.is_empty());
        assert_eq!(pool.stats().waiting, 0);
        drop(pool.try_lock(&1).unwrap());
        drop(striped.try_lock(&1).unwrap());
        // A future dropped before its first poll gives back its reservation too.
        let g = pool.lock(&2);
        let never_polled = pool.lock_async(&2);
        assert_eq!(pool.stats().waiting, 1);
        drop(never_polled);
        drop(g);
        assert_eq!(pool.stats().waiting, 0);
        assert_eq!(pool.stats().held, 0);
    });
}

/// A future that took its lock when it was made (the key was free) and is dropped without
/// ever being polled releases the lock.
#[test]
fn unpolled_ready_futures_release_on_drop() {
    let pool: KeyPool<u64> = KeyPool::new();
    let striped = StripedLock::new(8).unwrap();
    let a = pool.lock_async(&1);
    let b = striped.lock_async(&1u64);
    assert!(pool.is_locked(&1) && striped.is_locked(&1u64));
    drop((a, b));
    assert!(!pool.is_locked(&1) && !striped.is_locked(&1u64));
    assert_eq!(pool.stats().entries_in_use, 0);
}

/// `wait::poll_once` queues a future's waiter before it returns, on this thread, without
/// parking: a shared request made after it finds an exclusive waiter ahead and waits, as FIFO per
/// key says. A future that was made but never polled is not queued yet, so the same request
/// passes it. The waiter keeps its place for a later `block_on_until`.
#[test]
fn poll_once_queues_the_waiter_before_it_returns() {
    use keylock_core::wait::{block_on_until, poll_once};
    use std::pin::pin;
    use std::task::Poll;
    within(Duration::from_secs(30), || {
        let pool: KeyPool<u64> = KeyPool::new();
        let striped = StripedLock::new(1).unwrap();
        let reader = pool.lock_shared(&1);
        let reader_s = striped.lock_shared(&1u64);
        let mut writer = pin!(pool.lock_async(&1));
        let mut writer_s = pin!(striped.lock_async(&1u64));
        // Made, not polled: not in the queue, so a reader still gets in.
        drop(pool.try_lock_shared(&1).expect("nobody is queued yet"));
        drop(
            striped
                .try_lock_shared(&1u64)
                .expect("nobody is queued yet"),
        );
        assert!(poll_once(writer.as_mut()).is_pending());
        assert!(poll_once(writer_s.as_mut()).is_pending());
        assert!(
            pool.try_lock_shared(&1).is_err(),
            "a reader passed a queued writer"
        );
        assert!(
            striped.try_lock_shared(&1u64).is_err(),
            "a reader passed a queued writer"
        );
        assert_eq!(pool.info(&1).map(|i| i.waiters), Some(1));
        drop((reader, reader_s));
        let Poll::Ready(w) = block_on_until(writer.as_mut(), None) else {
            unreachable!("no deadline")
        };
        let Poll::Ready(ws) = block_on_until(writer_s.as_mut(), None) else {
            unreachable!("no deadline")
        };
        assert!(pool.try_lock_shared(&1).is_err() && striped.try_lock_shared(&1u64).is_err());
        drop((w, ws));
        assert!(!pool.is_locked(&1) && !striped.is_locked(&1u64));
    });
}

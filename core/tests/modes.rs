//! Per-key shared and exclusive modes (issue 13): overlap of shared holders, exclusion of
//! everything else, FIFO per key, and neither readers nor writers starve; under a mixed,
//! oversubscribed load with timeouts and cancellations.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::{Occupancy, within};
use keylock_core::{Error, KeyPool, LockOptions, Mode, StripedLock, Wait};

const LIMIT: Duration = Duration::from_secs(120);

/// N shared holders are inside at once (a barrier inside the critical section proves it), and
/// an exclusive request waits for all of them.
#[test]
fn shared_holders_overlap() {
    within(LIMIT, || {
        const N: usize = 4;
        for striped in [false, true] {
            let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
            let stripes = Arc::new(StripedLock::new(8).unwrap());
            let occupancy = Arc::new(Occupancy::new(1));
            let inside = Arc::new(Barrier::new(N + 1));
            let leave = Arc::new(Barrier::new(N + 1));
            let readers: Vec<_> = (0..N)
                .map(|_| {
                    let (pool, stripes, occupancy, inside, leave) = (
                        pool.clone(),
                        stripes.clone(),
                        occupancy.clone(),
                        inside.clone(),
                        leave.clone(),
                    );
                    thread::spawn(move || {
                        let (_a, _b);
                        if striped {
                            _a = Some(stripes.lock_shared(&7u64));
                        } else {
                            _b = Some(pool.lock_shared(&7));
                        }
                        let h = occupancy.hold_shared(0);
                        inside.wait();
                        leave.wait();
                        h.complete();
                    })
                })
                .collect();
            inside.wait();
            assert_eq!(occupancy.max_shared(0), N);
            if striped {
                assert_eq!(stripes.try_lock(&7u64).unwrap_err(), Error::WouldBlock);
                assert_eq!(stripes.info(&7u64).unwrap().holders as usize, N);
            } else {
                assert_eq!(pool.try_lock(&7).unwrap_err(), Error::WouldBlock);
                assert_eq!(pool.info(&7).unwrap().holders as usize, N);
            }
            leave.wait();
            for r in readers {
                r.join().unwrap();
            }
            occupancy.check();
            assert!(pool.try_lock(&7).is_ok() && stripes.try_lock(&7u64).is_ok());
        }
    });
}

/// FIFO per key: with a shared holder inside and an exclusive request queued, a new shared
/// request waits behind the exclusive one instead of joining the holder.
#[test]
fn shared_requests_queue_behind_a_waiting_writer() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
        let reader = pool.lock_shared(&1);
        let writer = {
            let pool = pool.clone();
            thread::spawn(move || pool.lock(&1).fence())
        };
        while pool.info(&1).unwrap().waiters == 0 {
            thread::yield_now();
        }
        assert_eq!(pool.try_lock_shared(&1).unwrap_err(), Error::WouldBlock);
        let late = {
            let pool = pool.clone();
            thread::spawn(move || pool.lock_shared(&1).fence())
        };
        drop(reader);
        let wf = writer.join().unwrap();
        let rf = late.join().unwrap();
        // The late reader read the writer's fence: it came after it.
        assert_eq!(rf, wf);
    });
}

/// A stream of overlapping readers cannot starve a writer, and a stream of writers cannot
/// starve a reader: each gets in while the stream goes on.
#[test]
fn neither_readers_nor_writers_starve() {
    within(LIMIT, || {
        for writers_stream in [false, true] {
            let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
            let stop = Arc::new(AtomicBool::new(false));
            let stream: Vec<_> = (0..3)
                .map(|_| {
                    let (pool, stop) = (pool.clone(), stop.clone());
                    thread::spawn(move || {
                        let mut n = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            let g = if writers_stream {
                                pool.lock(&5)
                            } else {
                                pool.lock_shared(&5)
                            };
                            std::hint::spin_loop();
                            drop(g);
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            // Let the stream get going, then ask for the other mode, many times.
            thread::sleep(Duration::from_millis(20));
            for _ in 0..50 {
                let g = if writers_stream {
                    pool.lock_shared(&5)
                } else {
                    pool.lock(&5)
                };
                drop(g);
            }
            stop.store(true, Ordering::Relaxed);
            let total: u64 = stream.into_iter().map(|t| t.join().unwrap()).sum();
            assert!(total > 0);
            assert!(!pool.is_locked(&5));
        }
    });
}

/// 8 threads (on 2 cores) and 200 tokio tasks mix shared and exclusive acquisitions of 4 keys
/// on a pool and a striped lock, with try, timed and cancelled attempts: exclusive holders
/// never overlap anything, every entry is accounted for, and nothing is left held or queued.
#[test]
fn tokio_mixed_modes_oversubscribed_with_timeouts_and_cancels() {
    within(LIMIT, || {
        let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::builder().retain(2).build());
        let stripes = Arc::new(StripedLock::new(4).unwrap());
        let occupancy = Arc::new(Occupancy::new(8));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (pool, stripes, occupancy) = (pool.clone(), stripes.clone(), occupancy.clone());
                thread::spawn(move || {
                    for i in 0..3_000u64 {
                        let key = (i * 7 + t) % 4;
                        let mode = if (i + t) % 3 == 0 {
                            Mode::Exclusive
                        } else {
                            Mode::Shared
                        };
                        let wait = match i % 3 {
                            0 => Wait::Forever,
                            1 => Wait::No,
                            _ => Wait::For(Duration::from_micros(100)),
                        };
                        let opts = LockOptions::new().mode(mode).wait(wait);
                        if i % 2 == 0 {
                            let Ok(g) = pool.lock_with(&key, opts) else {
                                continue;
                            };
                            let h = hold(&occupancy, key as usize, mode);
                            busy(i);
                            h.complete();
                            drop(g);
                        } else {
                            let Ok(g) = stripes.lock_with(&key, opts) else {
                                continue;
                            };
                            let h = hold(&occupancy, 4 + stripes.stripe_of(&key), mode);
                            busy(i);
                            h.complete();
                            drop(g);
                        }
                    }
                })
            })
            .collect();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let cancelled_inside = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            let tasks: Vec<_> = (0..200u64)
                .map(|t| {
                    let (pool, occupancy, cancelled) =
                        (pool.clone(), occupancy.clone(), cancelled_inside.clone());
                    tokio::spawn(async move {
                        for i in 0..50u64 {
                            let key = (i + t) % 4;
                            let mode = if (i + t) % 4 == 0 {
                                Mode::Exclusive
                            } else {
                                Mode::Shared
                            };
                            let opts = LockOptions::new().mode(mode);
                            let work = async {
                                let g = pool.lock_with_async(&key, opts).await?;
                                let h = hold(&occupancy, key as usize, mode);
                                tokio::task::yield_now().await;
                                h.complete();
                                drop(g);
                                Ok::<_, Error>(())
                            };
                            let limit = Duration::from_micros(200 + (t * 37 + i * 11) % 800);
                            if tokio::time::timeout(limit, work).await.is_err() {
                                cancelled.fetch_add(1, Ordering::Relaxed);
                            }
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
        assert!(occupancy.completed() > 0);
        let stats = pool.stats();
        assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
        assert_eq!(stripes.stats().held, 0);
        assert_eq!(stripes.stats().queued, 0);
    });
}

/// A critical section long enough for another thread to run into it if the lock let it.
fn busy(i: u64) {
    for _ in 0..200 {
        std::hint::spin_loop();
    }
    if i.is_multiple_of(16) {
        thread::yield_now();
    }
}

fn hold(occupancy: &Occupancy, key: usize, mode: Mode) -> common::Inside<'_> {
    match mode {
        Mode::Exclusive => occupancy.hold(key),
        Mode::Shared => occupancy.hold_shared(key),
    }
}

//! loom models of every algorithm: acquire, release, timeout, hand-off, recycling and async
//! cancellation, explored over all interleavings up to `LOOM_MAX_PREEMPTIONS` preemptions.
//!
//! Run with `make loom` (or `RUSTFLAGS="--cfg keylock_loom" cargo test --release --test loom`).
//! `make loom-swap` builds the RwLock with its egress/ingress reads swapped and expects
//! `rw_writer_excludes_readers` to fail.
#![cfg(keylock_loom)]

use std::time::Duration;

use keylock_core::{DefaultHashBuilder, Error, KeyPool, RwLock, StripedLock};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

fn pool() -> KeyPool<u64> {
    KeyPool::with_hasher(DefaultHashBuilder::with_seeds(1, 2, 3, 4))
}

/// Enters a critical section: fails the model if someone else is inside.
fn enter(inside: &AtomicUsize) {
    assert_eq!(
        inside.fetch_add(1, Ordering::SeqCst),
        0,
        "two holders at once"
    );
}

fn leave(inside: &AtomicUsize) {
    inside.fetch_sub(1, Ordering::SeqCst);
}

#[test]
fn striped_lock_excludes() {
    loom::model(|| {
        let lock = Arc::new(StripedLock::with_seed(1, 9).unwrap());
        let inside = Arc::new(AtomicUsize::new(0));
        let t = {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || {
                let _g = lock.lock(&1u64);
                enter(&inside);
                leave(&inside);
            })
        };
        {
            let _g = lock.lock(&2u64); // one stripe: every key collides
            enter(&inside);
            leave(&inside);
        }
        t.join().unwrap();
        assert!(!lock.is_locked(&1u64));
    });
}

#[test]
fn striped_timeout_races_release() {
    loom::model(|| {
        let lock = Arc::new(StripedLock::with_seed(1, 9).unwrap());
        let g = lock.lock(&1u64);
        let t = {
            let lock = lock.clone();
            thread::spawn(
                move || match lock.try_lock_for(&1u64, Duration::from_millis(1)) {
                    Ok(g) => drop(g),
                    Err(e) => assert_eq!(e, Error::TimedOut),
                },
            )
        };
        drop(g);
        t.join().unwrap();
        // Whatever happened, nothing is left held and no waiter is left queued.
        drop(lock.try_lock(&1u64).expect("free after the race"));
    });
}

#[test]
fn pool_handoff_and_recycle() {
    loom::model(|| {
        let pool = Arc::new(pool());
        let inside = Arc::new(AtomicUsize::new(0));
        let t = {
            let (pool, inside) = (pool.clone(), inside.clone());
            thread::spawn(move || {
                {
                    let _g = pool.lock(&1);
                    enter(&inside);
                    leave(&inside);
                }
                // The slot of key 1 may be recycled for key 2 right here.
                drop(pool.lock(&2));
            })
        };
        {
            let _g = pool.lock(&1);
            enter(&inside);
            leave(&inside);
        }
        t.join().unwrap();
        let stats = pool.stats();
        assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
    });
}

#[test]
fn pool_timeout_races_release() {
    loom::model(|| {
        let pool = Arc::new(pool());
        let g = pool.lock(&7);
        let t = {
            let pool = pool.clone();
            thread::spawn(
                move || match pool.try_lock_for(&7, Duration::from_millis(1)) {
                    Ok(g) => drop(g),
                    Err(e) => assert_eq!(e, Error::TimedOut),
                },
            )
        };
        drop(g);
        t.join().unwrap();
        let stats = pool.stats();
        assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
    });
}

#[test]
fn rw_writer_excludes_readers() {
    loom::model(|| {
        let rw = Arc::new(RwLock::new());
        // Main is a reader that is inside before the writer arrives and leaves later; a second
        // reader arrives while the writer drains, and must not make the writer's sums agree.
        let inside = Arc::new(AtomicUsize::new(1));
        let held = rw.read();
        let writer = {
            let (rw, inside) = (rw.clone(), inside.clone());
            thread::spawn(move || {
                let _w = rw.write();
                assert_eq!(
                    inside.load(Ordering::SeqCst),
                    0,
                    "a reader is inside with the writer"
                );
            })
        };
        let late = {
            let (rw, inside) = (rw.clone(), inside.clone());
            thread::spawn(move || {
                let _r = rw.read();
                inside.fetch_add(1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
            })
        };
        inside.fetch_sub(1, Ordering::SeqCst);
        drop(held);
        writer.join().unwrap();
        late.join().unwrap();
        assert!(!rw.is_locked());
    });
}

#[test]
fn rw_write_timeout_races_reader() {
    loom::model(|| {
        let rw = Arc::new(RwLock::new());
        let r = rw.read();
        let t = {
            let rw = rw.clone();
            thread::spawn(move || match rw.try_write_for(Duration::from_millis(1)) {
                Ok(w) => drop(w),
                Err(e) => assert_eq!(e, Error::TimedOut),
            })
        };
        drop(r);
        t.join().unwrap();
        assert!(!rw.is_locked());
        drop(rw.try_write().expect("free after the race"));
    });
}

#[test]
fn async_cancel_races_release() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};
    for hand_off in [false, true] {
        keylock_core::wait::loom_hand_off(hand_off);
        loom::model(|| {
            let pool = Arc::new(pool());
            let t = {
                let pool = pool.clone();
                thread::spawn(move || drop(pool.lock(&3)))
            };
            {
                let mut fut = pin!(pool.lock_async(&3));
                let mut cx = Context::from_waker(Waker::noop());
                // Either it gets the key now, or it queues and is dropped while the holder
                // releases: a cancel racing a release (and maybe a hand-off to the dropped waiter).
                let _ = fut.as_mut().poll(&mut cx);
            }
            t.join().unwrap();
            let stats = pool.stats();
            assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
        });
    }
    keylock_core::wait::loom_hand_off(false);
}

/// A future made while its key is held goes straight to its wait (the slow start makes no
/// attempt it would lose), and the holder releases on another thread while that future's first
/// poll runs: the waiter must get the key (a lost wake-up ends the model with every thread
/// parked, which loom reports as a deadlock), alone, and leave nothing held, queued or reserved.
#[test]
fn async_made_while_held_races_the_release() {
    for hand_off in [false, true] {
        keylock_core::wait::loom_hand_off(hand_off);
        loom::model(|| {
            let pool = Arc::new(pool());
            let inside = Arc::new(AtomicUsize::new(0));
            let made = Arc::new(AtomicUsize::new(0));
            let g = pool.lock(&1);
            enter(&inside);
            let t = {
                let (pool, inside, made) = (pool.clone(), inside.clone(), made.clone());
                thread::spawn(move || {
                    let fut = pool.lock_async(&1);
                    made.store(1, Ordering::SeqCst);
                    loom::future::block_on(async {
                        let _g = fut.await;
                        enter(&inside);
                        leave(&inside);
                    });
                })
            };
            wait_for(&made);
            leave(&inside);
            drop(g);
            t.join().unwrap();
            let stats = pool.stats();
            assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
        });
    }
    keylock_core::wait::loom_hand_off(false);
}

#[test]
fn async_and_thread_waiters_share_a_queue() {
    loom::model(|| {
        let lock = Arc::new(StripedLock::with_seed(1, 9).unwrap());
        let inside = Arc::new(AtomicUsize::new(0));
        let t = {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || {
                let _g = lock.lock(&1u64);
                enter(&inside);
                leave(&inside);
            })
        };
        loom::future::block_on(async {
            let _g = lock.lock_async(&1u64).await;
            enter(&inside);
            leave(&inside);
        });
        t.join().unwrap();
        assert!(!lock.is_locked(&1u64));
    });
}

/// Two threads wait for a key that a third holds; it releases the key (notifying one), takes it
/// again at once and releases it again. With at most one notified waiter out at a time, the
/// second release wakes nobody, and both waiters must still get in: a model in which one of
/// them is never woken ends with every thread parked, which loom reports as a deadlock.
#[test]
fn a_release_while_a_notified_waiter_is_out_loses_nobody() {
    // Three threads: two preemptions rather than the other models' three, to stay short (about
    // a minute). Two are enough: with a waiter that never paid its notification back (a
    // deliberately broken build, tried by hand), two report the deadlock and one does not.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let pool = Arc::new(pool());
        let inside = Arc::new(AtomicUsize::new(0));
        let g = pool.lock(&1);
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (pool, inside) = (pool.clone(), inside.clone());
                thread::spawn(move || {
                    let _g = pool.lock(&1);
                    enter(&inside);
                    leave(&inside);
                })
            })
            .collect();
        drop(g);
        {
            let _g = pool.lock(&1);
            enter(&inside);
            leave(&inside);
        }
        for t in waiters {
            t.join().unwrap();
        }
        let stats = pool.stats();
        assert_eq!((stats.held, stats.waiting), (0, 0));
    });
}

/// Waits (yielding to loom) until `flag` is set.
fn wait_for(flag: &AtomicUsize) {
    while flag.load(Ordering::SeqCst) == 0 {
        thread::yield_now();
    }
}

/// A holder's guard is dropped after another thread force-unlocked the key, while that thread
/// takes the key again: the stale drop must not release the new holder, so a third acquirer
/// never joins it inside.
#[test]
fn stale_release_races_force_unlock_on_a_stripe() {
    loom::model(|| {
        let lock = Arc::new(StripedLock::with_seed(1, 9).unwrap());
        let inside = Arc::new(AtomicUsize::new(0));
        let forced = Arc::new(AtomicUsize::new(0));
        let stale = lock.lock(&1u64);
        let first = stale.fence();
        let t = {
            let (lock, inside, forced) = (lock.clone(), inside.clone(), forced.clone());
            thread::spawn(move || {
                assert!(lock.force_unlock(&1u64));
                forced.store(1, Ordering::SeqCst);
                let g = lock.lock(&1u64);
                assert!(g.fence() > first);
                enter(&inside);
                leave(&inside);
            })
        };
        wait_for(&forced);
        drop(stale);
        {
            let _g = lock.lock(&1u64);
            enter(&inside);
            leave(&inside);
        }
        t.join().unwrap();
        assert!(!lock.is_locked(&1u64));
    });
}

/// The same race on a pool key, whose slot may also be recycled in between.
#[test]
fn stale_release_races_force_unlock_on_a_pool_key() {
    loom::model(|| {
        let pool = Arc::new(pool());
        let inside = Arc::new(AtomicUsize::new(0));
        let forced = Arc::new(AtomicUsize::new(0));
        let stale = pool.lock(&1);
        let first = stale.fence();
        let t = {
            let (pool, inside, forced) = (pool.clone(), inside.clone(), forced.clone());
            thread::spawn(move || {
                assert!(pool.force_unlock(&1));
                forced.store(1, Ordering::SeqCst);
                let g = pool.lock(&1);
                assert!(g.fence() > first);
                enter(&inside);
                leave(&inside);
            })
        };
        wait_for(&forced);
        drop(stale);
        {
            let _g = pool.lock(&1);
            enter(&inside);
            leave(&inside);
        }
        t.join().unwrap();
        let stats = pool.stats();
        assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
    });
}

/// Writers of an RwLock in a row: each excludes the other and gets a higher fence. (A write
/// acquisition is held only by its move-only guard, so there is no stale release to race.)
#[test]
fn rw_writer_fences_rise() {
    loom::model(|| {
        let rw = Arc::new(RwLock::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let t = {
            let (rw, inside) = (rw.clone(), inside.clone());
            thread::spawn(move || {
                let w = rw.write();
                enter(&inside);
                leave(&inside);
                w.fence()
            })
        };
        let mine = {
            let w = rw.write();
            enter(&inside);
            leave(&inside);
            w.fence()
        };
        let theirs = t.join().unwrap();
        assert_ne!(mine, theirs);
        assert!(mine.max(theirs) == 2 && mine.min(theirs) == 1);
    });
}

/// A holder whose lease has ended releases while a waiter takes over: the release is refused
/// (`LeaseExpired`), the waiter's fence is higher, and nothing is left held.
#[test]
fn lease_expiry_races_release() {
    use keylock_core::{LockOptions, Wait};
    for hand_off in [false, true] {
        keylock_core::wait::loom_hand_off(hand_off);
        loom::model(|| {
            let pool = Arc::new(pool());
            let leased = pool
                .lock_with(&5, LockOptions::new().lease(Duration::ZERO))
                .unwrap();
            let first = leased.fence();
            let t = {
                let pool = pool.clone();
                thread::spawn(move || {
                    let g = pool
                        .lock_with(&5, LockOptions::new().wait(Wait::Forever))
                        .unwrap();
                    assert!(g.fence() > first);
                })
            };
            assert_eq!(leased.release(), Err(Error::LeaseExpired));
            t.join().unwrap();
            let stats = pool.stats();
            assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
        });
    }
    keylock_core::wait::loom_hand_off(false);
}

/// Two shared holders and one exclusive holder of a stripe: the exclusive one is never inside
/// with a shared one, and everything is released.
#[test]
fn modes_on_a_stripe() {
    loom::model(|| {
        let lock = Arc::new(StripedLock::with_seed(1, 9).unwrap());
        let readers = Arc::new(AtomicUsize::new(0));
        let writer = Arc::new(AtomicUsize::new(0));
        let t = {
            let (lock, readers, writer) = (lock.clone(), readers.clone(), writer.clone());
            thread::spawn(move || {
                let _g = lock.lock_shared(&1u64);
                readers.fetch_add(1, Ordering::SeqCst);
                assert_eq!(writer.load(Ordering::SeqCst), 0, "a writer beside a reader");
                readers.fetch_sub(1, Ordering::SeqCst);
            })
        };
        {
            let _g = lock.lock(&2u64);
            writer.fetch_add(1, Ordering::SeqCst);
            assert_eq!(
                readers.load(Ordering::SeqCst),
                0,
                "a reader beside the writer"
            );
            writer.fetch_sub(1, Ordering::SeqCst);
        }
        {
            let _g = lock.lock_shared(&3u64);
            assert_eq!(writer.load(Ordering::SeqCst), 0);
        }
        t.join().unwrap();
        assert!(!lock.is_locked(&1u64));
    });
}

/// Shared and exclusive holders of one pool key, with the slot released and taken again.
#[test]
fn modes_on_a_pool_slot() {
    for hand_off in [false, true] {
        keylock_core::wait::loom_hand_off(hand_off);
        loom::model(|| {
            let pool = Arc::new(pool());
            let readers = Arc::new(AtomicUsize::new(0));
            let writer = Arc::new(AtomicUsize::new(0));
            let t = {
                let (pool, readers, writer) = (pool.clone(), readers.clone(), writer.clone());
                thread::spawn(move || {
                    let _g = pool.lock_shared(&1);
                    readers.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(writer.load(Ordering::SeqCst), 0, "a writer beside a reader");
                    readers.fetch_sub(1, Ordering::SeqCst);
                })
            };
            {
                let _g = pool.lock(&1);
                writer.fetch_add(1, Ordering::SeqCst);
                assert_eq!(
                    readers.load(Ordering::SeqCst),
                    0,
                    "a reader beside the writer"
                );
                writer.fetch_sub(1, Ordering::SeqCst);
            }
            t.join().unwrap();
            let stats = pool.stats();
            assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
        });
    }
    keylock_core::wait::loom_hand_off(false);
}

/// A releasing holder hands a stripe to a queued shared waiter while another thread tries to
/// take the free stripe exclusively on the fast path: the hand-over must check the word in the
/// same compare-and-swap, or the two end up inside together. (The waiter is a future polled by
/// the releasing thread, so that it is queued before the release without spinning.)
#[test]
fn hand_over_races_a_fast_path_acquirer() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    loom::model(|| {
        let lock = Arc::new(StripedLock::with_seed(1, 9).unwrap());
        let writers = Arc::new(AtomicUsize::new(0));
        let readers = Arc::new(AtomicUsize::new(0));
        let held = lock.lock(&1u64);
        let mut cx = Context::from_waker(Waker::noop());
        let mut fut = pin!(lock.lock_shared_async(&1u64));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        let barger = {
            let (lock, readers, writers) = (lock.clone(), readers.clone(), writers.clone());
            thread::spawn(move || {
                if let Ok(_g) = lock.try_lock(&1u64) {
                    writers.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(
                        readers.load(Ordering::SeqCst),
                        0,
                        "a reader beside a writer"
                    );
                    writers.fetch_sub(1, Ordering::SeqCst);
                }
            })
        };
        drop(held);
        let guard = loop {
            match fut.as_mut().poll(&mut cx) {
                Poll::Ready(g) => break g,
                Poll::Pending => thread::yield_now(),
            }
        };
        readers.fetch_add(1, Ordering::SeqCst);
        assert_eq!(
            writers.load(Ordering::SeqCst),
            0,
            "a writer beside a reader"
        );
        readers.fetch_sub(1, Ordering::SeqCst);
        drop(guard);
        barger.join().unwrap();
        assert!(!lock.is_locked(&1u64));
    });
}

/// Units of a semaphore inside at once, checked against its permits on every entry.
fn enter_units(inside: &AtomicUsize, weight: usize, permits: usize) {
    let now = inside.fetch_add(weight, Ordering::SeqCst) + weight;
    assert!(now <= permits, "more units inside than permits: {now}");
}

/// A semaphore of 2 permits: one unit held while another thread asks for 2 and a third
/// caller for 1. The units inside never pass the permits, whichever way the holders join,
/// leave and hand over (the `keylock_mutant_overfull` build lets one unit too many in, and
/// this model must catch it).
#[test]
fn semaphore_units_never_exceed_permits() {
    use keylock_core::KeyedSemaphore;
    loom::model(|| {
        let sem: Arc<KeyedSemaphore<u64>> = Arc::new(
            KeyedSemaphore::builder(2)
                .hasher(DefaultHashBuilder::with_seeds(1, 2, 3, 4))
                .build()
                .unwrap(),
        );
        let inside = Arc::new(AtomicUsize::new(0));
        let first = sem.acquire(&1, 1).unwrap();
        enter_units(&inside, 1, 2);
        let t = {
            let (sem, inside) = (sem.clone(), inside.clone());
            thread::spawn(move || {
                let _p = sem.acquire(&1, 2).unwrap();
                enter_units(&inside, 2, 2);
                inside.fetch_sub(2, Ordering::SeqCst);
            })
        };
        inside.fetch_sub(1, Ordering::SeqCst);
        drop(first);
        if let Ok(_p) = sem.try_acquire(&1, 1) {
            enter_units(&inside, 1, 2);
            inside.fetch_sub(1, Ordering::SeqCst);
        }
        t.join().unwrap();
        assert!(sem.info(&1).is_none());
        assert_eq!(sem.stats().entries_in_use, 0);
    });
}

/// A semaphore's sole holder releases its record while another caller joins it (the holders
/// move beside the word): the release ends exactly its own units, and nothing is left held.
#[test]
fn semaphore_sole_holder_release_races_a_join() {
    use keylock_core::KeyedSemaphore;
    loom::model(|| {
        let sem: Arc<KeyedSemaphore<u64>> = Arc::new(
            KeyedSemaphore::builder(2)
                .hasher(DefaultHashBuilder::with_seeds(1, 2, 3, 4))
                .build()
                .unwrap(),
        );
        let a = sem.acquire(&1, 1).unwrap().into_acquisition();
        let t = {
            let sem = sem.clone();
            thread::spawn(move || {
                let b = sem.acquire(&1, 1).unwrap();
                assert!(sem.info(&1).is_some_and(|i| i.units >= 1));
                let fence = b.fence();
                drop(b);
                fence
            })
        };
        let first = a.fence();
        sem.release(a).unwrap();
        let second = t.join().unwrap();
        assert!(second > first);
        assert!(sem.info(&1).is_none());
    });
}

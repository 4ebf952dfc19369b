//! The operations of the trait, against one server, with the in-process semantics.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use keylock_core::{Error, LockKey, LockOptions, Mode, OpenOptions, Owner, Wait};

use crate::{Server, key, names_under, open, wait_until, within};

const NO: LockOptions = LockOptions::new().wait(Wait::No);

#[test]
fn try_timed_blocking_and_release_by_acquisition() {
    let server = Server::start();
    let a = open(&server, "prefix=s");
    let b = open(&server, "prefix=s");
    let held = a.acquire(key("k"), &LockOptions::new()).unwrap();
    assert_eq!(held.mode(), Mode::Exclusive);
    assert_eq!(b.acquire(key("k"), &NO).unwrap_err(), Error::WouldBlock);
    let timed = LockOptions::new().wait(Wait::For(Duration::from_millis(150)));
    assert_eq!(b.acquire(key("k"), &timed).unwrap_err(), Error::TimedOut);
    assert!(b.is_locked(key("k")).unwrap());
    let info = b.info(key("k")).unwrap().unwrap();
    assert_eq!(
        (info.fence, info.mode, info.holders),
        (held.fence(), Mode::Exclusive, 1)
    );
    assert!(a.is_current(&held).unwrap());
    // A blocked waiter is woken by the release.
    let b2 = Arc::clone(&b);
    let waiter = std::thread::spawn(move || b2.acquire(key("k"), &LockOptions::new()));
    wait_until(|| b.info(key("k")).unwrap().unwrap().waiters != 0);
    let fence = held.fence();
    a.release(held).unwrap();
    let next = within(Duration::from_secs(10), move || waiter.join().unwrap()).unwrap();
    assert!(next.fence() > fence);
    b.release(next).unwrap();
    assert!(!a.is_locked(key("k")).unwrap());
    assert_eq!(a.info(key("k")).unwrap(), None);
}

/// Rounds of: a hold, an acquire from another open that waits `wait` and times out, no waiter
/// left in the queue, the release, and a try from that other open, which must get the key.
fn no_waiter_outlives_a_timeout(prefix: &str, wait: Duration, rounds: usize) {
    let server = Server::start();
    let a = open(&server, prefix);
    let b = open(&server, prefix);
    let timed = LockOptions::new().wait(Wait::For(wait));
    for round in 0..rounds {
        let held = a.acquire(key("k"), &LockOptions::new()).unwrap();
        assert_eq!(b.acquire(key("k"), &timed).unwrap_err(), Error::TimedOut);
        let waiters = b.info(key("k")).unwrap().map(|i| i.waiters);
        assert_eq!(
            waiters,
            Some(0),
            "round {round}: a waiter left in the queue"
        );
        a.release(held).unwrap();
        let next = b.acquire(key("k"), &NO);
        let next = next.unwrap_or_else(|e| panic!("round {round}: the free key refused: {e}"));
        b.release(next).unwrap();
    }
}

/// A zero timeout never queues a waiter, so a key it found held is free to everyone once its
/// holder releases it. (A waiter left there until its leave arrived would be woken by that
/// release and keep the key from a try made right after the timeout.)
#[test]
fn a_zero_timeout_leaves_no_waiter() {
    no_waiter_outlives_a_timeout("prefix=z", Duration::ZERO, 50);
}

/// A wait that runs out of time returns once its waiter has left the queue. (A waiter left to
/// leave in the background stood in the queue a round trip longer; a release then woke it, and
/// the try was refused.)
#[test]
fn a_timed_out_wait_has_left_the_queue_when_it_returns() {
    no_waiter_outlives_a_timeout("prefix=tw", Duration::from_millis(20), 30);
}

/// A free key keeps no names on the server (the scope's fence floor aside), whatever freed it:
/// a release, exclusive or shared, a waiter's leave, a force-unlock. Its fences still rise when
/// it is locked again, and a holder whose lease ran out keeps the key's names until the next
/// holder has learned `owner_died`.
#[test]
fn a_free_key_keeps_no_names_and_its_fences_still_rise() {
    let server = Server::start();
    let a = open(&server, "prefix=idle");
    let b = open(&server, "prefix=idle");
    let only_the_floor = ["{idle}:fence".to_owned()];
    let mut last = 0;
    for round in 0..3 {
        let held = a.acquire(key("k"), &LockOptions::new()).unwrap();
        assert!(held.fence() > last, "round {round}: the fence went back");
        last = held.fence();
        a.release(held).unwrap();
        assert_eq!(
            names_under(&server, "idle"),
            only_the_floor,
            "round {round}"
        );
    }
    for i in 0..100 {
        let k = format!("many{i}");
        let opts = LockOptions::new();
        let held = a.acquire(key(&k), &if i % 2 == 0 { opts } else { opts.shared() });
        a.release(held.unwrap()).unwrap();
    }
    assert_eq!(names_under(&server, "idle"), only_the_floor);
    // A waiter that timed out and left, then a force-unlock of its holder.
    let held = a.acquire(key("w"), &LockOptions::new()).unwrap();
    let short = LockOptions::new().wait(Wait::For(Duration::from_millis(20)));
    assert_eq!(b.acquire(key("w"), &short).unwrap_err(), Error::TimedOut);
    assert!(b.force_unlock(key("w")).unwrap());
    assert_eq!(names_under(&server, "idle"), only_the_floor);
    assert_eq!(a.release(held).unwrap_err(), Error::NotOwner);
    // Locked again, after other keys came and went: above every fence it had.
    let again = b.acquire(key("k"), &LockOptions::new()).unwrap();
    assert!(again.fence() > last, "{} after {last}", again.fence());
    b.release(again).unwrap();
    // A hold that ends by its lease keeps the key's names (`info` tidies it meanwhile), so
    // that the next holder learns it.
    let leased = LockOptions::new().lease(Duration::from_millis(100));
    let lapsed = a.acquire(key("d"), &leased).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(a.info(key("d")).unwrap(), None);
    assert_ne!(names_under(&server, "idle"), only_the_floor);
    let next = b.acquire(key("d"), &NO).unwrap();
    assert!(next.owner_died(), "the lapsed hold was forgotten");
    assert!(next.fence() > lapsed.fence());
    b.release(next).unwrap();
    assert_eq!(names_under(&server, "idle"), only_the_floor);
    // A key freed while a waiter stands in its queue keeps its names, and the waiter its place:
    // a try is refused until the waiter's registration lapses. (The waiter is written into the
    // queue by hand, as the acquire script queues one, so that it never comes to take the key.)
    let held = a.acquire(key("q"), &LockOptions::new()).unwrap();
    let mut raw = server.client();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    // Its registration lapses 4 s from now: room for the four calls below on a loaded machine.
    let lapse = secs * 1000 + micros / 1000 + 4000;
    let () = redis::pipe()
        .zadd("{idle}:kq:q", "xstill-waiting", 1)
        .zadd("{idle}:ke:q", "xstill-waiting", lapse)
        .query(&mut raw)
        .unwrap();
    a.release(held).unwrap();
    assert_eq!(b.acquire(key("q"), &NO).unwrap_err(), Error::WouldBlock);
    assert_eq!(b.info(key("q")).unwrap(), None);
    assert_eq!(b.acquire(key("q"), &NO).unwrap_err(), Error::WouldBlock);
    let got = b.acquire(
        key("q"),
        &LockOptions::new().wait(Wait::For(Duration::from_secs(10))),
    );
    b.release(got.unwrap()).unwrap();
    // (Less the hand-written waiter's wake-up list, pushed when the key came free, which
    // expires by itself a minute later.)
    let mut left = names_under(&server, "idle");
    left.retain(|n| n != "{idle}:w:still-waiting");
    assert_eq!(left, only_the_floor);
}

#[test]
fn async_acquire_needs_no_runtime_and_cancels_cleanly() {
    let server = Server::start();
    let a = open(&server, "prefix=as");
    let b = open(&server, "prefix=as");
    let held = a.acquire(key("k"), &LockOptions::new()).unwrap();
    // Polled by futures' executor: no tokio in the caller.
    let fut = Arc::clone(&b).acquire_async(key("k"), &LockOptions::new());
    let release = {
        let a = Arc::clone(&a);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            a.release(held).unwrap();
        })
    };
    let got = within(Duration::from_secs(10), move || {
        futures::executor::block_on(fut)
    })
    .unwrap();
    release.join().unwrap();
    // A pending future that is dropped leaves the queue and holds nothing.
    let mut pending = Arc::clone(&a).acquire_async(key("k"), &LockOptions::new());
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(pending.as_mut().poll(&mut cx).is_pending());
    wait_until(|| b.info(key("k")).unwrap().unwrap().waiters != 0);
    drop(pending);
    wait_until(|| b.info(key("k")).unwrap().unwrap().waiters == 0);
    b.release(got).unwrap();
    assert!(!a.is_locked(key("k")).unwrap());
    let again = a.acquire(key("k"), &NO).unwrap();
    a.release(again).unwrap();
}

#[test]
fn a_dropped_waiter_holds_nothing_after_its_block_ends() {
    let server = Server::start();
    let a = open(&server, "prefix=dw");
    let b = open(&server, "prefix=dw");
    // A holder whose lease ends in 1.5 s: the waiter blocks until then at the most, and Redis
    // runs its next attempt, sent behind the block, when the block ends.
    let held = a
        .acquire(
            key("k"),
            &LockOptions::new().lease(Duration::from_millis(1500)),
        )
        .unwrap();
    let mut pending = Arc::clone(&b).acquire_async(key("k"), &LockOptions::new());
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(pending.as_mut().poll(&mut cx).is_pending());
    wait_until(|| a.info(key("k")).unwrap().unwrap().waiters != 0);
    drop(pending);
    a.release(held).unwrap();
    // Past the block's end: the attempt that ran after it (for a token nobody has, with the
    // scope's 30 s lease) was undone behind it, so the key is free.
    std::thread::sleep(Duration::from_millis(2500));
    let again = a.acquire(key("k"), &NO).unwrap();
    a.release(again).unwrap();
    assert_eq!(b.info(key("k")).unwrap(), None);
}

#[test]
fn acquire_many_is_all_or_nothing() {
    let server = Server::start();
    let a = open(&server, "prefix=m");
    let b = open(&server, "prefix=m");
    let hb = b.acquire(key("b"), &LockOptions::new()).unwrap();
    let both = [(key("a"), Mode::Exclusive), (key("b"), Mode::Shared)];
    assert_eq!(a.acquire_many(&both, &NO).unwrap_err(), Error::WouldBlock);
    assert!(
        !a.is_locked(key("a")).unwrap(),
        "nothing held after a failed multi-key try"
    );
    let a2 = Arc::clone(&a);
    let waiter = std::thread::spawn(move || {
        a2.acquire_many(
            &[
                (key("b"), Mode::Shared),
                (key("a"), Mode::Exclusive),
                (key("a"), Mode::Exclusive),
            ],
            &LockOptions::new(),
        )
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !a.is_locked(key("a")).unwrap(),
        "a waiting multi-key acquire holds nothing"
    );
    b.release(hb).unwrap();
    let got = within(Duration::from_secs(10), move || waiter.join().unwrap()).unwrap();
    assert_eq!(got.len(), 2, "duplicates collapse");
    assert_eq!(
        got[0].mode(),
        Mode::Shared,
        "answers in the keys' order: b first"
    );
    assert_eq!(got[1].mode(), Mode::Exclusive);
    assert_eq!(b.info(key("b")).unwrap().unwrap().mode, Mode::Shared);
    for acq in got {
        a.release(acq).unwrap();
    }
    assert!(!b.is_locked(key("a")).unwrap() && !b.is_locked(key("b")).unwrap());
}

#[test]
fn shared_holders_overlap_and_exclude_writers_fifo() {
    let server = Server::start();
    let a = open(&server, "prefix=sh");
    let b = open(&server, "prefix=sh");
    let shared = LockOptions::new().shared();
    let s1 = a.acquire(key("doc"), &shared).unwrap();
    let s2 = a.acquire(key("doc"), &shared).unwrap(); // joins this process's remote hold
    let s3 = b.acquire(key("doc"), &shared).unwrap();
    assert_eq!(
        b.info(key("doc")).unwrap().unwrap().holders,
        2,
        "one remote hold per process"
    );
    assert_eq!(b.acquire(key("doc"), &NO).unwrap_err(), Error::WouldBlock);
    // An exclusive waiter (in a third process) queues in Redis; a shared request after it
    // waits too (FIFO), even though only shared holders hold the key.
    let c = open(&server, "prefix=sh");
    let c2 = Arc::clone(&c);
    let writer = std::thread::spawn(move || c2.acquire(key("doc"), &LockOptions::new()));
    wait_until(|| a.info(key("doc")).unwrap().unwrap().waiters != 0);
    let d = open(&server, "prefix=sh");
    assert_eq!(
        d.acquire(key("doc"), &shared.wait(Wait::No)).unwrap_err(),
        Error::WouldBlock
    );
    let fence = s1.fence();
    assert_eq!(
        (s2.fence(), s3.fence()),
        (fence, fence),
        "shared holders read one fence"
    );
    a.release(s1).unwrap();
    a.release(s2).unwrap();
    b.release(s3).unwrap();
    let w = within(Duration::from_secs(10), move || writer.join().unwrap()).unwrap();
    assert!(w.fence() > fence);
    c.release(w).unwrap();
}

#[test]
fn fences_rise_across_force_unlock_and_lease_expiry() {
    let server = Server::start();
    let a = open(&server, "prefix=f&lease=900ms");
    let b = open(&server, "prefix=f&lease=900ms");
    let first = a.acquire(key("x"), &LockOptions::new()).unwrap();
    let lost = a
        .lost_signal(&first)
        .expect("remote acquisitions have a lost signal");
    assert!(b.force_unlock(key("x")).unwrap());
    assert!(!b.force_unlock(key("x")).unwrap(), "nothing left to free");
    assert!(
        lost.wait_timeout(Duration::from_secs(10)),
        "the holder learns at its next renewal"
    );
    assert!(!a.is_current(&first).unwrap());
    let f1 = first.fence();
    assert_eq!(a.release(first).unwrap_err(), Error::NotOwner);
    let second = b.acquire(key("x"), &LockOptions::new()).unwrap();
    assert!(
        second.fence() > f1 + 1,
        "force-unlock advanced the fence, then the acquire"
    );
    // An explicit lease ends the acquisition, even though its process is alive.
    let f2 = second.fence();
    b.release(second).unwrap();
    let leased = b
        .acquire(
            key("x"),
            &LockOptions::new().lease(Duration::from_millis(300)),
        )
        .unwrap();
    assert!(leased.fence() > f2);
    let f3 = leased.fence();
    let lost = b.lost_signal(&leased).unwrap();
    let next = a
        .acquire(
            key("x"),
            &LockOptions::new().wait(Wait::For(Duration::from_secs(5))),
        )
        .unwrap();
    assert!(next.fence() > f3);
    assert!(
        next.owner_died(),
        "the previous exclusive hold ended by its lease"
    );
    assert!(lost.wait_timeout(Duration::from_secs(5)));
    assert_eq!(b.release(leased).unwrap_err(), Error::LeaseExpired);
    let f4 = next.fence();
    a.release(next).unwrap();
    // Shared holders after an exclusive lease's end read a fence above the lost holder's.
    let leased = a
        .acquire(
            key("x"),
            &LockOptions::new().lease(Duration::from_millis(150)),
        )
        .unwrap();
    assert!(leased.fence() > f4);
    std::thread::sleep(Duration::from_millis(400));
    let reader = b
        .acquire(key("x"), &LockOptions::new().shared().wait(Wait::No))
        .unwrap();
    assert!(reader.fence() > leased.fence());
    b.release(reader).unwrap();
    assert_eq!(a.release(leased).unwrap_err(), Error::LeaseExpired);
}

#[test]
fn renewal_keeps_a_long_hold_alive_and_extend_moves_a_lease() {
    let server = Server::start();
    let a = open(&server, "prefix=r&lease=1s");
    let b = open(&server, "prefix=r&lease=1s");
    let held = a.acquire(key("long"), &LockOptions::new()).unwrap();
    std::thread::sleep(Duration::from_millis(2500)); // > 2 leases
    assert!(a.is_current(&held).unwrap(), "renewed while it lives");
    assert_eq!(b.acquire(key("long"), &NO).unwrap_err(), Error::WouldBlock);
    a.release(held).unwrap();
    // A hold taken after the scope held nothing for a while (its renewals asleep) is renewed
    // too.
    std::thread::sleep(Duration::from_millis(600));
    let held = a.acquire(key("later"), &LockOptions::new()).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(a.is_current(&held).unwrap(), "renewed after an idle while");
    a.release(held).unwrap();
    let mut leased = a
        .acquire(
            key("ext"),
            &LockOptions::new().lease(Duration::from_millis(200)),
        )
        .unwrap();
    a.extend(&mut leased, Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        a.is_current(&leased).unwrap(),
        "extended past its first lease"
    );
    assert_eq!(b.acquire(key("ext"), &NO).unwrap_err(), Error::WouldBlock);
    a.release(leased).unwrap();
}

#[test]
fn reentrant_owners_share_their_hold() {
    let server = Server::start();
    let opts = OpenOptions::new().reentrant(true);
    let a = keylock_core::open_with(&server.url("prefix=re"), &opts).unwrap();
    assert!(a.is_reentrant());
    let (me, other) = (Owner::new(1).unwrap(), Owner::new(2).unwrap());
    let outer = a.acquire(key("r"), &LockOptions::new().owner(me)).unwrap();
    let inner = a.acquire(key("r"), &LockOptions::new().owner(me)).unwrap();
    assert_eq!(outer.fence(), inner.fence());
    assert_eq!(a.info(key("r")).unwrap().unwrap().holds, 2);
    let them = LockOptions::new().owner(other).wait(Wait::No);
    assert_eq!(a.acquire(key("r"), &them).unwrap_err(), Error::WouldBlock);
    a.release(inner).unwrap();
    assert!(a.is_locked(key("r")).unwrap());
    assert_eq!(
        a.release_as(outer, Some(other)).unwrap_err(),
        Error::NotOwner
    );
    // The refused release left the record with its owner, who can still see it is current:
    // reacquire through the owner to get a record to release (the refused one was consumed).
    let again = a.acquire(key("r"), &LockOptions::new().owner(me)).unwrap();
    a.release(again).unwrap();
    assert!(
        a.is_locked(key("r")).unwrap(),
        "the outer hold is still there"
    );
    assert!(a.force_unlock(key("r")).unwrap());
    assert!(!a.is_locked(key("r")).unwrap());
}

#[test]
fn names_and_keys_never_meet_and_many_threads_count_exactly() {
    let server = Server::start();
    let a = open(&server, "prefix=n");
    let plain = a.acquire(key("same"), &LockOptions::new()).unwrap();
    let name = a
        .acquire(LockKey::name(b"same"), &LockOptions::new().wait(Wait::No))
        .unwrap();
    a.release(plain).unwrap();
    a.release(name).unwrap();
    // Eight threads on two scopes, one key: holders inside at once never exceed one.
    let b = open(&server, "prefix=n");
    let inside = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let locks = if t % 2 == 0 {
                Arc::clone(&a)
            } else {
                Arc::clone(&b)
            };
            let (inside, max, done) = (Arc::clone(&inside), Arc::clone(&max), Arc::clone(&done));
            std::thread::spawn(move || {
                for i in 0..40 {
                    // Some waits time out: a cancelled wait must not hide an overlap.
                    let wait = if i % 5 == 0 {
                        Wait::For(Duration::from_micros(300))
                    } else {
                        Wait::Forever
                    };
                    let Ok(acq) = locks.acquire(key("hot"), &LockOptions::new().wait(wait)) else {
                        continue;
                    };
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    locks.release(acq).unwrap();
                }
            })
        })
        .collect();
    within(Duration::from_secs(120), move || {
        for t in threads {
            t.join().unwrap();
        }
    });
    assert_eq!(max.load(Ordering::SeqCst), 1);
    assert!(
        done.load(Ordering::SeqCst) >= 8 * 32,
        "every untimed acquire succeeded"
    );
    assert!(!a.is_locked(key("hot")).unwrap());
    assert_eq!(b.info(key("hot")).unwrap(), None);
}

#[test]
fn mixed_modes_with_timeouts_and_async_never_overlap_wrongly() {
    let server = Server::start();
    let scopes = [
        open(&server, "prefix=mx"),
        open(&server, "prefix=mx"),
        open(&server, "prefix=mx"),
    ];
    // Holders inside at once: shared holders in `readers`, exclusive ones in `writers`.
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let max_readers = Arc::new(AtomicUsize::new(0));
    let bad = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let locks = Arc::clone(&scopes[t % 3]);
            let (readers, writers) = (Arc::clone(&readers), Arc::clone(&writers));
            let (max_readers, bad) = (Arc::clone(&max_readers), Arc::clone(&bad));
            std::thread::spawn(move || {
                let mut done = 0;
                for i in 0..30usize {
                    let shared = (i + t) % 3 != 0;
                    let wait = match i % 7 {
                        0 => Wait::No,
                        1 => Wait::For(Duration::from_micros(500)),
                        _ => Wait::Forever,
                    };
                    let opts = LockOptions::new()
                        .mode(if shared {
                            Mode::Shared
                        } else {
                            Mode::Exclusive
                        })
                        .wait(wait);
                    // Every other acquire is async, polled by futures' executor.
                    let got = if i % 2 == 0 {
                        locks.acquire(key("mixed"), &opts)
                    } else {
                        futures::executor::block_on(
                            Arc::clone(&locks).acquire_async(key("mixed"), &opts),
                        )
                    };
                    let Ok(acq) = got else { continue };
                    if shared {
                        let r = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        max_readers.fetch_max(r, Ordering::SeqCst);
                        if writers.load(Ordering::SeqCst) != 0 {
                            bad.fetch_add(1, Ordering::SeqCst);
                        }
                        std::thread::sleep(Duration::from_micros(300));
                        readers.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        if writers.fetch_add(1, Ordering::SeqCst) != 0
                            || readers.load(Ordering::SeqCst) != 0
                        {
                            bad.fetch_add(1, Ordering::SeqCst);
                        }
                        writers.fetch_sub(1, Ordering::SeqCst);
                    }
                    locks.release(acq).unwrap();
                    done += 1;
                }
                done
            })
        })
        .collect();
    let done: usize = within(Duration::from_secs(120), move || {
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    });
    assert_eq!(
        bad.load(Ordering::SeqCst),
        0,
        "an exclusive holder overlapped another holder"
    );
    assert!(
        done >= 6 * 30 * 5 / 7,
        "every untimed acquire succeeded: {done}"
    );
    assert!(max_readers.load(Ordering::SeqCst) >= 1);
    // Nothing left behind. A timed-out acquire waits up to 50 ms for the release of what its
    // last attempt may have been granted; on a loaded machine that release can come later, in
    // the background, so this waits for it (20 s at most).
    for s in &scopes {
        wait_until(|| s.info(key("mixed")).unwrap().is_none());
    }
}

#[test]
fn a_lost_callback_may_release_its_acquisition() {
    let server = Server::start();
    let a = open(&server, "prefix=cb&lease=600ms");
    let b = open(&server, "prefix=cb");
    let acq = a.acquire(key("k"), &LockOptions::new()).unwrap();
    let lost = a.lost_signal(&acq).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let locks = Arc::clone(&a);
    // The callback runs on the thread that finds the hold lost (the scope's own, for a
    // renewal that Redis refuses); releasing from there must not wait on that thread.
    lost.on_lost(move || {
        let _ = tx.send(locks.release(acq));
    });
    assert!(b.force_unlock(key("k")).unwrap());
    let released = within(Duration::from_secs(20), move || rx.recv().unwrap());
    assert!(
        matches!(released, Err(Error::NotOwner) | Err(Error::LeaseExpired)),
        "{released:?}"
    );
    let next = b.acquire(key("k"), &NO).unwrap();
    b.release(next).unwrap();
}

/// The connections `server` has accepted since it started.
fn connections_made(admin: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(admin).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn blocking_callers_keep_their_lanes_and_calls_inside_a_runtime_still_work() {
    let server = Server::start();
    let locks = open(&server, "prefix=lanes");
    let mut admin = server.client();
    let pair = |locks: &Arc<dyn keylock_core::KeyedLock>, k: &str| {
        let acq = locks.acquire(key(k), &LockOptions::new()).unwrap();
        locks.release(acq).unwrap();
    };
    pair(&locks, "k");
    // One thread's calls reuse its lane and the lane's connection: none is made per call.
    let before = connections_made(&mut admin);
    for i in 0..200 {
        pair(&locks, &format!("k{}", i % 4));
    }
    assert_eq!(connections_made(&mut admin), before);

    // Eight threads at once, each on a lane (its own connections): holders inside at once
    // never exceed one, and every acquire is granted.
    let occupancy = Arc::new(crate::common::Occupancy::new(1));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (locks, occupancy) = (Arc::clone(&locks), Arc::clone(&occupancy));
            std::thread::spawn(move || {
                for _ in 0..40 {
                    let acq = locks.acquire(key("hot"), &LockOptions::new()).unwrap();
                    let inside = occupancy.hold(0);
                    std::thread::yield_now();
                    inside.complete();
                    locks.release(acq).unwrap();
                }
            })
        })
        .collect();
    within(Duration::from_secs(120), move || {
        for t in threads {
            t.join().unwrap();
        }
    });
    occupancy.check();
    assert_eq!(occupancy.completed(), 8 * 40);
    // At most a lane per thread, each with a command connection and one for waiting.
    let after = connections_made(&mut admin);
    assert!(
        after <= before + 8 * 2,
        "{} connections made by 8 threads",
        after - before
    );

    // A blocking call made inside a runtime (which cannot drive another) goes through the
    // scope's own runtime: on a current-thread runtime, and on a multi-threaded runtime's
    // blocking thread.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let l = Arc::clone(&locks);
    let acq = within(Duration::from_secs(20), move || {
        rt.block_on(async move { l.acquire(key("rt"), &LockOptions::new()) })
    })
    .unwrap();
    let fence = acq.fence();
    let multi = tokio::runtime::Runtime::new().unwrap();
    let l = Arc::clone(&locks);
    within(Duration::from_secs(20), move || {
        multi.block_on(async move {
            tokio::task::spawn_blocking(move || {
                assert!(l.is_current(&acq).unwrap());
                l.release(acq).unwrap();
                let next = l.acquire(key("rt"), &NO).unwrap();
                assert!(next.fence() > fence);
                l.release(next).unwrap();
            })
            .await
            .unwrap();
        });
    });
    assert!(!locks.is_locked(key("rt")).unwrap());
}

/// A child of fork() must not act as its parent's scope (it has the parent's sockets, not its
/// threads): every call answers `Unavailable` at once, dropping the scope there leaves the
/// parent's connections alone, and a fresh open works.
#[test]
fn a_forked_child_gets_unavailable_and_leaves_the_parent_alone() {
    let server = Server::start();
    let locks = open(&server, "prefix=fork");
    // The blocking calls made a lane (with its connection) that the child inherits.
    let held = locks.acquire(key("k"), &LockOptions::new()).unwrap();
    let url = server.url("prefix=fork");
    // SAFETY: the child makes a few calls and leaves with _exit, never returning into the
    // test harness; glibc's malloc is usable after fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let unavailable = |r: Result<(), Error>| matches!(r, Err(Error::Unavailable(_)));
        let inherited = unavailable(locks.acquire(key("other"), &NO).map(drop))
            && unavailable(locks.info(key("k")).map(drop))
            && unavailable(locks.is_current(&held).map(drop))
            && unavailable(
                futures::executor::block_on(Arc::clone(&locks).acquire_async(key("a"), &NO))
                    .map(drop),
            );
        drop(locks);
        let fresh = keylock_core::open(&url)
            .is_ok_and(|l| l.acquire(key("k"), &NO) == Err(Error::WouldBlock));
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(if inherited && fresh { 0 } else { 1 }) };
    }
    assert!(
        crate::common::child_succeeded(pid, Duration::from_secs(30)),
        "the forked child misbehaved or hung"
    );
    // The parent's scope works on, on the lane the child had a copy of.
    within(Duration::from_secs(20), move || {
        locks.release(held).unwrap();
        for _ in 0..20 {
            let acq = locks.acquire(key("k"), &LockOptions::new()).unwrap();
            locks.release(acq).unwrap();
        }
    });
}

//! The `KeyedLock` trait on the in-process scope: what every front end relies on, checked
//! generically for the pool and the striped lock.

mod common;

use std::sync::Arc;
use std::time::Duration;

use keylock_core::{
    Error, KeyPool, KeyedLock, LockKey, LockOptions, Mode, OpenOptions, Owner, StripedLock, Wait,
    open, open_with,
};

fn scopes() -> Vec<Arc<dyn KeyedLock>> {
    #[allow(unused_mut)] // without the shm feature nothing is added
    let mut scopes: Vec<Arc<dyn KeyedLock>> = vec![
        Arc::new(KeyPool::<Vec<u8>>::new()),
        Arc::new(StripedLock::new(1024).unwrap()),
        open("").unwrap(),
        open("local:").unwrap(),
        open_with("local:", &OpenOptions::new().stripes(64)).unwrap(),
    ];
    // The host scope, a pool and a striped region, each unlinked at once (an open region
    // stays usable; the name goes).
    #[cfg(all(feature = "shm", target_os = "linux"))]
    for (i, options) in [OpenOptions::new(), OpenOptions::new().stripes(64)]
        .into_iter()
        .enumerate()
    {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "scope-{}-{i}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        scopes.push(open_with(&format!("shm:{name}"), &options).unwrap());
        keylock_core::shm::unlink(&name).unwrap();
    }
    scopes
}

const TRY: LockOptions = LockOptions::new().wait(Wait::No);

#[test]
fn acquire_release_and_stale_releases() {
    for locks in scopes() {
        let k = LockKey::new(b"k");
        let a = locks.acquire(k, &LockOptions::new()).unwrap();
        assert!(locks.is_locked(k).unwrap());
        assert_eq!(locks.acquire(k, &TRY).unwrap_err(), Error::WouldBlock);
        assert!(locks.is_current(&a).unwrap());
        assert!(locks.force_unlock(k).unwrap());
        assert!(!locks.is_current(&a).unwrap());
        let b = locks.acquire(k, &TRY).unwrap();
        assert!(b.fence() > a.fence());
        assert_eq!(locks.release(a), Err(Error::NotOwner));
        assert!(
            locks.is_locked(k).unwrap(),
            "the stale release freed the new holder"
        );
        locks.release(b).unwrap();
        assert!(!locks.is_locked(k).unwrap());
        assert!(!locks.force_unlock(k).unwrap());
    }
}

#[test]
fn names_never_meet_plain_keys() {
    let pool: Arc<dyn KeyedLock> = Arc::new(KeyPool::<Vec<u8>>::new());
    let plain = pool.acquire(LockKey::new(b"job"), &TRY).unwrap();
    let name = pool.acquire(LockKey::name(b"job"), &TRY).unwrap();
    assert!(pool.is_locked(LockKey::name(b"job")).unwrap());
    assert!(pool.info(LockKey::name(b"job")).unwrap().is_some());
    pool.release(plain).unwrap();
    assert!(pool.is_locked(LockKey::name(b"job")).unwrap());
    assert!(!pool.is_locked(LockKey::new(b"job")).unwrap());
    assert!(pool.is_current(&name).unwrap());
    pool.release(name).unwrap();
    assert!(!pool.is_locked(LockKey::name(b"job")).unwrap());
}

#[test]
fn modes_and_info() {
    for locks in scopes() {
        let k = LockKey::new(b"doc");
        let shared = LockOptions::new().shared().wait(Wait::No);
        let a = locks.acquire(k, &shared).unwrap();
        let b = locks.acquire(k, &shared).unwrap();
        assert_eq!(a.fence(), b.fence());
        let info = locks.info(k).unwrap().unwrap();
        assert_eq!((info.mode, info.holders), (Mode::Shared, 2));
        assert_eq!(locks.acquire(k, &TRY).unwrap_err(), Error::WouldBlock);
        locks.release(a).unwrap();
        locks.release(b).unwrap();
        assert!(locks.info(k).unwrap().is_none());
    }
}

#[test]
fn many_keys_come_back_in_key_order() {
    for locks in scopes() {
        let keys = [
            (LockKey::new(b"zebra"), Mode::Exclusive),
            (LockKey::new(b"apple"), Mode::Shared),
            (LockKey::name(b"zebra"), Mode::Exclusive),
            (LockKey::new(b"zebra"), Mode::Shared),
        ];
        // Give the keys different fences, to tell their acquisitions apart.
        for _ in 0..3 {
            let z = locks.acquire(LockKey::new(b"zebra"), &TRY).unwrap();
            locks.release(z).unwrap();
        }
        let acqs = locks.acquire_many(&keys, &TRY).unwrap();
        for acq in &acqs {
            assert!(locks.is_current(acq).unwrap());
        }
        let zebra = locks.info(LockKey::new(b"zebra")).unwrap().unwrap();
        assert_eq!(
            acqs[0].fence(),
            zebra.fence,
            "the first key's acquisition comes first"
        );
        assert_eq!(
            zebra.mode,
            Mode::Exclusive,
            "the strongest mode asked of a key wins"
        );
        assert_eq!(
            locks.acquire_many(&keys, &TRY).unwrap_err(),
            Error::WouldBlock,
            "all or nothing"
        );
        for acq in acqs {
            locks.release(acq).unwrap();
        }
        assert!(!locks.is_locked(LockKey::new(b"apple")).unwrap());
    }
}

/// The multi-key rules on every pool scope (where two keys are never one lock): one
/// acquisition per key in the caller's order, the strongest mode of a key given twice even
/// when the stronger comes second, all or nothing around a key held elsewhere, and one
/// deadline for the whole set; the async acquire answers the same.
#[test]
fn many_keys_follow_the_multi_key_rules() {
    use Mode::{Exclusive as X, Shared as S};
    #[allow(unused_mut)] // without the shm feature nothing is added
    let mut pools: Vec<Arc<dyn KeyedLock>> =
        vec![Arc::new(KeyPool::<Vec<u8>>::new()), open("").unwrap()];
    #[cfg(all(feature = "shm", target_os = "linux"))]
    {
        let name = format!("scope-rules-{}", std::process::id());
        pools.push(open(&format!("shm:{name}")).unwrap());
        keylock_core::shm::unlink(&name).unwrap();
    }
    let (a, b, c) = (
        LockKey::new(b"rule-a"),
        LockKey::new(b"rule-b"),
        LockKey::new(b"rule-c"),
    );
    let keys = [(c, S), (a, S), (c, X), (b, S)];
    for locks in pools {
        // Distinct fences, to tell the acquisitions apart.
        for (k, times) in [(a, 1), (b, 3), (c, 5)] {
            for _ in 0..times {
                let acq = locks.acquire(k, &TRY).unwrap();
                locks.release(acq).unwrap();
            }
        }
        let check = |acqs: Vec<keylock_core::Acquisition>| {
            let fence = |k| locks.info(k).unwrap().unwrap().fence;
            let want = vec![(fence(c), X), (fence(a), S), (fence(b), S)];
            assert!(want[0].0 != want[1].0 && want[1].0 != want[2].0);
            let got: Vec<(u64, Mode)> = acqs.iter().map(|x| (x.fence(), x.mode())).collect();
            assert_eq!(got, want, "key order, each key once in its strongest mode");
            for acq in acqs {
                locks.release(acq).unwrap();
            }
        };
        check(locks.acquire_many(&keys, &TRY).unwrap());
        let later = futures::executor::block_on(locks.clone().acquire_many_async(&keys, &TRY));
        check(later.unwrap_or_else(|e| panic!("{locks:?}: {e}")));

        let blocker = locks.acquire(b, &TRY).unwrap();
        let timed = LockOptions::new().wait(Wait::For(Duration::from_millis(20)));
        assert_eq!(
            locks.acquire_many(&keys, &TRY).unwrap_err(),
            Error::WouldBlock
        );
        assert_eq!(
            locks.acquire_many(&keys, &timed).unwrap_err(),
            Error::TimedOut
        );
        let late = futures::executor::block_on(locks.clone().acquire_many_async(&keys, &timed));
        assert_eq!(late.unwrap_err(), Error::TimedOut);
        assert!(
            !locks.is_locked(a).unwrap() && !locks.is_locked(c).unwrap(),
            "all or nothing: what was taken is given back"
        );
        locks.release(blocker).unwrap();
    }
    // A try of free keys succeeds, blocking or async, on every scope (striped ones too).
    for locks in scopes() {
        let free = [(a, X), (b, S)];
        let got = locks.acquire_many(&free, &TRY).unwrap();
        for acq in got {
            locks.release(acq).unwrap();
        }
        let later = futures::executor::block_on(locks.clone().acquire_many_async(&free, &TRY));
        for acq in later.unwrap_or_else(|e| panic!("{locks:?}: {e}")) {
            locks.release(acq).unwrap();
        }
        assert!(!locks.is_locked(a).unwrap() && !locks.is_locked(b).unwrap());
    }
}

#[test]
fn async_acquires_wait_and_cancel() {
    for locks in scopes() {
        let k = LockKey::new(b"a");
        let held = locks.acquire(k, &LockOptions::new()).unwrap();
        let timed = LockOptions::new().wait(Wait::For(Duration::from_millis(10)));
        let late = futures::executor::block_on(locks.clone().acquire_async(k, &timed));
        assert_eq!(late.unwrap_err(), Error::TimedOut);
        let waiter = locks.clone().acquire_async(k, &LockOptions::new());
        let locks2 = locks.clone();
        let t = std::thread::spawn(move || futures::executor::block_on(waiter));
        std::thread::sleep(Duration::from_millis(10));
        locks2.release(held).unwrap();
        let got = t.join().unwrap().unwrap();
        assert!(locks.is_current(&got).unwrap());
        locks.release(got).unwrap();
        // A dropped future leaves nothing behind.
        drop(locks.clone().acquire_async(k, &LockOptions::new()));
        assert!(!locks.is_locked(k).unwrap());
    }
}

#[test]
fn reentrant_scopes_and_owners() {
    let locks = open_with("local:", &OpenOptions::new().reentrant(true)).unwrap();
    assert!(locks.is_reentrant());
    let me = Owner::new(5).unwrap();
    let k = LockKey::new(b"r");
    let a = locks.acquire(k, &LockOptions::new().owner(me)).unwrap();
    let b = locks
        .acquire(k, &LockOptions::new().owner(me).wait(Wait::No))
        .unwrap();
    assert_eq!(a.fence(), b.fence());
    assert!(!locks.is_current_as(&a, Owner::new(6)).unwrap());
    assert!(locks.is_current_as(&a, Some(me)).unwrap());
    locks.release(b).unwrap();
    locks.release(a).unwrap();
    assert!(!locks.is_locked(k).unwrap());
}

#[test]
fn names_of_scopes_are_checked() {
    for (name, want) in [
        ("nope", "a lock name starts with a scheme"),
        ("ftp://x", "unknown lock scheme"),
        ("local:thing", "local: takes no name"),
    ] {
        match open(name) {
            Err(Error::InvalidArgument(what)) => assert!(what.starts_with(want), "{name}: {what}"),
            other => panic!("{name}: {other:?}"),
        }
    }
    let bad = OpenOptions::new().capacity(10);
    assert!(matches!(
        open_with("local:", &bad),
        Err(Error::InvalidArgument(_))
    ));
}

/// A steal frees the key and takes it ahead of the waiters already queued (the Web Locks
/// order); the queue's head is served when the stealer releases. Every scope but Redis (which
/// has no one-step steal), both key spaces, fair and strict-FIFO lock objects.
#[test]
fn steal_goes_ahead_of_queued_waiters() {
    use std::pin::pin;
    use std::task::{Context, Poll};

    let mut scopes = scopes();
    scopes.push(open_with("local:", &OpenOptions::new().fifo(true)).unwrap());
    scopes.push(open_with("local:", &OpenOptions::new().stripes(64).fifo(true)).unwrap());
    #[cfg(all(feature = "shm", target_os = "linux"))]
    for (i, options) in [OpenOptions::new(), OpenOptions::new().stripes(64)]
        .into_iter()
        .enumerate()
    {
        let name = format!("scope-steal-{}-{i}", std::process::id());
        scopes.push(open_with(&format!("shm:{name}"), &options.fifo(true)).unwrap());
        keylock_core::shm::unlink(&name).unwrap();
    }
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    for locks in scopes {
        for k in [LockKey::new(b"s"), LockKey::name(b"s")] {
            let holder = locks.acquire(k, &LockOptions::new()).unwrap();
            let mut waiting = pin!(locks.clone().acquire_async(k, &LockOptions::new()));
            assert!(
                waiting.as_mut().poll(&mut cx).is_pending(),
                "queued behind the holder"
            );

            let stealer = locks
                .steal(k, &TRY)
                .expect("a steal never waits for the queue");
            assert!(stealer.fence() > holder.fence());
            assert!(!locks.is_current(&holder).unwrap());
            assert!(locks.is_current(&stealer).unwrap());
            assert!(
                waiting.as_mut().poll(&mut cx).is_pending(),
                "the waiter already queued comes after the stealer"
            );
            assert_eq!(locks.release(holder), Err(Error::NotOwner));

            locks.release(stealer).unwrap();
            let Poll::Ready(next) = waiting.as_mut().poll(&mut cx) else {
                panic!("the stealer's release serves the queue's head");
            };
            let next = next.unwrap();
            assert!(locks.is_current(&next).unwrap());
            locks.release(next).unwrap();
            assert!(!locks.is_locked(k).unwrap());
        }
        // Only an exclusive request may steal; a free key is simply taken.
        let shared = LockOptions::new().mode(Mode::Shared).wait(Wait::No);
        assert!(matches!(
            locks.steal(LockKey::new(b"f"), &shared),
            Err(Error::InvalidArgument(_))
        ));
        let free = locks.steal(LockKey::new(b"f"), &TRY).unwrap();
        locks.release(free).unwrap();
    }
}

/// Polls `cond` every millisecond; fails the test if it does not hold within 20 s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(std::time::Instant::now() < until, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Starts a plain acquire of `k` on a thread of its own and returns once it is queued (the
/// key is held); joining the thread gives its acquisition.
fn queued_waiter(
    locks: &Arc<dyn KeyedLock>,
    k: LockKey<'_>,
) -> std::thread::JoinHandle<keylock_core::Result<keylock_core::Acquisition>> {
    let waiter = Arc::clone(locks).acquire_async(k, &LockOptions::new());
    let waiting = std::thread::spawn(move || futures::executor::block_on(waiter));
    wait_until("the waiter queues", || {
        locks.info(k).unwrap().is_some_and(|i| i.waiters == 1)
    });
    waiting
}

#[test]
fn stats_count_holders_shared_holds_and_queued_waiters_on_every_scope() {
    for locks in scopes() {
        let a = LockKey::new(b"a");
        // A second key on another stripe, so that a striped object counts two locks too.
        let other = (0u32..)
            .map(|i| format!("b{i}").into_bytes())
            .find(|b| {
                locks.stripe_of(LockKey::new(b)) != locks.stripe_of(a) || locks.stripes().is_none()
            })
            .unwrap();
        let b = LockKey::new(&other);
        let s = locks.stats().unwrap();
        assert_eq!(
            (s.held, s.waiting, s.shared_holds),
            (Some(0), Some(0), Some(0)),
            "{locks:?}"
        );
        let x = locks.acquire(a, &LockOptions::new()).unwrap();
        let r1 = locks.acquire(b, &LockOptions::new().shared()).unwrap();
        let r2 = locks.acquire(b, &LockOptions::new().shared()).unwrap();
        let waiter = {
            let locks = Arc::clone(&locks);
            std::thread::spawn(move || locks.acquire(LockKey::new(b"a"), &LockOptions::new()))
        };
        wait_until("the waiter to queue", || {
            locks.stats().unwrap().waiting == Some(1)
        });
        let s = locks.stats().unwrap();
        assert_eq!((s.held, s.held_here), (Some(2), 2), "{locks:?}");
        assert_eq!((s.waiting, s.waiting_here), (Some(1), 1), "{locks:?}");
        assert_eq!(s.shared_holds, Some(2), "{locks:?}");
        assert_eq!(s.entries_in_use, Some(2), "{locks:?}");
        assert_eq!(s.keys_held(), 2);
        // Capacity: the stripes of a striped object, the entries of a region; an in-process
        // pool grows as it needs.
        if let Some(stripes) = locks.stripes() {
            assert_eq!(s.capacity, Some(stripes), "{locks:?}");
        }
        assert!(s.capacity.is_none_or(|c| c >= 2), "{locks:?}");
        locks.release(x).unwrap();
        let got = common::within(Duration::from_secs(20), move || waiter.join().unwrap()).unwrap();
        locks.release(r1).unwrap();
        let s = locks.stats().unwrap();
        assert_eq!(
            (s.held, s.waiting, s.shared_holds),
            (Some(2), Some(0), Some(1)),
            "{locks:?}"
        );
        locks.release(r2).unwrap();
        locks.release(got).unwrap();
        let s = locks.stats().unwrap();
        assert_eq!(
            (s.held, s.held_here, s.waiting, s.waiting_here),
            (Some(0), 0, Some(0), 0),
            "{locks:?}"
        );
        assert_eq!(
            (s.shared_holds, s.entries_in_use),
            (Some(0), Some(0)),
            "{locks:?}"
        );
    }
}

/// `try_acquire_fast` and `try_release_cas` through the trait: a grant only where the key's
/// lock word alone allows it, `None` everywhere else, and never a grant the full path would
/// refuse; a release only of a current plain exclusive hold.
#[test]
fn the_fast_path_through_the_trait_grants_only_free_lock_words() {
    let plain = LockOptions::new();
    for locks in scopes() {
        let what = format!("{locks:?}");
        let k = LockKey::new(b"fast");
        let fast = |mode| locks.try_acquire_fast(k, mode);
        // A pool's key has no lock word until the full path makes one; a stripe always has.
        let striped = locks.stripes().is_some();
        // The host scope's path takes exclusive holds only (a shared one may join holders,
        // the table mutex's work), of names as of keys.
        let host = locks.as_any().is_none();
        if !striped {
            assert!(
                fast(Mode::Exclusive).is_none(),
                "{what}: granted before any acquire"
            );
        }
        locks.release(locks.acquire(k, &plain).unwrap()).unwrap();
        let acq = fast(Mode::Exclusive).expect("a fast grant of a free key");
        assert!(locks.is_locked(k).unwrap(), "{what}");
        assert!(
            fast(Mode::Exclusive).is_none(),
            "{what}: granted a held key"
        );
        assert!(
            fast(Mode::Shared).is_none(),
            "{what}: shared beside exclusive"
        );
        assert!(
            matches!(
                locks.acquire(k, &plain.wait(Wait::No)),
                Err(Error::WouldBlock)
            ),
            "{what}"
        );
        // Its record is an ordinary acquisition: a force-unlock makes it stale, and then its
        // release frees nobody else's hold, on either path.
        assert!(locks.is_current(&acq).unwrap(), "{what}");
        assert!(locks.force_unlock(k).unwrap(), "{what}");
        let next = fast(Mode::Exclusive).expect("a force-unlocked key is free");
        assert!(next.fence() > acq.fence(), "{what}");
        assert!(!locks.try_release_cas(&acq), "{what}: a stale record's cas");
        assert_eq!(locks.release(acq), Err(Error::NotOwner), "{what}");
        assert!(
            locks.is_locked(k).unwrap(),
            "{what}: the stale release freed the new holder"
        );
        assert!(locks.try_release_cas(&next), "{what}: the holder's cas");
        assert!(!locks.is_locked(k).unwrap(), "{what}");
        assert_eq!(locks.release(next), Err(Error::NotOwner), "{what}: spent");
        // Shared holders share it (not on the host scope's path); an exclusive request does
        // not pass them, and neither path releases one of them as exclusive.
        if host {
            assert!(fast(Mode::Shared).is_none(), "{what}: a shared fast grant");
        }
        let shared = |_| match fast(Mode::Shared) {
            Some(acq) => acq,
            None => locks.acquire(k, &plain.shared()).unwrap(),
        };
        let (a, b) = (shared(0), shared(1));
        assert!(fast(Mode::Exclusive).is_none(), "{what}");
        assert!(!locks.try_release_cas(&a), "{what}: a shared hold's cas");
        locks.release(a).unwrap();
        locks.release(b).unwrap();
        // A waiter queued on the key keeps the fast path out (it is the waiter's turn), and
        // the holder's release has a waiter to wake: not the cas's work.
        let held = locks.acquire(k, &plain).unwrap();
        let waiting = queued_waiter(&locks, k);
        assert!(!locks.try_release_cas(&held), "{what}: a cas past a waiter");
        locks.release(held).unwrap();
        assert!(
            fast(Mode::Exclusive).is_none(),
            "{what}: passed a queued waiter"
        );
        locks.release(waiting.join().unwrap().unwrap()).unwrap();
        // A pool's names are a pool of their own, without the path; a striped lock's names
        // take stripes as keys do, and the host scope's names take entries as keys do.
        let name = LockKey::name(b"fast");
        locks.release(locks.acquire(name, &plain).unwrap()).unwrap();
        match locks.try_acquire_fast(name, Mode::Exclusive) {
            Some(acq) if striped || host => {
                assert!(locks.try_release_cas(&acq), "{what}: a name's cas");
                assert!(!locks.is_locked(name).unwrap(), "{what}");
            }
            got => assert!(got.is_none(), "{what}: a name's fast grant"),
        }
        // A name's record (made on the full path) is released by the cas only where it has
        // the fast path.
        let named = locks.acquire(name, &plain).unwrap();
        if !locks.try_release_cas(&named) {
            assert!(!striped && !host, "{what}: a name's cas refused");
            locks.release(named).unwrap();
        }
        assert!(!locks.is_locked(name).unwrap(), "{what}");
    }
    // A semaphore's fast path takes one unit of a key nobody holds; a second holder is
    // recorded on the full path.
    let sem = open_with("local:", &OpenOptions::new().permits(2)).unwrap();
    let k = LockKey::new(b"s");
    sem.release(sem.acquire(k, &plain).unwrap()).unwrap();
    let a = sem.try_acquire_fast(k, Mode::Exclusive).unwrap();
    assert_eq!(a.weight(), 1);
    assert!(sem.try_acquire_fast(k, Mode::Exclusive).is_none());
    let b = sem.acquire(k, &plain.wait(Wait::No)).unwrap();
    assert_eq!(sem.info(k).unwrap().unwrap().units, 2);
    assert!(
        sem.try_acquire_fast(k, Mode::Exclusive).is_none(),
        "a third unit of two"
    );
    // The cas releases a key's only holder: not one of two, nor a leased or stale one, nor
    // one with a waiter behind it.
    assert!(!sem.try_release_cas(&a), "one of two holders' cas");
    sem.release(a).unwrap();
    sem.release(b).unwrap();
    assert!(sem.info(k).unwrap().is_none());
    let one = sem.try_acquire_fast(k, Mode::Exclusive).unwrap();
    assert!(sem.try_release_cas(&one), "the only holder's cas");
    assert!(sem.info(k).unwrap().is_none());
    assert_eq!(sem.release(one), Err(Error::NotOwner), "spent");
    let two = sem.acquire(k, &plain.weight(2)).unwrap();
    assert!(sem.try_release_cas(&two), "a sole holder of two units");
    assert!(sem.info(k).unwrap().is_none());
    let leased = sem
        .acquire(k, &plain.lease(Duration::from_secs(60)))
        .unwrap();
    assert!(!sem.try_release_cas(&leased), "a leased holder's cas");
    sem.release(leased).unwrap();
    let stale = sem.acquire(k, &plain).unwrap();
    assert!(sem.force_unlock(k).unwrap());
    let next = sem.acquire(k, &plain).unwrap();
    assert!(!sem.try_release_cas(&stale), "a stale record's cas");
    assert_eq!(sem.release(stale), Err(Error::NotOwner));
    let full = sem.acquire(k, &plain).unwrap();
    let waiting = queued_waiter(&sem, k);
    assert!(!sem.try_release_cas(&next), "a cas past a waiter");
    sem.release(next).unwrap();
    sem.release(full).unwrap();
    sem.release(waiting.join().unwrap().unwrap()).unwrap();
    assert!(sem.info(k).unwrap().is_none());
    // A lock object with metrics counts every acquire on its full path: no fast grants.
    for options in [OpenOptions::new(), OpenOptions::new().stripes(8)] {
        let locks = open_with("local:", &options.metrics(true)).unwrap();
        let k = LockKey::new(b"m");
        locks.release(locks.acquire(k, &plain).unwrap()).unwrap();
        assert!(locks.try_acquire_fast(k, Mode::Exclusive).is_none());
        assert_eq!(locks.metrics().unwrap().acquired, 1);
        let acq = locks.acquire(k, &plain).unwrap();
        assert!(!locks.try_release_cas(&acq), "a release past the metrics");
        locks.release(acq).unwrap();
        assert_eq!(
            locks.metrics().unwrap().hold.count(),
            2,
            "every release counted"
        );
    }
}

//! The host scope in one process: two opens of one region act as two processes (each open has
//! its own process slot), so these tests cover the cross-process semantics, and run under
//! ThreadSanitizer. The multi-process tests (kill -9 and friends) are in `shm_procs.rs`.
#![cfg(all(feature = "shm", target_os = "linux"))]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use common::within;
use keylock_core::shm::{self, ShmLock};
use keylock_core::{Error, KeyedLock, LockKey, LockOptions, Mode, OpenOptions, Owner, Wait};

const LIMIT: Duration = Duration::from_secs(60);

/// A region name unique to this test run, unlinked when dropped.
struct Name(String);

impl Name {
    fn new(test: &str) -> Name {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t-{}-{test}-{}",
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

fn pool(name: &Name) -> Arc<dyn KeyedLock> {
    keylock_core::open(&name.scoped()).unwrap()
}

fn opts_with(name: &Name, opts: OpenOptions) -> Arc<dyn KeyedLock> {
    keylock_core::open_with(&name.scoped(), &opts).unwrap()
}

/// `OpenOptions` is non-exhaustive: built by assignment.
fn oo(set: impl FnOnce(&mut OpenOptions)) -> OpenOptions {
    let mut o = OpenOptions::default();
    set(&mut o);
    o
}

fn striped_opts(stripes: usize) -> OpenOptions {
    oo(|o| o.stripes = Some(stripes))
}

fn k(bytes: &[u8]) -> LockKey<'_> {
    LockKey::new(bytes)
}

const X: LockOptions = LockOptions::new();
const TRY: LockOptions = LockOptions::new().wait(Wait::No);

#[test]
fn open_gives_a_pool_and_a_striped_lock() {
    let n = Name::new("open");
    let a = pool(&n);
    let b = pool(&n);
    let acq = a.acquire(k(b"x"), &X).unwrap();
    assert_eq!(b.acquire(k(b"x"), &TRY).unwrap_err(), Error::WouldBlock);
    assert!(b.is_locked(k(b"x")).unwrap());
    let info = b.info(k(b"x")).unwrap().unwrap();
    assert_eq!(
        (info.mode, info.holders, info.fence),
        (Mode::Exclusive, 1, acq.fence())
    );
    a.release(acq).unwrap();
    assert!(!b.is_locked(k(b"x")).unwrap());
    let s = Name::new("open-s");
    let s1 = opts_with(&s, striped_opts(5));
    let s2 = opts_with(&s, striped_opts(8)); // 5 rounds up to 8
    let acq = s1.acquire(k(b"y"), &X).unwrap();
    assert_eq!(s2.acquire(k(b"y"), &TRY).unwrap_err(), Error::WouldBlock);
    s1.release(acq).unwrap();
    let acq = s2.acquire(k(b"y"), &TRY).unwrap();
    s2.release(acq).unwrap();
    // Both give the host scope's object, for callers that skip the trait object (the C ABI);
    // no other object does.
    let host = |l: &Arc<dyn KeyedLock>| {
        l.as_host()
            .is_some_and(|h| h.downcast_ref::<ShmLock>().is_some())
    };
    assert!(host(&a) && host(&s1));
    assert!(keylock_core::open("local:").unwrap().as_host().is_none());
}

#[test]
fn names_are_checked() {
    for bad in ["shm:", "shm:a/b", "shm:.hidden", "shm:sp ace"] {
        assert!(
            matches!(
                keylock_core::open(bad).unwrap_err(),
                Error::InvalidArgument(_)
            ),
            "{bad}"
        );
    }
}

#[test]
fn fences_rise_across_opens_and_stale_releases_are_refused() {
    let n = Name::new("fence");
    let a = pool(&n);
    let b = pool(&n);
    let first = a.acquire(k(b"f"), &X).unwrap();
    let f1 = first.fence();
    assert!(b.force_unlock(k(b"f")).unwrap());
    let second = b.acquire(k(b"f"), &TRY).unwrap();
    assert!(
        second.fence() > f1 + 1 - 1,
        "force-unlock advances, the next acquire again"
    );
    assert!(second.fence() >= f1 + 2);
    assert_eq!(a.release(first), Err(Error::NotOwner));
    assert!(
        b.is_locked(k(b"f")).unwrap(),
        "the stale release freed the new holder"
    );
    assert!(b.is_current(&second).unwrap());
    b.release(second).unwrap();
    // Shared holders read the current fence; force-unlock ends them too.
    let s1 = a.acquire(k(b"f"), &X.shared()).unwrap();
    let s2 = b.acquire(k(b"f"), &X.shared()).unwrap();
    assert_eq!(s1.fence(), s2.fence());
    assert!(a.force_unlock(k(b"f")).unwrap());
    assert_eq!(b.release(s2), Err(Error::NotOwner));
    assert_eq!(a.release(s1), Err(Error::NotOwner));
    assert!(!a.is_locked(k(b"f")).unwrap());
}

#[test]
fn fences_keep_rising_when_entries_are_recycled() {
    let n = Name::new("recycle");
    let small = oo(|o| o.capacity = Some(4));
    let a = opts_with(&n, small.clone());
    let b = opts_with(&n, small);
    let mut last = std::collections::HashMap::new();
    for round in 0..50u32 {
        // 12 keys through 4 entries: every round evicts.
        for key in 0..12u32 {
            let lock = if (round + key) % 2 == 0 { &a } else { &b };
            let bytes = key.to_be_bytes();
            let acq = lock.acquire(k(&bytes), &X).unwrap();
            if let Some(prev) = last.insert(key, acq.fence()) {
                assert!(
                    acq.fence() > prev,
                    "key {key}: fence {} after {prev}",
                    acq.fence()
                );
            }
            lock.release(acq).unwrap();
        }
    }
}

#[test]
fn capacity_exceeded_then_free_again() {
    let n = Name::new("cap");
    let opts = oo(|o| o.capacity = Some(4));
    let a = opts_with(&n, opts);
    let held: Vec<_> = (0..4u8).map(|i| a.acquire(k(&[i]), &X).unwrap()).collect();
    assert_eq!(
        a.acquire(k(b"5th"), &X).unwrap_err(),
        Error::CapacityExceeded
    );
    assert_eq!(
        a.acquire(k(b"5th"), &TRY).unwrap_err(),
        Error::CapacityExceeded
    );
    // A held key is still acquirable in shared mode? No: it is held exclusively, so try fails.
    assert_eq!(a.acquire(k(&[0]), &TRY).unwrap_err(), Error::WouldBlock);
    let mut held = held.into_iter();
    a.release(held.next().unwrap()).unwrap();
    let fifth = a.acquire(k(b"5th"), &X).unwrap();
    a.release(fifth).unwrap();
    for acq in held {
        a.release(acq).unwrap();
    }
}

#[test]
fn mismatched_layouts_are_incompatible() {
    let n = Name::new("mismatch");
    let opts = oo(|o| o.capacity = Some(8));
    let _a = opts_with(&n, opts);
    let bad = [
        oo(|o| o.capacity = Some(16)),
        striped_opts(8),
        oo(|o| o.reentrant = true),
        oo(|o| o.fifo = true),
    ];
    for opts in bad {
        match keylock_core::open_with(&n.scoped(), &opts) {
            Err(Error::Incompatible(what)) => assert!(what.contains(&n.0), "{what}"),
            other => panic!("{opts:?}: {other:?}"),
        }
    }
    // No capacity given: the region's is used.
    drop(pool(&n));
}

/// Writes `bytes` at `offset` of region `name`'s file.
fn poke(name: &Name, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(shm::path(&name.0).unwrap())
        .unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

fn incompatible(name: &Name) -> String {
    match keylock_core::open(&name.scoped()) {
        Err(Error::Incompatible(what)) => what.to_string(),
        other => panic!("expected Incompatible, got {other:?}"),
    }
}

#[test]
fn corrupt_headers_are_incompatible() {
    let n = Name::new("corrupt");
    drop(pool(&n));
    // A changed capacity (offset 28) without a matching checksum.
    poke(&n, 28, &9999u32.to_le_bytes());
    assert!(incompatible(&n).contains("checksum"));
    // A bad magic number.
    poke(&n, 0, b"garbage!");
    assert!(incompatible(&n).contains("magic"));
    // A truncated file.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(shm::path(&n.0).unwrap())
        .unwrap();
    f.set_len(100).unwrap();
    assert!(incompatible(&n).contains("size"));
    // Zeros of the right length.
    f.set_len(0).unwrap();
    f.set_len(1 << 20).unwrap();
    assert!(incompatible(&n).contains("magic"));
}

#[test]
fn a_garbage_table_is_an_error_not_a_crash() {
    let n = Name::new("garbage");
    let a = pool(&n);
    // The free-node list head (runtime at 512: mutex 40 bytes, holder, free_entries,
    // free_nodes at 560) points far out of range: the next acquire needing a node fails.
    poke(&n, 560, &0xFFFF_FFF0u32.to_le_bytes());
    let held = a.acquire(k(b"g"), &X).unwrap();
    // A shared hold needs a node for its record.
    let err = a.acquire(k(b"h"), &TRY.shared()).unwrap_err();
    assert!(matches!(err, Error::Incompatible(_)), "{err:?}");
    // So does a wait.
    let err = a
        .acquire(k(b"g"), &X.wait(Wait::For(Duration::from_millis(5))))
        .unwrap_err();
    assert!(matches!(err, Error::Incompatible(_)), "{err:?}");
    a.release(held).unwrap();
}

#[test]
fn shared_holders_overlap_and_exclude_writers() {
    let n = Name::new("shared");
    let a = pool(&n);
    let b = pool(&n);
    let r1 = a.acquire(k(b"doc"), &X.shared()).unwrap();
    let r2 = b.acquire(k(b"doc"), &X.shared()).unwrap();
    let info = a.info(k(b"doc")).unwrap().unwrap();
    assert_eq!((info.mode, info.holders), (Mode::Shared, 2));
    assert_eq!(b.acquire(k(b"doc"), &TRY).unwrap_err(), Error::WouldBlock);
    a.release(r1).unwrap();
    assert_eq!(b.acquire(k(b"doc"), &TRY).unwrap_err(), Error::WouldBlock);
    b.release(r2).unwrap();
    let w = b.acquire(k(b"doc"), &TRY).unwrap();
    assert_eq!(
        a.acquire(k(b"doc"), &TRY.shared()).unwrap_err(),
        Error::WouldBlock
    );
    b.release(w).unwrap();
}

#[test]
fn fifo_a_shared_request_behind_a_waiting_writer_waits() {
    within(LIMIT, || {
        let n = Name::new("fifo");
        let a = pool(&n);
        let b = pool(&n);
        let reader = a.acquire(k(b"q"), &X.shared()).unwrap();
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (b2, o2) = (Arc::clone(&b), Arc::clone(&order));
        let writer = std::thread::spawn(move || {
            let w = b2.acquire(k(b"q"), &X).unwrap();
            o2.lock().push("writer");
            std::thread::sleep(Duration::from_millis(5));
            b2.release(w).unwrap();
        });
        while a.info(k(b"q")).unwrap().unwrap().waiters < 1 {
            std::thread::yield_now();
        }
        // A second reader may not pass the queued writer.
        assert_eq!(
            a.acquire(k(b"q"), &TRY.shared()).unwrap_err(),
            Error::WouldBlock
        );
        let (a2, o3) = (Arc::clone(&a), Arc::clone(&order));
        let late = std::thread::spawn(move || {
            let r = a2.acquire(k(b"q"), &X.shared()).unwrap();
            o3.lock().push("reader");
            a2.release(r).unwrap();
        });
        while a.info(k(b"q")).unwrap().unwrap().waiters < 2 {
            std::thread::yield_now();
        }
        a.release(reader).unwrap();
        writer.join().unwrap();
        late.join().unwrap();
        assert_eq!(*order.lock(), ["writer", "reader"]);
    });
}

#[test]
fn timed_and_try_acquires_fail_cleanly() {
    within(LIMIT, || {
        let n = Name::new("timed");
        let a = pool(&n);
        let b = pool(&n);
        let held = a.acquire(k(b"t"), &X).unwrap();
        let t0 = std::time::Instant::now();
        let err = b
            .acquire(k(b"t"), &X.wait(Wait::For(Duration::from_millis(30))))
            .unwrap_err();
        assert_eq!(err, Error::TimedOut);
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert_eq!(
            b.info(k(b"t")).unwrap().unwrap().waiters,
            0,
            "the timed-out wait left a reservation"
        );
        a.release(held).unwrap();
        let acq = b.acquire(k(b"t"), &TRY).unwrap();
        b.release(acq).unwrap();
    });
}

#[test]
fn leases_end_by_themselves_and_advance_the_fence() {
    within(LIMIT, || {
        let n = Name::new("lease");
        let a = pool(&n);
        let b = pool(&n);
        let leased = a
            .acquire(k(b"l"), &X.lease(Duration::from_millis(40)))
            .unwrap();
        assert!(leased.lease_deadline().is_some());
        // A waiter takes over at the lease's end.
        let next = b
            .acquire(k(b"l"), &X.wait(Wait::For(Duration::from_secs(10))))
            .unwrap();
        assert!(
            next.fence() > leased.fence() + 1,
            "the lease's end advances the fence"
        );
        assert!(!next.owner_died());
        assert_eq!(a.release(leased), Err(Error::LeaseExpired));
        b.release(next).unwrap();
        // An idle expired key is free at the next look; extend moves the end.
        let mut l2 = a
            .acquire(k(b"l"), &X.lease(Duration::from_millis(20)))
            .unwrap();
        a.extend(&mut l2, Duration::from_secs(30)).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(b.acquire(k(b"l"), &TRY).unwrap_err(), Error::WouldBlock);
        assert!(a.is_current(&l2).unwrap());
        a.release(l2).unwrap();
        let short = a
            .acquire(k(b"l"), &X.lease(Duration::from_millis(10)))
            .unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let acq = b.acquire(k(b"l"), &TRY).unwrap();
        b.release(acq).unwrap();
        assert!(!a.is_current(&short).unwrap());
        let mut plain = a.acquire(k(b"m"), &X).unwrap();
        assert!(matches!(
            a.extend(&mut plain, Duration::from_secs(1)),
            Err(Error::InvalidArgument(_))
        ));
        a.release(plain).unwrap();
    });
}

#[test]
fn reentrant_regions_count_holds_per_owner_and_open() {
    let n = Name::new("reentrant");
    let opts = oo(|o| o.reentrant = true);
    let a = opts_with(&n, opts.clone());
    let b = opts_with(&n, opts);
    assert!(a.is_reentrant());
    let me = Owner::new(7).unwrap();
    let outer = a.acquire(k(b"r"), &X.owner(me)).unwrap();
    let inner = a.acquire(k(b"r"), &X.owner(me)).unwrap();
    assert_eq!(outer.fence(), inner.fence());
    assert_eq!(a.info(k(b"r")).unwrap().unwrap().holds, 2);
    assert!(a.is_current_as(&outer, Some(me)).unwrap());
    assert!(!a.is_current_as(&outer, Owner::new(8)).unwrap());
    // The same owner number in another open is another owner.
    assert_eq!(
        b.acquire(k(b"r"), &TRY.owner(me)).unwrap_err(),
        Error::WouldBlock
    );
    // A release on behalf of another owner is refused (and the record is spent).
    let other = Owner::new(8).unwrap();
    assert_eq!(a.release_as(inner, Some(other)), Err(Error::NotOwner));
    assert_eq!(a.info(k(b"r")).unwrap().unwrap().holds, 2);
    let third = a.acquire(k(b"r"), &X.owner(me)).unwrap();
    a.release_as(third, Some(me)).unwrap();
    assert_eq!(a.info(k(b"r")).unwrap().unwrap().holds, 2);
    a.release(outer).unwrap();
    assert!(
        a.is_locked(k(b"r")).unwrap(),
        "one hold is left (the spent record's)"
    );
    assert!(b.force_unlock(k(b"r")).unwrap());
    assert!(!a.is_locked(k(b"r")).unwrap());
}

#[test]
fn acquire_many_is_all_or_nothing() {
    let n = Name::new("many");
    let a = pool(&n);
    let b = pool(&n);
    let keys = [
        (k(b"m2"), Mode::Exclusive),
        (k(b"m1"), Mode::Shared),
        (k(b"m2"), Mode::Shared),
    ];
    let got = a.acquire_many(&keys, &X).unwrap();
    assert_eq!(got.len(), 2, "duplicates collapse");
    // In key order (m2 first), though taken in the canonical order (m1 first); the
    // duplicate's exclusive mode wins.
    assert_eq!(got[0].mode(), Mode::Exclusive);
    assert_eq!(got[1].mode(), Mode::Shared);
    let blocker = [(k(b"m0"), Mode::Exclusive), (k(b"m2"), Mode::Exclusive)];
    assert_eq!(
        b.acquire_many(&blocker, &TRY).unwrap_err(),
        Error::WouldBlock
    );
    assert!(
        !a.is_locked(k(b"m0")).unwrap(),
        "a failed acquire_many kept a key"
    );
    for acq in got {
        a.release(acq).unwrap();
    }
    let all = b.acquire_many(&blocker, &TRY).unwrap();
    for acq in all {
        b.release(acq).unwrap();
    }
}

#[test]
fn names_and_keys_are_separate_spaces() {
    let n = Name::new("spaces");
    let a = pool(&n);
    let key = a.acquire(LockKey::new(b"same"), &X).unwrap();
    let name = a.acquire(LockKey::name(b"same"), &TRY).unwrap();
    a.release(name).unwrap();
    a.release(key).unwrap();
}

#[test]
fn closing_an_open_while_holding_reports_owner_died() {
    let n = Name::new("close");
    let a = pool(&n);
    let b = pool(&n);
    let acq = a.acquire(k(b"c"), &X).unwrap();
    let fence = acq.fence();
    // Never released: the open closes with the key held.
    let _unreleased = acq;
    drop(a);
    let next = b.acquire(k(b"c"), &TRY).unwrap();
    assert!(next.owner_died());
    assert!(next.fence() > fence + 1);
    b.release(next).unwrap();
    let again = b.acquire(k(b"c"), &TRY).unwrap();
    assert!(!again.owner_died(), "owner_died is reported once");
    b.release(again).unwrap();
}

#[test]
fn async_waiters_are_woken_by_grants_and_cancel_on_drop() {
    within(LIMIT, || {
        let n = Name::new("async");
        let a = pool(&n);
        let b = pool(&n);
        let held = a.acquire(k(b"w"), &X).unwrap();
        let fut = Arc::clone(&b).acquire_async(k(b"w"), &X);
        let waiter = std::thread::spawn(move || futures::executor::block_on(fut));
        while a.info(k(b"w")).unwrap().unwrap().waiters < 1 {
            std::thread::yield_now();
        }
        a.release(held).unwrap();
        let got = waiter.join().unwrap().unwrap();
        // A cancelled (dropped) async wait leaves nothing behind.
        let mut pending = Arc::clone(&a).acquire_async(k(b"w"), &X);
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(pending.as_mut().poll(&mut cx).is_pending());
        assert_eq!(a.info(k(b"w")).unwrap().unwrap().waiters, 1);
        drop(pending);
        assert_eq!(a.info(k(b"w")).unwrap().unwrap().waiters, 0);
        b.release(got).unwrap();
        // A timed async wait times out.
        let held = a.acquire(k(b"w"), &X).unwrap();
        let timed =
            Arc::clone(&b).acquire_async(k(b"w"), &X.wait(Wait::For(Duration::from_millis(20))));
        assert_eq!(
            futures::executor::block_on(timed).unwrap_err(),
            Error::TimedOut
        );
        a.release(held).unwrap();
        let many = Arc::clone(&b)
            .acquire_many_async(&[(k(b"w"), Mode::Exclusive), (k(b"v"), Mode::Shared)], &X);
        for acq in futures::executor::block_on(many).unwrap() {
            b.release(acq).unwrap();
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_tasks_across_opens_exact_counts() {
    let n = Name::new("tokio");
    let opens: Vec<Arc<dyn KeyedLock>> = (0..2).map(|_| pool(&n)).collect();
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let lock = Arc::clone(&opens[t % 2]);
        let (counter, inside) = (Arc::clone(&counter), Arc::clone(&inside));
        tasks.push(tokio::spawn(async move {
            for _ in 0..100 {
                let acq = Arc::clone(&lock)
                    .acquire_async(k(b"hot"), &X)
                    .await
                    .unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders inside"
                );
                let v = counter.load(Ordering::Relaxed);
                tokio::task::yield_now().await;
                counter.store(v + 1, Ordering::Relaxed);
                inside.fetch_sub(1, Ordering::SeqCst);
                lock.release(acq).unwrap();
            }
        }));
    }
    tokio::time::timeout(LIMIT, async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("deadlock");
    assert_eq!(counter.load(Ordering::Relaxed), 1600);
}

/// Threads of two opens, exclusive and shared, on a pool and on stripes: writers never
/// overlap anything, counts are exact, and shared holders are seen inside together.
fn mixed_stress(a: Arc<dyn KeyedLock>, b: Arc<dyn KeyedLock>) {
    const KEYS: usize = 4;
    const THREADS: usize = 6;
    const ITERS: usize = 300;
    let writers_inside: Arc<Vec<AtomicUsize>> =
        Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    let readers_inside: Arc<Vec<AtomicUsize>> =
        Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    let max_readers = Arc::new(AtomicUsize::new(0));
    let counts: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let writes = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let lock = if t % 2 == 0 {
                Arc::clone(&a)
            } else {
                Arc::clone(&b)
            };
            let (wi, ri, mr, counts, writes) = (
                Arc::clone(&writers_inside),
                Arc::clone(&readers_inside),
                Arc::clone(&max_readers),
                Arc::clone(&counts),
                Arc::clone(&writes),
            );
            std::thread::spawn(move || {
                for i in 0..ITERS {
                    let key = (i * 7 + t) % KEYS;
                    let bytes = [key as u8];
                    if (i + t) % 3 == 0 {
                        let acq = lock.acquire(k(&bytes), &X.shared()).unwrap();
                        assert_eq!(
                            wi[key].load(Ordering::SeqCst),
                            0,
                            "a writer inside with a reader"
                        );
                        let now = ri[key].fetch_add(1, Ordering::SeqCst) + 1;
                        mr.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        ri[key].fetch_sub(1, Ordering::SeqCst);
                        lock.release(acq).unwrap();
                    } else {
                        let acq = lock.acquire(k(&bytes), &X).unwrap();
                        assert_eq!(
                            wi[key].fetch_add(1, Ordering::SeqCst),
                            0,
                            "two writers inside"
                        );
                        assert_eq!(
                            ri[key].load(Ordering::SeqCst),
                            0,
                            "a reader inside with a writer"
                        );
                        let v = counts[key].load(Ordering::Relaxed);
                        std::thread::yield_now();
                        counts[key].store(v + 1, Ordering::Relaxed);
                        wi[key].fetch_sub(1, Ordering::SeqCst);
                        writes.fetch_add(1, Ordering::Relaxed);
                        lock.release(acq).unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let total: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    assert_eq!(total, writes.load(Ordering::Relaxed));
    assert_eq!(
        total,
        (0..THREADS)
            .map(|t| (0..ITERS).filter(|i| (i + t) % 3 != 0).count() as u64)
            .sum::<u64>()
    );
}

#[test]
fn threads_of_two_opens_pool_exact_counts() {
    within(LIMIT, || {
        let n = Name::new("stress-pool");
        mixed_stress(pool(&n), pool(&n));
    });
}

#[test]
fn threads_of_two_opens_striped_exact_counts() {
    within(LIMIT, || {
        let n = Name::new("stress-striped");
        mixed_stress(
            opts_with(&n, striped_opts(2)),
            opts_with(&n, striped_opts(2)),
        );
    });
}

#[test]
fn shm_lock_reports_what_it_is() {
    let n = Name::new("what");
    let lock = ShmLock::open(&n.0, &striped_opts(16)).unwrap();
    assert!(lock.is_striped());
    assert_eq!(lock.capacity(), 16);
    assert_eq!(lock.name(), n.0);
    assert!(shm::path(&n.0).unwrap().exists());
    drop(lock);
    assert!(shm::unlink(&n.0).unwrap());
    assert!(!shm::unlink(&n.0).unwrap());
}

#[test]
fn regions_are_created_with_the_mode_asked() {
    use std::os::unix::fs::PermissionsExt;
    let n = Name::new("mode");
    drop(pool(&n));
    let mode = std::fs::metadata(shm::path(&n.0).unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let m = Name::new("mode2");
    drop(opts_with(&m, oo(|o| o.mode = Some(0o660))));
    let mode = std::fs::metadata(shm::path(&m.0).unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o660);
}

/// Strict FIFO regions hand the key to waiters in the order they queued.
#[test]
fn fifo_regions_hand_off_in_queue_order() {
    within(LIMIT, || {
        let n = Name::new("strict");
        let fifo = oo(|o| o.fifo = true);
        let a = opts_with(&n, fifo.clone());
        let b = opts_with(&n, fifo);
        let held = a.acquire(k(b"q"), &X).unwrap();
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for i in 0..4usize {
            let lock = if i % 2 == 0 {
                Arc::clone(&a)
            } else {
                Arc::clone(&b)
            };
            let order = Arc::clone(&order);
            threads.push(std::thread::spawn(move || {
                let acq = lock.acquire(k(b"q"), &X).unwrap();
                order.lock().push(i);
                std::thread::sleep(Duration::from_millis(5));
                lock.release(acq).unwrap();
            }));
            // Queue them one at a time, in order.
            while a.info(k(b"q")).unwrap().unwrap().waiters < i + 1 {
                std::thread::yield_now();
            }
        }
        // The release grants the key to the first waiter: a newcomer finds it taken.
        a.release(held).unwrap();
        assert_eq!(
            b.acquire(k(b"q"), &TRY).unwrap_err(),
            Error::WouldBlock,
            "a newcomer passed the queue"
        );
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock(), [0, 1, 2, 3]);
    });
}

/// With eventual fairness (the default), a holder that releases and re-acquires in a tight
/// loop may barge past a waiter, but not for ever: the waiter gets the key.
#[test]
fn barging_does_not_starve_a_waiter() {
    within(LIMIT, || {
        let n = Name::new("barge");
        let a = pool(&n);
        let b = pool(&n);
        let got = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut acq = a.acquire(k(b"hot"), &X).unwrap();
        let (b2, got2) = (Arc::clone(&b), Arc::clone(&got));
        let waiter = std::thread::spawn(move || {
            let w = b2.acquire(k(b"hot"), &X).unwrap();
            got2.store(true, Ordering::SeqCst);
            b2.release(w).unwrap();
        });
        while a.info(k(b"hot")).unwrap().unwrap().waiters < 1 {
            std::thread::yield_now();
        }
        let mut rounds = 0u64;
        while !got.load(Ordering::SeqCst) {
            a.release(acq).unwrap();
            acq = a.acquire(k(b"hot"), &X).unwrap();
            rounds += 1;
        }
        a.release(acq).unwrap();
        waiter.join().unwrap();
        assert!(rounds > 0);
    });
}

#[test]
fn stats_are_region_wide_and_here_is_this_open() {
    for (opts, capacity) in [
        (OpenOptions::default(), shm::DEFAULT_CAPACITY),
        (striped_opts(16), 16),
    ] {
        let name = Name::new("stats");
        let a = opts_with(&name, opts.clone());
        let b = opts_with(&name, opts);
        let held = a.acquire(k(b"job"), &X).unwrap();
        let waiter = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.acquire(LockKey::new(b"job"), &X))
        };
        within(LIMIT, {
            let a = Arc::clone(&a);
            move || {
                while a.stats().unwrap().waiting != Some(1) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        let (sa, sb) = (a.stats().unwrap(), b.stats().unwrap());
        assert_eq!((sa.held, sa.waiting), (Some(1), Some(1)));
        assert_eq!((sb.held, sb.waiting), (Some(1), Some(1)));
        assert_eq!((sa.held_here, sa.waiting_here), (1, 0));
        assert_eq!((sb.held_here, sb.waiting_here), (0, 1));
        assert_eq!(sa.capacity, Some(capacity));
        assert_eq!(sa.entries_in_use, Some(1));
        a.release(held).unwrap();
        let got = within(LIMIT, move || waiter.join().unwrap()).unwrap();
        let (sa, sb) = (a.stats().unwrap(), b.stats().unwrap());
        assert_eq!((sa.held_here, sb.held_here, sb.waiting), (0, 1, Some(0)));
        b.release(got).unwrap();
        let s = a.stats().unwrap();
        assert_eq!(
            (s.held, s.waiting, s.entries_in_use),
            (Some(0), Some(0), Some(0))
        );
    }
}

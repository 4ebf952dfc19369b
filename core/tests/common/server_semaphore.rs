//! The keyed semaphore's contract on a server scope (Redis, PostgreSQL), written once and run by
//! each server's tests with a way to open its scope: units shared by every scope object that
//! opens a prefix with the same permits, counted inside the critical section (never more than
//! the permits), strict FIFO with a heavy request at the head, a fence per acquisition,
//! force-release and its lost signal, a dead holder's units coming back with `owner_died`, and
//! bad input refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use keylock_core::{Error, KeyedLock, LockKey, LockOptions, Mode, OpenOptions, Result, Wait};

use crate::{key, wait_until, within};

/// What a [`SemOpener`] opens.
#[derive(Clone, Copy)]
pub(crate) enum Opens {
    /// The prefix's locks.
    Locks,
    /// The prefix's semaphore, with these permits.
    Permits(u32),
    /// The prefix's semaphore as an inspector opens it: with the permits recorded
    /// ([`keylock_core::inspect_semaphore`]).
    Recorded,
}

/// Opens a new scope object: `query` is the prefix, then any `&name=value` options.
pub(crate) type SemOpener = Arc<dyn Fn(&str, Opens) -> Result<Arc<dyn KeyedLock>> + Send + Sync>;

/// The opener of a server whose scope URL for `query` is `url(query)`.
pub(crate) fn opener(url: impl Fn(&str) -> String + Send + Sync + 'static) -> SemOpener {
    Arc::new(move |query: &str, opens: Opens| {
        let url = url(query);
        match opens {
            Opens::Permits(p) => keylock_core::open_with(&url, &OpenOptions::new().permits(p)),
            Opens::Locks => keylock_core::open(&url),
            Opens::Recorded => keylock_core::inspect_semaphore(&url),
        }
    })
}

/// Runs a test of the contract with `open`, failing it as a deadlock if it hangs.
pub(crate) fn bounded(open: SemOpener, test: impl FnOnce(&SemOpener) + Send + 'static) {
    within(Duration::from_secs(180), move || test(&open));
}

fn sem(open: &SemOpener, query: &str, permits: u32) -> Arc<dyn KeyedLock> {
    open(query, Opens::Permits(permits)).expect("open the semaphore scope")
}

pub(crate) fn units(w: u32) -> LockOptions {
    LockOptions::new().weight(w)
}

/// Waits until a request for `w` units is granted at once (a timed-out or cancelled waiter
/// gives up its place in the background), and releases it.
fn granted_at_once(scope: &Arc<dyn KeyedLock>, w: u32) {
    wait_until(|| match scope.acquire(key("k"), &units(w).wait(Wait::No)) {
        Ok(a) => {
            scope.release(a).unwrap();
            true
        }
        Err(e) => {
            assert_eq!(e, Error::WouldBlock);
            false
        }
    });
}

pub(crate) fn weights_fences_and_release_by_acquisition(open: &SemOpener) {
    let a = sem(open, "sem", 3);
    let b = sem(open, "sem", 3);
    assert_eq!(a.permits(), Some(3));
    let two = a.acquire(key("k"), &units(2)).unwrap();
    let one = b.acquire(key("k"), &units(1).wait(Wait::No)).unwrap();
    assert!(one.fence() > two.fence(), "a fence per acquisition");
    assert_eq!((two.weight(), one.weight()), (2, 1));
    assert_eq!(
        b.acquire(key("k"), &units(1).wait(Wait::No)).unwrap_err(),
        Error::WouldBlock
    );
    let timed = units(1).wait(Wait::For(Duration::from_millis(150)));
    assert_eq!(a.acquire(key("k"), &timed).unwrap_err(), Error::TimedOut);
    let info = b.info(key("k")).unwrap().unwrap();
    assert_eq!((info.units, info.holders, info.mode), (3, 2, Mode::Shared));
    // An inspector finds the permits recorded, and sees the same units.
    let seen = open("sem", Opens::Recorded).unwrap();
    assert_eq!(seen.permits(), Some(3));
    let seen = seen.info(key("k")).unwrap().unwrap();
    assert_eq!(
        (seen.units, seen.holders, seen.fence),
        (info.units, info.holders, info.fence)
    );
    // Another key, and the same key in a lock scope of the same prefix, are never blocked.
    let other = b.acquire(key("other"), &units(3)).unwrap();
    let lock = open("sem", Opens::Locks).unwrap();
    let l = lock
        .acquire(key("k"), &LockOptions::new().wait(Wait::No))
        .unwrap();
    lock.release(l).unwrap();
    b.release(other).unwrap();
    a.release(two).unwrap();
    assert_eq!(b.info(key("k")).unwrap().unwrap().units, 1);
    // Force-release ends every hold; the stale release is refused and frees nobody later.
    assert!(a.force_unlock(key("k")).unwrap());
    let next = a.acquire(key("k"), &units(3)).unwrap();
    assert!(
        next.fence() > one.fence() + 1,
        "the fence rises across a force-release"
    );
    assert_eq!(b.release(one).unwrap_err(), Error::NotOwner);
    assert_eq!(a.info(key("k")).unwrap().unwrap().units, 3);
    a.release(next).unwrap();
    assert_eq!(a.info(key("k")).unwrap(), None);
}

pub(crate) fn bad_input_is_refused(open: &SemOpener) {
    let a = sem(open, "bad", 2);
    for w in [0, 3] {
        assert!(matches!(
            a.acquire(key("k"), &units(w)),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        a.acquire(LockKey::name(b"k"), &units(1)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.steal(key("k"), &LockOptions::new()),
        Err(Error::InvalidArgument(_))
    ));
    // Every process that opens the prefix must agree on the permits.
    let other = open("bad", Opens::Permits(3));
    assert!(matches!(other, Err(Error::Incompatible(_))), "{other:?}");
    // A prefix where no semaphore was opened has no permits to find.
    let none = open("never", Opens::Recorded);
    assert!(matches!(none, Err(Error::Incompatible(_))), "{none:?}");
    // A lock scope takes weight 1 only.
    let lock = open("bad", Opens::Locks).unwrap();
    assert!(matches!(
        lock.acquire(key("k"), &units(2)),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(a.info(key("k")).unwrap(), None);
}

pub(crate) fn a_heavy_head_is_not_passed_by_light_requests(open: &SemOpener) {
    let a = sem(open, "fifo", 4);
    let b = sem(open, "fifo", 4);
    let c = sem(open, "fifo", 4);
    let held = a.acquire(key("k"), &units(3)).unwrap();
    let heavy = {
        let b = Arc::clone(&b);
        std::thread::spawn(move || b.acquire(key("k"), &units(4)))
    };
    wait_until(|| a.info(key("k")).unwrap().unwrap().waiters != 0);
    // One unit is free, but the heavy request is ahead: a try is refused, a timed request
    // waits behind it and gives up.
    assert_eq!(
        c.acquire(key("k"), &units(1).wait(Wait::No)).unwrap_err(),
        Error::WouldBlock
    );
    let light = units(1).wait(Wait::For(Duration::from_millis(200)));
    assert_eq!(c.acquire(key("k"), &light).unwrap_err(), Error::TimedOut);
    a.release(held).unwrap();
    let got = within(Duration::from_secs(20), move || heavy.join().unwrap()).unwrap();
    assert_eq!(got.weight(), 4);
    b.release(got).unwrap();
    assert_eq!(a.info(key("k")).unwrap(), None);
    // The light request that gave up left no place in the queue behind it.
    granted_at_once(&c, 4);
}

pub(crate) fn occupancy_never_exceeds_permits_across_scopes(open: &SemOpener) {
    const PERMITS: u32 = 3;
    const THREADS: usize = 4;
    const ROUNDS: usize = 40;
    let scopes: Vec<Arc<dyn KeyedLock>> = (0..2).map(|_| sem(open, "occ", PERMITS)).collect();
    let inside = Arc::new(AtomicU32::new(0));
    let max = Arc::new(AtomicU32::new(0));
    let (done, timed_out) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let scope = Arc::clone(&scopes[t % 2]);
            let (inside, max) = (Arc::clone(&inside), Arc::clone(&max));
            let (done, timed_out) = (Arc::clone(&done), Arc::clone(&timed_out));
            std::thread::spawn(move || {
                for i in 0..ROUNDS {
                    let w = 1 + ((t + i) % 3) as u32;
                    let opts = match i % 4 {
                        3 => units(w).wait(Wait::For(Duration::from_millis(5))),
                        _ => units(w),
                    };
                    match scope.acquire(key("k"), &opts) {
                        Ok(acq) => {
                            let now = inside.fetch_add(w, SeqCst) + w;
                            max.fetch_max(now, SeqCst);
                            assert!(now <= PERMITS, "{now} units inside");
                            std::thread::sleep(Duration::from_micros(300));
                            inside.fetch_sub(w, SeqCst);
                            scope.release(acq).unwrap();
                            done.fetch_add(1, SeqCst);
                        }
                        Err(e) => {
                            assert_eq!(e, Error::TimedOut);
                            timed_out.fetch_add(1, SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    within(Duration::from_secs(120), move || {
        for t in threads {
            t.join().unwrap();
        }
    });
    assert_eq!(done.load(SeqCst) + timed_out.load(SeqCst), THREADS * ROUNDS);
    assert!(max.load(SeqCst) <= PERMITS);
    assert!(
        max.load(SeqCst) > 1,
        "holders overlapped as the permits allow"
    );
    assert_eq!(scopes[0].info(key("k")).unwrap(), None);
    granted_at_once(&scopes[1], PERMITS);
}

/// The holder's scope object goes away without releasing (a record releases nothing when it is
/// dropped): its units come back, and the next holder learns that a holder died. `query` gives
/// the scope's prefix and a short lease.
pub(crate) fn a_dead_holders_units_come_back_with_owner_died(open: &SemOpener, query: &str) {
    let dying = sem(open, query, 2);
    let b = sem(open, query, 2);
    let held = dying.acquire(key("k"), &units(2)).unwrap();
    let fence = held.fence();
    let _ = held;
    drop(dying);
    let (b, got) = within(Duration::from_secs(20), move || {
        let got = b.acquire(key("k"), &units(1)).unwrap();
        (b, got)
    });
    assert!(
        got.owner_died(),
        "the next holder learns its predecessor died"
    );
    assert!(got.fence() > fence);
    b.release(got).unwrap();
    assert_eq!(b.info(key("k")).unwrap(), None);
}

/// `query` gives the scope's prefix and a short lease (a server that tells holders of a
/// force-release only at their renewals tells them within it).
pub(crate) fn a_force_released_permit_fires_its_lost_signal(open: &SemOpener, query: &str) {
    let holder = sem(open, query, 2);
    let other = sem(open, query, 2);
    let acq = holder.acquire(key("k"), &units(2)).unwrap();
    let lost = holder
        .lost_signal(&acq)
        .expect("a server's permit has a lost signal");
    assert!(!lost.is_lost());
    assert!(other.force_unlock(key("k")).unwrap());
    wait_until(|| lost.is_lost());
    assert!(!holder.is_current(&acq).unwrap());
    assert!(matches!(
        holder.release(acq),
        Err(Error::NotOwner | Error::LeaseExpired)
    ));
    // The units were free for the next holder all along.
    let next = other.acquire(key("k"), &units(2).wait(Wait::No)).unwrap();
    other.release(next).unwrap();
}

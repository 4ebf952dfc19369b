//! A guard's record frees what it boxed (a lease, an owner) exactly once, however the guard
//! ends: dropped, released, turned into an acquisition, dropped after a force-unlock. The
//! guard drops its record itself (skipping it after the inline release of a plain hold, whose
//! record boxes nothing), so a path that forgot it would leak and one that did it twice would
//! free twice. A counting allocator sees the first; the allocator's own checks, the second.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use keylock_core::{KeyPool, LockOptions, Owner, StripedLock};

/// Counts this thread's live allocations.
struct Counting;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the count is a side effect.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|n| n.set(n.get() - 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> i64 {
    LIVE.with(Cell::get)
}

const ROUNDS: i64 = 200;

/// One way for a guard to end, named.
type Case<'a> = (&'static str, Box<dyn Fn() + 'a>);

/// Runs `round` ROUNDS times after two warm-up rounds and returns the live allocations it
/// left behind.
fn left_behind(mut round: impl FnMut()) -> i64 {
    round();
    round();
    let before = live();
    for _ in 0..ROUNDS {
        round();
    }
    live() - before
}

fn leased() -> LockOptions {
    LockOptions::new().lease(Duration::from_secs(60))
}

#[test]
fn every_way_a_guard_ends_frees_its_record_once() {
    let pool: KeyPool<u64> = KeyPool::new();
    let striped = StripedLock::new(64).unwrap();
    let owner = Owner::new(7).unwrap();
    let cases: Vec<Case<'_>> = vec![
        ("pool, plain, dropped", Box::new(|| drop(pool.lock(&1)))),
        (
            "pool, leased, dropped",
            Box::new(|| drop(pool.lock_with(&1, leased()).unwrap())),
        ),
        (
            "pool, leased, released",
            Box::new(|| pool.lock_with(&1, leased()).unwrap().release().unwrap()),
        ),
        (
            "pool, leased, into_acquisition",
            Box::new(|| {
                let acq = pool.lock_with(&1, leased()).unwrap().into_acquisition();
                pool.release(acq).unwrap();
            }),
        ),
        (
            "pool, owned, dropped",
            Box::new(|| drop(pool.lock_with(&2, LockOptions::new().owner(owner)).unwrap())),
        ),
        (
            "pool, leased, extended, dropped",
            Box::new(|| {
                let mut g = pool.lock_with(&3, leased()).unwrap();
                g.extend(Duration::from_secs(120)).unwrap();
                drop(g);
            }),
        ),
        (
            "pool, plain, extend refused (no lease), dropped",
            Box::new(|| {
                let mut g = pool.lock(&4);
                assert!(g.extend(Duration::from_secs(1)).is_err());
                drop(g);
            }),
        ),
        (
            "pool, leased, force-unlocked, dropped",
            Box::new(|| {
                let g = pool.lock_with(&5, leased()).unwrap();
                assert!(pool.force_unlock(&5));
                drop(g);
            }),
        ),
        (
            "striped, leased, dropped",
            Box::new(|| drop(striped.lock_with(&1u64, leased()).unwrap())),
        ),
        (
            "striped, plain, released",
            Box::new(|| striped.lock(&1u64).release().unwrap()),
        ),
    ];
    for (name, round) in &cases {
        assert_eq!(left_behind(round), 0, "{name}: allocations left behind");
    }
}

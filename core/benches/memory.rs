//! Memory: heap bytes against distinct keys seen, bytes per held key, bytes per RwLock.
//!
//! Exact figures from a counting global allocator (live heap bytes), not RSS, which the
//! allocator's caching blurs. `--quick` stops at 10^5 distinct keys; the full run goes to
//! 10^7. With `KEYLOCK_BENCH_DIR` set, writes `rust-memory.json` there.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use keylock_core::{KeyPool, RawAdderRwLock, RwLock};

use common::{DashKeyed, Figure, NaiveMap, quick, report};

/// Counts live heap bytes; every allocation in the process goes through it.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc` is passed on as is.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc` is passed on as is.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Heap bytes `make` leaves allocated (the value built and kept alive by `body`).
fn heap_of<T>(make: impl FnOnce() -> T, body: impl FnOnce(&T)) -> f64 {
    let before = live();
    let v = make();
    body(&v);
    let after = live();
    drop(v);
    after as f64 - before as f64
}

fn keys_seen(figures: &mut Vec<Figure>, max_exp: u32) {
    for exp in 3..=max_exp {
        let n: u64 = 10u64.pow(exp);
        let mut add = |name: &str, bytes: f64, base: bool| {
            let mut f = Figure::new(
                format!("heap after {n} distinct keys: {name}"),
                "bytes",
                vec![bytes],
            )
            .param("group", "memory vs distinct keys")
            .param("impl", name)
            .param("keys", n);
            if !base {
                f.baseline = Some(format!(
                    "heap after {n} distinct keys: naive Mutex<HashMap<K, Arc<Mutex>>> (no removal)"
                ));
            }
            figures.push(f);
        };
        add(
            "keylock KeyPool, one key at a time",
            heap_of(KeyPool::<u64>::new, |p| {
                (0..n).for_each(|k| drop(p.lock(&k)))
            }),
            false,
        );
        add(
            "keylock KeyPool, 8 keys held at a time",
            heap_of(KeyPool::<u64>::new, |p| {
                let mut held = std::collections::VecDeque::with_capacity(8);
                for k in 0..n {
                    if held.len() == 8 {
                        held.pop_front();
                    }
                    held.push_back(p.lock(&k));
                }
                // The eight still held belong to the figure: a pool with work in flight.
                std::mem::forget(held);
            }),
            false,
        );
        add(
            "naive Mutex<HashMap<K, Arc<Mutex>>> (no removal)",
            heap_of(NaiveMap::<u64>::default, |m| {
                (0..n).for_each(|k| drop(m.get(&k).lock()));
            }),
            true,
        );
        add(
            "lockmap",
            heap_of(lockmap::LockMap::<u64, ()>::new, |m| {
                (0..n).for_each(|k| drop(m.entry(k)))
            }),
            false,
        );
        if exp <= 6 {
            add(
                "DashMap keyed lock (no removal)",
                heap_of(DashKeyed::<u64>::default, |m| {
                    (0..n).for_each(|k| drop(m.get(&k).lock()))
                }),
                false,
            );
        }
    }
}

fn per_held_key(figures: &mut Vec<Figure>) {
    const HELD: u64 = 100_000;
    let mut add = |name: &str, bytes: f64| {
        let mut f = Figure::new(
            format!("bytes per held key ({HELD} held): {name}"),
            "bytes",
            vec![bytes / HELD as f64],
        )
        .param("group", "bytes per held key")
        .param("impl", name);
        if !name.starts_with("naive") {
            f.baseline = Some(
                "bytes per held key (100000 held): naive Mutex<HashMap<K, Arc<Mutex>>>".into(),
            );
        }
        figures.push(f);
    };
    // The guards' own Vec is counted out: reserve it before measuring.
    let pool = KeyPool::<u64>::new();
    let mut guards = Vec::with_capacity(HELD as usize);
    let before = live();
    (0..HELD).for_each(|k| guards.push(pool.lock(&k)));
    add("keylock KeyPool", (live() - before) as f64);
    drop(guards);

    let naive = NaiveMap::<u64>::default();
    let mut guards = Vec::with_capacity(HELD as usize);
    let before = live();
    (0..HELD).for_each(|k| {
        let m = naive.get(&k);
        std::mem::forget(m.lock()); // held until the end of the process
        guards.push(m);
    });
    add(
        "naive Mutex<HashMap<K, Arc<Mutex>>>",
        (live() - before) as f64,
    );
    drop(guards);

    let lm = lockmap::LockMap::<u64, ()>::new();
    let mut guards = Vec::with_capacity(HELD as usize);
    let before = live();
    (0..HELD).for_each(|k| guards.push(lm.entry(k)));
    add("lockmap", (live() - before) as f64);
    drop(guards);
}

fn rwlock_sizes(figures: &mut Vec<Figure>) {
    let mut add = |name: &str, state: &str, bytes: f64, target: bool| {
        let mut f = Figure::new(
            format!("bytes per RwLock, {state}: {name}"),
            "bytes",
            vec![bytes],
        )
        .param("group", "bytes per RwLock")
        .param("impl", name)
        .param("state", state);
        if name != "crossbeam ShardedLock" {
            f.baseline = Some(format!("bytes per RwLock, {state}: crossbeam ShardedLock"));
        }
        if target {
            f.target = Some("one uncontended RwLock takes at most 256 bytes");
            f.met = Some(bytes <= 256.0);
        }
        figures.push(f);
    };
    let ours = RwLock::new();
    add(
        "keylock RwLock",
        "uncontended",
        (RawAdderRwLock::SIZE + ours.raw().heap_bytes()) as f64,
        true,
    );
    // Contention: two reader threads hammering the same lock until the cells have grown.
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    drop(ours.read());
                }
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
    });
    add(
        "keylock RwLock",
        "after contention",
        (RawAdderRwLock::SIZE + ours.raw().heap_bytes()) as f64,
        false,
    );
    let before = live();
    let sharded = Box::new(crossbeam_utils::sync::ShardedLock::new(()));
    let sharded_bytes = (live() - before) as f64;
    drop(sharded);
    add("crossbeam ShardedLock", "uncontended", sharded_bytes, false);
    add(
        "crossbeam ShardedLock",
        "after contention",
        sharded_bytes,
        false,
    );
    let pl = std::mem::size_of::<parking_lot::RwLock<()>>() as f64;
    add("parking_lot::RwLock", "uncontended", pl, false);
    add("parking_lot::RwLock", "after contention", pl, false);
}

/// What a new, unused KeyPool costs: bytes (the struct plus its heap) and time to make one.
fn new_pool(figures: &mut Vec<Figure>) {
    let before = live();
    let pool = Box::new(KeyPool::<u64>::new());
    let bytes = (live() - before) as f64;
    drop(pool);
    let mut f = Figure::new(
        "KeyPool::new(): bytes until first used",
        "bytes",
        vec![bytes],
    )
    .param("group", "new pool")
    .param("impl", "keylock KeyPool");
    f.target = Some("KeyPool::new() takes at most 1 KiB until first used");
    f.met = Some(bytes <= 1024.0);
    figures.push(f);

    // Median of 9 runs of 10,000 creations each (made and dropped: a pool per request).
    let runs: Vec<f64> = (0..9)
        .map(|_| {
            const N: u32 = 10_000;
            let t = std::time::Instant::now();
            for _ in 0..N {
                std::hint::black_box(KeyPool::<u64>::new());
            }
            t.elapsed().as_nanos() as f64 / f64::from(N)
        })
        .collect();
    let mut f = Figure::new("KeyPool::new() and drop: time", "ns", runs)
        .param("group", "new pool")
        .param("impl", "keylock KeyPool");
    f.target = Some("KeyPool::new() takes at most 1 us");
    f.met = Some(f.median() <= 1000.0);
    figures.push(f);
}

fn main() {
    let mut figures = Vec::new();
    new_pool(&mut figures);
    keys_seen(&mut figures, if quick() { 5 } else { 7 });
    per_held_key(&mut figures);
    rwlock_sizes(&mut figures);
    report(
        "keylock-core: memory (exact live heap bytes, counting allocator)",
        "rust-memory.json",
        &figures,
    );
}

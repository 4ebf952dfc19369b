//! Multi-thread throughput, latency under contention, fairness, and async contention.
//!
//! `cargo bench -p keylock-core --bench throughput -- [--quick] [THREADS...]` (default 1 2 4 8
//! 16). Every figure is the median of several timed runs (~200 ms each, 5 runs; `--quick`:
//! 60 ms, 3 runs); the alternatives run interleaved with keylock in the same process, so the
//! ratios compare like with like. With `KEYLOCK_BENCH_DIR` set, writes `rust-throughput.json`
//! and `rust-async-contended.json` there. `KEYLOCK_BENCH_GROUPS=keys,rwlock` runs only the
//! groups named (keys, latency, rwlock, modes, async), for a short look at one of them.

mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use keylock_core::{AdderRwLock, KeyPool, StripedLock};

use common::{DashKeyed, Figure, NaiveMap, quick, report, thread_counts};

// ---------------------------------------------------------------- per-key locks

trait Keyed: Sync {
    const NAME: &'static str;
    fn with<R>(&self, key: u64, f: impl FnOnce() -> R) -> R;
}

/// The floor: an array of padded parking_lot mutexes indexed without hashing, so each thread
/// of the distinct-key workload has its own mutexes.
struct Floor(Vec<CachePadded<parking_lot::Mutex<()>>>);
impl Keyed for Floor {
    const NAME: &'static str = "parking_lot::Mutex (floor)";
    fn with<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let i = ((key >> 32) * 64 + (key & 63)) as usize & (self.0.len() - 1);
        let _g = self.0[i].lock();
        f()
    }
}
impl Keyed for NaiveMap<u64> {
    const NAME: &'static str = "naive Mutex<HashMap<K, Arc<Mutex>>>";
    fn with<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let m = self.get(&key);
        let _g = m.lock();
        f()
    }
}
impl Keyed for lockmap::LockMap<u64, ()> {
    const NAME: &'static str = "lockmap";
    fn with<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let _e = self.entry(key);
        f()
    }
}
impl Keyed for DashKeyed<u64> {
    const NAME: &'static str = "DashMap keyed lock";
    fn with<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let m = self.get(&key);
        let _g = m.lock();
        f()
    }
}
impl Keyed for StripedLock {
    const NAME: &'static str = "keylock StripedLock";
    fn with<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let _g = self.lock(&key);
        f()
    }
}
impl Keyed for KeyPool<u64> {
    const NAME: &'static str = "keylock KeyPool";
    fn with<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let _g = self.lock(&key);
        f()
    }
}

/// Runs `body(thread, stop)` on `threads` threads for `dur`; returns operations per second.
fn timed<F>(threads: usize, dur: Duration, body: F) -> f64
where
    F: Fn(usize, &AtomicBool) -> u64 + Sync,
{
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, barrier, body) = (&stop, &barrier, &body);
                s.spawn(move || {
                    barrier.wait();
                    body(t, stop)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
        let ops: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        ops as f64 / start.elapsed().as_secs_f64()
    })
}

#[derive(Clone, Copy)]
enum Keys {
    /// Each thread cycles through 64 keys of its own.
    Distinct,
    /// All threads cycle through the same 4 keys.
    Hot,
}

fn keyed_ops<L: Keyed>(l: &L, keys: Keys, threads: usize, dur: Duration) -> f64 {
    timed(threads, dur, |t, stop| {
        let mut i: u64 = 0;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..64 {
                let key = match keys {
                    Keys::Distinct => ((t as u64) << 32) | (i & 63),
                    Keys::Hot => i & 3,
                };
                l.with(black_box(key), || black_box(()));
                i += 1;
            }
        }
        i
    })
}

fn per_key(figures: &mut Vec<Figure>, threads: &[usize], runs: usize, dur: Duration) {
    for (keys, wl) in [(Keys::Distinct, "distinct keys"), (Keys::Hot, "4 hot keys")] {
        for &n in threads {
            let floor = Floor(
                (0..1024)
                    .map(|_| CachePadded::new(parking_lot::Mutex::new(())))
                    .collect(),
            );
            let naive = NaiveMap::<u64>::default();
            let lm = lockmap::LockMap::<u64, ()>::new();
            let dash = DashKeyed::<u64>::default();
            let striped = StripedLock::new(1024).unwrap();
            let pool = KeyPool::<u64>::new();
            let mut r: [Vec<f64>; 6] = Default::default();
            for _ in 0..runs {
                r[0].push(keyed_ops(&floor, keys, n, dur));
                r[1].push(keyed_ops(&naive, keys, n, dur));
                r[2].push(keyed_ops(&lm, keys, n, dur));
                r[3].push(keyed_ops(&dash, keys, n, dur));
                r[4].push(keyed_ops(&striped, keys, n, dur));
                r[5].push(keyed_ops(&pool, keys, n, dur));
            }
            let names = [
                Floor::NAME,
                <NaiveMap<u64> as Keyed>::NAME,
                <lockmap::LockMap<u64, ()> as Keyed>::NAME,
                <DashKeyed<u64> as Keyed>::NAME,
                StripedLock::NAME,
                <KeyPool<u64> as Keyed>::NAME,
            ];
            let naive_name = format!("per-key {wl}, {n} threads: {}", names[1]);
            for (name, runs) in names.iter().zip(r) {
                let mut f =
                    Figure::new(format!("per-key {wl}, {n} threads: {name}"), "ops/s", runs)
                        .param("group", format!("per-key {wl}"))
                        .param("impl", name)
                        .param("threads", n);
                if *name != names[1] {
                    f.baseline = Some(naive_name.clone());
                }
                if *name == names[5] && n == 2 && matches!(keys, Keys::Distinct) {
                    f.target = Some(
                        "KeyPool >= 3x the naive map's throughput with 2 threads on distinct keys",
                    );
                    f.goal = Some(3.0);
                }
                if *name == names[5] && matches!(keys, Keys::Hot) {
                    f.target = Some("KeyPool on hot keys never below the naive map");
                    f.goal = Some(1.0);
                }
                figures.push(f);
            }
        }
    }
}

// ---------------------------------------------------------------- latency and fairness

fn latency(figures: &mut Vec<Figure>, runs: usize, dur: Duration) {
    const THREADS: usize = 8;
    fn one<L: Keyed>(l: &L, dur: Duration) -> (f64, f64, f64, f64) {
        let stop = AtomicBool::new(false);
        let barrier = Barrier::new(THREADS + 1);
        let per_thread: Vec<Vec<u32>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (stop, barrier) = (&stop, &barrier);
                    s.spawn(move || {
                        let mut waits = Vec::with_capacity(1 << 16);
                        barrier.wait();
                        while !stop.load(Ordering::Relaxed) {
                            let t0 = Instant::now();
                            let w = l.with(0, || {
                                let w = t0.elapsed();
                                // A short critical section, ~50 ns.
                                for i in 0..20u32 {
                                    black_box(i);
                                }
                                w
                            });
                            waits.push(w.as_nanos().min(u32::MAX as u128) as u32);
                        }
                        waits
                    })
                })
                .collect();
            barrier.wait();
            std::thread::sleep(dur);
            stop.store(true, Ordering::Relaxed);
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let counts: Vec<f64> = per_thread.iter().map(|v| v.len() as f64).collect();
        let mut all: Vec<u32> = per_thread.into_iter().flatten().collect();
        all.sort_unstable();
        let pct = |p: f64| all[((all.len() - 1) as f64 * p) as usize] as f64;
        let mean = counts.iter().sum::<f64>() / counts.len() as f64;
        let sd =
            (counts.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / counts.len() as f64).sqrt();
        let min = counts.iter().copied().fold(f64::INFINITY, f64::min);
        let max = counts.iter().copied().fold(0.0, f64::max);
        (pct(0.5), pct(0.99), sd / mean, min / max)
    }
    fn add<L: Keyed>(figures: &mut Vec<Figure>, l: &L, runs: usize, dur: Duration) {
        let (mut p50, mut p99, mut cv, mut mm) = (vec![], vec![], vec![], vec![]);
        for _ in 0..runs {
            let (a, b, c, d) = one(l, dur);
            p50.push(a);
            p99.push(b);
            cv.push(c);
            mm.push(d);
        }
        let base = |what: &str| {
            format!(
                "hot key, {THREADS} threads, {what}: {}",
                <NaiveMap<u64> as Keyed>::NAME
            )
        };
        for (what, unit, v) in [
            ("p50 wait", "ns", p50),
            ("p99 wait", "ns", p99),
            ("acquisitions per thread, stddev/mean", "ratio", cv),
            ("acquisitions per thread, min/max", "ratio", mm),
        ] {
            let mut f = Figure::new(
                format!("hot key, {THREADS} threads, {what}: {}", L::NAME),
                unit,
                v,
            )
            .param("group", format!("latency: {what}"))
            .param("impl", L::NAME)
            .param("threads", THREADS);
            f.higher_is_better = what.contains("min/max");
            if unit == "ns" && L::NAME != <NaiveMap<u64> as Keyed>::NAME {
                f.baseline = Some(base(what));
            }
            figures.push(f);
        }
    }
    let floor = Floor(
        (0..1024)
            .map(|_| CachePadded::new(parking_lot::Mutex::new(())))
            .collect(),
    );
    add(figures, &floor, runs, dur);
    add(figures, &NaiveMap::<u64>::default(), runs, dur);
    add(figures, &lockmap::LockMap::<u64, ()>::new(), runs, dur);
    add(figures, &DashKeyed::<u64>::default(), runs, dur);
    add(figures, &StripedLock::new(1024).unwrap(), runs, dur);
    add(figures, &KeyPool::<u64>::new(), runs, dur);
}

// ---------------------------------------------------------------- per-key modes

/// A keyed lock with shared and exclusive modes, for the read-mostly workload.
trait KeyedRw: Sync {
    const NAME: &'static str;
    fn read<R>(&self, key: u64, f: impl FnOnce() -> R) -> R;
    fn write<R>(&self, key: u64, f: impl FnOnce() -> R) -> R;
}

/// KeyPool with shared reads.
struct PoolModes(KeyPool<u64>);
impl KeyedRw for PoolModes {
    const NAME: &'static str = "keylock KeyPool, shared reads";
    fn read<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let _g = self.0.lock_shared(&key);
        f()
    }
    fn write<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let _g = self.0.lock(&key);
        f()
    }
}

/// KeyPool with every access exclusive: what a user without modes does.
struct PoolExclusive(KeyPool<u64>);
impl KeyedRw for PoolExclusive {
    const NAME: &'static str = "keylock KeyPool, exclusive only";
    fn read<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let _g = self.0.lock(&key);
        f()
    }
    fn write<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let _g = self.0.lock(&key);
        f()
    }
}

/// The naive map of reader-writer locks: a global mutex around a map of
/// `Arc<parking_lot::RwLock>` (entries never removed).
#[derive(Default)]
struct NaiveRwMap(parking_lot::Mutex<std::collections::HashMap<u64, Arc<parking_lot::RwLock<()>>>>);
impl NaiveRwMap {
    fn get(&self, key: u64) -> Arc<parking_lot::RwLock<()>> {
        Arc::clone(self.0.lock().entry(key).or_default())
    }
}
impl KeyedRw for NaiveRwMap {
    const NAME: &'static str = "naive Mutex<HashMap<K, Arc<RwLock>>>";
    fn read<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let l = self.get(key);
        let _g = l.read();
        f()
    }
    fn write<R>(&self, key: u64, f: impl FnOnce() -> R) -> R {
        let l = self.get(key);
        let _g = l.write();
        f()
    }
}

/// Every thread works on the same 64 keys, `read_pct`% reads; each critical section does a
/// little work (~100 ns), which readers can share and writers cannot.
fn keyed_rw_ops<L: KeyedRw>(l: &L, read_pct: u64, threads: usize, dur: Duration) -> f64 {
    timed(threads, dur, |t, stop| {
        let mut rng: u64 =
            0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let mut i = 0;
        let work = || {
            for j in 0..40u32 {
                black_box(j);
            }
        };
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..64 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let key = rng % 64;
                if (rng >> 32) % 100 < read_pct {
                    l.read(black_box(key), work);
                } else {
                    l.write(black_box(key), work);
                }
                i += 1;
            }
        }
        i
    })
}

fn per_key_modes(figures: &mut Vec<Figure>, threads: &[usize], runs: usize, dur: Duration) {
    for read_pct in [90, 99] {
        for &n in threads.iter().filter(|&&n| n <= 4) {
            let modes = PoolModes(KeyPool::new());
            let excl = PoolExclusive(KeyPool::new());
            let naive = NaiveRwMap::default();
            let mut r: [Vec<f64>; 3] = Default::default();
            for _ in 0..runs {
                r[0].push(keyed_rw_ops(&modes, read_pct, n, dur));
                r[1].push(keyed_rw_ops(&excl, read_pct, n, dur));
                r[2].push(keyed_rw_ops(&naive, read_pct, n, dur));
            }
            let names = [PoolModes::NAME, PoolExclusive::NAME, NaiveRwMap::NAME];
            let title =
                |name: &str| format!("read-mostly per key, {read_pct}% reads, {n} threads: {name}");
            for (k, (name, runs)) in names.iter().zip(r).enumerate() {
                let mut f = Figure::new(title(name), "ops/s", runs)
                    .param("group", format!("read-mostly per key, {read_pct}% reads"))
                    .param("impl", name)
                    .param("threads", n)
                    .param("read_pct", read_pct);
                if k != 2 {
                    f.baseline = Some(title(names[2]));
                }
                figures.push(f);
            }
        }
    }
}

// ---------------------------------------------------------------- reader-writer locks

trait Rw: Sync {
    const NAME: &'static str;
    fn read(&self) -> u64;
    fn write(&self);
}
impl Rw for AdderRwLock<u64> {
    const NAME: &'static str = "keylock RwLock";
    fn read(&self) -> u64 {
        *AdderRwLock::read(self)
    }
    fn write(&self) {
        *AdderRwLock::write(self) += 1;
    }
}
impl Rw for crossbeam_utils::sync::ShardedLock<u64> {
    const NAME: &'static str = "crossbeam ShardedLock";
    fn read(&self) -> u64 {
        *crossbeam_utils::sync::ShardedLock::read(self).unwrap()
    }
    fn write(&self) {
        *crossbeam_utils::sync::ShardedLock::write(self).unwrap() += 1;
    }
}
impl Rw for parking_lot::RwLock<u64> {
    const NAME: &'static str = "parking_lot::RwLock";
    fn read(&self) -> u64 {
        *parking_lot::RwLock::read(self)
    }
    fn write(&self) {
        *parking_lot::RwLock::write(self) += 1;
    }
}
impl Rw for std::sync::RwLock<u64> {
    const NAME: &'static str = "std::sync::RwLock";
    fn read(&self) -> u64 {
        *std::sync::RwLock::read(self).unwrap()
    }
    fn write(&self) {
        *std::sync::RwLock::write(self).unwrap() += 1;
    }
}

fn rw_ops<L: Rw>(l: &L, read_pct: u64, threads: usize, dur: Duration) -> f64 {
    timed(threads, dur, |t, stop| {
        let mut rng: u64 =
            0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..64 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if rng % 100 < read_pct {
                    black_box(l.read());
                } else {
                    l.write();
                }
                i += 1;
            }
        }
        i
    })
}

fn rwlocks(figures: &mut Vec<Figure>, threads: &[usize], runs: usize, dur: Duration) {
    for read_pct in [100, 99, 90, 50] {
        for &n in threads {
            let ours = AdderRwLock::new(0u64);
            let sharded = crossbeam_utils::sync::ShardedLock::new(0u64);
            let pl = parking_lot::RwLock::new(0u64);
            let std_rw = std::sync::RwLock::new(0u64);
            let mut r: [Vec<f64>; 4] = Default::default();
            for _ in 0..runs {
                r[0].push(rw_ops(&ours, read_pct, n, dur));
                r[1].push(rw_ops(&sharded, read_pct, n, dur));
                r[2].push(rw_ops(&pl, read_pct, n, dur));
                r[3].push(rw_ops(&std_rw, read_pct, n, dur));
            }
            let names = [
                <AdderRwLock<u64> as Rw>::NAME,
                <crossbeam_utils::sync::ShardedLock<u64> as Rw>::NAME,
                <parking_lot::RwLock<u64> as Rw>::NAME,
                <std::sync::RwLock<u64> as Rw>::NAME,
            ];
            let title = |name: &str| format!("rwlock {read_pct}% reads, {n} threads: {name}");
            for (k, (name, runs)) in names.iter().zip(r).enumerate() {
                let mut f = Figure::new(title(name), "ops/s", runs)
                    .param("group", "rwlock")
                    .param("impl", name)
                    .param("threads", n)
                    .param("read_pct", read_pct);
                if k == 0 {
                    f.baseline = Some(title(names[1]));
                    if read_pct == 100 && n == 2 {
                        f.target = Some(
                            "RwLock reads with 2 reader threads at least as fast as ShardedLock",
                        );
                        f.goal = Some(1.0);
                    }
                } else if k >= 2 {
                    f.baseline = Some(title(names[1]));
                }
                figures.push(f);
            }
        }
    }
}

// ---------------------------------------------------------------- async contention

type TokioMap = std::sync::Mutex<std::collections::HashMap<u64, Arc<tokio::sync::Mutex<()>>>>;

/// `tasks` tokio tasks, each taking `ops` random keys out of `keys`; with `hold_await`, each
/// task yields to the runtime while it holds the key (as real work across `.await` would).
fn async_contended(figures: &mut Vec<Figure>, runs: usize, tasks: usize, ops: usize) {
    const KEYS: u64 = 1000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    for hold_await in [false, true] {
        let (mut ours, mut theirs) = (vec![], vec![]);
        for _ in 0..runs {
            let pool = Arc::new(KeyPool::<u64>::new());
            ours.push(rt.block_on(async {
                let start = Instant::now();
                let hs: Vec<_> = (0..tasks)
                    .map(|t| {
                        let pool = Arc::clone(&pool);
                        tokio::spawn(async move {
                            let mut rng = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                            for _ in 0..ops {
                                rng ^= rng << 13;
                                rng ^= rng >> 7;
                                rng ^= rng << 17;
                                let _g = pool.lock_async_owned(&(rng % KEYS)).await;
                                if hold_await {
                                    tokio::task::yield_now().await;
                                }
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.await.unwrap();
                }
                (tasks * ops) as f64 / start.elapsed().as_secs_f64()
            }));
            let map: Arc<TokioMap> = Arc::default();
            theirs.push(rt.block_on(async {
                let start = Instant::now();
                let hs: Vec<_> = (0..tasks)
                    .map(|t| {
                        let map = Arc::clone(&map);
                        tokio::spawn(async move {
                            let mut rng = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                            for _ in 0..ops {
                                rng ^= rng << 13;
                                rng ^= rng >> 7;
                                rng ^= rng << 17;
                                let m =
                                    Arc::clone(map.lock().unwrap().entry(rng % KEYS).or_default());
                                let _g = m.lock_owned().await;
                                if hold_await {
                                    tokio::task::yield_now().await;
                                }
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.await.unwrap();
                }
                (tasks * ops) as f64 / start.elapsed().as_secs_f64()
            }));
        }
        let wl = if hold_await {
            "held across an await"
        } else {
            "no await while held"
        };
        let base = format!(
            "async {tasks} tasks on {KEYS} keys, {wl}: Mutex<HashMap<K, Arc<tokio::sync::Mutex>>>"
        );
        let mut f = Figure::new(
            format!("async {tasks} tasks on {KEYS} keys, {wl}: keylock KeyPool lock_async_owned"),
            "ops/s",
            ours,
        )
        .param("group", "async contended")
        .param("impl", "keylock KeyPool lock_async_owned")
        .param("workload", wl);
        f.baseline = Some(base.clone());
        f.target = Some(if hold_await {
            "contended async throughput at least 2x the map of tokio mutexes (lock held across an await)"
        } else {
            "contended async throughput at least 2x the map of tokio mutexes (no await while held)"
        });
        f.goal = Some(2.0);
        figures.push(f);
        figures.push(
            Figure::new(base, "ops/s", theirs)
                .param("group", "async contended")
                .param("impl", "Mutex<HashMap<K, Arc<tokio::sync::Mutex>>>")
                .param("workload", wl),
        );
    }
}

fn main() {
    let quick = quick();
    let threads = thread_counts();
    let (runs, dur) = if quick {
        (3, Duration::from_millis(60))
    } else {
        (5, Duration::from_millis(200))
    };
    let mut figures = Vec::new();
    if group("keys") {
        per_key(&mut figures, &threads, runs, dur);
    }
    if group("latency") {
        latency(
            &mut figures,
            runs,
            if quick {
                Duration::from_millis(100)
            } else {
                Duration::from_millis(300)
            },
        );
    }
    if group("rwlock") {
        rwlocks(&mut figures, &threads, runs, dur);
    }
    if group("modes") {
        per_key_modes(&mut figures, &threads, runs, dur);
    }
    if !figures.is_empty() {
        report(
            "keylock-core: multi-thread throughput, latency and fairness",
            "rust-throughput.json",
            &figures,
        );
    }

    if group("async") {
        let mut figures = Vec::new();
        async_contended(&mut figures, runs, 1000, if quick { 50 } else { 200 });
        report(
            "keylock-core: contended async (tokio multi-thread runtime)",
            "rust-async-contended.json",
            &figures,
        );
    }
}

/// Whether the group `name` runs: every group unless `KEYLOCK_BENCH_GROUPS` names some (a
/// comma-separated list of keys, latency, rwlock, modes, async).
fn group(name: &str) -> bool {
    std::env::var("KEYLOCK_BENCH_GROUPS").map_or(true, |v| v.split(',').any(|g| g.trim() == name))
}

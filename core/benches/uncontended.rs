//! Uncontended lock + unlock, one thread, every per-key lock and reader-writer lock side by
//! side in one criterion group, so the ratios come from one run on one machine.
//!
//! Keyed locks cycle through 1,024 keys, so hashing and the lookup are paid on every
//! iteration and the naive map holds 1,024 entries. The alternatives are used the way their
//! documentation (or, for the naive map, common practice) shows.
//!
//! Groups: `uncontended_u64` (u64 keys), `uncontended_bytes16` (16-byte string keys),
//! `uncontended_async` (futures polled once with a no-op waker; an uncontended lock is ready
//! on the first poll).
//!
//! Timed by the thread's CPU time ([`ThreadTime`]), not the wall clock, so that other jobs on
//! the machine do not inflate the figures (see `common/cpu_time.rs`).

mod common;

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::measurement::Measurement;
use criterion::{Criterion, criterion_group, criterion_main};
use keylock_core::{AdderRwLock, KeyPool, RwLock, StripedLock};

use common::cpu_time::ThreadTime;
use common::{DashKeyed, NaiveMap};

const KEYS: u64 = 1024;

/// Polls `fut` once with a no-op waker; panics if it is not ready (it never is contended here).
fn ready<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("an uncontended lock future must be ready at once"),
    }
}

/// Runs `fut` (a batch that never waits) to the end in one poll; the thread's CPU time it took.
fn in_task<F: Future<Output = ()>>(fut: F) -> std::time::Duration {
    let m = ThreadTime;
    let start = m.start();
    ready(fut);
    m.end(start)
}

fn u64_keys(c: &mut Criterion<ThreadTime>) {
    let mut g = c.benchmark_group("uncontended_u64");
    let mut k: u64 = 0;
    let mut next = move || {
        k = (k + 1) & (KEYS - 1);
        k
    };

    let floor = parking_lot::Mutex::new(());
    g.bench_function("parking_lot::Mutex", |b| {
        b.iter(|| drop(black_box(&floor).lock()))
    });
    let std_m = std::sync::Mutex::new(());
    g.bench_function("std::sync::Mutex", |b| {
        b.iter(|| drop(black_box(&std_m).lock()))
    });

    let naive = NaiveMap::<u64>::default();
    g.bench_function("naive Mutex<HashMap<K, Arc<Mutex>>>", |b| {
        b.iter(|| {
            let m = naive.get(&next());
            drop(black_box(&m).lock());
        })
    });
    let lm = lockmap::LockMap::<u64, ()>::new();
    g.bench_function("lockmap", |b| b.iter(|| drop(lm.entry(black_box(next())))));
    let dash = DashKeyed::<u64>::default();
    g.bench_function("DashMap keyed lock", |b| {
        b.iter(|| {
            let m = dash.get(&next());
            drop(black_box(&m).lock());
        })
    });

    let sharded = crossbeam_utils::sync::ShardedLock::new(());
    g.bench_function("ShardedLock read", |b| {
        b.iter(|| drop(black_box(&sharded).read()))
    });
    g.bench_function("ShardedLock write", |b| {
        b.iter(|| drop(black_box(&sharded).write()))
    });
    let plrw = parking_lot::RwLock::new(());
    g.bench_function("parking_lot::RwLock read", |b| {
        b.iter(|| drop(black_box(&plrw).read()))
    });
    g.bench_function("parking_lot::RwLock write", |b| {
        b.iter(|| drop(black_box(&plrw).write()))
    });

    let striped = StripedLock::new(1024).unwrap();
    g.bench_function("keylock StripedLock", |b| {
        b.iter(|| drop(striped.lock(&black_box(next()))))
    });
    let pool = KeyPool::<u64>::new();
    g.bench_function("keylock KeyPool", |b| {
        b.iter(|| drop(pool.lock(&black_box(next()))))
    });
    let rw = RwLock::new();
    g.bench_function("keylock RwLock read", |b| {
        b.iter(|| drop(black_box(&rw).read()))
    });
    g.bench_function("keylock RwLock write", |b| {
        b.iter(|| drop(black_box(&rw).write()))
    });
    let adder = AdderRwLock::new(());
    g.bench_function("keylock AdderRwLock read", |b| {
        b.iter(|| drop(black_box(&adder).read()))
    });
    g.bench_function("keylock AdderRwLock write", |b| {
        b.iter(|| drop(black_box(&adder).write()))
    });
    g.finish();
}

fn byte_keys(c: &mut Criterion<ThreadTime>) {
    let mut g = c.benchmark_group("uncontended_bytes16");
    let keys: Vec<[u8; 16]> = (0..KEYS).map(common::key16).collect();
    let mut i = 0usize;
    let mut next = move || {
        i = (i + 1) & (KEYS as usize - 1);
        i
    };

    let floor = parking_lot::Mutex::new(());
    g.bench_function("parking_lot::Mutex", |b| {
        b.iter(|| drop(black_box(&floor).lock()))
    });
    let naive = NaiveMap::<Vec<u8>>::default();
    g.bench_function("naive Mutex<HashMap<K, Arc<Mutex>>>", |b| {
        b.iter(|| {
            let m = naive.get_bytes(black_box(&keys[next()][..]));
            drop(black_box(&m).lock());
        })
    });
    let lm = lockmap::LockMap::<Vec<u8>, ()>::new();
    g.bench_function("lockmap", |b| {
        b.iter(|| drop(lm.entry_by_ref(black_box(&keys[next()][..]))))
    });
    let dash = DashKeyed::<Vec<u8>>::default();
    g.bench_function("DashMap keyed lock", |b| {
        b.iter(|| {
            let m = dash.get_bytes(black_box(&keys[next()][..]));
            drop(black_box(&m).lock());
        })
    });
    let striped = StripedLock::new(1024).unwrap();
    g.bench_function("keylock StripedLock", |b| {
        b.iter(|| drop(striped.lock(black_box(&keys[next()][..]))))
    });
    let pool = KeyPool::<Vec<u8>>::new();
    g.bench_function("keylock KeyPool", |b| {
        b.iter(|| drop(pool.lock(black_box(&keys[next()][..]))))
    });
    g.finish();
}

fn async_keys(c: &mut Criterion<ThreadTime>) {
    let mut g = c.benchmark_group("uncontended_async");
    let mut k: u64 = 0;
    let mut next = move || {
        k = (k + 1) & (KEYS - 1);
        k
    };
    let pool = KeyPool::<u64>::new();
    g.bench_function("keylock KeyPool lock (sync)", |b| {
        b.iter(|| drop(pool.lock(&black_box(next()))))
    });
    g.bench_function("keylock KeyPool lock_async", |b| {
        b.iter(|| drop(ready(pool.lock_async(&black_box(next())))))
    });
    let striped = StripedLock::new(1024).unwrap();
    g.bench_function("keylock StripedLock lock (sync)", |b| {
        b.iter(|| drop(striped.lock(&black_box(next()))))
    });
    g.bench_function("keylock StripedLock lock_async", |b| {
        b.iter(|| drop(ready(striped.lock_async(&black_box(next())))))
    });
    let rw = RwLock::new();
    g.bench_function("keylock RwLock read (sync)", |b| {
        b.iter(|| drop(black_box(&rw).read()))
    });
    g.bench_function("keylock RwLock read_async", |b| {
        b.iter(|| drop(ready(black_box(&rw).read_async())))
    });
    // The same futures awaited in an async fn, as a task would: made in place and polled
    // there. `ready(fut)` above moves each freshly made future into its own frame first, and a
    // copy of a struct just written with narrower stores waits for those stores (the
    // processor cannot forward them to the wider loads of the copy): that costs a few
    // nanoseconds the awaiting task does not pay. One future runs the whole batch here.
    g.bench_function("keylock KeyPool lock (sync), in a task", |b| {
        b.iter_custom(|iters| {
            in_task(async {
                for _ in 0..iters {
                    drop(pool.lock(&black_box(next())));
                }
            })
        })
    });
    g.bench_function("keylock KeyPool lock_async, awaited in a task", |b| {
        b.iter_custom(|iters| {
            in_task(async {
                for _ in 0..iters {
                    drop(pool.lock_async(&black_box(next())).await);
                }
            })
        })
    });
    g.bench_function("keylock StripedLock lock (sync), in a task", |b| {
        b.iter_custom(|iters| {
            in_task(async {
                for _ in 0..iters {
                    drop(striped.lock(&black_box(next())));
                }
            })
        })
    });
    g.bench_function("keylock StripedLock lock_async, awaited in a task", |b| {
        b.iter_custom(|iters| {
            in_task(async {
                for _ in 0..iters {
                    drop(striped.lock_async(&black_box(next())).await);
                }
            })
        })
    });
    let tokio_m = tokio::sync::Mutex::new(());
    g.bench_function("tokio::sync::Mutex lock", |b| {
        b.iter(|| drop(ready(black_box(&tokio_m).lock())))
    });
    let al = async_lock::Mutex::new(());
    g.bench_function("async_lock::Mutex lock", |b| {
        b.iter(|| drop(ready(black_box(&al).lock())))
    });
    g.finish();
}

fn config() -> Criterion<ThreadTime> {
    let quick = std::env::var_os("KEYLOCK_BENCH_QUICK").is_some();
    let (warm, measure, samples) = if quick {
        (200, 500, 20)
    } else {
        (500, 1500, 40)
    };
    Criterion::default()
        .with_measurement(ThreadTime)
        .warm_up_time(std::time::Duration::from_millis(warm))
        .measurement_time(std::time::Duration::from_millis(measure))
        .sample_size(samples)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = u64_keys, byte_keys, async_keys
}
criterion_main!(benches);

//! One uncontended operation in a loop, for `bench/semaphore.py`: `semaphore_ops OP N` runs OP
//! N times over 1,024 keys and prints the thread's CPU nanoseconds per operation. The script
//! runs it under callgrind at two lengths (their difference is the instructions per operation)
//! and by CPU time, interleaving the alternatives.
//!
//! OP: `pool` (KeyPool lock + unlock), `sem` (KeyedSemaphore acquire 1 + release), `sem2`
//! (weight 2), `sem_async` / `pool_async` (the futures, polled once), `tokio_map` (a map of
//! `tokio::sync::Semaphore`s, the usual way: get or insert the key's semaphore, acquire one
//! permit, drop it; entries are never removed).

use std::collections::HashMap;
use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;

use keylock_core::{KeyPool, KeyedSemaphore};

const KEYS: u64 = 1024;

#[path = "common/cpu_ns.rs"]
mod cpu_ns;
use cpu_ns::cpu_ns;

fn ready<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(o) => o,
        std::task::Poll::Pending => panic!("uncontended futures are ready at once"),
    }
}

#[inline(never)]
fn pool(p: &KeyPool<u64>, k: u64) {
    drop(p.lock(&black_box(k)))
}
#[inline(never)]
fn pool_async(p: &KeyPool<u64>, k: u64) {
    drop(ready(p.lock_async(&black_box(k))))
}
#[inline(never)]
fn sem(s: &KeyedSemaphore<u64>, k: u64, w: u32) {
    drop(s.acquire(&black_box(k), w).unwrap())
}
#[inline(never)]
fn sem_async(s: &KeyedSemaphore<u64>, k: u64) {
    drop(ready(s.acquire_async(&black_box(k), 1)).unwrap())
}
type TokioMap = parking_lot::Mutex<HashMap<u64, Arc<tokio::sync::Semaphore>>>;
#[inline(never)]
fn tokio_map(m: &TokioMap, k: u64) {
    let s = m
        .lock()
        .entry(black_box(k))
        .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(4)))
        .clone();
    drop(ready(s.acquire_owned()).unwrap())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let op = args.get(1).map(String::as_str).unwrap_or("sem");
    let n: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let p: KeyPool<u64> = KeyPool::new();
    let s: KeyedSemaphore<u64> = KeyedSemaphore::new(4).unwrap();
    let m = TokioMap::default();
    // Warm up: every key's slot and map entry exists before the loop.
    for k in 0..KEYS {
        pool(&p, k);
        sem(&s, k, 1);
        tokio_map(&m, k);
    }
    // The operation is chosen once, outside the timed loop.
    let run: &dyn Fn(u64) = match op {
        "pool" => &|k| pool(&p, k),
        "pool_async" => &|k| pool_async(&p, k),
        "sem" => &|k| sem(&s, k, 1),
        "sem2" => &|k| sem(&s, k, 2),
        "sem_async" => &|k| sem_async(&s, k),
        "tokio_map" => &|k| tokio_map(&m, k),
        other => panic!("unknown op {other}"),
    };
    let start = cpu_ns();
    for i in 0..n {
        run(i & (KEYS - 1));
    }
    println!("{:.2}", (cpu_ns() - start) / n as f64);
}

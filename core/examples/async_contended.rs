//! Contended async locking on one thread, for `bench/async_contended.py`: `async_contended WHICH
//! WORKLOAD OPS` runs 1,000 tokio tasks on a current-thread runtime, each taking OPS random keys
//! out of 1,000 (so about half the acquires find their key held and wait), and prints the
//! thread's CPU nanoseconds per operation. The script runs it under callgrind at two lengths
//! (their difference is the instructions per operation, start-up cancelled out) and by CPU time,
//! interleaving the alternatives. One thread makes the figures repeatable: the multi-thread
//! runs of `benches/throughput.rs` move by 2x between runs on a small machine.
//!
//! WHICH: `keylock` (`KeyPool::lock_async_owned`), `tokio_map` (a `Mutex<HashMap>` of
//! `Arc<tokio::sync::Mutex>`, the usual way: get or insert the key's mutex, `lock_owned`), or
//! `no_lock` (the same tasks and keys without a lock: the runtime's and the loop's own cost).
//! WORKLOAD: `held` (each task yields to the runtime while it holds the key, as work across an
//! `.await` would) or `quick` (no await while held).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use keylock_core::{DefaultHashBuilder, KeyPool};

const TASKS: u64 = 1000;
const KEYS: u64 = 1000;

#[path = "common/cpu_ns.rs"]
mod cpu_ns;
use cpu_ns::cpu_ns;

/// Task `t`'s next key (xorshift), the same sequence for both alternatives.
fn next_key(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng % KEYS
}

fn seed(t: u64) -> u64 {
    (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

async fn keylock(ops: usize, held: bool) {
    // Fixed hash seeds, so that the instruction counts repeat from run to run (with random
    // ones the keys' index cells, and so the probes, differ).
    let pool = Arc::new(KeyPool::<u64>::with_hasher(DefaultHashBuilder::with_seeds(
        1, 2, 3, 4,
    )));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                let mut rng = seed(t);
                for _ in 0..ops {
                    let _guard = pool.lock_async_owned(&next_key(&mut rng)).await;
                    if held {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task panicked");
    }
}

/// The same tasks and keys with no lock: what the runtime and the loop cost by themselves.
async fn no_lock(ops: usize, held: bool) {
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            tokio::spawn(async move {
                let mut rng = seed(t);
                for _ in 0..ops {
                    std::hint::black_box(next_key(&mut rng));
                    if held {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task panicked");
    }
}

type TokioMap = Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>;

async fn tokio_map(ops: usize, held: bool) {
    let map: Arc<TokioMap> = Arc::default();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let map = Arc::clone(&map);
            tokio::spawn(async move {
                let mut rng = seed(t);
                for _ in 0..ops {
                    let key = next_key(&mut rng);
                    let mutex = Arc::clone(map.lock().unwrap().entry(key).or_default());
                    let _guard = mutex.lock_owned().await;
                    if held {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task panicked");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().expect("WHICH: keylock or tokio_map");
    let held = match args.next().as_deref() {
        Some("held") => true,
        Some("quick") => false,
        other => panic!("WORKLOAD must be held or quick, not {other:?}"),
    };
    let ops: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .expect("OPS per task");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let start = cpu_ns();
    match which.as_str() {
        "keylock" => rt.block_on(keylock(ops, held)),
        "tokio_map" => rt.block_on(tokio_map(ops, held)),
        "no_lock" => rt.block_on(no_lock(ops, held)),
        other => panic!("unknown WHICH {other}"),
    }
    println!("{}", (cpu_ns() - start) / (TASKS as f64 * ops as f64));
}

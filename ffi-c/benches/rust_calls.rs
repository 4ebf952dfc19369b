//! Rust side of the keylock C benchmark (driven by `ffi-c/bench/run.py`, `make bench-c`): the
//! same lock+unlock loops as `ffi-c/bench/bench.c`, over the same 1024 keys of 16 bytes, calling
//! keylock-core directly instead of through the C ABI.
//!
//! - `rust_pool` / `rust_striped`: `lock(key).leak()` then `unlock(key)`, the calls each C export
//!   makes, so the C figure divided by this one is the cost of the FFI boundary.
//! - `rust_pool_guard` / `rust_striped_guard`: `lock(key)` and dropping the guard, what a Rust
//!   program writes (for reference: a guard unlocks without looking the key up again).
//!
//! Usage: `rust_calls [ITERS] [ROUNDS]` (arguments starting with `--`, such as cargo's
//! `--bench`, are ignored). Prints `name ns_per_op` lines: the median of ROUNDS rounds.

use std::hint::black_box;
use std::process::exit;
use std::time::Instant;

use keylock_core::{KeyPool, StripedLock};

const NKEYS: usize = 1024;
const STRIPES: usize = 1024;

fn time_per_op(iters: usize, mut op: impl FnMut(&[u8]), keys: &[Vec<u8>]) -> f64 {
    let start = Instant::now();
    for i in 0..iters {
        op(black_box(&keys[i & (NKEYS - 1)]));
    }
    start.elapsed().as_nanos() as f64 / iters as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.parse().expect("ITERS and ROUNDS are numbers"))
        .collect();
    let iters = args.first().copied().unwrap_or(2_000_000).max(1);
    let rounds = args.get(1).copied().unwrap_or(5).max(1);

    let keys: Vec<Vec<u8>> = (0..NKEYS)
        .map(|i| format!("account:{i:08}").into_bytes())
        .collect();
    assert!(keys.iter().all(|k| k.len() == 16));
    let pool: KeyPool<Vec<u8>> = KeyPool::new();
    let striped = StripedLock::new(STRIPES).expect("1024 stripes is valid");

    let pool_explicit = |k: &[u8]| {
        pool.lock(k).leak();
        if pool.unlock(k).is_err() {
            exit(1);
        }
    };
    let pool_guard = |k: &[u8]| drop(pool.lock(k));
    let striped_explicit = |k: &[u8]| {
        striped.lock(k).leak();
        if striped.unlock(k).is_err() {
            exit(1);
        }
    };
    let striped_guard = |k: &[u8]| drop(striped.lock(k));

    // Each case is timed through its own monomorphic loop (no dynamic dispatch, as in C where
    // each loop calls the function directly). Warm up every path, then interleave the cases
    // round by round, as bench.c does.
    let names = [
        "rust_pool",
        "rust_pool_guard",
        "rust_striped",
        "rust_striped_guard",
    ];
    let round = |n: usize| {
        [
            time_per_op(n, pool_explicit, &keys),
            time_per_op(n, pool_guard, &keys),
            time_per_op(n, striped_explicit, &keys),
            time_per_op(n, striped_guard, &keys),
        ]
    };
    round(iters / 4 + 1);
    let mut results = vec![Vec::new(); names.len()];
    for _ in 0..rounds {
        for (i, ns) in round(iters).into_iter().enumerate() {
            results[i].push(ns);
        }
    }
    for (name, runs) in names.iter().zip(results) {
        println!("{name} {:.3}", median(runs));
    }
}

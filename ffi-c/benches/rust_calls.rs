//! Rust side of the keylock C benchmark (driven by `ffi-c/bench/run.py`, `make bench-c`): the
//! same lock+release loops as `ffi-c/bench/bench.c`, over the same 1024 keys of 16 bytes,
//! calling keylock-core directly instead of through the C ABI.
//!
//! - `rust_pool` / `rust_striped`: `lock(key)` then `guard.release()` (which reports a stale
//!   release) on the concrete type, the calls the C exports `_lock` and `_release` make for an
//!   in-process object, so the C figure divided by this one is the cost of the FFI boundary.
//! - `rust_pool_trait` / `rust_striped_trait`: `acquire(key)` and `release(acquisition)` through
//!   the `Arc<dyn KeyedLock>` that `open_with` gives (the path of every other C call, and of
//!   every scope that is not in-process), for reference.
//! - `rust_pool_guard` / `rust_striped_guard`: `lock(key)` and dropping the guard, what a Rust
//!   program writes (for reference).
//!
//! Usage: `rust_calls [ITERS] [ROUNDS]` (arguments starting with `--`, such as cargo's
//! `--bench`, are ignored). Prints `name ns_per_op` (wall time) and `name:cpu ns_per_op` (the
//! thread's CPU time) lines: the medians of ROUNDS rounds.
//! `rust_calls --only NAME ITERS` runs one case ITERS times and prints nothing (for callgrind).

use std::hint::black_box;
use std::process::exit;
use std::sync::Arc;
use std::time::Instant;

use keylock_core::{KeyPool, KeyedLock, LockKey, LockOptions, OpenOptions, StripedLock};

const NKEYS: usize = 1024;
const STRIPES: usize = 1024;

/// The calling thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`, as bench.c reads
/// it): the time a busy machine kept the thread waiting for a core is left out.
fn thread_cpu_ns() -> f64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, out: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3; // Linux
    let mut t = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec (two C longs, i64 on the 64-bit Linux targets
    // this benchmark runs on) to the pointer it is given.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// Wall and thread CPU nanoseconds per op of `iters` calls of `op`.
fn time_per_op(iters: usize, mut op: impl FnMut(&[u8]), keys: &[Vec<u8>]) -> (f64, f64) {
    let start = Instant::now();
    let cpu = thread_cpu_ns();
    for i in 0..iters {
        op(black_box(&keys[i & (NKEYS - 1)]));
    }
    let cpu = thread_cpu_ns() - cpu;
    let wall = start.elapsed().as_nanos() as f64;
    (wall / iters as f64, cpu / iters as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `acquire` + `release` through the trait, as the C exports call it.
fn through_trait(locks: &Arc<dyn KeyedLock>) -> impl FnMut(&[u8]) + '_ {
    let opts = LockOptions::new();
    move |k: &[u8]| {
        let Ok(acq) = locks.acquire(LockKey::new(k), &opts) else {
            exit(1)
        };
        if locks.release(acq).is_err() {
            exit(1);
        }
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a == "--only" || !a.starts_with("--"))
        .collect();
    let only = match args.iter().position(|a| a == "--only") {
        Some(i) if i + 1 < args.len() => {
            let name = args.remove(i + 1);
            args.remove(i);
            Some(name)
        }
        Some(_) => {
            eprintln!("usage: rust_calls [--only NAME] [ITERS] [ROUNDS]");
            exit(2);
        }
        None => None,
    };
    let args: Vec<usize> = args
        .iter()
        .map(|a| a.parse().expect("ITERS and ROUNDS are numbers"))
        .collect();
    let iters = args.first().copied().unwrap_or(2_000_000).max(1);
    let rounds = args.get(1).copied().unwrap_or(5).max(1);

    let keys: Vec<Vec<u8>> = (0..NKEYS)
        .map(|i| format!("account:{i:08}").into_bytes())
        .collect();
    assert!(keys.iter().all(|k| k.len() == 16));
    let mut striped_opts = OpenOptions::default();
    striped_opts.stripes = Some(STRIPES);
    let dyn_pool = keylock_core::open("local:").expect("a local pool");
    let dyn_striped = keylock_core::open_with("local:", &striped_opts).expect("a striped lock");
    let pool: KeyPool<Vec<u8>> = KeyPool::new();
    let striped = StripedLock::new(STRIPES).expect("1024 stripes is valid");

    let mut pool_acq = |k: &[u8]| {
        if pool.lock(k).release().is_err() {
            exit(1);
        }
    };
    let mut pool_trait = through_trait(&dyn_pool);
    let mut pool_guard = |k: &[u8]| drop(pool.lock(k));
    let mut striped_acq = |k: &[u8]| {
        if striped.lock(k).release().is_err() {
            exit(1);
        }
    };
    let mut striped_trait = through_trait(&dyn_striped);
    let mut striped_guard = |k: &[u8]| drop(striped.lock(k));

    let names = [
        "rust_pool",
        "rust_pool_trait",
        "rust_pool_guard",
        "rust_striped",
        "rust_striped_trait",
        "rust_striped_guard",
    ];
    if let Some(name) = only {
        // One case, untimed, for an instruction count under callgrind.
        let n = iters;
        match name.as_str() {
            "rust_pool" => drop(time_per_op(n, &mut pool_acq, &keys)),
            "rust_pool_trait" => drop(time_per_op(n, &mut pool_trait, &keys)),
            "rust_pool_guard" => drop(time_per_op(n, &mut pool_guard, &keys)),
            "rust_striped" => drop(time_per_op(n, &mut striped_acq, &keys)),
            "rust_striped_trait" => drop(time_per_op(n, &mut striped_trait, &keys)),
            "rust_striped_guard" => drop(time_per_op(n, &mut striped_guard, &keys)),
            "none" => {}
            _ => {
                eprintln!("rust_calls: unknown case {name}");
                exit(2);
            }
        }
        return;
    }

    // Each case is timed through its own monomorphic loop (no dynamic dispatch beyond what the
    // C exports do). Warm up every path, then interleave the cases round by round, as bench.c
    // does.
    let mut round = |n: usize| {
        [
            time_per_op(n, &mut pool_acq, &keys),
            time_per_op(n, &mut pool_trait, &keys),
            time_per_op(n, &mut pool_guard, &keys),
            time_per_op(n, &mut striped_acq, &keys),
            time_per_op(n, &mut striped_trait, &keys),
            time_per_op(n, &mut striped_guard, &keys),
        ]
    };
    round(iters / 4 + 1);
    let mut wall = vec![Vec::new(); names.len()];
    let mut cpu = vec![Vec::new(); names.len()];
    for _ in 0..rounds {
        for (i, (w, c)) in round(iters).into_iter().enumerate() {
            wall[i].push(w);
            cpu[i].push(c);
        }
    }
    for ((name, wall), cpu) in names.iter().zip(wall).zip(cpu) {
        println!("{name} {:.3}", median(wall));
        println!("{name}:cpu {:.3}", median(cpu));
    }
}

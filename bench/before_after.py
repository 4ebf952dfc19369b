#!/usr/bin/env python3
"""Before and after: the same uncontended lock+unlock loops built against an earlier keylock
core (a git revision, default the last one before fences and modes) and against this tree,
measured in one run.

    before_after.py [--rev REV] [--out OUT.json] [--quick]

Both builds compile one small program (below) whose calls exist in both APIs. Each figure is
measured two ways, interleaved between the builds:
- instructions per operation under valgrind's callgrind (the difference of two loop lengths,
  so start-up is cancelled out): exact and repeatable whatever else the machine runs;
- nanoseconds per operation by the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), medians of
  several runs: time the thread spends preempted is not counted, but a busy machine still
  slows it through shared caches, so the load average is recorded with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import report  # noqa: E402

# The revision before the ownership/modes/speed rework (what main held when it began).
DEFAULT_REV = "2418144"

# The thread's CPU time in ns, for the timed runs of the loop programs (here and in metrics.py).
CPU_NS = r"""
#[repr(C)]
struct Ts { s: i64, ns: i64 }
unsafe extern "C" { fn clock_gettime(c: i32, t: *mut Ts) -> i32; }
fn cpu_ns() -> f64 {
    let mut t = Ts { s: 0, ns: 0 };
    // SAFETY: a valid pointer to a timespec-shaped struct; clock 3 is the thread's CPU time.
    unsafe { clock_gettime(3, &mut t) };
    t.s as f64 * 1e9 + t.ns as f64
}
"""

# Polls a future once with a no-op waker (both loop programs below).
READY = r"""
fn ready<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(o) => o,
        std::task::Poll::Pending => panic!("uncontended futures are ready at once"),
    }
}
"""

PROGRAM = r"""
use std::hint::black_box;
use keylock_core::{DefaultHashBuilder, KeyPool, StripedLock};

CPU_NS
#[inline(never)] fn pool_u64(p: &KeyPool<u64>, k: u64) { drop(p.lock(&black_box(k))) }
#[inline(never)] fn pool_str(p: &KeyPool<String>, k: &str) { drop(p.lock(black_box(k))) }
#[inline(never)] fn pool_async(p: &KeyPool<u64>, k: u64) {
    drop(ready(p.lock_async(&black_box(k))))
}
#[inline(never)] fn striped_u64(s: &StripedLock, k: u64) { drop(s.lock(&black_box(k))) }
#[inline(never)] fn striped_str(s: &StripedLock, k: &str) { drop(s.lock(black_box(k))) }
#[inline(never)] fn striped_async(s: &StripedLock, k: u64) {
    drop(ready(s.lock_async(&black_box(k))))
}
#[inline(never)] fn floor(m: &parking_lot::Mutex<()>, _k: u64) { drop(black_box(m).lock()) }

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_default();
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let timed = args.next().is_some();
    let keys: Vec<String> = (0..1024).map(|i| format!("user:{i:010}_")).collect();
    // Fixed hash seeds: with random ones, each run's keys land in other index cells, and the
    // probes' lengths (so the instruction counts) moved by a few between runs.
    let pool: KeyPool<u64> = KeyPool::with_hasher(DefaultHashBuilder::with_seeds(1, 2, 3, 4));
    let pool_s: KeyPool<String> = KeyPool::with_hasher(DefaultHashBuilder::with_seeds(1, 2, 3, 4));
    let striped = StripedLock::new(1024).unwrap();
    let m = parking_lot::Mutex::new(());
    let one = |k: u64| match which.as_str() {
        "pool_u64" => pool_u64(&pool, k),
        "pool_str16" => pool_str(&pool_s, &keys[k as usize]),
        "pool_async" => pool_async(&pool, k),
        "striped_u64" => striped_u64(&striped, k),
        "striped_str16" => striped_str(&striped, &keys[k as usize]),
        "striped_async" => striped_async(&striped, k),
        "floor" => floor(&m, k),
        other => panic!("unknown loop {other}"),
    };
    // Warm up: every key once, so the pools have their slots.
    for k in 0..1024u64 { one(k); }
    let start = cpu_ns();
    for i in 0..n as u64 { one(i & 1023); }
    if timed {
        println!("{}", (cpu_ns() - start) / n as f64);
    }
}
"""
PROGRAM = PROGRAM.replace("CPU_NS\n", CPU_NS + READY)

# The same locks taken in a task: one future runs the whole batch, each lock future made in
# place and awaited there (as the criterion suite's "in a task" rows). A program of its own, so
# that these loops' calls leave the inlining of the loops above as it was.
TASK_PROGRAM = r"""
use std::hint::black_box;
use keylock_core::{DefaultHashBuilder, KeyPool, StripedLock};

CPU_NS
#[inline(never)] fn pool_sync_task(p: &KeyPool<u64>, n: u64) {
    ready(async { for i in 0..n { drop(p.lock(&black_box(i & 1023))) } })
}
#[inline(never)] fn pool_async_task(p: &KeyPool<u64>, n: u64) {
    ready(async { for i in 0..n { drop(p.lock_async(&black_box(i & 1023)).await) } })
}
#[inline(never)] fn striped_sync_task(s: &StripedLock, n: u64) {
    ready(async { for i in 0..n { drop(s.lock(&black_box(i & 1023))) } })
}
#[inline(never)] fn striped_async_task(s: &StripedLock, n: u64) {
    ready(async { for i in 0..n { drop(s.lock_async(&black_box(i & 1023)).await) } })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let timed = args.next().is_some();
    // Fixed hash seeds, as in the other program.
    let pool: KeyPool<u64> = KeyPool::with_hasher(DefaultHashBuilder::with_seeds(1, 2, 3, 4));
    let striped = StripedLock::new(1024).unwrap();
    let task: fn(&KeyPool<u64>, &StripedLock, u64) = match which.as_str() {
        "pool_sync_task" => |p, _, n| pool_sync_task(p, n),
        "pool_async_task" => |p, _, n| pool_async_task(p, n),
        "striped_sync_task" => |_, s, n| striped_sync_task(s, n),
        "striped_async_task" => |_, s, n| striped_async_task(s, n),
        other => panic!("unknown loop {other}"),
    };
    // Warm up: every key once, so the pool has its slots.
    task(&pool, &striped, 1024);
    let start = cpu_ns();
    task(&pool, &striped, n);
    if timed {
        println!("{}", (cpu_ns() - start) / n as f64);
    }
}
""".replace("CPU_NS\n", CPU_NS + READY)

LOOPS = [
    "floor",
    "striped_u64",
    "striped_str16",
    "striped_async",
    "pool_u64",
    "pool_str16",
    "pool_async",
]
TASK_LOOPS = ["pool_sync_task", "pool_async_task", "striped_sync_task", "striped_async_task"]


def build(core_dir: str, work: str, name: str) -> str:
    """Builds the program against the core in `core_dir`; returns the binary's path."""
    proj = os.path.join(work, name)
    os.makedirs(os.path.join(proj, "src"), exist_ok=True)
    with open(os.path.join(proj, "Cargo.toml"), "w") as f:
        f.write(f"""[package]
name = "kl-{name}"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
keylock-core = {{ path = "{core_dir}" }}
parking_lot = "0.12"

[workspace]

[profile.release]
debug = 1
""")
    with open(os.path.join(proj, "src", "main.rs"), "w") as f:
        f.write(PROGRAM)
    os.makedirs(os.path.join(proj, "src", "bin"), exist_ok=True)
    with open(os.path.join(proj, "src", "bin", "task.rs"), "w") as f:
        f.write(TASK_PROGRAM)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=proj, check=True)
    return os.path.join(proj, "target", "release", f"kl-{name}")


def binary_for(binary: str, loop: str) -> str:
    """The program that runs `loop`: `binary`, or its task program beside it."""
    return os.path.join(os.path.dirname(binary), "task") if loop in TASK_LOOPS else binary


def instructions(binary: str, loop: str, n: int) -> int:
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", binary, loop, str(n)],
        capture_output=True,
        text=True,
        check=True,
    )
    for line in out.stderr.splitlines():
        if "refs:" in line:
            return int(line.split("refs:")[1].strip().replace(",", ""))
    raise RuntimeError(f"no instruction count from callgrind: {out.stderr[-500:]}")


def per_op_instructions(binary: str, loop: str) -> float:
    a, b = 100_000, 200_000
    return (instructions(binary, loop, b) - instructions(binary, loop, a)) / (b - a)


def cpu_time(binary: str, loop: str) -> float:
    out = subprocess.run(
        [binary, loop, "2000000", "timed"], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default=DEFAULT_REV)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "rust-before-after.json"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    runs = 3 if args.quick else 9
    work = tempfile.mkdtemp(prefix="keylock-before-after-")
    try:
        old_tree = os.path.join(work, "old")
        subprocess.run(
            ["git", "-C", ROOT, "worktree", "add", "--detach", "--quiet", old_tree, args.rev],
            check=True,
        )
        try:
            before = build(os.path.join(old_tree, "core"), work, "before")
            after = build(os.path.join(ROOT, "core"), work, "after")
            load = os.getloadavg()
            figures = []
            for loop in LOOPS + TASK_LOOPS:
                builds = (("before", binary_for(before, loop)), ("after", binary_for(after, loop)))
                ins = {k: per_op_instructions(b, loop) for k, b in builds}
                times: dict[str, list[float]] = {"before": [], "after": []}
                for _ in range(runs):
                    for k, b in builds:
                        times[k].append(cpu_time(b, loop))
                for k in ("before", "after"):
                    common = {
                        "group": f"before/after: {loop}",
                        "impl": f"keylock {k} ({args.rev})"
                        if k == "before"
                        else "keylock after (this tree)",
                        "loop": loop,
                    }
                    base = f"{loop}: before" if k == "after" else None
                    figures.append(
                        {
                            "name": f"{loop}: {k}",
                            "unit": "ns",
                            "runs": times[k],
                            "median": statistics.median(times[k]),
                            "min": min(times[k]),
                            "max": max(times[k]),
                            "baseline": base,
                            "target": None,
                            "met": None,
                            **common,
                        }
                    )
                    figures.append(
                        {
                            "name": f"{loop}: {k}, instructions",
                            "unit": "instructions",
                            "runs": [ins[k]],
                            "median": ins[k],
                            "min": ins[k],
                            "max": ins[k],
                            "baseline": f"{loop}: before, instructions" if k == "after" else None,
                            "target": None,
                            "met": None,
                            **common,
                        }
                    )
                print(
                    f"{loop:14} before {statistics.median(times['before']):6.2f} ns "
                    f"{ins['before']:6.0f} instr   "
                    f"after {statistics.median(times['after']):6.2f} ns "
                    f"{ins['after']:6.0f} instr"
                )
            by = {f["name"]: f["median"] for f in figures}
            for f in figures:
                f["ratio"] = (
                    by[f["baseline"]] and f["median"] / by[f["baseline"]] if f["baseline"] else None
                )
            doc = {
                "suite": "keylock-core: before and after this round's rework (uncontended)",
                "measurement": "instructions by callgrind; ns by the thread's CPU time, medians "
                f"of {runs} interleaved runs; load average at the start "
                f"{load[0]:.2f}",
                "machine": report.machine(),
                "date": report.datetime.datetime.now(report.datetime.timezone.utc).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                ),
                "results": figures,
            }
            os.makedirs(os.path.dirname(args.out), exist_ok=True)
            with open(args.out, "w") as f:
                json.dump(doc, f, indent=2)
            print(f"wrote {args.out}")
        finally:
            subprocess.run(
                ["git", "-C", ROOT, "worktree", "remove", "--force", old_tree], check=False
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What metrics cost: the uncontended acquire+release, built against the tree before metrics
(a git revision) and against this tree with metrics off and on, measured in one run.

    metrics.py [--rev REV] [--out OUT.json] [--quick]

Loops (one key, uncontended, 1,024 keys in turn):
- `trait_pool`, `trait_striped`: through the `KeyedLock` trait, as every front end calls it
  (`open_with("local:")`, acquire then release of the `Acquisition`);
- `native_pool`, `native_striped`: the Rust guard API (`pool.lock(&k)`), which metrics never
  touch;
- `metered_pool`, `metered_striped` (this tree only): the trait loops with metrics on.

Each figure is measured two ways, interleaved between the builds: instructions per operation
under valgrind's callgrind (the difference of two loop lengths, so start-up cancels out; exact
whatever else the machine runs), and nanoseconds per operation by the thread's CPU time,
medians of several runs.
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
from before_after import CPU_NS, cpu_time, per_op_instructions  # noqa: E402

# The last revision before metrics.
DEFAULT_REV = "3261903"

PROGRAM = r"""
use std::hint::black_box;
use keylock_core::{KeyPool, KeyedLock, LockKey, LockOptions, OpenOptions, StripedLock, open_with};

CPU_NS
#[inline(never)]
fn through_trait(l: &dyn KeyedLock, k: &[u8]) {
    let acq = l.acquire(LockKey::new(black_box(k)), &LockOptions::new()).unwrap();
    l.release(acq).unwrap();
}
#[inline(never)] fn native_pool(p: &KeyPool<Vec<u8>>, k: &[u8]) { drop(p.lock(black_box(k))) }
#[inline(never)] fn native_striped(s: &StripedLock, k: &[u8]) { drop(s.lock(black_box(k))) }

fn opened(stripes: Option<usize>, metrics: bool) -> std::sync::Arc<dyn KeyedLock> {
    let mut o = OpenOptions::default();
    o.stripes = stripes;
    METRICS_ON
    open_with("local:", &o).unwrap()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_default();
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let timed = args.next().is_some();
    let keys: Vec<Vec<u8>> = (0..1024).map(|i| format!("user:{i:010}_").into_bytes()).collect();
    let trait_pool = opened(None, false);
    let trait_striped = opened(Some(1024), false);
    let metered_pool = opened(None, true);
    let metered_striped = opened(Some(1024), true);
    let pool: KeyPool<Vec<u8>> = KeyPool::new();
    let striped = StripedLock::new(1024).unwrap();
    let one = |k: usize| match which.as_str() {
        "trait_pool" => through_trait(&*trait_pool, &keys[k]),
        "trait_striped" => through_trait(&*trait_striped, &keys[k]),
        "metered_pool" => through_trait(&*metered_pool, &keys[k]),
        "metered_striped" => through_trait(&*metered_striped, &keys[k]),
        "native_pool" => native_pool(&pool, &keys[k]),
        "native_striped" => native_striped(&striped, &keys[k]),
        other => panic!("unknown loop {other}"),
    };
    for k in 0..1024 { one(k); }
    let start = cpu_ns();
    for i in 0..n { one(i & 1023); }
    if timed {
        println!("{}", (cpu_ns() - start) / n as f64);
    }
}
"""

LOOPS = [
    "native_pool",
    "native_striped",
    "trait_pool",
    "trait_striped",
    "metered_pool",
    "metered_striped",
]


def build(core_dir: str, work: str, name: str, has_metrics: bool) -> str:
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

[workspace]

[profile.release]
debug = 1
""")
    on = "o.metrics = metrics;" if has_metrics else "let _ = metrics;"
    with open(os.path.join(proj, "src", "main.rs"), "w") as f:
        f.write(PROGRAM.replace("METRICS_ON", on).replace("CPU_NS\n", CPU_NS))
    subprocess.run(
        ["cargo", "build", "--release", "--quiet"],
        cwd=proj,
        check=True,
        env={**os.environ, "CARGO_TARGET_DIR": os.path.join(proj, "target")},
    )
    return os.path.join(proj, "target", "release", f"kl-{name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default=DEFAULT_REV)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "rust-metrics.json"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    runs = 3 if args.quick else 9
    work = tempfile.mkdtemp(prefix="keylock-metrics-")
    old_tree = os.path.join(work, "old")
    subprocess.run(
        ["git", "-C", ROOT, "worktree", "add", "--detach", "--quiet", old_tree, args.rev],
        check=True,
    )
    try:
        builds = {
            "before": build(os.path.join(old_tree, "core"), work, "before", False),
            "after": build(os.path.join(ROOT, "core"), work, "after", True),
        }
        load = os.getloadavg()
        figures = []
        for loop in LOOPS:
            which = ["after"] if loop.startswith("metered") else ["before", "after"]
            ins = {k: per_op_instructions(builds[k], loop) for k in which}
            times: dict[str, list[float]] = {k: [] for k in which}
            for _ in range(runs):
                for k in which:
                    times[k].append(cpu_time(builds[k], loop))
            for k in which:
                impl = (
                    f"before metrics ({args.rev})"
                    if k == "before"
                    else "metrics on"
                    if loop.startswith("metered")
                    else "metrics off"
                )
                off = loop.replace("metered", "trait")
                base = (
                    "before metrics"
                    if k == "after" and "before" in which
                    else "metrics off"
                    if loop.startswith("metered")
                    else None
                )
                label = "before metrics" if k == "before" else impl
                common = {
                    "group": f"metrics: {off}",
                    "impl": impl,
                    "loop": loop,
                    "target": None,
                    "met": None,
                }
                figures.append(
                    {
                        "name": f"{off}: {label}",
                        "unit": "ns",
                        "runs": times[k],
                        "median": statistics.median(times[k]),
                        "min": min(times[k]),
                        "max": max(times[k]),
                        "baseline": base and f"{off}: {base}",
                        **common,
                    }
                )
                figures.append(
                    {
                        "name": f"{off}: {label}, instructions",
                        "unit": "instructions",
                        "runs": [ins[k]],
                        "median": ins[k],
                        "min": ins[k],
                        "max": ins[k],
                        "baseline": base and f"{off}: {base}, instructions",
                        **common,
                    }
                )
                print(
                    f"{loop:16} {label:15} {statistics.median(times[k]):7.2f} ns "
                    f"{ins[k]:7.1f} instructions",
                    flush=True,
                )
        by = {f["name"]: f["median"] for f in figures}
        for f in figures:
            f["ratio"] = f["median"] / by[f["baseline"]] if f["baseline"] else None
        doc = {
            "suite": "keylock-core: what metrics cost (uncontended acquire+release)",
            "description": "One key at a time of 1,024, uncontended. native_*: the Rust guard "
            "API; trait_*: through the KeyedLock trait as the front ends call "
            "it; metered_*: the trait with metrics on (OpenOptions::metrics). "
            "'before' is the tree before metrics; 'metrics off' must match it.",
            "measurement": "instructions by callgrind (difference of 200,000 and 100,000 "
            f"iterations); ns by the thread's CPU time, medians of {runs} "
            f"interleaved runs; load average at the start {load[0]:.2f}",
            "machine": report.machine(),
            "date": report.datetime.datetime.now(report.datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
            "results": figures,
        }
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"wrote {args.out}")
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", old_tree], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

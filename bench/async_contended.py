#!/usr/bin/env python3
"""Contended async locking on one thread: 1,000 tokio tasks on 1,000 keys, keylock's KeyPool
against a map of tokio mutexes (`core/examples/async_contended.rs` runs the tasks), measured in
one run.

    async_contended.py [--out OUT.json] [--runs N]

Each figure is measured two ways, interleaved between the alternatives:
- instructions per operation under valgrind's callgrind: the difference of two lengths, so
  that start-up cancels out; exact whatever else the machine runs;
- nanoseconds per operation by the thread's CPU time, the median of several runs (the load
  average is recorded with them).

A current-thread runtime keeps both repeatable. The multi-thread figures of the same workload
(benches/throughput.rs, rust-async-contended.json) move by up to 2x between runs on a 2-core
machine, more than the difference they measure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import report  # noqa: E402
from semaphore import build, instructions  # noqa: E402

IMPLS = {
    "keylock": "keylock KeyPool lock_async_owned",
    "tokio_map": "Mutex<HashMap<K, Arc<tokio::sync::Mutex>>>",
    # The same tasks and keys without a lock: what the runtime and the loop cost by themselves
    # (a reference line, so that each lock's own cost is its figure less this one).
    "no_lock": "no lock (the runtime and the loop alone)",
}
WORKLOADS = {"held": "held across an await", "quick": "no await while held"}
# Operations per task at the two lengths callgrind runs (1,000 tasks each), and for the timed runs.
SHORT, LONG, TIMED = 50, 150, 400


def per_op_instructions(exe: str, which: str, workload: str) -> float:
    short = instructions(exe, which, workload, SHORT)
    long = instructions(exe, which, workload, LONG)
    return round((long - short) / ((LONG - SHORT) * 1000), 1)


def cpu_time(exe: str, which: str, workload: str) -> float:
    out = subprocess.run(
        [exe, which, workload, str(TIMED)], check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--out", default=os.path.join(ROOT, "bench", "results", "rust-async-contended-1thread.json")
    )
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    exe = build("async_contended")
    load_before = os.getloadavg()
    results = []
    for workload, wl in WORKLOADS.items():
        instr = {which: per_op_instructions(exe, which, workload) for which in IMPLS}
        times: dict[str, list[float]] = {which: [] for which in IMPLS}
        for _ in range(args.runs):
            for which in IMPLS:
                times[which].append(cpu_time(exe, which, workload))
        group = f"async 1000 tasks on 1000 keys, one thread, {wl}"
        base = "tokio_map"
        for which, name in IMPLS.items():
            v = times[which]
            ours = which == "keylock"
            results.append(
                {
                    "name": f"{group}: {name}",
                    "group": group,
                    "impl": name,
                    "workload": wl,
                    "unit": "ns/op",
                    "median": statistics.median(v),
                    "min": min(v),
                    "max": max(v),
                    "runs": v,
                    "baseline": f"{group}: {IMPLS[base]}" if ours else None,
                    "ratio": statistics.median(v) / statistics.median(times[base])
                    if ours
                    else None,
                    "target": None,
                    "met": None,
                }
            )
            results.append(
                {
                    "name": f"{group}: {name}, instructions",
                    "group": group,
                    "impl": name,
                    "workload": wl,
                    "unit": "instructions/op",
                    "median": instr[which],
                    "min": instr[which],
                    "max": instr[which],
                    "runs": [instr[which]],
                    "baseline": f"{group}: {IMPLS[base]}, instructions" if ours else None,
                    "ratio": instr[which] / instr[base] if ours else None,
                    "target": None,
                    "met": None,
                }
            )
            print(
                f"{group}: {name:45} {statistics.median(v):8.1f} ns/op {instr[which]:8.1f} "
                "instructions/op"
            )
    doc = {
        "suite": "keylock-core: contended async on one thread (bench/async_contended.py)",
        "machine": report.machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "description": (
            "1,000 tokio tasks on a current-thread runtime, each taking random keys out of "
            "1,000; nanoseconds by the thread's CPU time (medians of the runs, alternatives "
            f"interleaved; {TIMED} operations per task) and callgrind instructions per operation "
            f"(the difference of {SHORT} and {LONG} operations per task) beside them. Load "
            f"average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after."
        ),
        "results": results,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

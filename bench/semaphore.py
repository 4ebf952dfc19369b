#!/usr/bin/env python3
"""The keyed semaphore's uncontended acquire + release against KeyPool's lock + unlock and a map
of tokio Semaphores, measured in one run (`core/examples/semaphore_ops.rs` does the loops).

    semaphore.py [--out OUT.json] [--runs N]

Each figure is measured two ways, interleaved between the alternatives:
- instructions per operation under valgrind's callgrind: the difference of two loop lengths, so
  that start-up cancels out; exact whatever else the machine runs;
- nanoseconds per operation by the thread's CPU time, the median of several runs (the load
  average is recorded with them).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import report  # noqa: E402

OPS = ["pool", "sem", "sem2", "tokio_map", "pool_async", "sem_async"]


def build(example: str = "semaphore_ops") -> str:
    """Builds the core's `example` (release); its binary's path (bench/async_contended.py uses
    it too)."""
    subprocess.run(
        [
            "cargo",
            "build",
            "--locked",
            "--release",
            "-q",
            "-p",
            "keylock-core",
            "--example",
            example,
        ],
        cwd=ROOT,
        check=True,
    )
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "examples", example)


def instructions(exe: str, *args: object) -> int:
    """The instructions callgrind counts in one run of `exe` with `args` (bench/async_contended.py
    uses it too)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe, *map(str, args)],
            check=True,
            capture_output=True,
        )
        with open(out) as f:
            for line in f:
                if line.startswith("summary:") or line.startswith("totals:"):
                    return int(line.split()[1])
    raise RuntimeError("no callgrind summary")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "rust-semaphore.json"))
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    exe = build()
    load_before = os.getloadavg()
    instr = {}
    for op in OPS:
        a, b = instructions(exe, op, 100_000), instructions(exe, op, 200_000)
        instr[op] = round((b - a) / 100_000, 1)
    times: dict[str, list[float]] = {op: [] for op in OPS}
    for _ in range(args.runs):
        for op in OPS:
            out = subprocess.run([exe, op, "2000000"], check=True, capture_output=True, text=True)
            times[op].append(float(out.stdout.strip()))
    names = {
        "pool": "keylock KeyPool lock+unlock",
        "sem": "keylock KeyedSemaphore acquire(1)+release",
        "sem2": "keylock KeyedSemaphore acquire(2)+release",
        "tokio_map": "Mutex<HashMap<K, Arc<tokio Semaphore>>> acquire_owned",
        "pool_async": "keylock KeyPool lock_async",
        "sem_async": "keylock KeyedSemaphore acquire_async(1)",
    }
    baselines = {"sem": "pool", "sem2": "pool", "tokio_map": "sem", "sem_async": "pool_async"}
    targets = {
        "sem": (
            "KeyedSemaphore uncontended acquire+release at most 1.2x KeyPool's lock+unlock",
            1.2,
            "le",
        ),
    }
    group = "semaphore uncontended, 1,024 u64 keys"
    results = []
    for op in OPS:
        v = times[op]
        med = statistics.median(v)
        base = baselines.get(op)
        ratio = med / statistics.median(times[base]) if base else None
        target = targets.get(op)
        results.append(
            {
                "name": f"{group}: {names[op]}",
                "group": group,
                "impl": names[op],
                "unit": "ns/op",
                "median": med,
                "min": min(v),
                "max": max(v),
                "runs": v,
                "instructions": instr[op],
                "instructions_ratio": round(instr[op] / instr[base], 3) if base else None,
                "baseline": f"{group}: {names[base]}" if base else None,
                "ratio": ratio,
                "target": target[0] if target else None,
                "met": (ratio <= target[1]) if target and ratio is not None else None,
            }
        )
    # The tokio map against the semaphore: the semaphore is the faster one when the ratio > 1.
    results.append(
        {
            "name": f"{group}: keylock KeyedSemaphore (vs tokio map)",
            "group": group,
            "impl": "keylock KeyedSemaphore (vs tokio map)",
            "unit": "ns/op",
            "median": statistics.median(times["sem"]),
            "min": min(times["sem"]),
            "max": max(times["sem"]),
            "runs": times["sem"],
            "baseline": f"{group}: {names['tokio_map']}",
            "ratio": statistics.median(times["sem"]) / statistics.median(times["tokio_map"]),
            "target": "KeyedSemaphore at least 2x faster than a map of tokio Semaphores",
            "met": statistics.median(times["tokio_map"]) / statistics.median(times["sem"]) >= 2.0,
        }
    )
    result = {
        "suite": "keylock-core: keyed semaphore, uncontended (bench/semaphore.py)",
        "machine": report.machine(),
        "date": datetime.date.today().isoformat(),
        "description": (
            "One thread, acquire+release over 1,024 u64 keys; nanoseconds by the thread's CPU "
            "time (medians of the runs, alternatives interleaved) and callgrind instructions per "
            "operation (the difference of two loop lengths) beside them. The tokio map gets or "
            "inserts the key's Arc<Semaphore> under a parking_lot mutex and awaits acquire_owned "
            f"(ready at once). Load average {load_before[0]:.2f} before, "
            f"{os.getloadavg()[0]:.2f} after."
        ),
        "results": results,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    for r in results:
        print(
            f"{r['impl']:60} {r['median']:8.2f} ns/op  {r.get('instructions') or '':>7} instr  "
            f"ratio {r['ratio'] if r['ratio'] is None else round(r['ratio'], 2)}"
        )


if __name__ == "__main__":
    main()

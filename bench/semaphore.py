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
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = ["pool", "sem", "sem2", "tokio_map", "pool_async", "sem_async"]


def build() -> str:
    subprocess.run(
        ["cargo", "build", "--locked", "--release", "-q", "-p", "keylock-core", "--example", "semaphore_ops"],
        cwd=ROOT,
        check=True,
    )
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "examples", "semaphore_ops")


def instructions(exe: str, op: str, n: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe, op, str(n)],
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
    med = {op: statistics.median(v) for op, v in times.items()}
    result = {
        "what": "uncontended acquire+release over 1,024 u64 keys, one thread",
        "instructions_per_op": instr,
        "cpu_ns_per_op_median": med,
        "runs": args.runs,
        "ratios": {
            "sem / pool (instructions)": round(instr["sem"] / instr["pool"], 2),
            "sem / pool (time)": round(med["sem"] / med["pool"], 2),
            "tokio_map / sem (time)": round(med["tokio_map"] / med["sem"], 2),
            "tokio_map / sem (instructions)": round(instr["tokio_map"] / instr["sem"], 2),
            "sem_async / pool_async (instructions)": round(instr["sem_async"] / instr["pool_async"], 2),
        },
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

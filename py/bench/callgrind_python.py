#!/usr/bin/env python3
"""Instruction counts per operation for the Python targets, under valgrind's callgrind.

The benchmark machine is shared and often loaded; timings then swing by 3x between runs while
instruction counts do not. This runs each workload of bench_python.py in its own interpreter
under callgrind at three sizes and takes the instructions per operation from the differences
(so start-up, imports and warm-up cancel out): two estimates per workload, from sizes 1-2 and
2-3, are the runs. Ratios are taken as bench_python.py takes them, on instructions instead of
nanoseconds: the dict pattern's instructions over KeyPool's (> 1: KeyPool does less work), and
for asyncio the instructions KeyPool adds over the bare loop over those asyncio.Lock adds.
Instructions are not time (an atomic instruction or a cache miss costs more than an add), so
these figures complement the timed ones, they do not replace them.

    python py/bench/callgrind_python.py [--out bench/results/python-callgrind.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent

# name -> (python expression run with `b` = bench_python and `n` = the size, sizes)
UN = "uncontended, 1,024 keys"
TH = "4 threads, 64 keys"
AIO = "asyncio, 100 tasks, 1,000 keys, sleep(0) inside"
WORKLOADS: dict[str, tuple[str, tuple[int, int, int]]] = {
    f"{UN}: threading.Lock (one lock for all keys)": (
        "b.uncontended_plain(n)",
        (5000, 15000, 25000),
    ),
    f"{UN}: dict of threading.Lock (setdefault)": ("b.uncontended_dict(n)", (5000, 15000, 25000)),
    f"{UN}: KeyPool": ("b.uncontended_keypool(n)", (5000, 15000, 25000)),
    f"{UN}: StripedLock(1024)": ("b.uncontended_striped(n)", (5000, 15000, 25000)),
    f"{TH}: dict of threading.Lock (setdefault)": ("b.threads_dict(n)", (2000, 6000, 10000)),
    f"{TH}: KeyPool": ("b.threads_keypool(n)", (2000, 6000, 10000)),
    f"{AIO}: no lock (the bare loop)": ("b.asyncio_loop('bare', n)", (20, 50, 80)),
    f"{AIO}: defaultdict(asyncio.Lock)": ("b.asyncio_loop('asyncio', n)", (20, 50, 80)),
    f"{AIO}: KeyPool": ("b.asyncio_loop('keylock', n)", (20, 50, 80)),
}
# Operations per unit of n: the threaded loops run n per thread, the asyncio ones n per task.
OPS_PER_N = {TH: 4, AIO: 100}


def instructions(expr: str, n: int) -> int:
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_python as b; n = {n}; {expr}"
    )
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        check=False,
    )
    m = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"callgrind run failed: {proc.stderr[-2000:]}")
    return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("bench/results/python-callgrind.json")
    )
    args = ap.parse_args()
    per_op: dict[str, list[float]] = {}
    for name, (expr, sizes) in WORKLOADS.items():
        counts = [instructions(expr, n) for n in sizes]
        ops = OPS_PER_N.get(name.split(": ")[0], 1)
        per_op[name] = [
            (counts[i + 1] - counts[i]) / ((sizes[i + 1] - sizes[i]) * ops) for i in range(2)
        ]
        print(f"  {name}: {per_op[name]}", file=sys.stderr, flush=True)

    def row(name: str, values: list[float], **kw: Any) -> dict[str, Any]:
        r = {
            "name": name,
            "unit": "instructions/op",
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "runs": values,
            "baseline": None,
            "ratio": None,
            "target": None,
            "met": None,
        }
        r.update(kw)
        return r

    results = []
    for name, values in per_op.items():
        base = {
            f"{UN}: KeyPool": f"{UN}: dict of threading.Lock (setdefault)",
            f"{UN}: StripedLock(1024)": f"{UN}: dict of threading.Lock (setdefault)",
            f"{TH}: KeyPool": f"{TH}: dict of threading.Lock (setdefault)",
        }.get(name)
        kw: dict[str, Any] = {}
        if base:
            ratio = statistics.median(per_op[base]) / statistics.median(values)
            kw = {"baseline": base, "ratio": ratio}
        results.append(row(name, values, **kw))
    bare, aio, kl = (
        per_op[f"{AIO}: {k}"]
        for k in ("no lock (the bare loop)", "defaultdict(asyncio.Lock)", "KeyPool")
    )
    added = [(k - b) / (a - b) for b, a, k in zip(bare, aio, kl, strict=True)]
    results.append(
        row(
            f"{AIO}: KeyPool's added instructions / asyncio.Lock's",
            added,
            unit="ratio",
            baseline=f"{AIO}: defaultdict(asyncio.Lock)",
            ratio=statistics.median(added),
        )
    )
    doc = {
        "suite": "python-callgrind",
        "description": (
            "instructions per operation under callgrind (deterministic on a loaded machine), "
            "from the differences between runs at three sizes; ratio: the dict pattern's "
            "instructions over keylock's, and for asyncio keylock's added instructions over "
            "asyncio.Lock's. A complement to python.json's timings, not a replacement"
        ),
        "machine": {
            "python": sys.version.split()[0],
            "valgrind": subprocess.run(
                ["valgrind", "--version"], capture_output=True, text=True
            ).stdout.strip(),
            "os": platform.platform(),
        },
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for r in results:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else ""
        print(f"{r['name']:<90} {r['median']:>10,.1f} {r['unit']:<16} {ratio}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

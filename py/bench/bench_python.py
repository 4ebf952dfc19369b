#!/usr/bin/env python3
"""Benchmarks of the keylock Python package against what Python programmers use today.

Measured side by side in one run (the issue's comparisons):

1. uncontended ``with pool.lock(k)`` against the dict pattern
   ``with locks.setdefault(k, threading.Lock()):`` and against one plain ``threading.Lock``;
2. 4 threads on 64 keys, KeyPool against the dict pattern (total throughput);
3. ``RwLock`` reads against ``readerwriterlock``'s ``RWLockFair`` (one thread, and 4 threads).

Also measured, for information: StripedLock uncontended, and how long a blocked ``acquire``
takes to raise after SIGINT (the issue asks for at most 100 ms).

Each figure is the median of several runs (min, max and every run are kept). ``ratio`` is how
many times faster keylock is than its baseline (baseline ns/op over keylock ns/op, or keylock
ops/s over baseline ops/s): above 1 keylock is faster. Loop overhead is included equally in
every figure. Results go to a JSON file (see --out) and a table on stdout.

    python py/bench/bench_python.py [--quick] [--out bench/results/python.json]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from readerwriterlock import rwlock as rwl

import keylock

KEYS = [f"user:{i}" for i in range(1024)]
MASK = len(KEYS) - 1
THREADS = 4
THREAD_KEYS = 64


# ---- single-thread loops (ns per `with`) ----


def uncontended_keypool(n: int) -> float:
    lock = keylock.KeyPool().lock
    keys = KEYS
    t0 = time.perf_counter_ns()
    for i in range(n):
        with lock(keys[i & MASK]):
            pass
    return (time.perf_counter_ns() - t0) / n


def uncontended_striped(n: int) -> float:
    lock = keylock.StripedLock(1024).lock
    keys = KEYS
    t0 = time.perf_counter_ns()
    for i in range(n):
        with lock(keys[i & MASK]):
            pass
    return (time.perf_counter_ns() - t0) / n


def uncontended_dict(n: int) -> float:
    locks: dict[str, threading.Lock] = {}
    setdefault = locks.setdefault
    new_lock = threading.Lock
    keys = KEYS
    t0 = time.perf_counter_ns()
    for i in range(n):
        with setdefault(keys[i & MASK], new_lock()):
            pass
    return (time.perf_counter_ns() - t0) / n


def uncontended_plain(n: int) -> float:
    lock = threading.Lock()
    keys = KEYS
    t0 = time.perf_counter_ns()
    for i in range(n):
        keys[i & MASK]  # same indexing work as the others
        with lock:
            pass
    return (time.perf_counter_ns() - t0) / n


def reads_keylock(n: int) -> float:
    read = keylock.RwLock().read
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with read():
            pass
    return (time.perf_counter_ns() - t0) / n


def reads_rwlockfair(n: int) -> float:
    read = rwl.RWLockFair().gen_rlock
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with read():
            pass
    return (time.perf_counter_ns() - t0) / n


# ---- threaded loops (total ops/s) ----


def threaded(body: Callable[[int, int], None], n_per_thread: int) -> float:
    """Run body(thread_index, n) in THREADS threads started together; return total ops/s."""
    start = threading.Barrier(THREADS + 1)

    def run(t: int) -> None:
        start.wait()
        body(t, n_per_thread)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    return THREADS * n_per_thread / (time.perf_counter() - t0)


def threads_keypool(n: int) -> float:
    lock = keylock.KeyPool().lock
    keys = KEYS[:THREAD_KEYS]

    def body(t: int, n: int) -> None:
        for i in range(n):
            with lock(keys[(i * 7 + t) & (THREAD_KEYS - 1)]):
                pass

    return threaded(body, n)


def threads_dict(n: int) -> float:
    locks: dict[str, threading.Lock] = {}
    setdefault = locks.setdefault
    new_lock = threading.Lock
    keys = KEYS[:THREAD_KEYS]

    def body(t: int, n: int) -> None:
        for i in range(n):
            with setdefault(keys[(i * 7 + t) & (THREAD_KEYS - 1)], new_lock()):
                pass

    return threaded(body, n)


def threads_reads_keylock(n: int) -> float:
    read = keylock.RwLock().read

    def body(t: int, n: int) -> None:
        for _ in range(n):
            with read():
                pass

    return threaded(body, n)


def threads_reads_rwlockfair(n: int) -> float:
    read = rwl.RWLockFair().gen_rlock

    def body(t: int, n: int) -> None:
        for _ in range(n):
            with read():
                pass

    return threaded(body, n)


# ---- signal latency ----

SIGNAL_SCRIPT = """
import os, signal, threading, time, keylock
pool = keylock.KeyPool()
pool.lock("k").acquire()
sent = [0.0]
def fire():
    time.sleep(0.1)
    sent[0] = time.perf_counter()
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=fire, daemon=True).start()
try:
    pool.lock("k").acquire()
except KeyboardInterrupt:
    print((time.perf_counter() - sent[0]) * 1e3)
"""


def signal_latency_ms(_: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", SIGNAL_SCRIPT], capture_output=True, text=True, timeout=60
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(f"signal script failed: {out.stderr}")
    return float(out.stdout.strip())


# ---- harness ----


def measure(fn: Callable[[int], float], n: int, runs: int) -> dict[str, Any]:
    fn(max(1, n // 10))  # warm up
    values = [fn(n) for _ in range(runs)]
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": values,
    }


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass

    def version(cmd: list[str]) -> str | None:
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip() or None
        except OSError:
            return None

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "keylock": keylock.__version__,
        "keylock_build": getattr(keylock._keylock, "_BUILD", "unknown"),
        "readerwriterlock": importlib.metadata.version("readerwriterlock"),
        "rustc": version(["rustc", "--version"]),
        "switch_interval_s": sys.getswitchinterval(),
        # Other work on the machine during the run (1, 5, 15 minute averages at the end).
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer and shorter runs")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results/python.json"))
    ap.add_argument(
        "--merge",
        type=pathlib.Path,
        help="add the keylock results of an earlier run with another build (its JSON) to this one",
    )
    args = ap.parse_args()
    runs = 3 if args.quick else 7
    n = 50_000 if args.quick else 300_000
    nt = 20_000 if args.quick else 100_000

    # (name, function, ops, unit, baseline name, target text, target ratio)
    plan: list[tuple[str, Callable[[int], float], int, str, str | None, str | None, float]] = [
        (
            "uncontended: threading.Lock (one lock for all keys)",
            uncontended_plain,
            n,
            "ns/op",
            None,
            None,
            0,
        ),
        (
            "uncontended: dict of threading.Lock (setdefault)",
            uncontended_dict,
            n,
            "ns/op",
            None,
            None,
            0,
        ),
        (
            "uncontended: KeyPool",
            uncontended_keypool,
            n,
            "ns/op",
            "uncontended: dict of threading.Lock (setdefault)",
            "KeyPool at least as fast as the dict pattern uncontended",
            1.0,
        ),
        (
            "uncontended: StripedLock(1024)",
            uncontended_striped,
            n,
            "ns/op",
            "uncontended: dict of threading.Lock (setdefault)",
            None,
            0,
        ),
        (
            "4 threads, 64 keys: dict of threading.Lock (setdefault)",
            threads_dict,
            nt,
            "ops/s",
            None,
            None,
            0,
        ),
        (
            "4 threads, 64 keys: KeyPool",
            threads_keypool,
            nt,
            "ops/s",
            "4 threads, 64 keys: dict of threading.Lock (setdefault)",
            "KeyPool at least 1.5x the dict pattern's throughput with 4 threads",
            1.5,
        ),
        (
            "reads, 1 thread: readerwriterlock RWLockFair",
            reads_rwlockfair,
            n // 2,
            "ns/op",
            None,
            None,
            0,
        ),
        (
            "reads, 1 thread: RwLock",
            reads_keylock,
            n // 2,
            "ns/op",
            "reads, 1 thread: readerwriterlock RWLockFair",
            "RwLock reads at least 3x RWLockFair",
            3.0,
        ),
        (
            "reads, 4 threads: readerwriterlock RWLockFair",
            threads_reads_rwlockfair,
            nt // 2,
            "ops/s",
            None,
            None,
            0,
        ),
        (
            "reads, 4 threads: RwLock",
            threads_reads_keylock,
            nt // 2,
            "ops/s",
            "reads, 4 threads: readerwriterlock RWLockFair",
            "RwLock reads at least 3x RWLockFair",
            3.0,
        ),
    ]
    results: list[dict[str, Any]] = []
    by_name: dict[str, dict[str, Any]] = {}
    for name, fn, ops, unit, baseline, target, need in plan:
        r = {"name": name, "unit": unit, **measure(fn, ops, runs)}
        ratio = None
        if baseline is not None:
            b = by_name[baseline]["median"]
            ratio = b / r["median"] if unit == "ns/op" else r["median"] / b
        r.update(
            baseline=baseline,
            ratio=ratio,
            target=target,
            met=None if target is None else bool(ratio is not None and ratio >= need),
        )
        results.append(r)
        by_name[name] = r
        print(f"  {name}: {r['median']:,.1f} {unit}", file=sys.stderr, flush=True)

    if hasattr(signal, "SIGINT") and sys.platform != "win32":
        r = {
            "name": "SIGINT to KeyboardInterrupt in a blocked acquire",
            "unit": "ms",
            **measure(signal_latency_ms, 1, runs),
        }
        r.update(
            baseline=None,
            ratio=None,
            target="interrupts a blocked acquire within 100 ms",
            met=r["max"] <= 100.0,
        )
        results.append(r)

    build = getattr(keylock._keylock, "_BUILD", "unknown")
    for r in results:
        r["build"] = build
    if args.merge:
        other = json.loads(args.merge.read_text())
        other_build = other["machine"]["keylock_build"]
        for r in other["results"]:
            if r["baseline"] is None and r["unit"] != "ms":
                continue  # the alternatives were measured again in this run
            r = {**r, "name": f"{r['name']} [{other_build} build]"}
            if r["target"]:
                r["target"] += f" (with the {other_build} build)"
            results.append(r)

    doc = {
        "suite": "python",
        "description": (
            "keylock's Python package against the dict-of-threading.Lock pattern, one "
            "threading.Lock, and readerwriterlock.RWLockFair; ratio = speedup of keylock over "
            "the baseline (>1: keylock faster); medians of "
            f"{runs} runs"
        ),
        "machine": machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")

    print(f"keylock build: {build}")
    width = max(len(r["name"]) for r in results)
    print(
        f"\n{'benchmark':<{width}}  {'median':>12}  {'min':>12}  {'max':>12}  unit    ratio  target"
    )
    for r in results:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else ""
        met = {True: "met", False: "MISSED", None: ""}[r["met"]]
        print(
            f"{r['name']:<{width}}  {r['median']:>12,.1f}  {r['min']:>12,.1f}  {r['max']:>12,.1f}"
            f"  {r['unit']:<6} {ratio:>6}  {met}"
        )
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

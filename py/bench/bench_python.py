#!/usr/bin/env python3
"""Benchmarks of the keylock Python package against what Python programmers use today.

Measured side by side in one run, the runs of the alternatives interleaved (run 1 of each, then
run 2 of each, ...), so that a change in the machine's load hits all of them alike:

1. uncontended ``with pool.lock(k)`` (1,024 keys) against the dict pattern
   ``with locks.setdefault(k, threading.Lock()):`` and one plain ``threading.Lock``
   (target: KeyPool at least 1.3x the dict pattern);
2. 4 threads on 64 keys, KeyPool against the dict pattern, total throughput (target 1.5x);
3. asyncio, 100 tasks on 1,000 keys, one ``await asyncio.sleep(0)`` inside each critical
   section: ``async with pool.lock(k)`` against ``async with locks[k]`` on a
   ``defaultdict(asyncio.Lock)`` and the same loop without a lock. The figure is the time
   keylock adds over the bare loop divided by the time asyncio.Lock adds, per run (target: at
   most 2/3);
4. per-key read-mostly throughput (issue 13), 1, 2 and 4 threads on 4 keys, 90% reads, a
   critical section that releases the GIL (``time.sleep(0)``, standing for I/O): KeyPool
   read/write handles against a KeyPool of exclusive locks, a naive dict of
   readerwriterlock ``RWLockFair`` and a naive dict of ``keylock.RwLock``;
5. ``RwLock`` reads against readerwriterlock's ``RWLockFair`` (1 and 4 threads), and how long a
   blocked ``acquire`` takes to raise after SIGINT.

Each figure is the median of the runs, with min, max and every run kept. ``ratio`` says how
many times faster keylock is than its baseline (> 1: keylock faster), except for the asyncio
figure, which is itself a ratio of added times (< 1: keylock adds less). Loop overhead is
included equally in every figure. The load average is recorded before and after the run
(the machine is shared: compare figures taken at similar load). Results go to a JSON file in
the format bench/report.py reads (see --out) and a table on stdout.

    python py/bench/bench_python.py [--quick] [--out bench/results/python.json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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


def uncontended_keypool_read(n: int) -> float:
    read = keylock.KeyPool().read
    keys = KEYS
    t0 = time.perf_counter_ns()
    for i in range(n):
        with read(keys[i & MASK]):
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


def threaded(body: Callable[[int, int], None], n_per_thread: int, threads: int = THREADS) -> float:
    """Run body(thread_index, n) in `threads` threads started together; return total ops/s."""
    start = threading.Barrier(threads + 1)

    def run(t: int) -> None:
        start.wait()
        body(t, n_per_thread)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for th in workers:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    for th in workers:
        th.join()
    return threads * n_per_thread / (time.perf_counter() - t0)


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


# ---- per-key read-mostly (issue 13) ----

RM_KEYS = 4
RM_READS = 0.9


def _read_mostly(
    threads: int, make: Callable[[], tuple[Callable[[int], Any], Callable[[int], Any]]]
) -> Callable[[int], float]:
    """`make()` gives (reader, writer): each maps a key to a context manager."""

    def run(n: int) -> float:
        reader, writer = make()
        plans = []
        for t in range(threads):
            rng = random.Random(t)
            plans.append([(rng.randrange(RM_KEYS), rng.random() < RM_READS) for _ in range(n)])

        def body(t: int, n: int) -> None:
            sleep = time.sleep
            for k, is_read in plans[t]:
                with reader(k) if is_read else writer(k):
                    sleep(0)  # work that releases the GIL (I/O)

        return threaded(body, n, threads)

    return run


def rm_keypool_modes() -> tuple[Callable[[int], Any], Callable[[int], Any]]:
    pool = keylock.KeyPool()
    return pool.read, pool.write


def rm_keypool_exclusive() -> tuple[Callable[[int], Any], Callable[[int], Any]]:
    pool = keylock.KeyPool()
    return pool.lock, pool.lock


def rm_dict_rwlockfair() -> tuple[Callable[[int], Any], Callable[[int], Any]]:
    locks: dict[int, rwl.RWLockFair] = {}

    def get(k: int) -> rwl.RWLockFair:
        return locks.setdefault(k, rwl.RWLockFair())

    return (lambda k: get(k).gen_rlock()), (lambda k: get(k).gen_wlock())


def rm_dict_keylock_rwlock() -> tuple[Callable[[int], Any], Callable[[int], Any]]:
    locks: dict[int, keylock.RwLock] = {}

    def get(k: int) -> keylock.RwLock:
        return locks.setdefault(k, keylock.RwLock())

    return (lambda k: get(k).read()), (lambda k: get(k).write())


# ---- asyncio ----

AIO_TASKS = 100
AIO_KEYS = 1000


def asyncio_loop(kind: str, per_task: int) -> float:
    """ns per critical section for 100 tasks on 1,000 keys, one sleep(0) inside."""

    async def main() -> float:
        pool = keylock.KeyPool()
        lock = pool.lock
        locks: collections.defaultdict[int, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        rng = random.Random(1)
        plans = [[rng.randrange(AIO_KEYS) for _ in range(per_task)] for _ in range(AIO_TASKS)]
        sleep = asyncio.sleep

        async def bare(plan: list[int]) -> None:
            for _k in plan:
                await sleep(0)

        async def with_asyncio_lock(plan: list[int]) -> None:
            for k in plan:
                async with locks[k]:
                    await sleep(0)

        async def with_keylock(plan: list[int]) -> None:
            for k in plan:
                async with lock(k):
                    await sleep(0)

        worker = {"bare": bare, "asyncio": with_asyncio_lock, "keylock": with_keylock}[kind]
        t0 = time.perf_counter_ns()
        await asyncio.gather(*(worker(p) for p in plans))
        elapsed = time.perf_counter_ns() - t0
        if kind == "keylock":
            assert len(pool) == 0
        return elapsed / (AIO_TASKS * per_task)

    return asyncio.run(main())


# ---- signal latency ----

# Python's own SIGINT handler first: a shell starts a background job with SIGINT ignored, and
# the child would inherit that (the acquire would then wait for ever).
SIGNAL_SCRIPT = """
import os, signal, threading, time, keylock
signal.signal(signal.SIGINT, signal.default_int_handler)
pool = keylock.KeyPool()
holder = pool.lock("k")
holder.acquire()
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
holder.release()
"""


def signal_latency_ms(_: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", SIGNAL_SCRIPT], capture_output=True, text=True, timeout=60
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(f"signal script failed: {out.stderr}")
    return float(out.stdout.strip())


# ---- harness ----


@dataclass
class Bench:
    """One figure: `fn(n)` measured once per run."""

    name: str
    fn: Callable[[int], float]
    n: int
    unit: str
    baseline: str | None = None
    target: str | None = None
    goal: float = 0.0  # ratio >= goal to meet the target
    extra: dict[str, Any] = field(default_factory=dict)
    runs: list[float] = field(default_factory=list)


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": values,
    }


def load() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def machine(load_before: list[float] | None) -> dict[str, Any]:
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
        # Other work on the machine (1, 5, 15 minute load averages) before and after the run.
        "load_average_before": load_before,
        "load_average_after": load(),
    }


def plan(quick: bool) -> list[Bench]:
    n = 50_000 if quick else 200_000
    nt = 20_000 if quick else 60_000
    nrm = 1_000 if quick else 4_000
    un, th = "uncontended, 1,024 keys", "4 threads, 64 keys"
    benches = [
        Bench(f"{un}: threading.Lock (one lock for all keys)", uncontended_plain, n, "ns/op"),
        Bench(f"{un}: dict of threading.Lock (setdefault)", uncontended_dict, n, "ns/op"),
        Bench(
            f"{un}: KeyPool",
            uncontended_keypool,
            n,
            "ns/op",
            f"{un}: dict of threading.Lock (setdefault)",
            "with pool.lock(k) at least 1.3x the dict pattern uncontended",
            1.3,
        ),
        Bench(
            f"{un}: KeyPool read",
            uncontended_keypool_read,
            n,
            "ns/op",
            f"{un}: dict of threading.Lock (setdefault)",
        ),
        Bench(
            f"{un}: StripedLock(1024)",
            uncontended_striped,
            n,
            "ns/op",
            f"{un}: dict of threading.Lock (setdefault)",
        ),
        Bench(f"{th}: dict of threading.Lock (setdefault)", threads_dict, nt, "ops/s"),
        Bench(
            f"{th}: KeyPool",
            threads_keypool,
            nt,
            "ops/s",
            f"{th}: dict of threading.Lock (setdefault)",
            "KeyPool at least 1.5x the dict pattern's throughput with 4 threads on 64 keys",
            1.5,
        ),
    ]
    for threads in (1, 2, 4):
        g = f"read-mostly, {RM_KEYS} keys, {int(RM_READS * 100)}% reads, {threads} threads"
        base = f"{g}: KeyPool, exclusive locks"
        benches += [
            Bench(base, _read_mostly(threads, rm_keypool_exclusive), nrm, "ops/s"),
            Bench(
                f"{g}: dict of readerwriterlock.RWLockFair",
                _read_mostly(threads, rm_dict_rwlockfair),
                nrm,
                "ops/s",
            ),
            Bench(
                f"{g}: dict of keylock.RwLock",
                _read_mostly(threads, rm_dict_keylock_rwlock),
                nrm,
                "ops/s",
            ),
            Bench(
                f"{g}: KeyPool read/write",
                _read_mostly(threads, rm_keypool_modes),
                nrm,
                "ops/s",
                base,
            ),
        ]
    benches += [
        Bench("reads, 1 thread: readerwriterlock RWLockFair", reads_rwlockfair, n // 2, "ns/op"),
        Bench(
            "reads, 1 thread: RwLock",
            reads_keylock,
            n // 2,
            "ns/op",
            "reads, 1 thread: readerwriterlock RWLockFair",
            "RwLock reads at least 3x RWLockFair",
            3.0,
        ),
        Bench(
            "reads, 4 threads: readerwriterlock RWLockFair",
            threads_reads_rwlockfair,
            nt // 2,
            "ops/s",
        ),
        Bench(
            "reads, 4 threads: RwLock",
            threads_reads_keylock,
            nt // 2,
            "ops/s",
            "reads, 4 threads: readerwriterlock RWLockFair",
            "RwLock reads at least 3x RWLockFair",
            3.0,
        ),
    ]
    return benches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer and shorter runs")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results/python.json"))
    args = ap.parse_args()
    runs = 3 if args.quick else 9
    per_task = 100 if args.quick else 400
    load_before = load()

    benches = plan(args.quick)
    aio: dict[str, list[float]] = {"bare": [], "asyncio": [], "keylock": []}
    for b in benches:
        b.fn(max(1, b.n // 10))  # warm up
    for kind in aio:
        asyncio_loop(kind, 10)
    for run in range(runs):
        for b in benches:
            b.runs.append(b.fn(b.n))
        for kind, values in aio.items():  # the three back to back, so one run's ratio is fair
            values.append(asyncio_loop(kind, per_task))
        print(f"  run {run + 1}/{runs} done, load {load()}", file=sys.stderr, flush=True)

    results: list[dict[str, Any]] = []
    by_name: dict[str, dict[str, Any]] = {}
    for b in benches:
        r: dict[str, Any] = {"name": b.name, "unit": b.unit, **summary(b.runs), **b.extra}
        ratio = None
        if b.baseline is not None:
            base = by_name[b.baseline]["median"]
            ratio = base / r["median"] if b.unit == "ns/op" else r["median"] / base
        r.update(
            baseline=b.baseline,
            ratio=ratio,
            target=b.target,
            met=None if b.target is None else bool(ratio is not None and ratio >= b.goal),
        )
        results.append(r)
        by_name[b.name] = r

    ga = f"asyncio, {AIO_TASKS} tasks, {AIO_KEYS:,} keys, sleep(0) inside"
    names = {
        "bare": f"{ga}: no lock (the bare loop)",
        "asyncio": f"{ga}: defaultdict(asyncio.Lock)",
        "keylock": f"{ga}: KeyPool",
    }
    for kind, values in aio.items():
        results.append(
            {
                "name": names[kind],
                "unit": "ns/op",
                **summary(values),
                "baseline": None,
                "ratio": None,
                "target": None,
                "met": None,
            }
        )
    added = [
        (k - b) / (a - b)
        for b, a, k in zip(aio["bare"], aio["asyncio"], aio["keylock"], strict=True)
        if a > b
    ]
    if added:
        r = {
            "name": f"{ga}: KeyPool's added time / asyncio.Lock's added time",
            "unit": "ratio",
            **summary(added),
            "baseline": names["asyncio"],
        }
        r.update(
            ratio=r["median"],
            target="async with pool.lock(k) adds at most 2/3 of what asyncio.Lock adds",
            met=r["median"] <= 2 / 3,
        )
        results.append(r)

    if hasattr(signal, "SIGINT") and sys.platform != "win32":
        values = [signal_latency_ms(0) for _ in range(runs)]
        r = {"name": "SIGINT to KeyboardInterrupt in a blocked acquire", "unit": "ms"}
        r.update(summary(values))
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
    doc = {
        "suite": "python",
        "description": (
            "keylock's Python package against the dict-of-threading.Lock pattern, one "
            "threading.Lock, asyncio.Lock and readerwriterlock.RWLockFair; ratio = speedup of "
            "keylock over the baseline (>1: keylock faster), except the asyncio ratio of added "
            f"times (<1: keylock adds less); medians of {runs} interleaved runs"
        ),
        "machine": machine(load_before),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")

    print(f"keylock build: {build}; load before {load_before}, after {load()}")
    width = max(len(r["name"]) for r in results)
    print(
        f"\n{'benchmark':<{width}}  {'median':>12}  {'min':>12}  {'max':>12}  unit    ratio  target"
    )
    for r in results:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else ""
        met = {True: "met", False: "MISSED", None: ""}[r["met"]]
        print(
            f"{r['name']:<{width}}  {r['median']:>12,.2f}  {r['min']:>12,.2f}  {r['max']:>12,.2f}"
            f"  {r['unit']:<6} {ratio:>6}  {met}"
        )
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

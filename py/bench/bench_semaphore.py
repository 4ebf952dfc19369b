#!/usr/bin/env python3
"""The keyed semaphore against what Python programmers write today, in one run, interleaved:

1. uncontended ``with sem.acquire(k):`` over 1,024 keys against
   ``with sems[k]:`` on a ``defaultdict(lambda: threading.BoundedSemaphore(n))`` (which keeps
   every key it ever saw) (target: keylock at least as fast);
2. 4 threads on 16 keys, 3 permits, weights of 1: total throughput, the same two;
3. asyncio, 100 tasks on 1,000 keys with ``await asyncio.sleep(0)`` inside: the time each adds
   over the bare loop (``asyncio.BoundedSemaphore`` per key).

Each figure is the median of the runs (min, max and every run kept); ``ratio`` > 1 means keylock
is faster. The load average is recorded before and after.

    python py/bench/bench_semaphore.py [--runs N] [--out bench/results/python-semaphore.json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import json
import os
import statistics
import sys
import threading
import time

import keylock

KEYS = 1024
PERMITS = 3


def uncontended_keylock(n: int) -> float:
    sem = keylock.Semaphore(PERMITS)
    keys = [f"k{i}" for i in range(KEYS)]
    start = time.perf_counter()
    for i in range(n):
        with sem.acquire(keys[i & (KEYS - 1)]):
            pass
    return (time.perf_counter() - start) / n * 1e9


def uncontended_dict(n: int) -> float:
    sems: collections.defaultdict[str, threading.BoundedSemaphore] = collections.defaultdict(
        lambda: threading.BoundedSemaphore(PERMITS)
    )
    keys = [f"k{i}" for i in range(KEYS)]
    start = time.perf_counter()
    for i in range(n):
        with sems[keys[i & (KEYS - 1)]]:
            pass
    return (time.perf_counter() - start) / n * 1e9


def threads(acquire_of, n: int, nthreads: int = 4, nkeys: int = 16) -> float:
    keys = [f"k{i}" for i in range(nkeys)]

    def work(t: int) -> None:
        for i in range(n):
            with acquire_of(keys[(i * 7 + t) % nkeys]):
                pass

    ts = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    start = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return nthreads * n / (time.perf_counter() - start)


def asyncio_added(kind: str, tasks: int = 100, per: int = 50) -> float:
    async def main() -> float:
        keys = [f"k{i}" for i in range(1000)]
        if kind == "keylock":
            sem = keylock.Semaphore(PERMITS)
            ctx = lambda k: sem.acquire(k)  # noqa: E731
        elif kind == "asyncio":
            d: collections.defaultdict[str, asyncio.BoundedSemaphore] = collections.defaultdict(
                lambda: asyncio.BoundedSemaphore(PERMITS)
            )
            ctx = lambda k: d[k]  # noqa: E731
        else:
            ctx = None

        async def task(t: int) -> None:
            for i in range(per):
                k = keys[(t * 31 + i * 17) % 1000]
                if ctx is None:
                    await asyncio.sleep(0)
                else:
                    async with ctx(k):
                        await asyncio.sleep(0)

        start = time.perf_counter()
        await asyncio.gather(*(task(t) for t in range(tasks)))
        return time.perf_counter() - start

    return asyncio.run(main())


def summary(v: list[float]) -> dict:
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": v}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", default="bench/results/python-semaphore.json")
    args = ap.parse_args()
    load_before = os.getloadavg()
    un_k, un_d, th_k, th_d, as_k, as_a, as_0 = [], [], [], [], [], [], []
    sem = keylock.Semaphore(PERMITS)
    sems: collections.defaultdict[str, threading.BoundedSemaphore] = collections.defaultdict(
        lambda: threading.BoundedSemaphore(PERMITS)
    )
    for _ in range(args.runs):
        un_k.append(uncontended_keylock(200_000))
        un_d.append(uncontended_dict(200_000))
        th_k.append(threads(lambda k: sem.acquire(k), 20_000))
        th_d.append(threads(lambda k: sems[k], 20_000))
        base = asyncio_added("none")
        as_0.append(base)
        as_k.append(asyncio_added("keylock") - base)
        as_a.append(asyncio_added("asyncio") - base)

    def row(
        group, impl, unit, v, base=None, base_v=None, target=None, higher_better=False, need=1.0
    ):
        med = statistics.median(v)
        ratio = None
        met = None
        if base_v is not None:
            ratio = med / statistics.median(base_v)
            if target:
                met = ratio >= need if higher_better else ratio <= need
        return {
            "name": f"{group}: {impl}",
            "group": group,
            "impl": impl,
            "unit": unit,
            "median": med,
            "min": min(v),
            "max": max(v),
            "runs": v,
            "baseline": f"{group}: {base}" if base else None,
            "ratio": ratio,
            "target": target,
            "met": met,
        }

    g1 = "semaphore uncontended, 1,024 keys"
    g2 = "semaphore, 4 threads on 16 keys, 3 permits"
    g3 = (
        "semaphore asyncio, 100 tasks on 1,000 keys, sleep(0) inside: time added over the bare loop"
    )
    d = "defaultdict(BoundedSemaphore)"
    da = "defaultdict(asyncio.BoundedSemaphore)"
    results = [
        row(g1, d, "ns/op", un_d),
        row(
            g1,
            "keylock Semaphore",
            "ns/op",
            un_k,
            d,
            un_d,
            "with sem.acquire(k) at least as fast as a defaultdict of BoundedSemaphores",
            False,
            1.0,
        ),
        row(g2, d, "ops/s", th_d),
        row(
            g2,
            "keylock Semaphore",
            "ops/s",
            th_k,
            d,
            th_d,
            "at least the dict pattern's throughput with 4 threads",
            True,
            1.0,
        ),
        row(g3, da, "s", as_a),
        row(
            g3,
            "keylock Semaphore",
            "s",
            as_k,
            da,
            as_a,
            "async with sem.acquire(k) adds no more than asyncio.BoundedSemaphore adds",
            False,
            1.0,
        ),
    ]
    sys.path.insert(
        0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
    )
    import report

    out = {
        "suite": "Python: keyed semaphore (py/bench/bench_semaphore.py)",
        "machine": report.machine(),
        "date": datetime.date.today().isoformat(),
        "description": (
            f"{args.runs} runs, alternatives interleaved; ratios are keylock over the baseline "
            "(for ns/op and seconds lower is better, for ops/s higher). The defaultdict keeps "
            "every key it ever saw. Load average "
            f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after."
        ),
        "results": results,
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    for r in results:
        print(f"{r['name']}: {r['median']:.4g} {r['unit']}  ratio {r['ratio']}  met {r['met']}")


if __name__ == "__main__":
    main()

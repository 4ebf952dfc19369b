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
import json
import os
import statistics
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
    out = {
        "uncontended_ns": {"keylock": summary(un_k), "defaultdict(BoundedSemaphore)": summary(un_d)},
        "uncontended_ratio": statistics.median(un_d) / statistics.median(un_k),
        "threads4_ops_per_s": {"keylock": summary(th_k), "defaultdict(BoundedSemaphore)": summary(th_d)},
        "threads4_ratio": statistics.median(th_k) / statistics.median(th_d),
        "asyncio_added_s": {"keylock": summary(as_k), "defaultdict(asyncio.BoundedSemaphore)": summary(as_a)},
        "asyncio_added_ratio": statistics.median(as_k) / statistics.median(as_a),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print(json.dumps({k: v for k, v in out.items() if "ratio" in k or "loadavg" in k}, indent=2))
    print("uncontended ns: keylock", round(statistics.median(un_k)), "dict", round(statistics.median(un_d)))


if __name__ == "__main__":
    main()

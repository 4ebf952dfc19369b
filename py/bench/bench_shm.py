#!/usr/bin/env python3
"""Benchmarks of keylock's host scope (``shm:NAME``) against the file locks Python programs use.

Measured side by side in one run, the runs of the alternatives interleaved (run 1 of each, then
run 2 of each, ..., the order rotated every round), so that a change in the machine's load hits
all of them alike:

1. uncontended lock+unlock in one process, 1,024 keys (ns/op): ``with pool.lock(k)`` on a
   ``KeyPool.open("shm:NAME")`` and a ``StripedLock.open("shm:NAME", stripes=1024)``, against
   a bare ``fcntl.flock`` LOCK_EX/LOCK_UN pair and a bare OFD ``fcntl`` lock/unlock pair on an
   open file descriptor (one file per key, opened once), ``filelock.FileLock`` acquire/release
   (one file per key), ``portalocker.lock``/``unlock`` on an open file (one per key) and
   ``portalocker.Lock`` acquire/release (one file per key), and the in-process
   ``keylock.KeyPool()`` for reference. Targets: keylock shm at least 50x faster than filelock,
   and at least 1.5x faster than a bare flock pair;
2. 4 processes on 64 keys (total ops/s): the shm KeyPool and StripedLock against flock,
   filelock and portalocker. The 4 worker processes are started once (spawn) and run every
   contender; each opens its locks, waits at a barrier, then takes and releases keys in a loop.
   The figure is all operations divided by the time from the first worker's start to the last
   one's end (CLOCK_MONOTONIC, system-wide).

Each figure is the median of the runs, with min, max and every run kept. ``ratio`` is how many
times faster keylock is than its baseline (> 1: keylock faster; for ns/op the baseline's time
over keylock's, for ops/s keylock's rate over the baseline's). The load average is recorded
before and after the run and after every round (the machine is shared: compare figures taken at
similar load). Every shared-memory region and file this run creates is removed at the end.

    python py/bench/bench_shm.py [--quick] [--out bench/results/python-shm.json]
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import glob
import importlib.metadata
import json
import multiprocessing as mp
import os
import pathlib
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import filelock
import portalocker

import keylock

KEYS = [f"user:{i}" for i in range(1024)]
MASK = len(KEYS) - 1
PROCS = 4
PROC_KEYS = 64
CAPACITY = 1024
PREFIX = "keylock-pybench-"

# struct flock for the OFD fcntl commands (Linux x86-64: short, short, off_t, off_t, pid_t, pad);
# l_pid must be 0 for OFD locks.
_FLOCK = "hhqqi4x"
OFD_WRLCK = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
OFD_UNLCK = struct.pack(_FLOCK, fcntl.F_UNLCK, os.SEEK_SET, 0, 0, 0)


def region(ctx: str, kind: str) -> str:
    """A region name of this run (ctx starts with the parent's pid, so that it never meets
    another run's region)."""
    return f"{PREFIX}{ctx}-{kind}"


def remove_regions(prefix: str) -> None:
    """Remove the /dev/shm files of every region whose name starts with `prefix`."""
    for pattern in (f"/dev/shm/keylock.{prefix}*", f"/dev/shm/.keylock.{prefix}*"):
        for path in glob.glob(pattern):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


# ---- the lock+unlock loops. `setup(directory, n, ctx)` opens the locks of keys 0..n-1 and
# returns (step, close), where step(i) takes and releases key i once. `ctx` names the regions
# and files: the same ctx in two processes opens the same locks. ----

Step = Callable[[int], None]
Close = Callable[[], None]
Setup = Callable[[str, int, str], tuple[Step, Close]]


def nothing() -> None:
    pass


def closing(fds: list[int]) -> Close:
    def close() -> None:
        for fd in fds:
            os.close(fd)

    return close


def setup_keylock_shm_pool(directory: str, n: int, ctx: str) -> tuple[Step, Close]:
    lock = keylock.KeyPool.open(f"shm:{region(ctx, 'pool')}", capacity=CAPACITY).lock
    keys = KEYS

    def step(i: int) -> None:
        with lock(keys[i]):
            pass

    return step, nothing


def setup_keylock_shm_striped(directory: str, n: int, ctx: str) -> tuple[Step, Close]:
    lock = keylock.StripedLock.open(f"shm:{region(ctx, 'striped')}", stripes=1024).lock
    keys = KEYS

    def step(i: int) -> None:
        with lock(keys[i]):
            pass

    return step, nothing


def setup_keylock_local(directory: str, n: int, ctx: str) -> tuple[Step, Close]:
    lock = keylock.KeyPool().lock
    keys = KEYS

    def step(i: int) -> None:
        with lock(keys[i]):
            pass

    return step, nothing


def _open_fds(directory: str, n: int, name: str) -> list[int]:
    return [
        os.open(os.path.join(directory, f"{name}-{i}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        for i in range(n)
    ]


def setup_flock(directory: str, n: int, ctx: str) -> tuple[Step, Close]:
    fds = _open_fds(directory, n, "flock-" + ctx)
    flock, ex, un = fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN

    def step(i: int) -> None:
        fd = fds[i]
        flock(fd, ex)
        flock(fd, un)

    return step, closing(fds)


def setup_ofd(directory: str, n: int, ctx: str) -> tuple[Step, Close]:
    fds = _open_fds(directory, n, "ofd-" + ctx)
    fcntl_, setlkw, setlk = fcntl.fcntl, fcntl.F_OFD_SETLKW, fcntl.F_OFD_SETLK
    wr, unl = OFD_WRLCK, OFD_UNLCK

    def step(i: int) -> None:
        fd = fds[i]
        fcntl_(fd, setlkw, wr)
        fcntl_(fd, setlk, unl)

    return step, closing(fds)


def setup_filelock(directory: str, n: int, ctx: str) -> tuple[Step, Close]:
    locks = [
        filelock.FileLock(os.path.join(directory, f"filelock-{ctx}-{i}.lock")) for i in range(n)
    ]

    def step(i: int) -> None:
        lk = locks[i]
        lk.acquire()
        lk.release()

    return step, nothing


def setup_portalocker_open(directory: str, n: int, ctx: str) -> tuple[Step, Close]:
    handles = [open(os.path.join(directory, f"portalocker-{ctx}-{i}.lock"), "a") for i in range(n)]
    lock, unlock, ex = portalocker.lock, portalocker.unlock, portalocker.LOCK_EX

    def step(i: int) -> None:
        fh = handles[i]
        lock(fh, ex)
        unlock(fh)

    def close() -> None:
        for fh in handles:
            fh.close()

    return step, close


def setup_portalocker_lock(directory: str, n: int, ctx: str) -> tuple[Step, Close]:
    # portalocker.Lock tries a non-blocking lock and, while the file is held, retries every
    # check_interval (1 ms here, 250 ms by default) for up to timeout seconds.
    locks = [
        portalocker.Lock(
            os.path.join(directory, f"portalocker-lock-{ctx}-{i}.lock"),
            mode="a",
            timeout=60,
            check_interval=0.001,
        )
        for i in range(n)
    ]

    def step(i: int) -> None:
        lk = locks[i]
        lk.acquire()
        lk.release()

    return step, nothing


SETUPS: dict[str, Setup] = {
    "keylock shm KeyPool": setup_keylock_shm_pool,
    "keylock shm StripedLock(1024)": setup_keylock_shm_striped,
    "keylock KeyPool() (in-process, reference)": setup_keylock_local,
    "fcntl.flock LOCK_EX/LOCK_UN (open fd per key)": setup_flock,
    "OFD fcntl F_OFD_SETLKW/F_UNLCK (open fd per key)": setup_ofd,
    "filelock.FileLock acquire/release": setup_filelock,
    "portalocker.lock/unlock (open file per key)": setup_portalocker_open,
    "portalocker.Lock acquire/release": setup_portalocker_lock,
}


def uncontended(setup: Setup, directory: str, n: int) -> float:
    """ns per lock+unlock, one process, keys taken in turn over 1,024."""
    step, close = setup(directory, len(KEYS), f"{os.getpid()}-u")
    try:
        for i in range(min(n, 2048)):  # warm: every file opened, every entry touched once
            step(i & MASK)
        t0 = time.perf_counter_ns()
        for i in range(n):
            step(i & MASK)
        return (time.perf_counter_ns() - t0) / n
    finally:
        close()


# ---- 4 processes on 64 keys ----


def worker(index: int, conn: Any, barrier: Any) -> None:
    """A worker process: for every job (name, directory, n, ctx), set up, wait at the barrier,
    loop, report (start, end) in CLOCK_MONOTONIC ns."""
    while True:
        job = conn.recv()
        if job is None:
            return
        name, directory, n, ctx = job
        step, close = SETUPS[name](directory, PROC_KEYS, ctx)
        try:
            barrier.wait()
            t = index
            t0 = time.monotonic_ns()
            for i in range(n):
                step((i * 7 + t) & (PROC_KEYS - 1))
            t1 = time.monotonic_ns()
        finally:
            close()
        conn.send((t0, t1))


@dataclass
class Pool:
    """The worker processes, started once."""

    conns: list[Any]
    procs: list[Any]
    barrier: Any

    @classmethod
    def start(cls) -> Pool:
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(PROCS)
        conns, procs = [], []
        for t in range(PROCS):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker, args=(t, child, barrier), daemon=True)
            p.start()
            conns.append(parent)
            procs.append(p)
        return cls(conns, procs, barrier)

    def run(self, name: str, directory: str, n: int) -> float:
        for c in self.conns:
            c.send((name, directory, n, f"{os.getpid()}-p"))
        spans = [c.recv() for c in self.conns]
        start = min(s for s, _ in spans)
        end = max(e for _, e in spans)
        return PROCS * n / ((end - start) / 1e9)

    def stop(self) -> None:
        for c in self.conns:
            c.send(None)
        for p in self.procs:
            p.join(timeout=30)


# ---- harness ----


@dataclass
class Bench:
    """One figure: `fn(n)` measured once per run."""

    name: str
    fn: Callable[[int], float]
    n: int
    unit: str
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


def machine(load_before: list[float] | None, rounds: list[list[float] | None]) -> dict[str, Any]:
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
        "filelock": importlib.metadata.version("filelock"),
        "portalocker": importlib.metadata.version("portalocker"),
        "rustc": version(["rustc", "--version"]),
        "lock_files_on": "tempfile.gettempdir(): " + tempfile.gettempdir(),
        # Other work on the machine (1, 5, 15 minute load averages) before and after the run,
        # and after every round.
        "load_average_before": load_before,
        "load_average_after": load(),
        "load_average_after_each_round": rounds,
    }


UN = "uncontended, 1,024 keys"
MP = f"{PROCS} processes, {PROC_KEYS} keys"
SHM = ("keylock shm KeyPool", "keylock shm StripedLock(1024)")
FLOCK = "fcntl.flock LOCK_EX/LOCK_UN (open fd per key)"
FILELOCK = "filelock.FileLock acquire/release"
# (keylock row, baseline row, goal): ratio >= goal meets the target.
UN_TARGETS = [
    (FILELOCK, 50.0, "keylock shm at least 50x faster than filelock.FileLock (time per op)"),
    (FLOCK, 1.5, "keylock shm at least 1.5x faster than a bare fcntl.flock pair (time per op)"),
]
MP_CONTENDERS = [*SHM, FLOCK, FILELOCK, "portalocker.lock/unlock (open file per key)"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer and shorter runs")
    ap.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("bench/results/python-shm.json")
    )
    args = ap.parse_args()

    runs = 3 if args.quick else 9
    n_fast = 50_000 if args.quick else 200_000
    n_file = 5_000 if args.quick else 20_000
    n_proc = 10_000 if args.quick else 40_000
    n_proc_file = 1_000 if args.quick else 4_000
    load_before = load()
    directory = tempfile.mkdtemp(prefix="keylock-pybench-")
    prefix = f"{PREFIX}{os.getpid()}-"

    slow = {FILELOCK, "portalocker.Lock acquire/release"}
    benches = [
        Bench(
            f"{UN}: {name}",
            (lambda n, s=setup: uncontended(s, directory, n)),
            n_file if name in slow else n_fast,
            "ns/op",
        )
        for name, setup in SETUPS.items()
    ]
    pool: Pool | None = None
    round_loads: list[list[float] | None] = []
    try:
        pool = Pool.start()
        p = pool
        benches += [
            Bench(
                f"{MP}: {name}",
                (lambda n, name=name: p.run(name, directory, n)),
                n_proc_file if name == FILELOCK else n_proc,
                "ops/s",
            )
            for name in MP_CONTENDERS
        ]
        for b in benches:  # warm-up (and a check that every contender runs)
            b.fn(max(b.n // 20, 100))
        for r in range(runs):
            for j in range(len(benches)):
                b = benches[(j + r) % len(benches)]
                b.runs.append(b.fn(b.n))
            round_loads.append(load())
            print(f"round {r + 1}/{runs}, load {round_loads[-1]}", file=sys.stderr)
    finally:
        if pool is not None:
            pool.stop()
        if hasattr(keylock, "unlink"):
            for ctx in ("u", "p"):
                for kind in ("pool", "striped"):
                    try:
                        keylock.unlink(f"shm:{prefix}{ctx}-{kind}")
                    except (OSError, ValueError):
                        pass
        remove_regions(prefix)
        shutil.rmtree(directory, ignore_errors=True)

    by_name = {b.name: b for b in benches}
    results: list[dict[str, Any]] = []
    for b in benches:
        row = {"name": b.name, "unit": b.unit, **summary(b.runs)}
        row.update(baseline=None, ratio=None, target=None, met=None)
        against: list[tuple[str, float | None, str | None]] = []
        short = b.name.split(": ", 1)[1]
        if short in SHM and b.unit == "ns/op":
            against = [(base, goal, text) for base, goal, text in UN_TARGETS]
        elif short in SHM:
            against = [(FLOCK, None, None), (FILELOCK, None, None)]
        elif short == "keylock KeyPool() (in-process, reference)":
            against = [(FLOCK, None, None)]
        if not against:
            results.append(row)
        for i, (base, goal, text) in enumerate(against):
            group = b.name.split(": ", 1)[0]
            base_row = by_name[f"{group}: {base}"]
            base_median = statistics.median(base_row.runs)
            ratio = (
                base_median / row["median"] if b.unit == "ns/op" else row["median"] / base_median
            )
            r2 = dict(row)
            if i > 0:
                r2["name"] = f"{b.name} (vs {base.split()[0]})"
            r2.update(
                baseline=base_row.name,
                ratio=ratio,
                target=text,
                met=None if goal is None else ratio >= goal,
            )
            results.append(r2)

    build = getattr(keylock._keylock, "_BUILD", "unknown")
    for r in results:
        r["build"] = build
    doc = {
        "suite": "python-shm",
        "description": (
            "keylock's host scope (shm:NAME regions in /dev/shm) from Python against file locks: "
            "a bare fcntl.flock pair and a bare OFD fcntl pair on open descriptors, "
            "filelock.FileLock, portalocker (lock/unlock on an open file, and portalocker.Lock), "
            "one file per key; the in-process KeyPool for reference. Uncontended: one process, "
            f"1,024 keys; then {PROCS} processes on {PROC_KEYS} keys (total ops/s). ratio = how "
            "many times faster keylock is than the baseline (>1: keylock faster); medians of "
            f"{runs} interleaved runs"
        ),
        "machine": machine(load_before, round_loads),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "config": {
            "runs": runs,
            "uncontended_ops_per_run": n_fast,
            "uncontended_ops_per_run_filelock_and_portalocker_Lock": n_file,
            "processes": PROCS,
            "process_keys": PROC_KEYS,
            "ops_per_process_per_run": n_proc,
            "ops_per_process_per_run_filelock": n_proc_file,
            "shm_capacity": CAPACITY,
        },
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

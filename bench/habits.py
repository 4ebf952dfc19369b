"""The speed rows of issue 26 ("faster than the language's own habit, in every binding"), each
read from the suite that measures it and judged against the issue's target and moonshot.

Every row is a ratio of two figures of one suite's JSON, so both come from one run of one
process (the suites interleave their contenders); the row says which JSON, when it ran, and the
machine's load there. bench/report.py renders the table at the top of BENCHMARKS.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# How a row's ratio reads:
#   "speedup": baseline's time (or instructions) over keylock's; higher is better (>= target)
#   "throughput": keylock's ops/s over the baseline's; higher is better (>= target)
#   "cost": keylock's time (or instructions) over the baseline's; lower is better (<= target)
#   "given": the figure is itself a ratio (keylock's added cost over the baseline's); lower is
#            better (<= target)
HIGHER = ("speedup", "throughput")


@dataclass(frozen=True)
class Row:
    what: str
    suite: str
    ours: str
    theirs: str | None
    kind: str
    target: float
    moonshot: float | None = None
    note: str = ""


UN = "uncontended, 1,024 keys"
TH = "4 threads, 64 keys"
AIO = "asyncio, 100 tasks, 1,000 keys, sleep(0) inside"
NODE = "1000 keys, 100 tasks"
HELD = "async 1000 tasks on 1000 keys, held across an await"
HELD_1T = "async 1000 tasks on 1000 keys, one thread, held across an await"
KEYLOCK_ASYNC = "keylock KeyPool lock_async_owned"
TOKIO_MAP = "Mutex<HashMap<K, Arc<tokio::sync::Mutex>>>"

ROWS = [
    Row(
        "Python: uncontended `with pool.lock(k)` vs a dict of `threading.Lock` (setdefault), time",
        "python.json",
        f"{UN}: KeyPool",
        f"{UN}: dict of threading.Lock (setdefault)",
        "speedup",
        1.1,
        1.3,
    ),
    Row(
        "Python: the same, instructions",
        "python-callgrind.json",
        f"{UN}: KeyPool",
        f"{UN}: dict of threading.Lock (setdefault)",
        "speedup",
        1.1,
        1.3,
    ),
    Row(
        "Python: 4 threads on 64 keys vs the dict pattern, ops/s",
        "python.json",
        f"{TH}: KeyPool",
        f"{TH}: dict of threading.Lock (setdefault)",
        "throughput",
        1.2,
        1.5,
    ),
    Row(
        "Python: the same, instructions",
        "python-callgrind.json",
        f"{TH}: KeyPool",
        f"{TH}: dict of threading.Lock (setdefault)",
        "speedup",
        1.2,
        1.5,
    ),
    Row(
        "Python asyncio: time keylock adds over the bare loop"
        " / what `defaultdict(asyncio.Lock)` adds",
        "python.json",
        f"{AIO}: KeyPool's added time / asyncio.Lock's added time",
        None,
        "given",
        0.67,
        0.5,
    ),
    Row(
        "Python asyncio: the same, instructions",
        "python-callgrind.json",
        f"{AIO}: KeyPool's added instructions / asyncio.Lock's",
        None,
        "given",
        0.67,
        0.5,
    ),
    Row(
        "Node: KeyPool `withLock` vs async-lock, ops/s",
        "node.json",
        f"keylock KeyPool withLock, {NODE}",
        f"async-lock acquire(key, fn), {NODE}",
        "throughput",
        1.5,
        2.0,
    ),
    Row(
        "Node: StripedLock `withLock` vs async-lock, ops/s",
        "node.json",
        f"keylock StripedLock withLock, {NODE}",
        f"async-lock acquire(key, fn), {NODE}",
        "throughput",
        1.5,
        2.0,
    ),
    Row(
        "Node: KeyPool `withLock` vs a Map of async-mutex Mutexes, ops/s",
        "node.json",
        f"keylock KeyPool withLock, {NODE}",
        f"async-mutex Map of Mutexes runExclusive, {NODE}",
        "throughput",
        3.0,
    ),
    Row(
        "Node: KeyPool `withLock` vs async-lock, instructions",
        "node-callgrind.json",
        f"keylock KeyPool withLock, {NODE}",
        f"async-lock acquire(key, fn), {NODE}",
        "speedup",
        1.5,
        2.0,
    ),
    Row(
        "Node: StripedLock `withLock` vs async-lock, instructions",
        "node-callgrind.json",
        f"keylock StripedLock withLock, {NODE}",
        f"async-lock acquire(key, fn), {NODE}",
        "speedup",
        1.5,
        2.0,
    ),
    Row(
        "Node: KeyPool `withLock` vs a Map of async-mutex Mutexes, instructions",
        "node-callgrind.json",
        f"keylock KeyPool withLock, {NODE}",
        f"async-mutex Map of Mutexes runExclusive, {NODE}",
        "speedup",
        3.0,
    ),
    Row(
        "C: striped lock+release vs an array of pthread mutexes (same hash), instructions",
        "c.json",
        "c_striped (instructions)",
        "c_pthread_array (instructions)",
        "cost",
        1.5,
        1.2,
    ),
    Row(
        "C: the same, thread CPU time",
        "c.json",
        "c_striped (cpu)",
        "c_pthread_array (cpu)",
        "cost",
        1.5,
        1.2,
    ),
    Row(
        "C: pool lock+release vs the Rust call through the trait, instructions",
        "c.json",
        "c_pool (instructions)",
        "rust_pool_trait (instructions)",
        "cost",
        1.2,
    ),
    Row(
        "C: the same, thread CPU time",
        "c.json",
        "c_pool (cpu)",
        "rust_pool_trait (cpu)",
        "cost",
        1.2,
    ),
    Row(
        "Rust: StripedLock vs parking_lot's lock+unlock, time",
        "rust.json",
        "uncontended_u64/keylock StripedLock",
        "uncontended_u64/parking_lot::Mutex",
        "cost",
        1.3,
    ),
    Row(
        "Rust: the same, instructions (each loop's own instructions included)",
        "rust-before-after-front.json",
        "striped_u64: after, instructions",
        "floor: after, instructions",
        "cost",
        1.3,
    ),
    Row(
        "Rust: KeyPool on 16-byte keys vs StripedLock, time",
        "rust.json",
        "uncontended_bytes16/keylock KeyPool",
        "uncontended_bytes16/keylock StripedLock",
        "cost",
        1.5,
    ),
    Row(
        "Rust: the same, instructions",
        "rust-before-after-front.json",
        "pool_str16: after, instructions",
        "striped_str16: after, instructions",
        "cost",
        1.5,
    ),
    Row(
        "Rust: uncontended KeyPool `lock_async` vs `lock`, time",
        "rust.json",
        "uncontended_async/keylock KeyPool lock_async",
        "uncontended_async/keylock KeyPool lock (sync)",
        "cost",
        1.5,
        1.2,
    ),
    Row(
        "Rust: the same, instructions",
        "rust-before-after-front.json",
        "pool_async: after, instructions",
        "pool_u64: after, instructions",
        "cost",
        1.5,
        1.2,
    ),
    Row(
        "Rust: the same, awaited in a task (the future made in place, not moved), time",
        "rust.json",
        "uncontended_async/keylock KeyPool lock_async, awaited in a task",
        "uncontended_async/keylock KeyPool lock (sync), in a task",
        "cost",
        1.5,
        1.2,
    ),
    Row(
        "Rust: the same, awaited in a task, instructions",
        "rust-before-after-front.json",
        "pool_async_task: after, instructions",
        "pool_sync_task: after, instructions",
        "cost",
        1.5,
        1.2,
    ),
    Row(
        "Rust: uncontended StripedLock `lock_async` vs `lock`, time",
        "rust.json",
        "uncontended_async/keylock StripedLock lock_async",
        "uncontended_async/keylock StripedLock lock (sync)",
        "cost",
        1.5,
        1.2,
    ),
    Row(
        "Rust: the same, instructions",
        "rust-before-after-front.json",
        "striped_async: after, instructions",
        "striped_u64: after, instructions",
        "cost",
        1.5,
        1.2,
    ),
    Row(
        "Rust: the same, awaited in a task (the future made in place, not moved), time",
        "rust.json",
        "uncontended_async/keylock StripedLock lock_async, awaited in a task",
        "uncontended_async/keylock StripedLock lock (sync), in a task",
        "cost",
        1.5,
        1.2,
    ),
    Row(
        "Rust: the same, awaited in a task, instructions",
        "rust-before-after-front.json",
        "striped_async_task: after, instructions",
        "striped_sync_task: after, instructions",
        "cost",
        1.5,
        1.2,
    ),
    Row(
        "Rust: contended async, held across an await, vs a map of tokio mutexes, ops/s",
        "rust-async-contended.json",
        f"{HELD}: {KEYLOCK_ASYNC}",
        f"{HELD}: {TOKIO_MAP}",
        "throughput",
        1.5,
    ),
    Row(
        "Rust: the same on one thread (a current-thread runtime), time",
        "rust-async-contended-1thread.json",
        f"{HELD_1T}: {KEYLOCK_ASYNC}",
        f"{HELD_1T}: {TOKIO_MAP}",
        "speedup",
        1.5,
    ),
    Row(
        "Rust: the same on one thread, instructions",
        "rust-async-contended-1thread.json",
        f"{HELD_1T}: {KEYLOCK_ASYNC}, instructions",
        f"{HELD_1T}: {TOKIO_MAP}, instructions",
        "speedup",
        1.5,
    ),
    Row(
        "host scope, C: uncontended shm pool vs a flock pair",
        "c.json",
        "c_shm_pool (cpu)",
        "c_flock (cpu)",
        "speedup",
        40.0,
        note="one key; from Rust through the trait: rust-shm.json",
    ),
    Row(
        "host scope, C: uncontended shm pool vs a robust pthread mutex",
        "c.json",
        "c_shm_pool (cpu)",
        "c_robust_mutex (cpu)",
        "cost",
        1.5,
        note="one key",
    ),
    Row(
        "host scope, C: uncontended shm striped lock vs a robust pthread mutex",
        "c.json",
        "c_shm_striped (cpu)",
        "c_robust_mutex (cpu)",
        "cost",
        1.5,
        note="one key",
    ),
    # The same two by callgrind's count, which does not move with the host: a robust mutex's
    # two atomic operations cost about 3 times as much time on one kind of host these suites
    # ran on as on another, and with them the time ratios above.
    Row(
        "host scope, C: the shm pool vs a robust pthread mutex, instructions",
        "c.json",
        "c_shm_pool (instructions)",
        "c_robust_mutex (instructions)",
        "cost",
        1.5,
    ),
    Row(
        "host scope, C: the shm striped lock vs a robust pthread mutex, instructions",
        "c.json",
        "c_shm_striped (instructions)",
        "c_robust_mutex (instructions)",
        "cost",
        1.5,
    ),
    Row(
        "Redis: uncontended acquire+release vs redis-py's Lock (ops/s: its time over keylock's)",
        "redis.json",
        "redis uncontended acquire+release: keylock Redis scope",
        "redis uncontended acquire+release: redis-py",
        "speedup",
        1.0,
    ),
    Row(
        "Redis: hand-off p99 vs python-redis-lock (4 processes, 16 keys)",
        "redis.json",
        "redis 4 processes on 16 keys: hand-off p99: keylock Redis scope",
        "redis 4 processes on 16 keys: hand-off p99: python-redis-lock",
        "cost",
        0.7,
    ),
]


def load_of(doc: dict) -> str:
    """The machine's load where the suite says it (its first figure), or '-'."""
    m = doc.get("machine") or {}

    def first(k: str) -> tuple[int, str]:
        # The reading from before the run first.
        return (0 if ("start" in k or "before" in k) else 1, k)

    for key in sorted(m, key=first):
        if "load" not in key.lower() and "uptime" not in key.lower():
            continue
        v = m[key]
        while isinstance(v, list) and v:
            v = v[0]
        if isinstance(v, (int, float)):
            return f"{v:.2f}"
        if isinstance(v, str) and "load average:" in v:
            return v.split("load average:", 1)[1].split(",", 1)[0].strip()
    for key in ("description", "measurement"):
        text = doc.get(key) or ""
        for marker in ("load average at the start ", "Load average "):
            if marker in text:
                return text.split(marker, 1)[1].split()[0].rstrip(",.;")
    return "-"


def host_of(doc: dict) -> str:
    """The suite's processor, shortened ('AMD EPYC', 'Intel Xeon'), with its cores where the
    suite gives them ('Intel Xeon, 16 cores'), or '-' if it gives no processor."""
    m = doc.get("machine") or {}
    cpu = m.get("cpu") if isinstance(m, dict) else None
    if not isinstance(cpu, str) or not cpu.strip():
        return "-"
    words = [w for w in cpu.replace("(R)", "").replace("(TM)", "").split() if w != "Processor"]
    cores = m.get("cores")
    return " ".join(words[:2]) + (f", {cores} cores" if isinstance(cores, int) and cores else "")


def judge(ratio: float, row: Row) -> str:
    def reaches(goal: float) -> bool:
        return ratio >= goal if row.kind in HIGHER else ratio <= goal

    if row.moonshot is not None and reaches(row.moonshot):
        return "**met** (moonshot too)"
    return "**met**" if reaches(row.target) else "**missed**"


def render(docs: list[dict], fmt) -> list[str]:
    """The table's lines: a row per entry of ROWS whose figures are in the suites' JSON;
    `fmt(value, unit)` writes a figure."""
    by_file = {d["_file"]: d for d in docs}
    out = [
        "## Against each language's habit\n",
        (
            "The rows of issue 26, each a ratio of two figures measured in one run of one suite "
            "(its contenders interleaved). *speedup*: the habit's time over keylock's; *ops/s*: "
            "keylock's throughput over the habit's; *cost*: keylock's time or instructions over "
            "the baseline's; *added*: keylock's added cost over the baseline's. Load: the "
            "machine's load average when the suite ran, as the suite recorded it; host: its "
            "processor and cores. A time ratio to a baseline that is mostly atomic operations (a "
            "parking_lot or pthread mutex) depends on the host: an atomic read-modify-write "
            "costs about 3 ns on one kind of host these suites ran on and about 5.5 ns on "
            "another, which hides the rest of either side's work. The instruction rows beside "
            "them compare across hosts.\n"
        ),
        (
            "| row | keylock | baseline | ratio | target | moonshot | verdict "
            "| suite (date, load, host) |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        doc = by_file.get(row.suite)
        results = {r["name"]: r for r in doc["results"]} if doc else {}
        ours = results.get(row.ours)
        theirs = results.get(row.theirs) if row.theirs else None
        if doc is None or ours is None or (row.theirs is not None and theirs is None):
            out.append(f"| {row.what} | not measured | | | | | | {row.suite} |")
            continue
        a = ours["median"]
        if row.kind == "given":
            ratio, base = a, "-"
        else:
            assert theirs is not None  # a row of two figures has its baseline (checked above)
            b = theirs["median"]
            ratio = {"speedup": b / a, "throughput": a / b, "cost": a / b}[row.kind]
            base = fmt(b, theirs["unit"])
        sign = ">=" if row.kind in HIGHER else "<="
        label = {
            "speedup": "speedup",
            "throughput": "ops/s",
            "cost": "cost",
            "given": "added",
        }[row.kind]
        date = str(doc.get("date", ""))[:10]
        what = row.what + (f" ({row.note})" if row.note else "")
        moonshot = "-" if row.moonshot is None else f"{sign} {row.moonshot:g}x"
        out.append(
            f"| {what} | {fmt(a, ours['unit'])} | {base} | {ratio:.2f}x {label} "
            f"| {sign} {row.target:g}x | {moonshot} "
            f"| {judge(ratio, row)} | {row.suite} ({date}, {load_of(doc)}, {host_of(doc)}) |"
        )
    out.append("")
    return out


def names() -> set[tuple[str, str]]:
    """Every (suite, result name) a row reads, for a check that they still exist."""
    got = set()
    for row in ROWS:
        got.add((row.suite, row.ours))
        if row.theirs:
            got.add((row.suite, row.theirs))
    return got


if __name__ == "__main__":
    import glob
    import json
    import sys

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    docs = []
    for p in sorted(glob.glob(os.path.join(here, "*.json"))):
        with open(p) as f:
            d = json.load(f)
        d["_file"] = os.path.basename(p)
        docs.append(d)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from report import fmt

    print("\n".join(render(docs, fmt)))
    sys.exit(0)

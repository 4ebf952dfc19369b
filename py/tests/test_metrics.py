"""Metrics (`metrics=True`, `metrics()`): exact counts under known workloads on every
in-process lock object and in shared memory, at each way a call can end (granted at once, a
failed try, a timeout, an asyncio cancel, a wait then a grant, a lease that ended, a
force-unlock, an all-or-nothing acquire of several keys); nothing counted without metrics; the
snapshot objects; and the prometheus_client collector's exposition.

The core counts; these tests check that the binding makes exactly the calls its caller made (a
blocking or asyncio wait is one call, not a try and then a wait). Every wait is bounded
(conftest's helpers), and the only timing asserted is a lower bound on a wait the test made.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

import keylock
import keylock.prometheus
from conftest import (
    DEADLOCK,
    Occupancy,
    arun,
    async_wait_until,
    run_script,
    run_threads,
    wait_until,
)

#: How long a holder keeps a key that others wait for (a lower bound of their wait).
DELAY = 0.05

COUNTS = (
    "acquired",
    "contended",
    "timed_out",
    "would_block",
    "cancelled",
    "lease_expired",
    "owner_died",
    "lost",
    "force_unlocked",
)

_names = itertools.count()


@dataclass
class Subject:
    """A lock object under test, a KeyPool, a StripedLock or a Semaphore of one permit, behind
    one interface."""

    obj: keylock.KeyPool | keylock.StripedLock | keylock.Semaphore

    def handle(
        self, key: str, timeout: float | None = None, lease: float | None = None
    ) -> keylock.LockHandle:
        if isinstance(self.obj, keylock.Semaphore):
            return self.obj.acquire(key, 1, timeout, lease=lease)
        return self.obj.lock(key, timeout, lease=lease)

    def force(self, key: str) -> bool:
        if isinstance(self.obj, keylock.Semaphore):
            return self.obj.force_release(key)
        return self.obj.force_unlock(key)

    def waiters(self, key: str) -> int:
        info = self.obj.info(key)
        return 0 if info is None else info.waiters

    def metrics(self) -> keylock.MetricsSnapshot:
        m = self.obj.metrics()
        assert m is not None
        return m


KINDS = ["pool", "striped", "semaphore", "shm-pool", "shm-striped", "shm-semaphore"]


@pytest.fixture(params=KINDS)
def make(request: pytest.FixtureRequest) -> Iterator[Callable[[bool], Subject]]:
    """Opens a lock object of the parameter's kind, with metrics or without; a shared-memory
    one under a name of its own, unlinked afterwards."""
    kind: str = request.param
    made: list[str] = []

    def open_one(metrics: bool) -> Subject:
        if not kind.startswith("shm-"):
            if kind == "pool":
                return Subject(keylock.KeyPool(metrics=metrics))
            if kind == "striped":
                return Subject(keylock.StripedLock(64, metrics=metrics))
            return Subject(keylock.Semaphore(1, metrics=metrics))
        name = f"shm:keylock-py-metrics-{os.getpid()}-{next(_names)}"
        try:
            if kind == "shm-pool":
                obj: Any = keylock.KeyPool.open(name, metrics=metrics)
            elif kind == "shm-striped":
                obj = keylock.StripedLock.open(name, 64, metrics=metrics)
            else:
                obj = keylock.Semaphore.open(name, 1, metrics=metrics)
        except ValueError as e:
            pytest.skip(f"this build has no shared-memory scope: {e}")
        made.append(name)
        return Subject(obj)

    yield open_one
    for name in made:
        keylock.unlink(name)


def counts(m: keylock.MetricsSnapshot) -> dict[str, int]:
    """The counts of `m`, and how many durations each histogram recorded."""
    out = {name: getattr(m, name) for name in COUNTS}
    out["wait.count"] = m.wait.count
    out["hold.count"] = m.hold.count
    return out


def expect(**nonzero: int) -> dict[str, int]:
    """`counts()` as expected: every count 0 but those given (wait_count, hold_count for the
    histograms)."""
    out = dict.fromkeys((*COUNTS, "wait.count", "hold.count"), 0)
    for name, n in nonzero.items():
        out[name.replace("_count", ".count") if name.endswith("_count") else name] = n
    return out


# ---- the openers ----


def test_every_opener_takes_metrics() -> None:
    on: list[Any] = [
        keylock.KeyPool(metrics=True),
        keylock.KeyPool.open("local:", metrics=True),
        keylock.StripedLock(8, metrics=True),
        keylock.StripedLock.open("local:", 8, metrics=True),
        keylock.Semaphore(2, metrics=True),
        keylock.Semaphore.open("local:", 2, metrics=True),
    ]
    off: list[Any] = [
        keylock.KeyPool(),
        keylock.KeyPool.open("local:", metrics=False),
        keylock.StripedLock(8),
        keylock.StripedLock.open("local:", 8),
        keylock.Semaphore(2),
        keylock.Semaphore.open("local:", 2, metrics=False),
    ]
    for obj in on:
        assert counts(obj.metrics()) == expect(), obj
    for obj in off:
        assert obj.metrics() is None, obj
    with pytest.raises(TypeError):
        keylock.KeyPool(True)  # type: ignore[call-arg]  # keyword-only


def test_nothing_is_counted_without_metrics(make: Callable[[bool], Subject]) -> None:
    s = make(False)
    h = s.handle("k")
    with h:
        assert not s.handle("k").acquire(blocking=False)
    assert s.obj.metrics() is None


# ---- exact counts, one way of ending at a time ----


def test_granted_at_once(make: Callable[[bool], Subject]) -> None:
    s = make(True)
    h = s.handle("k")
    with h:  # blocking, no timeout
        pass
    assert h.acquire(timeout=5)  # blocking, with a timeout
    h.release()
    assert h.acquire(blocking=False)  # a try that succeeds
    h.release()

    async def main() -> None:
        async with h:  # taken by __aenter__'s first poll
            pass
        assert await h.acquire_async(timeout=5)
        h.release()

    arun(main())
    m = s.metrics()
    assert counts(m) == expect(acquired=5, wait_count=5, hold_count=5)
    assert m.wait.sum == 0.0 and m.wait.max == 0.0 and m.wait.buckets == ((0.0, 5),)
    assert m.wait.quantile(0.99) == 0.0
    assert m.hold.max >= 0.0 and sum(n for _, n in m.hold.buckets) == 5


def test_failed_tries(make: Callable[[bool], Subject]) -> None:
    s = make(True)
    holder = s.handle("k")
    assert holder.acquire()
    other = s.handle("k")
    assert not other.acquire(blocking=False)
    assert not other.acquire(timeout=0)

    async def main() -> None:
        assert not await other.acquire_async(timeout=0)
        with pytest.raises(keylock.LockTimeout):
            async with s.handle("k", timeout=0):
                pass  # pragma: no cover

    arun(main())
    with pytest.raises(keylock.LockTimeout):
        with s.handle("k", timeout=0):
            pass  # pragma: no cover
    holder.release()
    assert counts(s.metrics()) == expect(acquired=1, would_block=5, wait_count=1, hold_count=1)


def test_timed_out_while_another_thread_holds(make: Callable[[bool], Subject]) -> None:
    s = make(True)
    held, done = threading.Event(), threading.Event()

    def holder() -> None:
        with s.handle("k"):
            held.set()
            assert done.wait(DEADLOCK)

    def waiter() -> None:
        assert held.wait(DEADLOCK)
        try:
            start = time.monotonic()
            assert not s.handle("k").acquire(timeout=DELAY)
            assert time.monotonic() - start >= DELAY
            with pytest.raises(keylock.LockTimeout):
                with s.handle("k", timeout=DELAY):
                    pass  # pragma: no cover

            async def main() -> None:
                assert not await s.handle("k").acquire_async(timeout=DELAY)
                with pytest.raises(keylock.LockTimeout):
                    async with s.handle("k", timeout=DELAY):
                        pass  # pragma: no cover

            arun(main())
        finally:
            done.set()

    run_threads([holder, waiter])
    m = s.metrics()
    assert counts(m) == expect(acquired=1, contended=4, timed_out=4, wait_count=1, hold_count=1)
    assert m.hold.max >= 4 * DELAY


def test_cancelled_asyncio_wait(make: Callable[[bool], Subject]) -> None:
    s = make(True)

    async def main() -> None:
        holder = s.handle("k")
        assert await holder.acquire_async()

        async def waiter() -> None:
            async with s.handle("k"):
                pytest.fail("the cancelled task entered")  # pragma: no cover

        task = asyncio.ensure_future(waiter())
        await async_wait_until(lambda: s.waiters("k") == 1, "the task to queue")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert s.waiters("k") == 0
        holder.release()

    arun(main())
    assert counts(s.metrics()) == expect(
        acquired=1, contended=1, cancelled=1, wait_count=1, hold_count=1
    )


def test_waited_then_granted(make: Callable[[bool], Subject]) -> None:
    s = make(True)
    occupancy = Occupancy()
    waiting = 3
    main = s.handle("k")
    assert main.acquire()

    def worker() -> None:
        with s.handle("k"), occupancy.hold("k"):
            time.sleep(0.001)

    def release_when_all_wait() -> None:
        with occupancy.hold("k"):
            wait_until(lambda: s.waiters("k") == waiting, what="every thread to queue")
            time.sleep(DELAY)
        main.release()

    run_threads([worker] * waiting + [release_when_all_wait])
    occupancy.check()
    assert occupancy.completed == waiting + 1
    m = s.metrics()
    assert counts(m) == expect(
        acquired=waiting + 1, contended=waiting, wait_count=waiting + 1, hold_count=waiting + 1
    )
    # The holder was granted at once; every waiter waited at least the holder's DELAY.
    assert m.wait.quantile(0.0) == 0.0
    assert m.wait.max >= DELAY and m.wait.quantile(1.0) == m.wait.max
    assert m.wait.sum >= waiting * DELAY
    assert m.hold.max >= DELAY


def test_lease_ended_before_release(make: Callable[[bool], Subject]) -> None:
    s = make(True)
    h = s.handle("k", lease=DELAY)
    assert h.acquire()
    wait_until(lambda: not h.is_current(), what="the lease to end")
    with pytest.raises(keylock.LeaseExpiredError):
        h.release()
    assert counts(s.metrics()) == expect(acquired=1, lease_expired=1, wait_count=1)


def test_force_unlocked_then_released(make: Callable[[bool], Subject]) -> None:
    s = make(True)
    h = s.handle("k")
    assert h.acquire()
    assert s.force("k") is True
    assert s.force("k") is False  # nothing held: nothing freed
    with pytest.raises(keylock.NotOwnerError) as err:
        h.release()
    assert not isinstance(err.value, keylock.LeaseExpiredError)
    assert counts(s.metrics()) == expect(acquired=1, force_unlocked=1, lost=1, wait_count=1)


@pytest.mark.parametrize("kind", ["pool", "striped", "shm-pool"])
def test_lock_many_counts_each_key(kind: str) -> None:
    name = f"shm:keylock-py-metrics-{os.getpid()}-{next(_names)}"
    if kind == "pool":
        locks: keylock.KeyedLock = keylock.KeyPool(metrics=True)
    elif kind == "striped":
        locks = keylock.StripedLock(1024, seed=7, metrics=True)
    else:
        try:
            locks = keylock.KeyPool.open(name, metrics=True)
        except ValueError as e:
            pytest.skip(f"this build has no shared-memory scope: {e}")
    try:
        keys = ["a", "b", "c"]
        if isinstance(locks, keylock.StripedLock):
            # Keys on stripes of their own, so that each is one acquisition.
            keys = []
            for i in itertools.count():
                if locks.stripe_of(f"k{i}") not in {locks.stripe_of(k) for k in keys}:
                    keys.append(f"k{i}")
                if len(keys) == 3:
                    break
        with locks.lock_many(keys):
            pass
        many = locks.lock_many([keys[0], (keys[1], "shared")])
        with locks.lock(keys[0]):
            assert not many.acquire(blocking=False)
        assert many.acquire(timeout=5)
        many.release()
        m = locks.metrics()
        assert m is not None
        # One wait per call, one acquisition and one hold per key.
        assert counts(m) == expect(acquired=6, would_block=1, wait_count=3, hold_count=6)
    finally:
        if kind == "shm-pool":
            keylock.unlink(name)


# ---- the snapshot objects ----


def test_snapshot_objects() -> None:
    pool = keylock.KeyPool(metrics=True)
    m0 = pool.metrics()
    assert m0 is not None
    with pool.lock("k"):
        time.sleep(0.002)
    m = pool.metrics()
    assert m is not None and m != m0 and m == pool.metrics()
    assert isinstance(m, keylock.MetricsSnapshot) and isinstance(m.hold, keylock.HistogramSnapshot)
    with pytest.raises(AttributeError):
        m.acquired = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        m.hold.count = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        keylock.MetricsSnapshot()  # no constructor: made by metrics()

    # hold: one duration of at least 2 ms, in the bucket whose bound is the first at or above it.
    h = m.hold
    assert h.count == 1 and h.sum == h.max >= 0.002
    ((bound, n),) = h.buckets
    assert n == 1 and bound in keylock.HistogramSnapshot.BOUNDS
    i = keylock.HistogramSnapshot.BOUNDS.index(bound)
    assert keylock.HistogramSnapshot.BOUNDS[i - 1] < h.max <= bound
    assert h.quantile(0.5) == h.quantile(1) == h.max  # capped at the longest
    empty = m0.hold
    assert empty.count == 0 and empty.buckets == () and empty.quantile(0.5) is None
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError):
            h.quantile(bad)

    bounds = keylock.HistogramSnapshot.BOUNDS
    assert len(bounds) == 64 and bounds[0] == 0.0 and bounds[-1] == math.inf
    assert bounds[1:4] == (1e-9, 3e-9, 7e-9) and bounds[30] == (2**30 - 1) / 1e9

    d = m._asdict()
    assert d == {
        "acquired": 1,
        "contended": 0,
        "timed_out": 0,
        "would_block": 0,
        "cancelled": 0,
        "lease_expired": 0,
        "owner_died": 0,
        "lost": 0,
        "force_unlocked": 0,
        "wait": {"count": 1, "sum": 0.0, "max": 0.0, "buckets": ((0.0, 1),)},
        "hold": {"count": 1, "sum": h.sum, "max": h.max, "buckets": h.buckets},
    }
    assert repr(m) == (
        "MetricsSnapshot(acquired=1, contended=0, timed_out=0, would_block=0, cancelled=0, "
        "lease_expired=0, owner_died=0, lost=0, force_unlocked=0, "
        "wait=HistogramSnapshot(count=1, sum=0.0, max=0.0, p50=0.0, p99=0.0), "
        f"hold=HistogramSnapshot(count=1, sum={h.sum!r}, max={h.max!r}, p50={h.max!r}, "
        f"p99={h.max!r}))"
    )
    assert repr(empty) == "HistogramSnapshot(count=0, sum=0.0, max=0.0, p50=None, p99=None)"


def test_snapshot_of_a_url_shows_no_password() -> None:
    # A snapshot carries no name at all; the lock object's repr redacts its own.
    pool = keylock.KeyPool(metrics=True)
    assert "***" not in repr(pool.metrics()) and "@" not in repr(pool.metrics())


# ---- prometheus_client ----


def test_prometheus_exposition() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    pool = keylock.KeyPool(metrics=True)
    sem = keylock.Semaphore(1, metrics=True)
    registry = CollectorRegistry()
    collector = keylock.prometheus.collector(pool, name="orders")
    collector.add(sem, "tenants")
    registry.register(collector)

    for _ in range(3):
        with pool.lock("k"):
            pass
    held = pool.lock("k")
    assert held.acquire()
    assert not pool.lock("k").acquire(blocking=False)
    assert pool.force_unlock("k")
    with pytest.raises(keylock.NotOwnerError):
        held.release()
    with sem.acquire("t"):
        pass

    text = generate_latest(registry).decode()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    bounds = [repr(b) for b in keylock.prometheus.BUCKETS]
    assert bounds[0] == "1.023e-06" and bounds[-1] == "68.719476735" and len(bounds) == 14

    def histogram(name: str, lock: str, count: int, below: list[int], total: float) -> list[str]:
        out = [
            f'keylock_{name}_seconds_bucket{{le="{le}",lock="{lock}"}} {float(n)!r}'
            for le, n in zip(bounds, below, strict=True)
        ]
        out.append(f'keylock_{name}_seconds_bucket{{le="+Inf",lock="{lock}"}} {float(count)!r}')
        out.append(f'keylock_{name}_seconds_count{{lock="{lock}"}} {float(count)!r}')
        out.append(f'keylock_{name}_seconds_sum{{lock="{lock}"}} {total!r}')
        return out

    def counter(name: str, orders: int, tenants: int) -> list[str]:
        return [
            f'keylock_{name}_total{{lock="orders"}} {float(orders)!r}',
            f'keylock_{name}_total{{lock="tenants"}} {float(tenants)!r}',
        ]

    expected: list[str] = []
    nonzero = {"acquired": (4, 1), "would_block": (1, 0), "lost": (1, 0), "force_unlocked": (1, 0)}
    for name in COUNTS:
        expected += counter(name, *nonzero.get(name, (0, 0)))
    # Every acquire was granted at once: 4 and 1 waits of 0 s, under every bound.
    expected += histogram("wait", "orders", 4, [4] * 14, 0.0)
    expected += histogram("wait", "tenants", 1, [1] * 14, 0.0)
    # The holds took some time: each at most as long as its bucket's bound, read back from the
    # snapshots (nothing was held since the scrape).
    for lock, obj in (("orders", pool), ("tenants", sem)):
        m = obj.metrics()
        assert m is not None
        below = [
            sum(n for bound, n in m.hold.buckets if bound <= le)
            for le in keylock.prometheus.BUCKETS
        ]
        expected += histogram("hold", lock, m.hold.count, below, m.hold.sum)
    # Families in order: the counters, then wait, then hold; each family's samples by lock.
    assert lines == expected
    assert "# TYPE keylock_acquired_total counter" in text
    assert "# TYPE keylock_wait_seconds histogram" in text

    # The hold counts: 3 `with` blocks on the pool (the force-unlocked hold ended unreleased).
    assert 'keylock_hold_seconds_count{lock="orders"} 3.0' in lines


def test_prometheus_bucket_mapping_is_exact() -> None:
    """keylock's power-of-two buckets fall under the first fixed bound at or above their own."""
    from prometheus_client import CollectorRegistry, generate_latest

    b = keylock.HistogramSnapshot.BOUNDS
    hist = SimpleNamespace(
        # 2 at 0 ns, 1 at the first bound exactly, 1 just above it, 1 past the last bound.
        buckets=((0.0, 2), (b[10], 1), (b[11], 1), (b[40], 1)),
        count=5,
        sum=123.5,
    )
    snapshot = SimpleNamespace(**dict.fromkeys(COUNTS, 7), wait=hist, hold=hist)

    class Fake:
        def metrics(self) -> Any:
            return snapshot

    registry = CollectorRegistry()
    registry.register(keylock.prometheus.collector(Fake(), "x"))
    text = generate_latest(registry).decode()
    got = [
        line.split(" ")[1]
        for line in text.splitlines()
        if line.startswith("keylock_wait_seconds_bucket")
    ]
    assert got == ["3.0"] + ["4.0"] * 13 + ["5.0"]
    assert 'keylock_wait_seconds_sum{lock="x"} 123.5' in text
    assert 'keylock_lost_total{lock="x"} 7.0' in text


def test_prometheus_collector_refuses() -> None:
    pool = keylock.KeyPool(metrics=True)
    collector = keylock.prometheus.collector(pool, "a")
    with pytest.raises(ValueError, match="already"):
        collector.add(keylock.KeyPool(metrics=True), "a")
    with pytest.raises(ValueError, match="metrics=True"):
        collector.add(keylock.KeyPool(), "b")
    with pytest.raises(TypeError):
        collector.add(pool, 1)  # type: ignore[arg-type]
    collector.remove("a")
    with pytest.raises(KeyError):
        collector.remove("a")
    assert all(not family.samples for family in collector.collect())
    # describe() names the families without reading any lock object.
    names = [f.name for f in collector.describe()]
    assert names[0] == "keylock_acquired" and names[-2:] == [
        "keylock_wait_seconds",
        "keylock_hold_seconds",
    ]


def test_prometheus_client_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match="pip install prometheus-client"):
        keylock.prometheus.collector(keylock.KeyPool(metrics=True), "x")
    # `import keylock` (and keylock.prometheus) never import it.
    run_script(
        "import sys\n"
        "sys.modules['prometheus_client'] = None\n"
        "import keylock, keylock.prometheus\n"
        "assert keylock.KeyPool(metrics=True).metrics() is not None\n"
    )
    run_script("import sys, keylock\nassert 'prometheus_client' not in sys.modules, 'imported'\n")

"""Threads: mutual exclusion with exact counts on all three primitives, contended acquire,
try and timeout, and the GIL released while waiting."""

from __future__ import annotations

import random
import threading
import time

import pytest

import keylock
from conftest import Occupancy, run_script, run_threads, wait_until

THREADS = 8
ITERS = 1500
KEYS = 4


def _unsafe_increment(counts: dict[int, int], k: int) -> None:
    # Read, give other threads a chance to run, write: loses updates without mutual exclusion.
    v = counts[k]
    time.sleep(0)
    counts[k] = v + 1


@pytest.mark.parametrize("kind", ["pool", "striped"])
def test_stress_exact_counts(kind: str) -> None:
    locks = keylock.KeyPool() if kind == "pool" else keylock.StripedLock(KEYS)
    counts = dict.fromkeys(range(KEYS), 0)
    occupancy = Occupancy()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for i in range(ITERS):
            k = rng.randrange(KEYS)
            if i % 3 == 0:
                h = locks.lock(k)
                assert h.acquire(timeout=20)
                try:
                    with occupancy.hold(k):
                        _unsafe_increment(counts, k)
                finally:
                    h.release()
            else:
                with locks.lock(k), occupancy.hold(k):
                    _unsafe_increment(counts, k)

    run_threads([lambda s=s: worker(s) for s in range(THREADS)])
    occupancy.check()
    assert occupancy.completed == THREADS * ITERS
    assert sum(counts.values()) == THREADS * ITERS
    if isinstance(locks, keylock.KeyPool):
        assert len(locks) == 0
        assert locks.stats()["waiting"] == 0
    assert not any(locks.is_locked(k) for k in range(KEYS))


def test_rwlock_stress_exact_counts() -> None:
    rw = keylock.RwLock()
    state = {"a": 0, "b": 0}
    torn: list[tuple[int, int]] = []
    writers, readers, iters = 3, 5, 800
    occupancy = Occupancy()

    def writer() -> None:
        for _ in range(iters):
            with rw.write(), occupancy.hold("rw"):
                a = state["a"]
                time.sleep(0)
                state["a"] = a + 1
                state["b"] = state["b"] + 1

    def reader() -> None:
        for _ in range(iters):
            with rw.read(), occupancy.hold("rw", shared=True):
                a = state["a"]
                time.sleep(0)
                b = state["b"]
                if a != b:
                    torn.append((a, b))

    run_threads([writer] * writers + [reader] * readers)
    occupancy.check()
    assert occupancy.completed == (writers + readers) * iters
    assert torn == []
    assert state["a"] == state["b"] == writers * iters
    assert not rw.is_locked()


@pytest.mark.parametrize("kind", ["pool", "striped"])
def test_lock_many_transfers_keep_total(kind: str) -> None:
    locks = keylock.KeyPool() if kind == "pool" else keylock.StripedLock(8)
    accounts = [100] * 16
    occupancy = Occupancy()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(600):
            a, b = rng.sample(range(len(accounts)), 2)
            with locks.lock_many([a, b]), occupancy.hold(a), occupancy.hold(b):
                amount = rng.randrange(10)
                va, vb = accounts[a], accounts[b]
                time.sleep(0)
                accounts[a], accounts[b] = va - amount, vb + amount

    run_threads([lambda s=s: worker(s) for s in range(6)])
    occupancy.check()
    assert occupancy.completed == 2 * 6 * 600  # two keys per transfer
    assert sum(accounts) == 1600


def test_contended_acquire_waits_for_release() -> None:
    pool = keylock.KeyPool()
    h = pool.lock("k")
    h.acquire()
    order: list[str] = []

    def waiter() -> None:
        with pool.lock("k"):
            order.append("waiter")

    t = threading.Thread(target=waiter)
    t.start()
    wait_until(lambda: pool.stats()["waiting"] == 1, what="the waiter to queue")
    order.append("holder")
    h.release()
    t.join(20)
    assert not t.is_alive()
    assert order == ["holder", "waiter"]
    assert len(pool) == 0


@pytest.mark.parametrize("kind", ["pool", "striped", "write", "many"])
def test_contended_try_and_timeout(kind: str) -> None:
    if kind == "pool":
        p = keylock.KeyPool()
        mk = lambda: p.lock("k")  # noqa: E731
    elif kind == "striped":
        s = keylock.StripedLock(4)
        mk = lambda: s.lock("k")  # noqa: E731
    elif kind == "write":
        rw = keylock.RwLock()
        mk = rw.write
    else:
        p2 = keylock.KeyPool()
        mk = lambda: p2.lock_many(["x", "k"])  # noqa: E731
    holder = mk()
    holder.acquire()
    results: list[bool] = []

    def contender() -> None:
        h = mk()
        results.append(h.acquire(blocking=False))
        results.append(h.acquire(timeout=0.05))

    run_threads([contender])
    assert results == [False, False]
    holder.release()
    last = mk()
    run_threads([lambda: results.append(last.acquire(timeout=5))])
    assert results[-1] is True
    last.release()
    assert not mk().locked()


def test_timed_out_waiter_leaves_the_queue() -> None:
    pool = keylock.KeyPool()
    with pool.lock("k"):
        results: list[bool] = []
        run_threads([lambda: results.append(pool.lock("k").acquire(timeout=0.02))] * 4)
        assert results == [False] * 4
        assert pool.stats()["waiting"] == 0
    assert len(pool) == 0
    h = pool.lock("k")
    assert h.acquire(blocking=False)
    h.release()


def test_many_keys_memory_returns() -> None:
    pool = keylock.KeyPool()
    for i in range(10_000):
        with pool.lock(i):
            pass
    assert len(pool) == 0


def test_gil_released_while_waiting() -> None:
    # In a subprocess: if the blocked acquire kept the GIL, nothing else could run and this
    # would hang, which the subprocess timeout turns into a failure.
    run_script(
        """
import threading, keylock
pool = keylock.KeyPool()
holder = pool.lock("k")
holder.acquire()
got = threading.Event()
def waiter():
    with pool.lock("k"):
        got.set()
t = threading.Thread(target=waiter)
t.start()
while pool.stats()["waiting"] != 1:
    pass                      # spinning needs the GIL: the waiter must have let it go
progress = 0
for _ in range(200_000):      # pure-Python work, only possible while the waiter waits
    progress += 1
assert not got.is_set()
assert progress == 200_000
holder.release()
assert got.wait(20)
t.join(20)
assert len(pool) == 0
print("ok")
""",
        timeout=60,
    )


def test_uncontended_acquire_keeps_the_gil() -> None:
    # The other thread is parked in go.wait(); once go is set it needs the GIL to run. With a
    # switch interval of an hour, it gets the GIL only if main drops it, which an uncontended
    # acquire must not do: so "other" is logged after all 1000 iterations.
    run_script(
        """
import sys, threading, time, keylock
pool = keylock.KeyPool()
log = []
go = threading.Event()
def other():
    go.wait()
    log.append("other")
t = threading.Thread(target=other)
t.start()
while len(go._cond._waiters) != 1:
    time.sleep(0.001)
time.sleep(0.05)   # let it block in the lock, holding no GIL request
sys.setswitchinterval(3600)
go.set()
for i in range(1000):
    with pool.lock(i % 7):
        pass
    log.append(i)
sys.setswitchinterval(0.005)
t.join(20)
assert log.index("other") == 1000, log.index("other")
print("ok")
""",
        timeout=60,
    )

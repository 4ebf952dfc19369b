"""Oversubscribed stress: 32 threads (and hundreds of tasks) on 2 cores, with timeouts expiring,
tasks cancelled and exceptions raised inside critical sections. One holder at a time, every
critical section either completed (and counted) or interrupted, and nothing held or left
waiting afterwards."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

import keylock
from conftest import Occupancy, run_threads

THREADS = 32
ITERS = 300
KEYS = 8


class Boom(Exception):
    """Raised on purpose inside critical sections."""


def _bump(occupancy: Occupancy, counts: dict[int, int], k: int, boom: bool = False) -> None:
    # Read, let another thread run, write: loses updates unless the lock excludes. With `boom`,
    # an exception between the read and the write cuts the critical section short.
    with occupancy.hold(k):
        v = counts[k]
        time.sleep(0)
        if boom:
            raise Boom
        counts[k] = v + 1


@pytest.mark.parametrize("kind", ["pool", "striped"])
def test_threads_with_timeouts_and_exceptions(kind: str) -> None:
    locks = keylock.KeyPool() if kind == "pool" else keylock.StripedLock(4)
    rw = keylock.RwLock()
    counts = dict.fromkeys(range(KEYS), 0)
    keys_inside, rw_inside = Occupancy(), Occupancy()

    def worker(t: int) -> None:
        rng = random.Random(t)
        for _ in range(ITERS):
            k = rng.randrange(KEYS)
            roll = rng.random()
            try:
                with rw.read(timeout=30), rw_inside.hold("rw", shared=True):
                    if roll < 0.3:
                        # A short timeout: often expires while others hold the key.
                        with locks.lock(k, timeout=0.0005):
                            _bump(keys_inside, counts, k)
                    elif roll < 0.5:
                        with locks.lock(k):
                            _bump(keys_inside, counts, k, boom=True)
                    elif roll < 0.6:
                        with locks.lock_many([k, (k + 3) % KEYS], timeout=0.001):
                            _bump(keys_inside, counts, k)
                    else:
                        with locks.lock(k):
                            _bump(keys_inside, counts, k)
            except (keylock.LockTimeout, Boom):
                pass

    def writer() -> None:
        for _ in range(50):
            try:
                with rw.write(timeout=0.002), rw_inside.hold("rw"):
                    time.sleep(0)
            except keylock.LockTimeout:
                pass

    run_threads([lambda t=t: worker(t) for t in range(THREADS)] + [writer, writer], timeout=120)
    keys_inside.check()
    rw_inside.check()
    # Only a critical section that ran to its end wrote its increment.
    assert sum(counts.values()) == keys_inside.completed
    assert not any(locks.is_locked(k) for k in range(KEYS))
    with rw.write(timeout=1):
        pass
    if isinstance(locks, keylock.KeyPool):
        assert len(locks) == 0
        stats = locks.stats()
        assert stats["held"] == 0 and stats["waiting"] == 0 and stats["entries_in_use"] == 0


def test_tasks_and_threads_with_cancellations() -> None:
    pool = keylock.KeyPool()
    counts = dict.fromkeys(range(KEYS), 0)
    occupancy = Occupancy()

    async def task(n: int) -> None:
        rng = random.Random(n)
        for _ in range(20):
            k = rng.randrange(KEYS)
            try:
                # Cancelled at random points: while waiting, right after being granted, or
                # inside the critical section at its await (which then writes nothing).
                async with asyncio.timeout(rng.choice([0.0001, 0.001, 0.01, 1.0])):
                    async with pool.lock(k):
                        with occupancy.hold(k):
                            v = counts[k]
                            await asyncio.sleep(0)
                            if rng.random() < 0.2:
                                raise Boom
                            counts[k] = v + 1
            except (TimeoutError, Boom):
                pass

    async def main() -> None:
        await asyncio.gather(*(task(n) for n in range(400)))

    def thread_worker(t: int) -> None:
        rng = random.Random(1000 + t)
        for _ in range(200):
            k = rng.randrange(KEYS)
            try:
                with pool.lock(k, timeout=0.001):
                    _bump(occupancy, counts, k)
            except keylock.LockTimeout:
                pass

    run_threads(
        [lambda: asyncio.run(main())] + [lambda t=t: thread_worker(t) for t in range(16)],
        timeout=120,
    )
    occupancy.check()
    assert sum(counts.values()) == occupancy.completed
    assert len(pool) == 0
    stats = pool.stats()
    assert stats["held"] == 0 and stats["waiting"] == 0

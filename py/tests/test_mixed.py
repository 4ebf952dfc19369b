"""Threads and asyncio tasks contending for the same key in one process: one queue, exact
counts."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import keylock
from conftest import DEADLOCK, Occupancy, run_threads


@pytest.mark.parametrize("kind", ["pool", "striped"])
def test_threads_and_tasks_on_one_key(kind: str) -> None:
    locks = keylock.KeyPool() if kind == "pool" else keylock.StripedLock(4)
    counter = [0]
    occupancy = Occupancy()
    thread_iters, threads, tasks, task_iters = 400, 3, 50, 20

    def thread_worker() -> None:
        for i in range(thread_iters):
            h = locks.lock("shared")
            if i % 2:
                assert h.acquire(timeout=DEADLOCK)
                try:
                    with occupancy.hold("shared"):
                        v = counter[0]
                        time.sleep(0)
                        counter[0] = v + 1
                finally:
                    h.release()
            else:
                with h, occupancy.hold("shared"):
                    v = counter[0]
                    time.sleep(0)
                    counter[0] = v + 1

    def loop_worker() -> None:
        async def task() -> None:
            for _ in range(task_iters):
                async with locks.lock("shared"):
                    with occupancy.hold("shared"):
                        v = counter[0]
                        await asyncio.sleep(0)
                        time.sleep(0)  # let threads run while the task holds the key
                        counter[0] = v + 1

        async def main() -> None:
            await asyncio.wait_for(asyncio.gather(*(task() for _ in range(tasks))), DEADLOCK)

        asyncio.run(main())

    run_threads([thread_worker] * threads + [loop_worker, loop_worker])
    occupancy.check()
    assert occupancy.completed == threads * thread_iters + 2 * tasks * task_iters
    assert counter[0] == threads * thread_iters + 2 * tasks * task_iters
    assert not locks.is_locked("shared")
    if isinstance(locks, keylock.KeyPool):
        assert len(locks) == 0 and locks.stats()["waiting"] == 0


def test_thread_releases_what_a_task_acquired() -> None:
    pool = keylock.KeyPool()

    async def main() -> None:
        h = pool.lock("k")
        assert await h.acquire_async()
        t = threading.Thread(target=h.release)
        t.start()
        t.join(DEADLOCK)
        assert not h.locked()

    asyncio.run(main())
    assert len(pool) == 0


def test_rwlock_threads_and_tasks() -> None:
    rw = keylock.RwLock()
    state = {"a": 0, "b": 0}
    torn: list[int] = []
    occupancy = Occupancy()

    def writer() -> None:
        for _ in range(300):
            with rw.write(), occupancy.hold("rw"):
                state["a"] += 1
                time.sleep(0)
                state["b"] += 1

    def readers() -> None:
        async def reader() -> None:
            for _ in range(100):
                async with rw.read():
                    with occupancy.hold("rw", shared=True):
                        a = state["a"]
                        await asyncio.sleep(0)
                        if state["b"] != a:
                            torn.append(a)

        async def main() -> None:
            await asyncio.wait_for(asyncio.gather(*(reader() for _ in range(20))), DEADLOCK)

        asyncio.run(main())

    run_threads([writer, writer, readers])
    occupancy.check()
    assert occupancy.completed == 2 * 300 + 20 * 100
    assert torn == []
    assert state == {"a": 600, "b": 600}
    assert not rw.is_locked()

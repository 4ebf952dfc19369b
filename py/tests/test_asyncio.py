"""asyncio: waiting occupies no thread and never blocks the loop; cancellation (task.cancel,
asyncio.wait_for, asyncio.timeout) leaves nothing held and nothing queued."""

from __future__ import annotations

import asyncio
import random
import sys
import threading

import pytest

import keylock
from conftest import Occupancy, arun, async_wait_until


def _handles() -> list[tuple[str, keylock.LockHandle, keylock.LockHandle]]:
    """(name, holder, contender) pairs where the holder blocks the contender."""
    pool, striped, rw = keylock.KeyPool(), keylock.StripedLock(8), keylock.RwLock()
    return [
        ("pool", pool.lock("k"), pool.lock("k")),
        ("striped", striped.lock("k"), striped.lock("k")),
        ("many", pool.lock("m2"), pool.lock_many(["m1", "m2"])),
        ("read-blocks-write", rw.read(), rw.write()),
        ("write-blocks-read", rw.write(), rw.read()),
    ]


def test_acquire_async_basics() -> None:
    async def main() -> None:
        for name, holder, contender in _handles():
            assert await holder.acquire_async() is True, name
            assert await contender.acquire_async(timeout=0) is False, name
            assert await contender.acquire_async(timeout=0.02) is False, name
            holder.release()
            assert await contender.acquire_async(timeout=5) is True, name
            contender.release()
            async with contender as entered:
                assert entered is None
                assert holder.acquire(blocking=False) is False, name
            assert holder.acquire(blocking=False) is True, name
            holder.release()

    arun(main())


def test_async_with_timeout_raises_lock_timeout() -> None:
    async def main() -> None:
        pool, rw = keylock.KeyPool(), keylock.RwLock()
        async with pool.lock("k"):
            with pytest.raises(keylock.LockTimeout):
                async with pool.lock("k", timeout=0.02):
                    pytest.fail("entered a held lock")  # pragma: no cover
            with pytest.raises(TimeoutError):
                async with pool.lock_many(["j", "k"], timeout=0):
                    pytest.fail("entered a held lock")  # pragma: no cover
        async with rw.read():
            with pytest.raises(keylock.LockTimeout):
                async with rw.write(timeout=0.02):
                    pytest.fail("entered a held lock")  # pragma: no cover
        assert len(pool) == 0 and not rw.is_locked()

    arun(main())


def test_async_with_releases_on_exception() -> None:
    async def main() -> None:
        pool = keylock.KeyPool()
        with pytest.raises(ValueError):
            async with pool.lock("k"):
                raise ValueError
        assert len(pool) == 0

    arun(main())


@pytest.mark.parametrize("kind", ["pool", "striped", "rw"])
def test_async_stress_exact_counts(kind: str) -> None:
    tasks, iters, keys = 100, 30, 4

    async def main() -> None:
        pool, striped, rw = keylock.KeyPool(), keylock.StripedLock(keys), keylock.RwLock()
        counts = dict.fromkeys(range(keys), 0)
        # The rw kind takes the write lock for every key: one holder at a time in all.
        occupancy = Occupancy()
        slot = (lambda k: "rw") if kind == "rw" else (lambda k: k)

        def handle(k: int) -> keylock.LockHandle:
            if kind == "pool":
                return pool.lock(k)
            if kind == "striped":
                return striped.lock(k)
            return rw.write()

        async def worker(seed: int) -> None:
            rng = random.Random(seed)
            for i in range(iters):
                k = rng.randrange(keys)
                if i % 2:
                    h = handle(k)
                    assert await h.acquire_async()
                    try:
                        with occupancy.hold(slot(k)):
                            v = counts[k]
                            await asyncio.sleep(0)
                            counts[k] = v + 1
                    finally:
                        h.release()
                else:
                    async with handle(k):
                        with occupancy.hold(slot(k)):
                            v = counts[k]
                            await asyncio.sleep(0)
                            counts[k] = v + 1

        await asyncio.gather(*(worker(s) for s in range(tasks)))
        occupancy.check()
        assert occupancy.completed == tasks * iters
        assert sum(counts.values()) == tasks * iters
        assert len(pool) == 0 and pool.stats()["waiting"] == 0
        assert not rw.is_locked()

    arun(main())


def test_cancellation_stress_leaves_nothing_held() -> None:
    # Tasks are cancelled (task.cancel, wait_for, asyncio.timeout, acquire_async's timeout) at
    # random moments: while queued, right after being granted, and inside the critical section,
    # at its await. A cancel inside legitimately leaves an entry without its increment, so the
    # check is not "increments == entries" but: one holder at a time, every entry either
    # completed (and then counted) or interrupted, and nothing held or queued afterwards.
    async def main() -> None:
        pool = keylock.KeyPool()
        counts = {"k": 0}
        occupancy = Occupancy()
        rng = random.Random(1)

        async def worker() -> None:
            async with pool.lock("k"):
                with occupancy.hold("k"):
                    v = counts["k"]
                    await asyncio.sleep(0)
                    counts["k"] = v + 1

        async def one_round(i: int) -> None:
            mode = i % 4
            if mode == 0:
                t = asyncio.ensure_future(worker())
                await asyncio.sleep(rng.random() * 0.002)
                t.cancel()
                try:
                    await t
                except asyncio.CancelledError:
                    pass
            elif mode == 1:
                try:
                    await asyncio.wait_for(worker(), rng.random() * 0.002)
                except asyncio.TimeoutError:
                    pass
            elif mode == 2 and sys.version_info >= (3, 11):
                try:
                    async with asyncio.timeout(rng.random() * 0.002):
                        await worker()
                except TimeoutError:
                    pass
            else:
                h = pool.lock("k")
                if await h.acquire_async(timeout=rng.random() * 0.002):
                    try:
                        with occupancy.hold("k"):
                            counts["k"] += 1
                    finally:
                        h.release()

        for _ in range(10):
            await asyncio.gather(*(one_round(i) for i in range(200)))
        occupancy.check()
        # Only a completed critical section wrote its increment.
        assert counts["k"] == occupancy.completed
        assert len(pool) == 0
        assert pool.stats()["waiting"] == 0
        async with pool.lock("k", timeout=1):
            pass

    arun(main())


def test_cancel_after_grant_passes_the_lock_on() -> None:
    # The holder releases (handing the lock to the queued task) and the task is cancelled
    # before it runs again: the lock must not stay held by the cancelled task.
    async def main() -> None:
        for make in (
            lambda p, rw: p.lock("k"),
            lambda p, rw: p.lock_many(["k", "j"]),
            lambda p, rw: rw.write(),
        ):
            pool, rw = keylock.KeyPool(), keylock.RwLock()
            holder = make(pool, rw)
            assert await holder.acquire_async()

            async def waiter(h: keylock.LockHandle) -> None:
                async with h:
                    pytest.fail("cancelled task entered")  # pragma: no cover

            t = asyncio.ensure_future(waiter(make(pool, rw)))
            await asyncio.sleep(0.01)  # queued long enough to be handed the lock directly
            holder.release()
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert not holder.locked()
            assert len(pool) == 0 and pool.stats()["waiting"] == 0 and not rw.is_locked()
            assert await holder.acquire_async(timeout=0)
            holder.release()

    arun(main())


def test_ten_thousand_waiters_cost_no_threads() -> None:
    n = 10_000

    async def main() -> None:
        pool = keylock.KeyPool()
        threads_before = threading.active_count()
        order: list[int] = []
        holder = pool.lock("hot")
        holder.acquire()

        async def waiter(i: int) -> None:
            async with pool.lock("hot"):
                order.append(i)

        tasks = [asyncio.ensure_future(waiter(i)) for i in range(n)]
        await async_wait_until(lambda: pool.stats()["waiting"] == n, "all tasks to queue")
        assert threading.active_count() == threads_before
        holder.release()
        await asyncio.gather(*tasks)
        assert sorted(order) == list(range(n))
        assert len(pool) == 0 and pool.stats()["waiting"] == 0
        assert threading.active_count() == threads_before

    arun(main(), timeout=60)


def test_waiting_task_does_not_block_the_loop() -> None:
    async def main() -> None:
        pool = keylock.KeyPool()
        release = threading.Event()
        held = threading.Event()

        def holder() -> None:
            with pool.lock("k"):
                held.set()
                release.wait(30)

        th = threading.Thread(target=holder)
        th.start()
        assert await asyncio.get_running_loop().run_in_executor(None, held.wait, 20)
        h = pool.lock("k")
        waiting = asyncio.ensure_future(h.acquire_async())
        ticks = 0
        for _ in range(50):  # the loop keeps running other work while the task waits
            await asyncio.sleep(0)
            ticks += 1
        assert ticks == 50 and not waiting.done()
        release.set()
        assert await asyncio.wait_for(waiting, 20) is True
        h.release()
        th.join(20)

    arun(main())


def test_awaitable_close_and_reuse() -> None:
    async def main() -> None:
        pool = keylock.KeyPool()
        h = pool.lock("k")
        aw = h.acquire_async()
        assert await aw is True
        with pytest.raises(RuntimeError):
            await aw  # an acquire is awaited once
        h.release()
        # Closed before it ran: nothing taken.
        aw2 = h.acquire_async()
        aw2.close()
        assert not h.locked()
        # Pending, then closed: leaves the queue.
        h.acquire()
        aw3 = h.acquire_async()
        fut = aw3.send(None)
        assert isinstance(fut, asyncio.Future)
        assert pool.stats()["waiting"] == 1
        aw3.close()
        assert pool.stats()["waiting"] == 0
        h.release()
        assert len(pool) == 0
        # Thrown into: raises what was thrown, leaves the queue.
        h.acquire()
        aw4 = h.acquire_async()
        aw4.send(None)
        with pytest.raises(KeyError):
            aw4.throw(KeyError("x"))
        assert pool.stats()["waiting"] == 0
        h.release()

    arun(main())


def test_acquire_async_outside_a_loop_needs_one_only_when_waiting() -> None:
    pool = keylock.KeyPool()
    h = pool.lock("k")
    aw = h.acquire_async()
    with pytest.raises(StopIteration) as stop:
        aw.send(None)  # free: taken at once, no loop needed
    assert stop.value.value is True
    aw2 = h.acquire_async()
    with pytest.raises(RuntimeError):
        aw2.send(None)  # held: waiting needs the running loop
    h.release()
    assert len(pool) == 0 and pool.stats()["waiting"] == 0

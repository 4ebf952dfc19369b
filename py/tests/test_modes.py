"""Per-key modes: `read(key)` handles share a key, `write(key)` / `lock(key)` handles hold it
alone, with `with` and `async with`, FIFO per key (a reader behind a waiting writer waits), and
`lock_many` with a mode per key. Stress tests count holders inside at once: exactly one for
exclusive holders, and N readers measured inside together."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable

import pytest

import keylock
from conftest import DEADLOCK, Occupancy, arun, run_threads, wait_until

LOCKS: dict[str, Callable[[], keylock.KeyedLock]] = {
    "pool": keylock.KeyPool,
    "striped": lambda: keylock.StripedLock(16),
    "fifo-pool": lambda: keylock.KeyPool(fifo=True),
}
each_lock = pytest.mark.parametrize("make", list(LOCKS.values()), ids=list(LOCKS))


@each_lock
def test_read_and_write_handles_with_with(make: Callable[[], keylock.KeyedLock]) -> None:
    locks = make()
    r1, r2, w = locks.read("doc"), locks.read("doc"), locks.write("doc")
    assert (r1.mode, w.mode, locks.lock("doc").mode) == ("shared", "exclusive", "exclusive")
    with r1, r2:  # readers share
        info = locks.info("doc")
        assert info is not None and (info.mode, info.holders) == ("shared", 2)
        assert w.locked() and w.acquire(blocking=False) is False
        assert not r1.locked()  # another reader could enter
        with pytest.raises(keylock.LockTimeout):
            with locks.write("doc", timeout=0.01):
                pytest.fail("a writer entered with readers inside")  # pragma: no cover
    with w:
        assert r1.locked() and r1.acquire(blocking=False) is False
        assert r1.acquire(timeout=0.01) is False
    assert not locks.is_locked("doc")


@each_lock
def test_read_and_write_handles_with_async_with(make: Callable[[], keylock.KeyedLock]) -> None:
    async def main() -> None:
        locks = make()
        async with locks.read("doc"), locks.read("doc"):
            info = locks.info("doc")
            assert info is not None and info.holders == 2
            assert await locks.write("doc").acquire_async(timeout=0.01) is False
            with pytest.raises(keylock.LockTimeout):
                async with locks.write("doc", timeout=0):
                    pytest.fail("entered")  # pragma: no cover
        async with locks.write("doc"):
            assert await locks.read("doc").acquire_async(timeout=0) is False
        assert not locks.is_locked("doc")

    arun(main())


@each_lock
def test_n_readers_are_inside_at_once_threads(make: Callable[[], keylock.KeyedLock]) -> None:
    # Every reader waits inside for all the others: only possible if all N hold the key at once
    # (the barrier's timeout turns a lock that serializes readers into a failure).
    locks = make()
    n = 8
    inside = threading.Barrier(n, timeout=DEADLOCK)
    occupancy = Occupancy()

    def reader() -> None:
        with locks.read("doc"), occupancy.hold("doc", shared=True):
            inside.wait()

    run_threads([reader] * n)
    occupancy.check()
    assert occupancy.max_shared["doc"] == n
    assert not locks.is_locked("doc")


def test_n_readers_are_inside_at_once_tasks() -> None:
    async def main() -> None:
        pool = keylock.KeyPool()
        n = 50
        occupancy = Occupancy()
        all_in = asyncio.Event()
        count = [0]

        async def reader() -> None:
            async with pool.read("doc"):
                with occupancy.hold("doc", shared=True):
                    count[0] += 1
                    if count[0] == n:
                        all_in.set()
                    await all_in.wait()

        await asyncio.gather(*(reader() for _ in range(n)))
        occupancy.check()
        assert occupancy.max_shared["doc"] == n
        assert len(pool) == 0

    arun(main())


def test_a_reader_behind_a_waiting_writer_waits() -> None:
    pool = keylock.KeyPool()
    first, writer, late = pool.read("k"), pool.write("k"), pool.read("k")
    assert first.acquire()
    order: list[str] = []

    def write() -> None:
        with writer:
            order.append("writer")

    t = threading.Thread(target=write)
    t.start()
    wait_until(lambda: (pool.info("k") or pool.info("none")).waiters == 1, what="writer queued")
    # A reader could share with `first`, but a writer is queued: FIFO per key says wait.
    assert late.acquire(blocking=False) is False
    assert late.acquire(timeout=0.02) is False
    order.append("first reader out")
    first.release()
    t.join(DEADLOCK)
    assert late.acquire(timeout=DEADLOCK)
    order.append("late reader")
    late.release()
    assert order == ["first reader out", "writer", "late reader"]
    assert len(pool) == 0


@pytest.mark.parametrize("fifo", [False, True])
def test_no_writer_starvation(fifo: bool) -> None:
    # Readers overlap continuously (each re-enters before the others leave); a writer still
    # gets in.
    pool = keylock.KeyPool(fifo=fifo)
    stop = threading.Event()
    got: list[bool] = []

    def reader() -> None:
        while not stop.is_set():
            with pool.read("k"):
                time.sleep(0.001)

    def writer() -> None:
        time.sleep(0.02)
        w = pool.write("k")
        got.append(w.acquire(timeout=DEADLOCK))
        stop.set()
        w.release()

    run_threads([reader] * 4 + [writer])
    assert got == [True]
    assert len(pool) == 0


@pytest.mark.parametrize("fifo", [False, True])
def test_no_reader_starvation(fifo: bool) -> None:
    pool = keylock.KeyPool(fifo=fifo)
    stop = threading.Event()
    got: list[bool] = []

    def writer() -> None:
        while not stop.is_set():
            with pool.write("k"):
                time.sleep(0.0005)

    def reader() -> None:
        time.sleep(0.02)
        r = pool.read("k")
        got.append(r.acquire(timeout=DEADLOCK))
        stop.set()
        r.release()

    run_threads([writer] * 3 + [reader])
    assert got == [True]
    assert len(pool) == 0


@each_lock
def test_lock_many_with_a_mode_per_key(make: Callable[[], keylock.KeyedLock]) -> None:
    locks = make()
    m = locks.lock_many([("src", "shared"), "dst", ("src", "shared")])
    assert m.keys == [b"src", b"dst", b"src"]
    assert m.modes == ["shared", "exclusive", "shared"]
    other_reader = locks.read("src")
    with m:
        if not (
            isinstance(locks, keylock.StripedLock)
            and locks.stripe_of("src") == locks.stripe_of("dst")
        ):
            assert other_reader.acquire(blocking=False)  # src is shared
            other_reader.release()
            assert locks.write("src").acquire(blocking=False) is False
        assert locks.read("dst").acquire(blocking=False) is False  # dst is exclusive
    # The strongest mode asked of a key wins: named shared and exclusive, it is exclusive.
    both = locks.lock_many([("x", "shared"), ("x", "exclusive")])
    with both:
        assert locks.read("x").acquire(blocking=False) is False
    assert not any(locks.is_locked(k) for k in ("src", "dst", "x"))


class Boom(Exception):
    """Raised on purpose inside critical sections."""


@pytest.mark.parametrize("kind", ["pool", "striped"])
def test_mixed_mode_oversubscribed_stress(kind: str) -> None:
    # 24 threads and 200 tasks on 2 cores, readers and writers of 6 keys, with short timeouts
    # that expire, tasks cancelled at random points, and exceptions inside. Every entry is
    # counted: never two writers, never a writer with a reader; readers overlap; every critical
    # section completed or interrupted; nothing held or queued at the end.
    locks: keylock.KeyedLock = keylock.KeyPool() if kind == "pool" else keylock.StripedLock(4)
    keys = 6
    occupancy = Occupancy()
    # A StripedLock's readers and writers of different keys may share a stripe: the exclusion
    # to check is per stripe.
    slot: Callable[[int], object] = (
        (lambda k: locks.stripe_of(k)) if isinstance(locks, keylock.StripedLock) else (lambda k: k)
    )
    writes = [0]

    def body(k: int, shared: bool, rng: random.Random) -> None:
        with occupancy.hold(slot(k), shared=shared):
            time.sleep(0)
            if rng.random() < 0.1:
                raise Boom
            if not shared:
                writes[0] += 1

    def thread_worker(t: int) -> None:
        rng = random.Random(t)
        for _ in range(150):
            k = rng.randrange(keys)
            shared = rng.random() < 0.7
            timeout = rng.choice([None, 0.0005, 0.005])
            h = locks.read(k, timeout) if shared else locks.write(k, timeout)
            try:
                if rng.random() < 0.5:
                    with h:
                        body(k, shared, rng)
                elif h.acquire(timeout=-1 if timeout is None else timeout):
                    try:
                        body(k, shared, rng)
                    finally:
                        h.release()
            except (keylock.LockTimeout, Boom):
                pass

    async def task(n: int) -> None:
        rng = random.Random(10_000 + n)
        for _ in range(15):
            k = rng.randrange(keys)
            shared = rng.random() < 0.7
            h = locks.read(k) if shared else locks.write(k)

            async def critical(
                h: keylock.LockHandle = h, k: int = k, shared: bool = shared
            ) -> None:
                async with h:
                    with occupancy.hold(slot(k), shared=shared):
                        await asyncio.sleep(0)
                        if rng.random() < 0.1:
                            raise Boom
                        if not shared:
                            writes[0] += 1

            try:
                # Cancelled at random points: queued, just granted, or inside at its await.
                await asyncio.wait_for(critical(), rng.choice([0.0002, 0.002, 1.0]))
            except (asyncio.TimeoutError, TimeoutError, Boom):
                pass

    def loop_worker() -> None:
        async def main() -> None:
            await asyncio.gather(*(task(n) for n in range(200)))

        asyncio.run(main())

    run_threads([lambda t=t: thread_worker(t) for t in range(24)] + [loop_worker], timeout=120)
    occupancy.check()
    assert occupancy.entered > 0 and occupancy.completed > 0
    assert max(occupancy.max_shared.values()) > 1, "readers never overlapped"
    assert not any(locks.is_locked(k) for k in range(keys))
    if isinstance(locks, keylock.KeyPool):
        stats = locks.stats()
        assert stats["held"] == 0 and stats["waiting"] == 0 and stats["entries_in_use"] == 0
    for k in range(keys):  # and every key is usable again in both modes
        with locks.write(k, timeout=1):
            pass
        with locks.read(k, timeout=1):
            pass

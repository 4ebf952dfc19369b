"""A waiter is in its key's queue before anyone else can run: a blocking acquire joins the
queue before it lets the GIL go, and an asyncio acquire before it yields to the loop. So a
reader that comes after a waiting writer waits too (FIFO per key), however long the writer
takes to start its wait.

The blocking tests widen the window with a hook of the native module: a stalled waiter stops,
GIL released, right after it joined the queue and before it waits, until the test lets it go.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator

import pytest

import keylock
from conftest import DEADLOCK, arun, wait_until
from keylock import _keylock

LOCKS: dict[str, Callable[[], keylock.KeyedLock]] = {
    "pool": keylock.KeyPool,
    "striped": lambda: keylock.StripedLock(16),
    "fifo-pool": lambda: keylock.KeyPool(fifo=True),
    "shm": lambda: keylock.KeyPool.open(f"shm:keylock-py-queue-{os.getpid()}"),
}


@pytest.fixture(params=list(LOCKS), ids=list(LOCKS))
def locks(request: pytest.FixtureRequest) -> Iterator[keylock.KeyedLock]:
    try:
        made = LOCKS[request.param]()
    except ValueError:
        pytest.skip("this build has no shared-memory scope")
    yield made
    if request.param == "shm":
        keylock.unlink(made.name)


@pytest.fixture
def stalled_waiters() -> Iterator[None]:
    """Blocking waiters stall between joining the queue and waiting, until the test ends."""
    _keylock._set_waiter_stall(True)
    try:
        yield
    finally:
        _keylock._set_waiter_stall(False)


def try_read(locks: keylock.KeyedLock, key: str) -> bool:
    """Whether a non-blocking reader got in (released again at once, so nothing leaks)."""
    late = locks.read(key)
    got = late.acquire(blocking=False)
    if got:
        late.release()
    return got


def test_a_blocked_writer_is_queued_before_the_gil_goes(
    locks: keylock.KeyedLock, stalled_waiters: None
) -> None:
    reader = locks.read("k")
    assert reader.acquire(blocking=False)
    writer = locks.write("k")
    results: list[bool] = []
    t = threading.Thread(
        target=lambda: results.append(writer.acquire(timeout=DEADLOCK)), daemon=True
    )
    t.start()
    wait_until(lambda: _keylock._stalled_waiters() == 1, what="the writer to stall")
    try:
        assert try_read(locks, "k") is False, "a reader passed a writer that waits for the key"
    finally:
        _keylock._set_waiter_stall(False)
        reader.release()
        t.join(DEADLOCK)
    assert not t.is_alive(), "the writer never got the key"
    assert results == [True]
    assert try_read(locks, "k") is False, "the writer holds the key"
    writer.release()
    assert try_read(locks, "k") is True


def test_a_blocked_many_keys_writer_is_queued_before_the_gil_goes(
    stalled_waiters: None,
) -> None:
    pool = keylock.KeyPool()
    reader = pool.read("b")
    assert reader.acquire(blocking=False)
    both = pool.lock_many(["a", "b"])
    results: list[bool] = []
    t = threading.Thread(target=lambda: results.append(both.acquire(timeout=DEADLOCK)), daemon=True)
    t.start()
    wait_until(lambda: _keylock._stalled_waiters() == 1, what="the writer to stall")
    try:
        assert try_read(pool, "b") is False, "a reader passed a writer that waits for the key"
    finally:
        _keylock._set_waiter_stall(False)
        reader.release()
        t.join(DEADLOCK)
    assert results == [True]
    both.release()


def test_stats_count_a_waiter_only_once_it_is_queued(stalled_waiters: None) -> None:
    pool = keylock.KeyPool()
    reader = pool.read("k")
    assert reader.acquire(blocking=False)
    writer = pool.write("k")
    t = threading.Thread(target=lambda: writer.acquire(timeout=DEADLOCK), daemon=True)
    t.start()
    # Whenever the count shows the writer, it is queued: a reader must not get in.
    wait_until(lambda: pool.stats()["waiting"] == 1, what="the writer to be counted")
    try:
        assert try_read(pool, "k") is False, "a waiter was counted before it was queued"
    finally:
        _keylock._set_waiter_stall(False)
        reader.release()
        t.join(DEADLOCK)
    assert not t.is_alive()
    writer.release()
    assert pool.stats()["waiting"] == 0


def test_an_asyncio_writer_is_queued_before_it_yields(locks: keylock.KeyedLock) -> None:
    async def main() -> None:
        reader = locks.read("k")
        assert reader.acquire(blocking=False)
        writer = locks.write("k")
        task = asyncio.ensure_future(writer.acquire_async(timeout=DEADLOCK))
        # One turn of the loop: the task has run up to its wait.
        await asyncio.sleep(0)
        assert not task.done()
        assert try_read(locks, "k") is False, "a reader passed a task that waits for the key"
        reader.release()
        assert await asyncio.wait_for(task, DEADLOCK) is True
        assert try_read(locks, "k") is False
        writer.release()
        assert try_read(locks, "k") is True

    arun(main())

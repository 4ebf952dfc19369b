"""The server scopes, Redis and PostgreSQL, through the same front end: two lock objects opened
from one URL are two processes' views of the same keys. Each test runs on a redis-server and on
a PostgreSQL cluster of this session (the `redis_url` and `postgres_url` fixtures), each with a
prefix of its own, so that no two tests meet.

What PostgreSQL lacks (the keyed semaphore) is tested in test_semaphore.py; here every check
holds on both scopes."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time

import pytest

import keylock
from conftest import DEADLOCK, RedactedUrl, arun, run_threads, server_url

_names = itertools.count()


@pytest.fixture(params=["redis", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    """A fresh scope (a prefix of its own) on each server."""
    base = server_url(request, request.param)
    return RedactedUrl(f"{base}?prefix=py-scope-{os.getpid()}-{next(_names)}")


def opens(url: str) -> tuple[keylock.KeyPool, keylock.KeyPool]:
    return keylock.KeyPool.open(url), keylock.KeyPool.open(url)


def test_two_opens_exclude_each_other_with_rising_fences(url: str) -> None:
    a, b = opens(url)
    first = a.lock("x")
    assert first.acquire(blocking=False)
    f1 = first.fence
    assert f1 is not None and f1 >= 1
    other = b.lock("x")
    assert other.acquire(blocking=False) is False
    assert b.is_locked("x")
    info = b.info("x")
    assert info is not None and info.mode == "exclusive" and info.fence == f1
    first.release()
    assert other.acquire(timeout=DEADLOCK)
    f2 = other.fence
    assert f2 is not None and f2 > f1
    assert first.is_current() is False and other.is_current()
    other.release()
    assert not a.is_locked("x")
    # Fences keep rising, whichever lock object takes the key.
    fences = []
    for pool in (a, b, a, b):
        with pool.lock("x") as h:
            fences.append(pool.info("x").fence)
            assert h
    assert fences == sorted(fences) and len(set(fences)) == 4 and fences[0] > f2


def test_with_timeout_raises_lock_timeout(url: str) -> None:
    a, b = opens(url)
    with a.lock("t"):
        with pytest.raises(keylock.LockTimeout):
            with b.lock("t", timeout=0.05):
                pass
    with b.lock("t", timeout=DEADLOCK):
        assert a.is_locked("t")


def test_shared_holders_share_across_opens_and_keep_a_writer_out(url: str) -> None:
    a, b = opens(url)
    r1, r2 = a.read("s"), b.read("s")
    assert r1.acquire(blocking=False) and r2.acquire(blocking=False)
    assert r1.mode == "shared"
    writer = a.lock("s")
    assert writer.acquire(blocking=False) is False
    r1.release()
    assert writer.acquire(blocking=False) is False
    r2.release()
    assert writer.acquire(blocking=False)
    reader = b.read("s")
    assert reader.acquire(blocking=False) is False
    writer.release()


def test_a_waiter_on_the_other_open_gets_the_key_at_release(url: str) -> None:
    a, b = opens(url)
    h = a.lock("w")
    assert h.acquire()
    got = threading.Event()

    def wait() -> None:
        with b.lock("w", timeout=DEADLOCK):
            got.set()

    t = threading.Thread(target=wait)
    t.start()
    assert not got.wait(0.2)
    h.release()
    assert got.wait(DEADLOCK)
    t.join(DEADLOCK)
    assert not t.is_alive()


def test_threads_on_both_opens_count_exactly_one_holder_inside(url: str) -> None:
    a, b = opens(url)
    keys, rounds, threads = 3, 20, 4
    counts = [0] * keys
    inside = [0] * keys
    overlaps = []
    mutex = threading.Lock()

    def worker(i: int) -> None:
        pool = a if i % 2 == 0 else b
        for r in range(rounds):
            k = (i + r) % keys
            with pool.lock(f"c{k}", timeout=DEADLOCK):
                with mutex:
                    inside[k] += 1
                    if inside[k] != 1:
                        overlaps.append(k)
                before = counts[k]
                time.sleep(0)
                counts[k] = before + 1
                with mutex:
                    inside[k] -= 1

    run_threads([lambda i=i: worker(i) for i in range(threads)])
    assert overlaps == []
    assert sum(counts) == threads * rounds
    assert not any(a.is_locked(f"c{k}") for k in range(keys))


def test_timed_out_waits_leave_nothing_held(url: str) -> None:
    """Waits cut off by their timeout, again and again on one key: each leaves nothing held or
    queued, so the next acquire after the holder's release gets the key, and no later call is
    cut off by a cancel meant for an earlier wait."""
    a, b = opens(url)
    for _ in range(30):
        with a.lock("again"):
            assert b.lock("again").acquire(timeout=0.05) is False
        with b.lock("again", timeout=DEADLOCK):
            assert a.is_locked("again")


def test_asyncio_acquire_waits_without_blocking_the_loop(url: str) -> None:
    a, b = opens(url)

    async def main() -> None:
        held = a.lock("aio")
        assert await held.acquire_async(timeout=DEADLOCK)
        # A timed-out wait (on a key of its own).
        blocker, timed = b.lock("aio-timeout"), a.lock("aio-timeout")
        assert await blocker.acquire_async(timeout=DEADLOCK) is True
        assert await timed.acquire_async(timeout=0.05) is False
        blocker.release()
        waiter = b.lock("aio")
        task = asyncio.ensure_future(waiter.acquire_async(timeout=DEADLOCK))
        ticks = 0
        for _ in range(5):  # the loop keeps running while the task waits on the server
            await asyncio.sleep(0.01)
            ticks += 1
        assert not task.done() and ticks == 5
        fence = held.fence
        held.release()
        assert await asyncio.wait_for(task, DEADLOCK) is True
        assert waiter.fence is not None and fence is not None and waiter.fence > fence
        waiter.release()
        async with b.lock("aio", timeout=DEADLOCK):
            assert a.is_locked("aio")
        assert not a.is_locked("aio")

    arun(main())


def test_force_unlock_makes_the_old_holders_release_fail(url: str) -> None:
    a, b = opens(url)
    old = a.lock("f")
    assert old.acquire()
    assert b.force_unlock("f") is True
    new = b.lock("f")
    assert new.acquire(timeout=DEADLOCK)
    assert new.fence is not None and old.fence is not None and new.fence > old.fence
    assert old.is_current() is False
    with pytest.raises(keylock.NotOwnerError):
        old.release()
    assert a.is_locked("f") and new.is_current(), "the stale release freed the new holder's key"
    new.release()
    assert b.force_unlock("f") is False


def test_lock_many_takes_all_or_nothing_across_opens(url: str) -> None:
    a, b = opens(url)
    with a.lock("m2"):
        many = b.lock_many(["m1", "m2"])
        assert many.acquire(blocking=False) is False
        assert not b.is_locked("m1"), "a failed lock_many holds nothing"
    many = b.lock_many(["m1", ("m2", "shared")])
    with many:
        assert many.modes == ["exclusive", "shared"]
        reader = a.read("m2")
        assert reader.acquire(blocking=False)
        reader.release()
        assert a.lock("m1").acquire(blocking=False) is False
    assert not a.is_locked("m1") and not a.is_locked("m2")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads (3.12+)
def test_a_forked_child_reopens_and_leaves_the_parent_alone(url: str) -> None:
    a = keylock.KeyPool.open(url)
    held = a.lock("f")
    assert held.acquire(blocking=False)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            # The parent's lock object has the parent's connections, not its threads.
            try:
                a.is_locked("f")
            except keylock.UnavailableError:
                fresh = keylock.KeyPool.open(url)
                code = 0 if fresh.lock("f").acquire(blocking=False) is False else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + DEADLOCK
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.02)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's lock object works on.
    assert held.is_current()
    held.release()
    with a.lock("f", timeout=DEADLOCK):
        assert a.is_locked("f")

"""`KeyPool.stats()` and `len()` on every scope: the same dict keys everywhere, counts that
match what is held and queued, and None (never NotImplementedError) for a figure the scope
cannot tell (a Redis pool counts only its own process)."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator

import pytest

import keylock
from conftest import DEADLOCK, RedactedUrl, wait_until

KEYS = {
    "held",
    "waiting",
    "shared_holds",
    "held_here",
    "waiting_here",
    "capacity",
    "entries_in_use",
    "entries_allocated",
    "peak_in_use",
    "contended",
}

_names = itertools.count()


@pytest.fixture(params=["local", "shm", "redis", "postgres"])
def scope(request: pytest.FixtureRequest) -> Iterator[str]:
    """The name of a fresh pool at each scope (two opens of it are two lock objects)."""
    if request.param == "local":
        yield "local:"
    elif request.param == "shm":
        name = f"shm:keylock-py-stats-{os.getpid()}-{next(_names)}"
        try:
            keylock.KeyPool.open(name)
        except ValueError as e:
            pytest.skip(f"this build has no shared-memory scope: {e}")
        yield name
        keylock.unlink(name)
    else:
        url = request.getfixturevalue(f"{request.param}_url")
        yield RedactedUrl(f"{url}?prefix=stats{os.getpid()}-{next(_names)}")


def test_stats_and_len_on_every_scope(scope: str) -> None:
    pool = keylock.KeyPool.open(scope)
    # A second lock object on the same scope ("local:" makes a new pool: itself then).
    other = pool if scope == "local:" else keylock.KeyPool.open(scope)
    empty = pool.stats()
    assert set(empty) == KEYS
    assert len(pool) == 0 and empty["held_here"] == 0 and empty["waiting_here"] == 0
    holder = pool.lock("a")
    assert holder.acquire(blocking=False)
    readers = [pool.read("b"), pool.read("b")]
    for r in readers:
        assert r.acquire(blocking=False)
    got = threading.Event()
    release = threading.Event()

    def wait_for_a() -> None:
        with other.lock("a"):
            got.set()
            release.wait(DEADLOCK)

    t = threading.Thread(target=wait_for_a, daemon=True)
    t.start()
    wait_until(lambda: other.stats()["waiting_here"] == 1, what="the waiter to queue")
    s = pool.stats()
    assert len(pool) == 2
    assert s["held_here"] == 2
    if scope.startswith(("redis", "postgres")):
        # A server scope: only this process's figures; the rest is None, not a guess.
        assert (s["held"], s["waiting"], s["shared_holds"]) == (None, None, None)
        assert (s["capacity"], s["entries_in_use"]) == (None, None)
    else:
        assert (s["held"], s["waiting"], s["shared_holds"]) == (2, 1, 2)
        assert s["entries_in_use"] == 2
        assert (s["capacity"] is None) == (scope == "local:")
    if other is not pool:
        assert other.stats()["held_here"] == 0
        assert pool.stats()["waiting_here"] == 0
    holder.release()
    assert got.wait(DEADLOCK)
    for r in readers:
        r.release()
    s = other.stats()
    assert s["held_here"] == 1 and s["waiting_here"] == 0
    release.set()
    t.join(DEADLOCK)
    assert not t.is_alive()
    wait_until(lambda: len(pool) == 0 and len(other) == 0, what="every key to be free")
    s = pool.stats()
    assert s["held_here"] == 0 and s["waiting_here"] == 0

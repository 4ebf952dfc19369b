"""A lock lost behind its holder's back: handle.lost, wait_lost() and lost_future().

On the server scopes, a real redis-server and a real PostgreSQL cluster (the `redis_url` and
`postgres_url` fixtures, through the `server` fixture): a holder with a short lease whose key is
force-unlocked through another lock object learns of it at its next renewal (every third of the
lease); a normal hold stays unlost past a lease and more. In-process and shared-memory holders
never report a loss.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

import keylock
from conftest import DEADLOCK, run_script, server_url


@pytest.fixture(params=["redis", "postgres"])
def server(request: pytest.FixtureRequest) -> str:
    """The URL of this session's redis-server, then of its PostgreSQL cluster."""
    return server_url(request, request.param)


def short(url: str, tag: str) -> str:
    """The scope with a short lease and keys of this test only: 600 ms on Redis (renewed every
    200 ms), 1 s on PostgreSQL (the least it takes; checked every 333 ms)."""
    lease = "1s" if url.startswith("postgres") else "600ms"
    return f"{url}?lease={lease}&prefix=py-{os.getpid()}-{tag}-{time.monotonic_ns()}"


def test_a_force_unlocked_server_holder_learns_it_lost(server: str) -> None:
    name = short(server, "force")
    holder, other = keylock.KeyPool.open(name), keylock.KeyPool.open(name)
    h = holder.lock("k")
    assert h.acquire(blocking=False)
    assert h.lost is False
    assert h.wait_lost(timeout=0.0) is False
    assert other.force_unlock("k") is True
    assert h.wait_lost(timeout=DEADLOCK) is True, "the renewal must find the loss"
    assert h.lost is True
    assert h.is_current() is False
    with pytest.raises(keylock.NotOwnerError):
        h.release()
    assert h.lost is False, "a handle that holds nothing has lost nothing"
    with pytest.raises(keylock.NotLockedError):
        h.wait_lost(timeout=0.0)


def test_a_normal_server_hold_is_not_lost(server: str) -> None:
    pool = keylock.KeyPool.open(short(server, "normal"))
    h = pool.lock("k")
    with h:
        # Three leases' time on Redis, nearly two on PostgreSQL: the renewals keep it held.
        assert h.wait_lost(timeout=1.8) is False
        assert h.lost is False and h.is_current()
    assert not pool.is_locked("k")


def test_lost_future_resolves_on_the_loop(server: str) -> None:
    name = short(server, "async")
    holder, other = keylock.KeyPool.open(name), keylock.KeyPool.open(name)

    async def main() -> None:
        many = holder.lock_many(["a", "b"])
        assert await many.acquire_async(timeout=DEADLOCK)
        fut = many.lost_future()
        assert isinstance(fut, asyncio.Future) and not fut.done()
        cancelled = many.lost_future()
        cancelled.cancel()  # harmless: the late result is refused quietly
        # Losing either key loses the many-keys hold.
        assert other.force_unlock("b") is True
        await asyncio.wait_for(fut, DEADLOCK)
        assert many.lost is True
        assert many.lost_future().done(), "asked after the loss, it is done at once"
        with pytest.raises(keylock.NotOwnerError):
            many.release()

    asyncio.run(main())
    assert not holder.is_locked("a"), "the key that was not lost is released all the same"


def test_a_loss_after_its_loop_closed_is_quiet(server: str) -> None:
    # A lost_future whose loop has closed (asyncio.run returned) before the loss: its result
    # cannot be posted, and nothing can await it, so that is no error. A second future, on a
    # running loop, is asked after it: the two are resolved in that order (one signal, one
    # hand-off thread), so once the second is done the first was posted, or refused.
    name = short(server, "closed")
    holder, other = keylock.KeyPool.open(name), keylock.KeyPool.open(name)
    h = holder.lock("k")
    assert h.acquire(blocking=False)

    async def ask() -> asyncio.Future[None]:
        return h.lost_future()

    orphan = asyncio.run(ask())

    async def main() -> None:
        later = h.lost_future()
        assert other.force_unlock("k") is True
        await asyncio.wait_for(later, DEADLOCK)

    reported: list[object] = []
    hook = sys.unraisablehook
    sys.unraisablehook = reported.append
    try:
        asyncio.run(main())
    finally:
        sys.unraisablehook = hook
    assert not orphan.done()
    assert reported == [], "a result refused by a closed loop is not an error"
    with pytest.raises(keylock.NotOwnerError):
        h.release()


@pytest.mark.parametrize("scope", ["local:", "shm:"])
def test_other_scopes_never_report_a_loss(scope: str) -> None:
    name = scope
    if scope == "shm:":
        name += f"keylock-py-lost-{os.getpid()}"
    try:
        a = keylock.KeyPool.open(name)
    except ValueError:
        pytest.skip("this build has no shared-memory scope")
    b = keylock.KeyPool.open(name) if scope == "shm:" else a
    try:
        h = a.lock("k")
        assert h.acquire(blocking=False)
        assert b.force_unlock("k") is True
        assert h.wait_lost(timeout=0.05) is False
        assert h.lost is False

        async def main() -> None:
            fut = h.lost_future()
            await asyncio.sleep(0.05)
            assert not fut.done()
            fut.cancel()

        asyncio.run(main())
        with pytest.raises(keylock.NotOwnerError):
            h.release()
    finally:
        if scope == "shm:":
            keylock.unlink(name)


def test_a_loss_found_while_python_waits_on_the_scope_does_not_deadlock(server: str) -> None:
    """The renewal that finds a loss runs on the scope's one runtime thread, and the lost
    future is resolved from there. Meanwhile the main thread keeps calling into the scope
    (`is_locked`, a blocking call: on a server scope it waits for the server on this thread's
    own connection, on `shm:` for the region). If the main thread kept the GIL while it waited,
    or the runtime thread waited for the GIL while the scope needed it, the loss would not reach
    the loop in time or this would hang; it runs in a child interpreter so that a hang fails the
    test at the timeout instead of hanging pytest."""
    name = short(server, "gil")
    run_script(
        f"""
import asyncio, time
import keylock

name = {name!r}
holder, other = keylock.KeyPool.open(name), keylock.KeyPool.open(name)

async def main():
    h = holder.lock("k")
    assert await h.acquire_async(timeout=30)
    fut = h.lost_future()
    assert other.force_unlock("k") is True
    # Several renewals' time, spent inside blocking calls into the scope: the loss is found
    # and handed to the loop meanwhile.
    end = time.monotonic() + 2.0
    calls = 0
    while time.monotonic() < end:
        assert holder.is_locked("elsewhere") is False
        calls += 1
    await asyncio.wait_for(fut, 30)
    assert h.lost is True and calls > 0
    try:
        h.release()
    except keylock.NotOwnerError:
        pass
    else:
        raise AssertionError("a lost hold released")

asyncio.run(main())
print("ok")
""",
        timeout=DEADLOCK,
    )

"""keylock.Semaphore: at most `permits` units of a key held at once (counted inside the critical
sections, with threads and with asyncio tasks), strict FIFO per key (a heavy request is not
passed by lighter ones behind it), a fence per acquisition, timeouts and cancellations that
leave nothing held, threading.BoundedSemaphore's acquire/release on a handle, bad counts as
ValueError; and the argument-keyed decorators (`@pool.synchronized(key)`, `@sem.limit(key)`)
on KeyPool, StripedLock and Semaphore, for `def` and `async def` functions.

Every wait is bounded (conftest's helpers), and no assertion depends on how long anything took.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import keylock
from conftest import DEADLOCK, arun, async_wait_until, run_threads, wait_until

# ---- counting units inside the critical sections ----


class Units:
    """Units of each key inside their critical sections now, and the most ever seen at once.
    An entry past `permits` fails at once, inside the section."""

    def __init__(self, permits: int) -> None:
        self.permits = permits
        self._mutex = threading.Lock()
        self.inside: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.completed = 0

    def enter(self, key: str, weight: int) -> None:
        with self._mutex:
            self.inside[key] += weight
            self.most[key] = max(self.most[key], self.inside[key])
            over = self.inside[key] > self.permits
        assert not over, f"{self.inside[key]} units of {key!r} inside, permits {self.permits}"

    def leave(self, key: str, weight: int, completed: bool = True) -> None:
        with self._mutex:
            self.inside[key] -= weight
            self.completed += completed

    def check(self) -> None:
        assert max(self.most.values()) <= self.permits, dict(self.most)
        assert +self.inside == Counter(), f"still inside: {dict(+self.inside)}"


def waiters(sem: keylock.Semaphore, key: str) -> int:
    info = sem.info(key)
    return 0 if info is None else info.waiters


def assert_nothing_held(sem: keylock.Semaphore, keys: list[str]) -> None:
    for key in keys:
        assert sem.info(key) is None, (key, sem.info(key))
    stats = sem.stats()
    assert stats["held"] == 0 and stats["waiting"] == 0 and stats["shared_holds"] == 0, stats
    assert len(sem) == 0


# ---- occupancy ----


@pytest.mark.parametrize("weights", [(1,), (2,), (3,), (1, 2, 3)], ids=str)
def test_threads_never_hold_more_than_permits(weights: tuple[int, ...]) -> None:
    permits, keys, rounds = 3, ["a", "b"], 150
    sem = keylock.Semaphore(permits)
    units = Units(permits)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(rounds):
            key, weight = rng.choice(keys), rng.choice(weights)
            with sem.acquire(key, weight, timeout=DEADLOCK):
                units.enter(key, weight)
                if rng.random() < 0.2:
                    time.sleep(0)  # lets another thread run inside
                units.leave(key, weight)

    run_threads([lambda s=s: worker(s) for s in range(8)])
    units.check()
    assert units.completed == 8 * rounds
    assert_nothing_held(sem, keys)


@pytest.mark.parametrize("weights", [(1,), (3,), (1, 2, 3)], ids=str)
def test_tasks_never_hold_more_than_permits(weights: tuple[int, ...]) -> None:
    permits, keys, rounds = 3, ["a", "b"], 60
    sem = keylock.Semaphore(permits)
    units = Units(permits)

    async def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(rounds):
            key, weight = rng.choice(keys), rng.choice(weights)
            async with sem.acquire(key, weight):
                units.enter(key, weight)
                await asyncio.sleep(0)
                units.leave(key, weight)

    async def main() -> None:
        await asyncio.gather(*(worker(s) for s in range(20)))

    arun(main())
    units.check()
    assert units.completed == 20 * rounds
    assert_nothing_held(sem, keys)


def test_threads_and_tasks_share_the_units() -> None:
    permits, rounds = 2, 100
    sem = keylock.Semaphore(permits)
    units = Units(permits)

    def thread_worker() -> None:
        for i in range(rounds):
            with sem.acquire("k", 1 + i % 2, timeout=DEADLOCK):
                units.enter("k", 1 + i % 2)
                time.sleep(0)
                units.leave("k", 1 + i % 2)

    async def task_worker() -> None:
        for i in range(rounds):
            async with sem.acquire("k", 1 + i % 2):
                units.enter("k", 1 + i % 2)
                await asyncio.sleep(0)
                units.leave("k", 1 + i % 2)

    async def tasks() -> None:
        await asyncio.gather(*(task_worker() for _ in range(4)))

    run_threads([thread_worker, thread_worker, lambda: arun(tasks())])
    units.check()
    assert units.completed == 6 * rounds
    assert_nothing_held(sem, ["k"])


def test_exactly_permits_units_are_handed_out() -> None:
    sem = keylock.Semaphore(3)
    handles = [sem.acquire("k") for _ in range(3)]
    assert all(h.acquire(blocking=False) for h in handles)
    info = sem.info("k")
    assert info is not None and info.units == 3 and info.holders == 3
    late = sem.acquire("k")
    assert not late.acquire(blocking=False)
    assert late.locked()
    # Other keys are untouched.
    other = sem.acquire("other", weight=3)
    assert other.acquire(blocking=False)
    other.release()
    for h in handles:
        h.release()
    assert_nothing_held(sem, ["k", "other"])


# ---- strict FIFO: a heavy request is not passed ----


def test_heavy_request_is_not_passed_by_light_ones_threads() -> None:
    sem = keylock.Semaphore(3)
    holder = sem.acquire("k")
    assert holder.acquire(blocking=False)
    order: list[str] = []

    def take(name: str, weight: int) -> None:
        with sem.acquire("k", weight, timeout=DEADLOCK):
            order.append(name)

    heavy = threading.Thread(target=take, args=("heavy", 3), daemon=True)
    heavy.start()
    wait_until(lambda: waiters(sem, "k") == 1, what="heavy queued")
    # Two units are free, yet a light request may not pass the heavy one at the head.
    light_now = sem.acquire("k")
    assert light_now.locked()
    assert not light_now.acquire(blocking=False)
    light = threading.Thread(target=take, args=("light", 1), daemon=True)
    light.start()
    wait_until(lambda: waiters(sem, "k") == 2, what="light queued")
    assert order == []
    holder.release()
    heavy.join(DEADLOCK)
    light.join(DEADLOCK)
    assert not heavy.is_alive() and not light.is_alive()
    assert order == ["heavy", "light"]
    assert_nothing_held(sem, ["k"])


def test_heavy_request_is_not_passed_by_light_ones_tasks() -> None:
    sem = keylock.Semaphore(4)
    order: list[str] = []

    async def take(name: str, weight: int) -> None:
        async with sem.acquire("k", weight):
            order.append(name)
            await asyncio.sleep(0)

    async def main() -> None:
        holder = sem.acquire("k", 2)
        assert await holder.acquire_async()
        heavy = asyncio.create_task(take("heavy", 4))
        await async_wait_until(lambda: waiters(sem, "k") == 1, "heavy queued")
        lights = [asyncio.create_task(take(f"light{i}", 1)) for i in range(3)]
        await async_wait_until(lambda: waiters(sem, "k") == 4, "lights queued")
        assert order == []
        holder.release()
        await asyncio.gather(heavy, *lights)

    arun(main())
    assert order == ["heavy", "light0", "light1", "light2"]
    assert_nothing_held(sem, ["k"])


# ---- timeouts and cancellation leave nothing held ----


def test_timeouts_leave_nothing_held() -> None:
    sem = keylock.Semaphore(2)
    holder = sem.acquire("k", 2)
    assert holder.acquire(blocking=False)
    with pytest.raises(keylock.LockTimeout), sem.acquire("k", timeout=0.02):
        pytest.fail("entered a full semaphore")
    assert not sem.acquire("k").acquire(timeout=0.02)
    assert not sem.acquire("k").acquire(blocking=False)

    async def main() -> None:
        assert not await sem.acquire("k").acquire_async(timeout=0.02)
        with pytest.raises(keylock.LockTimeout):
            async with sem.acquire("k", timeout=0.02):
                pytest.fail("entered a full semaphore")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(sem.acquire("k").acquire_async(), 0.02)

    arun(main())
    info = sem.info("k")
    assert info is not None and info.units == 2 and info.waiters == 0
    holder.release()
    assert_nothing_held(sem, ["k"])


def test_cancellation_storm_leaves_nothing_held() -> None:
    permits, keys = 3, ["a", "b", "c"]
    sem = keylock.Semaphore(permits)
    units = Units(permits)

    async def worker(key: str, weight: int) -> None:
        async with sem.acquire(key, weight):
            units.enter(key, weight)
            try:
                await asyncio.sleep(0.001)
            finally:
                units.leave(key, weight)

    async def main() -> None:
        rng, storm = random.Random(7), 150
        for _ in range(5):
            holders = []
            for key in keys:
                h = sem.acquire(key, permits)
                assert await h.acquire_async()
                holders.append(h)
            tasks = [
                asyncio.create_task(worker(rng.choice(keys), rng.randint(1, permits)))
                for _ in range(storm)
            ]
            await async_wait_until(lambda: sem.stats()["waiting"] == storm, "all queued")
            for t in tasks[::2]:
                t.cancel()  # cancelled while queued
            await asyncio.sleep(0)
            for h in holders:
                h.release()
            # Cancel more while they hold, or are being handed the units, or still wait.
            for _ in range(3):
                await asyncio.sleep(0.001)
                for t in rng.sample(tasks, 20):
                    t.cancel()
            done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), DEADLOCK)
            assert all(r is None or isinstance(r, asyncio.CancelledError) for r in done)
            # Timeouts racing grants.
            await asyncio.gather(
                *(
                    asyncio.wait_for(worker(rng.choice(keys), rng.randint(1, permits)), 0.002)
                    for _ in range(100)
                ),
                return_exceptions=True,
            )

    arun(main())
    units.check()
    assert_nothing_held(sem, keys)


# ---- fences ----


def test_every_acquisition_has_its_own_rising_fence() -> None:
    sem = keylock.Semaphore(3)
    handles = [sem.acquire("k", w) for w in (1, 1, 1)]
    assert all(h.fence is None for h in handles)
    fences: list[int] = []
    for h in handles:
        assert h.acquire(blocking=False)
        assert h.fence is not None
        fences.append(h.fence)
    assert fences == sorted(set(fences)), fences
    info = sem.info("k")
    assert info is not None and info.fence == fences[-1]
    handles[1].release()
    assert handles[1].fence is None
    assert handles[1].acquire(blocking=False)
    assert handles[1].fence is not None and handles[1].fence > fences[-1]
    # One handle holding twice: its fence is its newest acquisition's.
    many = sem.acquire("m")
    assert many.acquire(blocking=False) and many.acquire(blocking=False)
    first = sem.info("m").fence  # type: ignore[union-attr]
    assert many.fence == first
    many.release()
    many.release()
    for h in handles:
        h.release()
    assert_nothing_held(sem, ["k", "m"])


def test_force_release_ends_every_hold_and_advances_the_fence() -> None:
    sem = keylock.Semaphore(2)
    a, b = sem.acquire("k"), sem.acquire("k")
    assert a.acquire(blocking=False) and b.acquire(blocking=False)
    newest = b.fence
    assert sem.force_release("k") is True
    assert sem.info("k") is None
    assert not a.is_current()
    with pytest.raises(keylock.NotOwnerError):
        a.release()
    with pytest.raises(keylock.NotOwnerError):
        b.release()
    assert sem.force_release("k") is False
    c = sem.acquire("k", 2)
    assert c.acquire(blocking=False)
    assert c.fence is not None and newest is not None and c.fence > newest
    c.release()
    assert_nothing_held(sem, ["k"])


def test_lease_ends_a_hold() -> None:
    sem = keylock.Semaphore(2)
    h = sem.acquire("k", lease=DEADLOCK)
    assert h.acquire(blocking=False)
    remaining = h.lease_remaining()
    assert remaining is not None and 0 < remaining <= DEADLOCK
    h.extend(DEADLOCK)
    assert h.is_current()
    h.release()
    short = sem.acquire("k", 2)
    assert short.acquire(blocking=False, lease=0.01)
    wait_until(lambda: sem.info("k") is None, what="the lease to end the hold")
    with pytest.raises(keylock.LeaseExpiredError):
        short.release()
    assert_nothing_held(sem, ["k"])


# ---- arguments ----


@pytest.mark.parametrize("permits", [0, -1, keylock.Semaphore.MAX_PERMITS + 1, 2**40])
def test_bad_permits_raise_value_error(permits: int) -> None:
    with pytest.raises(ValueError):
        keylock.Semaphore(permits)
    with pytest.raises(ValueError):
        keylock.Semaphore.open("local:", permits)


def test_permits_and_scopes() -> None:
    assert keylock.Semaphore(keylock.Semaphore.MAX_PERMITS).permits == keylock.Semaphore.MAX_PERMITS
    sem = keylock.Semaphore.open("local:", permits=5)
    assert sem.permits == 5 and sem.name == "local:"
    # A shared-memory semaphore: its permits are the region's, and another open must agree.
    name = f"shm:keylock-py-sem-{os.getpid()}"
    try:
        shm = keylock.Semaphore.open(name, 2)
        with shm.acquire("k", 2):
            assert shm.info("k").units == 2
        with pytest.raises(keylock.IncompatibleError):
            keylock.Semaphore.open(name, 3)
    finally:
        keylock.unlink(name)
    # Redis has semaphores: an unreachable server is the error, and the password never shows.
    with pytest.raises(keylock.UnavailableError) as refused:
        keylock.Semaphore.open("redis://:hunter2@127.0.0.1:1/0?connect_timeout=200ms", 2)
    assert "hunter2" not in str(refused.value)
    with pytest.raises(TypeError):
        keylock.Semaphore("3")  # type: ignore[arg-type]


def test_a_postgres_semaphore_shares_units_across_opens(postgres_url: str) -> None:
    """The PostgreSQL scope's keyed semaphore: two opens of one prefix share its units, strictly
    in order, and another open must agree on the permits; errors never show the password."""
    password = postgres_url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    name = f"{postgres_url}?prefix=sem{os.getpid()}-{next(_names)}"
    a, b = keylock.Semaphore.open(name, 2), keylock.Semaphore.open(name, 2)
    assert a.permits == 2
    held = a.acquire("k", 2, timeout=DEADLOCK)
    with held:
        first = held.fence
        info = b.info("k")
        assert info is not None and info.units == 2
        with pytest.raises(keylock.LockTimeout), b.acquire("k", 1, timeout=0.05):
            pytest.fail("entered a full semaphore")
    later = b.acquire("k", 1, timeout=DEADLOCK)
    with later:
        assert first is not None and later.fence is not None
        assert later.fence > first
    assert b.info("k") is None
    with pytest.raises(keylock.IncompatibleError) as refused:
        keylock.Semaphore.open(name, 3)
    assert password not in str(refused.value) and password not in repr(refused.value)


@pytest.mark.parametrize("weight", [0, -1, 4, 2**40])
def test_bad_weight_raises_value_error(weight: int) -> None:
    sem = keylock.Semaphore(3)
    h = sem.acquire("k", weight)
    assert h.weight in (0, 4, 2**32 - 1)
    with pytest.raises(ValueError):
        h.acquire(blocking=False)
    with pytest.raises(ValueError):
        h.acquire(timeout=DEADLOCK)
    with pytest.raises(ValueError), h:
        pytest.fail("entered with a bad weight")

    async def main() -> None:
        with pytest.raises(ValueError):
            await h.acquire_async(timeout=DEADLOCK)
        with pytest.raises(ValueError):
            async with h:
                pytest.fail("entered with a bad weight")

    arun(main())
    assert_nothing_held(sem, ["k"])


def test_a_lock_still_refuses_nothing_and_takes_weight_one() -> None:
    pool = keylock.KeyPool()
    with pool.lock("k"):
        info = pool.info("k")
        assert info is not None and info.units == 1 and info.holders == 1
        assert "units=1" in repr(info)


# ---- threading.BoundedSemaphore's protocol on a handle ----


def test_bounded_semaphore_protocol() -> None:
    sem = keylock.Semaphore(2)
    h = sem.acquire("k")
    assert isinstance(h, keylock.Permit) and isinstance(h, keylock.LockHandle)
    assert h.key == b"k" and h.weight == 1 and not h.locked()
    assert h.acquire(blocking=False) is True
    assert h.acquire() is True
    assert h.locked()
    assert h.acquire(blocking=False) is False
    assert h.acquire(timeout=0.01) is False
    with pytest.raises(ValueError):
        h.acquire(blocking=False, timeout=1)
    h.release()
    h.release()
    with pytest.raises(RuntimeError) as raised:
        h.release()
    assert isinstance(raised.value, keylock.NotLockedError)
    # `with` releases whatever happens inside.
    with pytest.raises(ZeroDivisionError), h:
        1 / 0  # noqa: B018
    assert not h.locked()
    assert_nothing_held(sem, ["k"])


def test_a_handle_shared_by_threads_like_a_bounded_semaphore() -> None:
    sem = keylock.Semaphore(2)
    units = Units(2)
    shared = sem.acquire("k")

    def worker() -> None:
        for _ in range(100):
            assert shared.acquire(timeout=DEADLOCK)
            units.enter("k", 1)
            time.sleep(0)
            units.leave("k", 1)
            shared.release()

    run_threads([worker] * 6)
    units.check()
    assert_nothing_held(sem, ["k"])


def test_repr_info_and_stats() -> None:
    sem = keylock.Semaphore(3)
    assert "permits=3" in repr(sem) and "held=0" in repr(sem) and "local:" in repr(sem)
    h = sem.acquire("user:1", 2)
    assert "unlocked" in repr(h) and "weight=2" in repr(h) and "'user:1'" in repr(h)
    with h:
        assert repr(h).startswith("<locked keylock.Permit")
        info = sem.info("user:1")
        assert info is not None
        assert (info.units, info.holders, info.waiters) == (2, 1, 0)
        assert "units=2" in repr(info)
        assert len(sem) == 1 and "held=1" in repr(sem)
        stats = sem.stats()
        assert set(stats) == set(keylock.KeyPool().stats())
        assert stats["held"] == 1 and stats["shared_holds"] == 2
    assert sem.info("user:1") is None and len(sem) == 0


# ---- decorators ----

_names = itertools.count()


def _shm(kind: str) -> keylock.KeyedLock:
    name = f"shm:keylock-py-deco-{os.getpid()}-{next(_names)}"
    try:
        return (
            keylock.StripedLock.open(name, 16) if kind == "striped" else keylock.KeyPool.open(name)
        )
    except ValueError as e:
        pytest.skip(f"this build has no shared-memory scope: {e}")


# The server scopes carry the lock decorator (KeyPool.synchronized).
PRIMITIVES = [
    "pool",
    "striped",
    "semaphore",
    "pool-shm",
    "striped-shm",
    "pool-redis",
    "pool-postgres",
]


@pytest.fixture(params=PRIMITIVES)
def guard(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh keyed primitive of each kind and scope the decorators are on."""
    kind = request.param
    if kind == "pool":
        made: Any = keylock.KeyPool()
    elif kind == "striped":
        made = keylock.StripedLock(64)
    elif kind == "semaphore":
        made = keylock.Semaphore(2)
    elif kind.endswith("-shm"):
        made = _shm(kind.removesuffix("-shm"))
    else:
        url = request.getfixturevalue(f"{kind.removeprefix('pool-')}_url")
        made = keylock.KeyPool.open(f"{url}?prefix=deco{os.getpid()}-{next(_names)}")
    yield made
    if kind.endswith("-shm"):
        keylock.unlink(made.name)


def decorate(guard: Any, key: Any, **kw: Any) -> Callable[[Callable[..., Any]], Any]:
    """The primitive's decorator: one call at a time per key (a semaphore's limit at full
    weight)."""
    if isinstance(guard, keylock.Semaphore):
        return guard.limit(key, weight=guard.permits, **kw)
    return guard.synchronized(key, **kw)


def hold(guard: Any, key: str) -> Any:
    """A handle that keeps every decorated call of `key` out."""
    if isinstance(guard, keylock.Semaphore):
        return guard.acquire(key, guard.permits)
    return guard.lock(key)


KEY_FORMS = {
    "by-name": "user_id",
    "by-callable": lambda user_id, *args, **kwargs: user_id,
}


@pytest.mark.parametrize("form", list(KEY_FORMS))
def test_decorated_function_is_one_call_at_a_time_per_key(guard: Any, form: str) -> None:
    units = Units(1)

    @decorate(guard, KEY_FORMS[form], timeout=DEADLOCK)
    def work(user_id: str, amount: int = 1) -> int:
        """Does the work."""
        units.enter(user_id, 1)
        time.sleep(0)
        units.leave(user_id, 1)
        return amount

    assert work.__name__ == "work" and work.__doc__ == "Does the work."
    assert work.__wrapped__ is not None and work.__wrapped__.__name__ == "work"

    def caller(i: int) -> None:
        for n in range(40):
            user = f"u{(i + n) % 2}"
            # Positional, by keyword, and with the default.
            assert (work(user, n) if n % 2 else work(user_id=user, amount=n)) == n
            assert work(user) == 1

    run_threads([lambda i=i: caller(i) for i in range(4)])
    units.check()
    for user in ("u0", "u1"):
        assert guard.info(user) is None


@pytest.mark.parametrize("form", list(KEY_FORMS))
def test_decorated_coroutine_is_one_call_at_a_time_per_key(guard: Any, form: str) -> None:
    units = Units(1)

    @decorate(guard, KEY_FORMS[form])
    async def work(user_id: str, amount: int = 1) -> int:
        """Does the async work."""
        units.enter(user_id, 1)
        await asyncio.sleep(0)
        units.leave(user_id, 1)
        return amount

    assert inspect.iscoroutinefunction(work)
    assert work.__name__ == "work" and work.__doc__ == "Does the async work."
    assert work.__wrapped__ is not None

    async def main() -> None:
        # (Fewer waiters at once than a shared-memory striped region has room for.)
        calls = [work(f"u{i % 3}", i) for i in range(30)]
        calls += [work(user_id=f"u{i % 3}") for i in range(15)]
        results = await asyncio.gather(*calls)
        assert results == list(range(30)) + [1] * 15

    arun(main())
    units.check()
    for user in ("u0", "u1", "u2"):
        assert guard.info(user) is None


def test_decorator_timeout_raises_lock_timeout(guard: Any) -> None:
    @decorate(guard, "user_id", timeout=0.02)
    def work(user_id: str) -> str:
        return user_id

    @decorate(guard, lambda user_id: user_id, timeout=0.02)
    async def awork(user_id: str) -> str:
        return user_id

    holder = hold(guard, "busy")
    assert holder.acquire(timeout=DEADLOCK)
    try:
        with pytest.raises(keylock.LockTimeout):
            work("busy")
        with pytest.raises(keylock.LockTimeout):
            arun(awork("busy"))
        if not isinstance(guard, keylock.StripedLock):
            # Another key is free (a StripedLock's may share the busy key's stripe).
            assert work("free") == "free"
            assert arun(awork("free")) == "free"
    finally:
        holder.release()
    assert work("busy") == "busy"
    assert arun(awork("busy")) == "busy"
    assert guard.info("busy") is None


def test_decorator_key_by_name_finds_every_kind_of_parameter() -> None:
    pool = keylock.KeyPool()
    seen: list[Any] = []

    def spy(key: Any) -> Any:
        info = pool.info(key)
        assert info is not None, f"{key!r} not held during the call"
        seen.append(key)
        return key

    @pool.synchronized("b")
    def f(a: int, b: str = "dflt", *args: Any, c: str = "c", **kwargs: Any) -> Any:
        return spy(b)

    @pool.synchronized("c")
    def g(a: int, /, *, c: str) -> Any:
        return spy(c)

    @pool.synchronized("a")
    def h(a: str, /) -> Any:
        return spy(a)

    assert f(1, "x") == "x"
    assert f(1, b="y") == "y"
    assert f(1) == "dflt"
    assert f(1, "z", 2, 3, c="q", extra=1) == "z"
    assert g(1, c="kw") == "kw"
    assert h("pos") == "pos"
    with pytest.raises(TypeError):
        f()  # type: ignore[call-arg]  # a wrong call raises as the call itself would
    with pytest.raises(TypeError):
        g(1)  # type: ignore[call-arg]

    class Account:
        @pool.synchronized("account_id")
        def charge(self, account_id: str) -> Any:
            return spy(account_id)

    assert Account().charge("acct") == "acct"
    assert seen == ["x", "y", "dflt", "z", "kw", "pos", "acct"]
    assert len(pool) == 0


def test_decorator_refuses_what_it_cannot_lock() -> None:
    pool, sem = keylock.KeyPool(), keylock.Semaphore(2)
    with pytest.raises(TypeError, match="no parameter"):

        @pool.synchronized("nope")
        def f(user: str) -> None: ...

    with pytest.raises(TypeError, match="not one value"):

        @sem.limit("args")
        def g(*args: Any) -> None: ...

    with pytest.raises(TypeError):
        pool.synchronized(42)(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="generator"):

        @pool.synchronized("k")
        def gen(k: str) -> Iterator[str]:
            yield k

    with pytest.raises(ValueError):
        pool.synchronized("k", mode="sideways")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        pool.synchronized("k", timeout=-1)
    with pytest.raises(ValueError):
        sem.limit("k", lease=0)

    @sem.limit("k", weight=3)
    def too_heavy(k: str) -> None: ...

    with pytest.raises(ValueError):
        too_heavy("x")
    assert len(sem) == 0


def test_shared_decorator_lets_readers_in_together() -> None:
    pool = keylock.KeyPool()
    readers = threading.Barrier(3, timeout=DEADLOCK)

    @pool.synchronized("doc", mode="shared", timeout=DEADLOCK)
    def read(doc: str) -> None:
        readers.wait()  # all three inside at once, or the barrier breaks

    @pool.synchronized("doc", timeout=0.02)
    def write(doc: str) -> None: ...

    run_threads([lambda: read("d")] * 3)
    with pool.read("d"), pytest.raises(keylock.LockTimeout):
        write("d")
    write("d")


def test_semaphore_limit_lets_permits_calls_in_at_once() -> None:
    sem = keylock.Semaphore(3)
    inside = threading.Barrier(3, timeout=DEADLOCK)

    @sem.limit(lambda host, *a: host, timeout=DEADLOCK)
    def fetch(host: str, n: int) -> int:
        inside.wait()  # three calls of one host inside at once
        return n

    results: list[int] = []
    run_threads([lambda n=n: results.append(fetch("h", n)) for n in range(3)])
    assert sorted(results) == [0, 1, 2]
    assert sem.info("h") is None


def test_reentrant_pool_decorator_allows_recursion() -> None:
    pool = keylock.KeyPool(reentrant=True)

    @pool.synchronized(lambda n: "same", timeout=DEADLOCK)
    def same_key(n: int) -> int:
        return 0 if n == 0 else 1 + same_key(n - 1)

    assert same_key(5) == 5
    assert len(pool) == 0

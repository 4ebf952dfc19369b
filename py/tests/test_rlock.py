"""A reentrant pool's handle behaves as threading.RLock does: every check here runs the same
operations, from the same threads, on a real threading.RLock and on a ReentrantKeyLock side by
side, and compares what each returned or raised (argument checks, reentrant acquires, release by
a non-owner, nested `with`, the Condition protocol). Inside asyncio the owner is the task."""

from __future__ import annotations

import asyncio
import queue
import random
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
from test_protocol import ACQUIRE_ARGS

import keylock
from conftest import DEADLOCK, arun, run_threads

Lockish = Any  # a threading.RLock or a keylock.ReentrantKeyLock


def kind(e: BaseException) -> str:
    """The standard exception an error is, as threading code would catch it."""
    for base in (OverflowError, RuntimeError, ValueError, TypeError):
        if isinstance(e, base):
            return base.__name__
    return type(e).__name__


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - compared by the caller
        return ("raise", kind(e))


class Actor:
    """A thread that runs the calls it is given, one at a time, and reports their outcomes: the
    same script runs on the same threads for both locks."""

    def __init__(self) -> None:
        self._calls: queue.Queue[Callable[[], Any] | None] = queue.Queue()
        self._results: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (fn := self._calls.get()) is not None:
            self._results.put(outcome(fn))

    def run(self, fn: Callable[[], Any]) -> tuple[str, Any]:
        self._calls.put(fn)
        return self._results.get(timeout=DEADLOCK)

    def close(self) -> None:
        self._calls.put(None)
        self._thread.join(DEADLOCK)


def new_pair() -> tuple[keylock.KeyPool, threading.RLock, keylock.ReentrantKeyLock]:
    pool = keylock.KeyPool(reentrant=True)
    handle = pool.lock("k")
    assert isinstance(handle, keylock.ReentrantKeyLock)
    return pool, threading.RLock(), handle


# Operations that never wait, so a script of them cannot hang whatever the state.
OPS: dict[str, Callable[[Lockish], Any]] = {
    "acquire(False)": lambda lk: lk.acquire(False),
    "acquire(blocking=False)": lambda lk: lk.acquire(blocking=False),
    "acquire(timeout=0)": lambda lk: lk.acquire(timeout=0),
    "acquire(timeout=0.001)": lambda lk: lk.acquire(timeout=0.001),
    "release()": lambda lk: lk.release(),
    "_is_owned()": lambda lk: lk._is_owned(),
    "_recursion_count()": lambda lk: lk._recursion_count(),
    # A Condition's wait, as threading.Condition calls it (only when _is_owned()): everything
    # released, then taken back as often as it was held.
    "_release_save/_acquire_restore": lambda lk: _save_restore_count(lk),
}


def _save_restore_count(lk: Lockish) -> int | None:
    if not lk._is_owned():
        return None
    state = lk._release_save()
    lk._acquire_restore(state)
    return state[0]


def run_script(script: list[tuple[int, str]], actors: int = 3) -> None:
    """Runs `script` (actor index, operation) on both locks; the outcomes must match step by
    step. Each lock ends fully released by whoever holds it."""
    _, ref, mine = new_pair()
    crew = [Actor() for _ in range(actors)]
    try:
        for step, (who, op) in enumerate(script):
            a = crew[who].run(lambda op=op: OPS[op](ref))
            b = crew[who].run(lambda op=op: OPS[op](mine))
            assert a == b, f"step {step}: actor {who} {op}: RLock {a}, keylock {b}"
        for actor in crew:  # clean up: each releases what it holds
            while actor.run(ref._is_owned) == ("ok", True):
                actor.run(ref.release)
            while actor.run(mine._is_owned) == ("ok", True):
                actor.run(mine.release)
    finally:
        for actor in crew:
            actor.close()
    assert not mine.locked()


def test_scripted_sequence_matches_rlock() -> None:
    run_script(
        [
            (0, "release()"),
            (0, "acquire(False)"),
            (0, "acquire(timeout=0)"),
            (0, "_recursion_count()"),
            (0, "_is_owned()"),
            (1, "_is_owned()"),
            (1, "acquire(False)"),
            (1, "acquire(timeout=0.001)"),
            (1, "release()"),
            (1, "_recursion_count()"),
            (1, "_release_save/_acquire_restore"),
            (0, "_release_save/_acquire_restore"),
            (0, "release()"),
            (0, "_recursion_count()"),
            (0, "release()"),
            (0, "release()"),
            (0, "_is_owned()"),
            (1, "acquire(blocking=False)"),
            (0, "acquire(False)"),
            (2, "release()"),
            (1, "release()"),
        ]
    )


@pytest.mark.parametrize("seed", range(40))
def test_random_scripts_match_rlock(seed: int) -> None:
    rng = random.Random(seed)
    names = list(OPS)
    run_script([(rng.randrange(3), rng.choice(names)) for _ in range(60)])


@pytest.mark.parametrize(
    ("args", "kwargs", "returns_when_held"), ACQUIRE_ARGS, ids=[repr(a[:2]) for a in ACQUIRE_ARGS]
)
def test_acquire_arguments_match_rlock(
    args: tuple[Any, ...], kwargs: dict[str, Any], returns_when_held: bool
) -> None:
    _, ref, mine = new_pair()
    # Owned by the caller: a valid call is a reentrant acquire, True at once.
    for lk in (ref, mine):
        lk.acquire()
    a = outcome(lambda: ref.acquire(*args, **kwargs))
    b = outcome(lambda: mine.acquire(*args, **kwargs))
    assert a == b
    for lk in (ref, mine):
        while lk._is_owned():
            lk.release()
    # Owned by another thread: as threading.Lock would (only the calls that return at once).
    if returns_when_held:
        other = Actor()
        try:
            assert other.run(ref.acquire) == other.run(mine.acquire) == ("ok", True)
            assert outcome(lambda: ref.acquire(*args, **kwargs)) == outcome(
                lambda: mine.acquire(*args, **kwargs)
            )
            assert other.run(ref.release) == other.run(mine.release) == ("ok", None)
        finally:
            other.close()
        for lk in (ref, mine):
            while lk._is_owned():
                lk.release()
    assert not mine.locked()


def test_release_save_by_a_non_owner_is_refused() -> None:
    # The one documented difference: CPython's RLock._release_save does not check the owner
    # (it releases another thread's holds; threading.Condition never calls it so, as it checks
    # _is_owned() first). A keylock acquisition belongs to its owner: refused, hold kept.
    _, _, mine = new_pair()
    mine.acquire()
    got: list[Any] = []
    run_threads([lambda: got.append(outcome(mine._release_save))])
    assert got == [("raise", "RuntimeError")]
    assert mine._recursion_count() == 1
    mine.release()


def test_internal_methods_check_their_arguments_as_rlock() -> None:
    _, ref, mine = new_pair()
    for call in (
        lambda lk: lk._acquire_restore(),
        lambda lk: lk._acquire_restore(1),
        lambda lk: lk._acquire_restore((1,)),
        lambda lk: lk._acquire_restore(("a", 1)),
        lambda lk: lk._release_save(1),
        lambda lk: lk._is_owned(1),
    ):
        assert outcome(lambda call=call: call(ref)) == outcome(lambda call=call: call(mine))
    assert not mine.locked()


def test_nested_with_and_release_by_a_non_owner() -> None:
    pool, ref, mine = new_pair()
    for lk in (ref, mine):
        with lk as entered:
            assert entered is True
            with lk:
                assert lk._recursion_count() == 2
                errors: list[str] = []
                run_threads([lambda lk=lk, errors=errors: errors.append(outcome(lk.release)[1])])
                assert errors == ["RuntimeError"]
                assert lk._recursion_count() == 2  # the hold is kept
            assert lk._recursion_count() == 1
        assert lk._recursion_count() == 0
        with pytest.raises(RuntimeError):
            lk.release()
        with pytest.raises(KeyError):
            with lk, lk:
                raise KeyError
        assert not lk._is_owned()
    assert len(pool) == 0


def test_non_owner_release_error_is_not_owner() -> None:
    pool, _, mine = new_pair()
    mine.acquire()
    seen: list[BaseException] = []

    def other() -> None:
        try:
            mine.release()
        except RuntimeError as e:
            seen.append(e)

    run_threads([other])
    assert len(seen) == 1 and isinstance(seen[0], keylock.NotOwnerError)
    assert "cannot release un-acquired lock" in str(seen[0])
    info = pool.info("k")
    assert info is not None and info.holds == 1 and info.owner is not None
    mine.release()


def _condition_run(lock: Lockish) -> tuple[list[int], int]:
    cond = threading.Condition(lock)
    items: list[int] = []
    consumed: list[int] = []
    n = 100

    def producer() -> None:
        for i in range(n):
            with cond, cond:  # nested: the Condition must release both holds to wait
                items.append(i)
                cond.notify()

    def consumer() -> None:
        while len(consumed) < n:
            with cond:
                with cond:
                    assert cond.wait_for(lambda: items, timeout=DEADLOCK), "consumer starved"
                    consumed.append(items.pop(0))

    run_threads([consumer, producer])
    with cond, cond:
        cond.wait(timeout=0.001)  # times out, and takes back both holds
        count = lock._recursion_count()
    return consumed, count


def test_condition_over_a_reentrant_handle_matches_rlock() -> None:
    pool, ref, mine = new_pair()
    assert _condition_run(ref) == _condition_run(mine) == (list(range(100)), 2)
    assert len(pool) == 0
    for lk in (ref, mine):
        cond = threading.Condition(lk)
        with pytest.raises(RuntimeError):
            cond.notify()  # not owned
        with pytest.raises(RuntimeError):
            cond.wait(0.001)


def test_repr_matches_rlock_form() -> None:
    _, ref, mine = new_pair()
    tail = r"owner=(\d+) count=(\d+) at 0x[0-9a-f]+>"
    assert re.fullmatch(r"<unlocked _thread\.RLock object " + tail, repr(ref))
    m = re.fullmatch(r"<unlocked keylock\.ReentrantKeyLock object key='k' " + tail, repr(mine))
    assert m and m.groups() == ("0", "0")
    with mine, mine:
        m = re.fullmatch(r"<locked keylock\.ReentrantKeyLock object key='k' " + tail, repr(mine))
        assert m and m.group(1) != "0" and m.group(2) == "2"


def test_reentrancy_limit_raises_overflow_error() -> None:
    pool, _, mine = new_pair()
    held = 0
    with pytest.raises(keylock.ReentrancyLimitError) as err:
        for _ in range(1 << 17):
            mine.acquire()
            held += 1
    assert isinstance(err.value, OverflowError)
    assert held == 1 << 16
    info = pool.info("k")
    assert info is not None and info.holds == held
    for _ in range(held):
        mine.release()
    assert len(pool) == 0


def test_force_unlock_makes_every_hold_stale() -> None:
    pool, _, mine = new_pair()
    mine.acquire()
    mine.acquire()
    fence = mine.fence
    assert pool.force_unlock("k")
    other = pool.lock("k")
    next_owner = Actor()
    try:
        assert next_owner.run(lambda: other.acquire(blocking=False)) == ("ok", True)
        for _ in range(2):
            with pytest.raises(keylock.NotOwnerError):
                mine.release()
        assert pool.is_locked("k")
        assert other.fence is not None and fence is not None and other.fence > fence
        assert next_owner.run(other.release) == ("ok", None)
    finally:
        next_owner.close()
    assert len(pool) == 0


def test_owner_is_the_task_inside_asyncio() -> None:
    async def main() -> None:
        pool = keylock.KeyPool(reentrant=True)
        h = pool.lock("k")
        entered = asyncio.Event()
        leave = asyncio.Event()

        async def owner() -> None:
            async with h:
                async with h:  # the same task: reentrant
                    assert h.acquire(blocking=False)  # a blocking-style acquire too
                    h.release()
                    info = pool.info("k")
                    assert info is not None and info.holds == 2
                    entered.set()
                    await leave.wait()

        async def other() -> None:
            await entered.wait()
            assert h.acquire(blocking=False) is False  # another task: not the owner
            assert await h.acquire_async(timeout=0.001) is False
            with pytest.raises(RuntimeError):
                h.release()
            assert not h._is_owned()
            leave.set()
            async with h:  # waits for the owner task to leave
                assert h._recursion_count() == 1

        await asyncio.gather(owner(), other())
        assert len(pool) == 0
        # A child task is not its parent: it gets its own owner.
        async with h:

            async def child() -> bool:
                return h.acquire(blocking=False)

            assert await asyncio.create_task(child()) is False

    arun(main())


def test_reentrant_striped_lock_and_shared_handles() -> None:
    s = keylock.StripedLock(8, reentrant=True)
    h = s.lock("k")
    assert isinstance(h, keylock.ReentrantKeyLock) and s.reentrant
    with h, h:
        assert h._recursion_count() == 2
    r = keylock.KeyPool(reentrant=True).read("k")
    assert type(r) is keylock.KeyLock and r.mode == "shared"
    r.acquire()
    got: list[str] = []
    run_threads([lambda: got.append(outcome(r.release)[1])])
    assert got == ["RuntimeError"]  # in a reentrant pool every hold belongs to its owner
    r.release()

"""A keylock handle follows threading.Lock's protocol: same results, same argument checks,
same exceptions. Every handle kind (KeyPool, StripedLock, lock_many, RwLock read/write) is
checked against a fresh threading.Lock side by side."""

from __future__ import annotations

import gc
import os
import re
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import keylock
from conftest import arun, run_script, run_threads


def _pool() -> keylock.LockHandle:
    return keylock.KeyPool().lock("k")


def _striped() -> keylock.LockHandle:
    return keylock.StripedLock(16).lock("k")


def _many() -> keylock.LockHandle:
    return keylock.KeyPool().lock_many(["a", "b", 3])


def _striped_many() -> keylock.LockHandle:
    return keylock.StripedLock(16).lock_many(["a", "b", 3])


def _write() -> keylock.LockHandle:
    return keylock.RwLock().write()


MAKERS: dict[str, Callable[[], keylock.LockHandle]] = {
    "pool": _pool,
    "striped": _striped,
    "many": _many,
    "striped_many": _striped_many,
    "write": _write,
}

# Exclusive handles: a second acquire fails while held, like threading.Lock. (A read handle is
# shared, so it is checked separately below.)
exclusive = pytest.mark.parametrize("make", list(MAKERS.values()), ids=list(MAKERS))


@exclusive
def test_acquire_release_locked(make: Callable[[], keylock.LockHandle]) -> None:
    h = make()
    assert not h.locked()
    assert h.acquire() is True
    assert h.locked()
    assert h.acquire(False) is False
    assert h.acquire(blocking=False) is False
    assert h.acquire(timeout=0) is False
    assert h.acquire(True, 0.01) is False
    assert h.acquire(timeout=0.01) is False
    h.release()
    assert not h.locked()
    assert h.acquire(timeout=0.5) is True
    h.release()
    assert h.acquire(blocking=False) is True
    h.release()


@exclusive
def test_release_unlocked_raises_runtime_error(make: Callable[[], keylock.LockHandle]) -> None:
    h = make()
    with pytest.raises(RuntimeError):
        h.release()
    with pytest.raises(keylock.NotLockedError):
        h.release()
    assert issubclass(keylock.NotLockedError, RuntimeError)


# Every argument combination that threading.Lock.acquire rejects or accepts: the handle must
# do the same (same exception type, same result). The flag says whether the call returns at
# once on a held lock (a valid call without a short timeout would wait).
ACQUIRE_ARGS: list[tuple[tuple[Any, ...], dict[str, Any], bool]] = [
    ((), {"timeout": None}, True),
    ((), {"timeout": "1"}, True),
    ((), {"timeout": -0.5}, True),
    ((), {"timeout": -2}, True),
    ((), {"timeout": -1e-9}, True),
    ((), {"timeout": -1.0}, False),
    ((), {"timeout": -1}, False),
    ((), {"blocking": False, "timeout": 1}, True),
    ((), {"blocking": False, "timeout": 0}, True),
    ((), {"blocking": False, "timeout": -1}, True),
    ((), {"timeout": float("nan")}, True),
    ((), {"timeout": float("inf")}, True),
    ((), {"timeout": threading.TIMEOUT_MAX * 2}, True),
    ((), {"timeout": 10**30}, True),
    ((), {"timeout": threading.TIMEOUT_MAX}, False),
    ((), {"timeout": True}, False),
    ((), {"timeout": 0.0}, True),
    ((), {"timeout": 0.001}, True),
    ((), {"blocking": "x"}, True),
    ((), {"blocking": None}, True),
    ((), {"blocking": 1.5}, True),
    ((), {"blocking": 2}, False),
    ((), {"blocking": 0}, True),
    ((0,), {}, True),
    ((1, 0.001), {}, True),
    ((1, 2, 3), {}, True),
    ((), {"foo": 1}, True),
    ((True,), {"blocking": True}, True),
]


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - compared below
        return ("raise", type(e))


@exclusive
@pytest.mark.parametrize(
    ("args", "kwargs", "returns_when_held"), ACQUIRE_ARGS, ids=[repr(a[:2]) for a in ACQUIRE_ARGS]
)
def test_acquire_arguments_match_threading(
    make: Callable[[], keylock.LockHandle],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    returns_when_held: bool,
) -> None:
    if returns_when_held:
        ref = threading.Lock()
        ref.acquire()
        h = make()
        h.acquire()
        assert _outcome(lambda: h.acquire(*args, **kwargs)) == _outcome(
            lambda: ref.acquire(*args, **kwargs)
        )
        h.release()
    # Free: a valid call takes the lock.
    ref2 = threading.Lock()
    h2 = make()
    got = _outcome(lambda: h2.acquire(*args, **kwargs))
    assert got == _outcome(lambda: ref2.acquire(*args, **kwargs))
    if got == ("ok", True):
        h2.release()


def test_acquire_arguments_blocking_forms_match_threading() -> None:
    # The forms that would block forever on a held lock, checked on a free one.
    for kwargs in ({}, {"timeout": -1}, {"timeout": -1.0}, {"blocking": True}):
        for make in MAKERS.values():
            h = make()
            assert h.acquire(**kwargs) is threading.Lock().acquire(**kwargs) is True
            h.release()


def test_timeout_max_boundary() -> None:
    h = _pool()
    assert h.acquire(timeout=threading.TIMEOUT_MAX) is True
    with pytest.raises(OverflowError):
        h.acquire(timeout=threading.TIMEOUT_MAX * 1.01)
    h.release()


@exclusive
def test_with_releases_on_any_exception(make: Callable[[], keylock.LockHandle]) -> None:
    h = make()
    with h as entered:
        assert entered is True
        assert h.locked()
    assert not h.locked()
    for exc in (ValueError("x"), KeyboardInterrupt(), SystemExit(3)):
        with pytest.raises(type(exc)):
            with h:
                raise exc
        assert not h.locked()


def test_with_timeout_raises_lock_timeout() -> None:
    pool = keylock.KeyPool()
    with pool.lock("k"):
        with pytest.raises(keylock.LockTimeout):
            with pool.lock("k", timeout=0.05):
                pytest.fail("entered a held lock")  # pragma: no cover
        with pytest.raises(TimeoutError):
            with pool.lock("k", timeout=0):
                pytest.fail("entered a held lock")  # pragma: no cover
    assert issubclass(keylock.LockTimeout, TimeoutError)
    assert len(pool) == 0


@pytest.mark.parametrize("bad", [-1, -0.1, float("nan"), "1", [1]])
def test_handle_timeout_argument_checked(bad: Any) -> None:
    pool, striped, rw = keylock.KeyPool(), keylock.StripedLock(), keylock.RwLock()
    for make in (
        lambda t: pool.lock("k", timeout=t),
        lambda t: pool.lock_many(["k"], timeout=t),
        lambda t: striped.lock("k", t),
        lambda t: striped.lock_many(["k"], t),
        lambda t: rw.read(timeout=t),
        lambda t: rw.write(t),
        lambda t: pool.lock("k").acquire_async(timeout=t),
    ):
        with pytest.raises((ValueError, TypeError)):
            make(bad)
    with pytest.raises(OverflowError):
        pool.lock("k", timeout=threading.TIMEOUT_MAX * 2)


def test_handle_timeout_property() -> None:
    pool = keylock.KeyPool()
    assert pool.lock("k").timeout is None
    assert pool.lock("k", 2).timeout == 2.0
    assert keylock.RwLock().read(0.5).timeout == 0.5


def _repr_pattern(state: str, cls: str, rest: str) -> str:
    return rf"<{state} keylock\.{cls} object{rest} at 0x[0-9a-f]+>"


def test_repr_forms() -> None:
    pool = keylock.KeyPool()
    h = pool.lock("user:1")
    assert re.fullmatch(_repr_pattern("unlocked", "KeyLock", " key='user:1'"), repr(h))
    with h:
        assert re.fullmatch(_repr_pattern("locked", "KeyLock", " key='user:1'"), repr(h))
    # threading.Lock's form, for comparison
    assert re.fullmatch(r"<unlocked _thread\.lock object at 0x[0-9a-f]+>", repr(threading.Lock()))
    assert f"at {hex(id(h))}>" in repr(h)
    assert "key=b'\\xff'" in repr(pool.lock(b"\xff"))
    s = keylock.StripedLock(8).lock("k")
    assert re.fullmatch(_repr_pattern("unlocked", "KeyLock", " key='k'"), repr(s))
    m = pool.lock_many(["a", "b"])
    with m:
        assert re.fullmatch(_repr_pattern("locked", "ManyLock", " keys=\\['a', 'b'\\]"), repr(m))
    rw = keylock.RwLock()
    assert re.fullmatch(_repr_pattern("unlocked", "ReadLock", ""), repr(rw.read()))
    with rw.write():
        assert re.fullmatch(_repr_pattern("locked", "WriteLock", ""), repr(rw.write()))
        assert re.fullmatch(_repr_pattern("locked", "ReadLock", ""), repr(rw.read()))
    assert "KeyPool" in repr(pool) and "StripedLock" in repr(keylock.StripedLock())


def test_weakref() -> None:
    for make in (*MAKERS.values(), lambda: keylock.RwLock().read()):
        h = make()
        r = weakref.ref(h)
        assert r() is h
        del h
        gc.collect()
        assert r() is None
    ws: weakref.WeakSet[keylock.LockHandle] = weakref.WeakSet()
    h = _pool()
    ws.add(h)
    assert h in ws


def test_classes() -> None:
    pool = keylock.KeyPool()
    assert type(pool.lock("k")) is keylock.KeyLock
    assert type(keylock.StripedLock().lock("k")) is keylock.KeyLock
    assert type(pool.lock_many(["k"])) is keylock.ManyLock
    assert type(keylock.RwLock().read()) is keylock.ReadLock
    assert type(keylock.RwLock().write()) is keylock.WriteLock
    for cls in (keylock.KeyLock, keylock.ManyLock, keylock.ReadLock, keylock.WriteLock):
        assert issubclass(cls, keylock.LockHandle)
        with pytest.raises(TypeError):
            cls()
    assert pool.lock("k").key == b"k"
    assert pool.lock_many(["a", 1]).keys == [b"a", keylock.key_bytes(1)]


@exclusive
def test_bound_enter_and_exit(make: Callable[[], keylock.LockHandle]) -> None:
    """`h.__enter__` and `h.__exit__` behave as bound methods whichever form `with` gets (the
    handle's own slot, or a plain bound method while the slot is held elsewhere)."""
    h = make()
    refs = sys.getrefcount(h)
    for _ in range(100):
        with h:
            assert h.locked()
    assert not h.locked()
    assert sys.getrefcount(h) == refs
    enter, leave = h.__enter__, h.__exit__
    assert enter.__self__ is h and leave.__self__ is h
    assert re.fullmatch(r"<bound method LockHandle.__enter__ of <.*>>", repr(enter)), repr(enter)
    assert "__exit__" in repr(leave)
    # Held here, so a `with` meanwhile gets plain bound methods; both forms act the same.
    with h:
        assert h.locked()
    assert enter() is True and h.locked()
    assert leave(None, None, None) is None and not h.locked()
    assert enter(*()) is True  # a call through an argument tuple
    assert leave(exc_type=None, _exc=None, _tb=None) is None and not h.locked()
    with pytest.raises(TypeError, match=r"takes no arguments \(1 given\)"):
        enter(1)
    with pytest.raises(TypeError):
        leave(None)
    del enter, leave
    assert sys.getrefcount(h) == refs
    # On the class: the method descriptors, as on any type.
    assert type(keylock.LockHandle.__enter__).__name__ == "method_descriptor"
    assert keylock.LockHandle.__enter__(h) is True
    assert type(h).__exit__(h, None, None, None) is None and not h.locked()
    descr = vars(keylock.LockHandle)["__enter__"]
    assert descr.__name__ == "__enter__" and descr.__doc__
    with pytest.raises(TypeError, match="doesn't apply to a 'int' object"):
        descr.__get__(42)
    with pytest.raises(TypeError):
        type(h.__enter__)()


def test_bound_method_keeps_its_handle() -> None:
    """A bound `__enter__` or `__exit__` keeps its handle alive, and lets it go with its last
    reference; a handle used by `with` alone is freed when the block ends."""
    pool = keylock.KeyPool()
    h = pool.lock("k")
    gone = weakref.ref(h)
    leave = h.__exit__
    del h
    gc.collect()
    assert gone() is not None
    assert leave.__self__.acquire()
    leave(None, None, None)
    del leave
    assert gone() is None
    with pool.lock("k") as took:
        assert took is True
    seen: list[weakref.ref[keylock.LockHandle]] = []
    for _ in range(3):
        h = pool.lock("k")
        seen.append(weakref.ref(h))
        with h:
            del h
    assert [r() for r in seen] == [None, None, None]
    assert not pool.is_locked("k")


def test_direct_handles_match_pyo3s() -> None:
    """Every call that returns a handle makes it without pyo3's initializer chain (the layout
    was checked when the module loaded, against a handle pyo3 made), of the class the module
    shows: those handles are whole objects, and making and dropping them leaves every count
    where it was. No handle is left to the cycle collector (nothing can be reached through one),
    and each is still freed with its last reference."""
    from keylock import _keylock

    pool, rpool, rw, sem = (
        keylock.KeyPool(),
        keylock.KeyPool(reentrant=True),
        keylock.RwLock(),
        keylock.Semaphore(2),
    )
    makers: dict[str, Callable[[], keylock.LockHandle]] = {
        "KeyLock": lambda: pool.lock("k", timeout=2.5),
        "ReentrantKeyLock": lambda: rpool.lock("k", timeout=2.5),
        "ManyLock": lambda: pool.lock_many(["k", "j"], timeout=2.5),
        "ReadLock": lambda: rw.read(timeout=2.5),
        "WriteLock": lambda: rw.write(timeout=2.5),
        "Permit": lambda: sem.acquire("k", timeout=2.5),
    }
    gone: list[str] = []  # weak-reference callbacks run
    for name, make in makers.items():
        first, h = make(), make()
        assert _keylock._direct_handles()[name] is True, name
        assert type(h) is type(first) is getattr(keylock, name) and type(h).__name__ == name
        assert type(h).__doc__ and type(h).__doc__ == type(h).__mro__[1].__doc__
        assert isinstance(h, keylock.LockHandle)
        assert sys.getsizeof(h) == sys.getsizeof(first)
        assert not gc.is_tracked(h) and not gc.is_tracked(first) and not hasattr(h, "__dict__")
        assert (h.timeout, h.lease) == (2.5, None)
        assert not h.locked()
        with h:
            assert h.locked() or name in ("ReadLock", "Permit")
            assert h.is_current()
        assert not h.is_current()
        r = weakref.ref(h, lambda _, name=name: gone.append(name))
        del h
        assert r() is None and gone[-1] == name
        del first
    assert gone == list(makers)
    h = pool.lock("k")
    assert (h.key, h.mode, h.fence) == (b"k", "exclusive", None)
    del h
    gc.collect()
    owners = (pool, rpool, rw, sem)
    refs = [sys.getrefcount(o) for o in owners]
    types = [sys.getrefcount(getattr(keylock, name)) for name in makers]
    for i in range(2_000):
        for make in makers.values():
            with make():
                pass
            make()
        pool.lock(i)
    gc.collect()
    assert [sys.getrefcount(o) for o in owners] == refs
    assert [sys.getrefcount(getattr(keylock, name)) for name in makers] == types
    assert not pool.is_locked("k") and not rw.is_locked()


def test_freed_handles_are_made_again_whole() -> None:
    """Each handle class keeps its freed handles on a free list and makes the next handle from
    the last one freed: that handle is a new object in all but its address (no weak reference,
    nothing held, the new call's key and arguments), and the old one's weak references were
    cleared when it was freed."""
    pool, rpool, rw, sem = (
        keylock.KeyPool(),
        keylock.KeyPool(reentrant=True),
        keylock.RwLock(),
        keylock.Semaphore(2),
    )
    makers: dict[str, Callable[[str, float | None], keylock.LockHandle]] = {
        "KeyLock": lambda k, t: pool.lock(k, timeout=t),
        "ReentrantKeyLock": lambda k, t: rpool.lock(k, timeout=t),
        "ManyLock": lambda k, t: pool.lock_many([k, "z"], timeout=t),
        "ReadLock": lambda k, t: rw.read(timeout=t),
        "WriteLock": lambda k, t: rw.write(timeout=t),
        "Permit": lambda k, t: sem.acquire(k, timeout=t),
    }
    for name, make in makers.items():
        old = make("a", 2.5)
        old.acquire()
        cleared: list[object] = []
        r = weakref.ref(old, cleared.append)
        where, size = id(old), sys.getsizeof(old)
        old.release()
        del old
        assert r() is None and len(cleared) == 1, name
        # An object of the handle's size, made in between, would take the freed block had it
        # gone back to CPython's allocator (and the next handle then another block).
        filler = bytes(size - sys.getsizeof(b""))
        new = make("b", 1.5)
        assert id(new) == where, name  # the free list gave back the handle just freed
        assert sys.getsizeof(filler) == size
        del filler
        assert type(new).__name__ == name and not gc.is_tracked(new)
        assert weakref.getweakrefcount(new) == 0 and not new.is_current()
        assert (new.timeout, new.lease) == (1.5, None)
        if name in ("KeyLock", "ReentrantKeyLock", "Permit"):
            assert new.key == b"b"
        with new:
            assert new.is_current()
        assert not new.is_current()
        r2 = weakref.ref(new)
        del new
        assert r2() is None
    assert not pool.is_locked("a") and not pool.is_locked("b") and not rw.is_locked()
    assert not rpool.is_locked("b") and sem.info("b") is None


def test_bound_async_enter_and_exit() -> None:
    """`async with` binds `__aenter__` and `__aexit__` the same way (sharing the slots of
    `__enter__` and `__exit__`), and a `with` inside an `async with` on the same reentrant
    handle gets plain bound methods for the slot held."""
    pool = keylock.KeyPool(reentrant=True)
    h = pool.lock("k")
    refs = sys.getrefcount(h)

    async def main() -> None:
        for _ in range(50):
            async with h:
                assert h.locked()
                with h:
                    assert pool.info("k").holds == 2
            assert not h.locked()
        aenter, aexit = h.__aenter__, h.__aexit__
        assert aenter.__self__ is h and "__aenter__" in repr(aenter) and "__aexit__" in repr(aexit)
        await aenter()
        assert h.locked()
        await aexit(None, None, None)
        assert not h.locked()
        with pytest.raises(TypeError, match=r"__aenter__\(\) takes no arguments \(1 given\)"):
            aenter(1)

    arun(main())
    assert sys.getrefcount(h) == refs


def test_bound_methods_nested_and_across_threads() -> None:
    """Nested `with` blocks on one reentrant handle, and threads sharing one handle, each find
    the handle's slot taken and get plain bound methods: the counts stay exact."""
    h = keylock.KeyPool(reentrant=True).lock("k")
    with h, h:
        with h:
            assert h.locked()
    assert not h.locked()
    shared = keylock.KeyPool().lock("s")
    inside = 0
    most = 0
    done = 0

    def worker() -> None:
        nonlocal inside, most, done
        for _ in range(300):
            with shared:
                inside += 1
                most = max(most, inside)
                inside -= 1
                done += 1

    run_threads([worker] * 4)
    assert (done, most) == (1200, 1)
    assert not shared.locked()


def test_every_public_name_has_a_docstring() -> None:
    for name in keylock.__all__:
        obj = getattr(keylock, name)
        if name == "__version__":
            continue
        assert obj.__doc__, name
        if isinstance(obj, type):
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr not in (
                    "__enter__",
                    "__exit__",
                    "__aenter__",
                    "__aexit__",
                    "__len__",
                ):
                    continue
                assert getattr(member, "__doc__", None), f"{name}.{attr}"


def test_a_handle_releases_only_what_it_acquired() -> None:
    # Two handles for one key see the same lock, but each releases only its own acquisition:
    # a handle that holds nothing cannot free the key (there is no release by key).
    pool = keylock.KeyPool()
    a, b = pool.lock("k"), pool.lock("k")
    a.acquire()
    assert b.locked()
    assert b.acquire(blocking=False) is False
    with pytest.raises(keylock.NotLockedError):
        b.release()
    assert a.locked() and pool.is_locked("k")
    a.release()
    assert not a.locked()
    assert len(pool) == 0


def test_release_from_another_thread() -> None:
    pool = keylock.KeyPool()
    h = pool.lock("k")
    h.acquire()
    run_threads([h.release])
    assert not h.locked()
    # and acquire in one thread, release in another, wait in a third
    h.acquire()
    waiter = pool.lock("k")
    got: list[bool] = []
    run_threads([lambda: got.append(waiter.acquire(timeout=20)), h.release])
    assert got == [True]
    assert waiter.locked()
    run_threads([waiter.release])
    assert not pool.is_locked("k")


def test_condition_over_keylock_handle() -> None:
    pool = keylock.KeyPool()
    cond = threading.Condition(pool.lock("queue"))
    items: list[int] = []
    consumed: list[int] = []
    n = 200

    def producer() -> None:
        for i in range(n):
            with cond:
                items.append(i)
                cond.notify()

    def consumer() -> None:
        while len(consumed) < n:
            with cond:
                assert cond.wait_for(lambda: items, timeout=20), "consumer starved"
                consumed.append(items.pop(0))

    run_threads([consumer, producer])
    assert consumed == list(range(n))
    assert len(pool) == 0
    # Condition checks ownership through acquire(False): not owned when free.
    with pytest.raises(RuntimeError):
        cond.notify()


def test_condition_wait_timeout_reacquires() -> None:
    pool = keylock.KeyPool()
    cond = threading.Condition(pool.lock("c"))
    with cond:
        assert cond.wait(timeout=0.01) is False
        assert pool.is_locked("c")
    assert not pool.is_locked("c")


def test_read_handle_protocol() -> None:
    rw = keylock.RwLock()
    r1, r2, w = rw.read(), rw.read(), rw.write()
    assert r1.acquire() and r2.acquire(blocking=False)  # readers share
    assert rw.is_locked() and not rw.is_write_locked()
    assert not r1.locked()  # a reader could still enter
    assert w.locked() and w.acquire(timeout=0.01) is False
    r1.release()
    r2.release()
    with pytest.raises(keylock.NotLockedError):
        r1.release()
    with w:
        assert r1.locked() and r1.acquire(blocking=False) is False
        assert rw.is_write_locked()
    assert not rw.is_locked()
    with pytest.raises(keylock.NotLockedError):
        w.release()


def test_lock_many_all_or_none() -> None:
    pool = keylock.KeyPool()
    with pool.lock("b"):
        m = pool.lock_many(["a", "b", "c"])
        assert m.locked()  # one of its keys is held
        assert m.acquire(blocking=False) is False
        assert not pool.is_locked("a") and not pool.is_locked("c")
        assert m.acquire(timeout=0.02) is False
        assert len(pool) == 1
    with pool.lock_many(["a", "b", "c", "a"]) as entered:  # duplicates are fine
        assert entered is True
        assert all(pool.is_locked(k) for k in "abc")
    assert len(pool) == 0


def test_lock_many_empty() -> None:
    pool = keylock.KeyPool()
    with pytest.raises(ValueError):
        with pool.lock_many([]):
            pass  # pragma: no cover


def test_pool_len_and_stats() -> None:
    pool = keylock.KeyPool()
    assert len(pool) == 0
    hs = [pool.lock(i) for i in range(5)]
    for h in hs:
        h.acquire()
    assert len(pool) == 5
    st = pool.stats()
    assert set(st) == {
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
    assert st["capacity"] is None  # an in-process pool grows as it needs
    assert st["entries_in_use"] == 5
    assert st["held"] == 5 and st["waiting"] == 0 and st["peak_in_use"] >= 5
    for h in hs:
        h.release()
    assert len(pool) == 0 and pool.stats()["held"] == 0 and pool.stats()["entries_in_use"] == 0


def test_striped_properties() -> None:
    s = keylock.StripedLock(1000)
    assert s.stripes == 1024
    assert keylock.StripedLock().stripes == 1024
    assert keylock.StripedLock(1).stripes == 1
    for bad in (0, -1):
        with pytest.raises(ValueError):
            keylock.StripedLock(bad)
    with pytest.raises(ValueError):
        keylock.StripedLock(keylock.StripedLock.MAX_STRIPES * 2)
    with pytest.raises(TypeError):
        keylock.StripedLock("8")  # type: ignore[arg-type]
    a, b = keylock.StripedLock(64, seed=7), keylock.StripedLock(64, seed=7)
    assert [a.stripe_of(i) for i in range(100)] == [b.stripe_of(i) for i in range(100)]
    # keys on one stripe share its lock
    k0 = 0
    k1 = next(i for i in range(1, 10_000) if a.stripe_of(i) == a.stripe_of(k0))
    with a.lock(k0):
        assert a.is_locked(k1) and not a.lock(k1).acquire(blocking=False)


def test_open_by_name() -> None:
    pool = keylock.KeyPool.open("local:", fifo=True)
    assert type(pool) is keylock.KeyPool and isinstance(pool, keylock.KeyedLock)
    assert (pool.name, pool.reentrant, pool.fifo) == ("local:", False, True)
    with pool.lock("k"):
        assert pool.is_locked("k")
    r = keylock.KeyPool.open("", reentrant=True)
    assert r.reentrant and isinstance(r.lock("k"), keylock.ReentrantKeyLock)
    assert keylock.KeyPool().name == "local:"
    s = keylock.StripedLock.open("local:", 8, seed=3)
    assert type(s) is keylock.StripedLock and s.stripes == 8
    twin = keylock.StripedLock(8, seed=3)
    assert [s.stripe_of(i) for i in range(50)] == [twin.stripe_of(i) for i in range(50)]
    for bad in ("nope", "bogus:x", "local:x"):
        with pytest.raises(ValueError):
            keylock.KeyPool.open(bad)
    with pytest.raises(ValueError, match="shared-memory"):
        keylock.KeyPool.open("local:", capacity=10)
    with pytest.raises(ValueError):
        keylock.StripedLock.open("local:", 0)


@pytest.fixture
def shm_region_name() -> Iterator[str]:
    """A shared-memory region name of this test process, whose files are removed afterwards."""
    name = f"keylock-py-test-{os.getpid()}"
    yield name
    try:
        keylock.unlink(f"shm:{name}")
    except ValueError:
        pass  # a build without the shared-memory scope made no region


@pytest.mark.parametrize("name", ["shm:", "redis://127.0.0.1:1/0"])
def test_other_scopes_open_by_name_where_the_build_has_them(
    name: str, shm_region_name: str
) -> None:
    if name == "shm:":
        name += shm_region_name
    # This build may lack the scope (ValueError naming it); where it has it, the same API works
    # (or, for a server that is not there, UnavailableError).
    try:
        pool = keylock.KeyPool.open(name, capacity=64 if name.startswith("shm") else None)
    except ValueError as e:
        assert ("shared-memory" in str(e)) or ("Redis" in str(e)), e
        return
    except keylock.UnavailableError:
        return
    h = pool.lock("k")
    with h:
        assert pool.is_locked("k") and h.fence is not None
        if name.startswith("shm"):
            # Another process sees the same lock through the same name.
            probe = (
                "import keylock; "
                f"p = keylock.KeyPool.open({name!r}, capacity=64); "
                "h = p.lock('k'); print(h.acquire(blocking=False))"
            )
            assert run_script(probe).stdout.strip() == "False"
    assert not pool.is_locked("k")
    if name.startswith("shm"):
        path = f"/dev/shm/keylock.{shm_region_name}"
        assert os.path.exists(path)
        assert keylock.unlink(name) is True
        assert not os.path.exists(path)
        assert keylock.unlink(name) is False
        # The old open keeps its region; a new open of the name makes a fresh one.
        fresh = keylock.KeyPool.open(name, capacity=64)
        assert os.path.exists(path)
        old = pool.lock("k")
        with old:
            assert not fresh.is_locked("k"), "the new region is not the old one"
            new = fresh.lock("k")
            with new:
                assert new.fence is not None and old.fence is not None
                # The fences of the fresh region start again (the old one has seen two).
                assert new.fence < old.fence


def test_unlink_takes_only_shm_names() -> None:
    for bad in ("local:", "", "redis://127.0.0.1:1/0", "nope"):
        with pytest.raises(ValueError):
            keylock.unlink(bad)
    with pytest.raises(TypeError):
        keylock.unlink(b"shm:x")  # type: ignore[arg-type]

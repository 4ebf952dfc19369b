"""Every form of call that the handle-making methods and the `with` methods accept.

`lock`, `read`, `write`, `__enter__`, `__exit__`, `__aenter__` and `__aexit__` are made by hand
for speed (py/src/vectorcall.rs); these pin their signatures: positional and keyword arguments,
defaults, and the errors for a wrong call, with the messages pyo3's wrappers gave.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest

import keylock


@pytest.mark.parametrize("name", ["lock", "read", "write"])
def test_handle_methods_take_key_timeout_and_lease(name: str) -> None:
    pool = keylock.KeyPool()
    make = getattr(pool, name)
    assert make("k").timeout is None and make("k").lease is None
    assert make("k", 1.5).timeout == 1.5
    assert make("k", None).timeout is None
    assert make("k", timeout=2).timeout == 2.0
    assert make(key="k", timeout=2, lease=3).lease == 3.0
    assert make("k", lease=0.5).lease == 0.5
    assert make(b"k").key == b"k"
    assert str(inspect.signature(getattr(keylock.KeyPool, name))) == (
        "(self, /, key, timeout=None, *, lease=None)"
    )


@pytest.mark.parametrize("cls", [keylock.KeyPool, keylock.StripedLock])
def test_handle_methods_reject_wrong_calls(cls: type[keylock.KeyedLock]) -> None:
    lock = cls().lock
    with pytest.raises(TypeError, match=r"lock\(\) missing 1 required positional argument: 'key'"):
        lock()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"takes from 1 to 2 positional arguments but 3 were"):
        lock("k", 1, 2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        lock("k", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'key'"):
        lock("k", key="j")  # type: ignore[misc]
    with pytest.raises(ValueError):
        lock("k", -1)
    with pytest.raises(ValueError):
        lock("k", lease=0)
    with pytest.raises(TypeError):
        lock("k", timeout="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lock(1.5)  # type: ignore[arg-type]


def test_exit_takes_its_three_arguments_by_position_or_name() -> None:
    pool = keylock.KeyPool()
    h = pool.lock("k")
    assert h.__enter__() is True
    h.__exit__(exc_type=None, _exc=None, _tb=None)  # type: ignore[call-arg]
    assert not pool.is_locked("k")
    h.__enter__()
    h.__exit__(None, None, _tb=None)  # type: ignore[call-arg]
    assert not pool.is_locked("k")
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: '_tb'"):
        h.__exit__(None, None)  # type: ignore[call-arg]
    with pytest.raises(
        TypeError, match=r"missing 3 required positional arguments: 'exc_type', '_exc', and '_tb'"
    ):
        h.__exit__()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 3 positional arguments but 4 were given"):
        h.__exit__(None, None, None, None)  # type: ignore[call-arg]
    # a wrong call releases nothing
    h.__enter__()
    with pytest.raises(TypeError):
        h.__exit__(None)  # type: ignore[call-arg]
    assert pool.is_locked("k")
    h.__exit__(None, None, None)
    assert not pool.is_locked("k")


def test_exit_with_an_exception_in_flight_hides_a_stale_release() -> None:
    pool = keylock.KeyPool()
    h = pool.lock("k")
    h.__enter__()
    pool.force_unlock("k")
    h.__exit__(RuntimeError, RuntimeError("x"), None)  # no NotOwnerError over the exception
    h.__enter__()
    pool.force_unlock("k")
    with pytest.raises(keylock.NotOwnerError):
        h.__exit__(None, None, None)


def test_async_methods_take_the_same_forms() -> None:
    async def main() -> None:
        pool = keylock.KeyPool()
        h = pool.lock("k")
        await h.__aenter__()
        assert pool.is_locked("k")
        await h.__aexit__(exc_type=None, _exc=None, _tb=None)  # type: ignore[call-arg]
        assert not pool.is_locked("k")
        with pytest.raises(TypeError, match="missing 1 required positional argument"):
            await h.__aexit__(None, None)  # type: ignore[call-arg]

    asyncio.run(main())

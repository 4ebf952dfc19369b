"""Per-key locks for Python threads and asyncio tasks.

keylock replaces the two usual patterns:

* a dict of ``threading.Lock`` objects, one per key, which grows forever (or races when
  entries are evicted): use :class:`KeyPool`, exact per key, with memory only for the keys held
  or waited for, or :class:`StripedLock`, a fixed set of locks shared by hashing;
* a pure-Python reader-writer lock: use :class:`RwLock`, whose readers scale, or the per-key
  ``read``/``write`` handles of a pool;
* a dict of ``threading.BoundedSemaphore`` objects, one per key (at most N at once per
  tenant, per host): use :class:`Semaphore`, with weighted, strictly FIFO acquires.

Every lock is reached through a handle with ``threading.Lock``'s protocol, so existing code
keeps working::

    pool = keylock.KeyPool()
    with pool.lock("user:42"):            # a threading.Lock-like handle
        ...
    async with pool.lock("user:42", timeout=1.0):   # raises keylock.LockTimeout after 1 s
        ...
    with pool.read("doc:7"):                         # many readers, or one writer
        ...
    with pool.lock_many(["acct:1", ("rates", "shared")]):  # all or none, deadlock-free
        ...

Semaphores
----------
``keylock.Semaphore(permits)`` lets at most ``permits`` units of each key be held at once.
``sem.acquire(key, weight=1)`` returns a handle (a :class:`Permit`) that takes ``weight`` units
when it is acquired, with the same protocol as a lock handle::

    sem = keylock.Semaphore(4)
    with sem.acquire("host:db1"):                   # one of the 4 units of "host:db1"
        ...
    async with sem.acquire("host:db1", weight=2, timeout=1.0):
        ...

Requests for one key are served strictly in order: a heavy request at the head of the queue is
never passed by lighter ones that came after it. Every acquisition has its own fence.

Decorators
----------
``@pool.synchronized(key)`` (on :class:`KeyPool` and :class:`StripedLock`) and
``@sem.limit(key, weight=1)`` (on :class:`Semaphore`) run a function under the lock (or the
units) of a key taken from its arguments: ``key`` names one of the function's parameters, or is
a callable given the same arguments as the function. They work on ``def`` functions (a blocking
``with``) and ``async def`` ones (``async with``)::

    @pool.synchronized("user_id", timeout=5.0)      # one call at a time per user
    def charge(user_id: int, amount: int) -> None: ...

    @sem.limit(lambda req: req.host)                # at most 4 calls at once per host
    async def fetch(req: Request) -> bytes: ...

Ownership and fences
--------------------
A handle keeps the record of each acquisition it made and releases exactly that record, never
the key: a handle whose acquisition was force-unlocked (:meth:`KeyedLock.force_unlock`) or
whose lease ran out can never release the key's next holder (its ``release()`` raises
:class:`NotOwnerError` / :class:`LeaseExpiredError`). Each acquisition has a ``fence``, a number
that rises every time the key passes to a new exclusive holder: pass it to the store the lock
protects, and have the store reject a write whose fence is lower than one it has seen, so that
a holder that stalled past its lease cannot overwrite newer data. ``lease=seconds`` on a handle
or an acquire ends the acquisition by itself; ``lease_remaining()`` and ``extend()`` manage it.

Reentrancy
----------
``KeyPool(reentrant=True)`` (and ``StripedLock(..., reentrant=True)``) hands out
:class:`ReentrantKeyLock` handles that follow ``threading.RLock``'s protocol: the owner is the
calling thread, or the current task inside asyncio; it may acquire again, and only it may
release (``RuntimeError`` otherwise). ``threading.Condition`` accepts such a handle as its lock.

Keys
----
A key is a byte string. ``str`` keys are their UTF-8 bytes (so text keys agree with the C,
Node and Rust front ends), ``bytes``, ``bytearray`` and ``memoryview`` their contents, and an
``int`` is 8 bytes: the value as a signed 64-bit big-endian two's-complement integer
(``OverflowError`` outside ``-2**63 .. 2**63-1``). ``bool`` is rejected (``True == 1`` would
share a key with ``1``), and any other type raises ``TypeError``. Values with the same bytes
are the same key: ``"a"``, ``b"a"`` and ``bytearray(b"a")`` name one lock. :func:`key_bytes`
shows the bytes of any key.

Waiting
-------
A blocking ``acquire`` first tries without releasing the GIL; if it must wait, it waits with
the GIL released, so other threads run, and checks for signals every 50 ms, so Ctrl-C
interrupts it promptly and leaves the lock not taken. An asyncio acquire occupies no thread:
ten thousand tasks waiting for one key cost memory only, and cancelling a task
(``task.cancel()``, ``asyncio.wait_for``, ``asyncio.timeout``) leaves nothing held. Threads and
tasks may wait for the same key; they are served from one queue.

Errors
------
keylock's own exceptions derive from :class:`KeylockError` and from the standard exception
code written for ``threading`` already catches: :class:`LockTimeout` (a ``TimeoutError``) is
raised by ``with``/``async with`` on a handle made with a ``timeout`` when the wait runs out
(``acquire``/``acquire_async`` return ``False`` instead); :class:`NotLockedError` (a
``RuntimeError``, as ``threading.Lock``'s) by ``release()`` of a handle that holds nothing;
:class:`NotOwnerError` and :class:`LeaseExpiredError` (``RuntimeError``) by the release of a
stale acquisition or by a non-owner; :class:`ReentrancyLimitError` (``OverflowError``, as
``threading.RLock``'s). Each carries the ``status`` name and ``code`` number that every keylock
front end reports.

A handle that is garbage-collected while it still holds releases what it holds, with a
``ResourceWarning`` (as an unclosed file does): release handles explicitly, or use ``with``.

Metrics
-------
``KeyPool(metrics=True)`` (and the same keyword on :class:`StripedLock`, :class:`Semaphore`
and their ``open``) makes a lock object that counts what it does; ``metrics()`` reads the
totals since it was opened as a frozen :class:`MetricsSnapshot` (None without ``metrics=True``,
and then nothing is counted)::

    pool = keylock.KeyPool(metrics=True)
    m = pool.metrics()
    m.acquired, m.contended, m.timed_out, m.would_block, m.cancelled  # ints
    m.wait.count, m.wait.sum, m.wait.max, m.wait.quantile(0.99)     # seconds, as floats
    m._asdict()                                                     # a dict

``wait`` and ``hold`` are :class:`HistogramSnapshot` objects, in power-of-two buckets of
nanoseconds. :mod:`keylock.prometheus` exports them to prometheus_client.

Fork
----
``os.fork()`` copies every lock as it is at that moment. In the child, a key held by the
thread that called ``fork`` is still held and may be released there through its handle. A key
held by any other thread of the parent stays held for good, since that thread does not exist
in the child (``force_unlock`` frees it); so does a key that had waiters in the parent, once it
is handed to one of them. The simple rule is ``threading.Lock``'s: fork while no lock is held
or waited for, or make fresh locks in the child. A lock object of a scope that lives outside
the process (``shm:``, ``redis://``, ``postgres://``) is its parent's open: in the child every
call on it raises :class:`UnavailableError`, and the child opens the scope again.
"""

import functools
import inspect
from collections.abc import Callable
from typing import Any

from ._keylock import (
    CapacityExceededError,
    HistogramSnapshot,
    IncompatibleError,
    KeyedLock,
    KeyLock,
    KeylockError,
    KeyPool,
    LeaseExpiredError,
    LockHandle,
    LockInfo,
    LockTimeout,
    ManyLock,
    MetricsSnapshot,
    NotLockedError,
    NotOwnerError,
    PermissionDeniedError,
    Permit,
    ReadLock,
    ReentrancyLimitError,
    ReentrantKeyLock,
    RwLock,
    Semaphore,
    StripedLock,
    UnavailableError,
    WouldBlockError,
    WriteLock,
    __version__,
    key_bytes,
    unlink,
)

__all__ = [
    "CapacityExceededError",
    "HistogramSnapshot",
    "IncompatibleError",
    "KeyLock",
    "KeyPool",
    "KeyedLock",
    "KeylockError",
    "LeaseExpiredError",
    "LockHandle",
    "LockInfo",
    "LockTimeout",
    "ManyLock",
    "MetricsSnapshot",
    "NotLockedError",
    "NotOwnerError",
    "PermissionDeniedError",
    "Permit",
    "ReadLock",
    "ReentrancyLimitError",
    "ReentrantKeyLock",
    "RwLock",
    "Semaphore",
    "StripedLock",
    "UnavailableError",
    "WouldBlockError",
    "WriteLock",
    "__version__",
    "key_bytes",
    "unlink",
]


# ---- argument-keyed decorators: @pool.synchronized(key) and @sem.limit(key) ----
#
# They only choose the key from the call's arguments and wait in the caller's style (`with` for
# a plain function, `async with` for a coroutine function); the handles do the rest.


def _key_of(func: Callable[..., Any], key: str | Callable[..., Any]) -> Callable[..., Any]:
    """The function that picks the key from a call's arguments: `key` itself if it is
    callable, else the argument bound to the parameter `key` names."""
    if callable(key):
        return key
    if not isinstance(key, str):
        raise TypeError(
            f"key must be a parameter name (str) or a callable, not {type(key).__name__}"
        )
    signature = inspect.signature(func)
    param = signature.parameters.get(key)
    if param is None:
        raise TypeError(f"{func.__qualname__}() has no parameter {key!r}")
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        raise TypeError(f"the key parameter {key!r} of {func.__qualname__}() is not one value")
    index = list(signature.parameters).index(key)
    by_position = param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
    by_name = param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)

    def pick(*args: Any, **kwargs: Any) -> Any:
        # The usual calls without binding every argument; the rest (defaults, wrong calls,
        # which raise TypeError here as the call itself would) through the signature.
        if by_position and index < len(args):
            return args[index]
        if by_name and key in kwargs:
            return kwargs[key]
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments[key]

    return pick


def _decorator(
    handle_of: Callable[[Any], Any], key: str | Callable[..., Any]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator that runs the function under `handle_of(key from its arguments)`."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
            # The lock would cover making the generator, not running it.
            raise TypeError(
                f"{func.__qualname__}() is a generator function: take the lock inside it"
            )
        pick = _key_of(func, key)
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with handle_of(pick(*args, **kwargs)):
                    return await func(*args, **kwargs)

            return run_async

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            with handle_of(pick(*args, **kwargs)):
                return func(*args, **kwargs)

        return run

    return decorate


def _synchronized(
    self: KeyedLock,
    key: str | Callable[..., Any],
    *,
    mode: str = "exclusive",
    timeout: float | None = None,
    lease: float | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: run the function holding the lock of a key taken from its arguments: one
    call at a time per key (with mode "shared": any number of shared calls, or one exclusive).

    `key` is the name of one of the function's parameters, or a callable given the function's
    arguments that returns the key. A `def` function waits with `with`, an `async def` one with
    `async with`; `timeout` (seconds, None for no limit) makes a call that cannot have the lock
    in time raise keylock.LockTimeout, and `lease` ends each hold after that many seconds, as
    for `lock(key, timeout, lease=lease)`. The wrapper keeps the function's name, docstring and
    `__wrapped__` (functools.wraps).
    """
    if mode == "exclusive":
        make = self.lock
    elif mode == "shared":
        make = self.read
    else:
        raise ValueError(f"unknown mode {mode!r}: use 'exclusive' or 'shared'")
    make(b"", timeout, lease=lease)  # checks timeout and lease now, not at the first call
    return _decorator(lambda k: make(k, timeout, lease=lease), key)


def _limit(
    self: Semaphore,
    key: str | Callable[..., Any],
    *,
    weight: int = 1,
    timeout: float | None = None,
    lease: float | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: run the function holding `weight` units of a key taken from its arguments
    (at most `permits` units of a key are held at once).

    `key` is the name of one of the function's parameters, or a callable given the function's
    arguments that returns the key. A `def` function waits with `with`, an `async def` one with
    `async with`; `timeout` (seconds, None for no limit) makes a call that cannot have the
    units in time raise keylock.LockTimeout, and `lease` ends each hold after that many
    seconds, as for `acquire(key, weight, timeout, lease=lease)`. A weight the semaphore
    refuses raises ValueError at each call. The wrapper keeps the function's name, docstring
    and `__wrapped__` (functools.wraps).
    """
    self.acquire(b"", weight, timeout, lease=lease)  # checks the arguments' types now
    return _decorator(lambda k: self.acquire(k, weight, timeout, lease=lease), key)


# Methods of the native classes, written here in Python: set on the types (KeyPool and
# StripedLock inherit `synchronized` from KeyedLock), named and documented as methods.
_synchronized.__name__ = _synchronized.__qualname__ = "synchronized"
_limit.__name__ = _limit.__qualname__ = "limit"
KeyedLock.synchronized = _synchronized  # type: ignore[method-assign]
Semaphore.limit = _limit  # type: ignore[method-assign]

"""Per-key locks for Python threads and asyncio tasks.

keylock replaces the two usual patterns:

* a dict of ``threading.Lock`` objects, one per key, which grows forever (or races when
  entries are evicted): use :class:`KeyPool`, exact per key, with memory only for the keys held
  or waited for, or :class:`StripedLock`, a fixed set of locks shared by hashing;
* a pure-Python reader-writer lock: use :class:`RwLock`, whose readers scale.

Every lock is reached through a handle with ``threading.Lock``'s protocol, so existing code
keeps working::

    pool = keylock.KeyPool()
    with pool.lock("user:42"):            # a threading.Lock-like handle
        ...
    async with pool.lock("user:42", timeout=1.0):   # raises keylock.LockTimeout after 1 s
        ...
    with pool.lock_many(["acct:1", "acct:2"]):       # all or none, deadlock-free
        ...

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
:class:`LockTimeout` (a ``TimeoutError``) is raised by ``with``/``async with`` on a handle made
with a ``timeout`` when the wait runs out; ``acquire``/``acquire_async`` return ``False``
instead. :class:`NotLockedError` (a ``RuntimeError``, like ``threading.Lock``'s) is raised by
``release()`` of something not locked.

Fork
----
``os.fork()`` copies every lock as it is at that moment. In the child, a key held by the
thread that called ``fork`` is still held and may be released there (any thread may release a
handle). A key held by any other thread of the parent stays held for good, since that thread
does not exist in the child; so does a key that had waiters in the parent, once it is handed to
one of them. The simple rule is ``threading.Lock``'s: fork while no lock is held or waited for,
or make fresh locks in the child.
"""

from ._keylock import (
    CapacityExceededError,
    IncompatibleError,
    KeyedLock,
    KeylockError,
    KeyLock,
    KeyPool,
    LeaseExpiredError,
    LockHandle,
    LockInfo,
    LockTimeout,
    ManyLock,
    NotLockedError,
    NotOwnerError,
    PermissionDeniedError,
    ReadLock,
    ReentrancyLimitError,
    ReentrantKeyLock,
    RwLock,
    StripedLock,
    UnavailableError,
    WouldBlockError,
    WriteLock,
    __version__,
    key_bytes,
)

__all__ = [
    "CapacityExceededError",
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
    "NotLockedError",
    "NotOwnerError",
    "PermissionDeniedError",
    "ReadLock",
    "ReentrancyLimitError",
    "ReentrantKeyLock",
    "RwLock",
    "StripedLock",
    "UnavailableError",
    "WouldBlockError",
    "WriteLock",
    "__version__",
    "key_bytes",
]

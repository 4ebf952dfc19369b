"""Per-key locks for Python threads and asyncio tasks.

keylock replaces the two usual patterns:

* a dict of ``threading.Lock`` objects, one per key, which grows forever (or races when
  entries are evicted): use :class:`KeyPool`, exact per key, with memory only for the keys held
  or waited for, or :class:`StripedLock`, a fixed set of locks shared by hashing;
* a pure-Python reader-writer lock: use :class:`RwLock`, whose readers scale, or the per-key
  ``read``/``write`` handles of a pool.

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

Fork
----
``os.fork()`` copies every lock as it is at that moment. In the child, a key held by the
thread that called ``fork`` is still held and may be released there through its handle. A key
held by any other thread of the parent stays held for good, since that thread does not exist
in the child (``force_unlock`` frees it); so does a key that had waiters in the parent, once it
is handed to one of them. The simple rule is ``threading.Lock``'s: fork while no lock is held
or waited for, or make fresh locks in the child.
"""

from ._keylock import (
    CapacityExceededError,
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
    unlink,
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
    "unlink",
]

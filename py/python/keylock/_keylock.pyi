"""Type stubs for keylock._keylock, the native half of the keylock package."""

from collections.abc import Generator, Iterable
from types import TracebackType
from typing import Any, ClassVar, Final, Generic, TypedDict, TypeVar, Union, final

_T = TypeVar("_T")

__version__: Final[str]
_BUILD: Final[str]
"""Which wheel this is: "abi3, CPython >= 3.9", "abi3, CPython >= 3.10" or "version-specific"."""

Key = Union[str, bytes, bytearray, memoryview, int]
"""A key: str (UTF-8), bytes, bytearray, memoryview, or int (8 bytes, signed 64-bit big-endian)."""

class LockTimeout(TimeoutError):
    """Raised by `with`/`async with` on a handle made with a timeout when the wait runs out."""

class NotLockedError(RuntimeError):
    """Raised by `release()` when the key (or stripe, or lock) is not locked."""

def key_bytes(key: Key, /) -> bytes:
    """Return the bytes that `key` stands for; keys with the same bytes are the same key.

    str -> UTF-8; bytes, bytearray, memoryview -> their contents; int -> 8 bytes, signed 64-bit
    big-endian two's complement (OverflowError outside that range); bool and other types ->
    TypeError.
    """

def _resolve(fut: Any) -> None:
    """Wake-up callback run on the event loop: resolve `fut` unless the task gave up on it."""

@final
class _Acquire(Generic[_T]):
    """Awaitable returned by `acquire_async()` (result: bool) and `__aenter__()` (None).

    Throwing into it or closing it (what a cancelled task does) cancels the wait exactly.
    """

    def __await__(self) -> Generator[Any, None, _T]: ...
    def __iter__(self) -> _Acquire[_T]: ...
    def __next__(self) -> Any: ...
    def send(self, value: Any, /) -> Any: ...
    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any: ...
    def close(self) -> None: ...

@final
class _Ready:
    """An awaitable that is already done (returned by `__aexit__`)."""

    def __await__(self) -> Generator[Any]: ...
    def __iter__(self) -> _Ready: ...
    def __next__(self) -> Any: ...
    def send(self, value: Any, /) -> Any: ...
    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any: ...
    def close(self) -> None: ...

class LockHandle:
    """Base class of every keylock lock handle.

    A handle follows `threading.Lock`'s protocol (`acquire`, `release`, `locked`, `with`) and
    asyncio's (`async with`, `await acquire_async()`), so code written for a `threading.Lock`
    works unchanged. Handles hold no state of their own: any number of handles for the same key
    are interchangeable, and any thread may release what another acquired.
    """

    @property
    def timeout(self) -> float | None:
        """The limit for `with` and `async with`, in seconds (None: no limit)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Acquire the lock, blocking or non-blocking, as `threading.Lock.acquire` does.

        With `blocking` true (the default) wait until the lock is taken, at most `timeout`
        seconds if `timeout` is not -1. The GIL is released while waiting, and a signal handler
        that raises (Ctrl-C) interrupts the wait within 100 ms, leaving the lock not taken.
        Return True if the lock was taken, False if not. Arguments are checked exactly as
        `threading.Lock.acquire` checks them (ValueError, OverflowError past
        `threading.TIMEOUT_MAX`, TypeError).
        """

    def release(self) -> None:
        """Release the lock. Any thread may release it.

        Raises keylock.NotLockedError (a RuntimeError) if it is not locked.
        """

    def locked(self) -> bool:
        """Return True if the lock is held (by anyone): a non-blocking acquire would fail."""

    def acquire_async(self, timeout: float | None = None) -> _Acquire[bool]:
        """Acquire without blocking the event loop; return True once taken, False if `timeout`
        (seconds, None for no limit) ran out first.

        The wait occupies no thread. Cancelling the awaiting task (task.cancel(),
        asyncio.wait_for, asyncio.timeout) leaves the lock not taken by it.
        """

    def __enter__(self) -> bool:
        """Acquire (within the handle's timeout, else raise keylock.LockTimeout); return True."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release the lock, whatever the exception."""

    def __aenter__(self) -> _Acquire[None]:
        """Acquire without blocking the event loop (within the handle's timeout, else raise
        keylock.LockTimeout)."""

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> _Ready:
        """Release the lock, whatever the exception."""

@final
class KeyLock(LockHandle):
    """The lock of one key, from `KeyPool.lock(key)` or `StripedLock.lock(key)`.

    Works like a `threading.Lock` (acquire/release/locked/with, and as the lock of a
    `threading.Condition`) and with asyncio (`async with`, `await acquire_async()`).
    """

    @property
    def key(self) -> bytes:
        """The key, as the bytes it stands for (see keylock.key_bytes)."""

@final
class ManyLock(LockHandle):
    """Several keys taken together, from `lock_many(keys)`: all of them or none,
    deadlock-free whatever order other callers name them in.

    Usable with `with` and `async with`, and with the same acquire/release/locked protocol as
    KeyLock (`locked()` is True when any of the keys is held).
    """

    @property
    def keys(self) -> list[bytes]:
        """The keys, as the bytes they stand for, in the order given."""

@final
class ReadLock(LockHandle):
    """The shared (read) side of an RwLock, from `RwLock.read()`. `locked()` is True while a
    writer holds the lock."""

@final
class WriteLock(LockHandle):
    """The exclusive (write) side of an RwLock, from `RwLock.write()`. `locked()` is True while
    anyone (reader or writer) holds the lock."""

class PoolStats(TypedDict):
    """Counters of a KeyPool."""

    held: int
    """Keys held now."""
    waiting: int
    """Callers waiting now."""
    entries_in_use: int
    """Keys held or awaited now."""
    entries_allocated: int
    """The pool's memory, in keys (slots in use or kept for reuse)."""
    peak_held: int
    """An upper bound on the most keys held or awaited at once."""
    acquisitions: int
    """Acquisitions so far."""
    contended: int
    """Acquisitions that found the key held and had to wait."""

@final
class KeyPool:
    """A lock per key, exact (two different keys never block each other), with memory only for
    the keys held or waited for right now: the drop-in replacement for a dict of threading.Lock.

    `pool.lock(key)` returns a KeyLock handle that follows threading.Lock's protocol and
    asyncio's (`with`, `async with`, acquire/release/locked). Keys are str (UTF-8), bytes,
    bytearray, memoryview or int (see keylock.key_bytes).
    """

    def __new__(cls) -> KeyPool: ...
    def lock(self, key: Key, timeout: float | None = None) -> KeyLock:
        """Return the lock handle of `key`. `timeout` (seconds, None for no limit) bounds the
        wait of `with` / `async with`, which raise keylock.LockTimeout when it runs out."""

    def lock_many(self, keys: Iterable[Key], timeout: float | None = None) -> ManyLock:
        """Return a handle that takes every key of `keys` together (deadlock-free, all or none)
        and releases them together; use it with `with` or `async with`."""

    def is_locked(self, key: Key) -> bool:
        """Return True if `key` is held now."""

    def __len__(self) -> int:
        """The number of keys held now."""

    def stats(self) -> PoolStats:
        """Return counters as a dict: held (keys held now), waiting (callers waiting now),
        entries_in_use (keys held or awaited), entries_allocated (the pool's memory, in keys),
        peak_held, acquisitions, contended (acquisitions that had to wait)."""

@final
class StripedLock:
    """A fixed number of locks (rounded up to a power of two); a key locks the stripe its hash
    picks. Memory is fixed whatever the number of keys; two keys may share a stripe and then
    block each other. With `seed`, keys map to the same stripes in every process.

    `striped.lock(key)` returns a KeyLock handle that follows threading.Lock's protocol and
    asyncio's. Keys are str (UTF-8), bytes, bytearray, memoryview or int (see
    keylock.key_bytes).
    """

    MAX_STRIPES: ClassVar[int]
    """The largest number of stripes accepted."""

    def __new__(cls, stripes: int = 1024, *, seed: int | None = None) -> StripedLock: ...
    @property
    def stripes(self) -> int:
        """The number of stripes (a power of two)."""

    def stripe_of(self, key: Key) -> int:
        """Return the index of the stripe that `key` locks."""

    def lock(self, key: Key, timeout: float | None = None) -> KeyLock:
        """Return the lock handle of `key` (of its stripe). `timeout` (seconds, None for no
        limit) bounds the wait of `with` / `async with`, which raise keylock.LockTimeout when
        it runs out."""

    def lock_many(self, keys: Iterable[Key], timeout: float | None = None) -> ManyLock:
        """Return a handle that takes the stripes of every key of `keys` together
        (deadlock-free, each stripe once) and releases them together; use it with `with` or
        `async with`."""

    def is_locked(self, key: Key) -> bool:
        """Return True if the stripe of `key` is held now (by this key or another on its
        stripe)."""

@final
class RwLock:
    """A reader-writer lock: any number of readers, or one writer. Readers do not contend on a
    shared counter, so read-mostly code scales.

    `rw.read()` and `rw.write()` return handles that follow threading.Lock's protocol and
    asyncio's (`with`, `async with`, acquire/release/locked).
    """

    def __new__(cls) -> RwLock: ...
    def read(self, timeout: float | None = None) -> ReadLock:
        """Return the shared (read) handle. `timeout` (seconds, None for no limit) bounds the
        wait of `with` / `async with`, which raise keylock.LockTimeout when it runs out."""

    def write(self, timeout: float | None = None) -> WriteLock:
        """Return the exclusive (write) handle. `timeout` (seconds, None for no limit) bounds
        the wait of `with` / `async with`, which raise keylock.LockTimeout when it runs out."""

    def is_locked(self) -> bool:
        """Return True if the lock is held in any mode."""

    def is_write_locked(self) -> bool:
        """Return True if a writer holds the lock."""

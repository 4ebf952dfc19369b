"""Type stubs for keylock._keylock, the native half of the keylock package."""

import asyncio
from collections.abc import Callable, Generator, Iterable
from types import TracebackType
from typing import (
    Any,
    ClassVar,
    Final,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    TypedDict,
    TypeVar,
    final,
)

from typing_extensions import disjoint_base

_T = TypeVar("_T")
_P = ParamSpec("_P")
_R = TypeVar("_R")

__version__: Final[str]
_BUILD: Final[str]
"""Which wheel this is: "abi3, CPython >= 3.10"."""

Key = str | bytes | bytearray | memoryview | int
"""A key: str (UTF-8), bytes, bytearray, memoryview, or int (8 bytes, signed 64-bit big-endian)."""

Mode = Literal["exclusive", "shared"]
"""How an acquisition holds its key: alone, or with other shared holders."""

Entry = Key | tuple[Key, Mode]
"""A lock_many entry: a key (taken exclusively) or a (key, mode) pair."""

KeyOf = str | Callable[..., Key]
"""How a decorator finds its key: the name of one of the function's parameters, or a callable
given the function's arguments that returns the key."""

class Decorator(Protocol):
    """What `synchronized` and `limit` return: a decorator that keeps the decorated function's
    signature (a `def` function stays one, an `async def` one stays a coroutine function)."""

    def __call__(self, func: Callable[_P, _R], /) -> Callable[_P, _R]: ...

# ---- exceptions: one per status of the core's table, each with its `status` and `code` ----

class KeylockError(Exception):
    """Base class of keylock's own exceptions. Each subclass also derives from the standard
    exception that threading code already catches, and carries the `status` name and `code`
    number that every keylock front end (C, Node, Rust) reports."""

class WouldBlockError(KeylockError, BlockingIOError):
    """The lock is held and the call was not to wait. (A non-blocking `acquire` returns False
    instead of raising this.)"""

    status: ClassVar[str]
    code: ClassVar[int]

class LockTimeout(KeylockError, TimeoutError):
    """Raised by `with` / `async with` on a handle made with a timeout when the wait runs out
    (`acquire` returns False instead)."""

    status: ClassVar[str]
    code: ClassVar[int]

class NotLockedError(KeylockError, RuntimeError):
    """Raised by `release()` of a handle that holds nothing, as threading.Lock raises
    RuntimeError."""

    status: ClassVar[str]
    code: ClassVar[int]

class NotOwnerError(KeylockError, RuntimeError):
    """The acquisition is no longer the lock's current one (it was force-unlocked), or the
    caller does not own it (a reentrant handle released by another thread or task, as
    threading.RLock raises RuntimeError). The lock's current holder is untouched."""

    status: ClassVar[str]
    code: ClassVar[int]

class LeaseExpiredError(NotOwnerError):
    """The acquisition's lease ran out: the lock freed itself and may have had another holder
    since, so the work done under it was not protected to its end."""

class ReentrancyLimitError(KeylockError, OverflowError):
    """A reentrant acquire past the hold-count limit (threading.RLock raises OverflowError when
    its count would overflow)."""

    status: ClassVar[str]
    code: ClassVar[int]

class CapacityExceededError(KeylockError, RuntimeError):
    """A lock table of fixed size (shared memory) is full: every entry is held or awaited."""

    status: ClassVar[str]
    code: ClassVar[int]

class IncompatibleError(KeylockError, RuntimeError):
    """A lock object made elsewhere does not match this build (another layout, version or
    capacity, or a corrupt header)."""

    status: ClassVar[str]
    code: ClassVar[int]

class PermissionDeniedError(KeylockError, PermissionError):
    """The operating system refused access to the lock object."""

    status: ClassVar[str]
    code: ClassVar[int]

class UnavailableError(KeylockError, OSError):
    """The place the lock lives could not be reached (an I/O error, a refused or lost
    connection)."""

    status: ClassVar[str]
    code: ClassVar[int]

def key_bytes(key: Key, /) -> bytes:
    """Return the bytes that `key` stands for: every keylock primitive locks by these bytes, so
    two keys with the same bytes are the same key (also across C, Node and Rust).

    str -> UTF-8; bytes, bytearray, memoryview -> their contents; int -> 8 bytes, signed 64-bit
    big-endian two's complement (OverflowError outside that range); bool and other types ->
    TypeError.
    """

def unlink(name: str, /) -> bool:
    """Remove the shared-memory region that `name` ("shm:NAME") names; return whether it
    existed.

    Processes that have the region open keep using it; the next open of the name makes a new,
    empty region. ValueError for any other name (only shared-memory regions can be removed) or
    in a build without the shared-memory scope; keylock.PermissionDeniedError /
    keylock.UnavailableError when the file cannot be removed.
    """

def _resolve(fut: Any) -> None:
    """Wake-up callback run on the event loop: resolve `fut` unless the task gave up on it."""

def _set_waiter_stall(on: bool, /) -> None:
    """Tests only: `True` makes every blocking waiter stop (GIL released) between joining its
    lock's queue and waiting, until `_set_waiter_stall(False)` lets them all go."""

def _stalled_waiters() -> int:
    """Tests only: how many blocking waiters stand stalled now."""

def _direct_handles() -> dict[str, bool]:
    """Tests only: for each handle class made so far (by name), whether its handles are made
    without pyo3's initializer chain."""

@final
class _Acquire(Generic[_T]):
    """Awaitable returned by `acquire_async()` (result: bool) and, when the lock is taken,
    by `__aenter__()` (None).

    It implements the coroutine protocol (`send`, `throw`, `close`) so that the awaiting task
    can cancel it: a throw or close drops the core's future, which cancels the wait exactly.
    """

    def __await__(self) -> Generator[Any, None, _T]: ...
    def __iter__(self) -> _Acquire[_T]: ...
    def __next__(self) -> Any: ...
    def send(self, value: Any, /) -> Any:
        """Resume the acquire (the value sent is ignored)."""

    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any:
        """Cancel the wait (nothing stays held), then raise the exception thrown in."""

    def close(self) -> None:
        """Cancel the wait; nothing stays held."""

    def _on_timeout(self) -> None:
        """Timer callback: give up after one last poll."""

@final
class _Ready:
    """An awaitable that is already done, with result None: returned by `__aexit__` (which
    releases at once) and by `__aenter__` when the lock was free. Awaiting it neither suspends
    the task nor raises StopIteration. There is one, shared by every such call."""

    def __await__(self) -> Generator[Any]: ...
    def __iter__(self) -> _Ready: ...
    def __next__(self) -> None: ...

@disjoint_base
class LockHandle:
    """Base class of every keylock lock handle.

    A handle follows `threading.Lock`'s protocol (`acquire`, `release`, `locked`, `with`) and
    asyncio's (`async with`, `await acquire_async()`), so code written for a `threading.Lock`
    works unchanged; a handle of a reentrant lock object follows `threading.RLock`'s. Handles
    are made by `lock`, `read`, `write` and `lock_many` of KeyPool and StripedLock, by
    `RwLock.read` and `RwLock.write`, and by `Semaphore.acquire`. A handle keeps the record of
    every acquisition it made and releases exactly those: a stale record (force-unlocked, or its
    lease ran out) never releases the key's next holder.
    """

    @property
    def timeout(self) -> float | None:
        """The `timeout` this handle was made with: the limit for `with` and `async with`."""

    @property
    def lease(self) -> float | None:
        """The `lease` this handle was made with (seconds), used by every acquire that gives
        none."""

    @property
    def owner_died(self) -> bool:
        """Whether the previous holder of the lock died holding it (cross-process scopes only):
        the data it protected may be half-changed. False if the handle holds nothing."""

    @property
    def lost(self) -> bool:
        """Whether the newest acquisition was lost behind the holder's back: a Redis lease that
        could not be renewed in time, or a force-unlock that the renewal found (it renews every
        third of the lease). Once True it stays True, and release() raises NotOwnerError or
        LeaseExpiredError. Always False for in-process and shared-memory scopes, for an RwLock,
        and if the handle holds nothing. Asks no server (is_current() does)."""

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the newest acquisition is lost (see `lost`) or `timeout` seconds pass;
        return whether it was lost. The GIL is released; Ctrl-C interrupts the wait. For scopes
        whose holders cannot lose a lock this waits out the timeout and returns False.
        NotLockedError if the handle holds nothing."""

    def lost_future(self) -> asyncio.Future[None]:
        """An asyncio future of the running loop, done (result None) once the newest acquisition
        is lost: await it, or race it against the work done under the lock. Each call makes a
        new future; cancelling one is harmless. It never completes for scopes whose holders
        cannot lose a lock. NotLockedError if the handle holds nothing."""

    def acquire(
        self, blocking: bool = True, timeout: float = -1, *, lease: float | None = None
    ) -> bool:
        """Acquire the lock, blocking or non-blocking, as `threading.Lock.acquire` does.

        With `blocking` true (the default) wait until the lock is taken, at most `timeout`
        seconds if `timeout` is not -1. The GIL is released while waiting, and a signal handler
        that raises (Ctrl-C) interrupts the wait within 100 ms, leaving the lock not taken.
        Return True if the lock was taken, False if not. Arguments are checked exactly as
        `threading.Lock.acquire` checks them (ValueError, OverflowError past
        `threading.TIMEOUT_MAX`, TypeError). `lease` (seconds; default: the handle's) ends the
        acquisition by itself after that long.
        """

    def release(self) -> None:
        """Release the handle's newest acquisition. Any thread may release it, except in a
        reentrant lock object, where only the thread or task that acquired it may.

        Raises keylock.NotLockedError (a RuntimeError) if the handle holds nothing;
        keylock.NotOwnerError (a RuntimeError) for a reentrant handle the caller holds nothing
        through, or for an acquisition that was force-unlocked; keylock.LeaseExpiredError when
        its lease ran out. The key's current holder is never touched.
        """

    def locked(self) -> bool:
        """Return True if the lock is held (by anyone) so that a non-blocking acquire through
        this handle would fail: for a shared handle, while an exclusive holder holds it."""

    def acquire_async(
        self, timeout: float | None = None, *, lease: float | None = None
    ) -> _Acquire[bool]:
        """Acquire without blocking the event loop; return True once taken, False if `timeout`
        (seconds, None for no limit) ran out first.

        The wait occupies no thread. Cancelling the awaiting task (task.cancel(),
        asyncio.wait_for, asyncio.timeout) leaves the lock not taken by it.
        """

    def is_current(self) -> bool:
        """Whether the newest acquisition still holds the lock: False once it was released,
        force-unlocked or its lease ran out (or if the handle holds nothing)."""

    def lease_remaining(self) -> float | None:
        """Seconds left on the newest acquisition's lease (0.0 once it ran out), None if it has
        no lease. NotLockedError if the handle holds nothing."""

    def extend(self, seconds: float) -> None:
        """Move the end of the newest acquisition's lease to `seconds` from now. Raises
        LeaseExpiredError if it already ran out (or NotOwnerError if it was force-unlocked), and
        ValueError if the acquisition has no lease."""

    def __enter__(self) -> bool:
        """Acquire (within the handle's timeout, else raise keylock.LockTimeout); return True."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release, whatever the exception. A release refused because the acquisition went
        stale (its lease ran out, or it was force-unlocked) raises LeaseExpiredError /
        NotOwnerError, unless another exception is already propagating."""

    def __aenter__(self) -> _Acquire[None] | _Ready:
        """Awaitable: acquire without blocking the event loop (within the handle's timeout,
        else raise keylock.LockTimeout). A free lock is taken by this call itself, so awaiting
        the result suspends nothing."""

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> _Ready:
        """Release, whatever the exception (as `__exit__`); the awaitable is already done."""

@final
class KeyLock(LockHandle):
    """The lock of one key, from `lock(key)`, `read(key)` or `write(key)` of a KeyPool or a
    StripedLock (of a lock object that is not reentrant).

    Works like a `threading.Lock` (acquire/release/locked/with, and as the lock of a
    `threading.Condition`) and with asyncio (`async with`, `await acquire_async()`). `mode` is
    "exclusive" (lock, write) or "shared" (read: any number of shared holders at once).
    """

    @property
    def key(self) -> bytes:
        """The key, as the bytes it stands for (see keylock.key_bytes)."""

    @property
    def mode(self) -> Mode:
        """ "exclusive" or "shared"."""

    @property
    def fence(self) -> int | None:
        """The fencing token of the handle's newest acquisition (None if it holds nothing): it
        rises each time the key passes to a new exclusive holder, so a store that remembers the
        highest fence it saw can reject a write from a holder whose lock was lost since."""

@final
class ReentrantKeyLock(LockHandle):
    """The lock of one key in a reentrant KeyPool or StripedLock, from `lock(key)` or
    `write(key)`: it follows `threading.RLock`'s protocol. The owner is the calling thread, or
    the current asyncio task inside asyncio: the owner may acquire again (each acquire needs its
    release, and keeps the fence), and only the owner may release (RuntimeError otherwise).
    Usable as the lock of a `threading.Condition`, like an RLock."""

    @property
    def key(self) -> bytes:
        """The key, as the bytes it stands for (see keylock.key_bytes)."""

    @property
    def mode(self) -> Mode:
        """ "exclusive" or "shared"."""

    @property
    def fence(self) -> int | None:
        """The fencing token of the handle's newest acquisition (None if it holds nothing). A
        reentrant acquire keeps the holder's fence."""

    def _is_owned(self) -> bool:
        """Whether the calling thread or task holds the key through this handle (for
        threading.Condition)."""

    def _recursion_count(self) -> int:
        """How many times the calling thread or task holds the key through this handle."""

    def _release_save(self) -> tuple[int, int]:
        """Release every hold of the caller and return the state that `_acquire_restore` takes
        back (for threading.Condition.wait); RuntimeError if the caller holds nothing here."""

    def _acquire_restore(self, state: tuple[int, int], /) -> None:
        """Take the key again as many times as `_release_save` released it (blocking). `state`
        is what `_release_save` returned: a 2-item sequence of ints (checked as RLock checks
        it)."""

@final
class ManyLock(LockHandle):
    """Several keys taken together, from `lock_many(keys)`: all of them or none, deadlock-free
    whatever order other callers name them in, each key in its own mode.

    Usable with `with` and `async with`, and with the same acquire/release/locked protocol as
    KeyLock (`locked()` is True when any of the keys would block).
    """

    @property
    def keys(self) -> list[bytes]:
        """The keys, as the bytes they stand for, in the order given."""

    @property
    def modes(self) -> list[Mode]:
        """The mode of each key ("exclusive" or "shared"), in the order given."""

    @property
    def fences(self) -> list[int] | None:
        """The fence of each lock the newest acquisition took (one per distinct key, or
        stripe), in the order of the keys' first occurrence (keys that share a stripe share
        one); None if the handle holds nothing."""

@final
class Permit(LockHandle):
    """`weight` units of one key's semaphore, from `Semaphore.acquire(key, weight)`.

    Works like a `threading.BoundedSemaphore` of one permit (acquire/release/locked/with; each
    acquire takes `weight` units, and a release of a handle that holds nothing raises
    NotLockedError, a RuntimeError) and with asyncio (`async with`, `await acquire_async()`).
    `locked()` is True when an acquire through it would wait now. Each acquisition has its own
    fence; `lease`, `lease_remaining()`, `extend()` and `is_current()` work as for a KeyLock.
    """

    @property
    def key(self) -> bytes:
        """The key, as the bytes it stands for (see keylock.key_bytes)."""

    @property
    def weight(self) -> int:
        """The units each acquire through this handle takes."""

    @property
    def fence(self) -> int | None:
        """The fence of the handle's newest acquisition (None if it holds nothing): every
        acquisition of a key's units has its own, greater than every earlier one's of that key."""

@final
class ReadLock(LockHandle):
    """The shared (read) side of an RwLock, from `RwLock.read()`. `locked()` is True while a
    writer holds the lock."""

@final
class WriteLock(LockHandle):
    """The exclusive (write) side of an RwLock, from `RwLock.write()`. `locked()` is True while
    anyone (reader or writer) holds the lock."""

    @property
    def fence(self) -> int | None:
        """The fencing token of the handle's newest write acquisition (None if it holds
        nothing): greater than every earlier writer's."""

@final
class LockInfo:
    """What `info(key)` reports about a held key: a snapshot."""

    @property
    def fence(self) -> int:
        """The current fence: the exclusive holder's, or for shared holders the one they read."""

    @property
    def mode(self) -> Mode:
        """ "exclusive" or "shared"."""

    @property
    def holders(self) -> int:
        """Holders now (1 for an exclusive holder)."""

    @property
    def holds(self) -> int:
        """The exclusive holder's hold count (above 1 only for reentrant acquisitions)."""

    @property
    def owner(self) -> int | None:
        """The exclusive holder's owner number, in a reentrant lock object."""

    @property
    def lease_remaining(self) -> float | None:
        """Seconds left on the earliest lease among the holders, if any has one."""

    @property
    def waiters(self) -> int:
        """Callers waiting for the key."""

    @property
    def units(self) -> int:
        """A semaphore's units held now (the sum of its holders' weights); for a lock, the same
        as `holders`."""

@final
class HistogramSnapshot:
    """A histogram of durations from a MetricsSnapshot (`wait` or `hold`): how many were
    recorded, their sum and the longest, in seconds, and how many fell in each power-of-two
    bucket of nanoseconds. A snapshot: it does not change. Equal when every count is equal."""

    BOUNDS: ClassVar[tuple[float, ...]]
    """The upper bound of each of the 64 buckets, in seconds: 0.0 (durations of 0 ns), then
    (2**i - 1) ns for bucket i, and math.inf for the last."""

    @property
    def count(self) -> int:
        """How many durations were recorded."""

    @property
    def sum(self) -> float:
        """The sum of every recorded duration, in seconds."""

    @property
    def max(self) -> float:
        """The longest recorded duration, in seconds (0.0 when nothing was recorded)."""

    @property
    def buckets(self) -> tuple[tuple[float, int], ...]:
        """`(upper_bound, count)` for each bucket that counted anything, in order: `count`
        durations were at most `upper_bound` seconds and above the previous bucket's bound (see
        BOUNDS)."""

    def quantile(self, q: float) -> float | None:
        """Return the `q` quantile (0 <= q <= 1) in seconds, None when nothing was recorded:
        the upper bound of the bucket that holds it, capped at the longest duration (an
        overestimate by less than a factor of two). ValueError for q outside 0..1."""

    def _asdict(self) -> HistogramDict:
        """Return the histogram as a dict: count, sum, max, buckets."""

class HistogramDict(TypedDict):
    """`HistogramSnapshot._asdict()`."""

    count: int
    sum: float
    max: float
    buckets: tuple[tuple[float, int], ...]

class MetricsDict(TypedDict):
    """`MetricsSnapshot._asdict()`: the counts, and the histograms as dicts of their own."""

    acquired: int
    contended: int
    timed_out: int
    would_block: int
    cancelled: int
    lease_expired: int
    owner_died: int
    lost: int
    force_unlocked: int
    wait: HistogramDict
    hold: HistogramDict

@final
class MetricsSnapshot:
    """What a lock object opened with `metrics=True` counted, from its `metrics()`: totals since
    it was opened, the same names in every keylock front end. A snapshot: it does not change.
    Equal when every count is equal."""

    @property
    def acquired(self) -> int:
        """Acquisitions granted (a lock_many acquire counts each key it takes)."""

    @property
    def contended(self) -> int:
        """Calls that could not be granted at once: they waited (then were granted, timed out
        or were cancelled)."""

    @property
    def timed_out(self) -> int:
        """Calls that waited as long as their timeout allowed and failed."""

    @property
    def would_block(self) -> int:
        """Tries (a non-blocking acquire, or a timeout of 0) that failed."""

    @property
    def cancelled(self) -> int:
        """asyncio acquires given up before they finished (the task was cancelled)."""

    @property
    def lease_expired(self) -> int:
        """Releases refused because the acquisition's lease had ended (LeaseExpiredError)."""

    @property
    def owner_died(self) -> int:
        """Acquisitions whose previous holder died holding the key (cross-process scopes)."""

    @property
    def lost(self) -> int:
        """Releases refused (NotOwnerError) because the hold had ended behind its holder's
        back: force-unlocked, or lost by a remote scope."""

    @property
    def force_unlocked(self) -> int:
        """Force-unlocks through this object that freed a held key."""

    @property
    def wait(self) -> HistogramSnapshot:
        """How long each granted call waited (0 when granted at once)."""

    @property
    def hold(self) -> HistogramSnapshot:
        """How long each released acquisition was held, from its grant to its release."""

    def _asdict(self) -> MetricsDict:
        """Return the snapshot as a dict: the counts, and `wait` and `hold` as dicts of their
        own (see HistogramSnapshot._asdict)."""

class PoolStats(TypedDict):
    """The counts of a KeyPool, the same keys on every scope. A figure the scope cannot tell is
    None: a Redis pool sees only this process's acquisitions, so held, waiting and shared_holds
    are None there and held_here / waiting_here say what this process does."""

    held: int | None
    """Keys held now, by anyone in the scope (None: Redis)."""
    waiting: int | None
    """Callers queued for a key now, by anyone in the scope (None: Redis). A caller counts once
    it is in the key's queue, not while it is on its way there."""
    shared_holds: int | None
    """Shared holds now (a key held by three readers counts three); None: Redis."""
    held_here: int
    """Keys held now by this pool object: the same as held in one process; this open's for
    "shm:"; this process's for Redis."""
    waiting_here: int
    """Callers of this pool object queued now (as held_here)."""
    capacity: int | None
    """The most keys held or awaited at once ("shm:" pools); None where the pool grows as it
    needs (in-process, Redis)."""
    entries_in_use: int | None
    """Keys held or awaited now (None: Redis)."""
    entries_allocated: int | None
    """An in-process pool's memory, in keys (slots in use or kept for reuse); None elsewhere."""
    peak_in_use: int | None
    """An in-process pool's sum over shards of the most slots in use that each counted (bounds
    the memory); None elsewhere."""
    contended: int | None
    """An in-process pool's count of acquisitions that found the key held and had to wait;
    None elsewhere."""

@disjoint_base
class KeyedLock:
    """Base class of KeyPool and StripedLock: a lock object with a lock per key (or per stripe),
    opened by name. Every lock is reached through a handle (`lock`, `read`, `write`,
    `lock_many`); the lock object itself can force a key free and say who holds it."""

    @property
    def name(self) -> str:
        """The name the lock object was opened with ("local:" for one made in this process), with
        a URL's password shown as `***`."""

    @property
    def reentrant(self) -> bool:
        """Whether the lock object is reentrant: a thread (or asyncio task) that holds a key may
        acquire it again, and only it may release it, as with threading.RLock."""

    @property
    def fifo(self) -> bool:
        """Whether every release hands the lock to the next waiter in order (strict FIFO, as
        the Web Locks API specifies) instead of letting a newcomer take a free lock first."""

    def lock(
        self, key: Key, timeout: float | None = None, *, lease: float | None = None
    ) -> KeyLock | ReentrantKeyLock:
        """Return the exclusive lock handle of `key`. `timeout` (seconds, None for no limit)
        bounds the wait of `with` / `async with`, which raise keylock.LockTimeout when it runs
        out; `lease` (seconds) makes every acquisition through the handle end by itself after
        that long. In a reentrant lock object the handle is a ReentrantKeyLock."""

    def read(
        self, key: Key, timeout: float | None = None, *, lease: float | None = None
    ) -> KeyLock:
        """Return the shared lock handle of `key`: any number of shared holders at once, no
        exclusive holder meanwhile (a shared request behind a waiting exclusive one waits: FIFO
        per key). Same arguments as `lock`."""

    def write(
        self, key: Key, timeout: float | None = None, *, lease: float | None = None
    ) -> KeyLock | ReentrantKeyLock:
        """Return the exclusive lock handle of `key` (the same as `lock`, named as the partner
        of `read`)."""

    def lock_many(
        self, keys: Iterable[Entry], timeout: float | None = None, *, lease: float | None = None
    ) -> ManyLock:
        """Return a handle that takes every key of `keys` together (deadlock-free, all or none)
        and releases them together; use it with `with` or `async with`. Each entry is a key
        (taken exclusively) or a `(key, mode)` pair, mode "exclusive" or "shared"."""

    def force_unlock(self, key: Key) -> bool:
        """Free `key` whoever holds it (in either mode), advancing its fence, for a lock left
        behind by a holder that will never release it. The old holders' handles then release
        nothing (their `release()` raises NotOwnerError). Return whether the key was held."""

    def is_locked(self, key: Key) -> bool:
        """Return True if `key` is held now (by this key or, in a StripedLock, by another on its
        stripe)."""

    def info(self, key: Key) -> LockInfo | None:
        """Return who holds `key` and how (a snapshot), or None when it is free."""

    def metrics(self) -> MetricsSnapshot | None:
        """Return the lock object's metrics, totals since it was opened (a MetricsSnapshot), or
        None when it was opened without `metrics=True`."""

    def synchronized(
        self,
        key: KeyOf,
        *,
        mode: Mode = "exclusive",
        timeout: float | None = None,
        lease: float | None = None,
    ) -> Decorator:
        """Decorator: run the function holding the lock of a key taken from its arguments: one
        call at a time per key (with mode "shared": any number of shared calls, or one
        exclusive).

        `key` is the name of one of the function's parameters, or a callable given the
        function's arguments that returns the key. A `def` function waits with `with`, an
        `async def` one with `async with`; `timeout` (seconds, None for no limit) makes a call
        that cannot have the lock in time raise keylock.LockTimeout, and `lease` ends each hold
        after that many seconds, as for `lock(key, timeout, lease=lease)`. The wrapper keeps
        the function's name, docstring and `__wrapped__` (functools.wraps).
        """

@final
class KeyPool(KeyedLock):
    """A lock per key, exact (two different keys never block each other), with memory only for
    the keys held or waited for right now: the drop-in replacement for a dict of threading.Lock.

    `pool.lock(key)` returns a handle that follows threading.Lock's protocol and asyncio's
    (`with`, `async with`, acquire/release/locked); `pool.read(key)` a shared one. With
    `reentrant=True` handles follow threading.RLock's protocol; with `fifo=True` every release
    hands the key to the next waiter in order; with `metrics=True` the pool counts what it does
    (see `metrics()`). Keys are str (UTF-8), bytes, bytearray, memoryview or int (see
    keylock.key_bytes).
    """

    def __new__(
        cls, *, reentrant: bool = False, fifo: bool = False, metrics: bool = False
    ) -> KeyPool: ...
    @classmethod
    def open(
        cls,
        name: str,
        *,
        reentrant: bool = False,
        fifo: bool = False,
        metrics: bool = False,
        capacity: int | None = None,
        permissions: int | None = None,
    ) -> KeyPool:
        """Open the pool that `name` names: "local:" (in this process, the same as KeyPool()),
        "shm:NAME" (shared by the processes of this machine), "redis://HOST:PORT/DB" or
        "postgres://USER:PASSWORD@HOST:PORT/DB", where this build has those scopes (ValueError
        otherwise). `capacity` (the most keys held or awaited at once) and `permissions` (of a
        shared-memory region this call creates) apply to fixed-size scopes only. `metrics=True`
        counts what this lock object does (see `metrics()`)."""

    def __len__(self) -> int:
        """The number of keys held now: by anyone in the scope, or, for a Redis pool (which
        cannot tell), by this process."""

    def stats(self) -> PoolStats:
        """Return the counts as a dict with the same keys on every scope (see PoolStats), None
        where the scope cannot tell. Raises UnavailableError only where counting needs the
        scope itself and cannot have it (a shared-memory pool opened before fork())."""

@final
class StripedLock(KeyedLock):
    """A fixed number of locks (rounded up to a power of two); a key locks the stripe its hash
    picks. Memory is fixed whatever the number of keys; two keys may share a stripe and then
    block each other. With `seed`, keys map to the same stripes in every process.

    `striped.lock(key)` returns a handle that follows threading.Lock's protocol and asyncio's;
    `read`, `write`, `lock_many`, `reentrant`, `fifo` and `metrics` as for KeyPool. Keys are
    str (UTF-8), bytes, bytearray, memoryview or int (see keylock.key_bytes).
    """

    MAX_STRIPES: ClassVar[int]
    """The largest number of stripes accepted."""

    def __new__(
        cls,
        stripes: int = 1024,
        *,
        seed: int | None = None,
        reentrant: bool = False,
        fifo: bool = False,
        metrics: bool = False,
    ) -> StripedLock: ...
    @classmethod
    def open(
        cls,
        name: str,
        stripes: int = 1024,
        *,
        seed: int | None = None,
        reentrant: bool = False,
        fifo: bool = False,
        metrics: bool = False,
        capacity: int | None = None,
        permissions: int | None = None,
    ) -> StripedLock:
        """Open the striped lock that `name` names ("local:", or "shm:NAME" / "redis://..."
        where this build has those scopes), with `stripes` stripes (see KeyPool.open)."""

    @property
    def stripes(self) -> int:
        """The number of stripes (a power of two)."""

    def stripe_of(self, key: Key) -> int:
        """Return the index of the stripe that `key` locks."""

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

@final
class Semaphore:
    """At most `permits` units held per key at once: per tenant, per API token, per downstream
    host. `sem.acquire(key, weight)` returns a handle that takes `weight` units of `key` (with
    `with`, `async with`, or acquire/release as a threading.BoundedSemaphore of one permit).
    Strict FIFO per key: a heavy request at the head of the queue is never passed by lighter
    ones that came after it. Every acquisition has its own fence, rising per key. With
    `metrics=True` the semaphore counts what it does (see `metrics()`). Keys are str (UTF-8),
    bytes, bytearray, memoryview or int (see keylock.key_bytes).
    """

    MAX_PERMITS: ClassVar[int]
    """The most permits a semaphore can have."""

    def __new__(cls, permits: int, *, metrics: bool = False) -> Semaphore: ...
    @classmethod
    def open(cls, name: str, permits: int, *, metrics: bool = False) -> Semaphore:
        """Open the semaphore that `name` names with `permits` units per key: "local:" (in this
        process, the same as Semaphore(permits)), "shm:NAME" (shared by the processes of this
        machine), "redis://..." or "postgres://..." (shared by every process that opens the same
        prefix); every open of a shared one must give the same permits (IncompatibleError
        otherwise).
        `metrics=True` counts what this semaphore object does (see `metrics()`)."""

    @property
    def permits(self) -> int:
        """The units per key."""

    @property
    def name(self) -> str:
        """The name the semaphore was opened with ("local:" for one made in this process), with
        a URL's password shown as `***`."""

    def acquire(
        self, key: Key, weight: int = 1, timeout: float | None = None, *, lease: float | None = None
    ) -> Permit:
        """Return the handle of `weight` units of `key` (it takes nothing until it is acquired):
        use it with `with` / `async with`, or its acquire/release. `timeout` (seconds, None for
        no limit) bounds the wait of `with` / `async with`, which raise keylock.LockTimeout
        when it runs out; `lease` (seconds) makes every acquisition through the handle end by
        itself after that long. A weight below 1 or above the permits raises ValueError when
        acquired."""

    def info(self, key: Key) -> LockInfo | None:
        """Return who holds `key` (a snapshot: `units` held, `holders`, `waiters`, the newest
        `fence`), or None when nobody does."""

    def force_release(self, key: Key) -> bool:
        """End every hold of `key` whoever holds it, advancing its fence, for units left behind
        by holders that will never release them. Their handles then release nothing (their
        `release()` raises NotOwnerError). Return whether the key was held."""

    def metrics(self) -> MetricsSnapshot | None:
        """Return the semaphore object's metrics, totals since it was opened (a MetricsSnapshot;
        `acquired` counts acquisitions, whatever their weight), or None when it was opened
        without `metrics=True`."""

    def __len__(self) -> int:
        """The number of keys with units held now."""

    def stats(self) -> PoolStats:
        """Return the counts as a dict, the same keys as KeyPool.stats(): `held` counts keys
        with units held, `shared_holds` the units held."""

    def limit(
        self,
        key: KeyOf,
        *,
        weight: int = 1,
        timeout: float | None = None,
        lease: float | None = None,
    ) -> Decorator:
        """Decorator: run the function holding `weight` units of a key taken from its arguments
        (at most `permits` units of a key are held at once).

        `key` is the name of one of the function's parameters, or a callable given the
        function's arguments that returns the key. A `def` function waits with `with`, an
        `async def` one with `async with`; `timeout` (seconds, None for no limit) makes a call
        that cannot have the units in time raise keylock.LockTimeout, and `lease` ends each
        hold after that many seconds, as for `acquire(key, weight, timeout, lease=lease)`. A
        weight the semaphore refuses raises ValueError at each call. The wrapper keeps the
        function's name, docstring and `__wrapped__` (functools.wraps).
        """

"""Ownership: a handle releases exactly its own acquisition, never the key; fences rise with
every new exclusive holder; leases end acquisitions by themselves; force_unlock frees a key left
behind. Every primitive and mode is checked where it applies."""

from __future__ import annotations

import asyncio
import gc
import itertools
import pathlib
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable

import pytest

import keylock
from conftest import DEADLOCK, Occupancy, arun, run_threads, wait_until

LOCKS: dict[str, Callable[[], keylock.KeyedLock]] = {
    "pool": keylock.KeyPool,
    "striped": lambda: keylock.StripedLock(64),
    "fifo-pool": lambda: keylock.KeyPool(fifo=True),
}
each_lock = pytest.mark.parametrize("make", list(LOCKS.values()), ids=list(LOCKS))


# ---- a stale handle never releases the next holder ----


def test_release_twice_never_frees_the_next_holder() -> None:
    # The bug this round fixes: a handle released by key, so its second release freed whoever
    # held the key next. Uses only what every version of the package has, so the same test runs
    # against older builds (where it fails).
    pool = keylock.KeyPool()
    first, second = pool.lock("k"), pool.lock("k")
    assert first.acquire()
    first.release()
    assert second.acquire(blocking=False)
    with pytest.raises(RuntimeError):
        first.release()  # holds nothing any more
    assert pool.is_locked("k"), "a stale release freed the next holder"
    assert second.acquire(blocking=False) is False
    second.release()
    assert not pool.is_locked("k")


@each_lock
@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_force_unlocked_handle_never_releases_the_next_holder(
    make: Callable[[], keylock.KeyedLock], mode: str
) -> None:
    locks = make()
    handle = locks.lock if mode == "exclusive" else locks.read
    stale = handle("k")
    assert stale.acquire()
    old = stale.fence
    assert stale.is_current()
    assert locks.force_unlock("k") is True
    assert locks.force_unlock("k") is False  # nothing held now
    assert not stale.is_current()
    fresh = locks.lock("k")
    assert fresh.acquire(blocking=False)
    assert fresh.fence is not None and old is not None and fresh.fence > old
    with pytest.raises(keylock.NotOwnerError) as err:
        stale.release()
    assert not isinstance(err.value, keylock.LeaseExpiredError)
    assert locks.is_locked("k") and fresh.is_current()
    with pytest.raises(keylock.NotLockedError):
        stale.release()  # the stale record was used up by the refused release
    fresh.release()
    assert not locks.is_locked("k")


@each_lock
def test_force_unlocked_many_handle_never_releases_the_next_holders(
    make: Callable[[], keylock.KeyedLock],
) -> None:
    locks = make()
    stale = locks.lock_many(["a", ("b", "shared")])
    assert stale.acquire()
    assert locks.force_unlock("a")
    fresh = locks.lock("a")
    assert fresh.acquire(blocking=False)
    with pytest.raises(keylock.NotOwnerError):
        stale.release()  # "b" is released all the same; "a" is left to its new holder
    assert locks.is_locked("a") and fresh.is_current()
    shares_a_stripe = isinstance(locks, keylock.StripedLock) and (
        locks.stripe_of("a") == locks.stripe_of("b")
    )
    assert locks.is_locked("b") == shares_a_stripe
    fresh.release()
    assert not locks.is_locked("a")


def test_with_block_reports_a_force_unlock_and_spares_the_next_holder() -> None:
    pool = keylock.KeyPool()
    taken = threading.Event()
    done = threading.Event()
    fresh = pool.lock("k")

    def next_holder() -> None:
        assert fresh.acquire(timeout=DEADLOCK)
        taken.set()
        done.wait(DEADLOCK)
        fresh.release()

    t = threading.Thread(target=next_holder)
    with pytest.raises(keylock.NotOwnerError):
        with pool.lock("k"):
            t.start()
            pool.force_unlock("k")  # an operator frees the key left "stuck"
            assert taken.wait(DEADLOCK)
    assert pool.is_locked("k") and fresh.is_current()
    done.set()
    t.join(DEADLOCK)
    assert not pool.is_locked("k")
    # An exception already on its way out of the block is not replaced by the refusal.
    with pytest.raises(KeyError):
        with pool.lock("k"):
            pool.force_unlock("k")
            raise KeyError
    assert len(pool) == 0


def test_async_with_reports_a_force_unlock() -> None:
    async def main() -> None:
        pool = keylock.KeyPool()
        with pytest.raises(keylock.NotOwnerError):
            async with pool.lock("k"):
                pool.force_unlock("k")
                fresh = pool.lock("k")
                assert await fresh.acquire_async(timeout=0)
        assert pool.is_locked("k")
        fresh.release()
        assert len(pool) == 0

    arun(main())


def test_rwlock_write_handle_releases_only_its_own() -> None:
    rw = keylock.RwLock()
    a, b = rw.write(), rw.write()
    a.acquire()
    first = a.fence
    a.release()
    assert b.acquire(blocking=False)
    assert b.fence is not None and first is not None and b.fence > first
    with pytest.raises(keylock.NotLockedError):
        a.release()
    assert rw.is_write_locked()
    b.release()
    assert not rw.is_locked()


def test_a_handle_dropped_while_holding_releases_with_a_resource_warning() -> None:
    pool = keylock.KeyPool()
    h = pool.lock("k")
    h.acquire()
    with pytest.warns(ResourceWarning, match="garbage-collected while holding 1"):
        del h
        gc.collect()
    assert not pool.is_locked("k")
    # A stale record releases nothing and warns of nothing.
    h2 = pool.lock("k")
    h2.acquire()
    pool.force_unlock("k")
    del h2
    gc.collect()
    assert len(pool) == 0


# ---- fences ----


def _holder_fences(
    locks: keylock.KeyedLock, threads: int, iters: int, keys: int
) -> dict[int, list[int]]:
    """Each thread takes random keys; inside the critical section it appends the fence to the
    key's list, so each list is in holder order. Between rounds other keys churn through the
    pool, so that slots are recycled and reused for other keys."""
    fences: dict[int, list[int]] = defaultdict(list)
    occupancy = Occupancy()
    barrier = threading.Barrier(threads, timeout=DEADLOCK)

    def worker(t: int) -> None:
        for i in range(iters):
            k = (i * 7 + t) % keys
            h = locks.lock(k)
            with h, occupancy.hold(k):
                assert h.fence is not None
                fences[k].append(h.fence)
                time.sleep(0)
            if i % 50 == 49:
                barrier.wait()
                for j in range(200):  # 200 other keys: their slots replace the idle ones
                    with locks.lock(f"churn:{t}:{i}:{j}"):
                        pass
                barrier.wait()

    run_threads([lambda t=t: worker(t) for t in range(threads)])
    occupancy.check()
    assert occupancy.completed == threads * iters
    return fences


@each_lock
def test_fences_strictly_increase_across_8_threads_with_recycling(
    make: Callable[[], keylock.KeyedLock],
) -> None:
    locks = make()
    fences = _holder_fences(locks, threads=8, iters=400, keys=5)
    assert sum(len(v) for v in fences.values()) == 8 * 400
    for k, seq in fences.items():
        bad = [(a, b) for a, b in itertools.pairwise(seq) if b <= a]
        assert bad == [], f"key {k}: fences not strictly increasing: {bad[:5]}"
    if isinstance(locks, keylock.KeyPool):
        assert len(locks) == 0
        # The churn went through 8 x 8 x 200 distinct keys; far fewer slots exist, so slots
        # (the hot keys' among them) were recycled for other keys between rounds.
        assert locks.stats()["entries_allocated"] < 8 * 8 * 200 // 4


@each_lock
def test_fences_strictly_increase_across_32_tasks_with_recycling(
    make: Callable[[], keylock.KeyedLock],
) -> None:
    locks = make()
    fences: dict[int, list[int]] = defaultdict(list)
    occupancy = Occupancy()
    tasks, iters, keys = 32, 60, 4

    async def main() -> None:
        async def worker(t: int) -> None:
            for i in range(iters):
                k = (i * 5 + t) % keys
                h = locks.lock(k)
                async with h:
                    with occupancy.hold(k):
                        assert h.fence is not None
                        fences[k].append(h.fence)
                        await asyncio.sleep(0)
                if i % 20 == 19:
                    for j in range(100):  # recycle slots between rounds
                        async with locks.lock(f"churn:{t}:{i}:{j}"):
                            pass

        await asyncio.gather(*(worker(t) for t in range(tasks)))

    arun(main())
    occupancy.check()
    assert sum(len(v) for v in fences.values()) == tasks * iters
    for k, seq in fences.items():
        bad = [(a, b) for a, b in itertools.pairwise(seq) if b <= a]
        assert bad == [], f"key {k}: fences not strictly increasing: {bad[:5]}"


@each_lock
def test_fences_rise_past_force_unlock_and_lease_end_and_readers_read_the_current_one(
    make: Callable[[], keylock.KeyedLock],
) -> None:
    locks = make()
    seen = []
    h = locks.lock("k")
    with h:
        seen.append(h.fence)
    h.acquire()
    seen.append(h.fence)
    locks.force_unlock("k")
    with pytest.raises(keylock.NotOwnerError):
        h.release()
    h.acquire(lease=0.01)
    seen.append(h.fence)
    wait_until(lambda: not h.is_current(), what="the lease to end")
    with pytest.raises(keylock.LeaseExpiredError):
        h.release()
    r1, r2 = locks.read("k"), locks.read("k")
    assert r1.acquire() and r2.acquire()
    assert r1.fence == r2.fence  # shared holders read the current fence
    assert r1.fence is not None and r1.fence > seen[-1]
    info = locks.info("k")
    assert info is not None and info.mode == "shared" and info.holders == 2
    assert info.fence == r1.fence
    r1.release()
    r2.release()
    w = locks.write("k")
    with w:
        seen.append(w.fence)
        assert w.fence is not None and r2.fence is None and w.fence > seen[-2]
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen


def test_reentrant_acquire_keeps_the_fence_and_lock_many_gives_one_per_lock() -> None:
    pool = keylock.KeyPool(reentrant=True)
    h = pool.lock("k")
    with h:
        outer = h.fence
        with h:
            assert h.fence == outer
            info = pool.info("k")
            assert info is not None and info.holds == 2
    m = keylock.KeyPool().lock_many(["b", "a", "b", ("c", "shared")])
    with m:
        assert m.fences is not None and len(m.fences) == 3
    assert m.fences is None
    s = keylock.StripedLock(1)  # one stripe: every key shares it
    m2 = s.lock_many(["x", "y", "z"])
    with m2:
        assert m2.fences is not None and len(m2.fences) == 1


# ---- leases ----


@each_lock
def test_lease_hand_over_to_a_waiting_thread(make: Callable[[], keylock.KeyedLock]) -> None:
    locks = make()
    lease = 0.2
    holder = locks.lock("job", lease=lease)
    assert holder.lease == lease
    t0 = time.monotonic()
    assert holder.acquire()  # and never releases: a stalled worker
    remaining = holder.lease_remaining()
    assert remaining is not None and 0 < remaining <= lease
    old = holder.fence
    waiter = locks.lock("job")
    got: list[float] = []

    def wait() -> None:
        # The bound: the lease plus a generous margin for a loaded machine.
        assert waiter.acquire(timeout=lease + 10)
        got.append(time.monotonic() - t0)

    run_threads([wait])
    assert got and got[0] >= lease * 0.99, f"handed over before the lease ended: {got}"
    assert waiter.fence is not None and old is not None and waiter.fence > old
    assert holder.lease_remaining() == 0.0
    assert not holder.is_current()
    with pytest.raises(keylock.LeaseExpiredError) as err:
        holder.extend(1.0)
    assert isinstance(err.value, keylock.NotOwnerError) and isinstance(err.value, RuntimeError)
    with pytest.raises(keylock.LeaseExpiredError):
        holder.release()
    assert waiter.is_current() and locks.is_locked("job")
    waiter.release()
    assert not locks.is_locked("job")


def test_lease_hand_over_to_a_waiting_task() -> None:
    # The task's wake-up comes from the core's lease timer thread, not from a release.
    async def main() -> None:
        pool = keylock.KeyPool()
        holder = pool.lock("job")
        assert await holder.acquire_async(lease=0.1)
        waiter = pool.lock("job")
        t0 = time.monotonic()
        assert await waiter.acquire_async(timeout=10.1)
        assert time.monotonic() - t0 >= 0.09
        assert waiter.fence is not None and holder.fence is not None
        assert waiter.fence > holder.fence
        with pytest.raises(keylock.LeaseExpiredError):
            await holder.__aexit__(None, None, None)
        waiter.release()
        assert len(pool) == 0

    arun(main())


def test_idle_expired_key_is_free_at_the_next_acquire() -> None:
    pool = keylock.KeyPool()
    h = pool.lock("k", lease=0.02)
    h.acquire()
    wait_until(lambda: not h.is_current(), what="the lease to end")
    assert not pool.is_locked("k") and pool.info("k") is None
    nxt = pool.lock("k")
    assert nxt.acquire(blocking=False)
    nxt.release()
    with pytest.raises(keylock.LeaseExpiredError):
        h.release()


def test_extend_and_lease_remaining() -> None:
    pool = keylock.KeyPool()
    h = pool.lock("k")
    with pytest.raises(keylock.NotLockedError):
        h.lease_remaining()
    with pytest.raises(keylock.NotLockedError):
        h.extend(1)
    with h:
        assert h.lease_remaining() is None
        with pytest.raises(ValueError, match="no lease"):
            h.extend(1)
    h.acquire(lease=0.5)
    first = h.lease_remaining()
    assert first is not None and first <= 0.5
    h.extend(30)
    later = h.lease_remaining()
    assert later is not None and 29 < later <= 30
    info = pool.info("k")
    assert info is not None and info.lease_remaining is not None and info.lease_remaining > 29
    for bad in (0, -1, float("nan"), "1"):
        with pytest.raises((ValueError, TypeError)):
            h.extend(bad)  # type: ignore[arg-type]
    h.release()
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError):
            pool.lock("k", lease=bad)
        with pytest.raises(ValueError):
            pool.lock("k").acquire(lease=bad)
    with pytest.raises(OverflowError):
        pool.lock("k", lease=threading.TIMEOUT_MAX * 2)


def test_lease_applies_to_lock_many_and_shared_holders() -> None:
    pool = keylock.KeyPool()
    m = pool.lock_many(["a", ("b", "shared")], lease=0.05)
    assert m.acquire()
    r = pool.read("c", lease=0.05)
    assert r.acquire()
    wait_until(lambda: not m.is_current() and not r.is_current(), what="the leases to end")
    assert not any(pool.is_locked(k) for k in "abc")
    assert len(pool) == 0  # (stats count an ended lease until the key is next looked at)
    with pytest.raises(keylock.LeaseExpiredError):
        m.release()
    with pytest.raises(keylock.LeaseExpiredError):
        r.release()


# ---- introspection and errors ----


def test_info_and_is_locked() -> None:
    pool = keylock.KeyPool()
    assert pool.info("k") is None and not pool.is_locked("k")
    h = pool.lock("k")
    with h:
        info = pool.info("k")
        assert info is not None
        assert (info.fence, info.mode, info.holders, info.holds) == (h.fence, "exclusive", 1, 1)
        assert info.owner is None and info.lease_remaining is None and info.waiters == 0
        assert "LockInfo(fence=" in repr(info)
        waiter = pool.lock("k")
        t = threading.Thread(target=lambda: waiter.acquire(timeout=DEADLOCK))
        t.start()
        wait_until(lambda: (pool.info("k") or info).waiters == 1, what="the waiter to queue")
    t.join(DEADLOCK)
    assert waiter.is_current()
    waiter.release()
    assert pool.info("k") is None


def _header_codes() -> dict[str, int]:
    header = pathlib.Path(__file__).resolve().parents[2] / "include" / "keylock.h"
    text = header.read_text()
    return {m[1]: int(m[2]) for m in re.finditer(r"#define (KEYLOCK_[A-Z_]+) (\d+)\n", text)}


def test_exceptions_come_from_the_status_table() -> None:
    errors = [
        (keylock.WouldBlockError, BlockingIOError, "KEYLOCK_WOULD_BLOCK"),
        (keylock.LockTimeout, TimeoutError, "KEYLOCK_TIMEOUT"),
        (keylock.NotLockedError, RuntimeError, "KEYLOCK_NOT_LOCKED"),
        (keylock.NotOwnerError, RuntimeError, "KEYLOCK_NOT_OWNER"),
        (keylock.LeaseExpiredError, RuntimeError, "KEYLOCK_LEASE_EXPIRED"),
        (keylock.ReentrancyLimitError, OverflowError, "KEYLOCK_REENTRANCY_LIMIT"),
        (keylock.CapacityExceededError, RuntimeError, "KEYLOCK_CAPACITY_EXCEEDED"),
        (keylock.IncompatibleError, RuntimeError, "KEYLOCK_INCOMPATIBLE"),
        (keylock.PermissionDeniedError, PermissionError, "KEYLOCK_PERMISSION_DENIED"),
        (keylock.UnavailableError, OSError, "KEYLOCK_UNAVAILABLE"),
    ]
    header = _header_codes()
    codes = set()
    for cls, builtin, status in errors:
        assert issubclass(cls, keylock.KeylockError) and issubclass(cls, builtin), cls
        assert cls.status == status, cls
        assert cls.__module__ == "keylock" and cls.__doc__
        codes.add(cls.code)
        # The C header is generated from the same table: where it has the name, the number
        # agrees (names missing there are newer than the header on this branch).
        if status in header:
            assert header[status] == cls.code, status
    assert len(codes) == len(errors)
    assert issubclass(keylock.LeaseExpiredError, keylock.NotOwnerError)
    e = keylock.NotOwnerError("x")
    assert isinstance(e, RuntimeError) and str(e) == "x"

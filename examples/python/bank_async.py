#!/usr/bin/env python3
"""keylock bank demo, with asyncio tasks.

The same bank as bank.py, with tasks instead of threads: W tasks move random amounts between A
accounts, each transfer holding the bank's RwLock for reading (`async with bank.read()`) and
its two account keys through lock_many; an auditor task takes the RwLock for writing, sums
every balance and checks that the total never changed. As in bank.py, the accounts live in a
store that refuses a write whose fence is not newer than the last it applied, and after each
phase a stale task holds account 0 past its 50 ms lease: the next holder (a task woken by the
lease's end) takes over and writes, the stale write is refused, and the stale release raises
LeaseExpiredError. Runs once with a KeyPool and once with a StripedLock, prints transfers per
second, audits passed, the stale writer's outcome and the final total, and exits non-zero on
any mismatch.

    python examples/python/bank_async.py [--workers 64] [--accounts 64] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time

import keylock
from bank import LEASE, Store, fence_of

INITIAL_BALANCE = 1_000


async def stale_writer(locks: keylock.KeyPool | keylock.StripedLock, store: Store) -> bool:
    """bank.stale_writer with tasks: the successor waits in the event loop."""
    key = "acct:0"
    stale = locks.lock(key, lease=LEASE)
    assert await stale.acquire_async()
    seen, fence = store.balances[0], stale.fence
    assert fence is not None
    successor = locks.lock(key)
    # Queued now; woken when the lease ends (nobody releases), by the core's lease timer.
    took_over = await successor.acquire_async(timeout=5)
    if took_over:
        store.write(0, store.balances[0], fence_of(locks, key))
        successor.release()
    refused_before = store.refused
    applied = store.write(0, seen - 100, fence)  # the stale task wakes up and writes
    try:
        stale.release()
        expired = False
    except keylock.LeaseExpiredError:
        expired = True
    return took_over and not applied and store.refused == refused_before + 1 and expired


async def run_phase(
    name: str,
    locks: keylock.KeyPool | keylock.StripedLock,
    workers: int,
    accounts: int,
    seconds: float,
) -> tuple[float, int, int, bool]:
    """Run one timed phase; return (transfers/s, audits passed, audits failed, all checks
    passed)."""
    store = Store(accounts)
    balances = store.balances
    initial_total = sum(balances)
    bank = keylock.RwLock()
    stop = asyncio.Event()
    done = [0] * workers
    audits = {"passed": 0, "failed": 0}

    async def worker(i: int) -> None:
        rng = random.Random(i)
        n = 0
        while not stop.is_set():
            a, b = rng.sample(range(accounts), 2)
            amount = rng.randint(1, 100)
            ka, kb = f"acct:{a}", f"acct:{b}"
            async with bank.read(), locks.lock_many([ka, kb]):
                if balances[a] >= amount:
                    from_balance = balances[a]
                    await asyncio.sleep(0)  # other tasks run mid-transfer: the locks must hold
                    store.write(a, from_balance - amount, fence_of(locks, ka))
                    store.write(b, balances[b] + amount, fence_of(locks, kb))
            n += 1
        done[i] = n

    async def auditor() -> None:
        while not stop.is_set():
            async with bank.write():
                total = sum(balances)
            audits["passed" if total == initial_total else "failed"] += 1
            await asyncio.sleep(0.002)

    start = time.perf_counter()
    tasks = [asyncio.create_task(worker(i)) for i in range(workers)]
    tasks.append(asyncio.create_task(auditor()))
    await asyncio.sleep(seconds)
    stop.set()
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    except asyncio.TimeoutError:
        print(f"{name}: a task is stuck (deadlock?)", file=sys.stderr)
        sys.exit(2)
    elapsed = time.perf_counter() - start
    refused_by_workers = store.refused
    stopped = await stale_writer(locks, store)
    final_total = sum(balances)
    rate = sum(done) / elapsed
    ok = final_total == initial_total and refused_by_workers == 0 and stopped
    print(
        f"{name:<12} {rate:>10,.0f} transfers/s   audits passed {audits['passed']}"
        f" of {audits['passed'] + audits['failed']}   stale write"
        f" {'refused' if stopped else 'NOT STOPPED'}   final total {final_total:,}"
        f" {'==' if final_total == initial_total else '!='} initial {initial_total:,}"
    )
    if refused_by_workers:
        print(f"{name}: {refused_by_workers} writes of current holders refused", file=sys.stderr)
    return rate, audits["passed"], audits["failed"], ok


async def amain(args: argparse.Namespace) -> int:
    print(f"bank (asyncio): {args.workers} tasks, {args.accounts} accounts")
    failed = False
    for name, locks in (("KeyPool", keylock.KeyPool()), ("StripedLock", keylock.StripedLock(64))):
        _, passed, bad, ok = await run_phase(name, locks, args.workers, args.accounts, args.seconds)
        failed |= bad > 0 or not ok or passed == 0
        if isinstance(locks, keylock.KeyPool) and len(locks) != 0:
            print(f"{name}: {len(locks)} keys still held", file=sys.stderr)
            failed = True
    print("MISMATCH" if failed else "all audits passed; totals match")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--accounts", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=0.5, help="length of each phase")
    return asyncio.run(amain(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

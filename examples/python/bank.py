#!/usr/bin/env python3
"""keylock bank demo, with threads.

W workers move random amounts between A accounts. A transfer holds the bank's RwLock for
reading and takes its two account keys with lock_many (deadlock-free whatever the order); an
auditor takes the RwLock for writing, so no transfer is half done, sums every balance and
checks that the total never changed.

The accounts live in a store that fences its writes, as a database would with
``UPDATE accounts SET balance = $b, fence = $f WHERE id = $id AND fence < $f``: every write
carries the fence of the writer's hold on that account, and the store refuses one that is not
newer than the last it applied. After the workers of each phase a stale writer shows why: it
takes account 0 with a 50 ms lease and stalls past it; the next holder takes over and writes;
the stale writer's write is then refused by the store, and its release raises
LeaseExpiredError. (A lease alone would not have stopped it from writing.)

The demo runs once with a KeyPool and once with a StripedLock, prints transfers per second for
each, the audits passed, the stale writer's outcome and the final total, and exits non-zero on
any mismatch.

    python examples/python/bank.py [--workers 8] [--accounts 64] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time

import keylock

INITIAL_BALANCE = 1_000
LEASE = 0.05


class Store:
    """Balances with the fence of the last write to each; a write must bring a newer fence."""

    def __init__(self, accounts: int) -> None:
        self.balances = [INITIAL_BALANCE] * accounts
        self.fences = [0] * accounts
        self.refused = 0

    def write(self, account: int, balance: int, fence: int) -> bool:
        # UPDATE accounts SET balance = $b, fence = $f WHERE id = $id AND fence < $f
        if fence <= self.fences[account]:
            self.refused += 1
            return False
        self.balances[account], self.fences[account] = balance, fence
        return True


def fence_of(locks: keylock.KeyPool | keylock.StripedLock, key: str) -> int:
    """The fence of the exclusive hold the caller has on `key` (it must hold it)."""
    info = locks.info(key)
    assert info is not None and info.mode == "exclusive"
    return info.fence


def stale_writer(locks: keylock.KeyPool | keylock.StripedLock, store: Store) -> bool:
    """A holder stalls past its lease: the next holder takes over, and the stale write is
    refused by the store. Returns whether every part of that happened."""
    key = "acct:0"
    stale = locks.lock(key, lease=LEASE)
    stale.acquire()
    seen, fence = store.balances[0], stale.fence
    assert fence is not None
    time.sleep(LEASE * 2)  # a GC pause, a slow disk: the lease runs out meanwhile
    successor = locks.lock(key)
    took_over = successor.acquire(timeout=5)
    if took_over:
        store.write(0, store.balances[0], fence_of(locks, key))  # the new holder writes
        successor.release()
    refused_before = store.refused
    applied = store.write(0, seen - 100, fence)  # the stale holder's write arrives late
    try:
        stale.release()
        expired = False
    except keylock.LeaseExpiredError:
        expired = True
    return took_over and not applied and store.refused == refused_before + 1 and expired


def run_phase(
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
    stop = threading.Event()
    done = [0] * workers
    audits = {"passed": 0, "failed": 0}

    def worker(i: int) -> None:
        rng = random.Random(i)
        n = 0
        while not stop.is_set():
            a, b = rng.sample(range(accounts), 2)
            amount = rng.randint(1, 100)
            ka, kb = f"acct:{a}", f"acct:{b}"
            with bank.read(), locks.lock_many([ka, kb]):
                if balances[a] >= amount:
                    from_balance = balances[a]
                    time.sleep(0)  # let others run mid-transfer: the locks must hold
                    # Both writes carry this holder's fences: the store applies them.
                    store.write(a, from_balance - amount, fence_of(locks, ka))
                    store.write(b, balances[b] + amount, fence_of(locks, kb))
            n += 1
        done[i] = n

    def auditor() -> None:
        while not stop.is_set():
            with bank.write():
                total = sum(balances)
            audits["passed" if total == initial_total else "failed"] += 1
            time.sleep(0.002)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    threads.append(threading.Thread(target=auditor))
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(30)
    elapsed = time.perf_counter() - start
    if any(t.is_alive() for t in threads):
        print(f"{name}: a thread is stuck (deadlock?)", file=sys.stderr)
        sys.exit(2)
    refused_by_workers = store.refused
    stopped = stale_writer(locks, store)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--accounts", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=0.5, help="length of each phase")
    args = ap.parse_args()
    print(f"bank (threads): {args.workers} workers, {args.accounts} accounts")
    failed = False
    for name, locks in (("KeyPool", keylock.KeyPool()), ("StripedLock", keylock.StripedLock(64))):
        _, passed, bad, ok = run_phase(name, locks, args.workers, args.accounts, args.seconds)
        failed |= bad > 0 or not ok or passed == 0
        if isinstance(locks, keylock.KeyPool) and len(locks) != 0:
            print(f"{name}: {len(locks)} keys still held", file=sys.stderr)
            failed = True
    print("MISMATCH" if failed else "all audits passed; totals match")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

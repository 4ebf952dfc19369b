#!/usr/bin/env python3
"""keylock bank demo, with threads.

W workers move random amounts between A accounts. A transfer holds the bank's RwLock for
reading and takes its two account keys with lock_many (deadlock-free whatever the order); an
auditor takes the RwLock for writing, so no transfer is half done, sums every balance and
checks that the total never changed. The demo runs once with a KeyPool and once with a
StripedLock, prints transfers per second for each, the audits passed and the final total, and
exits non-zero on any mismatch.

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


def run_phase(
    name: str,
    locks: keylock.KeyPool | keylock.StripedLock,
    workers: int,
    accounts: int,
    seconds: float,
) -> tuple[float, int, int, bool]:
    """Run one timed phase; return (transfers/s, audits passed, audits failed, totals match)."""
    balances = [INITIAL_BALANCE] * accounts
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
            with bank.read(), locks.lock_many([f"acct:{a}", f"acct:{b}"]):
                if balances[a] >= amount:
                    from_balance = balances[a]
                    time.sleep(0)  # let others run mid-transfer: the locks must hold
                    balances[a] = from_balance - amount
                    balances[b] += amount
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
    final_total = sum(balances)
    rate = sum(done) / elapsed
    ok = final_total == initial_total
    print(
        f"{name:<12} {rate:>10,.0f} transfers/s   audits passed {audits['passed']}"
        f" of {audits['passed'] + audits['failed']}   final total {final_total:,}"
        f" {'==' if ok else '!='} initial {initial_total:,}"
    )
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

#!/usr/bin/env python3
"""Workers for the Redis locks keylock's Redis scope is compared with (core/benches/redis.rs
starts them against its own redis-server, in the same run as keylock's workers).

    redis_peers.py LIB PORT uncontended RUNS OPS
        RUNS lines on stdout, each the mean ns of one acquire+release over OPS operations
    redis_peers.py LIB PORT contend KEYS DURATION_MS GO OUT
        once connected, creates OUT.ready, waits for the file GO to hold a start time (ns,
        time.time_ns()), then for DURATION_MS: locks a random one of KEYS keys and releases it
        at once; one line per acquisition in OUT: "key t_request t_inside t_release" (ns)

LIB is one of
    redis-py            redis.lock.Lock as redis-py documents it: a blocking acquire retries every
                        `sleep` seconds (default 0.1), i.e. it polls
    python-redis-lock   redis_lock.Lock: a blocking acquire waits on BLPOP for the release's push
Both get a 30 s lease (keylock's default) and no auto-renewal.
"""

from __future__ import annotations

import random
import sys
import time

import redis


def make(lib: str, con: redis.Redis, name: str):
    if lib == "redis-py":
        return con.lock(name, timeout=30)
    if lib == "python-redis-lock":
        import redis_lock

        return redis_lock.Lock(con, name, expire=30)
    raise SystemExit(f"unknown lock library {lib}")


def wait_for_start(go: str) -> int:
    while True:
        try:
            with open(go) as f:
                text = f.read().strip()
            if text:
                return int(text)
        except FileNotFoundError:
            pass
        time.sleep(0.001)


def main(argv: list[str]) -> int:
    lib, port, what = argv[1], int(argv[2]), argv[3]
    con = redis.Redis(host="127.0.0.1", port=port, db=0)
    con.ping()
    if what == "uncontended":
        runs, ops = int(argv[4]), int(argv[5])
        lock = make(lib, con, "peer-uncontended")
        for _ in range(50):
            lock.acquire()
            lock.release()
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            for _ in range(ops):
                lock.acquire()
                lock.release()
            print((time.perf_counter_ns() - t0) / ops, flush=True)
        return 0
    if what == "contend":
        keys, duration_ms, go, out = int(argv[4]), int(argv[5]), argv[6], argv[7]
        locks = [make(lib, con, f"peer-key-{k}") for k in range(keys)]
        open(out + ".ready", "w").close()
        start = wait_for_start(go)
        end = start + duration_ms * 1_000_000
        while time.time_ns() < start:
            time.sleep(0.0005)
        rows = []
        while True:
            k = random.randrange(keys)
            t_req = time.time_ns()
            if t_req >= end:
                break
            locks[k].acquire()
            t_in = time.time_ns()
            t_rel = time.time_ns()
            locks[k].release()
            rows.append(f"{k} {t_req} {t_in} {t_rel}\n")
        with open(out, "w") as f:
            f.writelines(rows)
        return 0
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

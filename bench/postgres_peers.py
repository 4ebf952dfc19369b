"""Workers for core/benches/postgres.rs: keylock's PostgreSQL scope from Python, and the bare
pg_advisory_lock / pg_advisory_unlock pair through psycopg (autocommit, server-side prepared
statements: prepare=True), against the server the benchmark started.

    postgres_peers.py uncontended IMPL URL PAIRS
        PAIRS acquire+release pairs of one key; prints each pair's latency (ns), one a line
    postgres_peers.py contend IMPL URL KEYS DURATION_MS GO OUT
        locks a random key of KEYS and releases it at once until DURATION_MS after the start
        time that the file GO holds (CLOCK_MONOTONIC ns); writes "key req inside rel" lines
        (CLOCK_MONOTONIC ns) to OUT, after writing OUT.ready once connected

IMPL is "keylock" (keylock.KeyPool.open(URL), `with pool.lock(key)`) or "psycopg" (the bare
pair, lock number = the key's index + 1).
"""

import random
import sys
import time


def keylock_pair(url):
    import keylock

    pool = keylock.KeyPool.open(url)

    def pair(k):
        with pool.lock(f"key-{k}"):
            return time.monotonic_ns()

    return pair


def psycopg_pair(url):
    import psycopg

    # The URL's query (prefix=...) is keylock's, not libpq's.
    conn = psycopg.connect(url.split("?", 1)[0], autocommit=True)
    cur = conn.cursor()

    def pair(k):
        cur.execute("SELECT pg_advisory_lock(%s)", (k + 1,), prepare=True)
        cur.fetchone()
        inside = time.monotonic_ns()
        cur.execute("SELECT pg_advisory_unlock(%s)", (k + 1,), prepare=True)
        cur.fetchone()
        return inside

    return pair


def make(impl, url):
    return {"keylock": keylock_pair, "psycopg": psycopg_pair}[impl](url)


def uncontended(impl, url, pairs):
    pair = make(impl, url)
    for _ in range(200):
        pair(0)
    out = []
    for _ in range(pairs):
        t = time.perf_counter_ns()
        pair(0)
        out.append(time.perf_counter_ns() - t)
    sys.stdout.write("".join(f"{v}\n" for v in out))


def contend(impl, url, keys, duration_ms, go, out):
    pair = make(impl, url)
    pair(0)
    open(out + ".ready", "w").close()
    while True:
        try:
            start = int(open(go).read().strip())
            break
        except (OSError, ValueError):
            time.sleep(0.001)
    end = start + duration_ms * 1_000_000
    while time.monotonic_ns() < start:
        time.sleep(0.0002)
    recs = []
    rng = random.Random()
    while True:
        k = rng.randrange(keys)
        req = time.monotonic_ns()
        if req >= end:
            break
        # The pair returns the time inside; the release call begins right after it.
        inside = pair(k)
        recs.append(f"{k} {req} {inside} {inside}\n")
    with open(out, "w") as f:
        f.write("".join(recs))


def main():
    mode, impl, url = sys.argv[1:4]
    if mode == "uncontended":
        uncontended(impl, url, int(sys.argv[4]))
    else:
        contend(impl, url, int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7])


if __name__ == "__main__":
    main()

"""The Python child of the cross-language process tests (.ci/xlang/run.py drives it; child.c and
child.js speak the same protocol, described in .ci/xlang/README.md).

It opens the scope named by KEYLOCK_XLANG_SCOPE with keylock.KeyPool.open, prints
"ready py PID", then runs one command per line of stdin and answers on stdout.
"""

import os
import socket
import sys
import time

import keylock

SCOPE = os.environ["KEYLOCK_XLANG_SCOPE"]
DIR = os.environ["KEYLOCK_XLANG_DIR"]
STORE = os.environ["KEYLOCK_XLANG_STORE"]
BROKEN = os.environ.get("KEYLOCK_XLANG_BREAK") == "1"  # skip the lock (self-check only)
WAIT_S = 30.0


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def fail(msg: str) -> None:
    say(f"fail py {os.getpid()}: {msg}")
    os._exit(3)


class FileStore:
    """A record "COUNT FENCE" per key in DIR/ctr.KEY, read and rewritten in place."""

    def __init__(self) -> None:
        self.fds: dict[str, int] = {}

    def read(self, key: str) -> tuple[int, int]:
        fd = self.fds.get(key)
        if fd is None:
            fd = self.fds[key] = os.open(f"{DIR}/ctr.{key}", os.O_RDWR | os.O_CREAT, 0o600)
        data = os.pread(fd, 128, 0)
        if not data:
            return 0, 0
        count, fence = data.split()
        return int(count), int(fence)

    def write(self, key: str, count: int, fence: int) -> None:
        os.pwrite(self.fds[key], f"{count:020d} {fence:020d}\n".encode(), 0)


class RedisStore:
    """The same record in the Redis string xlang:ctr:KEY: GET, then SET, in plain RESP."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = self.sock.makefile("rb")

    def _call(self, *args: bytes) -> bytes | None:
        msg = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
        self.sock.sendall(msg)
        line = self.buf.readline()
        if line.startswith(b"-") or not line:
            fail(f"redis: {line!r}")
        if line.startswith(b"$"):
            n = int(line[1:])
            if n < 0:
                return None
            return self.buf.read(n + 2)[:n]
        return line.rstrip(b"\r\n")

    def read(self, key: str) -> tuple[int, int]:
        data = self._call(b"GET", f"xlang:ctr:{key}".encode())
        if data is None:
            return 0, 0
        count, fence = data.split()
        return int(count), int(fence)

    def write(self, key: str, count: int, fence: int) -> None:
        record = f"{count:020d} {fence:020d}\n".encode()
        if self._call(b"SET", f"xlang:ctr:{key}".encode(), record) != b"+OK":
            fail("redis SET refused")


def make_store() -> FileStore | RedisStore:
    if STORE.startswith("redis:"):
        return RedisStore(int(STORE[len("redis:") :]))
    return FileStore()


def take(pool: keylock.KeyPool, key: str, shared: bool, timeout: float) -> keylock.KeyLock:
    h = pool.read(key) if shared else pool.lock(key)
    if not h.acquire(timeout=timeout):
        raise keylock.LockTimeout(f"no {key} within {timeout} s")
    return h  # type: ignore[return-value]


def count(
    pool: keylock.KeyPool, mode: str, iters: int, keys: int, ident: int, hold_us: int
) -> None:
    """The same rule as child.c's count_run: key (i + ident) % keys; a write in exclusive mode,
    or in shared mode when ((i + ident) // keys) % 3 == 0; a shared read otherwise."""
    store = make_store()
    log = []
    for i in range(iters):
        k = f"k{(i + ident) % keys}"
        write = mode == "exclusive" or ((i + ident) // keys) % 3 == 0
        fence = 0
        h = None
        if not BROKEN:
            h = take(pool, k, not write, WAIT_S)
            if h.owner_died:
                fail(f"owner_died without a death ({k})")
            fence = h.fence
        t0 = time.monotonic_ns()
        n, last = store.read(k)
        if BROKEN:
            fence = last + 1 if write else last
        if write and fence <= last:
            fail(f"fence of {k} did not rise: {fence} after {last}")
        if not write and fence < last:
            fail(f"shared fence of {k} below the record: {fence} < {last}")
        if hold_us:
            time.sleep(hold_us / 1e6)
        if write:
            store.write(k, n + 1, fence)
        t1 = time.monotonic_ns()
        if h is not None:
            h.release()
        log.append(f"{'x' if write else 's'} {k} {t0} {t1} {fence}\n")
    with open(f"{DIR}/log.{ident}", "w") as f:
        f.writelines(log)
    say(f"counted {iters}")


def units(sem: keylock.Semaphore, iters: int, keys: int, ident: int, hold_us: int) -> None:
    """child.c's units_run, the same rule: key (i + ident) % keys, weight 1 + (i + ident) % 3,
    held HOLD_US; the fences of this child's acquisitions of a key must rise (one after the
    other, granted in that order)."""
    log = []
    last: dict[str, int] = {}
    for i in range(iters):
        k = f"k{(i + ident) % keys}"
        weight = 1 + (i + ident) % 3
        h = None
        if BROKEN:
            fence = 10**15 + ident * 10**6 + i  # distinct, so that only the units can tell
        else:
            h = sem.acquire(k, weight)
            if not h.acquire(timeout=WAIT_S):
                fail(f"units: no {weight} units of {k} within {WAIT_S} s")
            fence = h.fence
        t0 = time.monotonic_ns()
        if fence <= last.get(k, 0):
            fail(f"semaphore fence of {k} did not rise: {fence} after {last[k]}")
        last[k] = fence
        if hold_us:
            time.sleep(hold_us / 1e6)
        t1 = time.monotonic_ns()
        if h is not None:
            h.release()
        log.append(f"u {k} {t0} {t1} {fence} {weight}\n")
    with open(f"{DIR}/log.{ident}", "w") as f:
        f.writelines(log)
    say(f"counted {iters}")


def main() -> None:
    capacity = os.environ.get("KEYLOCK_XLANG_CAPACITY")
    opts = {"capacity": int(capacity)} if capacity and SCOPE.startswith("shm:") else {}
    # A semaphore scope (KEYLOCK_XLANG_SEMAPHORE=1) is not a pool's: only `units` opens it.
    semaphore_only = os.environ.get("KEYLOCK_XLANG_SEMAPHORE") == "1"
    pool = None if semaphore_only else keylock.KeyPool.open(SCOPE, **opts)
    store = make_store()
    held: list[keylock.KeyLock] = []
    sem: keylock.Semaphore | None = None  # opened by the first `units`
    say(f"ready py {os.getpid()}")
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "count":
            mode, iters, keys, ident, hold_us = args[0], *map(int, args[1:5])
            count(pool, mode, iters, keys, ident, hold_us)
        elif cmd == "units":
            iters, keys, ident, hold_us, permits = map(int, args[:5])
            if sem is None:
                sem = keylock.Semaphore.open(SCOPE, permits)
            units(sem, iters, keys, ident, hold_us)
        elif cmd == "hold":
            key, lease_ms = args[0], int(args[1])
            h = pool.lock(key, lease=lease_ms / 1000 if lease_ms else None)
            if not h.acquire(timeout=WAIT_S):
                fail(f"hold {key}: timed out")
            n, last = store.read(key)
            if h.fence <= last:
                fail(f"fence of {key} did not rise: {h.fence} after {last}")
            store.write(key, n, h.fence)
            held.append(h)
            say(f"held {h.fence} {int(h.owner_died)}")
        elif cmd == "acquire":
            key, timeout_ms, lease_ms = args[0], int(args[1]), int(args[2])
            h = pool.lock(key, lease=lease_ms / 1000 if lease_ms else None)
            got = h.acquire(timeout=timeout_ms / 1000)
            t = time.monotonic_ns()
            if not got:
                say("error KEYLOCK_TIMEOUT")
                continue
            n, last = store.read(key)
            if h.fence <= last:
                fail(f"fence of {key} did not rise: {h.fence} after {last}")
            store.write(key, n + 1, h.fence)
            fence, died = h.fence, h.owner_died
            h.release()
            say(f"got {fence} {int(died)} {t}")
        elif cmd == "holdmany":
            prefix, n = args[0], int(args[1])
            for i in range(n):
                h = pool.lock(f"{prefix}{i}")
                try:
                    ok = h.acquire(blocking=False)
                except keylock.KeylockError as e:
                    say(f"error {e.status} {i}")
                    break
                if not ok:
                    say(f"error WOULD_BLOCK {i}")
                    break
                held.append(h)
            else:
                say(f"heldmany {n}")
        elif cmd == "release":
            refused = []
            while held:
                try:
                    held.pop().release()
                except (keylock.NotOwnerError, keylock.LeaseExpiredError) as e:
                    refused.append(f" {e.status}")
            say("released" + "".join(refused))
        elif cmd == "quit":
            break
        else:
            fail(f"unknown command: {line!r}")


if __name__ == "__main__":
    main()

"""Signals interrupt a blocked acquire; the interrupted caller is left without the lock.

Each case runs in a fresh interpreter, so a wait that ignored signals fails by the subprocess
timeout instead of hanging pytest. The scripts print the measured interrupt latency (seconds
from the signal to the exception) for information; the issue's 100 ms figure is reported by
the benchmark, not asserted here."""

from __future__ import annotations

import sys

import pytest

from conftest import run_script

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

PRELUDE = """
import os, signal, sys, threading, time, keylock
# A shell that starts a job in the background without job control makes it ignore SIGINT,
# and Python then installs no KeyboardInterrupt handler: install it, so the test does not
# depend on how it was started.
signal.signal(signal.SIGINT, signal.default_int_handler)
sent = [0.0]
def send_after(delay, sig):
    def fire():
        time.sleep(delay)
        sent[0] = time.monotonic()
        os.kill(os.getpid(), sig)
    threading.Thread(target=fire, daemon=True).start()
"""


@pytest.mark.parametrize("kind", ["pool", "striped", "write", "read", "many"])
def test_sigint_interrupts_blocked_acquire(kind: str) -> None:
    proc = run_script(
        PRELUDE
        + f"""
kind = {kind!r}
pool, striped, rw = keylock.KeyPool(), keylock.StripedLock(8), keylock.RwLock()
if kind == "pool":
    held, blocked = pool.lock("k"), pool.lock("k")
elif kind == "striped":
    held, blocked = striped.lock("k"), striped.lock("k")
elif kind == "write":
    held, blocked = rw.read(), rw.write()
elif kind == "read":
    held, blocked = rw.write(), rw.read()
else:
    held, blocked = pool.lock("b"), pool.lock_many(["a", "b", "c"])
held.acquire()            # held by this very thread: the next acquire can only end by a signal
send_after(0.2, signal.SIGINT)
try:
    blocked.acquire()
    print("acquired a held lock"); sys.exit(1)
except KeyboardInterrupt:
    latency = time.monotonic() - sent[0]
print(f"latency {{latency*1000:.1f}} ms")
assert not blocked.acquire(blocking=False)   # still held by `held`
held.release()
assert not held.locked() and not blocked.locked()   # the interrupted caller holds nothing
assert len(pool) == 0 and pool.stats()["waiting"] == 0
assert not rw.is_locked()
assert blocked.acquire(blocking=False)       # and the lock is usable again
blocked.release()
print("ok")
"""
    )
    assert "ok" in proc.stdout


def test_custom_signal_handler_exception_propagates() -> None:
    run_script(
        PRELUDE
        + """
class Stop(Exception):
    pass
def handler(signum, frame):
    raise Stop()
signal.signal(signal.SIGUSR1, handler)
pool = keylock.KeyPool()
holder = pool.lock("k")
holder.acquire()
send_after(0.2, signal.SIGUSR1)
try:
    pool.lock("k").acquire(timeout=60)
    sys.exit("acquired a held lock")
except Stop:
    pass
assert pool.stats()["waiting"] == 0
holder.release()
assert len(pool) == 0
print("ok")
"""
    )


def test_handler_that_returns_keeps_waiting() -> None:
    # A handler that does not raise must not end the wait: the acquire goes on and succeeds
    # once the lock is released.
    run_script(
        PRELUDE
        + """
calls = []
signal.signal(signal.SIGUSR1, lambda s, f: calls.append(s))
pool = keylock.KeyPool()
h = pool.lock("k")
h.acquire()
send_after(0.1, signal.SIGUSR1)
def release_later():
    while not calls:
        time.sleep(0.01)
    h.release()
threading.Thread(target=release_later, daemon=True).start()
waiter = pool.lock("k")
assert waiter.acquire(timeout=60)
assert calls == [signal.SIGUSR1]
waiter.release()
print("ok")
"""
    )


def test_sigint_interrupts_with_statement_and_lock_is_not_taken() -> None:
    run_script(
        PRELUDE
        + """
pool = keylock.KeyPool()
holder_ready, stop = threading.Event(), threading.Event()
def holder():
    with pool.lock("k"):
        holder_ready.set()
        stop.wait(60)
t = threading.Thread(target=holder)
t.start()
holder_ready.wait(20)
send_after(0.2, signal.SIGINT)
entered = False
try:
    with pool.lock("k"):
        entered = True
except KeyboardInterrupt:
    pass
assert not entered
stop.set()
t.join(20)
assert len(pool) == 0 and pool.stats()["waiting"] == 0
print("ok")
"""
    )

"""os.fork() while locks are held: what the child sees is documented in keylock's module
docstring; this checks it."""

from __future__ import annotations

import os
import sys
import threading

import pytest

import keylock

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _in_child(fn) -> int:  # type: ignore[no-untyped-def]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            code = 0 if fn() else 2
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads (3.12+)
def test_fork_child_sees_locks_as_they_were() -> None:
    pool = keylock.KeyPool()
    mine = pool.lock("mine")
    mine.acquire()
    other_ready, stop = threading.Event(), threading.Event()

    def other() -> None:
        with pool.lock("other"):
            other_ready.set()
            stop.wait(30)

    t = threading.Thread(target=other)
    t.start()
    assert other_ready.wait(20)

    def child() -> bool:
        # Held by the forking thread: still held, and releasable here.
        assert pool.is_locked("mine")
        mine.release()
        assert not pool.is_locked("mine")
        # Held by a thread that does not exist in the child: held for good.
        assert pool.is_locked("other")
        assert pool.lock("other").acquire(timeout=0.05) is False
        # Other keys work normally.
        with pool.lock("fresh"):
            assert pool.is_locked("fresh")
        return True

    try:
        assert _in_child(child) == 0
    finally:
        stop.set()
        t.join(20)
    # The parent is untouched by what the child did.
    assert pool.is_locked("mine")
    mine.release()
    assert len(pool) == 0
    sys.stdout.flush()

"""Shared helpers: every wait in these tests is bounded, so a deadlock fails instead of hanging.

pytest-timeout (configured in py/pyproject.toml) is the last guard; these helpers fail sooner
and say what hung.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

#: Upper bound for any single wait in a test (a hang is a deadlock).
DEADLOCK = 30.0


def run_threads(targets: list[Callable[[], Any]], timeout: float = DEADLOCK) -> None:
    """Run each target in its own thread; fail if any raises or if any is still running after
    `timeout` seconds (a deadlock)."""
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], Any]) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(fn,), daemon=True) for fn in targets]
    for t in threads:
        t.start()
    end = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    stuck = sum(t.is_alive() for t in threads)
    assert stuck == 0, f"deadlock: {stuck} of {len(threads)} threads still running after {timeout}s"
    if errors:
        raise errors[0]


def arun(coro: Coroutine[Any, Any, Any], timeout: float = DEADLOCK) -> Any:
    """asyncio.run with a deadline."""

    async def guarded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(guarded())


def wait_until(
    cond: Callable[[], bool], timeout: float = DEADLOCK, what: str = "condition"
) -> None:
    """Poll `cond` until it holds; fail after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.001)


async def async_wait_until(cond: Callable[[], bool], what: str = "condition") -> None:
    """Like wait_until, for a coroutine (yields to the loop between polls)."""
    end = time.monotonic() + DEADLOCK
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


def run_script(code: str, timeout: float = 60.0, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run Python code in a fresh interpreter (for signals and GIL checks that must not be able
    to hang pytest itself); fail on a non-zero exit, showing its output."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kw,
    )
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    return proc

"""Shared helpers: every wait in these tests is bounded, so a deadlock fails instead of hanging.

pytest-timeout (configured in py/pyproject.toml) is the last guard; these helpers fail sooner
and say what hung. Behind pytest-timeout stands faulthandler's watchdog (armed around every test
below), for a hang that holds the GIL and so never lets pytest-timeout's handler run.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Generator, Hashable, Iterator
from typing import IO, Any

import pytest

#: Upper bound for any single wait in a test (a hang is a deadlock).
DEADLOCK = 30.0

#: How long past its pytest-timeout a test may run before faulthandler ends the whole run (at
#: most as long again as the timeout itself).
WATCHDOG_GRACE = 30.0

#: The terminal's stderr, kept from before output capture, for the watchdog's stack dump.
_watchdog_out: IO[str] | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _watchdog_out
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture()
    try:
        _watchdog_out = os.fdopen(os.dup(sys.stderr.fileno()), "w")
    finally:
        if capman is not None:
            capman.resume_global_capture()


def pytest_unconfigure(config: pytest.Config) -> None:
    global _watchdog_out
    if _watchdog_out is not None:
        faulthandler.cancel_dump_traceback_later()
        _watchdog_out.close()
        _watchdog_out = None


def timeout_of(item: pytest.Item) -> float:
    """The item's pytest-timeout: its `timeout` mark, else the configured one (0: none)."""
    mark = item.get_closest_marker("timeout")
    if mark is not None and mark.args:
        return float(mark.args[0] or 0)
    return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """Arms faulthandler's watchdog for the test: past its timeout plus a grace, it dumps every
    thread's stack and exits, whatever holds the GIL."""
    limit, out = timeout_of(item), _watchdog_out
    armed = limit > 0 and out is not None
    if out is not None and armed:
        grace = min(WATCHDOG_GRACE, limit)
        faulthandler.dump_traceback_later(limit + grace, exit=True, file=out)
    try:
        yield
    finally:
        if armed:
            faulthandler.cancel_dump_traceback_later()


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


class Occupancy:
    """Who is inside each critical section, counted as it happens.

    Wrap the body of a critical section in ``with occupancy.hold(key):`` (``shared=True`` for a
    reader). Each entry counts the holders of ``key`` inside at that moment, and each exit how
    the body ended: run to its end (completed), or left by an exception (interrupted: a task
    cancelled or timed out while holding the key, or an exception raised on purpose). So a test
    can tell a lock that let two holders in from an entry that a cancel legitimately cut short,
    which a final count alone cannot: both leave fewer increments than entries.

    ``max_shared`` records the most readers of each key inside at once, so a test can show that
    shared holders really overlap.

    An entry that finds another holder the lock should have kept out raises ``AssertionError``
    at once, inside the critical section. :meth:`check` then asserts, for every key entered
    exclusively, that the most exclusive holders inside at once was exactly 1 and that no reader
    was inside with them; that
    ``completed + interrupted == entered``; and that nobody is inside any more. The counters
    are kept under their own ``threading.Lock``, held only while counting, so the critical
    sections themselves may overlap freely if the lock under test lets them.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._exclusive: Counter[Hashable] = Counter()
        self._shared: Counter[Hashable] = Counter()
        self.max_exclusive: Counter[Hashable] = Counter()
        self.max_shared: Counter[Hashable] = Counter()
        self.overlaps: list[str] = []
        self.entered = 0
        self.completed = 0
        self.interrupted = 0

    @contextlib.contextmanager
    def hold(self, key: Hashable, shared: bool = False) -> Iterator[None]:
        with self._mutex:
            self.entered += 1
            overlap = None
            if shared:
                self._shared[key] += 1
                self.max_shared[key] = max(self.max_shared[key], self._shared[key])
                if self._exclusive[key]:
                    overlap = f"a reader of {key!r} inside with a writer"
            else:
                self._exclusive[key] += 1
                n = self._exclusive[key]
                self.max_exclusive[key] = max(self.max_exclusive[key], n)
                if n > 1:
                    overlap = f"{n} holders of {key!r} inside at once"
                elif self._shared[key]:
                    readers = self._shared[key]
                    overlap = f"a writer of {key!r} inside with {readers} readers"
            if overlap is not None:
                # Fail here, at the overlap: a broken lock may fail later for other reasons
                # (a release of what another holder released) that would hide it.
                self.overlaps.append(overlap)
                (self._shared if shared else self._exclusive)[key] -= 1
                self.interrupted += 1
                raise AssertionError(f"the lock let {overlap}")
        completed = False
        try:
            yield
            completed = True
        finally:
            with self._mutex:
                (self._shared if shared else self._exclusive)[key] -= 1
                if completed:
                    self.completed += 1
                else:
                    self.interrupted += 1

    def check(self) -> None:
        assert self.overlaps == [], self.overlaps[:5]
        assert self.entered > 0, "no critical section was entered"
        assert set(self.max_exclusive.values()) <= {1}, dict(self.max_exclusive)
        assert self.completed + self.interrupted == self.entered, (
            f"completed {self.completed} + interrupted {self.interrupted} != entered {self.entered}"
        )
        still = {k: n for k, n in (self._exclusive + self._shared).items() if n}
        assert still == {}, f"still inside: {still}"


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this test session: on a free loopback port, in a temporary directory,
    without persistence, stopped by its PID afterwards. Skips when there is no redis-server
    (`make test-py` installs it) or this build lacks the Redis scope."""
    import shutil
    import socket

    import keylock

    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("no redis-server on PATH (make test-py installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tmp_path_factory.mktemp("redis")
    log = open(workdir / "redis.log", "wb")  # closed in the finally below
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        end = time.monotonic() + DEADLOCK
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > end:
                    pytest.fail(
                        f"redis-server did not start: {(workdir / 'redis.log').read_text()}"
                    )
                time.sleep(0.05)
        try:
            keylock.KeyPool.open(url)
        except ValueError as e:
            pytest.skip(f"this build has no Redis scope: {e}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=DEADLOCK)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


#: The repository's test-server script for PostgreSQL (`make postgres-server` installs the server).
PG_SERVER = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, ".ci", "pg-server")


class RedactedUrl(str):
    """A URL whose repr hides its password, so that pytest's reports (a failed test's
    arguments, parameter ids) never show it; as a str it is the URL itself."""

    def __repr__(self) -> str:
        scheme, sep, rest = str.partition(self, "://")
        userinfo, at, host = rest.partition("@")
        user, colon, _ = userinfo.partition(":")
        if sep and at and colon:
            return repr(f"{scheme}://{user}:***@{host}")
        return str.__repr__(self)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL cluster of this test session, made by .ci/pg-server: initdb in a temporary
    directory, postgres on a free loopback port, a random password; stopped by its PID and its
    directory removed afterwards, whatever the tests did. The URL is
    postgres://keylock:PASSWORD@127.0.0.1:PORT/keylock. Skips when PostgreSQL is not installed
    (`make test-py` installs it) or this build lacks the PostgreSQL scope."""
    import shutil
    import tempfile

    import keylock

    if (
        not os.path.exists("/usr/lib/postgresql/15/bin/initdb")
        and shutil.which("pg_config") is None
    ):
        pytest.skip("PostgreSQL is not installed (make test-py installs it)")
    # Not under pytest's tmp_path: that is private to this user, and as root the server runs as
    # the postgres user, which must reach the directory (.ci/pg-server gives it to postgres).
    workdir = tempfile.mkdtemp(prefix="keylock-py-pg-")
    try:
        started = subprocess.run(
            [PG_SERVER, "start", workdir],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if started.returncode != 0:
            pytest.fail(f"PostgreSQL did not start: {started.stderr}")
        url = RedactedUrl(started.stdout.strip())
        try:
            keylock.KeyPool.open(url)
        except ValueError as e:
            pytest.skip(f"this build has no PostgreSQL scope: {e}")
        yield url
    finally:
        subprocess.run([PG_SERVER, "stop", workdir], timeout=120, check=False)


def server_url(request: pytest.FixtureRequest, scheme: str) -> str:
    """The URL of this session's server of `scheme` ("redis" or "postgres"), started on first
    use."""
    return request.getfixturevalue(f"{scheme}_url")

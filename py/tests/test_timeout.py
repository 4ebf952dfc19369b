"""Every test has a time limit, even one that hangs holding the GIL (a thread stuck in native
code, where pytest-timeout's handler can never run): faulthandler's watchdog then dumps every
thread's stack and ends the run. Checked on a pytest run of its own, with this suite's
configuration and conftest."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from conftest import DEADLOCK, timeout_of

TESTS = pathlib.Path(__file__).resolve().parent
PYPROJECT = TESTS.parent / "pyproject.toml"


def test_a_hang_that_holds_the_gil_ends_the_run_with_every_stack(tmp_path: pathlib.Path) -> None:
    (tmp_path / "test_hang.py").write_text(
        "import pytest\n"
        "\n"
        "@pytest.mark.timeout(1)\n"
        "def test_hang():\n"
        "    # A C loop that never lets the GIL go, nor signal handlers run.\n"
        "    sum(range(10**15))\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "conftest",
            "-c",
            str(PYPROJECT),
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_hang.py"),
        ],
        capture_output=True,
        text=True,
        timeout=DEADLOCK,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Timeout (0:00:02)!" in out, out
    assert 'test_hang.py", line 6 in test_hang' in out, out


def test_every_test_here_has_a_timeout(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed"
    assert request.config.getini("timeout_method") == "signal"
    assert timeout_of(request.node) == 120.0

#!/usr/bin/env python3
"""Soak: every language's bank stress running together for a long time.

Runs the Rust, C, C++, Python (threads and asyncio) and Node bank demos at once, oversubscribed
(more workers than cores), each for the whole soak (two phases: KeyPool, then StripedLock).
Every second it samples each process's resident memory. At the end it reports, per program,
the transfers done (from the rates each demo prints), errors (a failed audit, a mismatched total,
a non-zero exit), and the largest memory seen, and it checks that memory stayed flat after
warm-up: within each half of the soak (each half runs one kind of work), the peak of the second
quarter may not exceed the peak of the first (after a warm-up) by more than 10% plus 4 MiB.

Usage: soak.py SECONDS ROOT
Only the standard library; exit status 1 on any error or memory growth.
"""

import os
import re
import subprocess
import sys
import time

RATE = re.compile(r"([0-9][0-9.,]*)\s*transfers/s")
# Each demo's audit line: (passed, failed) from Rust and Node ("audits passed P/N"), Python
# ("audits passed P of N") and C and C++ ("audits passed: P, failed: F").
AUDITS = (
    (re.compile(r"audits passed (\d+)/(\d+)"), lambda p, n: (int(p), int(n) - int(p))),
    (re.compile(r"audits passed (\d+) of (\d+)"), lambda p, n: (int(p), int(n) - int(p))),
    (re.compile(r"audits passed: (\d+), failed: (\d+)"), lambda p, f: (int(p), int(f))),
)


def audits(text):
    """Every audit line of a demo's output, as (passed, failed) pairs."""
    return [to(*m) for regex, to in AUDITS for m in regex.findall(text)]


def programs(root, seconds):
    """The demos, each told to run two phases of half the soak (Node: four phases of a quarter,
    two in one thread and two across worker_threads). Each entry: name, command, phase length."""
    half_ms = max(1, int(seconds * 500))
    quarter_ms = max(1, int(seconds * 250))
    half_s = f"{seconds / 2:.3f}"
    py = os.path.join(root, ".venv", "bin", "python")
    c_build = os.path.join(root, "build", "c")
    return [
        (
            "rust",
            [os.path.join(root, "target", "release", "keylock-bank"), "16", "64", str(half_ms)],
            seconds / 2,
        ),
        ("c", [os.path.join(c_build, "bank"), "16", "64", str(half_ms)], seconds / 2),
        ("c++", [os.path.join(c_build, "bank_cpp"), "16", "64", str(half_ms)], seconds / 2),
        (
            "python-threads",
            [
                py,
                os.path.join(root, "examples", "python", "bank.py"),
                "--workers",
                "32",
                "--seconds",
                half_s,
            ],
            seconds / 2,
        ),
        (
            "python-asyncio",
            [
                py,
                os.path.join(root, "examples", "python", "bank_async.py"),
                "--workers",
                "256",
                "--seconds",
                half_s,
            ],
            seconds / 2,
        ),
        (
            "node",
            [
                "node",
                os.path.join(root, "examples", "node", "bank.js"),
                "64",
                "64",
                str(quarter_ms),
            ],
            seconds / 4,
        ),
    ]


def rss_kib(pid):
    """Resident set of a process and its threads, in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 600.0
    root = sys.argv[2] if len(sys.argv) > 2 else os.getcwd()
    procs = []
    phase_of = {}
    for name, cmd, phase in programs(root, seconds):
        out = open(os.path.join(root, "build", f"soak-{name}.log"), "w+")
        phase_of[name] = phase
        procs.append((name, cmd, subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), out))
    print(f"soak: {len(procs)} programs for {seconds:.0f} s on {os.cpu_count()} cores")
    samples = {name: [] for name, *_ in procs}
    start = time.monotonic()
    # Each demo also runs audits and waits for its workers; allow generous slack before calling
    # a program hung.
    limit = seconds * 1.5 + 120
    while any(p.poll() is None for _, _, p, _ in procs):
        if time.monotonic() - start > limit:
            for _, _, p, _ in procs:
                if p.poll() is None:
                    p.kill()
            break
        now = time.monotonic() - start
        for name, _, p, _ in procs:
            if p.poll() is None:
                samples[name].append((now, rss_kib(p.pid)))
        time.sleep(1.0)

    failed = False
    print(
        f"{'program':<16} {'transfers':>14} {'errors':>7} {'max RSS':>10}  "
        f"{'peak per half (early->late)':<28} memory"
    )
    total_ops = 0
    for name, cmd, p, out in procs:
        code = p.wait()
        out.seek(0)
        text = out.read()
        out.close()
        rates = [float(r.replace(",", "")) for r in RATE.findall(text)]
        ops = int(sum(rates) * phase_of[name])
        total_ops += ops
        # The demos check exclusion by conservation: an overlap between two transfers on one
        # account loses or makes money, which an audit (and the final total) sees. A phase with
        # no audit at all proves nothing, so it counts as an error too, as does a demo whose
        # audit lines cannot be found.
        seen = audits(text)
        failed_audits = sum(f for _, f in seen) + sum(1 for p, _ in seen if p == 0) + int(not seen)
        errors = int(code != 0) + text.count("MISMATCH") + failed_audits
        # Memory must stay flat within each half of the soak (each half runs one kind of work):
        # the peak of a half's second part may not exceed the peak of its first part (after a
        # warm-up of a tenth of the half) by more than 10% plus 4 MiB.
        flat, halves = True, []
        for h in (0, 1):
            lo, mid, hi = h * seconds / 2, h * seconds / 2 + seconds / 4, (h + 1) * seconds / 2
            warm = max(seconds / 20, 8.0)
            first = [kib for t, kib in samples[name] if lo + warm <= t < mid]
            second = [kib for t, kib in samples[name] if mid <= t < hi]
            if first and second:
                early, late = max(first), max(second)
                halves.append(f"{early / 1024:.1f}->{late / 1024:.1f}Mi")
                flat &= late <= early * 1.10 + 4096
        peak = max([kib for _, kib in samples[name]] or [0])
        verdict = "flat" if flat else "GREW"
        print(
            f"{name:<16} {ops:>14,} {errors:>7} {peak / 1024:>8.1f}Mi  "
            f"{', '.join(halves):<28} {verdict}"
        )
        if errors or not flat:
            failed = True
            print(
                f"--- {name} ({' '.join(cmd)}) exited {code}; its output:\n{text}", file=sys.stderr
            )
    print(f"soak: {total_ops:,} transfers in all; {'FAILED' if failed else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs the keylock C benchmark and writes bench/results/c.json (`make bench-c`).

The same, for the host scope: one key locked and released over and over through
`keylock_pool_open("shm:NAME")` and `keylock_striped_open`, beside what processes on one host
share instead (a robust process-shared pthread mutex in shared memory, and a flock pair on a
file), all from C in one process.

Three measurements of the same loops, side by side:

- Wall time and thread CPU time. Each run starts ffi-c/bench/bench.c's binary (C through
  libkeylock, and C with pthread mutexes) and ffi-c/benches/rust_calls.rs's binary (the same
  calls on keylock-core from Rust) one after the other, so that both see the same machine
  state; every figure is the median over the runs of each process's own median over its rounds,
  with the spread of the runs. Ratios are taken between medians. The load average is recorded
  before and after. The targets are judged on the thread's CPU time (CLOCK_THREAD_CPUTIME_ID):
  one thread that never blocks uses a core for exactly its wall time on a quiet machine, and on
  a shared one the CPU time leaves out the time it spent waiting for a core, which wall time
  counts as noise (caches shared with other work still add some).
- Instructions per operation, under valgrind's callgrind (deterministic, whatever the load):
  each case runs alone (`--only NAME`) twice with different iteration counts, and the
  difference divided by the difference in iterations is the cost of one lock+release, with the
  set-up cancelled out. Skipped, with a note in the JSON, when valgrind is not installed.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys

TARGET_FFI = "FFI overhead at most 1.2x the Rust call"
TARGET_STRIPED = "the striped lock at most 1.3x the pthread array"
TARGET_ROBUST = "the host scope at most 1.5x a robust pthread mutex"
TARGET_FLOCK = "the host scope at least 40x faster than a flock pair"
WALL = "wall time, one thread, 1024 keys of 16 bytes"
CPU = "thread CPU time, one thread, 1024 keys of 16 bytes"
INSTR = "instructions per lock+release (callgrind)"
# The host-scope cases lock one key, and are grouped apart.
HOST_CASES = {"c_shm_pool", "c_shm_striped", "c_robust_mutex", "c_flock"}


def group(kind, case):
    """The group of a row of `kind` (WALL, CPU or INSTR) measuring `case`."""
    if case in HOST_CASES:
        return kind.replace("1024 keys of 16 bytes", "one key of 16 bytes") + ", host scope"
    return kind


# name -> (what it measures, baseline name or None, target text or None, target ratio)
CASES = {
    "rust_pool": (
        "Rust: KeyPool lock(key) + guard.release(), the C exports' calls",
        None,
        None,
        None,
    ),
    "rust_pool_trait": (
        "Rust: acquire + release through Arc<dyn KeyedLock> (a pool), for reference",
        None,
        None,
        None,
    ),
    "rust_pool_guard": (
        "Rust: KeyPool lock(key) + guard drop (no stale check), for reference",
        None,
        None,
        None,
    ),
    "rust_striped": (
        "Rust: StripedLock lock(key) + guard.release(), the C exports' calls",
        None,
        None,
        None,
    ),
    "rust_striped_trait": (
        "Rust: acquire + release through Arc<dyn KeyedLock> (stripes), for reference",
        None,
        None,
        None,
    ),
    "rust_striped_guard": (
        "Rust: StripedLock lock(key) + guard drop (no stale check), for reference",
        None,
        None,
        None,
    ),
    "c_pthread_array": (
        "C: hash + pthread_mutex_lock/unlock on 1024 padded mutexes",
        None,
        None,
        None,
    ),
    "c_pool": ("C: keylock_pool_lock + keylock_pool_release", "rust_pool", TARGET_FFI, 1.2),
    "c_striped": (
        "C: keylock_striped_lock + keylock_striped_release",
        "rust_striped",
        TARGET_FFI,
        1.2,
    ),
    "c_shm_pool": (
        "C, host scope: keylock_pool_lock + _release of one key of a shm: pool",
        None,
        None,
        None,
    ),
    "c_shm_striped": (
        "C, host scope: keylock_striped_lock + _release of one key of a shm: striped lock "
        "(64 stripes)",
        None,
        None,
        None,
    ),
    "c_robust_mutex": (
        "C: pthread_mutex_lock + unlock of a process-shared robust mutex in shared memory",
        None,
        None,
        None,
    ),
    "c_flock": ("C: flock(LOCK_EX) + flock(LOCK_UN) of a file in /dev/shm", None, None, None),
}
# The striped C figure is compared twice: with Rust (above) and with the pthread array.
EXTRA = [
    (
        "c_striped_vs_pthread",
        "c_striped",
        "C: keylock_striped_lock + _release against the pthread mutex array",
        "c_pthread_array",
        TARGET_STRIPED,
        1.3,
    ),
    # No target: how far the core's own fast path (a Rust guard) is from the pthread array.
    (
        "rust_striped_guard_vs_pthread",
        "rust_striped_guard",
        "Rust: StripedLock guard against the pthread mutex array (the core's floor)",
        "c_pthread_array",
        None,
        None,
    ),
    # The host scope against what processes on one host share instead.
    (
        "c_shm_pool_vs_robust",
        "c_shm_pool",
        "C, host scope: the shm: pool against a robust pthread mutex",
        "c_robust_mutex",
        TARGET_ROBUST,
        1.5,
    ),
    (
        "c_shm_striped_vs_robust",
        "c_shm_striped",
        "C, host scope: the shm: striped lock against a robust pthread mutex",
        "c_robust_mutex",
        TARGET_ROBUST,
        1.5,
    ),
    (
        "c_shm_pool_vs_flock",
        "c_shm_pool",
        "C, host scope: the shm: pool against a flock pair",
        "c_flock",
        TARGET_FLOCK,
        1 / 40,
    ),
    (
        "c_shm_striped_vs_flock",
        "c_shm_striped",
        "C, host scope: the shm: striped lock against a flock pair",
        "c_flock",
        TARGET_FLOCK,
        1 / 40,
    ),
]
C_CASES = [
    "c_pool",
    "c_striped",
    "c_pthread_array",
    "c_shm_pool",
    "c_shm_striped",
    "c_robust_mutex",
    "c_flock",
]
# Cases whose cost is mostly in the kernel, which callgrind does not count: no instruction figure.
NO_INSTRUCTIONS = {"c_flock"}
RUST_CASES = [n for n in CASES if n.startswith("rust_")]


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    figures = {}
    for line in out.splitlines():
        name, value = line.split()
        figures[name] = float(value)
    return figures


def rust_bench_binary(cargo):
    """Builds the Rust bench (bench profile) and returns its path."""
    out = subprocess.run(
        [
            cargo,
            "bench",
            "--locked",
            "-p",
            "keylock-ffi",
            "--bench",
            "rust_calls",
            "--no-run",
            "--message-format=json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "rust_calls":
            if msg.get("executable"):
                return msg["executable"]
    sys.exit("run.py: cargo built no rust_calls executable")


def first_line(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return None


def machine(cc):
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                None,
            )
    except OSError:
        pass
    return {
        "cpu": cpu or platform.processor(),
        "cores": os.cpu_count(),
        "os": f"{platform.system()} {platform.release()}",
        "rustc": first_line(["rustc", "--version"]),
        "cc": first_line([cc, "--version"]),
        "libc": first_line(["ldd", "--version"]),
        "valgrind": first_line(["valgrind", "--version"]),
        "python": platform.python_version(),
        # The machine is shared: the load when the run started (and ended) says how quiet it was.
        "loadavg_1min_at_start": os.getloadavg()[0],
    }


def instructions(cmd, name, small, large):
    """Instructions of one lock+release of case `name`: callgrind's totals for two runs."""
    totals = []
    for n in (small, large):
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                *cmd,
                "--only",
                name,
                str(n),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            sys.exit(f"run.py: callgrind of {name} failed:\n{proc.stderr}")
        m = re.search(r"Collected : (\d+)", proc.stderr)
        if not m:
            sys.exit(f"run.py: no callgrind total for {name}:\n{proc.stderr}")
        totals.append(int(m.group(1)))
    return (totals[1] - totals[0]) / (large - small)


def row(name, what, unit, group, runs, base, base_median, target, limit):
    s = {"median": statistics.median(runs), "min": min(runs), "max": max(runs), "runs": runs}
    ratio = s["median"] / base_median if base else None
    return {
        "name": name,
        "description": what,
        "unit": unit,
        "group": group,
        **s,
        "baseline": base,
        "ratio": ratio,
        "target": target,
        "met": (ratio <= limit) if (base and limit) else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--c-bench", required=True, help="the built bench.c binary")
    ap.add_argument("--cargo", default="cargo")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--runs", type=int, default=7, help="process runs of each side")
    ap.add_argument("--iters", type=int, default=2_000_000, help="lock+release pairs per round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per process (median taken)")
    ap.add_argument("--no-callgrind", action="store_true", help="skip the instruction counts")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    rust_bin = rust_bench_binary(args.cargo)
    info = machine(args.cc)
    runs = {name: [] for name in CASES}
    runs.update({f"{name}:cpu": [] for name in CASES})
    for i in range(args.runs):
        # Alternate which side goes first, so neither always gets the cooler machine.
        sides = [[args.c_bench], [rust_bin]]
        if i % 2:
            sides.reverse()
        for cmd in sides:
            for name, ns in run([*cmd, str(args.iters), str(args.rounds)]).items():
                runs[name].append(ns)
        print(f"run {i + 1}/{args.runs} done", file=sys.stderr)
    info["loadavg_1min_at_end"] = os.getloadavg()[0]

    results = []
    med = {name: statistics.median(r) for name, r in runs.items()}
    # CPU time first: the targets are judged on it (see the module docs).
    for name, (what, base, target, limit) in CASES.items():
        results.append(
            row(
                f"{name} (cpu)",
                what,
                "ns/op",
                group(CPU, name),
                runs[f"{name}:cpu"],
                f"{base} (cpu)" if base else None,
                med.get(f"{base}:cpu"),
                target,
                limit,
            )
        )
    for name, source, what, base, target, limit in EXTRA:
        results.append(
            row(
                f"{name} (cpu)",
                what,
                "ns/op",
                group(CPU, source),
                runs[f"{source}:cpu"],
                f"{base} (cpu)",
                med[f"{base}:cpu"],
                target,
                limit,
            )
        )
    for name, (what, base, _target, _limit) in CASES.items():
        results.append(
            row(name, what, "ns/op", group(WALL, name), runs[name], base, med.get(base), None, None)
        )
    for name, source, what, base, _target, _limit in EXTRA:
        results.append(
            row(name, what, "ns/op", group(WALL, source), runs[source], base, med[base], None, None)
        )

    notes = []
    if args.no_callgrind or not shutil.which("valgrind"):
        notes.append(
            "instruction counts skipped: "
            + ("--no-callgrind" if args.no_callgrind else "valgrind is not installed")
        )
    else:
        small, large = 20_000, 220_000
        ir = {}
        for name in C_CASES:
            if name not in NO_INSTRUCTIONS:
                ir[name] = instructions([args.c_bench], name, small, large)
        for name in RUST_CASES:
            ir[name] = instructions([rust_bin], name, small, large)
        print("instruction counts done", file=sys.stderr)
        for name, (what, base, _target, _limit) in CASES.items():
            if name not in ir:
                continue
            # Instruction ratios are reported, not judged: the targets are on time.
            results.append(
                row(
                    f"{name} (instructions)",
                    what,
                    "instr/op",
                    group(INSTR, name),
                    [ir[name]],
                    f"{base} (instructions)" if base else None,
                    ir.get(base),
                    None,
                    None,
                )
            )
        for name, source, what, base, _target, _limit in EXTRA:
            if source not in ir or base not in ir:
                continue
            results.append(
                row(
                    f"{name} (instructions)",
                    what,
                    "instr/op",
                    group(INSTR, source),
                    [ir[source]],
                    f"{base} (instructions)",
                    ir[base],
                    None,
                    None,
                )
            )

    doc = {
        "suite": "c",
        "description": "Uncontended lock+release on one thread, 1024 keys of 16 bytes: C through "
        "libkeylock against the same calls from Rust and against a striped array "
        "of pthread mutexes; and the host scope (shm:), one key of 16 bytes, "
        "against a robust process-shared pthread mutex and a flock pair, all from "
        "C. One op = one lock + one release. Thread CPU time "
        "(targets judged on it) and wall time, medians of runs with the spread "
        "min..max, and instructions per op (callgrind).",
        "machine": info,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": {"runs": args.runs, "rounds": args.rounds, "iters": args.iters},
        "notes": notes,
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")

    print(
        f"\nkeylock C benchmark: {args.runs} runs x {args.rounds} rounds x {args.iters} ops "
        f"({info['cpu']}, {info['cores']} cores, load {info['loadavg_1min_at_start']:.2f} "
        f"at start, {info['loadavg_1min_at_end']:.2f} at end)"
    )
    print(f"{'case':<44} {'median':>9} {'min':>9} {'max':>9}  {'vs':<30} {'ratio':>6}  target")
    for r in results:
        versus = r["baseline"] or ""
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else ""
        verdict = ""
        if r["target"]:
            base_name = r["name"].removesuffix(" (cpu)")
            limit = (
                CASES[base_name][3]
                if base_name in CASES
                else next(e[5] for e in EXTRA if e[0] == base_name)
            )
            verdict = ("met" if r["met"] else "MISSED") + f" (<= {limit}x)"
        print(
            f"{r['name']:<44} {r['median']:>9.2f} {r['min']:>9.2f} {r['max']:>9.2f}  "
            f"{versus:<30} {ratio:>6}  {verdict}"
        )
    print(f"(ns or instructions per lock+release; written to {args.out})")
    for n in notes:
        print(f"note: {n}")


if __name__ == "__main__":
    main()

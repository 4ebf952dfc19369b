#!/usr/bin/env python3
"""Runs the keylock C benchmark and writes bench/results/c.json (`make bench-c`).

Each run starts ffi-c/bench/bench.c's binary (C through libkeylock, and C with pthread mutexes)
and ffi-c/benches/rust_calls.rs's binary (the same calls on keylock-core from Rust) one after
the other, so that both see the same machine state; every figure is the median over the runs of
each process's own median over its rounds. Ratios are taken between medians.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

TARGET_FFI = "FFI overhead at most 1.2x the Rust call"
TARGET_STRIPED = "the striped lock at most 1.5x the pthread array"

# name -> (what it measures, baseline name or None, target text or None, target ratio)
CASES = {
    "rust_pool": ("Rust: KeyPool lock(key).leak() + unlock(key), the C export's calls", None, None, None),
    "rust_pool_guard": ("Rust: KeyPool lock(key) + guard drop (for reference)", None, None, None),
    "rust_striped": ("Rust: StripedLock lock(key).leak() + unlock(key), the C export's calls", None, None, None),
    "rust_striped_guard": ("Rust: StripedLock lock(key) + guard drop (for reference)", None, None, None),
    "c_pthread_array": ("C: hash + pthread_mutex_lock/unlock on 1024 padded mutexes", None, None, None),
    "c_pthread_array_by_key": ("C: the pthread array hashed again to unlock (keylock's API shape)", None, None, None),
    "c_pool": ("C: keylock_pool_lock + keylock_pool_unlock", "rust_pool", TARGET_FFI, 1.2),
    "c_striped": ("C: keylock_striped_lock + keylock_striped_unlock", "rust_striped", TARGET_FFI, 1.2),
}
# The striped C figure is compared twice: with Rust (above) and with the pthread array.
EXTRA = [
    ("c_striped_vs_pthread", "c_striped",
     "C: keylock_striped_lock + _unlock against the pthread mutex array",
     "c_pthread_array", TARGET_STRIPED, 1.5),
    # No target: how much of the gap is the second hash that an unlock-by-key API implies.
    ("c_striped_vs_pthread_by_key", "c_striped",
     "C: keylock_striped_lock + _unlock against the pthread array hashed on unlock too",
     "c_pthread_array_by_key", None, None),
]


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
        [cargo, "bench", "--locked", "-p", "keylock-ffi", "--bench", "rust_calls", "--no-run",
         "--message-format=json"],
        check=True, capture_output=True, text=True).stdout
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
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), None)
    except OSError:
        pass
    return {
        "cpu": cpu or platform.processor(),
        "cores": os.cpu_count(),
        "os": f"{platform.system()} {platform.release()}",
        "rustc": first_line(["rustc", "--version"]),
        "cc": first_line([cc, "--version"]),
        "libc": first_line(["ldd", "--version"]),
        "python": platform.python_version(),
        # The machine is shared: the load when the run started says how quiet it was.
        "loadavg_1min_at_start": os.getloadavg()[0],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--c-bench", required=True, help="the built bench.c binary")
    ap.add_argument("--cargo", default="cargo")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--runs", type=int, default=7, help="process runs of each side")
    ap.add_argument("--iters", type=int, default=2_000_000, help="lock+unlock pairs per round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per process (median taken)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    rust_bin = rust_bench_binary(args.cargo)
    info = machine(args.cc)
    runs = {name: [] for name in CASES}
    for i in range(args.runs):
        # Alternate which side goes first, so neither always gets the cooler machine.
        sides = [[args.c_bench], [rust_bin]]
        if i % 2:
            sides.reverse()
        for cmd in sides:
            for name, ns in run(cmd + [str(args.iters), str(args.rounds)]).items():
                runs[name].append(ns)
        print(f"run {i + 1}/{args.runs} done", file=sys.stderr)

    def summary(name):
        r = runs[name]
        return {"median": statistics.median(r), "min": min(r), "max": max(r), "runs": r}

    results = []
    rows = []
    for name, (what, base, target, limit) in CASES.items():
        s = summary(name)
        ratio = s["median"] / summary(base)["median"] if base else None
        results.append({"name": name, "description": what, "unit": "ns/op", **s,
                        "baseline": base, "ratio": ratio, "target": target,
                        "met": (ratio <= limit) if base else None})
        rows.append((name, s, base, ratio, limit))
    for name, source, what, base, target, limit in EXTRA:
        s = summary(source)
        ratio = s["median"] / summary(base)["median"]
        results.append({"name": name, "description": what, "unit": "ns/op", **s,
                        "baseline": base, "ratio": ratio, "target": target,
                        "met": (ratio <= limit) if limit else None})
        rows.append((name, s, base, ratio, limit))

    doc = {
        "suite": "c",
        "description": "Uncontended lock+unlock on one thread, 1024 keys of 16 bytes: C through "
                       "libkeylock against the same calls from Rust and against a striped array "
                       "of pthread mutexes. One op = one lock + one unlock.",
        "machine": info,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": {"runs": args.runs, "rounds": args.rounds, "iters": args.iters},
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")

    print(f"\nkeylock C benchmark: {args.runs} runs x {args.rounds} rounds x {args.iters} ops "
          f"({doc['machine']['cpu']}, {doc['machine']['cores']} cores)")
    print(f"{'case':<28} {'median':>8} {'min':>8} {'max':>8}  {'vs':<23} {'ratio':>6}  target")
    for name, s, base, ratio, limit in rows:
        versus = f"{base}" if base else ""
        r = f"{ratio:.2f}x" if ratio else ""
        verdict = ("met" if ratio <= limit else "MISSED") + f" (<= {limit}x)" if limit else ""
        print(f"{name:<28} {s['median']:>8.2f} {s['min']:>8.2f} {s['max']:>8.2f}  "
              f"{versus:<23} {r:>6}  {verdict}")
    print(f"(ns per lock+unlock; written to {args.out})")


if __name__ == "__main__":
    main()

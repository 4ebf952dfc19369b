#!/usr/bin/env python3
"""Before and after, for the bindings: the same uncontended lock+release loops in C, Python and
Node, each built from an earlier keylock revision (default 360914d, the last one before the one
front) and from a tree (default this one), measured in one run.

    before_after_bindings.py [--rev REV] [--tree DIR] [--out OUT.json] [--quick] [--work DIR]
                             [--maturin PATH] [--node-modules DIR] [--jobs N]

Everything is built from the two source trees by this script, in a work directory of its own
(a fresh one under the system's temporary directory, removed at the end, unless --work names
one to keep and reuse): the "before" tree is a detached git worktree of REV made there (and
removed at the end, also on failure), and each tree's crates build into their own
CARGO_TARGET_DIR there, so nothing is written into either tree's target/, build/ or node/.
For each tree:
- C: keylock-ffi in release (`cargo build --release -p keylock-ffi`, as `make build-ffi`),
  libkeylock.so laid out under its SONAME, and one small C program (below, the same for both
  trees, compiled against each tree's include/keylock.h) that does keylock_pool_lock +
  keylock_pool_release, or keylock_striped_lock + keylock_striped_release on 1024 stripes,
  cycling through 1024 keys of 16 bytes, as ffi-c/bench/bench.c does;
- Python: the wheel of py/ (`maturin build --release`), installed into a fresh virtual
  environment of this interpreter; the loop is `with lock(key): pass` with
  `lock = keylock.KeyPool().lock`, or `keylock.StripedLock(1024).lock`, over 1024 str keys of
  16 characters (as py/bench/bench_python.py's uncontended loops);
- Node: the addon (`cargo build --release -p keylock-node`, which is what node/build.js and
  `napi build` do on Linux) in a copy of node/ whose node_modules is a link to an existing one
  (only the build tools live there; the package itself needs none at run time); the loops are
  `pool.tryLock(key)` + `guard.release()` (the cheapest synchronous acquire and release the
  package has) and `await pool.withLock(key, fn)` with a synchronous `fn`, on a KeyPool and on
  a StripedLock(1024), over 1024 string keys of 16 characters.

Each figure is measured two ways, before and after interleaved:
- instructions per operation under valgrind's callgrind (all threads of the process), the
  difference of the totals at two loop lengths divided by the difference of the lengths, so
  start-up, imports and warm-up cancel out. C and Python repeat exactly, so they are measured
  once. Node runs with its JIT as usual, after a warm-up loop that lets it optimise the loop,
  but under callgrind with V8's --single-threaded --hash-seed=1 --random-seed=1: with
  background compilation and GC on their own threads, when the optimised code or a collection
  arrives depends on how valgrind (which runs one thread at a time) interleaves them, and the
  count per operation swung by up to 4x between runs of the same build; with these flags the
  same work is done on the main thread at the same points and repeats within a few
  instructions. Each Node figure is measured NODE_REPEATS times and reported as the median
  with min..max (the timings run Node without these flags);
- nanoseconds per operation, medians of several runs: the thread's CPU time
  (CLOCK_THREAD_CPUTIME_ID) in C and Python; the wall clock in Node, which has no per-thread
  CPU clock. The machine is shared, so the load average is recorded with the figures; the
  instructions are the figures to compare.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import report  # noqa: E402

# The revision before the one front (what the front's before/after figures compare against).
DEFAULT_REV = "360914d"

C_PROGRAM = r"""
#define _POSIX_C_SOURCE 200809L
#include <keylock.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NKEYS 1024
#define KEY_LEN 16

static uint8_t keys[NKEYS][KEY_LEN];

static void fail(const char *what) {
    fprintf(stderr, "bench_c: %s failed\n", what);
    exit(1);
}

static void pool_loop(keylock_pool *pool, long from, long to) {
    for (long i = from; i < to; i++) {
        keylock_acquisition acq;
        if (keylock_pool_lock(pool, keys[i & (NKEYS - 1)], KEY_LEN, &acq) != KEYLOCK_OK)
            fail("keylock_pool_lock");
        if (keylock_pool_release(pool, &acq) != KEYLOCK_OK) fail("keylock_pool_release");
    }
}

static void striped_loop(keylock_striped *striped, long from, long to) {
    for (long i = from; i < to; i++) {
        keylock_acquisition acq;
        if (keylock_striped_lock(striped, keys[i & (NKEYS - 1)], KEY_LEN, &acq) != KEYLOCK_OK)
            fail("keylock_striped_lock");
        if (keylock_striped_release(striped, &acq) != KEYLOCK_OK) fail("keylock_striped_release");
    }
}

static double cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* bench_c pool|striped N [timed]: N lock+release pairs after a warm-up of every key once;
 * "timed" prints the thread CPU time per pair in ns. */
int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_c pool|striped N [timed]\n");
        return 2;
    }
    int pool_case = strcmp(argv[1], "pool") == 0;
    if (!pool_case && strcmp(argv[1], "striped") != 0) {
        fprintf(stderr, "bench_c: unknown loop %s\n", argv[1]);
        return 2;
    }
    long n = atol(argv[2]);
    for (int i = 0; i < NKEYS; i++) {
        char text[KEY_LEN + 1];
        snprintf(text, sizeof text, "account:%08d", i);
        memcpy(keys[i], text, KEY_LEN);
    }
    keylock_pool *pool = keylock_pool_new();
    keylock_striped *striped = keylock_striped_new(1024);
    if (!pool || !striped) fail("keylock_pool_new / keylock_striped_new");
    double start;
    if (pool_case) {
        pool_loop(pool, 0, NKEYS);
        start = cpu_ns();
        pool_loop(pool, 0, n);
    } else {
        striped_loop(striped, 0, NKEYS);
        start = cpu_ns();
        striped_loop(striped, 0, n);
    }
    if (argc > 3) printf("%.3f\n", (cpu_ns() - start) / (double)n);
    keylock_pool_free(pool);
    keylock_striped_free(striped);
    return 0;
}
"""

PY_PROGRAM = r"""
import sys
import time

import keylock

which, n, timed = sys.argv[1], int(sys.argv[2]), len(sys.argv) > 3
keys = [f"account:{i:08d}" for i in range(1024)]
lock = (keylock.KeyPool() if which == "pool" else keylock.StripedLock(1024)).lock


def loop(count):
    for i in range(count):
        with lock(keys[i & 1023]):
            pass


loop(1024)
start = time.thread_time_ns()
loop(n)
if timed:
    print((time.thread_time_ns() - start) / n)
"""

NODE_PROGRAM = r"""
'use strict';
// node bench_node.js PACKAGE_DIR LOOP N [timed]
const [dir, which, count, timed] = process.argv.slice(2);
const { KeyPool, StripedLock } = require(dir);
const n = Number(count);
const keys = Array.from({ length: 1024 }, (_, i) => `account:${String(i).padStart(8, '0')}`);
const lock = which.startsWith('pool') ? new KeyPool() : new StripedLock(1024);

function trylock(m) {
  for (let i = 0; i < m; i++) {
    const guard = lock.tryLock(keys[i & 1023]);
    if (guard === null) throw new Error('an uncontended tryLock failed');
    guard.release();
  }
}

const body = () => undefined;
async function withlock(m) {
  for (let i = 0; i < m; i++) await lock.withLock(keys[i & 1023], body);
}

(async () => {
  const loop = which.endsWith('withlock') ? withlock : trylock;
  // Warm-up: long enough for the JIT to optimise the loop before the measured part.
  await loop(WARM);
  const start = process.hrtime.bigint();
  await loop(n);
  if (timed) console.log(Number(process.hrtime.bigint() - start) / n);
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
"""
NODE_WARMUP = 50_000

# (language, loop, what it does, instruction-count lengths, timed length)
LOOPS = [
    ("C", "pool", "keylock_pool_lock + keylock_pool_release", (100_000, 200_000), 2_000_000),
    (
        "C",
        "striped",
        "keylock_striped_lock + keylock_striped_release (1024 stripes)",
        (100_000, 200_000),
        2_000_000,
    ),
    ("Python", "pool", "with KeyPool().lock(key): pass", (50_000, 100_000), 300_000),
    ("Python", "striped", "with StripedLock(1024).lock(key): pass", (50_000, 100_000), 300_000),
    ("Node", "pool_trylock", "KeyPool tryLock(key) + guard.release()", (100_000, 200_000), 500_000),
    (
        "Node",
        "striped_trylock",
        "StripedLock(1024) tryLock(key) + guard.release()",
        (100_000, 200_000),
        500_000,
    ),
    (
        "Node",
        "pool_withlock",
        "await KeyPool withLock(key, fn), fn synchronous",
        (50_000, 100_000),
        200_000,
    ),
    (
        "Node",
        "striped_withlock",
        "await StripedLock(1024) withLock(key, fn), fn synchronous",
        (50_000, 100_000),
        200_000,
    ),
]
NODE_REPEATS = 3
# V8's flags for Node's instruction counts (see the top of this file).
NODE_CALLGRIND_FLAGS = ["--single-threaded", "--hash-seed=1", "--random-seed=1"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


def default_maturin() -> str | None:
    for cand in (os.path.join(ROOT, ".venv", "bin", "maturin"), shutil.which("maturin")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def default_node_modules(tree: str) -> str | None:
    for cand in (
        os.path.join(tree, "node", "node_modules"),
        os.path.join(ROOT, "node", "node_modules"),
    ):
        if os.path.isdir(cand):
            return cand
    return None


def tree_label(tree: str) -> str:
    """The tree's commit, with "+ changes" when tracked files differ from it."""
    rev = (
        subprocess.run(
            ["git", "-C", tree, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        or "unknown"
    )
    dirty = subprocess.run(
        ["git", "-C", tree, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{rev} + changes" if dirty else rev


def cargo_build(tree: str, env: dict, package: str) -> list[str]:
    """`cargo build --release --locked -p PACKAGE` of the workspace in `tree`; the files of the
    package's library that cargo reports."""
    out = subprocess.run(
        [
            "cargo",
            "build",
            "--release",
            "--locked",
            "--quiet",
            "--manifest-path",
            os.path.join(tree, "Cargo.toml"),
            "-p",
            package,
            "--message-format=json-render-diagnostics",
        ],
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    files: list[str] = []
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and "cdylib" in msg["target"]["crate_types"]:
            files += msg["filenames"]
    return files


def build(tree: str, side_dir: str, work: str, args: argparse.Namespace) -> dict:
    """Builds the three bindings of `tree` under `side_dir`; returns how to run each."""
    os.makedirs(side_dir, exist_ok=True)
    env = {
        **os.environ,
        "CARGO_TARGET_DIR": os.path.join(side_dir, "target"),
        "CARGO_BUILD_JOBS": str(args.jobs),
    }
    env.pop("VIRTUAL_ENV", None)

    # C: the library as `make build-ffi` builds it, laid out under its SONAME as `make install`
    # lays it out, and the program against this tree's header.
    log(f"{tree}: C library")
    so = next(f for f in cargo_build(tree, env, "keylock-ffi") if f.endswith(".so"))
    lib = os.path.join(side_dir, "c", "lib")
    shutil.rmtree(lib, ignore_errors=True)
    os.makedirs(lib)
    dyn = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
    m = re.search(r"soname: \[([^\]]+)\]", dyn)
    soname = m.group(1) if m else "libkeylock.so"
    shutil.copy2(so, os.path.join(lib, soname))
    if soname != "libkeylock.so":
        os.symlink(soname, os.path.join(lib, "libkeylock.so"))
    c_bin = os.path.join(side_dir, "c", "bench_c")
    sh(
        [
            os.environ.get("CC", "cc"),
            "-std=c11",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            os.path.join(tree, "include"),
            os.path.join(work, "bench_c.c"),
            "-o",
            c_bin,
            "-L",
            lib,
            "-lkeylock",
            "-pthread",
            f"-Wl,-rpath,{lib}",
        ]
    )

    # Python: the wheel, into a fresh virtual environment.
    log(f"{tree}: Python wheel")
    wheels = os.path.join(side_dir, "wheel")
    shutil.rmtree(wheels, ignore_errors=True)
    sh(
        [
            args.maturin,
            "build",
            "--release",
            "--locked",
            "--quiet",
            "-m",
            os.path.join(tree, "py", "Cargo.toml"),
            "-i",
            sys.executable,
            "--out",
            wheels,
        ],
        env=env,
    )
    wheel = glob.glob(os.path.join(wheels, "*.whl"))
    if len(wheel) != 1:
        raise RuntimeError(f"expected one wheel in {wheels}, found {wheel}")
    venv = os.path.join(side_dir, "venv")
    shutil.rmtree(venv, ignore_errors=True)
    sh([sys.executable, "-m", "venv", venv])
    py = os.path.join(venv, "bin", "python")
    sh(
        [
            py,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--disable-pip-version-check",
            wheel[0],
        ],
        env=env,
    )

    # Node: the addon, in a copy of node/ (as node/build.js builds it without @napi-rs/cli).
    log(f"{tree}: Node addon")
    addon = next(f for f in cargo_build(tree, env, "keylock-node") if f.endswith(".so"))
    node_dir = os.path.join(side_dir, "node")
    shutil.rmtree(node_dir, ignore_errors=True)
    shutil.copytree(
        os.path.join(tree, "node"),
        node_dir,
        symlinks=True,
        ignore=shutil.ignore_patterns("node_modules", "target", "*.node"),
    )
    modules = args.node_modules or default_node_modules(tree)
    if modules:
        os.symlink(os.path.abspath(modules), os.path.join(node_dir, "node_modules"))
    shutil.copy2(addon, os.path.join(node_dir, "keylock_node.node"))

    return {
        "C": [c_bin],
        "Python": [py, os.path.join(work, "bench_py.py")],
        "Node": ["node", os.path.join(work, "bench_node.js"), node_dir],
    }


def instructions(cmd: list[str], n: int) -> int:
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd, str(n)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    m = re.search(r"refs:\s+([\d,]+)", proc.stderr)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"callgrind of {' '.join(cmd)} {n} failed:\n{proc.stderr[-2000:]}")
    return int(m.group(1).replace(",", ""))


def per_op_instructions(cmd: list[str], lengths: tuple[int, int]) -> float:
    if cmd[0] == "node":
        cmd = [cmd[0], *NODE_CALLGRIND_FLAGS, *cmd[1:]]
    a, b = lengths
    return (instructions(cmd, b) - instructions(cmd, a)) / (b - a)


def ns_per_op(cmd: list[str], n: int) -> float:
    out = subprocess.run(
        [*cmd, str(n), "timed"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    return float(out.stdout.strip())


def make_worktree(rev: str, path: str) -> None:
    remove_worktree(path)
    sh(["git", "-C", ROOT, "worktree", "add", "--detach", "--quiet", path, rev])


def remove_worktree(path: str) -> None:
    if os.path.exists(path):
        subprocess.run(
            ["git", "-C", ROOT, "worktree", "remove", "--force", path],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "-C", ROOT, "worktree", "prune"], check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--rev", default=DEFAULT_REV, help="the 'before' revision (default %(default)s)"
    )
    ap.add_argument("--tree", default=ROOT, help="the 'after' source tree (default: this one)")
    ap.add_argument(
        "--out", default=os.path.join(HERE, "results", "bindings-before-after-front.json")
    )
    ap.add_argument("--quick", action="store_true", help="fewer timed runs and Node repeats")
    ap.add_argument(
        "--work",
        help="work directory to use and keep (builds are reused by a "
        "later run with the same one); default: a temporary one, removed at the end",
    )
    ap.add_argument(
        "--maturin",
        default=default_maturin(),
        help="maturin to build the wheels with (default: .venv's, else PATH's)",
    )
    ap.add_argument(
        "--node-modules",
        help="an installed node/node_modules to link into the "
        "copies of node/ (default: the tree's, else this repository's)",
    )
    ap.add_argument("--jobs", type=int, default=1, help="cargo build jobs (default 1)")
    args = ap.parse_args()
    if not args.maturin:
        sys.exit(
            "before_after_bindings.py: no maturin found; pass --maturin (make venv puts one "
            "in .venv/bin)"
        )
    for tool in ("valgrind", "cargo", "node", "readelf"):
        if not shutil.which(tool):
            sys.exit(f"before_after_bindings.py: {tool} is not installed")
    tree = os.path.abspath(args.tree)
    runs = 3 if args.quick else 7
    repeats = 2 if args.quick else NODE_REPEATS
    began = time.monotonic()

    work = (
        os.path.abspath(args.work)
        if args.work
        else tempfile.mkdtemp(prefix="keylock-bindings-before-after-")
    )
    os.makedirs(work, exist_ok=True)
    old_tree = os.path.join(work, "before-src")
    try:
        for name, text in (
            ("bench_c.c", C_PROGRAM),
            ("bench_py.py", PY_PROGRAM),
            ("bench_node.js", NODE_PROGRAM.replace("WARM", str(NODE_WARMUP))),
        ):
            with open(os.path.join(work, name), "w") as f:
                f.write(text.lstrip())
        make_worktree(args.rev, old_tree)
        rev = subprocess.run(
            ["git", "-C", old_tree, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        after_label = tree_label(tree)
        if tree == ROOT:
            after_label += ", this tree"
        sides = {
            "before": build(old_tree, os.path.join(work, "before"), work, args),
            "after": build(tree, os.path.join(work, "after"), work, args),
        }
        built = time.monotonic()
        log(f"built both trees in {built - began:.0f} s; measuring")

        load = os.getloadavg()
        impl = {"before": f"keylock before ({rev})", "after": f"keylock after ({after_label})"}
        figures = []
        table = []
        for lang, loop, what, lengths, timed_n in LOOPS:
            reps = repeats if lang == "Node" else 1
            ins: dict[str, list[float]] = {"before": [], "after": []}
            for _ in range(reps):
                for k in ("before", "after"):
                    ins[k].append(per_op_instructions([*sides[k][lang], loop], lengths))
            times: dict[str, list[float]] = {"before": [], "after": []}
            for _ in range(runs):
                for k in ("before", "after"):
                    times[k].append(ns_per_op([*sides[k][lang], loop], timed_n))
            label = f"{lang} {loop}"
            for k in ("before", "after"):
                common = {
                    "group": f"before/after: {label}",
                    "impl": impl[k],
                    "language": lang,
                    "loop": loop,
                    "calls": what,
                }
                figures.append(
                    {
                        "name": f"{label}: {k}",
                        "unit": "ns",
                        "runs": times[k],
                        "median": statistics.median(times[k]),
                        "min": min(times[k]),
                        "max": max(times[k]),
                        "baseline": f"{label}: before" if k == "after" else None,
                        "target": None,
                        "met": None,
                        **common,
                    }
                )
                figures.append(
                    {
                        "name": f"{label}: {k}, instructions",
                        "unit": "instructions",
                        "runs": ins[k],
                        "median": statistics.median(ins[k]),
                        "min": min(ins[k]),
                        "max": max(ins[k]),
                        "baseline": f"{label}: before, instructions" if k == "after" else None,
                        "target": None,
                        "met": None,
                        **common,
                    }
                )
            row = (
                label,
                statistics.median(ins["before"]),
                statistics.median(ins["after"]),
                min(ins["before"]),
                max(ins["before"]),
                min(ins["after"]),
                max(ins["after"]),
                statistics.median(times["before"]),
                statistics.median(times["after"]),
            )
            table.append(row)
            log(
                f"{label:24} instructions before {row[1]:8.1f} after {row[2]:8.1f}   "
                f"ns before {row[7]:8.1f} after {row[8]:8.1f}"
            )
        by = {f["name"]: f["median"] for f in figures}
        for f in figures:
            f["ratio"] = (
                by[f["baseline"]] and f["median"] / by[f["baseline"]] if f["baseline"] else None
            )

        print()
        print(
            f"{'loop':24} {'instr before':>14} {'instr after':>14} {'ratio':>7} "
            f"{'ns before':>10} {'ns after':>10}"
        )
        for label, ib, ia, ib0, ib1, ia0, ia1, tb, ta in table:
            spread = (
                f"  (before {ib0:.1f}..{ib1:.1f}, after {ia0:.1f}..{ia1:.1f})"
                if ib0 != ib1 or ia0 != ia1
                else ""
            )
            print(f"{label:24} {ib:14.1f} {ia:14.1f} {ia / ib:7.3f} {tb:10.1f} {ta:10.1f}{spread}")

        doc = {
            "suite": f"keylock bindings (C, Python, Node): before and after the one front "
            f"(revision {rev} against {after_label}, uncontended)",
            "description": "One thread, no other holder; every loop cycles through 1,024 keys "
            "of 16 bytes (C) or 16 characters (Python str, JavaScript string). "
            "The loops: "
            + "; ".join(f"{lang} {loop}: {what}" for lang, loop, what, _, _ in LOOPS)
            + ". Built by bench/before_after_bindings.py from both trees "
            "(release builds, the wheel and the addon as make builds them).",
            "measurement": "instructions per lock+release by callgrind, the difference of two "
            "loop lengths (C and Python once: they repeat exactly; Node "
            f"{repeats} times after a warm-up of {NODE_WARMUP:,} iterations, "
            f"with V8's {' '.join(NODE_CALLGRIND_FLAGS)} so that background "
            "compilation and GC land at the same points in every run: median, "
            "min..max); ns per lock+release, medians of "
            f"{runs} interleaved runs, by the thread's CPU time in C and Python "
            "and by the wall clock in Node; load average at the start "
            f"{load[0]:.2f}",
            "machine": {
                **{k: v for k, v in report.machine().items() if k != "criterion"},
                "python": sys.version.split()[0],
                "node": subprocess.run(
                    ["node", "--version"], capture_output=True, text=True, check=False
                ).stdout.strip(),
            },
            "date": report.datetime.datetime.now(report.datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
            "results": figures,
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
        log(
            f"wrote {args.out}; built in {built - began:.0f} s, measured in "
            f"{time.monotonic() - built:.0f} s"
        )
    finally:
        remove_worktree(old_tree)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

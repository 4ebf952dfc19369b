#!/usr/bin/env python3
"""keylock benchmark report.

    report.py criterion OUT.json DIR...       convert criterion's results (the criterion/ tree
                                              under each DIR, one per run) into the shared format
    report.py render RESULTS_DIR BENCHMARKS.md DOCS_DIR
                                              tables into BENCHMARKS.md, plots into DOCS_DIR

Every bench/results/*.json follows the shared format:
    {"suite", "machine": {...}, "date", "description" (optional: the workloads, in words),
     "results": [{"name", "unit", "median", "min", "max",
     "runs", "baseline", "ratio", "target", "met", ...extra fields such as group, impl,
     threads, read_pct, keys}]}
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from collections import OrderedDict

import habits  # bench/habits.py, beside this script


def machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass

    def ver(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return "unknown"

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "os": f"{platform.system()} {platform.release()}",
        "rustc": ver("rustc", "--version"),
        "criterion": lock_version("criterion"),
        # Read when the runs are converted, just after the last one.
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def lock_version(crate: str) -> str:
    """The version of `crate` in the workspace's Cargo.lock."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        text = open(os.path.join(here, "..", "Cargo.lock")).read()
    except OSError:
        return "unknown"
    m = re.search(rf'name = "{re.escape(crate)}"\nversion = "([^"]+)"', text)
    return m.group(1) if m else "unknown"


# ---------------------------------------------------------------- criterion -> JSON

FLOOR = "parking_lot::Mutex"

# How the criterion benchmarks are timed (core/benches/common/cpu_time.rs), shown with the suite.
CRITERION_MEASUREMENT = (
    "Timed by the benchmark thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not the wall clock: "
    "time the thread spends preempted by other jobs on this shared machine is not counted. "
    "(Timed by the wall clock, runs with the machine busy read the floor at 10-24 ns instead of "
    "about 6 ns, and understated every ratio to it.)"
)

# (group, bench) -> (baseline bench in the same group, target text, goal ratio: ratio <= goal)
CRITERION_TARGETS = {
    ("uncontended_u64", "keylock StripedLock"): (
        FLOOR,
        "StripedLock uncontended lock+unlock at most 1.3x the floor, hashing included",
        1.3,
    ),
    # Hashing a string key is part of what a user pays: the same target, with 16-byte keys.
    ("uncontended_bytes16", "keylock StripedLock"): (
        FLOOR,
        "StripedLock uncontended lock+unlock at most 1.3x the floor, hashing a 16-byte key "
        "included",
        1.3,
    ),
    ("uncontended_u64", "keylock KeyPool"): (
        "keylock StripedLock",
        "KeyPool uncontended at most 2x StripedLock on the same keys (u64)",
        2.0,
    ),
    ("uncontended_bytes16", "keylock KeyPool"): (
        "keylock StripedLock",
        "KeyPool uncontended at most 2x StripedLock on the same keys (16-byte strings)",
        2.0,
    ),
    ("uncontended_async", "keylock KeyPool lock_async"): (
        "keylock KeyPool lock (sync)",
        "uncontended async within 1.5x of sync (KeyPool)",
        1.5,
    ),
    ("uncontended_async", "keylock StripedLock lock_async"): (
        "keylock StripedLock lock (sync)",
        "uncontended async within 1.5x of sync (StripedLock)",
        1.5,
    ),
    ("uncontended_async", "keylock RwLock read_async"): (
        "keylock RwLock read (sync)",
        "uncontended async within 1.5x of sync (RwLock read)",
        1.5,
    ),
}

NAIVE = "naive Mutex<HashMap<K, Arc<Mutex>>>"
# (group, bench, row suffix, baseline bench, target text, goal ratio: ratio <= goal)
SECOND_TARGETS = [
    (
        "uncontended_u64",
        "keylock KeyPool",
        "vs naive",
        NAIVE,
        "KeyPool uncontended at most 0.6x the naive map's time (u64)",
        0.6,
    ),
    (
        "uncontended_bytes16",
        "keylock KeyPool",
        "vs naive",
        NAIVE,
        "KeyPool uncontended at most 0.6x the naive map's time (16-byte strings)",
        0.6,
    ),
    (
        "uncontended_u64",
        "keylock KeyPool",
        "vs lockmap",
        "lockmap",
        "KeyPool uncontended faster than lockmap",
        0.999,
    ),
]


def criterion_to_json(out: str, target_dirs: list[str]) -> None:
    """Criterion's samples from one or more runs of the suite (each a directory holding a
    `criterion/` tree), pooled per benchmark: the median over every sample of every run is less
    swayed by a burst of other work during one run than any single run's median."""
    rows: dict[tuple[str, str], list[float]] = OrderedDict()
    for target_dir in target_dirs:
        found = glob.glob(
            os.path.join(target_dir, "criterion", "**", "new", "benchmark.json"), recursive=True
        )
        # In the order they ran (the order of the bench file), not alphabetical.
        for bj in sorted(found, key=os.path.getmtime):
            with open(bj) as f:
                meta = json.load(f)
            with open(os.path.join(os.path.dirname(bj), "sample.json")) as f:
                sample = json.load(f)
            per_iter = [t / n for t, n in zip(sample["times"], sample["iters"], strict=True)]
            rows.setdefault((meta["group_id"], meta["function_id"]), []).extend(per_iter)
    results = []
    for (group, bench), runs in rows.items():
        r = {
            "name": f"{group}/{bench}",
            "unit": "ns/op",
            "median": statistics.median(runs),
            "min": min(runs),
            "max": max(runs),
            "runs": [round(x, 3) for x in runs],
            "baseline": None,
            "ratio": None,
            "target": None,
            "met": None,
            "group": group,
            "impl": bench,
        }
        base = None
        if (group, bench) in CRITERION_TARGETS:
            base, r["target"], goal = CRITERION_TARGETS[(group, bench)]
        elif group == "uncontended_async":
            base = "keylock KeyPool lock (sync)" if bench != "keylock KeyPool lock (sync)" else None
        elif bench != FLOOR:
            base = FLOOR
        if base and (group, base) in rows:
            r["baseline"] = f"{group}/{base}"
            r["ratio"] = r["median"] / statistics.median(rows[(group, base)])
            if r["target"]:
                r["met"] = r["ratio"] <= goal
        results.append(r)
        # Further targets of the same figure against other baselines: a row each.
        for g2, b2, suffix, other, text, goal2 in SECOND_TARGETS:
            if (g2, b2) == (group, bench) and (group, other) in rows:
                r2 = dict(r)
                r2["name"] = f"{group}/{bench} ({suffix})"
                r2["baseline"] = f"{group}/{other}"
                r2["ratio"] = r["median"] / statistics.median(rows[(group, other)])
                r2["target"] = text
                r2["met"] = r2["ratio"] <= goal2
                results.append(r2)
    doc = {
        "suite": "keylock-core: uncontended lock+unlock (criterion, one thread)",
        "measurement": CRITERION_MEASUREMENT,
        "machine": machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out} ({len(results)} results)")


# ---------------------------------------------------------------- rendering


def fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    if unit.endswith("/s"):
        for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(x) >= div:
                return f"{x / div:.3g} {suf}{unit}"
        return f"{x:.3g} {unit}"
    if unit == "bytes":
        if abs(x) >= 1 << 20:
            return f"{x / (1 << 20):.1f} MiB"
        if abs(x) >= 1 << 14:
            return f"{x / 1024:.1f} KiB"
        return f"{x:.4g} B"
    if unit == "ratio":
        return f"{x:.3f}"
    return f"{x:.4g} {unit}"


def spread(r: dict) -> str:
    if len(r.get("runs") or []) <= 1:
        return "-"
    med = r["median"] or 0
    if not med:
        return "-"
    return f"{fmt(r['min'], r['unit'])} .. {fmt(r['max'], r['unit'])}"


def ratio_text(r: dict) -> str:
    """A row's ratio to its baseline; one far below 1 also as a fraction (1/39.3x), which two
    decimals would round to nothing."""
    x = r.get("ratio")
    if x is None:
        return "-"
    if 0 < x < 0.1:
        d = 1 / x
        return f"{x:.3g}x (1/{d:.1f})" if d < 100 else f"{x:.3g}x (1/{d:,.0f})"
    return f"{x:.2f}x"


def verdict(met) -> str:
    return {True: "**met**", False: "**missed**", None: ""}[met]


def short(name: str, group: str) -> str:
    """The row label: the implementation, without the group prefix."""
    if ": " in name:
        return name.rsplit(": ", 1)[1]
    if "/" in name and name.startswith(group):
        return name[len(group) + 1 :]
    return name


def group_of(r: dict) -> str:
    if r.get("group"):
        g = str(r["group"])
        if r.get("threads") is not None and g != "rwlock":
            g += f", {r['threads']} threads"
        if r.get("read_pct") is not None:
            g = f"rwlock {r['read_pct']}% reads, {r['threads']} threads"
        if r.get("keys") is not None:
            g += f", {r['keys']} keys"
        if r.get("state"):
            g += f", {r['state']}"
        if r.get("workload"):
            g += f", {r['workload']}"
        return g
    if ": " in r["name"]:
        return r["name"].rsplit(": ", 1)[0]
    if "/" in r["name"]:
        return r["name"].split("/", 1)[0]
    return "results"


def describe_machine(doc: dict) -> str:
    m = doc.get("machine") or {}
    parts = [f"{k}: {v}" for k, v in m.items()]
    return f"Machine: {'; '.join(parts)}. Date: {doc.get('date', 'unknown')}."


def render(results_dir: str, md_path: str, docs_dir: str) -> None:
    docs = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        try:
            with open(path) as f:
                doc = json.load(f)
            doc["_file"] = os.path.basename(path)
            docs.append(doc)
        except (OSError, ValueError) as e:
            print(f"skipping {path}: {e}", file=sys.stderr)
    order = ["rust.json", "rust-throughput.json", "rust-async-contended.json", "rust-memory.json"]
    docs.sort(
        key=lambda d: (order.index(d["_file"]) if d["_file"] in order else len(order), d["_file"])
    )

    out = []
    out.append("# keylock benchmarks\n")
    out.append(
        "Generated by `make bench` (bench/report.py) from the JSON in `bench/results/`; do not "
        "edit by hand. Every comparison was measured in one run of one process, alternatives "
        "interleaved with keylock; figures are medians of several runs with the spread "
        "(min .. max) beside them, and ratios are against the named baseline in the same run. "
        "The machine is shared and has few cores, so absolute numbers are noisy; read the "
        "ratios. Each suite says when it ran: a suite re-measured on its own "
        "(`make bench-core` runs one, `make bench-c` another) replaces only its own JSON, so the "
        "dates can differ.\n"
    )
    out.append(
        "Workloads. *Uncontended* (criterion, one thread, timed by its CPU time): lock and unlock "
        "with no other thread on the lock; keyed locks cycle through 1,024 keys, so hashing and "
        "lookup are included. *Per-key throughput*: each thread either cycles through 64 keys "
        "of its own (distinct keys) or all threads share 4 keys (hot keys); empty critical "
        "section; ~200 ms per run. "
        "*Latency*: 8 threads on one hot key, a ~50 ns critical section, wait measured from "
        "before the lock call to inside the critical section; fairness is the spread of "
        "acquisitions per thread (stddev/mean: lower is fairer; min/max: higher is fairer). "
        "*RwLock mixes*: each operation is a read with the given probability, else a write. "
        "*Async contended*: 1,000 tokio tasks on a multi-thread runtime, each taking random keys "
        "out of 1,000. *Memory*: exact live heap bytes from a counting global allocator. "
        "Alternatives: the naive map is `Mutex<HashMap<K, Arc<Mutex<()>>>>` with lookup-or-insert "
        "and no removal, as commonly written; the DashMap keyed lock is "
        "`DashMap<K, Arc<Mutex<()>>>` the same way; `lockmap` is used through `LockMap::entry`, "
        "as its documentation shows.\n"
    )
    plots = [
        p
        for p in ("throughput-threads.png", "rwlock-read-ratio.png", "memory-keys.png")
        if os.path.exists(os.path.join(docs_dir, p))
    ]

    # The issue-26 rows first, then every suite's own targets: the lead copies these verdicts.
    out.extend(habits.render(docs, fmt))
    out.append("## Targets\n")
    out.append("| target | figure | baseline | ratio | verdict | suite |")
    out.append("|---|---|---|---|---|---|")
    for doc in docs:
        for r in doc["results"]:
            if r.get("target"):
                name = short(r["name"], group_of(r))
                base = short(r["baseline"], group_of(r)) if r.get("baseline") else "-"
                ratio = ratio_text(r)
                out.append(
                    f"| {r['target']} | {name}: {fmt(r['median'], r['unit'])} "
                    f"| {base} "
                    f"| {ratio} "
                    f"| {verdict(r.get('met'))} | {doc['_file']} |"
                )
    out.append("")
    if plots:
        out.append("## Plots\n")
        for p in plots:
            out.append(f"![{p}](docs/{p})\n")

    for doc in docs:
        out.append(f"## {doc.get('suite', doc['_file'])}\n")
        out.append(f"From `bench/results/{doc['_file']}`. {describe_machine(doc)}\n")
        if doc.get("description"):
            out.append(f"{doc['description']}\n")
        if doc.get("measurement"):
            out.append(f"{doc['measurement']}\n")
        groups: dict[str, list[dict]] = OrderedDict()
        for r in doc["results"]:
            groups.setdefault(group_of(r), []).append(r)
        for g, rows in groups.items():
            out.append(f"### {g}\n")
            out.append(
                "| implementation | median | spread (min .. max) | runs | vs | ratio | target |"
            )
            out.append("|---|---|---|---|---|---|---|")
            for r in rows:
                ratio = ratio_text(r)
                out.append(
                    f"| {short(r['name'], g)} | {fmt(r['median'], r['unit'])} | {spread(r)} "
                    f"| {len(r.get('runs') or [])} "
                    f"| {short(r['baseline'], g) if r.get('baseline') else '-'} | {ratio} "
                    f"| {verdict(r.get('met'))} |"
                )
            out.append("")
    with open(md_path, "w") as f:
        f.write("\n".join(out))
    print(f"wrote {md_path}")
    plot(docs, docs_dir)


def plot(docs: list[dict], docs_dir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(docs_dir, exist_ok=True)
    results = [(d, r) for d in docs for r in d["results"]]
    note = ""
    for d in docs:
        if d["_file"] == "rust-throughput.json":
            m = d.get("machine", {})
            note = f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {d.get('date', '')[:10]}"

    # Throughput against threads, per per-key lock.
    groups = ["per-key distinct keys", "per-key 4 hot keys"]
    if any(r.get("group") in groups for _, r in results):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
        for ax, g in zip(axes, groups, strict=True):
            lines: dict[str, list[tuple[int, float, float, float]]] = OrderedDict()
            for _, r in results:
                if r.get("group") == g:
                    lines.setdefault(r["impl"], []).append(
                        (r["threads"], r["median"], r["min"], r["max"])
                    )
            for impl, pts in lines.items():
                pts.sort()
                xs = [p[0] for p in pts]
                ys = [p[1] / 1e6 for p in pts]
                err = [[(p[1] - p[2]) / 1e6 for p in pts], [(p[3] - p[1]) / 1e6 for p in pts]]
                ax.errorbar(
                    xs,
                    ys,
                    yerr=err,
                    marker="o",
                    capsize=3,
                    label=impl,
                    linewidth=2.5 if impl.startswith("keylock") else 1.2,
                )
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({p[0] for v in lines.values() for p in v}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_title(g)
            ax.set_xlabel("threads")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("lock+unlock, M ops/s (median, min..max)")
        axes[1].legend(fontsize=8)
        fig.suptitle(f"Per-key locks: throughput against threads ({note})", fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(docs_dir, "throughput-threads.png"), dpi=110)
        plt.close(fig)

    # RwLock throughput against read ratio, one panel per thread count.
    rw = [r for _, r in results if r.get("group") == "rwlock"]
    if rw:
        threads = sorted({r["threads"] for r in rw})
        show = [t for t in (2, max(threads)) if t in threads]
        show = sorted(set(show))
        fig, axes = plt.subplots(
            1, len(show), figsize=(6 * len(show), 4.8), sharey=True, squeeze=False
        )
        for ax, t in zip(axes[0], show, strict=True):
            lines: dict[str, list[tuple[int, float, float, float]]] = OrderedDict()
            for r in rw:
                if r["threads"] == t:
                    lines.setdefault(r["impl"], []).append(
                        (r["read_pct"], r["median"], r["min"], r["max"])
                    )
            for impl, pts in lines.items():
                pts.sort()
                ax.errorbar(
                    [p[0] for p in pts],
                    [p[1] / 1e6 for p in pts],
                    yerr=[[(p[1] - p[2]) / 1e6 for p in pts], [(p[3] - p[1]) / 1e6 for p in pts]],
                    marker="o",
                    capsize=3,
                    label=impl,
                    linewidth=2.5 if impl.startswith("keylock") else 1.2,
                )
            ax.set_title(f"{t} threads")
            ax.set_xlabel("reads, % of operations")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("M ops/s (median, min..max)")
        axes[0][-1].legend(fontsize=8)
        fig.suptitle(f"Reader-writer locks: throughput against read ratio ({note})", fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(docs_dir, "rwlock-read-ratio.png"), dpi=110)
        plt.close(fig)

    # Memory against distinct keys seen.
    mem = [r for _, r in results if r.get("group") == "memory vs distinct keys"]
    if mem:
        fig, ax = plt.subplots(figsize=(7.5, 5))
        lines = OrderedDict()
        for r in mem:
            lines.setdefault(r["impl"], []).append((r["keys"], max(r["median"], 1)))
        for impl, pts in lines.items():
            pts.sort()
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="o",
                label=impl,
                linewidth=2.5 if impl.startswith("keylock") else 1.2,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("distinct keys locked and released")
        ax.set_ylabel("live heap bytes (counting allocator)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        ax.set_title("Memory against distinct keys seen", fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(docs_dir, "memory-keys.png"), dpi=110)
        plt.close(fig)
    print(f"plots in {docs_dir}")


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[1] == "criterion":
        criterion_to_json(argv[2], argv[3:])
        return 0
    if len(argv) == 5 and argv[1] == "render":
        render(argv[2], argv[3], argv[4])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

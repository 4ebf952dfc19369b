#!/usr/bin/env bash
# Runs the make targets named on the command line one after another (the suites of `make test`),
# stops at the first that fails, and prints each suite's wall-clock duration as it ends and a
# table of all of them at the end (also after a failure), so the cost of every suite is visible.
#
# Usage: MAKE=make bash .ci/suites.sh TARGET...
set -uo pipefail
make_cmd=${MAKE:-make}
names=()
seconds=()
results=()
# Microseconds since the epoch, from bash's own clock (no external tool).
now_us() { echo "${EPOCHREALTIME/./}"; }
started=$(now_us)

table() {
    local total=$(( $(now_us) - started ))
    printf '\n== make test: suite durations\n'
    printf '%-20s %9s  %s\n' suite seconds result
    for i in "${!names[@]}"; do
        printf '%-20s %7d.%d  %s\n' "${names[$i]}" $(( seconds[i] / 1000000 )) $(( seconds[i] % 1000000 / 100000 )) "${results[$i]}"
    done
    printf '%-20s %7d.%d\n' total $(( total / 1000000 )) $(( total % 1000000 / 100000 ))
}
trap table EXIT

for target in "$@"; do
    t0=$(now_us)
    $make_cmd "$target"
    rc=$?
    dt=$(( $(now_us) - t0 ))
    names+=("$target")
    seconds+=("$dt")
    if [ "$rc" -eq 0 ]; then results+=(ok); else results+=("FAILED (exit $rc)"); fi
    printf '== suite %s: %d.%d s, %s\n' "$target" $(( dt / 1000000 )) $(( dt % 1000000 / 100000 )) "${results[-1]}"
    if [ "$rc" -ne 0 ]; then exit "$rc"; fi
done

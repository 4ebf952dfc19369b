#!/usr/bin/env bash
# Runs the make targets named on the command line one after another (the suites of `make test`),
# stops at the first that fails, and prints each suite's wall-clock duration as it ends and a
# table of all of them at the end (also after a failure), so the cost of every suite is visible.
#
# Usage: MAKE=make [PREBUILD="PHASE:SUITE ..."] bash .ci/suites.sh TARGET...
#
# PREBUILD: background builds. Each PHASE is `make prebuild-PHASE`, run in turn at the lowest
# priority (nice 19) while the suites run: the first at once, the others once the first suite has
# passed (it sets up what they need, such as the virtual environment). A suite that uses a phase's
# output is named after it: it waits for that phase, fails if the phase failed, and runs with
# PREBUILT=1 (so that it does not make again what the phase made). The machine has two cores and
# the middle suites spend much of their time waiting on servers and other processes, so what the
# last suites compile is mostly done by the time they start. Each phase's log is printed when its
# suite waits for it: in full if it failed, its last lines otherwise.
set -uo pipefail
make_cmd=${MAKE:-make}
names=()
seconds=()
results=()
# Microseconds since the epoch, from bash's own clock (no external tool).
now_us() { echo "${EPOCHREALTIME/./}"; }
fmt_s() { printf '%d.%d' $(( $1 / 1000000 )) $(( $1 % 1000000 / 100000 )); }
started=$(now_us)

phases=()
phase_suite=()
for spec in ${PREBUILD:-}; do
    phases+=("${spec%%:*}")
    phase_suite+=("${spec#*:}")
done
pdir=build/prebuild
bg_pid=
bg_rows=()

table() {
    local total=$(( $(now_us) - started ))
    if [ -n "$bg_pid" ] && kill -0 "$bg_pid" 2>/dev/null; then
        kill -TERM -- "-$bg_pid" 2>/dev/null
        wait "$bg_pid" 2>/dev/null
    fi
    printf '\n== make test: suite durations\n'
    printf '%-20s %9s  %s\n' suite seconds result
    for i in "${!names[@]}"; do
        printf '%-20s %9s  %s\n' "${names[$i]}" "$(fmt_s "${seconds[$i]}")" "${results[$i]}"
    done
    printf '%-20s %9s\n' total "$(fmt_s "$total")"
    for row in "${bg_rows[@]}"; do printf '%s\n' "$row"; done
}
trap table EXIT

# The background builds, in their own process group (set -m), so that one kill ends them all.
if [ "${#phases[@]}" -gt 0 ]; then
    rm -rf "$pdir" && mkdir -p "$pdir"
    set -m
    (
        for i in "${!phases[@]}"; do
            p=${phases[$i]}
            if [ "$i" -gt 0 ]; then
                while [ ! -e "$pdir/go" ]; do sleep 1; done
            fi
            t0=$(now_us)
            nice -n 19 $make_cmd "prebuild-$p" >"$pdir/$p.log" 2>&1
            rc=$?
            echo "$rc $(( $(now_us) - t0 ))" >"$pdir/$p.rc"
            [ "$rc" -eq 0 ] || exit "$rc"
        done
    ) &
    bg_pid=$!
    set +m
fi

# Waits for background phase $1 to end; prints its log; returns its exit status.
wait_phase() {
    local p=$1 rc us
    while [ ! -e "$pdir/$p.rc" ]; do
        if ! kill -0 "$bg_pid" 2>/dev/null && [ ! -e "$pdir/$p.rc" ]; then
            echo "== prebuild $p: did not run (an earlier background build failed; its log is above)"
            bg_rows+=("(background) prebuild-$p: did not run")
            return 1
        fi
        sleep 1
    done
    read -r rc us <"$pdir/$p.rc"
    if [ "$rc" -eq 0 ]; then
        printf '== prebuild %s (background build, nice 19): the end of its log\n' "$p"
        tail -n 5 "$pdir/$p.log"
        bg_rows+=("(background) prebuild-$p: $(fmt_s "$us") s, ok")
        printf '== prebuild %s: %s s in the background, ok\n' "$p" "$(fmt_s "$us")"
    else
        printf '== prebuild %s (background build) FAILED (exit %s); its log:\n' "$p" "$rc"
        cat "$pdir/$p.log"
        bg_rows+=("(background) prebuild-$p: $(fmt_s "$us") s, FAILED (exit $rc)")
    fi
    return "$rc"
}

first=1
for target in "$@"; do
    t0=$(now_us)
    extra=()
    rc=0
    for i in "${!phases[@]}"; do
        if [ "${phase_suite[$i]}" = "$target" ]; then
            wait_phase "${phases[$i]}" || rc=$?
            extra=(PREBUILT=1)
        fi
    done
    if [ "$rc" -eq 0 ]; then
        $make_cmd "$target" "${extra[@]}"
        rc=$?
    fi
    dt=$(( $(now_us) - t0 ))
    names+=("$target")
    seconds+=("$dt")
    if [ "$rc" -eq 0 ]; then results+=(ok); else results+=("FAILED (exit $rc)"); fi
    printf '== suite %s: %s s, %s\n' "$target" "$(fmt_s "$dt")" "${results[-1]}"
    if [ "$rc" -ne 0 ]; then exit "$rc"; fi
    if [ "$first" -eq 1 ] && [ -n "$bg_pid" ]; then
        touch "$pdir/go"
    fi
    first=0
done

#!/bin/sh
# The plain lock and release exports, and the host scope's uncontended acquire, run outside the
# panic guard (ffi-c/src/keyed.rs says why each cannot panic). A panic there could not unwind
# into C: the process would abort. This checks the built library for what that claim rests on:
# none of these functions calls anything (a panic, an allocation or a longer hash would be a
# call). Each must be found, so that a renamed function fails the check instead of passing it.
# Usage: leaves.sh path/to/libkeylock.so
set -eu
lib=$1
dis=$(mktemp)
trap 'rm -f "$dis"' EXIT
objdump -d --no-show-raw-insn -C "$lib" >"$dis"
status=0
check() {
	# $1: a pattern for the function's header line; $2: what to call it.
	found=$(awk -v pat="$1" '$0 ~ pat { n++ } END { print n + 0 }' "$dis")
	if [ "$found" -eq 0 ]; then
		echo "leaves: $2 is not in $lib" >&2
		status=1
		return
	fi
	calls=$(awk -v pat="$1" '$0 ~ pat { on = 1; next } /^$/ { on = 0 } on && /\tcall/' "$dis")
	if [ -n "$calls" ]; then
		echo "leaves: $2 calls out:" >&2
		echo "$calls" >&2
		status=1
	fi
}
for f in keylock_pool_lock keylock_pool_lock_shared keylock_striped_lock \
	keylock_striped_lock_shared keylock_pool_release keylock_striped_release; do
	check "^[0-9a-f]+ <$f>:\$" "$f"
done
check '^[0-9a-f]+ <keylock::keyed::acquire_host_plain' "keylock::keyed::acquire_host_plain"
[ "$status" -eq 0 ] && echo "leaves: ok, no calls on the unguarded paths"
exit "$status"

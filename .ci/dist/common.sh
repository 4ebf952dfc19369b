# Sourced by the test-*.sh scripts of make test-dist (mk/dist.mk), which passes KEYLOCK_VERSION,
# KEYLOCK_MAJOR, DIST_DIR, DIST_GLIBC, ROOT, VENV and TARGET_DIR.
set -euo pipefail
: "${KEYLOCK_VERSION:?} ${KEYLOCK_MAJOR:?} ${DIST_DIR:?} ${DIST_GLIBC:?} ${ROOT:?} ${VENV:?} ${TARGET_DIR:?}"

NAME=$(basename "$0" .sh)
say() { echo "$NAME: $*"; }
fail() {
	echo "$NAME: FAILED: $*" >&2
	exit 1
}

# A fresh temporary folder, removed when the script exits.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The one file in dist/ matching a glob.
dist_file() {
	local matches
	matches=$(compgen -G "$DIST_DIR/$1" || true)
	[[ -n $matches && $(wc -l <<<"$matches") -eq 1 ]] || fail "want exactly one dist/$1, found: ${matches:-none}"
	printf '%s' "$matches"
}

# From here on, no Rust: every folder of PATH that holds cargo or rustc is dropped (rustup's
# ~/.cargo/bin, a distribution's Rust in /usr/bin would take the rest with it and fail below),
# and so are the variables that name them. Fails if either can still be found.
no_rust() {
	local dir kept=()
	local IFS=:
	for dir in $PATH; do
		[[ -n $dir && ! -e $dir/cargo && ! -e $dir/rustc ]] && kept+=("$dir")
	done
	PATH="${kept[*]}"
	unset IFS
	export PATH
	unset CARGO RUSTC RUSTDOC RUSTUP_TOOLCHAIN CARGO_TARGET_DIR CARGO_BUILD_TARGET
	if command -v cargo >/dev/null || command -v rustc >/dev/null; then
		fail "cargo or rustc is still on PATH ($(command -v cargo rustc | tr '\n' ' '))"
	fi
	say "PATH without Rust: $PATH"
}

# The newest glibc symbol version an ELF file needs; fails above DIST_GLIBC.
check_glibc() {
	local newest late
	newest=$(objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
	[[ -n $newest ]] || fail "$1 needs no glibc symbol at all?"
	[[ $(printf '%s\n%s\n' "$newest" "$DIST_GLIBC" | sort -V | tail -n 1) == "$DIST_GLIBC" ]] ||
		fail "$1 needs glibc $newest, newer than $DIST_GLIBC"
	# A function glibc added after 2.17, referenced without a version (the link against 2.17's
	# symbols could not give it one), would be missing on an older glibc: these are the ones
	# Rust's standard library calls by name.
	late=$(objdump -T "$1" | awk '$2 != "w" && /[*]UND[*]/ { print $NF }' |
		grep -xE 'gettid|statx|copy_file_range|getrandom|memfd_create|renameat2|close_range|pidfd_[a-z_]+|posix_spawn_file_actions_addchdir_np' || true)
	[[ -z $late ]] || fail "$1 calls $(tr '\n' ' ' <<<"$late")from a glibc newer than $DIST_GLIBC, unversioned"
	say "$(basename "$1"): newest glibc symbol $newest (at most $DIST_GLIBC)"
}

# The keylock command at PROGRAM, as a package installed it: its version is the package's, a
# missing region is exit 3 with a message, and it lists key "dist:1" of region shm:REGION, which
# the caller's process holds (HOLDER_PID: the holder's pid, which the listing must show).
check_command() { # PROGRAM REGION HOLDER_PID
	local program=$1 region=$2 holder=$3 out rc
	[[ $("$program" --version) == "keylock $KEYLOCK_VERSION" ]] ||
		fail "$program --version says $("$program" --version), not keylock $KEYLOCK_VERSION"
	rc=0
	out=$("$program" list "shm:keylock-dist-missing-$$" 2>&1) || rc=$?
	[[ $rc == 3 && $out == *"no region"* ]] || fail "$program on a missing region: exit $rc, $out"
	out=$("$program" list "shm:$region" --json) || fail "$program list shm:$region failed"
	grep -q '"key":"dist:1"' <<<"$out" || fail "$program list does not show dist:1: $out"
	grep -q "\"pid\":$holder[,}]" <<<"$out" || fail "$program list does not show holder $holder: $out"
	say "$program: keylock $KEYLOCK_VERSION, lists the held key with its holder's pid"
}

# Starts HOLDER... (a program that takes dist:1 in shm:REGION, prints "held", and releases when
# its standard input ends) on fifos, runs check_command on PROGRAM while it holds, then lets it go
# and unlinks the region with PROGRAM.
check_command_on_holder() { # PROGRAM REGION WHAT HOLDER...
	local program=$1 region=$2 what=$3 holder line
	shift 3
	rm -f "$WORK/hold-in" "$WORK/hold-out"
	mkfifo "$WORK/hold-in" "$WORK/hold-out"
	"$@" <"$WORK/hold-in" >"$WORK/hold-out" &
	holder=$!
	exec 8>"$WORK/hold-in"
	read -r -t 30 line <"$WORK/hold-out" && [[ $line == held ]] || fail "the $what holder did not take dist:1"
	check_command "$program" "$region" "$holder"
	exec 8>&-
	wait "$holder" || fail "the $what holder failed to release"
	"$program" unlink "shm:$region" >/dev/null
}

# The version of crate NAME that Cargo.lock pins (the first, if it pins several).
locked_version() {
	awk -v want="\"$1\"" '$1 == "name" && $3 == want { getline; gsub(/"/, "", $3); print $3; exit }' "$ROOT/Cargo.lock"
}

# The license files every artifact carries, in FOLDER (where the artifact's files were unpacked
# or installed): LICENSE-MIT and LICENSE-APACHE equal to the repository's, and THIRD-PARTY-NOTICES
# naming each LINKED crate at the version Cargo.lock pins (crates the artifact's binary links, or
# would link when built from it) and no crate the build only uses for tests or benchmarks.
check_licenses() { # folder artifact-name linked-crate...
	local dir=$1 what=$2 name version
	shift 2
	for name in LICENSE-MIT LICENSE-APACHE; do
		[[ -f $dir/$name ]] || fail "$what has no $name"
		cmp -s "$dir/$name" "$ROOT/$name" || fail "$what's $name is not the repository's"
	done
	local notices=$dir/THIRD-PARTY-NOTICES
	[[ -f $notices ]] || fail "$what has no THIRD-PARTY-NOTICES"
	for name in "$@"; do
		version=$(locked_version "$name")
		[[ -n $version ]] || fail "Cargo.lock pins no $name"
		grep -qE "^  $name $version( |\$)" "$notices" || fail "$what's THIRD-PARTY-NOTICES does not name $name $version"
	done
	for name in criterion proptest; do
		if grep -qE "^  $name " "$notices"; then fail "$what's THIRD-PARTY-NOTICES names $name, a test-only crate"; fi
	done
	say "$what: LICENSE-MIT, LICENSE-APACHE, THIRD-PARTY-NOTICES (names $*)"
}

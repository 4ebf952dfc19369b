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
	local newest
	newest=$(objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
	[[ -n $newest ]] || fail "$1 needs no glibc symbol at all?"
	[[ $(printf '%s\n%s\n' "$newest" "$DIST_GLIBC" | sort -V | tail -n 1) == "$DIST_GLIBC" ]] ||
		fail "$1 needs glibc $newest, newer than $DIST_GLIBC"
	say "$(basename "$1"): newest glibc symbol $newest (at most $DIST_GLIBC)"
}

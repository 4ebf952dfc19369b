# The crate in dist/: only the library's sources, its README, the license texts and the
# third-party notices (no tests, benchmarks or workspace files), and its doc tests (the README's examples) pass in the unpacked crate, built
# on its own with its own lock file. The repository README's Rust examples must be the crate
# README's, so that the doc tests cover them too.
source "$(dirname "$0")/common.sh"

crate=$(dist_file "keylock-core-$KEYLOCK_VERSION.crate")
top="keylock-core-$KEYLOCK_VERSION"
files=$(tar -tzf "$crate" | sed "s|^$top/||" | sort)
unexpected=$(grep -vE '^(src/.*\.rs|build\.rs|README\.md|LICENSE-MIT|LICENSE-APACHE|THIRD-PARTY-NOTICES|Cargo\.toml|Cargo\.toml\.orig|Cargo\.lock|\.cargo_vcs_info\.json)$' <<<"$files" || true)
[[ -z $unexpected ]] || fail "$(basename "$crate") carries $(tr '\n' ' ' <<<"$unexpected")"
grep -qx 'README.md' <<<"$files" || fail "$(basename "$crate") has no README.md"

rust_blocks() { sed -n '/^```rust/,/^```$/p' "$1"; }
diff -u <(sed -n '/^## Rust$/,/^## /p' "$ROOT/README.md" | rust_blocks /dev/stdin) <(rust_blocks "$ROOT/core/README.md") ||
	fail "README.md's Rust examples differ from core/README.md's (the doc-tested ones): make them agree"

tar -xzf "$crate" -C "$WORK"
# With every feature: the notices name the optional dependencies too.
check_licenses "$WORK/$top" "$(basename "$crate")" parking_lot lock_api redis ring
say "doc tests of the unpacked crate"
# In the workspace's target folder, where test-rust built the same dependencies for the same
# test build (the same features): only the unpacked crate itself is compiled again.
(cd "$WORK/$top" && CARGO_TARGET_DIR="$TARGET_DIR" cargo test --locked --doc -q --features shm,redis,postgres)
say "ok: $(basename "$crate") holds the library, its README and licenses, and its doc tests pass"

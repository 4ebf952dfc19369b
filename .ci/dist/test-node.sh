# The npm tarballs in dist/: a fresh npm project installs the main package and the
# linux-x64-gnu package with no Rust on PATH, loads the prebuilt binary (nothing is built), and
# locks, from CommonJS, ESM and a worker thread (also with install scripts off). Without the per-platform package (as on a
# platform that has none) the install says it builds from source and fails clearly when cargo is
# missing, and with cargo it builds from the sources the main package carries, and works. Both
# packages carry the license texts and the third-party notices.
source "$(dirname "$0")/common.sh"

main=$(dist_file "keylock-keylock-$KEYLOCK_VERSION.tgz")
platform=$(dist_file "keylock-keylock-linux-x64-gnu-$KEYLOCK_VERSION.tgz")
NPM=(npm --no-audit --no-fund --no-update-notifier)

# Both packages carry the license texts and the notices of the crates the binary links (the main
# package's build from source links the same).
mkdir "$WORK/platform-package" "$WORK/main-package"
tar -xzf "$platform" -C "$WORK/platform-package"
tar -xzf "$main" -C "$WORK/main-package"
check_glibc "$WORK/platform-package/package/keylock_node.linux-x64-gnu.node"
check_glibc "$WORK/platform-package/package/keylock"
check_licenses "$WORK/platform-package/package" "$(basename "$platform")" parking_lot lock_api napi redis ring
check_licenses "$WORK/main-package/package" "$(basename "$main")" parking_lot lock_api napi redis ring

new_project() { # folder
	mkdir -p "$1"
	printf '{ "name": "keylock-dist-test", "version": "1.0.0", "private": true }\n' >"$1/package.json"
}

cat >"$WORK/smoke.js" <<'JS'
'use strict';
const assert = require('node:assert');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const { KeyPool, StripedLock, RwLock } = require('@keylock/keylock');

const [want, expectFrom] = process.argv.slice(2);
const main = require('@keylock/keylock/package.json');
assert.strictEqual(main.version, want);
const fromSource = path.join(path.dirname(require.resolve('@keylock/keylock')), 'keylock_node.node');
if (expectFrom === 'prebuilt') {
  const binary = require('@keylock/keylock-linux-x64-gnu/package.json');
  assert.strictEqual(binary.version, want);
  assert.ok(!require('node:fs').existsSync(fromSource), `${fromSource} was built at install`);
  // zig links its own unwinder in place of libgcc_s: a panic must still unwind into an error.
  const native = require('@keylock/keylock-linux-x64-gnu');
  if (typeof native.testingPanic === 'function') assert.throws(() => native.testingPanic(), /panic/);
} else {
  assert.ok(require('node:fs').existsSync(fromSource), `${fromSource} was not built`);
}

(async () => {
  const pool = new KeyPool();
  const order = [];
  const g = await pool.lock('user:42');
  const waiting = pool.withLock('user:42', async () => order.push('second'));
  order.push('first');
  g.release();
  await waiting;
  assert.deepStrictEqual(order, ['first', 'second']);
  assert.strictEqual(new StripedLock(64).tryLock('k').released, false);
  const rw = new RwLock();
  await rw.withRead(async () => assert.ok(rw.isLocked()));
  const { KeyPool: EsmPool } = await import('@keylock/keylock');
  assert.strictEqual(EsmPool, KeyPool);
  // A shared lock, held here, seen from a worker thread.
  const shared = KeyPool.shared('dist-test');
  const held = shared.tryLock('job');
  const seen = await new Promise((resolve, reject) => {
    const w = new Worker(
      "const { KeyPool } = require('@keylock/keylock');" +
        "require('node:worker_threads').parentPort.postMessage(KeyPool.shared('dist-test').isLocked('job'));",
      { eval: true },
    );
    w.once('message', resolve);
    w.once('error', reject);
  });
  assert.strictEqual(seen, true);
  held.release();
  console.log(`@keylock/keylock ${main.version} (${expectFrom}): locked`);
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
JS

# The same check from a project with cargo on PATH: the main package alone (npm leaves the
# optional binary package out) builds from its own sources. The build goes to the workspace's
# target folder with the workspace's release profile (the package's manifest has none, so
# CARGO_PROFILE_RELEASE_DEBUG says it), where `make` built the same dependencies with the same
# features: only keylock's own two crates, from the unpacked package, are compiled again.
say "installing $(basename "$main") without its binary package, with cargo: builds from source"
new_project "$WORK/fallback"
(cd "$WORK/fallback" && CARGO_TARGET_DIR="$TARGET_DIR" CARGO_PROFILE_RELEASE_DEBUG=1 \
	"${NPM[@]}" install --foreground-scripts --omit=optional "$main" 2>&1 | tee "$WORK/fallback.log")
grep -q 'no prebuilt binary' "$WORK/fallback.log" || grep -q 'is not installed' "$WORK/fallback.log" ||
	fail "the fallback did not say why it builds"
grep -q 'building the native addon from source' "$WORK/fallback.log" ||
	fail "the fallback did not say that it builds from source"
cp "$WORK/smoke.js" "$WORK/fallback/"
(cd "$WORK/fallback" && node smoke.js "$KEYLOCK_VERSION" source)

no_rust

say "installing $(basename "$platform") and $(basename "$main")"
new_project "$WORK/app"
(cd "$WORK/app" && "${NPM[@]}" install --foreground-scripts "$platform" "$main" 2>&1 | tee "$WORK/install.log")
if grep -q 'from source' "$WORK/install.log"; then fail "the install built from source"; fi
cp "$WORK/smoke.js" "$WORK/app/"
(cd "$WORK/app" && node smoke.js "$KEYLOCK_VERSION" prebuilt)

# The keylock command the package installs (node_modules/.bin/keylock, what npx runs), looking
# at a region this Node program holds a key in (until its stdin closes).
region="keylock-dist-node-$$"
cat >"$WORK/app/holder.js" <<'JS'
const { KeyPool } = require('@keylock/keylock');
const pool = KeyPool.open(`shm:${process.argv[2]}`);
const guard = pool.tryLock('dist:1');
if (!guard) process.exit(1);
console.log('held');
process.stdin.resume();
process.stdin.on('end', () => {
  guard.release();
  process.exit(0);
});
JS
check_command_on_holder "$WORK/app/node_modules/.bin/keylock" "$region" Node \
	node "$WORK/app/holder.js" "$region"

# napi-rs's layout needs no install script: with scripts off, the binary package still loads.
say "the same with --ignore-scripts"
new_project "$WORK/noscripts"
(cd "$WORK/noscripts" && "${NPM[@]}" install --ignore-scripts "$platform" "$main")
cp "$WORK/smoke.js" "$WORK/noscripts/"
(cd "$WORK/noscripts" && node smoke.js "$KEYLOCK_VERSION" prebuilt)

say "installing $(basename "$main") alone, without Rust: must fail, and say why"
new_project "$WORK/nobinary"
if (cd "$WORK/nobinary" && "${NPM[@]}" install --foreground-scripts --omit=optional "$main" >"$WORK/nobinary.log" 2>&1); then
	cat "$WORK/nobinary.log"
	fail "installing without a binary and without cargo succeeded"
fi
grep -q 'building from source needs Rust' "$WORK/nobinary.log" || {
	cat "$WORK/nobinary.log"
	fail "the failed install did not say that it needs Rust"
}
say "ok: the npm packages install and run without Rust; the fallback builds, or says why not"

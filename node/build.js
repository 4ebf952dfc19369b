'use strict';
// Builds the native addon from source into ./keylock_node.node (release mode). Run by
// install.js when npm installed no prebuilt binary for this platform: in a development checkout
// (`npm install` in this folder, or `npm install ./node` from a project beside it), and on a
// platform without a per-platform package. The published package carries the sources for it
// (Cargo.toml, Cargo.lock, build.rs, src/ and vendor/keylock-core/, see .ci/dist/stage-node.js).
//
// With the devDependency @napi-rs/cli installed (a development checkout), it runs `napi build`.
// Without it (installed as a dependency of another project, where devDependencies are not
// installed), it runs cargo directly and copies the library, which is all `napi build` does for
// a native Linux, macOS or Windows build. Either way it needs a Rust toolchain.

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const here = __dirname;
const output = path.join(here, 'keylock_node.node');
// The workspace's lock file in a checkout, the package's own in a published package.
// KEYLOCK_FEATURES=... adds cargo features to the build (shm and redis, the scopes beyond this
// process, are on by default).
const features = process.env.KEYLOCK_FEATURES ? ['--features', process.env.KEYLOCK_FEATURES] : [];
const locked = ['.', '..'].some((d) => fs.existsSync(path.join(here, d, 'Cargo.lock'))) ? ['--locked'] : [];

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: here, stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.error) throw r.error;
  if (r.status !== 0) process.exit(r.status ?? 1);
}

function napiCli() {
  try {
    const pkg = require.resolve('@napi-rs/cli/package.json', { paths: [here] });
    const bin = require(pkg).bin;
    return path.join(path.dirname(pkg), typeof bin === 'string' ? bin : bin.napi);
  } catch {
    return null;
  }
}

function cargoBuild() {
  // --message-format lets us find the library cargo built wherever its target folder is.
  const r = spawnSync(
    process.env.CARGO || 'cargo',
    ['build', '--release', ...locked, ...features, '-p', 'keylock-node', '--message-format=json-render-diagnostics'],
    { cwd: here, stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 64 << 20 },
  );
  if (r.error) throw r.error;
  if (r.status !== 0) process.exit(r.status ?? 1);
  let lib = null;
  for (const line of r.stdout.toString().split('\n')) {
    if (!line.startsWith('{')) continue;
    const msg = JSON.parse(line);
    if (msg.reason === 'compiler-artifact' && msg.target.name === 'keylock_node') {
      lib = msg.filenames.find((f) => /\.(so|dylib|dll)$/.test(f));
    }
  }
  if (!lib) throw new Error('keylock: cargo built no keylock_node library');
  fs.copyFileSync(lib, output + '.tmp');
  fs.renameSync(output + '.tmp', output);
}

const cli = napiCli();
if (cli) {
  // The generated declarations describe the private native layer only; index.d.ts (written by
  // hand, committed) is the package's public typing.
  run(process.execPath, [
    cli,
    'build',
    '--release',
    '--dts',
    'native.d.ts',
    '--no-dts-header',
    '-p',
    'keylock-node',
    '--',
    ...locked,
    ...features,
  ]);
} else {
  cargoBuild();
}

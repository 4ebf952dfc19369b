'use strict';
// Builds the native addon from source into ./keylock_node.node (release mode). Run by
// install.js when npm installed no prebuilt binary for this platform: in a development checkout
// (`npm install` in this folder, or `npm install ./node` from a project beside it), and on a
// platform without a per-platform package. The published package carries the sources for it
// (Cargo.toml, Cargo.lock, build.rs, src/ and vendor/keylock-core/, see .ci/dist/stage-node.js).
//
// It runs cargo and copies the library it built, which is all a native Linux, macOS or Windows
// build needs (napi-build, in build.rs, gives the linker what an addon needs). In a checkout the
// build goes to the workspace's target folder for the host, where the other release builds of
// the workspace (the Python module, the C library) leave the dependencies they share with it;
// `napi build` would name the host's target explicitly and so build all of them again in a
// folder of their own.

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const here = __dirname;
const output = path.join(here, 'keylock_node.node');
// The workspace's lock file in a checkout, the package's own in a published package.
// KEYLOCK_FEATURES=... adds cargo features to the build (shm, redis and postgres, the scopes
// beyond this process, are on by default).
const features = process.env.KEYLOCK_FEATURES ? ['--features', process.env.KEYLOCK_FEATURES] : [];
const locked = ['.', '..'].some((d) => fs.existsSync(path.join(here, d, 'Cargo.lock'))) ? ['--locked'] : [];

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

cargoBuild();

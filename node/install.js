'use strict';
// The package's install script. When npm has installed the prebuilt binary for this platform
// (the optional per-platform package, see binding.js) and it loads, there is nothing to do.
// Otherwise the addon is built from source by build.js, which needs a Rust toolchain; this
// script says so first, and fails with a clear message when cargo is missing.

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const binding = require('./binding.js');

const here = __dirname;
const platform = binding.platformId();
const name = binding.packageOf(platform);

const errors = [];
if (binding.loadPrebuilt(errors)) process.exit(0);

// A development checkout (the cargo workspace one folder up) builds into the workspace's
// target folder, quietly, as it always has.
const checkout = fs.existsSync(path.join(here, '..', 'Cargo.lock'));
if (!checkout) {
  const reason = binding.prebuiltPlatforms().includes(platform)
    ? `${name} is not installed${errors.length ? ' or does not load' : ''}`
    : `no prebuilt binary exists for ${platform}`;
  console.error(`keylock: ${reason}; building the native addon from source with cargo.`);
  for (const err of errors) console.error(`keylock: the prebuilt binary failed to load: ${err.message}`);
}

const cargo = process.env.CARGO || 'cargo';
const probe = spawnSync(cargo, ['--version'], { stdio: 'ignore' });
if (probe.error || probe.status !== 0) {
  console.error(
    `keylock: building from source needs Rust, and \`${cargo}\` was not found. Install Rust ` +
      '(https://rustup.rs), then install this package again.',
  );
  process.exit(1);
}

// An installed package builds in a scratch folder, removed afterwards, so node_modules does not
// keep a few hundred megabytes of build output.
const env = { ...process.env };
let scratch = null;
if (!checkout && !env.CARGO_TARGET_DIR) {
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'keylock-build-'));
  env.CARGO_TARGET_DIR = scratch;
}
const r = spawnSync(process.execPath, [path.join(here, 'build.js')], { cwd: here, env, stdio: 'inherit' });
if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
if (r.error) throw r.error;
if (r.status !== 0) {
  console.error('keylock: the build from source failed (see above).');
  process.exit(r.status ?? 1);
}
if (!checkout) console.error('keylock: built keylock_node.node from source.');

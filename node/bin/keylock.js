#!/usr/bin/env node
'use strict';
// The `keylock` command for operators (list, info, unlock, watch, unlink; `keylock --help`): the
// program the platform package carries beside the addon (the same one the wheel and the C
// tarball ship), run with this process's arguments, terminal and exit status. A platform
// without a prebuilt package, where the addon was built from source, has no program.

const { spawnSync } = require('node:child_process');
const path = require('node:path');

const { platformId, packageOf } = require('../binding.js');

function program() {
  const name = packageOf(platformId());
  try {
    const manifest = require.resolve(`${name}/package.json`, { paths: [path.join(__dirname, '..')] });
    return path.join(path.dirname(manifest), 'keylock');
  } catch {
    return null;
  }
}

const exe = program();
if (exe === null) {
  console.error(
    `keylock: no prebuilt keylock command for ${platformId()} (the addon was built from source); ` +
      'the C release tarball has it in bin/, or build it with `cargo build --release -p keylock-cli`',
  );
  process.exit(7);
}
// The program owns the terminal while it runs (watch reads keys and draws); Ctrl-C reaches it
// through the terminal, and this process only waits for it.
process.on('SIGINT', () => {});
const r = spawnSync(exe, process.argv.slice(2), { stdio: 'inherit' });
if (r.error) {
  console.error(`keylock: cannot run ${exe}: ${r.error.message}`);
  process.exit(7);
}
if (r.signal) process.kill(process.pid, r.signal);
process.exit(r.status ?? 7);

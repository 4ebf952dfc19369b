'use strict';
// The one place that loads the native addon (keylock_node.node, built from src/ by build.js).
// Everything else, the package's JavaScript and its tests alike, gets the addon from load().

const path = require('node:path');

const FILE = path.join(__dirname, 'keylock_node.node');

let native = null;

function load() {
  if (native !== null) return native;
  try {
    native = require(FILE);
  } catch (err) {
    if (err && err.code === 'MODULE_NOT_FOUND') {
      const e = new Error(
        'keylock: the native addon keylock_node.node is not built; run `npm install` (or ' +
          '`npm run build`) in the keylock package folder. It needs a Rust toolchain.',
      );
      e.code = 'KEYLOCK_NOT_BUILT';
      e.cause = err;
      throw e;
    }
    throw err;
  }
  return native;
}

module.exports = { load };

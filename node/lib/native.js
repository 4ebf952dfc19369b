'use strict';
// The native addon, loaded once for every module of the package (binding.js finds it: a
// prebuilt binary, or one built from src/).

const addon = require('../binding.js').load();

// A lock's object (its entry points and `.handle`, see src/raw.rs `bind`) is built by Node-API
// one property at a time, and V8 turns an object built that way into a dictionary once it has
// many properties (a KeyPool's 22 did, an RwLock's 10 did not): each `h.lock(key)` or
// `h.release(slot)` was then a generic property lookup (about 80 instructions, two per
// withLock) instead of a load the JIT inlines. A copy made by an object spread has fast
// properties, so every maker of a lock object returns one. test/fast-objects.test.js checks
// each kind of lock.
const fast =
  (make) =>
  (...args) => ({ ...make(...args) });

module.exports = {
  ...addon,
  keyedOpen: fast(addon.keyedOpen),
  keyedShared: fast(addon.keyedShared),
  webLocksPool: fast(addon.webLocksPool),
  rwNew: fast(addon.rwNew),
  rwShared: fast(addon.rwShared),
};

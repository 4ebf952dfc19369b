'use strict';
// keylock for Node.js: KeyPool, StripedLock, Semaphore and RwLock from the keylock Rust core, and the Web
// Locks API (`keylock.locks`) on top of them.
//
// This file only gathers the public API from lib/, one module per concern, none of which decides
// anything about locking or keeps lock state: every acquire and release is one call into the
// core through the addon (lib/native.js, which binding.js finds: prebuilt, or built from src/).
//
//   lib/records.js    the records that cross between the addon and JavaScript (its one schema)
//   lib/errors.js     status numbers, KeylockError, argument errors, the addon's failures
//   lib/keys.js       key bytes, and keys as messages name them
//   lib/options.js    options and arguments, validated
//   lib/thread.js     this thread's state (waiters, owners, the addon's buffers)
//   lib/owners.js     owner values as the core's owner numbers
//   lib/diagnostics.js  the diagnostics_channel events (keylock:wait, :acquire, :release)
//   lib/holding.js    a guard held while a callback runs (withLock, withPermit)
//   lib/waiting.js    native waiters as promises (timeouts, AbortSignal), completions
//   lib/guard.js      Guard: one acquisition, released exactly once
//   lib/metrics.js    metrics(): the core's counts and histograms, as a frozen object
//   lib/pools.js      KeyPool and StripedLock over any scope, unlink()
//   lib/semaphore.js  Semaphore (keyed, weighted) and its Permit
//   lib/wrap.js       wrap(): a function run under the key its arguments name
//   lib/rwlock.js     RwLock
//   lib/web-locks.js  LockManager, Lock and `locks` (the Web Locks API)

const { KeylockError } = require('./lib/errors.js');
const { keyBytes } = require('./lib/keys.js');
const { Guard } = require('./lib/guard.js');
const { KeyPool, StripedLock, unlink } = require('./lib/pools.js');
const { Semaphore, Permit } = require('./lib/semaphore.js');
const { RwLock } = require('./lib/rwlock.js');
const webLocks = require('./lib/web-locks.js');

module.exports = {
  KeyPool,
  StripedLock,
  Semaphore,
  RwLock,
  KeylockError,
  Guard,
  Permit,
  keyBytes,
  unlink,
  LockManager: webLocks.LockManager,
  Lock: webLocks.Lock,
};
Object.defineProperty(module.exports, 'locks', { enumerable: true, get: webLocks.locks });

'use strict';
// wrap(): a function that runs another under the key its arguments name, for every keyed
// primitive (KeyPool, StripedLock, Semaphore). Each primitive passes its own `run(key, body)`
// (withLock or withPermit with the options given to wrap); this module only builds the function.

const { checkFn } = require('./options.js');

// An async function that, called with `args`, runs `fn(...args)` (with the same `this`) inside
// `run(keyOf(...args), body)`, and resolves or rejects as `fn` does. It has `fn`'s name and
// length.
function wrapKeyed(run, fn, keyOf) {
  checkFn(fn, 'fn');
  checkFn(keyOf, 'keyOf');
  const wrapped = async function (...args) {
    return run(keyOf.apply(this, args), () => fn.apply(this, args));
  };
  Object.defineProperty(wrapped, 'name', { value: fn.name, configurable: true });
  Object.defineProperty(wrapped, 'length', { value: fn.length, configurable: true });
  return wrapped;
}

module.exports = { wrapKeyed };

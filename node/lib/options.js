'use strict';
// Arguments: the options of an acquire and of a constructor, validated, and the checks of the
// other arguments (callbacks, names, stripe counts).

const native = require('./native.js');
const { typeError, rangeError, describe } = require('./errors.js');

// The longest delay setTimeout honours; a longer timeout is treated as no timeout.
const MAX_TIMER = 2 ** 31 - 1;
const EXCLUSIVE = 0;
const SHARED = 1;

// Options of an acquire: { mode, lease, owner, timeout, signal }. `plain` says there is nothing
// but a timeout or signal (the fast paths apply).
const NO_OPTIONS = Object.freeze({
  mode: EXCLUSIVE,
  lease: undefined,
  owner: undefined,
  timeout: undefined,
  signal: undefined,
  plain: true,
});

function parseMode(mode, many = false) {
  if (mode === undefined || mode === 'exclusive') return EXCLUSIVE;
  if (mode === 'shared') return SHARED;
  if (many && Array.isArray(mode)) return mode.map((m) => parseMode(m));
  throw typeError(`mode must be 'shared' or 'exclusive'${many ? ', or an array of them' : ''}, not ${describe(mode)}`);
}

function millis(name, v) {
  if (v === undefined || v === null || v === Infinity) return undefined;
  if (typeof v !== 'number') throw typeError(`${name} must be a number of milliseconds, not ${describe(v)}`);
  if (!(v >= 0)) throw rangeError(`${name} must be >= 0, not ${v}`);
  return v;
}

// Validates options. `sync`: a blocking call (no signal); `many`: mode may be an array.
function parseOptions(opts, sync = false, many = false) {
  if (opts === undefined || opts === null) return NO_OPTIONS;
  if (typeof opts !== 'object') throw typeError(`options must be an object, not ${describe(opts)}`);
  const mode = parseMode(opts.mode, many);
  const lease = millis('lease', opts.lease);
  const timeout = millis('timeout', opts.timeout);
  let { owner, signal } = opts;
  if (owner === null) owner = undefined;
  if (signal === null) signal = undefined;
  if (signal !== undefined) {
    if (sync) throw typeError('signal is not supported by synchronous calls');
    if (!isAbortSignal(signal)) throw typeError(`signal must be an AbortSignal, not ${describe(signal)}`);
  }
  const plain = mode === EXCLUSIVE && lease === undefined && owner === undefined;
  if (plain && timeout === undefined && signal === undefined) return NO_OPTIONS;
  return { mode, lease, owner, timeout, signal, plain };
}

function isAbortSignal(signal) {
  return (
    signal instanceof AbortSignal ||
    (typeof signal === 'object' &&
      typeof signal.aborted === 'boolean' &&
      typeof signal.addEventListener === 'function' &&
      typeof signal.removeEventListener === 'function')
  );
}

function checkFn(fn, name = 'fn') {
  if (typeof fn !== 'function') throw typeError(`${name} must be a function, not ${describe(fn)}`);
}

// A whole number that a native u32 argument holds: a semaphore's permits or an acquire's
// weight. Which of them the semaphore accepts (at least 1, at most its permits, at most the
// core's largest) is the core's rule: it refuses the others with KEYLOCK_INVALID_ARGUMENT.
function units(name, v) {
  if (typeof v !== 'number') throw typeError(`${name} must be a number of units, not ${describe(v)}`);
  if (!Number.isInteger(v) || v < 0 || v > 0xffffffff)
    throw rangeError(`${name} must be a whole number of units, not ${v}`);
  return v;
}

// Options of a semaphore's acquire: { weight, lease, timeout, signal }; `tryOnly`: those of
// tryAcquire (weight and lease; the others are not read).
const ONE_UNIT = Object.freeze({ weight: 1, lease: undefined, timeout: undefined, signal: undefined });

function parsePermitOptions(opts, tryOnly = false) {
  if (opts === undefined || opts === null) return ONE_UNIT;
  if (typeof opts !== 'object') throw typeError(`options must be an object, not ${describe(opts)}`);
  const weight = opts.weight === undefined || opts.weight === null ? 1 : units('weight', opts.weight);
  const lease = millis('lease', opts.lease);
  if (tryOnly) return { weight, lease, timeout: undefined, signal: undefined };
  const timeout = millis('timeout', opts.timeout);
  let { signal } = opts;
  if (signal === null) signal = undefined;
  if (signal !== undefined && !isAbortSignal(signal)) {
    throw typeError(`signal must be an AbortSignal, not ${describe(signal)}`);
  }
  return { weight, lease, timeout, signal };
}

function checkName(name) {
  if (typeof name !== 'string' || name.length === 0) {
    throw typeError(`a shared lock's name must be a non-empty string, not ${describe(name)}`);
  }
}

function checkScope(name) {
  if (typeof name !== 'string') {
    throw typeError(
      `a lock name must be a string such as 'local:', 'shm:NAME' or 'redis://...', not ${describe(name)}`,
    );
  }
}

function checkStripes(stripes) {
  if (typeof stripes !== 'number') throw typeError(`stripes must be a number, not ${describe(stripes)}`);
  if (!Number.isInteger(stripes) || stripes < 1 || stripes > native.MAX_STRIPES) {
    throw rangeError(`stripes must be an integer from 1 to ${native.MAX_STRIPES}, not ${stripes}`);
  }
  return stripes;
}

// `{ reentrant, fifo, metrics, capacity }` of a constructor (and `stripes` for open/shared of a
// StripedLock).
function makeOptions(opts, stripes) {
  if (opts === undefined || opts === null) opts = {};
  else if (typeof opts !== 'object') throw typeError(`options must be an object, not ${describe(opts)}`);
  const out = {};
  for (const k of ['reentrant', 'fifo', 'metrics']) {
    const v = opts[k];
    if (v === undefined) continue;
    if (typeof v !== 'boolean') throw typeError(`${k} must be a boolean, not ${describe(v)}`);
    out[k] = v;
  }
  if (opts.capacity !== undefined) {
    const c = opts.capacity;
    if (typeof c !== 'number' || !Number.isInteger(c)) {
      throw typeError(`capacity must be an integer, not ${describe(c)}`);
    }
    if (c < 1 || c > 0xffffffff) throw rangeError(`capacity must be in 1..2^32-1, not ${c}`);
    out.capacity = c;
  }
  if (stripes !== undefined) out.stripes = checkStripes(stripes);
  return out;
}

module.exports = {
  MAX_TIMER,
  EXCLUSIVE,
  SHARED,
  NO_OPTIONS,
  parseOptions,
  parsePermitOptions,
  millis,
  units,
  makeOptions,
  checkFn,
  checkName,
  checkScope,
};

'use strict';
// Errors: the status numbers the addon returns, the KeylockError each becomes (its `code` the
// status's name), the TypeError and RangeError of a bad argument, and the translation of a
// failure the addon throws.

const native = require('./native.js');

// Status numbers returned by the addon: keylock-core's table (the numbers C returns too), read
// from the addon rather than copied. `code` is each status's name, e.g. KEYLOCK_TIMEOUT.
const STATUSES = new Map(native.statuses().map((s) => [s.code, s]));
const CODE = Object.fromEntries([...STATUSES.values()].map((s) => [s.name, s.code]));
const OK = CODE.KEYLOCK_OK;
const WOULD_BLOCK = CODE.KEYLOCK_WOULD_BLOCK;
const TIMED_OUT = CODE.KEYLOCK_TIMEOUT;
const NOT_OWNER = CODE.KEYLOCK_NOT_OWNER;
const LEASE_EXPIRED = CODE.KEYLOCK_LEASE_EXPIRED;

/** An error from keylock; `code` says which (KEYLOCK_TIMEOUT, KEYLOCK_NOT_OWNER, ...). */
class KeylockError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.code = code;
  }

  get name() {
    return 'KeylockError';
  }
}

// `what` names the lock in messages: a string, or a function making one (formatting a key costs
// more than locking it, so it is done only when an error is made).
function whatOf(what) {
  return typeof what === 'function' ? what() : what;
}

function timeoutError(what, timeout) {
  return new KeylockError('KEYLOCK_TIMEOUT', `keylock: timed out after ${timeout} ms waiting for ${whatOf(what)}`);
}

// Statuses whose failures carry the core's own text (what was refused, why a scope could not
// be reached), which the error's message keeps after the status's description.
const WITH_TEXT = new Set([
  CODE.KEYLOCK_INVALID_ARGUMENT,
  CODE.KEYLOCK_INCOMPATIBLE,
  CODE.KEYLOCK_PERMISSION_DENIED,
  CODE.KEYLOCK_UNAVAILABLE,
]);

// The error for a native status. `textId` names the failure's kept text (a waiter's completion
// carries it); 0 means the failure of the native call that just returned.
function statusError(status, what, textId = 0) {
  what = whatOf(what);
  const s = STATUSES.get(status);
  if (s === undefined) return new KeylockError('KEYLOCK_INTERNAL', `keylock: unexpected status ${status} for ${what}`);
  switch (status) {
    case TIMED_OUT:
      return new KeylockError(s.name, `keylock: timed out waiting for ${what}`);
    case WOULD_BLOCK:
      return new KeylockError(s.name, `keylock: ${what} is held`);
    case NOT_OWNER:
      return new KeylockError(
        s.name,
        `keylock: ${what}: the acquisition is no longer the lock's current one (released already, or force-unlocked)`,
      );
    case LEASE_EXPIRED:
      return new KeylockError(s.name, `keylock: ${what}: the acquisition's lease ran out`);
    default: {
      const text = WITH_TEXT.has(status) ? native.failureText(status, textId) : null;
      const cause = text == null ? '' : `: ${text}`;
      return new KeylockError(s.name, `keylock: ${s.description} (${what})${cause}`);
    }
  }
}

function typeError(message) {
  const e = new TypeError(`keylock: ${message}`);
  e.code = 'KEYLOCK_INVALID_ARGUMENT';
  return e;
}

function rangeError(message) {
  const e = new RangeError(`keylock: ${message}`);
  e.code = 'KEYLOCK_INVALID_ARGUMENT';
  return e;
}

// The napi-rs exports report a core error as "CODE\0message" (see src/lib.rs).
function fromNative(err) {
  const msg = err && typeof err.message === 'string' ? err.message : '';
  const nul = msg.indexOf('\0');
  if (nul < 0) return err;
  const code = msg.slice(0, nul);
  const text = msg.slice(nul + 1);
  if (code === 'KEYLOCK_INVALID_ARGUMENT') return typeError(text.replace(/^invalid argument: /, ''));
  return new KeylockError(code, text.startsWith('keylock:') ? text : `keylock: ${text}`);
}

// Calls a napi-rs export, its failure translated.
function nativeCall(f, ...args) {
  try {
    return f(...args);
  } catch (err) {
    throw fromNative(err);
  }
}

// What a bad argument was, for messages.
function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return `an object (${Object.prototype.toString.call(value)})`;
  return `a ${typeof value}`;
}

module.exports = {
  KeylockError,
  OK,
  WOULD_BLOCK,
  TIMED_OUT,
  NOT_OWNER,
  statusError,
  timeoutError,
  typeError,
  rangeError,
  nativeCall,
  describe,
};

'use strict';
// keylock for Node.js: KeyPool, StripedLock and RwLock from the keylock Rust core.
//
// This file is the public API. It validates arguments, turns native status numbers into
// errors with a `code`, and turns native waiter ids into promises (timeouts, AbortSignal,
// guards, withLock). It decides nothing about locking: every acquire and release is one call
// into the core through the addon, which binding.js finds (prebuilt, or built from src/).

const { types } = require('node:util');

const native = require('./binding.js').load();

// ---------------------------------------------------------------------------------------------
// Errors

// Status numbers returned by the addon: keylock-core's table (the numbers C returns too), read
// from the addon rather than copied. `code` is each status's name, e.g. KEYLOCK_TIMEOUT.
const STATUSES = new Map(native.statuses().map((s) => [s.code, s]));
const CODE = Object.fromEntries([...STATUSES.values()].map((s) => [s.name, s.code]));
const OK = CODE.KEYLOCK_OK;
const WOULD_BLOCK = CODE.KEYLOCK_WOULD_BLOCK;
const TIMED_OUT = CODE.KEYLOCK_TIMEOUT;
const NOT_LOCKED = CODE.KEYLOCK_NOT_LOCKED;
const INVALID_ARGUMENT = CODE.KEYLOCK_INVALID_ARGUMENT;
// Added to a release's status when it woke a waiter of this thread (served at once, below).
const LOCAL_WAKE = native.LOCAL_WAKE;

/** An error from keylock; `code` says which (KEYLOCK_TIMEOUT, KEYLOCK_NOT_LOCKED, ...). */
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

function statusError(status, what) {
  what = whatOf(what);
  switch (status) {
    case TIMED_OUT:
      return new KeylockError('KEYLOCK_TIMEOUT', `keylock: timed out waiting for ${what}`);
    case NOT_LOCKED:
      return new KeylockError('KEYLOCK_NOT_LOCKED', `keylock: ${what} is not locked`);
    case WOULD_BLOCK:
      return new KeylockError('KEYLOCK_WOULD_BLOCK', `keylock: ${what} is held`);
    case INVALID_ARGUMENT:
      return new KeylockError('KEYLOCK_INVALID_ARGUMENT', `keylock: invalid argument for ${what}`);
    default: {
      // A status of the core's table without a message of its own here yet.
      const s = STATUSES.get(status);
      if (s !== undefined) return new KeylockError(s.name, `keylock: ${s.description} (${what})`);
      return new KeylockError('KEYLOCK_INTERNAL', `keylock: unexpected status ${status} for ${what}`);
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

// ---------------------------------------------------------------------------------------------
// Arguments

// Keys are strings (their UTF-8 bytes), integers (safe-integer numbers and bigints, as 8 bytes)
// and Uint8Arrays (their bytes), by the rules every keylock front end shares. Types are checked
// here, for a message naming the type; values (lone surrogates, ranges) by the addon, which
// throws TypeError or RangeError with code KEYLOCK_INVALID_ARGUMENT.
function checkKey(key) {
  const t = typeof key;
  if (t === 'string' || t === 'number' || t === 'bigint' || key instanceof Uint8Array || types.isUint8Array(key)) {
    return;
  }
  throw typeError(`a key must be a string, a number, a bigint, a Buffer or a Uint8Array, not ${describe(key)}`);
}

// Guards keep their own copy of a byte key, so changing the caller's buffer later cannot make
// the release miss (strings, numbers and bigints are immutable and kept as they are).
function ownKey(key) {
  return typeof key === 'object' ? Uint8Array.prototype.slice.call(key) : key;
}

function checkKeys(keys) {
  if (!Array.isArray(keys)) {
    throw typeError(`keys must be an array of keys, not ${describe(keys)}`);
  }
  const own = new Array(keys.length);
  for (let i = 0; i < keys.length; i++) {
    checkKey(keys[i]);
    own[i] = ownKey(keys[i]);
  }
  return own;
}

function checkFn(fn) {
  if (typeof fn !== 'function') throw typeError(`fn must be a function, not ${describe(fn)}`);
}

function checkName(name) {
  if (typeof name !== 'string' || name.length === 0) {
    throw typeError(`a shared lock's name must be a non-empty string, not ${describe(name)}`);
  }
}

function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return `an object (${Object.prototype.toString.call(value)})`;
  return `a ${typeof value}`;
}

// The longest delay setTimeout honours; a longer timeout is treated as no timeout.
const MAX_TIMER = 2 ** 31 - 1;
const NO_OPTIONS = Object.freeze({ timeout: undefined, signal: undefined });

// Validates `{ timeout, signal }`. Returns NO_OPTIONS for the common case without options.
function parseOptions(opts, allowSignal = true) {
  if (opts === undefined || opts === null) return NO_OPTIONS;
  if (typeof opts !== 'object') throw typeError(`options must be an object, not ${describe(opts)}`);
  let { timeout, signal } = opts;
  if (timeout === null || timeout === Infinity) timeout = undefined;
  if (timeout !== undefined) {
    if (typeof timeout !== 'number') {
      throw typeError(`timeout must be a number of milliseconds, not ${describe(timeout)}`);
    }
    if (!(timeout >= 0)) throw rangeError(`timeout must be >= 0, not ${timeout}`);
  }
  if (signal === null) signal = undefined;
  if (signal !== undefined) {
    if (!allowSignal) throw typeError('signal is not supported by synchronous calls');
    if (!isAbortSignal(signal)) {
      throw typeError(`signal must be an AbortSignal, not ${describe(signal)}`);
    }
  }
  return timeout === undefined && signal === undefined ? NO_OPTIONS : { timeout, signal };
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

// ---------------------------------------------------------------------------------------------
// Waiting: native waiter ids become promises.
//
// `lockAsync` and friends poll the core's future once. If that takes the lock they return 0;
// otherwise they return an id, and the addon calls `dispatch(ids)` on this thread when the
// waiters with those ids got their locks (see src/reactor.rs). Waiters are kept per thread;
// the table lives on globalThis so a second copy of this file in the same thread (a cleared
// require cache) shares the dispatcher the addon already has.

const FAILED_BIT = native.FAILED_BIT;
const WAITERS = Symbol.for('keylock.waiters.v1');
let waiters = globalThis[WAITERS];
if (waiters === undefined) {
  waiters = new Map();
  Object.defineProperty(globalThis, WAITERS, { value: waiters });
  native.init(dispatch);
}

function dispatch(ids) {
  if (typeof ids === 'number') {
    settle(ids);
  } else {
    for (let i = 0; i < ids.length; i++) settle(ids[i]);
  }
}

function settle(raw) {
  const failed = raw >= FAILED_BIT;
  const id = failed ? raw - FAILED_BIT : raw;
  const w = waiters.get(id);
  if (w === undefined) return;
  waiters.delete(id);
  if (w.timer !== undefined) clearTimeout(w.timer);
  if (w.signal !== undefined) w.signal.removeEventListener('abort', w.onAbort);
  if (failed) {
    w.reject(new KeylockError('KEYLOCK_INTERNAL', 'keylock: a panic in the addon while waiting'));
  } else {
    w.resolve(makeGuard(w.kind, w.h, w.key));
  }
}

// The status of a release, after serving the waiter of this thread that it woke, if any: the
// waiter's promise then resolves before the releasing call returns, as with a pure-JavaScript
// lock, instead of on the event loop's next turn.
const runReady = native.runReadyFunction();
function released(status) {
  if (status < LOCAL_WAKE) return status;
  dispatch(runReady());
  return status & (LOCAL_WAKE - 1);
}

// Cancels waiter `id` (still pending: the addon's table and ours agree) and rejects it.
function cancelWaiter(id, reason) {
  const w = waiters.get(id);
  if (w === undefined) return;
  waiters.delete(id);
  native.cancel(id);
  if (w.timer !== undefined) clearTimeout(w.timer);
  if (w.signal !== undefined) w.signal.removeEventListener('abort', w.onAbort);
  w.reject(typeof reason === 'function' ? reason() : reason);
}

// What an acquisition waits for, and so what its promise resolves to: a guard of `kind` on
// lock `h` (the lock's object of native functions) for `key` (a key, or an array of keys).
const KEY = 0;
const KEYS = 1;
const READ = 2;
const WRITE = 3;

function makeGuard(kind, h, key) {
  switch (kind) {
    case KEY:
      return new KeyGuard(h, key);
    case KEYS:
      return new KeysGuard(h, key);
    case READ:
      return new ReadGuard(h);
    default:
      return new WriteGuard(h);
  }
}

function describeWait(kind, key) {
  switch (kind) {
    case KEY:
      return keyWhat(key);
    case KEYS:
      return `${key.length} keys`;
    case READ:
      return 'the read lock';
    default:
      return 'the write lock';
  }
}

function tryNow(kind, h, key) {
  switch (kind) {
    case KEY:
      return h.tryLock(key);
    case KEYS:
      return h.tryLockMany(key);
    case READ:
      return h.tryRead();
    default:
      return h.tryWrite();
  }
}

function startWait(kind, h, key) {
  switch (kind) {
    case KEY:
      return h.lockAsync(key);
    case KEYS:
      return h.lockManyAsync(key);
    case READ:
      return h.readAsync();
    default:
      return h.writeAsync();
  }
}

// Every async acquire: an aborted signal rejects first; a free lock resolves at once (a plain
// try, cheaper than starting a waiter; several keys go straight to the waiter, whose first poll
// tries them in order); timeout 0 rejects; otherwise the addon starts a waiter and `waitFor`
// makes its promise. `tried` says the caller has just tried the lock itself.
function acquire(kind, h, key, opts, tried = false) {
  const { timeout, signal } = opts;
  if (signal !== undefined && signal.aborted) return Promise.reject(signal.reason);
  if (timeout === 0 || (!tried && kind !== KEYS)) {
    if (tryNow(kind, h, key)) return Promise.resolve(makeGuard(kind, h, key));
    if (timeout === 0) return Promise.reject(timeoutError(() => describeWait(kind, key), 0));
  }
  const id = startWait(kind, h, key);
  if (id === 0) return Promise.resolve(makeGuard(kind, h, key));
  return waitFor(id, kind, h, key, timeout, signal);
}

// The promise of waiter `id`, with its timeout and abort handling.
function waitFor(id, kind, h, key, timeout, signal) {
  return new Promise((resolve, reject) => {
    const w = { resolve, reject, kind, h, key, timer: undefined, signal: undefined, onAbort: undefined };
    waiters.set(id, w);
    if (timeout !== undefined && timeout <= MAX_TIMER) {
      w.timer = setTimeout(() => cancelWaiter(id, () => timeoutError(() => describeWait(kind, key), timeout)), timeout);
    }
    if (signal !== undefined) {
      w.signal = signal;
      w.onAbort = () => cancelWaiter(id, signal.reason);
      signal.addEventListener('abort', w.onAbort, { once: true });
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Guards

/** A held lock. `release()` frees it; a second release does nothing. */
class Guard {
  #held = true;

  /** Releases the lock. Throws KEYLOCK_NOT_LOCKED if it was released behind this guard's back. */
  release() {
    if (!this.#held) return;
    this.#held = false;
    const status = this._unlock();
    if (status !== OK) throw statusError(status, this._what());
  }

  /** Whether release() was called. */
  get released() {
    return !this.#held;
  }

  [Symbol.dispose]() {
    this.release();
  }
}

class KeyGuard extends Guard {
  constructor(h, key) {
    super();
    this._h = h;
    this.key = key;
  }

  _unlock() {
    return released(this._h.unlock(this.key));
  }

  _what() {
    return `key ${JSON.stringify(String(this.key))}`;
  }
}

class KeysGuard extends Guard {
  constructor(h, keys) {
    super();
    this._h = h;
    this.keys = keys;
  }

  _unlock() {
    return released(this._h.unlockMany(this.keys));
  }

  _what() {
    return `keys ${this.keys.length}`;
  }
}

class ReadGuard extends Guard {
  constructor(h) {
    super();
    this._h = h;
  }

  _unlock() {
    return released(this._h.readUnlock());
  }

  _what() {
    return 'the read lock';
  }
}

class WriteGuard extends Guard {
  constructor(h) {
    super();
    this._h = h;
  }

  _unlock() {
    return released(this._h.writeUnlock());
  }

  _what() {
    return 'the write lock';
  }
}

// Runs `fn` holding `guard`, releasing it whatever `fn` does.
async function runHolding(guard, fn) {
  try {
    return await fn();
  } finally {
    guard.release();
  }
}

// ---------------------------------------------------------------------------------------------
// KeyPool and StripedLock: the same keyed API over two native classes.

const INTERNAL = Symbol('keylock.internal');

function keyWhat(key) {
  switch (typeof key) {
    case 'string':
      return `key ${JSON.stringify(key)}`;
    case 'number':
    case 'bigint':
      return `key ${key}`;
    default:
      return `a ${key.length}-byte key`;
  }
}

// The handle behind a KeyPool or StripedLock, for the subclasses' own methods.
let handleOf;

class KeyedLock {
  #h;

  static {
    handleOf = (lock) => lock.#h;
  }

  constructor(h) {
    this.#h = h;
  }

  /** Waits for `key`; resolves to a guard. Options: `{ timeout (ms), signal (AbortSignal) }`. */
  lock(key, opts) {
    try {
      checkKey(key);
      opts = parseOptions(opts);
      // The addon checks the key's value (a lone surrogate, an integer out of range) as it
      // tries the lock: that too rejects the promise rather than throwing.
      return acquire(KEY, this.#h, ownKey(key), opts);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Takes `key` if it is free: a guard, or null. */
  tryLock(key) {
    checkKey(key);
    const own = ownKey(key);
    return this.#h.tryLock(own) ? new KeyGuard(this.#h, own) : null;
  }

  /**
   * Blocks the calling thread until `key` is held (or `timeout` ms passed). Meant for worker
   * threads: on the main thread it stops the event loop while it waits.
   */
  lockSync(key, opts) {
    checkKey(key);
    const { timeout } = parseOptions(opts, false);
    const own = ownKey(key);
    const status = this.#h.lockSync(own, timeout);
    if (status !== OK)
      throw status === TIMED_OUT ? timeoutError(keyWhat(key), timeout) : statusError(status, keyWhat(key));
    return new KeyGuard(this.#h, own);
  }

  /** Releases `key` without its guard. Throws KEYLOCK_NOT_LOCKED if it is not locked. */
  unlock(key) {
    checkKey(key);
    const status = released(this.#h.unlock(key));
    if (status !== OK) throw statusError(status, keyWhat(key));
  }

  /** Holds `key` while `fn` runs; returns (or rethrows) what `fn` returns (or throws). */
  async withLock(key, fn, opts) {
    checkKey(key);
    checkFn(fn);
    const h = this.#h;
    const own = ownKey(key);
    // Fast path: a free key without options is taken and released without a guard object.
    if (opts === undefined && h.tryLock(own)) {
      try {
        return await fn();
      } finally {
        const status = released(h.unlock(own));
        if (status !== OK) throw statusError(status, keyWhat(key));
      }
    }
    return runHolding(await acquire(KEY, h, own, parseOptions(opts), opts === undefined), fn);
  }

  /** Waits for all `keys` at once (deadlock-free); resolves to one guard for all of them. */
  lockMany(keys, opts) {
    try {
      const own = checkKeys(keys);
      return acquire(KEYS, this.#h, own, parseOptions(opts));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Takes all `keys` if all are free (a guard), or none (null). */
  tryLockMany(keys) {
    const own = checkKeys(keys);
    return this.#h.tryLockMany(own) ? new KeysGuard(this.#h, own) : null;
  }

  /** Blocks the calling thread until all `keys` are held (see lockSync). */
  lockManySync(keys, opts) {
    const own = checkKeys(keys);
    const { timeout } = parseOptions(opts, false);
    const status = this.#h.lockManySync(own, timeout);
    if (status !== OK)
      throw status === TIMED_OUT
        ? timeoutError(`${own.length} keys`, timeout)
        : statusError(status, `${own.length} keys`);
    return new KeysGuard(this.#h, own);
  }

  /** Releases all `keys` without their guard; throws KEYLOCK_NOT_LOCKED (releasing none) if one is free. */
  unlockMany(keys) {
    const own = checkKeys(keys);
    const status = released(this.#h.unlockMany(own));
    if (status !== OK) throw statusError(status, `${own.length} keys`);
  }

  /** Holds all `keys` while `fn` runs; returns (or rethrows) what `fn` returns (or throws). */
  async withLockMany(keys, fn, opts) {
    checkFn(fn);
    return runHolding(await this.lockMany(keys, opts), fn);
  }

  /** Whether `key` is held now. */
  isLocked(key) {
    checkKey(key);
    return this.#h.isLocked(key);
  }
}

/**
 * An exact per-key lock: one entry per key held or waited for, freed when the last user leaves.
 * Two different keys never block each other.
 */
class KeyPool extends KeyedLock {
  constructor(...args) {
    super(args[0] === INTERNAL ? args[1] : native.poolNew());
  }

  /** The pool called `name`, the same in every worker thread of this process. */
  static shared(name) {
    checkName(name);
    return new KeyPool(INTERNAL, native.poolShared(name));
  }

  /** Keys held now. */
  get size() {
    return native.poolSize(handleOf(this).handle);
  }

  /** Counters: held, waiting, entriesInUse, entriesAllocated, peakHeld, acquisitions, contended. */
  stats() {
    return native.poolStats(handleOf(this).handle);
  }
}

/**
 * A fixed array of locks (stripes); each key maps to one. Fixed memory and one hash per lock,
 * but two keys on the same stripe exclude each other.
 */
class StripedLock extends KeyedLock {
  constructor(...args) {
    if (args[0] === INTERNAL) {
      super(args[1]);
      return;
    }
    super(native.stripedNew(checkStripes(args[0])));
  }

  /**
   * The striped lock called `name`, the same in every worker thread of this process. `stripes`
   * must agree with the existing lock's (after rounding up to a power of two) if there is one;
   * omitted, it takes the existing lock's count, or 1024 for a new lock.
   */
  static shared(name, stripes) {
    checkName(name);
    const wanted = stripes === undefined ? undefined : checkStripes(stripes);
    const h = native.stripedShared(name, wanted === undefined ? DEFAULT_STRIPES : wanted);
    const have = native.stripedStripes(h.handle);
    if (wanted !== undefined && have !== roundStripes(wanted)) {
      throw new KeylockError(
        'KEYLOCK_SHARED_MISMATCH',
        `keylock: the shared StripedLock ${JSON.stringify(name)} has ${have} stripes, not ${roundStripes(wanted)}`,
      );
    }
    return new StripedLock(INTERNAL, h);
  }

  /** The number of stripes (a power of two). */
  get stripes() {
    return native.stripedStripes(handleOf(this).handle);
  }

  /** Stripes held now (keys that share a stripe count once). */
  get size() {
    return native.stripedSize(handleOf(this).handle);
  }

  /** Counters: stripes, held (stripes held now), waiting (stripes with waiters queued). */
  stats() {
    return native.stripedStats(handleOf(this).handle);
  }

  /** The stripe `key` maps to (0 <= stripe < stripes). */
  stripeOf(key) {
    checkKey(key);
    return native.stripedStripeOf(handleOf(this).handle, key);
  }
}

const DEFAULT_STRIPES = 1024;
StripedLock.MAX_STRIPES = native.MAX_STRIPES;

function checkStripes(stripes) {
  if (stripes === undefined) return DEFAULT_STRIPES;
  if (typeof stripes !== 'number') throw typeError(`stripes must be a number, not ${describe(stripes)}`);
  if (!Number.isInteger(stripes) || stripes < 1 || stripes > native.MAX_STRIPES) {
    throw rangeError(`stripes must be an integer from 1 to ${native.MAX_STRIPES}, not ${stripes}`);
  }
  return stripes;
}

function roundStripes(n) {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

// ---------------------------------------------------------------------------------------------
// RwLock

/** A reader-writer lock: many readers or one writer. */
class RwLock {
  #h;

  constructor(...args) {
    this.#h = args[0] === INTERNAL ? args[1] : native.rwNew();
  }

  /** The lock called `name`, the same in every worker thread of this process. */
  static shared(name) {
    checkName(name);
    return new RwLock(INTERNAL, native.rwShared(name));
  }

  /** Waits for a read lock; resolves to a guard. Options: `{ timeout, signal }`. */
  read(opts) {
    try {
      opts = parseOptions(opts);
    } catch (err) {
      return Promise.reject(err);
    }
    return acquire(READ, this.#h, null, opts);
  }

  /** Waits for the write lock; resolves to a guard. Options: `{ timeout, signal }`. */
  write(opts) {
    try {
      opts = parseOptions(opts);
    } catch (err) {
      return Promise.reject(err);
    }
    return acquire(WRITE, this.#h, null, opts);
  }

  /** A read guard if no writer holds the lock, else null. */
  tryRead() {
    return this.#h.tryRead() ? new ReadGuard(this.#h) : null;
  }

  /** The write guard if the lock is free, else null. */
  tryWrite() {
    return this.#h.tryWrite() ? new WriteGuard(this.#h) : null;
  }

  /** Blocks the calling thread for a read lock (for worker threads, like lockSync). */
  readSync(opts) {
    const { timeout } = parseOptions(opts, false);
    const status = this.#h.readSync(timeout);
    if (status !== OK)
      throw status === TIMED_OUT ? timeoutError('the read lock', timeout) : statusError(status, 'the read lock');
    return new ReadGuard(this.#h);
  }

  /** Blocks the calling thread for the write lock (for worker threads, like lockSync). */
  writeSync(opts) {
    const { timeout } = parseOptions(opts, false);
    const status = this.#h.writeSync(timeout);
    if (status !== OK)
      throw status === TIMED_OUT ? timeoutError('the write lock', timeout) : statusError(status, 'the write lock');
    return new WriteGuard(this.#h);
  }

  /** Holds a read lock while `fn` runs; returns (or rethrows) its result. */
  async withRead(fn, opts) {
    checkFn(fn);
    return runHolding(await this.read(opts), fn);
  }

  /** Holds the write lock while `fn` runs; returns (or rethrows) its result. */
  async withWrite(fn, opts) {
    checkFn(fn);
    return runHolding(await this.write(opts), fn);
  }

  /** Releases one read lock without its guard; throws KEYLOCK_NOT_LOCKED if none is held. */
  readUnlock() {
    const status = released(this.#h.readUnlock());
    if (status !== OK) throw statusError(status, 'the read lock');
  }

  /** Releases the write lock without its guard; throws KEYLOCK_NOT_LOCKED if it is free. */
  writeUnlock() {
    const status = released(this.#h.writeUnlock());
    if (status !== OK) throw statusError(status, 'the write lock');
  }

  /** Whether a reader or a writer holds the lock. */
  isLocked() {
    return this.#h.isLocked();
  }

  /** Whether a writer holds the lock. */
  isWriteLocked() {
    return this.#h.isWriteLocked();
  }
}

/**
 * The bytes `key` stands for: what every lock compares, and the same bytes the C, Python and Rust
 * front ends give the same key (a string's UTF-8, an integer's 8 bytes big-endian, a
 * Uint8Array's contents).
 */
function keyBytes(key) {
  checkKey(key);
  return native.keyBytes(key);
}

module.exports = { KeyPool, StripedLock, RwLock, KeylockError, Guard, keyBytes };

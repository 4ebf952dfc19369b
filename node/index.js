'use strict';
// keylock for Node.js: KeyPool, StripedLock and RwLock from the keylock Rust core, and the Web
// Locks API (`keylock.locks`, web-locks.js) on top of them.
//
// This file is the public API. It validates arguments, turns native status numbers into errors
// with a `code`, turns native waiter ids into promises (timeouts, AbortSignal, guards,
// withLock) and maps owner values to the core's owner numbers. It decides nothing about locking
// and keeps no lock state: every acquire and release is one call into the core through the
// addon (which binding.js finds: prebuilt, or built from src/), and a guard is the number of
// its acquisition's record in the addon, so a release ends exactly that acquisition.

const { randomUUID } = require('node:crypto');
const { inspect } = require('node:util');
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
const NOT_OWNER = CODE.KEYLOCK_NOT_OWNER;
const LEASE_EXPIRED = CODE.KEYLOCK_LEASE_EXPIRED;
// Added to a release's status when it woke a waiter of this thread (served at once, below).
const LOCAL_WAKE = native.LOCAL_WAKE;
const FLAG_SHARED = native.FLAG_SHARED;
const FLAG_OWNER_DIED = native.FLAG_OWNER_DIED;
const FLAG_FAILED = native.FLAG_FAILED;
const FLAG_STOLEN = native.FLAG_STOLEN;
const FLAG_LOST = native.FLAG_LOST;
const STATUS_SHIFT = native.STATUS_SHIFT;

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

// The error for a native status. `textId` names the failure's kept text (a waiter's record
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

function nativeCall(f, ...args) {
  try {
    return f(...args);
  } catch (err) {
    throw fromNative(err);
  }
}

function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return `an object (${Object.prototype.toString.call(value)})`;
  return `a ${typeof value}`;
}

// ---------------------------------------------------------------------------------------------
// This thread's state, shared by every copy of this file loaded in the thread (a cleared
// require cache loads a second one; the addon keeps the first dispatcher it was given).
//
// - waiters: pending acquisitions by native waiter id;
// - requests: this thread's Web Locks requests by id (for stolen notices);
// - owners: owner values in use, with their numbers (see holdOwner);
// - out: the buffer the addon writes an acquisition's fence and flags into, records: the one
//   runReady writes the records of completed waiters into (src/out.rs).

const STATE = Symbol.for('keylock.thread.v2');
// Records of completed waiters the records buffer holds (more wait for the next runReady).
const RECORDS_HELD = 256;
let state = globalThis[STATE];
if (state === undefined) {
  state = {
    waiters: new Map(),
    requests: new Map(),
    nextRequest: 1,
    owners: new Map(),
    ownersById: new Map(),
    out: new Uint32Array(new ArrayBuffer(16)),
    records: new Uint32Array(new ArrayBuffer(4 * native.RECORD_WORDS * RECORDS_HELD)),
    clientId: randomUUID(),
    drain: null,
  };
  Object.defineProperty(globalThis, STATE, { value: state });
  state.drain = drain;
  native.init(() => state.drain(), state.out.buffer, state.records.buffer, state.clientId);
}
// Guards whose `signal` watches for a lost lock, by watch id (see Guard#signal); added here so
// that a state made by an older copy of this file gets them too.
state.watched ??= new Map();
state.nextWatch ??= 1;
const OUT = state.out;
const RECORDS = state.records;
const waiters = state.waiters;

// ---------------------------------------------------------------------------------------------
// Owners: the core's owner is a number; a caller's owner is any value (an object, a string, a
// number...). Each value in use gets a number of its own, unique in the process, for as long as
// an acquisition or a pending acquire uses it, so different values never share a number and the
// table holds only the owners in use. Values are compared as a Map compares keys (objects by
// identity, strings by content), within this thread: the same string in two worker threads is
// two owners, since no two threads share an execution context.

function holdOwner(value) {
  let e = state.owners.get(value);
  if (e === undefined) {
    e = { id: native.nextOwnerId(), n: 0, value };
    state.owners.set(value, e);
    state.ownersById.set(e.id, e);
  }
  e.n++;
  return e.id;
}

function dropOwner(id) {
  if (id === 0) return;
  const e = state.ownersById.get(id);
  if (e !== undefined && --e.n === 0) {
    state.owners.delete(e.value);
    state.ownersById.delete(id);
  }
}

// The owner value behind a number, if this thread uses it (null otherwise).
function ownerValue(id) {
  if (id === 0) return null;
  const e = state.ownersById.get(id);
  return e === undefined ? null : e.value;
}

// ---------------------------------------------------------------------------------------------
// Arguments

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

function checkFn(fn) {
  if (typeof fn !== 'function') throw typeError(`fn must be a function, not ${describe(fn)}`);
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

// `{ reentrant, fifo }` of a constructor (and `stripes` for open/shared of a StripedLock).
function makeOptions(opts, stripes) {
  if (opts === undefined || opts === null) opts = {};
  else if (typeof opts !== 'object') throw typeError(`options must be an object, not ${describe(opts)}`);
  const out = {};
  for (const k of ['reentrant', 'fifo']) {
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

function keyWhat(key) {
  switch (typeof key) {
    case 'string':
      return `key ${JSON.stringify(key)}`;
    case 'number':
    case 'bigint':
      return `key ${key}`;
    default:
      return key && typeof key.length === 'number' ? `a ${key.length}-byte key` : 'the key';
  }
}

// ---------------------------------------------------------------------------------------------
// Waiting: native waiter ids become promises.
//
// An async start polls the core's future once. If that settles it, the start returns the slot
// (or minus a status); otherwise it returns 0 and the waiter's id is in OUT[3], and the addon
// calls `dispatch(records)` on this thread when the waiter completes (see src/reactor.rs).

// Polls this thread's woken waiters and settles those that completed. Settling resolves or
// rejects promises and queues microtasks, and calls nothing that polls again, so the records
// buffer stays as runReady wrote it while it is read.
function drain() {
  let n;
  do {
    n = runReady();
    dispatch(RECORDS, n);
  } while (n === RECORDS_HELD);
}

function dispatch(records, n) {
  for (let i = 0; i < n * 5; i += 5) {
    const id = records[i];
    const slot = records[i + 1];
    const flags = records[i + 4];
    if (slot === 0 && flags & FLAG_STOLEN) {
      const req = state.requests.get(id);
      if (req !== undefined) req.stolen();
      continue;
    }
    if (slot === 0 && flags & FLAG_LOST) {
      const lost = state.watched.get(id);
      if (lost !== undefined) {
        state.watched.delete(id);
        lost();
      }
      continue;
    }
    const w = waiters.get(id);
    if (w === undefined) continue;
    waiters.delete(id);
    if (w.timer !== undefined) clearTimeout(w.timer);
    if (w.signal !== undefined) w.signal.removeEventListener('abort', w.onAbort);
    if (flags & FLAG_FAILED) {
      w.fail(new KeylockError('KEYLOCK_INTERNAL', 'keylock: a panic in the addon while waiting'));
    } else if (slot === 0) {
      w.fail(statusError(flags >>> STATUS_SHIFT, w.what, records[i + 2]));
    } else {
      w.granted(slot, records[i + 2], records[i + 3], flags);
    }
  }
}

// The status of a release, after serving the waiter of this thread that it woke, if any: the
// waiter's promise then resolves before the releasing call returns, as with a pure-JavaScript
// lock, instead of on the event loop's next turn.
const runReady = native.runReadyFunction();
function released(status) {
  if (status < LOCAL_WAKE) return status;
  state.drain();
  return status & (LOCAL_WAKE - 1);
}

// Cancels waiter `id` (still pending: the addon's table and ours agree) and fails it.
function cancelWaiter(id, reason) {
  const w = waiters.get(id);
  if (w === undefined) return;
  waiters.delete(id);
  native.cancel(id);
  if (w.timer !== undefined) clearTimeout(w.timer);
  if (w.signal !== undefined) w.signal.removeEventListener('abort', w.onAbort);
  w.fail(typeof reason === 'function' ? reason() : reason);
}

// The promise of the waiter just started (its id is in OUT[3]). `make(slot, lo, hi, flags)`
// builds what it resolves to; `onFail()` undoes the caller's bookkeeping (an owner in use).
function waitFor(make, what, timeout, signal, onFail) {
  const id = OUT[3];
  return new Promise((resolve, reject) => {
    const w = {
      granted: (slot, lo, hi, flags) => resolve(make(slot, lo, hi, flags)),
      fail: (e) => {
        onFail();
        reject(e);
      },
      what,
      timer: undefined,
      signal: undefined,
      onAbort: undefined,
    };
    waiters.set(id, w);
    if (timeout !== undefined && timeout <= MAX_TIMER) {
      w.timer = setTimeout(() => cancelWaiter(id, () => timeoutError(what, timeout)), timeout);
    }
    if (signal !== undefined) {
      w.signal = signal;
      w.onAbort = () => cancelWaiter(id, signal.reason);
      signal.addEventListener('abort', w.onAbort, { once: true });
    }
  });
}

// An acquire's outcome. `r` is what the native call returned: a slot, minus a status, or 0 for
// a waiter (async starts). The fence and flags of a slot are in OUT now.
function outcome(r, make, what, o, owner) {
  if (r > 0) return Promise.resolve(make(r, OUT[0], OUT[1], OUT[2]));
  if (r < 0) {
    dropOwner(owner);
    const status = -r;
    if (status === WOULD_BLOCK && o.timeout === 0) return Promise.reject(timeoutError(what, 0));
    return Promise.reject(statusError(status, what));
  }
  return waitFor(make, what, o.timeout, o.signal, () => dropOwner(owner));
}

// ---------------------------------------------------------------------------------------------
// Guards

const INTERNAL = Symbol('keylock.internal');

// What a guard holds, for its messages and its `key`/`keys` properties.
const ONE_KEY = 0;
const KEYS = 1;
const READ = 2;
const WRITE = 3;

/**
 * A held lock: the record of one acquisition. `release()` ends exactly that acquisition; a
 * second release does nothing. One class for every kind of guard (one key, several keys, a
 * side of an RwLock), so that making one is cheap.
 */
class Guard {
  #h;
  #slot;
  // The fence as a number while it is below 2^53 (always, in practice), else a bigint.
  #fence;
  // The acquisition's flags (mode, owner died) and, from bit 8, what the guard holds.
  #bits;
  #owner;
  #of;
  // The AbortController behind `signal` (made on first use), and its watch id (0: none).
  #ctl;
  #watch = 0;

  constructor(token, h, slot, lo, hi, flags, owner, kind, of) {
    if (token !== INTERNAL) throw new TypeError('Illegal constructor');
    this.#h = h;
    this.#slot = slot;
    this.#fence = hi < 0x200000 ? hi * 0x100000000 + lo : (BigInt(hi) << 32n) | BigInt(lo);
    this.#bits = flags | (kind << 8);
    this.#owner = owner;
    this.#of = kind === KEYS ? { keys: of, fences: h.fences(slot) ?? [] } : of;
  }

  /**
   * Releases the acquisition. Throws a KeylockError if it is no longer current: code
   * KEYLOCK_NOT_OWNER after a force-unlock, KEYLOCK_LEASE_EXPIRED after its lease ran out. It
   * never releases anyone else's.
   */
  release() {
    const slot = this.#slot;
    if (slot === 0) return;
    this.#slot = 0;
    if (this.#watch !== 0) {
      state.watched.delete(this.#watch);
      this.#watch = 0;
    }
    const status = released(this.#h.release(slot));
    if (this.#owner !== 0) dropOwner(this.#owner);
    if (status !== OK) throw statusError(status, () => this.#what());
  }

  /** Whether release() (or dispose) was called. */
  get released() {
    return this.#slot === 0;
  }

  /**
   * The fencing token (a bigint): greater than that of every earlier exclusive acquisition of
   * the same key in this lock. Shared holders read the current one.
   */
  get fence() {
    const f = this.#fence;
    return typeof f === 'bigint' ? f : BigInt(f);
  }

  /** 'exclusive' or 'shared'. */
  get mode() {
    return this.#bits & FLAG_SHARED ? 'shared' : 'exclusive';
  }

  /** Whether the previous holder died holding the lock (cross-process scopes only). */
  get ownerDied() {
    return (this.#bits & FLAG_OWNER_DIED) !== 0;
  }

  /**
   * An AbortSignal that aborts if the lock is lost behind the holder's back: a Redis lease
   * that could not be renewed in time, or a force-unlock that the renewal found. Its reason is a
   * KeylockError with code KEYLOCK_NOT_OWNER. Pass it to work done under the lock (fetch,
   * streams, timers) so that the work stops when the lock is gone. A scope whose holders cannot
   * lose a lock that way (in-process, shared memory), an RwLock guard, or a guard released
   * already, gives a signal that never aborts. The same signal every time. Like
   * AbortSignal.timeout's, a pending signal does not keep the event loop alive by itself.
   */
  get signal() {
    if (this.#ctl !== undefined) return this.#ctl.signal;
    const ctl = new AbortController();
    this.#ctl = ctl;
    const kind = this.#bits >> 8;
    if (this.#slot === 0 || (kind !== ONE_KEY && kind !== KEYS)) return ctl.signal;
    const lost = () => {
      this.#watch = 0;
      ctl.abort(
        new KeylockError(
          STATUSES.get(NOT_OWNER).name,
          `keylock: ${this.#what()}: the lock was lost (its lease could not be renewed in time, or it was force-unlocked)`,
        ),
      );
    };
    let id = state.nextWatch;
    while (state.watched.has(id)) id = (id % 0x1fffffff) + 1;
    state.nextWatch = (id % 0x1fffffff) + 1;
    const r = this.#h.watchLost(this.#slot, id);
    if (r === 2) {
      lost();
    } else if (r === 1) {
      this.#watch = id;
      state.watched.set(id, lost);
    }
    return ctl.signal;
  }

  /** The key (a guard of one key). */
  get key() {
    return this.#bits >> 8 === ONE_KEY ? this.#of : undefined;
  }

  /** The keys (a guard of several keys), as they were given. */
  get keys() {
    return this.#bits >> 8 === KEYS ? this.#of.keys : undefined;
  }

  /** The fence of each acquisition (a guard of several keys), in the lock's canonical order. */
  get fences() {
    return this.#bits >> 8 === KEYS ? this.#of.fences.slice() : undefined;
  }

  /** Whether the acquisition is still the lock's current one (false once released). */
  isCurrent() {
    if (this.#slot === 0) return false;
    const r = this.#h.isCurrent(this.#slot);
    if (typeof r === 'boolean') return r;
    throw statusError(r, () => this.#what());
  }

  /** Milliseconds left on the acquisition's lease; null without a lease (or once released). */
  leaseRemaining() {
    if (this.#slot === 0) return null;
    const ms = this.#h.leaseRemaining(this.#slot);
    return ms < 0 ? null : ms;
  }

  /** Moves the end of the lease to `ms` from now. Throws if it is no longer current. */
  extend(ms) {
    const lease = millis('lease', ms);
    if (lease === undefined) throw typeError('extend(ms) takes a finite number of milliseconds');
    if (this.#slot === 0) throw statusError(NOT_OWNER, () => this.#what());
    const status = this.#h.extend(this.#slot, lease);
    if (status !== OK) throw statusError(status, () => this.#what());
  }

  /** Releases like release(), but ignores an acquisition that is no longer current. */
  [Symbol.dispose]() {
    try {
      this.release();
    } catch (e) {
      if (!(e instanceof KeylockError && (e.code === 'KEYLOCK_NOT_OWNER' || e.code === 'KEYLOCK_LEASE_EXPIRED'))) {
        throw e;
      }
    }
  }

  #what() {
    switch (this.#bits >> 8) {
      case ONE_KEY:
        return keyWhat(this.#of);
      case KEYS:
        return `${this.#of.keys.length} keys`;
      case READ:
        return 'the read lock';
      default:
        return 'the write lock';
    }
  }
}

// Runs `fn(guard)` holding `guard`: returns (or rethrows) what `fn` returns (or throws). A
// release that finds the acquisition no longer current (force-unlocked, or its lease ran out
// while `fn` ran) rejects, unless `fn` failed first.
async function runHolding(guard, fn) {
  let result;
  try {
    result = await fn(guard);
  } catch (err) {
    guard[Symbol.dispose]();
    throw err;
  }
  guard.release();
  return result;
}

// ---------------------------------------------------------------------------------------------
// KeyPool and StripedLock: the same keyed API over any scope's keyed lock.

// The native handle behind a KeyPool or StripedLock, for the subclasses and the LockManager.
let handleOf;

class KeyedLock {
  #h;

  static {
    handleOf = (lock) => lock.#h;
  }

  #name;

  constructor(h, name) {
    this.#h = h;
    // Kept as printed: a URL's password is never stored here.
    this.#name = native.redactScopeName(name);
  }

  /**
   * The name it was opened with ('local:' for one made in this process), a URL's password
   * replaced by `***`.
   */
  get name() {
    return this.#name;
  }

  [inspect.custom](depth, options, inspect) {
    return `${this.constructor.name} ${inspect({ name: this.#name }, options)}`;
  }

  /**
   * Waits for `key`; resolves to its guard. Options: `{ mode, lease, owner, timeout (ms),
   * signal (AbortSignal) }`.
   */
  lock(key, opts) {
    try {
      return this.#lock(key, parseOptions(opts), false);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  #lock(key, o, tried) {
    if (o.signal !== undefined && o.signal.aborted) return Promise.reject(o.signal.reason);
    const h = this.#h;
    let owner = 0;
    const make = (slot, lo, hi, flags) => new Guard(INTERNAL, h, slot, lo, hi, flags, owner, ONE_KEY, key);
    const what = () => keyWhat(key);
    if (o.plain && !tried) {
      // A free key is taken with a plain try, cheaper than starting a waiter.
      const r = h.tryLock(key);
      if (r > 0) return Promise.resolve(make(r, OUT[0], OUT[1], OUT[2]));
    }
    if (o.owner !== undefined) owner = holdOwner(o.owner);
    let r;
    try {
      r = o.timeout === 0 ? h.tryLockWith(key, o.mode, o.lease, owner) : h.lockAsync(key, o.mode, o.lease, owner);
    } catch (err) {
      dropOwner(owner);
      throw err;
    }
    return outcome(r, make, what, o, owner);
  }

  /** Takes `key` now if it can be: a guard, or null. Options: `{ mode, lease, owner }`. */
  tryLock(key, opts) {
    const h = this.#h;
    if (opts === undefined) {
      const r = h.tryLock(key);
      if (r > 0) return new Guard(INTERNAL, h, r, OUT[0], OUT[1], OUT[2], 0, ONE_KEY, key);
      if (r === -WOULD_BLOCK) return null;
      throw statusError(-r, () => keyWhat(key));
    }
    const o = parseOptions(opts, true);
    const owner = o.owner === undefined ? 0 : holdOwner(o.owner);
    let r;
    try {
      r = h.tryLockWith(key, o.mode, o.lease, owner);
    } catch (err) {
      dropOwner(owner);
      throw err;
    }
    if (r > 0) return new Guard(INTERNAL, h, r, OUT[0], OUT[1], OUT[2], owner, ONE_KEY, key);
    dropOwner(owner);
    if (r === -WOULD_BLOCK) return null;
    throw statusError(-r, () => keyWhat(key));
  }

  /**
   * Blocks the calling thread until `key` is held (or `timeout` ms passed). Meant for worker
   * threads: on the main thread it stops the event loop while it waits.
   */
  lockSync(key, opts) {
    const o = parseOptions(opts, true);
    const owner = o.owner === undefined ? 0 : holdOwner(o.owner);
    let r;
    try {
      r = this.#h.lockSync(key, o.mode, o.lease, owner, o.timeout);
    } catch (err) {
      dropOwner(owner);
      throw err;
    }
    if (r > 0) return new Guard(INTERNAL, this.#h, r, OUT[0], OUT[1], OUT[2], owner, ONE_KEY, key);
    dropOwner(owner);
    if (-r === TIMED_OUT || (-r === WOULD_BLOCK && o.timeout === 0)) throw timeoutError(keyWhat(key), o.timeout);
    throw statusError(-r, () => keyWhat(key));
  }

  /**
   * Holds `key` while `fn(guard)` runs; returns (or rethrows) what `fn` returns (or throws).
   * Options as for lock().
   */
  async withLock(key, fn, opts) {
    checkFn(fn);
    const h = this.#h;
    let guard;
    if (opts === undefined) {
      // The fast path: a free key, no options.
      const r = h.tryLock(key);
      guard =
        r > 0
          ? new Guard(INTERNAL, h, r, OUT[0], OUT[1], OUT[2], 0, ONE_KEY, key)
          : await this.#lock(key, NO_OPTIONS, r === -WOULD_BLOCK);
    } else {
      guard = await this.#lock(key, parseOptions(opts), false);
    }
    let result;
    try {
      result = await fn(guard);
    } catch (err) {
      guard[Symbol.dispose]();
      throw err;
    }
    guard.release();
    return result;
  }

  #many(keys, o) {
    if (!Array.isArray(keys)) throw typeError(`keys must be an array of keys, not ${describe(keys)}`);
    if (Array.isArray(o.mode) && o.mode.length !== keys.length) {
      throw typeError(`mode has ${o.mode.length} entries for ${keys.length} keys`);
    }
    return keys.slice();
  }

  /**
   * Waits for all `keys` at once (deadlock-free); resolves to one guard for all of them.
   * `mode` may be one mode for all keys or an array of one per key.
   */
  lockMany(keys, opts) {
    try {
      const o = parseOptions(opts, false, true);
      const own = this.#many(keys, o);
      if (o.signal !== undefined && o.signal.aborted) return Promise.reject(o.signal.reason);
      const h = this.#h;
      const owner = o.owner === undefined ? 0 : holdOwner(o.owner);
      const make = (slot, lo, hi, flags) => new Guard(INTERNAL, h, slot, lo, hi, flags, owner, KEYS, own);
      const what = () => `${own.length} keys`;
      let r;
      try {
        r = o.timeout === 0 ? h.tryLockMany(own, o.mode, o.lease, owner) : h.lockManyAsync(own, o.mode, o.lease, owner);
      } catch (err) {
        dropOwner(owner);
        throw err;
      }
      return outcome(r, make, what, o, owner);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Takes all `keys` if all are free now (a guard), or none (null). */
  tryLockMany(keys, opts) {
    const o = parseOptions(opts, true, true);
    const own = this.#many(keys, o);
    const owner = o.owner === undefined ? 0 : holdOwner(o.owner);
    let r;
    try {
      r = this.#h.tryLockMany(own, o.mode, o.lease, owner);
    } catch (err) {
      dropOwner(owner);
      throw err;
    }
    if (r > 0) return new Guard(INTERNAL, this.#h, r, OUT[0], OUT[1], OUT[2], owner, KEYS, own);
    dropOwner(owner);
    if (r === -WOULD_BLOCK) return null;
    throw statusError(-r, `${own.length} keys`);
  }

  /** Blocks the calling thread until all `keys` are held (see lockSync). */
  lockManySync(keys, opts) {
    const o = parseOptions(opts, true, true);
    const own = this.#many(keys, o);
    const owner = o.owner === undefined ? 0 : holdOwner(o.owner);
    let r;
    try {
      r = this.#h.lockManySync(own, o.mode, o.lease, owner, o.timeout);
    } catch (err) {
      dropOwner(owner);
      throw err;
    }
    if (r > 0) return new Guard(INTERNAL, this.#h, r, OUT[0], OUT[1], OUT[2], owner, KEYS, own);
    dropOwner(owner);
    if (-r === TIMED_OUT || (-r === WOULD_BLOCK && o.timeout === 0))
      throw timeoutError(`${own.length} keys`, o.timeout);
    throw statusError(-r, `${own.length} keys`);
  }

  /** Holds all `keys` while `fn(guard)` runs; returns (or rethrows) what `fn` returns (or throws). */
  async withLockMany(keys, fn, opts) {
    checkFn(fn);
    return runHolding(await this.lockMany(keys, opts), fn);
  }

  /**
   * Frees `key` whoever holds it (in either mode), advancing its fence: the holders' guards
   * then release nothing (their release() throws KEYLOCK_NOT_OWNER). For a lock left behind.
   * Whether it was held.
   */
  forceUnlock(key) {
    const r = this.#h.forceUnlock(key);
    if (r < 0) throw statusError(-r, () => keyWhat(key));
    return (released(r) & 1) === 1;
  }

  /** Whether `key` is held now (a snapshot). */
  isLocked(key) {
    const r = this.#h.isLocked(key);
    if (typeof r === 'boolean') return r;
    throw statusError(-r, () => keyWhat(key));
  }

  /**
   * Who holds `key` and how, a snapshot: `{ fence, mode, holders, holds, owner, leaseRemaining,
   * waiters }`, or null when it is free.
   */
  info(key) {
    const r = this.#h.info(key);
    if (r === null) return null;
    if (typeof r === 'number') throw statusError(-r, () => keyWhat(key));
    const [fence, shared, holders, holds, owner, lease, waiting] = r;
    return {
      fence,
      mode: shared ? 'shared' : 'exclusive',
      holders,
      holds,
      owner: ownerValue(owner),
      leaseRemaining: lease < 0 ? null : lease,
      waiters: waiting,
    };
  }

  /** Whether owners reenter (the lock was made with `reentrant: true`). */
  get reentrant() {
    return native.keyedMade(this.#h.handle).reentrant;
  }

  /** Whether every release hands the key to the next waiter in order (`fifo: true`). */
  get fifo() {
    return native.keyedMade(this.#h.handle).fifo;
  }
}

/**
 * An exact per-key lock: one entry per key held or waited for, freed when the last user leaves.
 * Two different keys never block each other. Options: `{ reentrant, fifo }`.
 */
class KeyPool extends KeyedLock {
  constructor(...args) {
    if (args[0] === INTERNAL) {
      super(args[1], args[2]);
      return;
    }
    super(nativeCall(native.keyedOpen, 'local:', makeOptions(args[0])), 'local:');
  }

  /**
   * The pool called `name`, the same in every worker thread of this process. Options given must
   * agree with the existing pool's, if there is one (else KEYLOCK_SHARED_MISMATCH).
   */
  static shared(name, opts) {
    checkName(name);
    return new KeyPool(INTERNAL, nativeCall(native.keyedShared, name, false, makeOptions(opts)), name);
  }

  /**
   * The pool that the lock name `name` names: 'local:' (or '') for a new in-process pool,
   * 'shm:NAME' for one in shared memory, 'redis://HOST:PORT/DB' for one in Redis (each where this
   * build of keylock has the scope: cargo features shm and redis). Options `{ reentrant, fifo,
   * capacity }`; `capacity` sizes a shared-memory region this open creates.
   */
  static open(name, opts) {
    checkScope(name);
    return new KeyPool(INTERNAL, nativeCall(native.keyedOpen, name, makeOptions(opts)), name);
  }

  /** Keys held now: by anyone in the scope, or by this process where the scope cannot tell (Redis). */
  get size() {
    return nativeCall(native.keyedLen, handleOf(this).handle);
  }

  /**
   * Counts, the same fields on every scope (null where the scope cannot tell): held, waiting,
   * sharedHolds, heldHere, waitingHere, capacity, entriesInUse, entriesAllocated, peakInUse,
   * contended.
   */
  stats() {
    return nativeCall(native.keyedStats, handleOf(this).handle);
  }
}

/**
 * A fixed array of locks (stripes); each key maps to one. Fixed memory and one hash per lock,
 * but two keys on the same stripe exclude each other.
 */
class StripedLock extends KeyedLock {
  constructor(...args) {
    if (args[0] === INTERNAL) {
      super(args[1], args[2]);
      return;
    }
    const opts = makeOptions(args[1], args[0] === undefined ? DEFAULT_STRIPES : args[0]);
    super(nativeCall(native.keyedOpen, 'local:', opts), 'local:');
  }

  /**
   * The striped lock called `name`, the same in every worker thread of this process. `stripes`
   * (and the options) must agree with the existing lock's, after rounding up to a power of two,
   * if there is one; omitted, it takes the existing lock's count, or 1024 for a new lock.
   */
  static shared(name, stripes, opts) {
    checkName(name);
    const made = makeOptions(opts, stripes);
    return new StripedLock(INTERNAL, nativeCall(native.keyedShared, name, true, made), name);
  }

  /** The striped lock that `name` names (see KeyPool.open); `{ stripes, reentrant, fifo, capacity }`. */
  static open(name, opts) {
    checkScope(name);
    const stripes = opts === undefined || opts === null ? undefined : opts.stripes;
    const made = makeOptions(opts, stripes === undefined ? DEFAULT_STRIPES : stripes);
    return new StripedLock(INTERNAL, nativeCall(native.keyedOpen, name, made), name);
  }

  /** The number of stripes (a power of two). */
  get stripes() {
    return native.keyedMade(handleOf(this).handle).stripes;
  }

  /** Stripes held now (keys that share a stripe count once). */
  get size() {
    return nativeCall(native.keyedLen, handleOf(this).handle);
  }

  /**
   * Counts, on every scope: stripes, and the fields of KeyPool's stats() with stripes for keys
   * (held: stripes held now; waiting: waiters queued).
   */
  stats() {
    const s = nativeCall(native.keyedStats, handleOf(this).handle);
    return { stripes: s.capacity, ...s };
  }

  /** The stripe `key` maps to (0 <= stripe < stripes; null if the scope does not say). */
  stripeOf(key) {
    return native.stripedStripeOf(handleOf(this).handle, key);
  }
}

const DEFAULT_STRIPES = 1024;
StripedLock.MAX_STRIPES = native.MAX_STRIPES;

function checkStripes(stripes) {
  if (typeof stripes !== 'number') throw typeError(`stripes must be a number, not ${describe(stripes)}`);
  if (!Number.isInteger(stripes) || stripes < 1 || stripes > native.MAX_STRIPES) {
    throw rangeError(`stripes must be an integer from 1 to ${native.MAX_STRIPES}, not ${stripes}`);
  }
  return stripes;
}

// ---------------------------------------------------------------------------------------------
// RwLock

const RW_READ = { what: 'the read lock', mode: SHARED };
const RW_WRITE = { what: 'the write lock', mode: EXCLUSIVE };

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

  #acquire(side, opts) {
    try {
      const o = parseOptions(opts);
      if (o.signal !== undefined && o.signal.aborted) return Promise.reject(o.signal.reason);
      const h = this.#h;
      const kind = side === RW_READ ? READ : WRITE;
      const make = (slot, lo, hi, flags) => new Guard(INTERNAL, h, slot, lo, hi, flags, 0, kind, null);
      const read = side === RW_READ;
      const r = o.timeout === 0 ? (read ? h.tryRead() : h.tryWrite()) : read ? h.readAsync() : h.writeAsync();
      return outcome(r, make, side.what, o, 0);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  #sync(side, opts) {
    const o = parseOptions(opts, true);
    const r = side === RW_READ ? this.#h.readSync(o.timeout) : this.#h.writeSync(o.timeout);
    if (r > 0) return new Guard(INTERNAL, this.#h, r, OUT[0], OUT[1], OUT[2], 0, side === RW_READ ? READ : WRITE, null);
    if (-r === TIMED_OUT || (-r === WOULD_BLOCK && o.timeout === 0)) throw timeoutError(side.what, o.timeout);
    throw statusError(-r, side.what);
  }

  #try(side) {
    const r = side === RW_READ ? this.#h.tryRead() : this.#h.tryWrite();
    if (r > 0) return new Guard(INTERNAL, this.#h, r, OUT[0], OUT[1], OUT[2], 0, side === RW_READ ? READ : WRITE, null);
    if (r === -WOULD_BLOCK) return null;
    throw statusError(-r, side.what);
  }

  /** Waits for a read lock; resolves to a guard. Options: `{ timeout, signal }`. */
  read(opts) {
    return this.#acquire(RW_READ, opts);
  }

  /** Waits for the write lock; resolves to a guard (its `fence` rises with every writer). */
  write(opts) {
    return this.#acquire(RW_WRITE, opts);
  }

  /** A read guard if no writer holds the lock, else null. */
  tryRead() {
    return this.#try(RW_READ);
  }

  /** The write guard if the lock is free, else null. */
  tryWrite() {
    return this.#try(RW_WRITE);
  }

  /** Blocks the calling thread for a read lock (for worker threads, like lockSync). */
  readSync(opts) {
    return this.#sync(RW_READ, opts);
  }

  /** Blocks the calling thread for the write lock (for worker threads, like lockSync). */
  writeSync(opts) {
    return this.#sync(RW_WRITE, opts);
  }

  /** Holds a read lock while `fn(guard)` runs; returns (or rethrows) its result. */
  async withRead(fn, opts) {
    checkFn(fn);
    return runHolding(await this.read(opts), fn);
  }

  /** Holds the write lock while `fn(guard)` runs; returns (or rethrows) its result. */
  async withWrite(fn, opts) {
    checkFn(fn);
    return runHolding(await this.write(opts), fn);
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
  return native.keyBytes(key);
}

/**
 * Removes the shared-memory region that `name` ('shm:NAME') names; whether it existed.
 * Processes that have it open keep using it; the next open of the name makes a new, empty
 * region. Any other name throws a KeylockError with code KEYLOCK_INVALID_ARGUMENT.
 */
function unlink(name) {
  checkScope(name);
  return nativeCall(native.unlink, name);
}

module.exports = { KeyPool, StripedLock, RwLock, KeylockError, Guard, keyBytes, unlink };

// The Web Locks API (web-locks.js) needs the pieces above.
const webLocks = require('./web-locks.js')({
  native,
  state,
  waiters,
  OUT,
  INTERNAL,
  KeyedLock,
  handleOf: (lock) => handleOf(lock),
  released,
  statusError,
  WOULD_BLOCK,
  FLAG_STOLEN,
});
module.exports.LockManager = webLocks.LockManager;
module.exports.Lock = webLocks.Lock;
Object.defineProperty(module.exports, 'locks', { enumerable: true, get: webLocks.locks });

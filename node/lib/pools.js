'use strict';
// KeyPool and StripedLock: the same keyed API over any scope's keyed lock (in-process, shared
// memory, Redis), and unlink() for a shared-memory region.

const { inspect } = require('node:util');
const native = require('./native.js');
const { INFO } = require('./records.js');
const { WOULD_BLOCK, TIMED_OUT, statusError, timeoutError, typeError, nativeCall, describe } = require('./errors.js');
const { keyWhat } = require('./keys.js');
const { NO_OPTIONS, parseOptions, makeOptions, checkFn, checkName, checkScope } = require('./options.js');
const { holdOwner, dropOwner, ownerValue } = require('./owners.js');
const { released, taken, outcome, coreTimeout } = require('./waiting.js');
const { INTERNAL, ONE_KEY, KEYS, Guard, guardNow } = require('./guard.js');
const { runHolding } = require('./holding.js');
const { wrapKeyed } = require('./wrap.js');
const { metricsOf } = require('./metrics.js');
const { WAIT, nameHandle, publishWait, startClock } = require('./diagnostics.js');

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
    nameHandle(h, this.#name);
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
      return this.#lock(key, parseOptions(opts));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  // An acquire of one key with options `o`; with `fn` (withLock's), the guard is held while `fn`
  // runs and the promise is of `fn`'s outcome.
  #lock(key, o, fn) {
    if (o.signal !== undefined && o.signal.aborted) return Promise.reject(o.signal.reason);
    const h = this.#h;
    const owner = o.owner === undefined ? 0 : holdOwner(o.owner);
    let r;
    try {
      // A plain acquire takes a free key in the one native call that starts a waiter otherwise.
      r = taken(
        o.timeout === 0
          ? h.tryLockWith(key, o.mode, o.lease, owner)
          : o.plain
            ? h.lock(key, coreTimeout(o.timeout))
            : h.lockAsync(key, o.mode, o.lease, owner, coreTimeout(o.timeout)),
      );
    } catch (err) {
      dropOwner(owner);
      throw err;
    }
    return this.#started(key, r, o, owner, fn);
  }

  // The outcome of a native acquire of one key (`r`: a slot, minus a status, or 0 for the waiter
  // it started) made with options `o` for `owner`; with `fn`, the guard is held while `fn` runs
  // (see waiting.js's `outcome`).
  #started(key, r, o, owner, fn) {
    const h = this.#h;
    if (WAIT.hasSubscribers && r === 0) publishWait(h, key, undefined, o.mode, undefined, o.timeout);
    const make = (slot, lo, hi, flags) => new Guard(INTERNAL, h, slot, lo, hi, flags, owner, ONE_KEY, key);
    return outcome(r, make, () => keyWhat(key), o, owner, true, fn);
  }

  /** Takes `key` now if it can be: a guard, or null. Options: `{ mode, lease, owner }`. */
  tryLock(key, opts) {
    const h = this.#h;
    if (opts === undefined) {
      const r = taken(h.tryLock(key));
      if (r > 0) return guardNow(h, r, 0, ONE_KEY, key);
      if (r === -WOULD_BLOCK) return null;
      throw statusError(-r, () => keyWhat(key));
    }
    const o = parseOptions(opts, true);
    const owner = o.owner === undefined ? 0 : holdOwner(o.owner);
    let r;
    try {
      r = taken(h.tryLockWith(key, o.mode, o.lease, owner));
    } catch (err) {
      dropOwner(owner);
      throw err;
    }
    if (r > 0) return guardNow(h, r, owner, ONE_KEY, key);
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
    const started = startClock();
    let r;
    try {
      r = taken(this.#h.lockSync(key, o.mode, o.lease, owner, o.timeout));
    } catch (err) {
      dropOwner(owner);
      throw err;
    }
    if (r > 0) return guardNow(this.#h, r, owner, ONE_KEY, key, started);
    dropOwner(owner);
    if (-r === TIMED_OUT || (-r === WOULD_BLOCK && o.timeout === 0)) throw timeoutError(keyWhat(key), o.timeout);
    throw statusError(-r, () => keyWhat(key));
  }

  /**
   * Holds `key` while `fn(guard)` runs; returns (or rethrows) what `fn` returns (or throws).
   * Options as for lock().
   */
  withLock(key, fn, opts) {
    try {
      if (opts === undefined && typeof fn === 'function') {
        // No options: a free key is taken in one native call, and no promise is made before `fn`.
        const h = this.#h;
        const r = taken(h.lock(key));
        if (r > 0) return runHolding(guardNow(h, r, 0, ONE_KEY, key), fn);
        return this.#started(key, r, NO_OPTIONS, 0, fn);
      }
      checkFn(fn);
      return this.#lock(key, parseOptions(opts), fn);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * An async function that runs `fn(...args)` holding key `keyOf(...args)` (as withLock does);
   * options as for lock(), checked now. It has `fn`'s name and length.
   */
  wrap(fn, keyOf, opts) {
    parseOptions(opts);
    const own = opts === undefined || opts === null ? undefined : { ...opts };
    return wrapKeyed((key, body) => this.withLock(key, body, own), fn, keyOf);
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
    return this.#lockMany(keys, opts);
  }

  // lockMany; with `fn` (withLockMany's), the guard is held while `fn` runs and the promise is of
  // `fn`'s outcome (see waiting.js's `outcome`).
  #lockMany(keys, opts, fn) {
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
        r = taken(
          o.timeout === 0
            ? h.tryLockMany(own, o.mode, o.lease, owner)
            : h.lockManyAsync(own, o.mode, o.lease, owner, coreTimeout(o.timeout)),
        );
      } catch (err) {
        dropOwner(owner);
        throw err;
      }
      if (WAIT.hasSubscribers && r === 0) publishWait(h, undefined, own, o.mode, undefined, o.timeout);
      return outcome(r, make, what, o, owner, true, fn);
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
      r = taken(this.#h.tryLockMany(own, o.mode, o.lease, owner));
    } catch (err) {
      dropOwner(owner);
      throw err;
    }
    if (r > 0) return guardNow(this.#h, r, owner, KEYS, own);
    dropOwner(owner);
    if (r === -WOULD_BLOCK) return null;
    throw statusError(-r, `${own.length} keys`);
  }

  /** Blocks the calling thread until all `keys` are held (see lockSync). */
  lockManySync(keys, opts) {
    const o = parseOptions(opts, true, true);
    const own = this.#many(keys, o);
    const owner = o.owner === undefined ? 0 : holdOwner(o.owner);
    const started = startClock();
    let r;
    try {
      r = taken(this.#h.lockManySync(own, o.mode, o.lease, owner, o.timeout));
    } catch (err) {
      dropOwner(owner);
      throw err;
    }
    if (r > 0) return guardNow(this.#h, r, owner, KEYS, own, started);
    dropOwner(owner);
    if (-r === TIMED_OUT || (-r === WOULD_BLOCK && o.timeout === 0))
      throw timeoutError(`${own.length} keys`, o.timeout);
    throw statusError(-r, `${own.length} keys`);
  }

  /** Holds all `keys` while `fn(guard)` runs; returns (or rethrows) what `fn` returns (or throws). */
  withLockMany(keys, fn, opts) {
    try {
      checkFn(fn);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#lockMany(keys, opts, fn);
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
   * waiters, units }` (`units`: the holders, for a lock), or null when it is free.
   */
  info(key) {
    const r = this.#h.info(key);
    if (r === null) return null;
    if (typeof r === 'number') throw statusError(-r, () => keyWhat(key));
    const lease = r[INFO.leaseRemaining];
    return {
      fence: r[INFO.fence],
      mode: r[INFO.shared] ? 'shared' : 'exclusive',
      holders: r[INFO.holders],
      holds: r[INFO.holds],
      owner: ownerValue(r[INFO.owner]),
      leaseRemaining: lease < 0 ? null : lease,
      waiters: r[INFO.waiters],
      units: r[INFO.units],
    };
  }

  /**
   * The core's counts and histograms for this lock object, a frozen snapshot (totals since it
   * was opened; durations in ms): `{ acquired, contended, timedOut, wouldBlock, cancelled,
   * leaseExpired, ownerDied, lost, forceUnlocked, wait, hold }`, each histogram `{ count,
   * sumMs, maxMs, buckets, quantile(q) }`. Null for one opened without `{ metrics: true }`.
   */
  metrics() {
    return metricsOf(this.#h);
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

/**
 * Removes the shared-memory region that `name` ('shm:NAME') names; whether it existed.
 * Processes that have it open keep using it; the next open of the name makes a new, empty
 * region. Any other name throws a KeylockError with code KEYLOCK_INVALID_ARGUMENT.
 */
function unlink(name) {
  checkScope(name);
  return nativeCall(native.unlink, name);
}

module.exports = { KeyedLock, KeyPool, StripedLock, handleOf, unlink };

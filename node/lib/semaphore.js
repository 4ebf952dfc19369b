'use strict';
// Semaphore: the core's keyed semaphore (at most `permits` units of each key held at once,
// weighted, strict FIFO per key, a fence per acquisition), reached through the same keyed
// lock object as KeyPool (`open(name, { permits })`). Nothing here counts units or orders
// waiters: an acquire passes its weight to the core, which grants or refuses it.

const { inspect } = require('node:util');
const native = require('./native.js');
const { OUTPUT, INFO } = require('./records.js');
const { WOULD_BLOCK, statusError, timeoutError, typeError, rangeError, nativeCall, describe } = require('./errors.js');
const { keyWhat } = require('./keys.js');
const { SHARED, parsePermitOptions, makeOptions, units, checkFn, checkScope } = require('./options.js');
const { state } = require('./thread.js');
const { released, taken, outcome, coreTimeout } = require('./waiting.js');
const { INTERNAL, ONE_KEY, Guard } = require('./guard.js');
const { runHolding } = require('./holding.js');
const { wrapKeyed } = require('./wrap.js');
const { metricsOf } = require('./metrics.js');
const { WAIT, ACQUIRE, RELEASE, nameHandle, publishWait, publishAcquire } = require('./diagnostics.js');

const OUT = state.out;
const OUT_FENCE_LOW = OUTPUT.fenceLow;
const OUT_FENCE_HIGH = OUTPUT.fenceHigh;
const OUT_FLAGS = OUTPUT.flags;
/** The options of a plain acquire: one unit, no lease. */
const ONE = parsePermitOptions(undefined);

/**
 * A semaphore's acquisition of `weight` units of one key: a Guard (release(), extend(), fence,
 * isCurrent(), [Symbol.dispose]) that also says its weight and works with `await using`.
 */
class Permit extends Guard {
  #weight;

  constructor(token, h, slot, lo, hi, flags, key, weight) {
    super(token, h, slot, lo, hi, flags, 0, ONE_KEY, key);
    this.#weight = weight;
  }

  /** The units it holds. */
  get weight() {
    return this.#weight;
  }

  /** Releases like [Symbol.dispose]() (what `await using` calls). */
  async [Symbol.asyncDispose]() {
    this[Symbol.dispose]();
  }
}

// The error of an acquire that failed at once with `status`. A weight the core refuses (0, or
// more than the permits) is a bad argument: a RangeError with code KEYLOCK_INVALID_ARGUMENT and
// the core's reason, as the package reports bad arguments.
function acquireError(status, key, timeout) {
  if (status === WOULD_BLOCK && timeout === 0) return timeoutError(keyWhat(key), 0);
  const err = statusError(status, () => keyWhat(key));
  return err.code === 'KEYLOCK_INVALID_ARGUMENT' ? rangeError(err.message.replace(/^keylock: /, '')) : err;
}

// The permit of the acquisition a try just made (slot `slot`): its fence and flags are in the
// output buffer.
function permitNow(h, slot, key, weight) {
  const permit = new Permit(INTERNAL, h, slot, OUT[OUT_FENCE_LOW], OUT[OUT_FENCE_HIGH], OUT[OUT_FLAGS], key, weight);
  if (ACQUIRE.hasSubscribers || RELEASE.hasSubscribers) publishAcquire(permit, 0);
  return permit;
}

// `{ permits, ... }` for the core's open: the lock options given (which a semaphore refuses)
// and the permits.
function semaphoreOptions(permits, opts) {
  return { ...makeOptions(opts), permits: units('permits', permits) };
}

/**
 * At most `permits` units of each key held at once. An acquire takes `weight` units (default
 * 1) and waits in strict FIFO order per key: a heavy request at the head of a key's queue is
 * never passed by lighter ones. Every acquisition has its own fence, greater than every earlier
 * one of the key.
 */
class Semaphore {
  #h;
  #name;
  #permits;

  constructor(...args) {
    if (args[0] === INTERNAL) {
      this.#h = args[1];
      this.#name = native.redactScopeName(args[2]);
    } else {
      if (args[0] === undefined) throw typeError('new Semaphore(permits) needs its permits');
      this.#h = nativeCall(native.keyedOpen, 'local:', semaphoreOptions(args[0], args[1]));
      this.#name = 'local:';
    }
    this.#permits = native.keyedMade(this.#h.handle).permits;
    nameHandle(this.#h, this.#name);
  }

  /**
   * The semaphore that the lock name `name` names, with `permits` units per key: 'local:' (or
   * '') for a new in-process one, 'shm:NAME' for one shared by the processes of this machine,
   * 'redis://...' for one shared by every process that opens the same prefix. Every open of a
   * shared one must give the same permits (KEYLOCK_INCOMPATIBLE otherwise).
   */
  static open(name, opts) {
    checkScope(name);
    if (opts === undefined || opts === null || typeof opts !== 'object') {
      throw typeError(`Semaphore.open(name, { permits }) needs its options, not ${describe(opts)}`);
    }
    const h = nativeCall(native.keyedOpen, name, semaphoreOptions(opts.permits, opts));
    return new Semaphore(INTERNAL, h, name);
  }

  /** The name it was opened with, a URL's password replaced by `***`. */
  get name() {
    return this.#name;
  }

  /** The units of each key that may be held at once. */
  get permits() {
    return this.#permits;
  }

  [inspect.custom](depth, options, inspect) {
    return `Semaphore ${inspect({ name: this.#name, permits: this.#permits }, options)}`;
  }

  /**
   * Waits for `weight` units of `key`; resolves to a Permit. Options: `{ weight = 1, lease,
   * timeout (ms), signal (AbortSignal) }`. A rejected acquire holds nothing.
   */
  acquire(key, opts) {
    try {
      return this.#acquire(key, parsePermitOptions(opts));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  // An acquire with options `o`; with `fn` (withPermit's), the permit is held while `fn` runs and
  // the promise is of `fn`'s outcome.
  #acquire(key, o, fn) {
    if (o.signal !== undefined && o.signal.aborted) return Promise.reject(o.signal.reason);
    const h = this.#h;
    const weight = o.weight;
    // One unit without a lease: a free key taken in the one native call that starts a waiter
    // otherwise.
    const r = taken(
      o.timeout === 0
        ? h.tryAcquire(key, weight, o.lease)
        : weight === 1 && o.lease === undefined
          ? h.lock(key, coreTimeout(o.timeout))
          : h.acquireAsync(key, weight, o.lease, coreTimeout(o.timeout)),
    );
    if (r < 0) return Promise.reject(acquireError(-r, key, o.timeout));
    return this.#started(key, r, o, fn);
  }

  // The outcome of a native acquire of `o.weight` units of `key` that did not fail (`r`: a slot,
  // or 0 for the waiter it started); with `fn`, the permit is held while `fn` runs (see
  // waiting.js's `outcome`).
  #started(key, r, o, fn) {
    const h = this.#h;
    const weight = o.weight;
    // A semaphore's units are held shared, as its permits' `mode` says.
    if (WAIT.hasSubscribers && r === 0) publishWait(h, key, undefined, SHARED, weight, o.timeout);
    const make = (slot, lo, hi, flags) => new Permit(INTERNAL, h, slot, lo, hi, flags, key, weight);
    return outcome(r, make, () => keyWhat(key), o, 0, true, fn);
  }

  /**
   * Takes `weight` units of `key` now if it can (a Permit), else null (the units are held, or
   * others wait ahead). Options: `{ weight = 1, lease }`.
   */
  tryAcquire(key, opts) {
    const o = parsePermitOptions(opts, true);
    const h = this.#h;
    const r = taken(h.tryAcquire(key, o.weight, o.lease));
    if (r > 0) return permitNow(h, r, key, o.weight);
    if (r === -WOULD_BLOCK) return null;
    throw acquireError(-r, key, undefined);
  }

  /**
   * Holds `weight` units of `key` while `fn(permit)` runs; returns (or rethrows) what `fn`
   * returns (or throws). Released when `fn` returns, throws or rejects. Options as for acquire().
   */
  withPermit(key, fn, opts) {
    try {
      if (opts === undefined && typeof fn === 'function') {
        // One unit of a free key, taken in one native call before any promise is made.
        const h = this.#h;
        const r = taken(h.lock(key));
        if (r > 0) return runHolding(permitNow(h, r, key, 1), fn);
        if (r < 0) throw acquireError(-r, key, undefined);
        return this.#started(key, r, ONE, fn);
      }
      checkFn(fn);
      return this.#acquire(key, parsePermitOptions(opts), fn);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * An async function that runs `fn(...args)` holding the units of key `keyOf(...args)`; options
   * as for acquire(), checked now. It has `fn`'s name and length.
   */
  wrap(fn, keyOf, opts) {
    parsePermitOptions(opts);
    const own = opts === undefined || opts === null ? undefined : { ...opts };
    return wrapKeyed((key, body) => this.withPermit(key, body, own), fn, keyOf);
  }

  /**
   * The holders of `key`, a snapshot: `{ fence, holders, units, leaseRemaining, waiters }`
   * (`units`: the holders' weights summed), or null when no unit is held.
   */
  info(key) {
    const r = this.#h.info(key);
    if (r === null) return null;
    if (typeof r === 'number') throw statusError(-r, () => keyWhat(key));
    const lease = r[INFO.leaseRemaining];
    return {
      fence: r[INFO.fence],
      holders: r[INFO.holders],
      units: r[INFO.units],
      leaseRemaining: lease < 0 ? null : lease,
      waiters: r[INFO.waiters],
    };
  }

  /**
   * Ends every hold of `key` and advances its fence: the holders' permits then release nothing
   * (their release() throws KEYLOCK_NOT_OWNER). Whether any unit was held.
   */
  forceRelease(key) {
    const r = this.#h.forceUnlock(key);
    if (r < 0) throw statusError(-r, () => keyWhat(key));
    return (released(r) & 1) === 1;
  }

  /** Counts, as KeyPool's stats() (held: keys with units held; waiting: waiters queued). */
  stats() {
    return nativeCall(native.keyedStats, this.#h.handle);
  }

  /**
   * The core's counts and histograms for this semaphore (see KeyPool's metrics()); null for one
   * opened without `{ metrics: true }`.
   */
  metrics() {
    return metricsOf(this.#h);
  }
}

module.exports = { Semaphore, Permit };

'use strict';
// RwLock: a reader-writer lock (many readers or one writer), in this process or shared by name
// with every worker thread of it.

const native = require('./native.js');
const { WOULD_BLOCK, TIMED_OUT, statusError, timeoutError } = require('./errors.js');
const { EXCLUSIVE, SHARED, parseOptions, checkFn, checkName } = require('./options.js');
const { outcome, taken } = require('./waiting.js');
const { INTERNAL, READ, WRITE, Guard, guardNow } = require('./guard.js');

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

  // A read or write acquire; with `fn` (withRead's, withWrite's), the guard is held while `fn`
  // runs and the promise is of `fn`'s outcome (see waiting.js's `outcome`).
  #acquire(side, opts, fn) {
    try {
      const o = parseOptions(opts);
      if (o.signal !== undefined && o.signal.aborted) return Promise.reject(o.signal.reason);
      const h = this.#h;
      const kind = side === RW_READ ? READ : WRITE;
      const make = (slot, lo, hi, flags) => new Guard(INTERNAL, h, slot, lo, hi, flags, 0, kind, null);
      const read = side === RW_READ;
      const r = taken(o.timeout === 0 ? (read ? h.tryRead() : h.tryWrite()) : read ? h.readAsync() : h.writeAsync());
      return outcome(r, make, side.what, o, 0, false, fn);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  #sync(side, opts) {
    const o = parseOptions(opts, true);
    const r = taken(side === RW_READ ? this.#h.readSync(o.timeout) : this.#h.writeSync(o.timeout));
    if (r > 0) return guardNow(this.#h, r, 0, side === RW_READ ? READ : WRITE, null);
    if (-r === TIMED_OUT || (-r === WOULD_BLOCK && o.timeout === 0)) throw timeoutError(side.what, o.timeout);
    throw statusError(-r, side.what);
  }

  #try(side) {
    const r = taken(side === RW_READ ? this.#h.tryRead() : this.#h.tryWrite());
    if (r > 0) return guardNow(this.#h, r, 0, side === RW_READ ? READ : WRITE, null);
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
  withRead(fn, opts) {
    return this.#holding(RW_READ, fn, opts);
  }

  /** Holds the write lock while `fn(guard)` runs; returns (or rethrows) its result. */
  withWrite(fn, opts) {
    return this.#holding(RW_WRITE, fn, opts);
  }

  #holding(side, fn, opts) {
    try {
      checkFn(fn);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#acquire(side, opts, fn);
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

module.exports = { RwLock };

'use strict';
// Guards: a held lock is the record of one acquisition (its slot in the addon), so that a
// release ends exactly that acquisition.

const native = require('./native.js');
const { OUTPUT } = require('./records.js');
const { KeylockError, OK, NOT_OWNER, statusError, typeError } = require('./errors.js');
const { keyWhat } = require('./keys.js');
const { millis } = require('./options.js');
const { state } = require('./thread.js');
const { dropOwner } = require('./owners.js');
const { released } = require('./waiting.js');
const { ACQUIRE, RELEASE, setHandleOfGuard, publishAcquire, publishRelease, since } = require('./diagnostics.js');

const { FLAG_SHARED, FLAG_OWNER_DIED, LOCAL_WAKE } = native;
const OUT = state.out;
const OUT_FENCE_LOW = OUTPUT.fenceLow;
const OUT_FENCE_HIGH = OUTPUT.fenceHigh;
const OUT_FLAGS = OUTPUT.flags;

// The token of the package's own constructors (a Guard, and a lock made around a handle).
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

  static {
    setHandleOfGuard((guard) => guard.#h);
  }

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
    const r = this.#h.release(slot);
    // Published before a waiter of this thread that the release woke is served (its acquire
    // is published then), so that subscribers see the release first.
    const error = RELEASE.hasSubscribers ? publishRelease(this, r & (LOCAL_WAKE - 1), () => this.#what()) : undefined;
    const status = released(r);
    if (this.#owner !== 0) dropOwner(this.#owner);
    if (status !== OK) throw error ?? statusError(status, () => this.#what());
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
          'KEYLOCK_NOT_OWNER',
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

// The guard of the acquisition a call just made (slot `slot`): its fence and flags are in the
// output buffer. `started`: the start of a blocking call (see diagnostics.js's startClock);
// omitted for a call that did not wait.
function guardNow(h, slot, owner, kind, of, started) {
  const guard = new Guard(INTERNAL, h, slot, OUT[OUT_FENCE_LOW], OUT[OUT_FENCE_HIGH], OUT[OUT_FLAGS], owner, kind, of);
  if (ACQUIRE.hasSubscribers || RELEASE.hasSubscribers) {
    publishAcquire(guard, started === undefined ? 0 : since(started));
  }
  return guard;
}

module.exports = { INTERNAL, ONE_KEY, KEYS, READ, WRITE, Guard, guardNow };

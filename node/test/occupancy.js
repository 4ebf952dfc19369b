'use strict';
// Who is inside each critical section, counted as it happens, across worker_threads too (the
// counts live in a SharedArrayBuffer and change with Atomics).
//
// `occupancy.run(keys, fn)` runs the body of a critical section: it counts, for each key, the
// exclusive holders inside at that moment (`{ shared: true }` for a reader), then how the body
// ended: resolved (completed) or rejected (interrupted: an abort, a timeout or an exception
// inside). A final count of increments alone cannot tell a lock that let two holders in from a
// body that an exception legitimately cut short: both leave fewer increments than entries.
// An entry that finds another holder inside throws an AssertionError there and then.
// `check()` tells them apart: no entry found another holder the lock should have kept out, the
// most exclusive holders inside at once was at most 1 for every key, every entry completed or
// was interrupted, and nobody is inside any more. `maxShared(key)` measures how many shared
// holders were inside together.

const assert = require('node:assert/strict');

// Totals, then per key: exclusive holders now, shared holders now, most exclusive at once,
// most shared at once.
const OVERLAPS = 0;
const ENTERED = 1;
const COMPLETED = 2;
const INTERRUPTED = 3;
const TOTALS = 4;
const PER_KEY = 4;

class Occupancy {
  constructor(keys, buffer = new SharedArrayBuffer(4 * (TOTALS + PER_KEY * keys))) {
    this.keys = keys;
    this.buffer = buffer;
    this.a = new Int32Array(buffer);
  }

  // The same record in another thread: `Occupancy.of(occupancy.buffer)` in a worker.
  static of(buffer) {
    return new Occupancy((buffer.byteLength / 4 - TOTALS) / PER_KEY, buffer);
  }

  #at(key, field) {
    return TOTALS + key * PER_KEY + field;
  }

  #raise(at, n) {
    const a = this.a;
    let max = Atomics.load(a, at);
    while (n > max) {
      const seen = Atomics.compareExchange(a, at, max, n);
      if (seen === max) break;
      max = seen;
    }
  }

  // Counts a holder of `key` in. An entry that finds another holder the lock should have kept
  // out throws at once: a broken lock may fail later for other reasons (a release of what
  // another holder released) that would hide the overlap.
  enter(key, shared) {
    const a = this.a;
    Atomics.add(a, ENTERED, 1);
    let overlap;
    if (shared) {
      const n = Atomics.add(a, this.#at(key, 1), 1) + 1;
      this.#raise(this.#at(key, 3), n);
      if (Atomics.load(a, this.#at(key, 0)) !== 0) overlap = `a reader of key ${key} inside with a writer`;
    } else {
      const n = Atomics.add(a, this.#at(key, 0), 1) + 1;
      this.#raise(this.#at(key, 2), n);
      if (n > 1) overlap = `${n} holders of key ${key} inside at once`;
      else if (Atomics.load(a, this.#at(key, 1)) !== 0) overlap = `a writer of key ${key} inside with readers`;
    }
    if (overlap !== undefined) {
      Atomics.add(a, OVERLAPS, 1);
      this.leave(key, shared, false);
      throw new assert.AssertionError({ message: `the lock let ${overlap}` });
    }
  }

  // The most shared holders of `key` inside at once so far.
  maxShared(key) {
    return Atomics.load(this.a, this.#at(key, 3));
  }

  // Shared holders of `key` inside now.
  sharedInside(key) {
    return Atomics.load(this.a, this.#at(key, 1));
  }

  leave(key, shared, completed) {
    Atomics.sub(this.a, this.#at(key, shared ? 1 : 0), 1);
    Atomics.add(this.a, completed ? COMPLETED : INTERRUPTED, 1);
  }

  // Runs `fn` as the critical section of `keys` (a key number or an array of them).
  async run(keys, fn, { shared = false } = {}) {
    const held = Array.isArray(keys) ? keys : [keys];
    for (let i = 0; i < held.length; i++) {
      try {
        this.enter(held[i], shared);
      } catch (e) {
        for (const k of held.slice(0, i)) this.leave(k, shared, false);
        throw e;
      }
    }
    let completed = false;
    try {
      const result = await fn();
      completed = true;
      return result;
    } finally {
      for (const k of held) this.leave(k, shared, completed);
    }
  }

  get entered() {
    return Atomics.load(this.a, ENTERED);
  }

  get completed() {
    return Atomics.load(this.a, COMPLETED);
  }

  get interrupted() {
    return Atomics.load(this.a, INTERRUPTED);
  }

  check() {
    const a = this.a;
    assert.equal(Atomics.load(a, OVERLAPS), 0, 'entries that found another holder inside');
    assert.ok(this.entered > 0, 'no critical section was entered');
    for (let k = 0; k < this.keys; k++) {
      assert.ok(Atomics.load(a, this.#at(k, 2)) <= 1, `most exclusive holders of key ${k} at once`);
      assert.equal(Atomics.load(a, this.#at(k, 0)), 0, `still inside key ${k}`);
      assert.equal(Atomics.load(a, this.#at(k, 1)), 0, `still inside key ${k} (shared)`);
    }
    assert.equal(this.completed + this.interrupted, this.entered, 'completed + interrupted == entered');
  }
}

module.exports = { Occupancy };

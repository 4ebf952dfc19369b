'use strict';
// Oversubscribed stress: 32 worker_threads on a 2-core machine share one KeyPool, with timeouts
// expiring, signals aborting waits and exceptions thrown inside critical sections. One holder
// at a time, every critical section completed (and counted) or interrupted, and nothing held or
// waiting afterwards.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const { KeyPool } = require('..');
const { Occupancy } = require('./occupancy.js');

const WORKERS = 32;
const KEYS = 8;
const INDEX = JSON.stringify(path.join(__dirname, '..'));
const OCCUPANCY = JSON.stringify(path.join(__dirname, 'occupancy.js'));

const WORKER = `
const { workerData, parentPort } = require('node:worker_threads');
const { setImmediate: tick } = require('node:timers/promises');
const { KeyPool } = require(${INDEX});
const { Occupancy } = require(${OCCUPANCY});
const { name, counters, inside, seed } = workerData;
const counts = new Int32Array(counters);
const occupancy = Occupancy.of(inside);
const pool = KeyPool.shared(name);
let x = seed;
const rand = () => (x = (x * 1103515245 + 12345) >>> 0) / 2 ** 32;

// A plain read and write, with an await between: only the lock keeps them together. With
// \`boom\`, an exception between the read and the write cuts the critical section short.
const bump = (k, boom = false) =>
  occupancy.run(k, async () => {
    const v = counts[k];
    await tick();
    if (boom) throw new RangeError('inside');
    counts[k] = v + 1;
  });

async function task() {
  for (let r = 0; r < 40; r++) {
    const k = Math.floor(rand() * ${KEYS});
    const roll = rand();
    try {
      if (roll < 0.3) {
        await pool.withLock('k' + k, () => bump(k), { timeout: 1 });
      } else if (roll < 0.45) {
        const ac = new AbortController();
        setTimeout(() => ac.abort(new Error('gave up')), 1);
        await pool.withLock('k' + k, () => bump(k), { signal: ac.signal });
      } else if (roll < 0.6) {
        await pool.withLock('k' + k, () => bump(k, true));
      } else {
        await pool.withLock('k' + k, () => bump(k));
      }
    } catch (e) {
      const expected = e.code === 'KEYLOCK_TIMEOUT' || e.message === 'gave up' || e instanceof RangeError;
      if (!expected) throw e;
    }
  }
}

Promise.all(Array.from({ length: 4 }, task)).then(
  () => parentPort.postMessage({}),
  (e) => parentPort.postMessage({ error: String(e && e.stack || e) }),
);
`;

test(
  '32 workers with timeouts, aborts and throws: one holder at a time, exact counts',
  { timeout: 120_000 },
  async () => {
    const name = `oversubscribed-${process.pid}`;
    const pool = KeyPool.shared(name);
    const counters = new SharedArrayBuffer(4 * KEYS);
    const occupancy = new Occupancy(KEYS);
    const results = await Promise.all(
      Array.from(
        { length: WORKERS },
        (_, i) =>
          new Promise((resolve, reject) => {
            const w = new Worker(WORKER, {
              eval: true,
              workerData: { name, counters, inside: occupancy.buffer, seed: i + 1 },
            });
            w.once('message', resolve);
            w.once('error', reject);
          }),
      ),
    );
    for (const r of results) assert.equal(r.error, undefined, r.error);
    occupancy.check();
    // Only a critical section that ran to its end wrote its increment.
    const total = new Int32Array(counters).reduce((a, b) => a + b, 0);
    assert.equal(total, occupancy.completed);
    assert.ok(occupancy.interrupted > 0, 'the throws between read and write interrupted some');
    assert.equal(pool.size, 0);
    const stats = pool.stats();
    assert.equal(stats.held, 0);
    assert.equal(stats.waiting, 0);
    assert.equal(stats.entriesInUse, 0);
    for (let k = 0; k < KEYS; k++) assert.equal(pool.isLocked('k' + k), false);
  },
);

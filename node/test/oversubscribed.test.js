'use strict';
// Oversubscribed mixed-mode stress: 32 worker_threads on a 2-core machine share one KeyPool
// (and, in a second run, one StripedLock), taking keys in shared and exclusive modes, with
// timeouts expiring, signals aborting waits and exceptions thrown inside critical sections. An
// exclusive holder is never inside with anyone, shared holders are inside together, every
// critical section completed (and counted) or was interrupted, and nothing is held or waiting
// afterwards.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const { KeyPool, StripedLock } = require('..');
const { Occupancy } = require('./occupancy.js');

const WORKERS = 32;
const KEYS = 8;
const INDEX = JSON.stringify(path.join(__dirname, '..'));
const OCCUPANCY = JSON.stringify(path.join(__dirname, 'occupancy.js'));

const WORKER = `
const { workerData, parentPort } = require('node:worker_threads');
const { setImmediate: tick } = require('node:timers/promises');
const { KeyPool, StripedLock } = require(${INDEX});
const { Occupancy } = require(${OCCUPANCY});
const { kind, name, counters, inside, seed } = workerData;
const counts = new Int32Array(counters);
const occupancy = Occupancy.of(inside);
const pool = kind === 'pool' ? KeyPool.shared(name) : StripedLock.shared(name, ${KEYS});
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

// A reader: reads with an await in between, counting its reads; it must never see a writer.
const read = (k) =>
  occupancy.run(
    k,
    async () => {
      const v = counts[k];
      await tick();
      if (counts[k] !== v) throw new Error('a writer changed the value under a reader');
      Atomics.add(counts, ${KEYS} + k, 1);
    },
    { shared: true },
  );

async function task() {
  for (let r = 0; r < 40; r++) {
    const k = Math.floor(rand() * ${KEYS});
    const roll = rand();
    const shared = rand() < 0.5;
    const mode = shared ? 'shared' : 'exclusive';
    const body = () => (shared ? read(k) : bump(k));
    try {
      if (roll < 0.3) {
        await pool.withLock('k' + k, body, { timeout: 1, mode });
      } else if (roll < 0.45) {
        const ac = new AbortController();
        setTimeout(() => ac.abort(new Error('gave up')), 1);
        await pool.withLock('k' + k, body, { signal: ac.signal, mode });
      } else if (roll < 0.6) {
        await pool.withLock('k' + k, () => (shared ? read(k) : bump(k, true)).then(() => { throw new RangeError('after'); }), { mode });
      } else {
        const g = await pool.lock('k' + k, { mode });
        try {
          await body();
        } finally {
          g.release();
        }
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

for (const kind of ['pool', 'striped']) {
  test(
    `32 workers on a shared ${kind}, shared and exclusive, with timeouts, aborts and throws: exact counts`,
    { timeout: 180_000 },
    async () => {
      const name = `oversubscribed-${kind}-${process.pid}`;
      const lock = kind === 'pool' ? KeyPool.shared(name) : StripedLock.shared(name, KEYS);
      // Counters per key, then reads per key.
      const counters = new SharedArrayBuffer(4 * 2 * KEYS);
      const occupancy = new Occupancy(KEYS);
      const results = await Promise.all(
        Array.from(
          { length: WORKERS },
          (_, i) =>
            new Promise((resolve, reject) => {
              const w = new Worker(WORKER, {
                eval: true,
                workerData: { kind, name, counters, inside: occupancy.buffer, seed: i + 1 },
              });
              w.once('message', resolve);
              w.once('error', reject);
            }),
        ),
      );
      for (const r of results) assert.equal(r.error, undefined, r.error);
      occupancy.check();
      // Only an exclusive critical section that ran to its end wrote its increment, and only a
      // shared one that ran to its end counted its read.
      const c = new Int32Array(counters);
      const writes = c.slice(0, KEYS).reduce((a, b) => a + b, 0);
      const reads = c.slice(KEYS).reduce((a, b) => a + b, 0);
      assert.equal(writes + reads, occupancy.completed);
      assert.ok(occupancy.interrupted > 0, 'the throws between read and write interrupted some');
      assert.ok(reads > 0 && writes > 0, 'both modes ran');
      assert.ok(
        Array.from({ length: KEYS }, (_, k) => occupancy.maxShared(k)).some((n) => n > 1),
        'shared holders were inside together',
      );
      assert.equal(lock.size, 0);
      const stats = lock.stats();
      assert.equal(stats.held, 0);
      assert.equal(stats.waiting, 0);
      if (kind === 'pool') assert.equal(stats.entriesInUse, 0);
      for (let k = 0; k < KEYS; k++) assert.equal(lock.isLocked('k' + k), false);
    },
  );
}

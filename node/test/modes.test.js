'use strict';
// Shared and exclusive modes per key: shared holders overlap (measured), exclusive holders
// overlap nothing, FIFO per key (a shared request behind a waiting exclusive one waits), and
// neither readers nor writers starve.

const test = require('node:test');
const assert = require('node:assert/strict');
const { setImmediate: tick } = require('node:timers/promises');
const { KeyPool, StripedLock } = require('..');
const { Occupancy } = require('./occupancy.js');

const T = { timeout: 60_000 };
const locks = () => [
  ['KeyPool', new KeyPool()],
  ['StripedLock', new StripedLock(64)],
  ['KeyPool (fifo)', new KeyPool({ fifo: true })],
];

// Resolves when `n` callers have arrived.
function barrier(n) {
  let arrived = 0;
  let open;
  const opened = new Promise((resolve) => (open = resolve));
  return () => {
    if (++arrived === n) open();
    return opened;
  };
}

for (const [name, lock] of locks()) {
  test(`${name}: N shared holders are inside together`, T, async () => {
    const N = 16;
    const occupancy = new Occupancy(1);
    const arrive = barrier(N);
    // Each holder waits inside until all N are inside: only overlapping holders get there.
    await Promise.all(
      Array.from({ length: N }, () =>
        lock.withLock('doc', () => occupancy.run(0, () => arrive(), { shared: true }), { mode: 'shared' }),
      ),
    );
    occupancy.check();
    assert.equal(occupancy.maxShared(0), N, 'shared holders inside at once');
    assert.equal(occupancy.completed, N);
    assert.equal(lock.isLocked('doc'), false);
  });

  test(`${name}: exclusive holders overlap nothing; exact counts in mixed modes`, T, async () => {
    const keys = 4;
    const value = new Array(keys).fill(0);
    const occupancy = new Occupancy(keys);
    let reads = 0;
    async function task(seed) {
      let x = seed;
      for (let r = 0; r < 150; r++) {
        x = (x * 1103515245 + 12345) >>> 0;
        const k = x % keys;
        const shared = (x >>> 8) % 3 !== 0;
        if (shared) {
          await lock.withLock(
            `k${k}`,
            (g) =>
              occupancy.run(
                k,
                async () => {
                  assert.equal(g.mode, 'shared');
                  const v = value[k];
                  await tick();
                  assert.equal(value[k], v, 'no writer inside with a reader');
                  reads++;
                },
                { shared: true },
              ),
            { mode: 'shared' },
          );
        } else {
          await lock.withLock(`k${k}`, (g) =>
            occupancy.run(k, async () => {
              assert.equal(g.mode, 'exclusive');
              const v = value[k];
              await tick();
              value[k] = v + 1;
            }),
          );
        }
      }
    }
    await Promise.all(Array.from({ length: 32 }, (_, i) => task(i + 1)));
    occupancy.check();
    const writes = value.reduce((a, b) => a + b, 0);
    assert.equal(writes + reads, 32 * 150);
    assert.equal(occupancy.completed, 32 * 150);
    assert.ok(reads > 0 && writes > 0);
  });

  test(`${name}: a shared request behind a waiting exclusive one waits (FIFO per key)`, T, async () => {
    const order = [];
    const r1 = lock.tryLock('k', { mode: 'shared' });
    const w = lock.lock('k').then((g) => (order.push('w'), g));
    await tick();
    assert.equal(lock.info('k').waiters, 1, 'the writer waits');
    assert.equal(lock.tryLock('k', { mode: 'shared' }), null, 'a new reader does not pass the waiting writer');
    const r2 = lock.lock('k', { mode: 'shared' }).then((g) => (order.push('r2'), g));
    await tick();
    r1.release();
    const wg = await w;
    assert.deepEqual(order, ['w']);
    wg.release();
    (await r2).release();
    assert.deepEqual(order, ['w', 'r2']);
    assert.equal(lock.isLocked('k'), false);
  });

  test(`${name}: readers do not starve a writer, writers do not starve a reader`, T, async () => {
    // Readers keep the key held in overlapping turns; a writer still gets in.
    let stop = false;
    const readers = Array.from({ length: 8 }, async () => {
      while (!stop) {
        await lock.withLock('rw', () => tick(), { mode: 'shared' });
      }
    });
    await tick();
    const wrote = await lock.withLock('rw', () => 'wrote');
    stop = true;
    await Promise.all(readers);
    assert.equal(wrote, 'wrote');
    // Writers keep it held in turns; a reader still gets in.
    stop = false;
    const writers = Array.from({ length: 8 }, async () => {
      while (!stop) {
        await lock.withLock('rw', () => tick());
      }
    });
    await tick();
    const read = await lock.withLock('rw', () => 'read', { mode: 'shared' });
    stop = true;
    await Promise.all(writers);
    assert.equal(read, 'read');
    assert.equal(lock.isLocked('rw'), false);
  });
}

test('every form takes a mode: try, sync, async, many', T, async () => {
  const pool = new KeyPool();
  const a = pool.tryLock('k', { mode: 'shared' });
  const b = pool.lockSync('k', { mode: 'shared', timeout: 100 });
  const c = await pool.lock('k', { mode: 'shared', timeout: 100 });
  assert.deepEqual([a.mode, b.mode, c.mode], ['shared', 'shared', 'shared']);
  assert.equal(pool.info('k').holders, 3);
  assert.throws(() => pool.lockSync('k', { timeout: 10 }), { code: 'KEYLOCK_TIMEOUT' });
  await assert.rejects(pool.lock('k', { timeout: 10 }), { code: 'KEYLOCK_TIMEOUT' });
  await assert.rejects(pool.lockMany(['j', 'k'], { timeout: 10 }), { code: 'KEYLOCK_TIMEOUT' });
  assert.equal(pool.isLocked('j'), false, 'all or none');
  const m = await pool.lockMany(['j', 'k'], { mode: ['exclusive', 'shared'], timeout: 100 });
  assert.equal(pool.info('k').holders, 4);
  assert.equal(pool.info('j').mode, 'exclusive');
  m.release();
  for (const g of [a, b, c]) g.release();
  assert.equal(pool.size, 0);
  const s = pool.lockManySync(['x', 'y'], { mode: 'shared' });
  const joined = pool.tryLock('x', { mode: 'shared' });
  assert.ok(joined, 'another reader joins');
  joined.release();
  assert.equal(pool.tryLock('x'), null, 'a writer does not');
  s.release();
  assert.equal(await pool.withLockMany(['x', 'y'], (g) => g.fences.length, { mode: 'shared' }), 2);
  assert.equal(pool.size, 0);
});

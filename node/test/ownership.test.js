'use strict';
// Ownership: a guard releases exactly its own acquisition, fences rise, leases hand over,
// reentrant owners, force-unlock, and the errors of each.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const { setTimeout: sleep, setImmediate: tick } = require('node:timers/promises');
const fs = require('node:fs');
const { KeyPool, StripedLock, KeylockError, unlink } = require('..');
const native = require('../binding.js').load();

const T = { timeout: 60_000 };
const INDEX = JSON.stringify(path.join(__dirname, '..'));
const STATUS_NAMES = new Set(native.statuses().map((s) => s.name));
const locks = () => [
  ['KeyPool', new KeyPool()],
  ['StripedLock', new StripedLock(64)],
];

// N keys whose stripes differ from each other's and from those of the keys in TAKEN (any N keys
// for a KeyPool): a StripedLock's seed is random, so two given keys may share a stripe.
function apart(lock, taken, n) {
  if (!(lock instanceof StripedLock)) return Array.from({ length: n }, (_, i) => `key${i}`);
  const used = new Set(taken.map((key) => lock.stripeOf(key)));
  const keys = [];
  for (let i = 0; keys.length < n; i++) {
    const stripe = lock.stripeOf(`key${i}`);
    if (!used.has(stripe)) {
      used.add(stripe);
      keys.push(`key${i}`);
    }
  }
  return keys;
}

// An error of keylock's with this status name, which is in the core's table.
function coded(name) {
  return (e) => {
    assert.ok(STATUS_NAMES.has(name), `${name} is a status of the core's table`);
    return e instanceof KeylockError && e.code === name;
  };
}

// AbortSignal.timeout() and waiters for a lock this thread holds do not keep the event loop
// alive: hold it open while a test waits for a lease to end.
async function alive(promise) {
  const timer = setInterval(() => {}, 1000);
  try {
    return await promise;
  } finally {
    clearInterval(timer);
  }
}

for (const [name, lock] of locks()) {
  test(`${name}: a stale guard never releases the next holder`, T, async () => {
    // Force-unlocked, then taken by someone else: the old guard's release is refused and the
    // new holder keeps the key.
    const stale = lock.tryLock('k');
    assert.equal(lock.forceUnlock('k'), true);
    const next = lock.tryLock('k');
    assert.ok(next, 'the key is free after forceUnlock');
    assert.ok(next.fence > stale.fence);
    assert.throws(() => stale.release(), coded('KEYLOCK_NOT_OWNER'));
    assert.equal(lock.isLocked('k'), true, 'the next holder still holds it');
    assert.equal(next.isCurrent(), true);
    assert.equal(lock.tryLock('k'), null, 'and nobody else gets in');
    next.release();
    assert.equal(lock.isLocked('k'), false);

    // The same for guards from lock(), withLock() and lockMany(), and for dispose.
    const a = await lock.lock('k');
    lock.forceUnlock('k');
    const b = await lock.lock('k');
    a[Symbol.dispose](); // a no-op for a stale guard, as a drop is
    assert.equal(a.released, true, 'dispose counts as its release');
    a.release(); // and a second release does nothing
    assert.equal(b.isCurrent(), true);
    const [kx, ky] = apart(lock, ['k'], 2);
    const m = lock.tryLockMany([kx, ky]);
    assert.ok(m);
    lock.forceUnlock(kx);
    const x = lock.tryLock(kx);
    assert.ok(x);
    assert.throws(() => m.release(), { code: 'KEYLOCK_NOT_OWNER' });
    assert.equal(lock.isLocked(kx), true, "the stale many-guard left x's new holder alone");
    assert.equal(lock.isLocked(ky), false, 'and released its current key');
    x.release();
    b.release();
    await assert.rejects(
      lock.withLock('w', async () => {
        lock.forceUnlock('w');
        const other = lock.tryLock('w');
        assert.ok(other);
        await tick();
        return 'done';
      }),
      { code: 'KEYLOCK_NOT_OWNER' },
      'withLock reports that its hold was lost',
    );
    assert.equal(lock.isLocked('w'), true, "withLock's release left the next holder alone");
    lock.forceUnlock('w');
  });

  test(`${name}: fences strictly increase across 32 tasks, with slots recycled in between`, T, async () => {
    const keys = 4;
    const last = new Array(keys).fill(0n);
    let violations = 0;
    let entries = 0;
    async function task(t) {
      for (let r = 0; r < 40; r++) {
        const k = (t + r) % keys;
        await lock.withLock(`hot-${k}`, async (g) => {
          entries++;
          if (!(g.fence > last[k])) violations++;
          last[k] = g.fence;
          await tick();
        });
        // Keys used once: their slots are recycled for other keys.
        for (let c = 0; c < 8; c++) lock.tryLock(`cold-${t}-${r}-${c}`)?.release();
        if (r % 10 === 9 && t === 0) {
          // A force-unlock of a hot key advances its fence too.
          const g = await lock.lock(`hot-${k}`);
          lock.forceUnlock(`hot-${k}`);
          assert.throws(() => g.release(), { code: 'KEYLOCK_NOT_OWNER' });
        }
      }
    }
    await Promise.all(Array.from({ length: 32 }, (_, t) => task(t)));
    assert.equal(entries, 32 * 40);
    assert.equal(violations, 0, 'a fence that did not rise');
    if (name === 'KeyPool') {
      const st = lock.stats();
      assert.ok(st.entriesAllocated < (32 * 40 * 8) / 2, `slots were recycled (${st.entriesAllocated} allocated)`);
      assert.equal(st.entriesInUse, 0);
    }
  });

  test(`${name}: a lease hands the key over; the old holder's release reports LEASE_EXPIRED`, T, async () => {
    const LEASE = 200;
    const start = performance.now();
    const old = await lock.lock('job', { lease: LEASE });
    const left = old.leaseRemaining();
    assert.ok(left > 0 && left <= LEASE, `leaseRemaining ${left}`);
    assert.equal(old.isCurrent(), true);
    // The holder never releases: a waiter is served when the lease ends (or times out).
    const next = await alive(lock.lock('job', { timeout: LEASE + 5_000 }));
    const waited = performance.now() - start;
    assert.ok(waited >= LEASE - 2, `served after ${waited.toFixed(1)} ms, not before the lease ended`);
    assert.ok(next.fence > old.fence);
    assert.equal(old.isCurrent(), false);
    assert.equal(old.leaseRemaining(), 0, 'an ended lease has no time left');
    assert.throws(() => old.release(), coded('KEYLOCK_LEASE_EXPIRED'));
    assert.throws(
      () => old.extend(1000),
      (e) => e.code === 'KEYLOCK_NOT_OWNER' || e.code === 'KEYLOCK_LEASE_EXPIRED',
    );
    assert.equal(lock.isLocked('job'), true, 'the new holder keeps it');
    next.release();

    // An idle key whose lease ended is free at the next look.
    const idle = lock.tryLock('idle', { lease: 20 });
    await sleep(40);
    assert.equal(lock.isLocked('idle'), false);
    const again = lock.tryLock('idle');
    assert.ok(again && again.fence > idle.fence);
    again.release();
    assert.throws(() => idle.release(), { code: 'KEYLOCK_LEASE_EXPIRED' });

    // extend() keeps the key past the first deadline.
    const kept = lock.tryLock('kept', { lease: 50 });
    kept.extend(60_000);
    await sleep(80);
    assert.equal(kept.isCurrent(), true);
    await assert.rejects(lock.lock('kept', { timeout: 30 }), { code: 'KEYLOCK_TIMEOUT' });
    assert.ok(kept.leaseRemaining() > 50_000);
    // On a stripe of its own: 'kept' is still held.
    const [plainKey] = apart(lock, ['kept'], 1);
    const plain = lock.tryLock(plainKey);
    assert.equal(plain.leaseRemaining(), null);
    assert.throws(() => plain.extend(10), { code: 'KEYLOCK_INVALID_ARGUMENT' }, 'no lease to extend');
    plain.release();
    kept.release();
  });
}

test('fences strictly increase across workers sharing a pool', T, async () => {
  const name = `fences-${process.pid}`;
  const keys = 4;
  const last = new BigInt64Array(new SharedArrayBuffer(8 * keys));
  const counts = new Int32Array(new SharedArrayBuffer(8)); // [entries, violations]
  const src = `
    const { workerData, parentPort } = require('node:worker_threads');
    const { setImmediate: tick } = require('node:timers/promises');
    const { KeyPool } = require(${INDEX});
    const { name, last, counts, seed } = workerData;
    const pool = KeyPool.shared(name);
    async function task(t) {
      for (let r = 0; r < 40; r++) {
        const k = (seed + t + r) % last.length;
        await pool.withLock('hot-' + k, async (g) => {
          Atomics.add(counts, 0, 1);
          // Plain reads and writes: the lock keeps them in order.
          if (!(g.fence > last[k])) Atomics.add(counts, 1, 1);
          last[k] = g.fence;
          await tick();
        });
        for (let c = 0; c < 8; c++) pool.tryLock('cold-' + seed + '-' + t + '-' + r + '-' + c)?.release();
      }
    }
    Promise.all(Array.from({ length: 8 }, (_, t) => task(t))).then(() => parentPort.postMessage('done'));
  `;
  await Promise.all(
    Array.from(
      { length: 4 },
      (_, i) =>
        new Promise((resolve, reject) => {
          const w = new Worker(src, { eval: true, workerData: { name, last, counts, seed: i } });
          w.once('message', resolve);
          w.once('error', reject);
        }),
    ),
  );
  assert.equal(counts[0], 4 * 8 * 40, '32 tasks, 40 rounds each');
  assert.equal(counts[1], 0, 'a fence that did not rise');
  const st = KeyPool.shared(name).stats();
  assert.ok(st.entriesAllocated < (4 * 8 * 40 * 8) / 2, `slots were recycled (${st.entriesAllocated} allocated)`);
  assert.equal(st.entriesInUse, 0);
});

test('reentrant pools: an owner reenters with one fence and a hold count', T, async () => {
  const pool = new KeyPool({ reentrant: true });
  assert.equal(pool.reentrant, true);
  assert.equal(new KeyPool().reentrant, false);
  const me = { request: 1 };
  const outer = pool.tryLock('k', { owner: me });
  const inner = pool.tryLock('k', { owner: me });
  assert.ok(outer && inner);
  assert.equal(inner.fence, outer.fence, 'a reentrant acquire keeps the fence');
  let info = pool.info('k');
  assert.equal(info.holds, 2);
  assert.equal(info.owner, me, 'info reports the owner value');
  assert.equal(pool.tryLock('k', { owner: { request: 1 } }), null, 'another object is another owner');
  assert.equal(pool.tryLock('k'), null, 'no owner: no reentry');
  outer.release(); // any order
  assert.equal(pool.info('k').holds, 1);
  assert.equal(pool.isLocked('k'), true);
  inner.release();
  assert.equal(pool.isLocked('k'), false);

  // Nested withLock with the same owner, through the async path.
  const result = await pool.withLock('n', () => pool.withLock('n', async () => 'nested', { owner: 'job-7' }), {
    owner: 'job-7',
  });
  assert.equal(result, 'nested');
  assert.equal(pool.isLocked('n'), false);

  // Owner values: compared as a Map compares keys, each one its own owner.
  const values = ['1', 1, 1n, Symbol('s'), NaN, 0, false, '', {}];
  const held = values.map((v) => pool.tryLock(`v`, { owner: v }));
  assert.equal(held.filter(Boolean).length, 1, 'only the first owner gets the key');
  held[0].release();
  for (const v of values) {
    const a = pool.tryLock('v', { owner: v });
    const b = pool.tryLock('v', { owner: v });
    assert.ok(a && b, `owner ${String(v)} reenters`);
    assert.equal(pool.info('v').owner, v);
    a.release();
    b.release();
  }
  // A waiter with the holder's owner is granted at once; others wait.
  const h = await pool.lock('w', { owner: me });
  const again = await pool.lock('w', { owner: me, timeout: 100 });
  await assert.rejects(pool.lock('w', { owner: 'someone else', timeout: 20 }), { code: 'KEYLOCK_TIMEOUT' });
  again.release();
  h.release();
  const { owners } = globalThis[Symbol.for('keylock.thread.v2')];
  assert.equal(owners.size, 0, 'no owner value is kept once its acquisitions end');
});

test('reentrancy past the limit fails with REENTRANCY_LIMIT, nothing lost', T, () => {
  const pool = new KeyPool({ reentrant: true });
  const me = Symbol('me');
  const guards = [];
  for (;;) {
    let g;
    try {
      g = pool.tryLock('deep', { owner: me });
    } catch (e) {
      assert.ok(coded('KEYLOCK_REENTRANCY_LIMIT')(e), e.message);
      break;
    }
    guards.push(g);
    assert.ok(guards.length <= 1 << 16, 'past the default limit of 2^16');
  }
  assert.equal(guards.length, 1 << 16);
  assert.equal(pool.info('deep').holds, 1 << 16);
  for (const g of guards) g.release();
  assert.equal(pool.isLocked('deep'), false);
});

test('a non-reentrant pool ignores owners', T, () => {
  const pool = new KeyPool();
  const g = pool.tryLock('k', { owner: 'me' });
  assert.equal(pool.tryLock('k', { owner: 'me' }), null);
  assert.equal(pool.info('k').owner, null, 'the core keeps no owner for a non-reentrant pool');
  g.release();
});

test('StripedLock: reentrant owners and fifo are options too', T, () => {
  const s = new StripedLock(8, { reentrant: true, fifo: true });
  assert.deepEqual([s.reentrant, s.fifo, s.stripes], [true, true, 8]);
  const a = s.tryLock('k', { owner: 7 });
  const b = s.tryLock('k', { owner: 7 });
  assert.ok(a && b && a.fence === b.fence);
  b.release();
  a.release();
  assert.equal(s.isLocked('k'), false);
});

test('KeyPool.open and StripedLock.open take the core lock names', T, () => {
  const p = KeyPool.open('local:', { fifo: true });
  assert.equal(p.fifo, true);
  assert.ok(p.tryLock('k'));
  const s = StripedLock.open('local:', { stripes: 100 });
  assert.equal(s.stripes, 128);
  assert.ok(s.tryLock('k'));
  const empty = KeyPool.open('');
  assert.equal(empty.isLocked('k'), false, 'a new lock each time');
  // The default build has the other scopes: a shared-memory region opens by name (its files
  // removed afterwards), and a Redis server that is not there is an error in the core's words.
  const region = `keylock-node-open-${process.pid}`;
  try {
    const shm = KeyPool.open(`shm:${region}`, { capacity: 64 });
    const g = shm.tryLock('k');
    assert.ok(g && shm.isLocked('k'));
    g.release();
    assert.equal(shm.isLocked('k'), false);
    // unlink removes the region's file; the old open keeps its region, and a new open of the
    // name makes a fresh one.
    const file = `/dev/shm/keylock.${region}`;
    assert.ok(fs.existsSync(file));
    const held = shm.tryLock('k');
    assert.equal(unlink(`shm:${region}`), true);
    assert.equal(fs.existsSync(file), false);
    assert.equal(unlink(`shm:${region}`), false, 'nothing left to remove');
    const fresh = KeyPool.open(`shm:${region}`, { capacity: 64 });
    assert.ok(fs.existsSync(file));
    assert.equal(fresh.isLocked('k'), false, 'a new region, not the old one');
    const again = fresh.tryLock('k');
    assert.ok(again && again.fence < held.fence, 'its fences start again');
    again.release();
    held.release();
  } finally {
    unlink(`shm:${region}`);
  }
  for (const bad of ['local:', '', 'redis://127.0.0.1:1/0', 'nope']) {
    assert.throws(
      () => unlink(bad),
      (e) => e.code === 'KEYLOCK_INVALID_ARGUMENT',
      bad,
    );
  }
  assert.throws(() => unlink(7), TypeError);
  assert.throws(
    () => KeyPool.open('redis://127.0.0.1:1/0'),
    (e) => e.code === 'KEYLOCK_UNAVAILABLE',
    'nothing listens on port 1',
  );
});

'use strict';
// The same API on a scope beyond this process: KeyPool.open / StripedLock.open of the lock name
// in KEYLOCK_TEST_SCOPE ('shm:NAME', 'redis://HOST:PORT/DB' or 'postgres://USER:PASSWORD@HOST:PORT/DB'),
// on a build with that scope. `make test-node-scopes` builds one and runs this file on a fresh
// shm region, on a redis-server of its own and on a PostgreSQL cluster of its own; without
// KEYLOCK_TEST_SCOPE these tests are skipped (and ownership.test.js checks that a build without
// the scopes refuses the names).
//
// Redis and PostgreSQL are both server scopes, with one front in the core: the same tests run on
// both.
//
// Two opens of one name are two lock objects on one scope, as two processes' opens would be:
// what one holds, the other must see held.

const test = require('node:test');
const assert = require('node:assert/strict');
const { setImmediate: tick } = require('node:timers/promises');
const { KeyPool, Semaphore, StripedLock } = require('..');
const { Occupancy } = require('./occupancy.js');

const SCOPE = process.env.KEYLOCK_TEST_SCOPE;
const T = { timeout: 60_000, skip: SCOPE ? false : 'KEYLOCK_TEST_SCOPE is not set (make test-node-scopes)' };
// A prefix per run, so that keys left by an earlier run of the same scope cannot meet these.
const RUN = `t${process.pid}-${Date.now()}-`;

function opens(make) {
  return [make(), make()];
}

// A shared-memory region is either a pool or a striped lock (one region for each) and takes a
// capacity; a server scope (Redis, PostgreSQL) has exact keys only (the core refuses stripes
// there).
const SHM = SCOPE !== undefined && SCOPE.startsWith('shm:');
const POSTGRES = SCOPE !== undefined && /^postgres(ql)?:\/\//.test(SCOPE);
const kinds = [['KeyPool', () => KeyPool.open(SHM ? `${SCOPE}-pool` : SCOPE, SHM ? { capacity: 256 } : {})]];
if (SHM) kinds.push(['StripedLock', () => StripedLock.open(`${SCOPE}-striped`, { stripes: 64 })]);

test('a server scope refuses stripes', { ...T, skip: T.skip || (SHM && 'not a server scope') }, () => {
  assert.throws(
    () => StripedLock.open(SCOPE, { stripes: 64 }),
    (e) => e.code === 'KEYLOCK_INVALID_ARGUMENT' && /not stripes/.test(e.message),
  );
});

for (const [kind, make] of kinds) {
  test(`${kind}: two opens of one scope exclude each other, with increasing fences`, T, () => {
    const [a, b] = opens(make);
    const key = `${RUN}${kind}-x`;
    const first = a.tryLock(key);
    assert.ok(first, 'a free key is taken');
    assert.equal(b.tryLock(key), null, 'the other open sees it held');
    assert.equal(b.isLocked(key), true);
    assert.throws(
      () => b.lockSync(key, { timeout: 0 }),
      (e) => e.code === 'KEYLOCK_TIMEOUT',
    );
    first.release();
    const second = b.tryLock(key);
    assert.ok(second, 'free again once released');
    assert.ok(second.fence > first.fence, 'a later exclusive acquisition has a greater fence');
    assert.equal(first.isCurrent(), false);
    second.release();
    assert.equal(a.isLocked(key), false);
  });

  test(`${kind}: shared holders share across opens and keep a writer out`, T, () => {
    const [a, b] = opens(make);
    const key = `${RUN}${kind}-s`;
    const r1 = a.tryLock(key, { mode: 'shared' });
    const r2 = b.tryLock(key, { mode: 'shared' });
    assert.ok(r1 && r2, 'two readers at once');
    assert.equal(r1.mode, 'shared');
    assert.equal(a.tryLock(key), null, 'no writer while they read');
    r1.release();
    assert.equal(b.tryLock(key), null, 'nor while one still reads');
    r2.release();
    const w = b.tryLock(key);
    assert.ok(w, 'a writer once both left');
    w.release();
  });

  test(`${kind}: a stale guard's release is refused and frees nothing`, T, () => {
    const [a, b] = opens(make);
    const key = `${RUN}${kind}-f`;
    const g = a.tryLock(key);
    assert.ok(g);
    assert.equal(b.forceUnlock(key), true);
    const h = b.tryLock(key);
    assert.ok(h, 'taken after the force-unlock');
    assert.throws(
      () => g.release(),
      (e) => e.code === 'KEYLOCK_NOT_OWNER',
    );
    assert.equal(a.isLocked(key), true, "the stale release left the new holder's hold");
    h.release();
  });

  test(`${kind}: async waiters on both opens: exact counts, one holder inside`, T, async () => {
    const [a, b] = opens(make);
    const KEYS = 4;
    const TASKS = 16;
    const ROUNDS = 25;
    const counters = new Array(KEYS).fill(0);
    const occupancy = new Occupancy(KEYS);
    async function task(t) {
      const lock = t % 2 === 0 ? a : b;
      for (let r = 0; r < ROUNDS; r++) {
        const k = (t + r) % KEYS;
        await lock.withLock(`${RUN}${kind}-c${k}`, () =>
          occupancy.run(k, async () => {
            const before = counters[k];
            await tick();
            counters[k] = before + 1;
          }),
        );
      }
    }
    await Promise.all(Array.from({ length: TASKS }, (_, t) => task(t)));
    assert.equal(
      counters.reduce((x, y) => x + y, 0),
      TASKS * ROUNDS,
    );
    assert.equal(occupancy.completed, TASKS * ROUNDS);
    occupancy.check();
    for (let k = 0; k < KEYS; k++) assert.equal(a.isLocked(`${RUN}${kind}-c${k}`), false);
  });
}

// Awaits `signal`'s abort. A pending signal, like AbortSignal.timeout's, does not keep the event
// loop alive by itself (real work under the lock does): a timer keeps it alive meanwhile.
function abortOf(signal) {
  const keep = setInterval(() => {}, 1000);
  return new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true })).finally(() =>
    clearInterval(keep),
  );
}

// A server scope with a short lease (checked every third of it), for the lost-signal tests:
// 600 ms on Redis, 1 s (the least it takes) on PostgreSQL.
const LEASE = POSTGRES ? '1s' : '600ms';
const SHORT = SCOPE !== undefined && !SHM ? `${SCOPE}?lease=${LEASE}&prefix=${RUN}lost` : undefined;

test(
  'a guard whose server lock is force-unlocked elsewhere has its signal aborted',
  { ...T, skip: T.skip || (SHM && 'not a server scope') },
  async () => {
    const holder = KeyPool.open(SHORT);
    const other = KeyPool.open(SHORT);
    const g = holder.tryLock('k');
    assert.ok(g);
    const signal = g.signal;
    assert.equal(signal.aborted, false);
    assert.equal(g.signal, signal, 'the same signal every time');
    const aborted = abortOf(signal);
    assert.equal(other.forceUnlock('k'), true);
    // The holder's renewal (every third of the lease) finds the hold gone; the test's timeout
    // bounds it.
    await aborted;
    assert.equal(signal.aborted, true);
    assert.equal(signal.reason.code, 'KEYLOCK_NOT_OWNER');
    assert.match(signal.reason.message, /lost/);
    assert.equal(g.isCurrent(), false);
    assert.throws(
      () => g.release(),
      (e) => e.code === 'KEYLOCK_NOT_OWNER',
    );
    // A lock-many guard's signal aborts when any of its keys is lost.
    const many = holder.tryLockMany(['m1', 'm2']);
    assert.ok(many);
    const manySignal = many.signal;
    const manyAborted = abortOf(manySignal);
    other.forceUnlock('m2');
    await manyAborted;
    assert.equal(manySignal.reason.code, 'KEYLOCK_NOT_OWNER');
    assert.throws(
      () => many.release(),
      (e) => e.code === 'KEYLOCK_NOT_OWNER',
    );
    assert.equal(holder.isLocked('m1'), false, 'the other key is released all the same');
  },
);

test(
  'a guard held normally on a server scope keeps its signal unaborted past a lease and more',
  { ...T, skip: T.skip || (SHM && 'not a server scope') },
  async () => {
    const pool = KeyPool.open(SHORT);
    const g = await pool.lock('held');
    const signal = g.signal;
    let fired = false;
    signal.addEventListener('abort', () => (fired = true));
    // Three leases' time on Redis, nearly two on PostgreSQL: renewals keep it held.
    await new Promise((resolve) => setTimeout(resolve, 1800));
    assert.equal(fired, false);
    assert.equal(g.isCurrent(), true);
    g.release();
    assert.equal(signal.aborted, false, 'a release is not a loss');
    assert.equal(pool.isLocked('held'), false);
  },
);

test(
  'a shared-memory guard has a signal that never aborts, even when force-unlocked',
  { ...T, skip: T.skip || (!SHM && 'not a shared-memory scope') },
  async () => {
    const [a, b] = opens(kinds[0][1]);
    const g = a.tryLock(`${RUN}lost`);
    assert.ok(g);
    const signal = g.signal;
    assert.equal(b.forceUnlock(`${RUN}lost`), true);
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(signal.aborted, false, 'shared-memory holders learn of a force-unlock at release');
    assert.throws(
      () => g.release(),
      (e) => e.code === 'KEYLOCK_NOT_OWNER',
    );
  },
);

test('KeyPool stats on this scope: the same fields, null where the scope cannot tell', T, async () => {
  // A scope of its own, so that the scope-wide counts are this test's alone.
  const name = SHM ? `${SCOPE}-stats` : `${SCOPE}?prefix=${RUN}stats`;
  const [a, b] = opens(() => KeyPool.open(name, SHM ? { capacity: 64 } : {}));
  const until = async (what, cond) => {
    const end = Date.now() + 20_000;
    while (!cond()) {
      assert.ok(Date.now() < end, `${what}: not within 20 s`);
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  };
  const held = a.tryLock('k');
  const readers = [a.tryLock('r', { mode: 'shared' }), a.tryLock('r', { mode: 'shared' })];
  assert.ok(held && readers[0] && readers[1]);
  const waiter = b.lock('k');
  await until('the waiter to queue', () => b.stats().waitingHere === 1);
  const sa = a.stats();
  assert.equal(sa.heldHere, 2);
  assert.equal(sa.waitingHere, 0);
  assert.equal(b.stats().heldHere, 0);
  assert.equal(a.size, 2);
  if (SHM) {
    assert.deepEqual([sa.held, sa.waiting, sa.sharedHolds, sa.capacity, sa.entriesInUse], [2, 1, 2, 64, 2]);
  } else {
    // Redis and PostgreSQL: only this process's figures; the rest is null, not a guess.
    assert.deepEqual(
      [sa.held, sa.waiting, sa.sharedHolds, sa.capacity, sa.entriesInUse],
      [null, null, null, null, null],
    );
  }
  assert.equal(sa.entriesAllocated, null);
  held.release();
  const got = await waiter;
  for (const r of readers) r.release();
  assert.equal(b.stats().heldHere, 1);
  assert.equal(b.stats().waitingHere, 0);
  got.release();
  await until('every key to be free', () => a.size === 0 && b.size === 0);
  assert.equal(a.stats().heldHere, 0);
});

test(
  'StripedLock stats on a shared-memory region: stripes, held and queued waiters',
  { ...T, skip: T.skip || (!SHM && 'not a shared-memory scope') },
  async () => {
    const [a, b] = opens(() => StripedLock.open(`${SCOPE}-striped-stats`, { stripes: 16 }));
    const g = a.tryLock('k');
    assert.ok(g);
    const waiter = b.lock('k');
    const end = Date.now() + 20_000;
    while (a.stats().waiting !== 1) {
      assert.ok(Date.now() < end, 'the waiter did not queue within 20 s');
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    const s = a.stats();
    assert.deepEqual([s.stripes, s.held, s.heldHere, s.waitingHere, a.size], [16, 1, 1, 0, 1]);
    assert.equal(b.stats().waitingHere, 1);
    g.release();
    (await waiter).release();
    assert.equal(a.size, 0);
  },
);

// The keyed semaphore on this scope's name: every scope opens one that counts units across
// opens.
test('Semaphore.open on this scope: units shared across opens', T, async () => {
  const name = SHM ? `${SCOPE}-sem` : `${SCOPE}?prefix=${RUN}sem`;
  const [a, b] = opens(() => Semaphore.open(name, { permits: 2 }));
  const p1 = await a.acquire('k');
  const p2 = await b.acquire('k');
  await assert.rejects(b.acquire('k', { timeout: 20 }), (e) => e.code === 'KEYLOCK_TIMEOUT');
  p1.release();
  const p3 = await a.acquire('k', { timeout: 5_000 });
  p2.release();
  p3.release();
});

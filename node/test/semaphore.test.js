'use strict';
// Semaphore: units per key counted inside the critical section, strict FIFO for heavy requests,
// timeouts and aborts that leave nothing held, a fence per acquisition, bad weights and
// permits, disposal, withPermit; and wrap() for every keyed primitive.

const test = require('node:test');
const assert = require('node:assert/strict');
const { setImmediate: tick } = require('node:timers/promises');
const { KeyPool, StripedLock, Semaphore, Permit, Guard, KeylockError, unlink } = require('..');
const native = require('../binding.js').load();

const T = { timeout: 60_000 };

// Waiters for a key this thread holds do not keep the event loop alive (as with a
// pure-JavaScript lock): hold the loop open while a test awaits them.
async function alive(promise) {
  const timer = setInterval(() => {}, 1000);
  try {
    return await promise;
  } finally {
    clearInterval(timer);
  }
}

// Nothing held, nothing waiting: on the semaphore and in this thread's waiter table.
function assertIdle(sem, keys) {
  for (const k of keys) assert.equal(sem.info(k), null, `key ${k} is free`);
  const s = sem.stats();
  assert.equal(s.held, 0, 'no key held');
  assert.equal(s.waiting, 0, 'no waiter queued');
  assert.deepEqual(native.waiterCounts(), [0, 0], 'no waiter pending in this thread');
}

function isInvalid(ctor) {
  return (e) => e instanceof ctor && e.code === 'KEYLOCK_INVALID_ARGUMENT';
}

// A deterministic sequence of numbers in [0, n).
function rng(seed) {
  let x = seed >>> 0;
  return (n) => {
    x = (x * 1103515245 + 12345) >>> 0;
    return (x >>> 8) % n;
  };
}

test('never more than permits units of a key inside, with weights 1..3', T, async () => {
  const PERMITS = 4;
  const KEYS = 3;
  const TASKS = 48;
  const ROUNDS = 25;
  const sem = new Semaphore(PERMITS);
  assert.equal(sem.permits, PERMITS);
  const inside = new Array(KEYS).fill(0);
  const most = new Array(KEYS).fill(0);
  let entered = 0;
  let unitsEntered = 0;
  async function body(k, permit) {
    assert.ok(permit instanceof Permit && permit instanceof Guard);
    inside[k] += permit.weight;
    entered++;
    unitsEntered += permit.weight;
    assert.ok(inside[k] <= PERMITS, `key ${k}: ${inside[k]} units inside, permits ${PERMITS}`);
    most[k] = Math.max(most[k], inside[k]);
    // The core's count covers everyone inside (and waiters it has just granted).
    const info = sem.info(k);
    assert.ok(info.units >= inside[k] && info.units <= PERMITS, `info.units ${info.units}`);
    await tick();
    assert.ok(inside[k] <= PERMITS);
    inside[k] -= permit.weight;
  }
  let asked = 0;
  async function task(seed) {
    const next = rng(seed);
    for (let r = 0; r < ROUNDS; r++) {
      const k = next(KEYS);
      const weight = 1 + next(3);
      asked += weight;
      if (r % 2 === 0) {
        await sem.withPermit(k, (p) => body(k, p), { weight });
      } else {
        const p = await sem.acquire(k, { weight });
        assert.equal(p.weight, weight);
        try {
          await body(k, p);
        } finally {
          p.release();
        }
      }
    }
  }
  await alive(Promise.all(Array.from({ length: TASKS }, (_, i) => task(i + 1))));
  assert.equal(entered, TASKS * ROUNDS, 'every acquisition entered once');
  assert.equal(unitsEntered, asked, 'every unit asked for was granted');
  assert.deepEqual(inside, new Array(KEYS).fill(0));
  for (const m of most) assert.ok(m <= PERMITS);
  assertIdle(sem, [0, 1, 2]);
});

test('a heavy request queued behind a holder is not passed by later light ones', T, async () => {
  const sem = new Semaphore(3);
  const holder = sem.tryAcquire('k');
  assert.equal(sem.info('k').units, 1);
  const order = [];
  const heavy = sem.acquire('k', { weight: 3 }).then((p) => {
    order.push('heavy');
    return p;
  });
  const lights = Array.from({ length: 5 }, (_, i) =>
    sem.acquire('k').then((p) => {
      order.push(i);
      return p;
    }),
  );
  // Two units are free, but a request waits ahead: neither a try nor the waiting light
  // requests take them.
  assert.equal(sem.tryAcquire('k'), null);
  await tick();
  assert.deepEqual(order, []);
  const waiting = sem.info('k');
  assert.equal(waiting.units, 1);
  assert.equal(waiting.holders, 1);
  assert.equal(waiting.waiters, 6);

  holder.release();
  const h = await alive(heavy);
  assert.equal(h.weight, 3);
  assert.deepEqual(order, ['heavy']);
  assert.equal(sem.info('k').units, 3);
  assert.equal(sem.info('k').waiters, 5);

  h.release();
  const granted = [];
  for (const p of lights) {
    const permit = await alive(p);
    granted.push(permit);
    permit.release();
  }
  assert.deepEqual(order, ['heavy', 0, 1, 2, 3, 4], 'served in the order asked');
  const fences = [h, ...granted].map((p) => p.fence);
  for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], 'fences rise in grant order');
  assertIdle(sem, ['k']);
});

test('timeouts leave nothing held or queued', T, async () => {
  const sem = new Semaphore(2);
  const a = sem.tryAcquire('k');
  const b = sem.tryAcquire('k', { weight: 1 });
  assert.equal(sem.tryAcquire('k'), null);
  const next = rng(7);
  const attempts = Array.from({ length: 40 }, (_, i) =>
    sem.acquire('k', { weight: 1 + next(2), timeout: i % 4 === 0 ? 0 : 1 + next(5) }).then(
      (p) => {
        p.release();
        return 'granted';
      },
      (e) => e,
    ),
  );
  const outcomes = await alive(Promise.all(attempts));
  for (const e of outcomes) {
    assert.ok(e instanceof KeylockError, `a timeout, not ${e}`);
    assert.equal(e.code, 'KEYLOCK_TIMEOUT');
  }
  assert.equal(sem.info('k').units, 2);
  assert.equal(sem.info('k').waiters, 0);
  a.release();
  b.release();
  assertIdle(sem, ['k']);
  // The units are free again.
  const all = sem.tryAcquire('k', { weight: 2 });
  assert.ok(all !== null);
  all.release();
  assertIdle(sem, ['k']);
});

test('an AbortSignal storm, with releases in the middle, leaves nothing held', T, async () => {
  const PERMITS = 3;
  const sem = new Semaphore(PERMITS);
  const next = rng(42);
  for (let round = 0; round < 5; round++) {
    const holders = [sem.tryAcquire('a', { weight: PERMITS }), sem.tryAcquire('b', { weight: 2 })];
    const controllers = [];
    const results = [];
    let inside = { a: 0, b: 0 };
    for (let i = 0; i < 120; i++) {
      const key = i % 3 === 0 ? 'b' : 'a';
      const c = new AbortController();
      if (i % 17 === 0) c.abort(new Error(`early ${i}`));
      controllers.push(c);
      results.push(
        sem
          .withPermit(
            key,
            async (p) => {
              inside[key] += p.weight;
              assert.ok(inside[key] <= PERMITS);
              await tick();
              inside[key] -= p.weight;
              return 'granted';
            },
            { weight: 1 + next(PERMITS), signal: c.signal },
          )
          .catch((e) => e),
      );
    }
    // Abort in a shuffled order, releasing the holders part-way so that some waiters are
    // granted (and some are granted just as they are aborted).
    const order = controllers.map((_, i) => i).sort(() => next(3) - 1);
    order.forEach((i, n) => {
      if (n === 40) holders[0].release();
      if (n === 80) holders[1].release();
      controllers[i].abort(new Error(`abort ${i}`));
    });
    const outcomes = await alive(Promise.all(results));
    let granted = 0;
    for (const [i, o] of outcomes.entries()) {
      if (o === 'granted') granted++;
      else assert.match(o.message, new RegExp(`(early|abort) ${i}$`), `request ${i} rejected with its reason`);
    }
    assert.ok(granted <= outcomes.length);
    inside = { a: 0, b: 0 };
    assertIdle(sem, ['a', 'b']);
  }
});

test('every acquisition has its own fence, rising per key', T, async () => {
  const sem = new Semaphore(3);
  const seen = [];
  const p1 = sem.tryAcquire('f');
  const p2 = sem.tryAcquire('f', { weight: 2 });
  assert.ok(p2.fence > p1.fence, 'concurrent holders have their own fences');
  assert.equal(sem.info('f').fence, p2.fence, "info's fence is the newest acquisition's");
  assert.equal(sem.info('f').holders, 2);
  assert.equal(sem.info('f').units, 3);
  seen.push(p1.fence, p2.fence);
  const waiter = sem.acquire('f', { weight: 2 });
  p1.release();
  p2.release();
  const p3 = await alive(waiter);
  seen.push(p3.fence);
  p3.release();
  for (let i = 0; i < 20; i++) {
    const p = await sem.acquire('f', { weight: 1 + (i % 3) });
    seen.push(p.fence);
    p.release();
  }
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i] > seen[i - 1], `fence ${i} rises`);
  // Another key has fences of its own.
  const other = sem.tryAcquire('g');
  assert.equal(typeof other.fence, 'bigint');
  other.release();
  assertIdle(sem, ['f', 'g']);
});

test('bad permits and bad weights are refused, and hold nothing', T, async () => {
  for (const bad of [0, 32768, 2 ** 32]) {
    assert.throws(
      () => new Semaphore(bad),
      (e) => e.code === 'KEYLOCK_INVALID_ARGUMENT',
      `permits ${bad}`,
    );
  }
  assert.throws(() => new Semaphore(1.5), isInvalid(RangeError));
  assert.throws(() => new Semaphore(-1), isInvalid(RangeError));
  assert.throws(() => new Semaphore('3'), isInvalid(TypeError));
  assert.throws(() => new Semaphore(), isInvalid(TypeError));
  assert.throws(() => Semaphore.open('local:'), isInvalid(TypeError));
  assert.throws(
    () => Semaphore.open('local:', { permits: 2, fifo: true }),
    (e) => e.code === 'KEYLOCK_INVALID_ARGUMENT',
  );
  // A shared-memory semaphore: its permits are the region's, and another open must agree.
  const shmName = `shm:keylock-node-sem-${process.pid}`;
  try {
    const shm = Semaphore.open(shmName, { permits: 2 });
    assert.equal(shm.permits, 2);
    assert.throws(
      () => Semaphore.open(shmName, { permits: 3 }),
      (e) => e.code === 'KEYLOCK_INCOMPATIBLE',
    );
  } finally {
    unlink(shmName);
  }
  const opened = Semaphore.open('local:', { permits: 2 });
  assert.equal(opened.permits, 2);
  assert.equal(opened.name, 'local:');

  const sem = new Semaphore(3);
  for (const weight of [0, 4, 1000]) {
    await assert.rejects(sem.acquire('k', { weight }), isInvalid(RangeError), `weight ${weight}`);
    assert.throws(() => sem.tryAcquire('k', { weight }), isInvalid(RangeError), `weight ${weight}`);
    await assert.rejects(
      sem.withPermit('k', () => 1, { weight }),
      isInvalid(RangeError),
    );
  }
  await assert.rejects(sem.acquire('k', { weight: 4 }), /at most its permits/, "the core's reason");
  for (const weight of [-1, 1.5, NaN]) {
    await assert.rejects(sem.acquire('k', { weight }), isInvalid(RangeError));
  }
  await assert.rejects(sem.acquire('k', { weight: '2' }), isInvalid(TypeError));
  await assert.rejects(sem.acquire('k', { timeout: -1 }), isInvalid(RangeError));
  await assert.rejects(sem.acquire('k', { signal: {} }), isInvalid(TypeError));
  await assert.rejects(sem.acquire(true), isInvalid(TypeError));
  assert.throws(
    () =>
      sem.wrap(
        () => 1,
        () => 'k',
        { weight: 'x' },
      ),
    isInvalid(TypeError),
  );
  // A weight the core refuses while units are held and waited for: the others are untouched.
  const held = sem.tryAcquire('k', { weight: 3 });
  const waiting = sem.acquire('k');
  await assert.rejects(sem.acquire('k', { weight: 4 }), isInvalid(RangeError));
  assert.equal(sem.info('k').waiters, 1);
  held.release();
  (await alive(waiting)).release();
  assertIdle(sem, ['k']);
});

test('Symbol.dispose and Symbol.asyncDispose release (what using and await using call)', T, async () => {
  const sem = new Semaphore(2);
  const p = sem.tryAcquire('k', { weight: 2 });
  p[Symbol.dispose]();
  assert.equal(p.released, true);
  p[Symbol.dispose](); // twice: a no-op
  assert.equal(sem.info('k'), null);
  const q = await sem.acquire('k');
  await q[Symbol.asyncDispose]();
  assert.equal(sem.info('k'), null);
  await q[Symbol.asyncDispose]();
  // After a force release, disposal ignores the stale permit, as a Guard's does.
  const r = sem.tryAcquire('k');
  assert.equal(sem.forceRelease('k'), true);
  assert.equal(sem.forceRelease('k'), false);
  assert.throws(
    () => r.release(),
    (e) => e instanceof KeylockError && e.code === 'KEYLOCK_NOT_OWNER',
  );
  const s = sem.tryAcquire('k');
  sem.forceRelease('k');
  await s[Symbol.asyncDispose]();
  assertIdle(sem, ['k']);
});

test('using and await using release at the end of the block (where the engine has them)', T, async (t) => {
  const AsyncFunction = (async () => {}).constructor;
  let run;
  try {
    run = new AsyncFunction(
      'sem',
      `{
        await using p = await sem.acquire('k', { weight: 2 });
        if (sem.info('k').units !== 2) throw new Error('not held inside the block');
      }
      {
        using q = sem.tryAcquire('k');
        if (sem.info('k').units !== 1) throw new Error('not held inside the block');
      }
      return sem.info('k');`,
    );
  } catch (e) {
    if (!(e instanceof SyntaxError)) throw e;
    t.skip(`this engine has no using declarations (Node ${process.version})`);
    return;
  }
  const sem = new Semaphore(2);
  assert.equal(await run(sem), null);
  assertIdle(sem, ['k']);
});

test('withPermit returns, rethrows and releases either way', T, async () => {
  const sem = new Semaphore(2);
  assert.equal(await sem.withPermit('k', (p) => p.weight * 10, { weight: 2 }), 20);
  await assert.rejects(
    sem.withPermit('k', () => {
      throw new Error('sync');
    }),
    /sync/,
  );
  await assert.rejects(
    sem.withPermit(
      'k',
      async () => {
        await tick();
        throw new Error('async');
      },
      { weight: 2 },
    ),
    /async/,
  );
  assert.equal(sem.info('k'), null);
  await assert.rejects(sem.withPermit('k', 'not a function'), isInvalid(TypeError));
  // A holder lost to forceRelease while fn ran: its result gives way to KEYLOCK_NOT_OWNER.
  await assert.rejects(
    sem.withPermit('k', () => {
      sem.forceRelease('k');
      return 1;
    }),
    (e) => e instanceof KeylockError && e.code === 'KEYLOCK_NOT_OWNER',
  );
  assertIdle(sem, ['k']);
});

test('leases and extend on permits', T, async () => {
  const sem = new Semaphore(2);
  const p = await sem.acquire('k', { lease: 60_000, weight: 2 });
  assert.ok(p.leaseRemaining() > 0 && p.leaseRemaining() <= 60_000);
  assert.ok(sem.info('k').leaseRemaining !== null);
  p.extend(120_000);
  assert.ok(p.leaseRemaining() > 60_000);
  assert.equal(p.isCurrent(), true);
  p.release();
  assert.equal(p.isCurrent(), false);
  assertIdle(sem, ['k']);
});

test("info() has units for locks too: a lock's holders", T, () => {
  const pool = new KeyPool();
  const a = pool.tryLock('k', { mode: 'shared' });
  const b = pool.tryLock('k', { mode: 'shared' });
  assert.equal(pool.info('k').units, 2);
  a.release();
  b.release();
  const striped = new StripedLock(8);
  const g = striped.tryLock('k');
  assert.equal(striped.info('k').units, 1);
  g.release();
  assert.equal(native.keyedMade(native.keyedOpen('local:', {}).handle).permits, undefined, 'a lock has no permits');
});

// wrap(): every keyed primitive.

function wrapped(lock, opts) {
  const inside = new Map();
  let most = 0;
  const calls = [];
  // A method-like function: `this`, two parameters, an awaited body.
  async function transfer(account, amount) {
    const n = (inside.get(account) ?? 0) + 1;
    inside.set(account, n);
    most = Math.max(most, n);
    calls.push([this && this.tag, account, amount]);
    await tick();
    inside.set(account, inside.get(account) - 1);
    if (amount < 0) throw new Error(`negative ${amount}`);
    return amount * 2;
  }
  const f = lock.wrap(transfer, (account) => `acct-${account}`, opts);
  return { f, most: () => most, calls };
}

for (const [name, make, opts, limit] of [
  ['KeyPool', () => new KeyPool(), undefined, 1],
  ['StripedLock', () => new StripedLock(64), { timeout: 30_000 }, 1],
  ['Semaphore (weight 2 of 4)', () => new Semaphore(4), { weight: 2, timeout: 30_000 }, 2],
  ['Semaphore (weight 1 of 3)', () => new Semaphore(3), undefined, 3],
]) {
  test(`wrap on a ${name}: fn runs under keyOf's key, keeps its name and length`, T, async () => {
    const lock = make();
    const { f, most, calls } = wrapped(lock, opts);
    assert.equal(f.name, 'transfer');
    assert.equal(f.length, 2);
    const obj = { tag: 'me', f };
    const results = await alive(Promise.all(Array.from({ length: 30 }, (_, i) => obj.f(i % 2, i))));
    assert.deepEqual(
      results,
      Array.from({ length: 30 }, (_, i) => i * 2),
    );
    assert.equal(calls.length, 30);
    assert.ok(
      calls.every(([tag]) => tag === 'me'),
      'this is passed through',
    );
    assert.ok(most() <= limit, `at most ${limit} inside per key (saw ${most()})`);
    await assert.rejects(f(0, -1), /negative -1/);
    assert.equal(lock.info('acct-0'), null, 'released after a rejection');
    const broken = lock.wrap(
      () => 1,
      () => {
        throw new Error('no key');
      },
    );
    await assert.rejects(broken(), /no key/);
    const badKey = lock.wrap(
      () => 1,
      () => true,
    );
    await assert.rejects(badKey(), isInvalid(TypeError));
    assert.throws(() => lock.wrap('x', () => 'k'), isInvalid(TypeError));
    assert.throws(() => lock.wrap(() => 1, 'k'), isInvalid(TypeError));
    assert.throws(
      () =>
        lock.wrap(
          () => 1,
          () => 'k',
          { timeout: -5 },
        ),
      isInvalid(RangeError),
    );
    assert.equal(lock.stats().held, 0);
    assert.deepEqual(native.waiterCounts(), [0, 0]);
  });
}

test('wrap passes its timeout and signal to every call', T, async () => {
  const pool = new KeyPool();
  const g = pool.tryLock('busy');
  const timed = pool.wrap(
    () => 'never',
    () => 'busy',
    { timeout: 1 },
  );
  await assert.rejects(alive(timed()), (e) => e.code === 'KEYLOCK_TIMEOUT');
  const c = new AbortController();
  const sem = new Semaphore(1);
  const p = sem.tryAcquire('busy');
  const aborted = sem.wrap(
    () => 'never',
    () => 'busy',
    { signal: c.signal },
  );
  const pending = aborted();
  c.abort(new Error('stop'));
  await assert.rejects(pending, /stop/);
  g.release();
  p.release();
  assert.equal(pool.info('busy'), null);
  assertIdle(sem, ['busy']);
});

test('ESM import gives the same Semaphore and Permit', T, async () => {
  const esm = await import('../index.mjs');
  assert.equal(esm.Semaphore, Semaphore);
  assert.equal(esm.Permit, Permit);
  assert.equal(esm.default.Semaphore, Semaphore);
});

'use strict';
// Async acquisition: exact counts under contention, withLock, timeouts, AbortSignal.

const test = require('node:test');
const assert = require('node:assert/strict');
const { setImmediate: tick } = require('node:timers/promises');
const { KeyPool, StripedLock, RwLock, Semaphore } = require('..');
const native = require('../binding.js').load();
const { Occupancy } = require('./occupancy.js');

const T = { timeout: 60_000 };

// `{ field: position }` of one of the addon's records, from its schema.
const positions = (record) =>
  Object.fromEntries(
    native
      .recordSchema()
      .find((r) => r.name === record)
      .fields.map((f) => [f.name, f.position]),
  );

// AbortSignal.timeout() uses an unreferenced timer, and waiters for a lock this thread holds do
// not keep the event loop alive (as with a pure-JavaScript lock): hold the loop open ourselves.
async function alive(promise) {
  const timer = setInterval(() => {}, 1000);
  try {
    return await promise;
  } finally {
    clearInterval(timer);
  }
}

// TASKS tasks each do ROUNDS increments of a random key's counter, yielding to the event loop
// inside the critical section so that unprotected increments would be lost; an Occupancy counts
// the holders inside.
async function stress(lock, { tasks = 64, rounds = 200, keys = 8, many = false } = {}) {
  const counters = new Array(keys).fill(0);
  const occupancy = new Occupancy(keys);
  async function task(seed) {
    let x = seed;
    for (let r = 0; r < rounds; r++) {
      x = (x * 1103515245 + 12345) >>> 0;
      const a = x % keys;
      const b = (a + 1 + ((x >>> 8) % (keys - 1))) % keys;
      const held = many ? [a, b] : [a];
      const body = () =>
        occupancy.run(held, async () => {
          const before = held.map((k) => counters[k]);
          await tick();
          held.forEach((k, i) => (counters[k] = before[i] + 1));
        });
      if (many)
        await lock.withLockMany(
          held.map((k) => `key-${k}`),
          body,
        );
      else await lock.withLock(`key-${a}`, body);
    }
  }
  await Promise.all(Array.from({ length: tasks }, (_, i) => task(i + 1)));
  occupancy.check();
  return { total: counters.reduce((s, c) => s + c, 0), completed: occupancy.completed };
}

for (const [name, make] of [
  ['KeyPool', () => new KeyPool()],
  ['StripedLock', () => new StripedLock(64)],
]) {
  test(`${name}: withLock stress has exact counts`, T, async () => {
    const lock = make();
    const { total, completed } = await stress(lock);
    assert.equal(completed, 64 * 200);
    assert.equal(total, 64 * 200);
    assert.equal(lock.isLocked('key-0'), false);
    assert.deepEqual(native.waiterCounts(), [0, 0]);
  });

  test(`${name}: withLockMany stress has exact counts (deadlock-free)`, T, async () => {
    const lock = make();
    const { total, completed } = await stress(lock, { many: true, rounds: 100 });
    assert.equal(completed, 64 * 100 * 2, 'one entry per key held');
    assert.equal(total, 64 * 100 * 2);
    assert.deepEqual(native.waiterCounts(), [0, 0]);
  });
}

test('KeyPool: explicit lock()/release() pairs with exact counts', T, async () => {
  const pool = new KeyPool();
  const occupancy = new Occupancy(1);
  let count = 0;
  await Promise.all(
    Array.from({ length: 200 }, async () => {
      for (let i = 0; i < 50; i++) {
        const g = await pool.lock('one');
        try {
          await occupancy.run(0, async () => {
            const c = count;
            await tick();
            count = c + 1;
          });
        } finally {
          g.release();
        }
      }
    }),
  );
  occupancy.check();
  assert.equal(occupancy.completed, 200 * 50);
  assert.equal(count, 200 * 50);
  const st = pool.stats();
  assert.equal(st.held, 0);
  assert.equal(st.waiting, 0);
  assert.equal(st.entriesInUse, 0);
});

test('RwLock: readers overlap, writers exclude everyone; exact counts', T, async () => {
  const rw = new RwLock();
  const occupancy = new Occupancy(1);
  let readers = 0;
  let maxReaders = 0;
  let writes = 0;
  const reader = async () => {
    for (let i = 0; i < 100; i++) {
      await rw.withRead(() =>
        occupancy.run(
          0,
          async () => {
            maxReaders = Math.max(maxReaders, ++readers);
            await tick();
            readers--;
          },
          { shared: true },
        ),
      );
    }
  };
  const writer = async () => {
    for (let i = 0; i < 50; i++) {
      await rw.withWrite(() =>
        occupancy.run(0, async () => {
          const w = writes;
          await tick();
          writes = w + 1;
        }),
      );
    }
  };
  await Promise.all([...Array.from({ length: 16 }, reader), ...Array.from({ length: 4 }, writer)]);
  occupancy.check();
  assert.equal(occupancy.completed, 16 * 100 + 4 * 50);
  assert.equal(writes, 200);
  assert.ok(maxReaders > 1, 'readers shared the lock');
  assert.equal(rw.isLocked(), false);
});

// Every with-form, with and without options, on a lock that is held: the waiter runs `fn` when it
// is granted (waiting.js, holding.js's runHoldingInto), and settles with what `fn` does.
test(
  "every with-form that waits (withLock, withPermit, withLockMany, withRead, withWrite) settles with fn's outcome, always releasing",
  T,
  async () => {
    const LONG = { timeout: 60_000 };
    const LEASED = { lease: 60_000 };
    const EXCL = { mode: 'exclusive' };
    const makers = [
      ['KeyPool', () => new KeyPool(), (l, k) => l.tryLock(k), (l, k, fn) => l.withLock(k, fn)],
      ['StripedLock', () => new StripedLock(8), (l, k) => l.tryLock(k), (l, k, fn) => l.withLock(k, fn)],
      ['Semaphore', () => new Semaphore(1), (l, k) => l.tryAcquire(k), (l, k, fn) => l.withPermit(k, fn)],
      // With options: a timeout (the plain acquire), a lease or a mode (the general one).
      ['KeyPool, timeout', () => new KeyPool(), (l, k) => l.tryLock(k), (l, k, fn) => l.withLock(k, fn, LONG)],
      ['KeyPool, lease', () => new KeyPool(), (l, k) => l.tryLock(k), (l, k, fn) => l.withLock(k, fn, LEASED)],
      ['StripedLock, mode', () => new StripedLock(8), (l, k) => l.tryLock(k), (l, k, fn) => l.withLock(k, fn, EXCL)],
      [
        'Semaphore, timeout',
        () => new Semaphore(1),
        (l, k) => l.tryAcquire(k),
        (l, k, fn) => l.withPermit(k, fn, LONG),
      ],
      [
        'Semaphore, lease',
        () => new Semaphore(1),
        (l, k) => l.tryAcquire(k),
        (l, k, fn) => l.withPermit(k, fn, LEASED),
      ],
      // Several keys, and the reader-writer lock (whose one lock stands for every key here).
      ['KeyPool, many', () => new KeyPool(), (l, k) => l.tryLock(k), (l, k, fn) => l.withLockMany([k, 'x'], fn)],
      ['RwLock, write', () => new RwLock(), (l) => l.tryWrite(), (l, k, fn) => l.withWrite(fn)],
      ['RwLock, read', () => new RwLock(), (l) => l.tryWrite(), (l, k, fn) => l.withRead(fn, LONG)],
    ];
    for (const [name, make, take, hold] of makers) {
      const lock = make();
      const busy = (l, k) =>
        name.startsWith('Semaphore') ? l.info(k) !== null : name.startsWith('RwLock') ? l.isLocked() : l.isLocked(k);
      // Runs `fn` holding k through a wait: k is taken first and released after the call began.
      async function waited(fn) {
        const g = take(lock, 'k');
        assert.ok(g, `${name}: k was free`);
        let releaseReturned = false;
        const p = hold(lock, 'k', (guard) => {
          assert.equal(releaseReturned, true, `${name}: fn runs after the release that granted it returns`);
          return fn(guard);
        });
        await tick();
        g.release();
        releaseReturned = true;
        try {
          return await p;
        } finally {
          assert.equal(busy(lock, 'k'), false, `${name}: released`);
        }
      }
      assert.equal(await waited(() => 7), 7, `${name}: synchronous fn`);
      assert.equal(await waited(async () => 8), 8, `${name}: async fn`);
      assert.equal(await waited(() => ({ then: (ok) => ok(9) })), 9, `${name}: a thenable`);
      await assert.rejects(
        waited(() => {
          throw new Error('sync throw');
        }),
        /sync throw/,
      );
      await assert.rejects(
        waited(async () => {
          await tick();
          throw new Error('rejected');
        }),
        /rejected/,
      );
      // Waiters run in the order they came, one at a time (readers together).
      const g = take(lock, 'k');
      const order = [];
      let inside = 0;
      const all = [1, 2, 3].map((i) =>
        hold(lock, 'k', async () => {
          inside++;
          // Readers share the lock; every other holder here is alone.
          if (name !== 'RwLock, read') assert.equal(inside, 1, `${name}: one holder at a time`);
          order.push(i);
          await tick();
          inside--;
          return i;
        }),
      );
      await tick();
      g.release();
      assert.deepEqual(await Promise.all(all), [1, 2, 3]);
      assert.deepEqual(order, [1, 2, 3], `${name}: first come, first served`);
      assert.equal(busy(lock, 'k'), false);
    }
    // A hold lost while fn ran (a force-unlock, and another holder since) rejects, and the
    // release leaves the new holder alone.
    const pool = new KeyPool();
    const g = pool.tryLock('w');
    const p = pool.withLock('w', async () => {
      pool.forceUnlock('w');
      assert.ok(pool.tryLock('w'));
      await tick();
      return 'done';
    });
    await tick();
    g.release();
    await assert.rejects(p, { code: 'KEYLOCK_NOT_OWNER' }, 'a waited withLock reports that its hold was lost');
    assert.equal(pool.isLocked('w'), true, "the waited withLock's release left the next holder alone");
    pool.forceUnlock('w');
  },
);

test('withLock returns, rethrows and rejects, always releasing', T, async () => {
  for (const lock of [new KeyPool(), new StripedLock(8)]) {
    assert.equal(await lock.withLock('k', () => 7), 7, 'synchronous fn');
    assert.equal(lock.isLocked('k'), false);
    assert.equal(await lock.withLock('k', async () => 8), 8, 'async fn');
    await assert.rejects(
      lock.withLock('k', () => {
        throw new Error('sync throw');
      }),
      /sync throw/,
    );
    assert.equal(lock.isLocked('k'), false);
    await assert.rejects(
      lock.withLock('k', async () => {
        await tick();
        throw new Error('rejected');
      }),
      /rejected/,
    );
    assert.equal(lock.isLocked('k'), false);
    // The same through the slow path (the key is busy first, and with options).
    const g = lock.tryLock('k');
    setTimeout(() => g.release(), 5);
    await assert.rejects(
      lock.withLock(
        'k',
        () => {
          throw new Error('slow');
        },
        { timeout: 5000 },
      ),
      /slow/,
    );
    assert.equal(lock.isLocked('k'), false);
    await assert.rejects(
      lock.withLockMany(['k', 'j'], async () => {
        throw new Error('many');
      }),
      /many/,
    );
    assert.equal(lock.isLocked('k') || lock.isLocked('j'), false);
    assert.equal(await lock.withLockMany(['k', 'j'], () => 'ok'), 'ok');
  }
  const rw = new RwLock();
  await assert.rejects(
    rw.withWrite(() => {
      throw new Error('w');
    }),
    /w/,
  );
  await assert.rejects(
    rw.withRead(async () => {
      throw new Error('r');
    }),
    /r/,
  );
  assert.equal(rw.isLocked(), false);
});

test('timeout rejects with KEYLOCK_TIMEOUT and leaves nothing behind', T, async () => {
  const pool = new KeyPool();
  const g = pool.tryLock('a');
  await assert.rejects(
    pool.lock('a', { timeout: 30 }),
    (e) => e.code === 'KEYLOCK_TIMEOUT' && e.name === 'KeylockError',
  );
  await assert.rejects(pool.lock('a', { timeout: 0 }), { code: 'KEYLOCK_TIMEOUT' });
  await assert.rejects(pool.lockMany(['b', 'a'], { timeout: 10 }), { code: 'KEYLOCK_TIMEOUT' });
  assert.equal(pool.isLocked('b'), false);
  let st = pool.stats();
  assert.equal(st.waiting, 0);
  assert.equal(st.held, 1);
  assert.equal(st.entriesInUse, 1, 'only the held key has an entry');
  g.release();
  st = pool.stats();
  assert.equal(st.entriesInUse, 0);
  assert.deepEqual(native.waiterCounts(), [0, 0]);
  // The lock goes on working normally afterwards.
  (await pool.lock('a', { timeout: 100 })).release();
  const rw = new RwLock();
  const w = rw.tryWrite();
  await assert.rejects(rw.read({ timeout: 10 }), { code: 'KEYLOCK_TIMEOUT' });
  await assert.rejects(rw.write({ timeout: 0 }), { code: 'KEYLOCK_TIMEOUT' });
  w.release();
  assert.equal(rw.isLocked(), false);
});

test('a timed-out waiter does not take a lock released later', T, async () => {
  const pool = new KeyPool();
  const g = pool.tryLock('a');
  const waiting = pool.lock('a', { timeout: 20 });
  await assert.rejects(waiting, { code: 'KEYLOCK_TIMEOUT' });
  g.release();
  assert.equal(pool.isLocked('a'), false);
});

test('AbortSignal: aborted before, while waiting, and with AbortSignal.timeout', T, async () => {
  const pool = new KeyPool();
  const reason = new Error('stop');
  await assert.rejects(pool.lock('free', { signal: AbortSignal.abort(reason) }), (e) => e === reason);
  assert.equal(pool.isLocked('free'), false, 'an aborted signal wins even over a free key');
  const g = pool.tryLock('a');
  const ac = new AbortController();
  const p = pool.lock('a', { signal: ac.signal });
  await tick();
  ac.abort(reason);
  await assert.rejects(p, (e) => e === reason);
  const q = pool.lockMany(['b', 'a'], { signal: AbortSignal.timeout(10) });
  await assert.rejects(alive(q), (e) => e.name === 'TimeoutError');
  ac.abort(); // aborting again after the waiter is gone is harmless
  assert.equal(pool.stats().waiting, 0);
  g.release();
  assert.equal(pool.size, 0);
  assert.equal(pool.stats().entriesInUse, 0);
  // A signal that is never aborted does not disturb a normal acquisition.
  const keep = new AbortController();
  const h = pool.tryLock('c');
  const r = pool.lock('c', { signal: keep.signal, timeout: 5000 });
  h.release();
  (await r).release();
  const rw = new RwLock();
  const w = rw.tryWrite();
  const rp = rw.read({ signal: AbortSignal.timeout(5) });
  await assert.rejects(alive(rp), { name: 'TimeoutError' });
  w.release();
  assert.equal(rw.isLocked(), false);
});

test('a release serves a waiter of the same thread before it returns', T, async () => {
  const pool = new KeyPool();
  const g = pool.tryLock('a');
  const ac = new AbortController();
  let served = null;
  const first = pool.lock('a', { signal: ac.signal }).then((guard) => (served = guard));
  await tick();
  g.release(); // hands 'a' to `first`; its promise is resolved now, not on a later turn
  ac.abort(new Error('too late')); // so this abort finds nothing to cancel
  await first;
  assert.ok(served, 'the waiter was served');
  assert.equal(pool.isLocked('a'), true);
  served.release();
  assert.equal(pool.size, 0);
});

test('a release frees its slot at once, with or without a waiter, and a slot releases once', T, async () => {
  const { handleOf } = require('../lib/pools.js');
  const NOT_OWNER = native.statuses().find((s) => s.name === 'KEYLOCK_NOT_OWNER').code;
  const thread = globalThis[Symbol.for('keylock.thread.v2')];
  const SLOT = positions('output').slot;
  for (const lock of [new KeyPool(), new StripedLock(8)]) {
    const h = handleOf(lock);
    // Uncontended: the lock word alone releases it.
    assert.equal(h.lock('k'), undefined, 'taken at once');
    const slot = thread.out[SLOT];
    assert.ok(slot > 0, 'its slot is in the output record');
    assert.equal(native.heldCount(h.handle), 1);
    assert.equal((h.release(slot) ?? 0) & 0xff, 0);
    assert.equal(native.heldCount(h.handle), 0, 'its slot is free as the release returns');
    assert.equal(h.release(slot), NOT_OWNER, 'a slot releases once');
    assert.equal(lock.isLocked('k'), false);
    // With a waiter queued behind it: the full release, which hands the key over (and serves
    // the waiter, of this thread, before it returns).
    const first = lock.tryLock('k');
    const waiting = lock.lock('k');
    await tick();
    first.release();
    assert.equal(native.heldCount(h.handle), 1, "only the waiter's slot is held");
    (await waiting).release();
    assert.equal(native.heldCount(h.handle), 0);
    assert.equal(lock.isLocked('k'), false);
  }
});

test('cancelling a waiter that was handed the lock but not yet polled passes it on', T, async () => {
  // At the native level, a release's wake-up waits in the queue until runReady() polls it;
  // a cancel in between must pass the lock to the next waiter, not leak it.
  const h = native.keyedOpen('local:', {});
  const out = new Uint32Array(globalThis[Symbol.for('keylock.thread.v2')].out.buffer);
  const OUT = positions('output');
  const DONE = positions('completion');
  assert.equal(h.tryLock('a'), undefined, 'taken');
  const held = out[OUT.slot];
  assert.ok(held > 0, 'a slot');
  assert.equal(h.lockAsync('a'), 0, 'waits');
  const first = out[OUT.waiter];
  assert.equal(h.lockAsync('a'), 0, 'waits');
  const second = out[OUT.waiter];
  assert.ok(first > 0 && second > 0 && first !== second);
  const status = h.release(held);
  assert.equal(status & 0xff, 0);
  assert.ok(status & native.LOCAL_WAKE, 'the release reports a wake-up of this thread');
  assert.equal(native.cancel(first), true, 'still pending for the reactor');
  const n = native.runReadyFunction()();
  assert.equal(n, 1, 'one record');
  const records = globalThis[Symbol.for('keylock.thread.v2')].records;
  assert.equal(records[DONE.id], second, 'for the second waiter');
  const slot = records[DONE.slot];
  assert.ok(slot > 0, 'which holds a slot');
  assert.ok(records[DONE.fenceLow] + records[DONE.fenceHigh] * 2 ** 32 > 1, "with a fence above the first holder's");
  assert.equal(h.isLocked('a'), true, 'held by the second waiter');
  assert.equal(h.release(slot) & 0xff, 0);
  assert.equal(h.isLocked('a'), false);
  assert.equal(
    h.release(slot),
    native.statuses().find((s) => s.name === 'KEYLOCK_NOT_OWNER').code,
    'a slot releases once',
  );
  assert.equal(native.cancel(second), false, 'already served');
  assert.equal(native.heldCount(h.handle), 0);
  assert.deepEqual(native.waiterCounts(), [0, 0]);
});

test('100,000 pending lock() promises use no extra threads and are all served', { timeout: 120_000 }, async () => {
  const threads = () => require('node:fs').readdirSync('/proc/self/task').length;
  const pool = new KeyPool();
  const g = pool.tryLock('hot');
  const before = threads();
  const N = 100_000;
  let served = 0;
  const all = [];
  for (let i = 0; i < N; i++) {
    all.push(
      pool.lock('hot').then((guard) => {
        served++;
        guard.release();
      }),
    );
  }
  assert.equal(native.waiterCounts()[0], N);
  assert.equal(pool.stats().waiting, N);
  assert.equal(threads(), before, 'waiting created no thread');
  g.release();
  await Promise.all(all);
  assert.equal(served, N);
  assert.equal(threads(), before);
  assert.equal(pool.stats().entriesInUse, 0);
});

test('a panic in the addon is a JavaScript exception, not a crash', T, async () => {
  assert.throws(() => native.testingPanic(), /deliberate panic/);
  // A panic while polling a waiter rejects only that waiter's promise.
  const id = native.testingPanicWaiter();
  assert.ok(id > 0);
  const failed = await new Promise((resolve) => {
    const { waiters } = globalThis[Symbol.for('keylock.thread.v2')];
    waiters.set(id, {
      granted: () => resolve(null),
      fail: resolve,
      what: 'a test waiter',
      timer: undefined,
      signal: undefined,
    });
  });
  assert.equal(failed.code, 'KEYLOCK_INTERNAL');
  // Everything else keeps working.
  const pool = new KeyPool();
  (await pool.lock('x')).release();
});

test('one release that completes more waiters than the records buffer holds settles every one', T, async () => {
  // Shared waiters behind an exclusive holder are all handed the lock by its release, which
  // completes more of them at once than one runReady can report (256 records).
  const pool = new KeyPool();
  const N = 700;
  const writer = pool.tryLock('wide');
  assert.ok(writer);
  const waiting = [];
  for (let i = 0; i < N; i++) waiting.push(pool.lock('wide', { mode: 'shared' }));
  writer.release();
  const guards = await alive(Promise.all(waiting));
  assert.equal(guards.length, N);
  assert.equal(new Set(guards).size, N);
  for (const g of guards) assert.equal(g.mode, 'shared');
  assert.equal(pool.info('wide').holders, N);
  for (const g of guards) g.release();
  assert.equal(pool.isLocked('wide'), false);
});

test(
  'a waiter handed a key by a collected handle of the same shared lock is served with no further call',
  T,
  async (t) => {
    // A handle's finalizer is no entry point, so nothing reported the wake-up of this thread that
    // its release caused: the waiter was served only at this thread's next call into the addon.
    require('node:v8').setFlagsFromString('--expose-gc');
    const gc = require('node:vm').runInNewContext('gc');
    for (const [what, open] of [
      ['KeyPool', (name) => KeyPool.shared(name)],
      ['RwLock', (name) => RwLock.shared(name)],
    ]) {
      const name = `collected-holder-${what}-${process.pid}`;
      let holder = open(name);
      const other = open(name);
      let guard = what === 'KeyPool' ? holder.tryLock('k') : holder.tryWrite();
      assert.ok(guard, `${what}: held`);
      let collected = false;
      const registry = new FinalizationRegistry(() => {
        collected = true;
      });
      registry.register(holder, what);
      let served = null;
      (what === 'KeyPool' ? other.lock('k') : other.write()).then((got) => {
        served = got;
      });
      holder = null;
      guard = null;
      // From here on nothing calls into the addon until the waiter is served.
      for (let i = 0; i < 200 && served === null; i++) {
        gc();
        await tick();
      }
      if (!collected) {
        t.skip(`${what}: the garbage collector kept the holder`);
        return;
      }
      assert.ok(served !== null, `${what}: the waiter was served after its holder was collected`);
      served.release();
    }
  },
);

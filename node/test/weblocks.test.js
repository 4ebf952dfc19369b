'use strict';
// The Web Locks API (keylock.locks, new LockManager(pool)) against the W3C spec: one test per
// option (mode, ifAvailable, steal, signal), the spec's argument errors, query() and its order,
// names (lone surrogates, the '-' prefix, no collision with plain keys), and the process scope
// (every worker thread).

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const { setImmediate: tick, setTimeout: sleep } = require('node:timers/promises');
const keylock = require('..');
const { locks, LockManager, Lock, KeyPool, StripedLock } = keylock;
const native = require('../binding.js').load();

const T = { timeout: 60_000 };
const INDEX = JSON.stringify(path.join(__dirname, '..'));
let unique = 0;
const fresh = (what = 'res') => `${what}-${process.pid}-${++unique}`;

// A promise with its resolver.
function deferred() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

function isDOMException(name) {
  return (e) => e instanceof DOMException && e.name === name;
}

test('request(): the callback gets a Lock, held until its promise settles; resolves with its result', T, async () => {
  const name = fresh();
  const release = deferred();
  let granted = null;
  const first = locks.request(name, async (lock) => {
    granted = lock;
    await release.promise;
    return 'first result';
  });
  assert.equal(granted, null, 'the callback runs asynchronously');
  await tick();
  assert.ok(granted instanceof Lock);
  assert.equal(granted.name, name);
  assert.equal(granted.mode, 'exclusive');
  assert.equal(Object.prototype.toString.call(granted), '[object Lock]');
  assert.throws(() => new Lock(), TypeError, 'Lock has no public constructor');
  let secondRan = false;
  const second = locks.request(name, () => {
    secondRan = true;
    return 42;
  });
  await sleep(20);
  assert.equal(secondRan, false, 'held while the first callback is pending');
  release.resolve();
  assert.equal(await first, 'first result');
  assert.equal(await second, 42, 'a plain value resolves too');
  // A callback that throws or rejects: the request rejects with that, and the lock is free.
  await assert.rejects(
    locks.request(name, () => {
      throw new RangeError('sync');
    }),
    RangeError,
  );
  await assert.rejects(
    locks.request(name, async () => {
      throw new SyntaxError('async');
    }),
    SyntaxError,
  );
  assert.equal(await locks.request(name, { ifAvailable: true }, (l) => l !== null), true, 'free again');
});

test('mode: shared holders overlap, an exclusive request waits for them', T, async () => {
  const name = fresh();
  const inside = [];
  const release = deferred();
  const readers = [1, 2, 3].map((i) =>
    locks.request(name, { mode: 'shared' }, async (lock) => {
      assert.equal(lock.mode, 'shared');
      inside.push(i);
      await release.promise;
    }),
  );
  await sleep(10);
  assert.deepEqual(inside.sort(), [1, 2, 3], 'three shared holders at once');
  let writer = false;
  const w = locks.request(name, { mode: 'exclusive' }, () => (writer = true));
  const lateReader = locks.request(name, { mode: 'shared' }, () => writer);
  await sleep(10);
  assert.equal(writer, false);
  const q = await locks.query();
  assert.deepEqual(
    q.pending.filter((p) => p.name === name).map((p) => p.mode),
    ['exclusive', 'shared'],
    'the late reader queues behind the writer',
  );
  release.resolve();
  await Promise.all([...readers, w]);
  assert.equal(await lateReader, true, 'and is served after it');
});

test('ifAvailable: the callback gets null when the lock cannot be granted now', T, async () => {
  const name = fresh();
  const release = deferred();
  const held = locks.request(name, () => release.promise);
  await tick();
  let got;
  const r = await locks.request(name, { ifAvailable: true }, (lock) => {
    got = lock;
    return 'no lock';
  });
  assert.equal(got, null);
  assert.equal(r, 'no lock');
  // Not grantable also while others wait (FIFO): a queued request is ahead.
  const queued = locks.request(name, () => 'queued');
  await tick();
  release.resolve();
  await held;
  assert.equal(await queued, 'queued');
  assert.equal((await locks.query()).held.filter((h) => h.name === name).length, 0);
  const ok = await locks.request(name, { ifAvailable: true }, (lock) => lock && lock.name);
  assert.equal(ok, name, 'a free lock is granted');
  await assert.rejects(
    locks.request(name, { ifAvailable: true }, () => {
      throw new Error('thrown');
    }),
    /thrown/,
  );
});

test("steal: the previous holder's request rejects with AbortError; the stealer is granted at once", T, async () => {
  const name = fresh();
  const stuck = deferred();
  let holderStillRunning = false;
  const holder = locks.request(name, async () => {
    holderStillRunning = true;
    await stuck.promise;
    holderStillRunning = false;
    return 'never seen';
  });
  await tick();
  const holderRejected = assert.rejects(holder, isDOMException('AbortError'));
  const stolen = await locks.request(name, { steal: true }, (lock) => {
    assert.equal(lock.name, name);
    return holderStillRunning ? 'stolen while the holder ran' : 'holder done';
  });
  assert.equal(stolen, 'stolen while the holder ran');
  await holderRejected;
  // The old holder's callback ending later releases nothing of anyone else's.
  const next = deferred();
  const after = locks.request(name, () => next.promise);
  await tick();
  stuck.resolve();
  await sleep(5);
  assert.equal(await locks.request(name, { ifAvailable: true }, (l) => l), null, 'the new holder still holds it');
  next.resolve();
  await after;
});

test("steal goes ahead of waiting requests: the holder's AbortError, the stealer, then the queue", T, async () => {
  const managers = [
    ['keylock.locks', locks],
    ['a LockManager over a KeyPool', new LockManager(new KeyPool())],
    ['a LockManager over a StripedLock', new LockManager(new StripedLock(64))],
  ];
  // A strict-FIFO pool in shared memory (the region's file is removed at once; the open stays).
  const region = `keylock-node-steal-${process.pid}`;
  managers.push(['a LockManager over an shm: KeyPool', new LockManager(KeyPool.open(`shm:${region}`, { fifo: true }))]);
  keylock.unlink(`shm:${region}`);
  for (const [label, manager] of managers) {
    const name = fresh();
    const events = [];
    const stuck = deferred();
    const holder = manager.request(name, () => stuck.promise);
    const holderDone = holder.then(
      () => events.push('holder resolved'),
      (e) => events.push(`holder rejected ${e.name}`),
    );
    await tick();
    const pending = manager.request(name, () => events.push('pending granted'));
    await tick();
    const stealer = manager.request(name, { steal: true }, () => events.push('steal granted'));
    await Promise.all([holderDone, stealer, pending]);
    assert.deepEqual(events, ['holder rejected AbortError', 'steal granted', 'pending granted'], label);
    stuck.resolve();
  }
});

test('steal preempts nothing that is not held: a free name is simply granted', T, async () => {
  const name = fresh();
  assert.equal(await locks.request(name, { steal: true }, (l) => l.mode), 'exclusive');
});

test("signal: a pending request rejects with the signal's reason and leaves the queue", T, async () => {
  const name = fresh();
  const release = deferred();
  const holder = locks.request(name, () => release.promise);
  await tick();
  const ac = new AbortController();
  let ran = false;
  const pending = locks.request(name, { signal: ac.signal }, () => (ran = true));
  await tick();
  assert.equal((await locks.query()).pending.filter((p) => p.name === name).length, 1);
  const reason = new Error('gave up');
  ac.abort(reason);
  await assert.rejects(pending, (e) => e === reason);
  assert.equal((await locks.query()).pending.filter((p) => p.name === name).length, 0);
  release.resolve();
  await holder;
  assert.equal(ran, false);
  // Aborted before the request: rejected at once with the reason (the default AbortError too).
  await assert.rejects(
    locks.request(name, { signal: AbortSignal.abort() }, () => 1),
    isDOMException('AbortError'),
  );
  // Aborted after the grant: ignored.
  const late = new AbortController();
  const r = await locks.request(name, { signal: late.signal }, async () => {
    late.abort(new Error('too late'));
    await tick();
    return 'kept';
  });
  assert.equal(r, 'kept');
  // Aborted between the grant and the callback: the callback is not called.
  const between = new AbortController();
  let called = false;
  const p = locks.request(name, { signal: between.signal }, () => (called = true));
  between.abort(new Error('between'));
  await assert.rejects(p, /between/);
  assert.equal(called, false);
  assert.equal(await locks.request(name, { ifAvailable: true }, (l) => l !== null), true, 'and the lock is free');
});

test("the spec's argument errors, with the same exception types", T, async () => {
  const cb = () => {};
  const name = fresh();
  await assert.rejects(locks.request(), TypeError);
  await assert.rejects(locks.request(name), TypeError, 'a callback is required');
  await assert.rejects(locks.request(name, {}), TypeError, 'the second of two arguments is the callback');
  await assert.rejects(locks.request(name, {}, 'not a function'), TypeError);
  await assert.rejects(locks.request(name, { mode: 'read' }, cb), TypeError);
  await assert.rejects(locks.request(name, { mode: null }, cb), TypeError, "null converts to 'null'");
  await assert.rejects(locks.request(name, 5, cb), TypeError, 'options must be a dictionary');
  await assert.rejects(locks.request(name, { signal: {} }, cb), TypeError);
  await assert.rejects(locks.request(name, { signal: null }, cb), TypeError);
  await assert.rejects(locks.request(Symbol('s'), cb), TypeError);
  for (const [options, what] of [
    [{ steal: true, ifAvailable: true }, 'steal with ifAvailable'],
    [{ steal: true, mode: 'shared' }, 'steal with shared'],
    [{ steal: true, signal: new AbortController().signal }, 'steal with signal'],
    [{ ifAvailable: true, signal: new AbortController().signal }, 'ifAvailable with signal'],
  ]) {
    await assert.rejects(locks.request(name, options, cb), isDOMException('NotSupportedError'), what);
  }
  await assert.rejects(locks.request('-reserved', cb), isDOMException('NotSupportedError'));
  await assert.rejects(locks.request('-', {}, cb), isDOMException('NotSupportedError'));
  // Errors are rejections, never throws, and nothing is left behind.
  const rejected = locks.request();
  assert.ok(rejected instanceof Promise);
  await assert.rejects(rejected, TypeError);
  assert.equal((await locks.query()).pending.filter((p) => p.name === name).length, 0);
  // DOMString conversion: a number names the lock '123'; options and flags convert as WebIDL does.
  assert.equal(await locks.request(123, (l) => l.name), '123');
  assert.equal(await locks.request(name, { mode: undefined, ifAvailable: 1 }, (l) => l.mode), 'exclusive');
  assert.equal(locks.request.length, 2);
});

test('query(): held and pending with name, mode and clientId, in request order', T, async () => {
  const a = fresh('a');
  const b = fresh('b');
  const release = deferred();
  const held = [
    locks.request(a, { mode: 'shared' }, () => release.promise),
    locks.request(b, () => release.promise),
    locks.request(a, { mode: 'shared' }, () => release.promise),
  ];
  await tick();
  const pending = [locks.request(b, { mode: 'shared' }, () => 1), locks.request(a, () => 2), locks.request(b, () => 3)];
  await tick();
  const q = await locks.query();
  const mine = (list) => list.filter((x) => x.name === a || x.name === b).map((x) => [x.name, x.mode]);
  assert.deepEqual(mine(q.held), [
    [a, 'shared'],
    [b, 'exclusive'],
    [a, 'shared'],
  ]);
  assert.deepEqual(mine(q.pending), [
    [b, 'shared'],
    [a, 'exclusive'],
    [b, 'exclusive'],
  ]);
  const ids = new Set([...q.held, ...q.pending].filter((x) => x.name === a || x.name === b).map((x) => x.clientId));
  assert.equal(ids.size, 1, 'one clientId for this thread');
  assert.match([...ids][0], /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  for (const x of q.held) assert.deepEqual(Object.keys(x).sort(), ['clientId', 'mode', 'name']);
  release.resolve();
  await Promise.all([...held, ...pending]);
  const after = await locks.query();
  assert.equal(mine(after.held).length + mine(after.pending).length, 0);
});

test('names: any string, lone surrogates included, each its own lock; none meets a plain key', T, async () => {
  const names = ['\ud800', '\ud800\udc00', '\udc00\ud800', '\ud800\ud800', '\ufffd', '\u{10001}', 'é', 'e\u0301', ''];
  // Lossless: distinct strings are distinct key bytes (WTF-8).
  const bytes = names.map((n) => native.nameBytes(n).toString('hex'));
  assert.equal(new Set(bytes).size, names.length);
  assert.equal(native.nameBytes('\ud800').toString('hex'), 'eda080');
  // Hold all of them at once: none blocks another.
  const release = deferred();
  const held = names.map((n) => locks.request(n, () => release.promise));
  await tick();
  const q = await locks.query();
  for (const n of names) {
    assert.equal(q.held.filter((h) => h.name === n).length, 1, `held once: ${JSON.stringify(n)}`);
  }
  for (const n of names) {
    assert.equal(await locks.request(n, { ifAvailable: true }, (l) => l), null, 'each name is taken');
  }
  release.resolve();
  await Promise.all(held);
  // A name never collides with the plain key of the same text.
  const pool = new KeyPool({ fifo: true });
  const manager = new LockManager(pool);
  const g = pool.tryLock('shared-text');
  assert.ok(await manager.request('shared-text', { ifAvailable: true }, (l) => l !== null), 'the name is free');
  await manager.request('shared-text', async () => {
    assert.equal(pool.isLocked('shared-text'), true);
    assert.equal(pool.tryLock('other-text')?.release(), undefined);
  });
  g.release();
});

test('new LockManager(pool) puts the same API over any pool; its locks are its own', T, async () => {
  for (const pool of [new KeyPool({ fifo: true }), new StripedLock(16, { fifo: true }), new KeyPool()]) {
    const manager = new LockManager(pool);
    assert.equal(Object.prototype.toString.call(manager), '[object LockManager]');
    const release = deferred();
    const held = manager.request('r', () => release.promise);
    await tick();
    assert.equal(await manager.request('r', { ifAvailable: true }, (l) => l), null);
    assert.notEqual(
      await locks.request('r', { ifAvailable: true }, (l) => l),
      null,
      'keylock.locks is another manager',
    );
    const q = await manager.query();
    assert.deepEqual(
      q.held.map((h) => h.name),
      ['r'],
    );
    release.resolve();
    await held;
  }
  assert.throws(() => new LockManager({}), TypeError);
  assert.throws(() => new LockManager(), TypeError);
});

test('keylock.locks covers every worker thread of the process', T, async () => {
  const name = fresh('cross');
  const w = new Worker(
    `
    const { parentPort, workerData } = require('node:worker_threads');
    const { locks } = require(${INDEX});
    let release;
    locks.request(workerData.name, { mode: 'exclusive' }, () => {
      parentPort.postMessage('held');
      return new Promise((r) => (release = r));
    }).then((v) => parentPort.postMessage('released ' + v));
    parentPort.on('message', (m) => {
      if (m === 'release') release('ok');
      if (m === 'stop') parentPort.close();
    });
  `,
    { eval: true, workerData: { name } },
  );
  const messages = [];
  const next = () => new Promise((resolve) => w.once('message', (m) => (messages.push(m), resolve(m))));
  assert.equal(await next(), 'held');
  assert.equal(await locks.request(name, { ifAvailable: true }, (l) => l), null, 'held by the worker');
  const q = await locks.query();
  const theirs = q.held.find((h) => h.name === name);
  assert.ok(theirs, "the worker's lock is in this thread's query()");
  const here = locks.request(name, { mode: 'shared' }, () => 'main got it');
  await tick();
  const q2 = await locks.query();
  const mine = q2.pending.find((p) => p.name === name);
  assert.ok(mine && mine.clientId !== theirs.clientId, 'each thread is a client of its own');
  const released = next();
  w.postMessage('release');
  assert.equal(await released, 'released ok');
  assert.equal(await here, 'main got it');
  w.postMessage('stop');
  await new Promise((resolve) => w.once('exit', resolve));
});

test('a worker that ends holding a Web Lock releases it, and its pending requests leave the queue', T, async () => {
  const name = fresh('ends');
  const w = new Worker(
    `
    const { parentPort, workerData } = require('node:worker_threads');
    const { locks } = require(${INDEX});
    locks.request(workerData.name, () => {
      parentPort.postMessage('held');
      return new Promise(() => {}); // never settles
    });
    locks.request(workerData.name + '-2', () => new Promise(() => {}));
    locks.request(workerData.name + '-2', () => 'never');
    setInterval(() => {}, 1000);
  `,
    { eval: true, workerData: { name } },
  );
  await new Promise((resolve) => w.once('message', resolve));
  await sleep(20);
  const q = await locks.query();
  assert.equal(q.pending.filter((p) => p.name === `${name}-2`).length, 1);
  await w.terminate();
  assert.equal(await locks.request(name, (l) => l.name), name, 'granted after the worker ended');
  const after = await locks.query();
  assert.equal([...after.held, ...after.pending].filter((x) => x.name.startsWith(name)).length, 0);
});

test('FIFO: requests are granted in the order they were made', T, async () => {
  const name = fresh();
  const order = [];
  const release = deferred();
  const first = locks.request(name, () => release.promise);
  await tick();
  const rest = ['a', 'b', 'c', 'd'].map((tag, i) =>
    locks.request(name, { mode: i % 2 ? 'shared' : 'exclusive' }, async () => {
      order.push(tag);
      await tick();
    }),
  );
  release.resolve();
  await Promise.all([first, ...rest]);
  assert.deepEqual(order, ['a', 'b', 'c', 'd']);
});

test('many requests on one name, across the event loop: exact count, one holder at a time', T, async () => {
  const name = fresh();
  let inside = 0;
  let most = 0;
  let done = 0;
  await Promise.all(
    Array.from({ length: 500 }, () =>
      locks.request(name, async () => {
        most = Math.max(most, ++inside);
        await tick();
        inside--;
        done++;
      }),
    ),
  );
  assert.equal(done, 500);
  assert.equal(most, 1);
  assert.equal((await locks.query()).held.filter((h) => h.name === name).length, 0);
});

test('keylock.locks is the same object in CommonJS and ESM', T, async () => {
  const esm = await import('../index.mjs');
  assert.equal(esm.locks, keylock.locks);
  assert.equal(esm.LockManager, LockManager);
});

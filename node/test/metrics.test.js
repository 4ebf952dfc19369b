'use strict';
// Metrics and diagnostics_channel. metrics() reads the core's counts for a lock object opened
// with { metrics: true }: each test runs a known workload and checks every count exactly, on
// the in-process locks (KeyPool, StripedLock, Semaphore) and in shared memory (a region of its
// own, removed afterwards). The channels keylock:wait, keylock:acquire and keylock:release:
// the exact events of a known workload, their fields, and nothing published (nor broken)
// without subscribers.

const test = require('node:test');
const assert = require('node:assert/strict');
const dc = require('node:diagnostics_channel');
const { performance } = require('node:perf_hooks');
const { setTimeout: sleep, setImmediate: tick } = require('node:timers/promises');
const { KeyPool, StripedLock, Semaphore, RwLock, LockManager, KeylockError, unlink } = require('..');

const T = { timeout: 60_000 };
// The known delay: how long a holder keeps a key that a waiter waits for.
const DELAY = 40;
const REGION = `keylock-node-metrics-${process.pid}`;

const code = (c) => (e) => e instanceof KeylockError && e.code === c;
const isInvalid = (Type) => (e) => e instanceof Type && e.code === 'KEYLOCK_INVALID_ARGUMENT';

// Every count zero but those given.
function counts(given) {
  return {
    acquired: 0,
    contended: 0,
    timedOut: 0,
    wouldBlock: 0,
    cancelled: 0,
    leaseExpired: 0,
    ownerDied: 0,
    lost: 0,
    forceUnlocked: 0,
    ...given,
  };
}

// The counts of a metrics() reading, without its histograms.
function countsOf(m) {
  const { wait, hold, ...rest } = m;
  return rest;
}

// Releases `guard` once `ms` have passed since `t0` (performance.now()), however early the
// timer fires: the wait of whoever waits on it is then at least `ms` by the core's clock.
function releaseAfter(guard, t0, ms) {
  const go = () => {
    if (performance.now() - t0 < ms) setTimeout(go, 1);
    else guard.release();
  };
  setTimeout(go, ms);
}

// `n` keys of distinct stripes (any keys for a lock without stripes).
function distinctKeys(lock, n, prefix) {
  const keys = [];
  const seen = new Set();
  for (let i = 0; keys.length < n; i++) {
    const key = `${prefix}${i}`;
    const stripe = lock.stripeOf === undefined ? i : lock.stripeOf(key);
    if (stripe === null || !seen.has(stripe)) {
      seen.add(stripe);
      keys.push(key);
    }
  }
  return keys;
}

function checkHistogram(h) {
  assert.ok(Object.isFrozen(h) && Object.isFrozen(h.buckets));
  assert.equal(
    h.buckets.reduce((sum, [, n]) => sum + n, 0),
    h.count,
    'the buckets hold every duration',
  );
  let bound = -1;
  for (const b of h.buckets) {
    assert.ok(Object.isFrozen(b) && b.length === 2);
    assert.ok(b[0] > bound, 'buckets in order of their bounds');
    assert.ok(Number.isSafeInteger(b[1]) && b[1] > 0, 'only non-empty buckets');
    bound = b[0];
  }
  if (h.count > 0) {
    assert.ok(h.buckets.at(-1)[0] >= h.maxMs, 'the last bucket bounds the longest');
    assert.ok(h.sumMs >= h.maxMs);
    assert.equal(h.quantile(1), h.maxMs, 'the 1 quantile is the longest');
    assert.ok(h.quantile(0.5) <= h.maxMs);
  } else {
    assert.equal(h.quantile(0.5), null, 'no quantile of nothing');
  }
}

// The keyed locks with metrics on, each made by `make(name)` ('local:' or 'shm:NAME').
const KEYED = [
  ['KeyPool', (opts) => new KeyPool(opts), false],
  ['StripedLock', (opts) => new StripedLock(64, opts), false],
  ['KeyPool on shm:', (opts) => KeyPool.open(`shm:${REGION}-pool`, { capacity: 64, ...opts }), true],
  ['StripedLock on shm:', (opts) => StripedLock.open(`shm:${REGION}-striped`, { stripes: 64, ...opts }), true],
];

for (const [kind, make, shm] of KEYED) {
  test(`${kind}: exact counts of a known workload`, T, async (t) => {
    if (shm) t.after(() => unlink(make({}).name));
    const lock = make({ metrics: true });
    const K = 'k';
    assert.deepEqual(countsOf(lock.metrics()), counts({}), 'nothing counted yet');

    // Granted at once.
    const first = await lock.lock(K);
    assert.deepEqual(countsOf(lock.metrics()), counts({ acquired: 1 }));
    assert.deepEqual(lock.metrics().wait.buckets, [[0, 1]], 'granted at once: a wait of 0 ns');
    // A failed try, in both forms.
    assert.equal(lock.tryLock(K), null);
    await assert.rejects(lock.lock(K, { timeout: 0 }), code('KEYLOCK_TIMEOUT'));
    assert.deepEqual(countsOf(lock.metrics()), counts({ acquired: 1, wouldBlock: 2 }));
    // A timed acquire that times out while this loop holds the key, async and blocking.
    await assert.rejects(lock.lock(K, { timeout: 20 }), code('KEYLOCK_TIMEOUT'));
    assert.throws(() => lock.lockSync(K, { timeout: 10 }), code('KEYLOCK_TIMEOUT'));
    assert.deepEqual(countsOf(lock.metrics()), counts({ acquired: 1, wouldBlock: 2, contended: 2, timedOut: 2 }));
    // A wait cancelled by its AbortSignal.
    const ctl = new AbortController();
    const aborted = lock.lock(K, { signal: ctl.signal });
    await tick();
    ctl.abort();
    await assert.rejects(aborted, { name: 'AbortError' });
    const base = { acquired: 1, wouldBlock: 2, contended: 3, timedOut: 2, cancelled: 1 };
    assert.deepEqual(countsOf(lock.metrics()), counts(base));
    // A waiter granted once the holder lets go, DELAY ms later.
    const waiting = lock.lock(K);
    releaseAfter(first, performance.now(), DELAY);
    const second = await waiting;
    second.release();
    let m = lock.metrics();
    assert.deepEqual(countsOf(m), counts({ ...base, acquired: 2, contended: 4 }));
    assert.equal(m.wait.count, 2, 'one wait per granted call');
    assert.ok(m.wait.maxMs >= DELAY, `waited ${m.wait.maxMs} ms, at least ${DELAY}`);
    assert.equal(m.hold.count, 2, 'one hold per release');
    assert.ok(m.hold.maxMs >= DELAY, `held ${m.hold.maxMs} ms, at least ${DELAY}`);
    // A lease that ends before its release.
    const leased = await lock.lock(K, { lease: 10 });
    await sleep(40);
    assert.throws(() => leased.release(), code('KEYLOCK_LEASE_EXPIRED'));
    // A force-unlock of a held key, then its holder's release refused.
    const held = lock.tryLock(K);
    assert.ok(held);
    assert.equal(lock.forceUnlock(K), true);
    assert.equal(lock.forceUnlock(K), false, 'a free key is not counted');
    assert.throws(() => held.release(), code('KEYLOCK_NOT_OWNER'));
    // Several keys at once: each acquisition counts, the call waits once.
    const keys = distinctKeys(lock, 2, 'many-');
    const both = await lock.lockMany(keys);
    both.release();
    // withLock takes a free key without a failed try of its own.
    assert.equal(await lock.withLock(K, () => 7), 7);

    m = lock.metrics();
    assert.deepEqual(
      countsOf(m),
      counts({ ...base, acquired: 7, contended: 4, leaseExpired: 1, lost: 1, forceUnlocked: 1 }),
    );
    assert.equal(m.wait.count, 6, 'first, second, leased, held, both, withLock');
    assert.equal(m.hold.count, 5, 'first, second, both (2), withLock: refused releases hold nothing');
    assert.ok(m.wait.maxMs >= DELAY && m.hold.maxMs >= DELAY);
    for (const v of Object.values(countsOf(m))) assert.ok(Number.isSafeInteger(v));
    assert.ok(Object.isFrozen(m));
    checkHistogram(m.wait);
    checkHistogram(m.hold);
    assert.ok(m.wait.quantile(1) >= DELAY);
  });
}

test('a waiter served by a release in another thread: contended, and its wait', T, async () => {
  const { Worker } = require('node:worker_threads');
  const name = `metrics-shared-${process.pid}`;
  const lock = KeyPool.shared(name, { metrics: true });
  const worker = new Worker(
    `const { parentPort } = require('node:worker_threads');
     const { KeyPool } = require(${JSON.stringify(require.resolve('..'))});
     const g = KeyPool.shared(${JSON.stringify(name)}).tryLock('k');
     parentPort.postMessage('held');
     setTimeout(() => { g.release(); parentPort.postMessage('released'); }, ${DELAY * 2});`,
    { eval: true },
  );
  const exited = new Promise((resolve) => worker.on('exit', resolve));
  const said = [];
  worker.on('message', (m) => said.push(m));
  while (!said.includes('held')) await sleep(1);
  await assert.rejects(lock.lock('k', { timeout: 10 }), code('KEYLOCK_TIMEOUT'));
  const g = await lock.lock('k', { timeout: 10_000 });
  g.release();
  await exited;
  const m = lock.metrics();
  // The worker's try and release through the same shared lock object count too.
  assert.deepEqual(countsOf(m), counts({ acquired: 2, contended: 2, timedOut: 1 }));
  assert.equal(m.wait.count, 2);
  assert.equal(m.hold.count, 2);
  assert.ok(m.wait.maxMs >= DELAY, `waited ${m.wait.maxMs} ms`);
});

for (const [kind, open, shm] of [
  ['Semaphore', (opts) => new Semaphore(2, opts), false],
  ['Semaphore on shm:', (opts) => Semaphore.open(`shm:${REGION}-sem`, { permits: 2, ...opts }), true],
]) {
  test(`${kind}: exact counts of a known workload`, T, async (t) => {
    if (shm) t.after(() => unlink(`shm:${REGION}-sem`));
    const sem = open({ metrics: true });
    const K = 'k';
    const whole = await sem.acquire(K, { weight: 2 });
    assert.equal(sem.tryAcquire(K), null);
    await assert.rejects(sem.acquire(K, { timeout: 0 }), code('KEYLOCK_TIMEOUT'));
    await assert.rejects(sem.acquire(K, { timeout: 20 }), code('KEYLOCK_TIMEOUT'));
    const ctl = new AbortController();
    const aborted = sem.acquire(K, { signal: ctl.signal });
    await tick();
    ctl.abort();
    await assert.rejects(aborted, { name: 'AbortError' });
    const waiting = sem.acquire(K);
    releaseAfter(whole, performance.now(), DELAY);
    (await waiting).release();
    const leased = await sem.acquire(K, { lease: 10 });
    await sleep(40);
    assert.throws(() => leased.release(), code('KEYLOCK_LEASE_EXPIRED'));
    const held = sem.tryAcquire(K);
    assert.equal(sem.forceRelease(K), true);
    assert.throws(() => held.release(), code('KEYLOCK_NOT_OWNER'));
    assert.equal(await sem.withPermit(K, (p) => p.weight), 1);
    const m = sem.metrics();
    assert.deepEqual(
      countsOf(m),
      counts({
        acquired: 5,
        contended: 3,
        timedOut: 1,
        wouldBlock: 2,
        cancelled: 1,
        leaseExpired: 1,
        lost: 1,
        forceUnlocked: 1,
      }),
    );
    assert.equal(m.wait.count, 5);
    assert.equal(m.hold.count, 3, 'whole, the waiter, withPermit');
    assert.ok(m.wait.maxMs >= DELAY, `waited ${m.wait.maxMs} ms`);
    checkHistogram(m.wait);
    checkHistogram(m.hold);
  });
}

test('Web Locks over a pool with metrics: a request is an acquire, declined ones are tries', T, async () => {
  const pool = new KeyPool({ fifo: true, metrics: true });
  const locks = new LockManager(pool);
  let release;
  const holding = locks.request('n', () => new Promise((resolve) => (release = resolve)));
  await tick();
  assert.equal(await locks.request('n', { ifAvailable: true }, (lock) => lock), null);
  const waiting = locks.request('n', () => 'second');
  await tick();
  release();
  await holding;
  assert.equal(await waiting, 'second');
  const m = pool.metrics();
  assert.deepEqual(countsOf(m), counts({ acquired: 2, contended: 1, wouldBlock: 1 }));
  assert.equal(m.hold.count, 2);
});

test('metrics off: metrics() is null, and the option is checked', T, (t) => {
  t.after(() => unlink(`shm:${REGION}-off`));
  assert.equal(new KeyPool().metrics(), null);
  assert.equal(new StripedLock(8, { metrics: false }).metrics(), null);
  assert.equal(new Semaphore(1).metrics(), null);
  assert.equal(KeyPool.open(`shm:${REGION}-off`, { capacity: 16 }).metrics(), null);
  const off = new KeyPool();
  off.tryLock('k').release();
  assert.equal(off.metrics(), null, 'still null after use');
  for (const bad of [1, 'yes', null]) {
    assert.throws(() => new KeyPool({ metrics: bad }), isInvalid(TypeError));
    assert.throws(() => new Semaphore(1, { metrics: bad }), isInvalid(TypeError));
    assert.throws(() => StripedLock.open('local:', { metrics: bad }), isInvalid(TypeError));
  }
  // A striped lock with metrics still says its stripes.
  const striped = new StripedLock(100, { metrics: true });
  assert.equal(striped.stripes, 128);
  const s = striped.stripeOf('k');
  assert.ok(Number.isInteger(s) && s >= 0 && s < 128);
  // quantile's argument.
  const h = new KeyPool({ metrics: true }).metrics().wait;
  assert.throws(() => h.quantile(2), isInvalid(RangeError));
  assert.throws(() => h.quantile('0.5'), isInvalid(TypeError));
});

test('a shared lock: metrics must agree with the existing one', T, () => {
  const name = `metrics-agree-${process.pid}`;
  const a = KeyPool.shared(name, { metrics: true });
  assert.throws(() => KeyPool.shared(name, { metrics: false }), code('KEYLOCK_SHARED_MISMATCH'));
  const b = KeyPool.shared(name);
  b.tryLock('k').release();
  assert.equal(a.metrics().acquired, 1, 'one lock object behind both');
});

// Subscribes to the three channels; `stop()` unsubscribes.
function listen() {
  const events = { wait: [], acquire: [], release: [] };
  const subs = Object.keys(events).map((kind) => {
    const f = (message, name) => events[kind].push({ ...message, channel: name });
    dc.subscribe(`keylock:${kind}`, f);
    return [kind, f];
  });
  return {
    events,
    stop() {
      for (const [kind, f] of subs) dc.unsubscribe(`keylock:${kind}`, f);
    },
  };
}

test('diagnostics_channel: the events of a known workload, exactly', T, async (t) => {
  const { events, stop } = listen();
  t.after(stop);
  // Publishing does not need metrics.
  const pool = new KeyPool();
  const order = [];
  const notes = ['wait', 'acquire', 'release'].map((kind) => [
    `keylock:${kind}`,
    (m) => order.push(`${kind} ${m.key ?? m.keys}`),
  ]);
  for (const [name, f] of notes) dc.subscribe(name, f);
  t.after(() => notes.forEach(([name, f]) => dc.unsubscribe(name, f)));

  const first = pool.tryLock('a');
  assert.equal(pool.tryLock('a'), null, 'a failed try publishes nothing');
  const waiting = pool.lock('a', { timeout: 10_000 });
  releaseAfter(first, performance.now(), DELAY);
  const second = await waiting;
  second.release();

  const x = pool.tryLock('x');
  const many = pool.lockMany(['x', 'y'], { mode: ['shared', 'shared'] });
  x.release();
  const both = await many;
  both.release();

  const stale = pool.tryLock('z');
  pool.forceUnlock('z');
  let thrown;
  try {
    stale.release();
  } catch (e) {
    thrown = e;
  }
  pool.lockSync('s').release();
  const sem = new Semaphore(3);
  const pre = sem.tryAcquire('p', { weight: 2 });
  const pending = sem.acquire('p', { weight: 2, timeout: 5_000 });
  pre.release();
  const permit = await pending;
  permit.release();
  // Nor do an RwLock's guards.
  new RwLock().tryWrite().release();

  for (const [name, f] of notes) dc.unsubscribe(name, f);
  const { wait, acquire, release } = events;
  assert.deepEqual(
    wait.map((m) => ({ ...m })),
    [
      {
        name: 'local:',
        key: 'a',
        keys: undefined,
        mode: 'exclusive',
        weight: undefined,
        timeout: 10_000,
        channel: 'keylock:wait',
      },
      {
        name: 'local:',
        key: undefined,
        keys: ['x', 'y'],
        mode: ['shared', 'shared'],
        weight: undefined,
        timeout: null,
        channel: 'keylock:wait',
      },
      {
        name: 'local:',
        key: 'p',
        keys: undefined,
        // A semaphore's units are held shared (several holders at once).
        mode: 'shared',
        weight: 2,
        timeout: 5_000,
        channel: 'keylock:wait',
      },
    ],
  );
  const guards = [first, second, x, both, stale, undefined, pre, permit];
  assert.equal(acquire.length, 8, 'first, second, x, both, stale, lockSync, pre, permit');
  assert.equal(release.length, 8);
  acquire.forEach((m, i) => {
    if (guards[i] !== undefined) assert.equal(m.guard, guards[i]);
    assert.equal(m.name, 'local:');
    assert.equal(m.fence, m.guard.fence);
    assert.equal(m.mode, m.guard.mode);
    assert.equal(typeof m.waitedMs, 'number');
  });
  release.forEach((m, i) => {
    if (guards[i] !== undefined) assert.equal(m.guard, guards[i]);
    assert.equal(m.fence, m.guard.fence);
    assert.equal(typeof m.heldMs, 'number');
  });
  assert.deepEqual(
    acquire.map((m) => [m.key, m.keys, m.mode, m.weight]),
    [
      ['a', undefined, 'exclusive', undefined],
      ['a', undefined, 'exclusive', undefined],
      ['x', undefined, 'exclusive', undefined],
      [undefined, ['x', 'y'], 'shared', undefined],
      ['z', undefined, 'exclusive', undefined],
      ['s', undefined, 'exclusive', undefined],
      ['p', undefined, 'shared', 2],
      ['p', undefined, 'shared', 2],
    ],
  );
  assert.equal(acquire[0].waitedMs, 0, 'a try does not wait');
  assert.ok(acquire[1].waitedMs >= DELAY, `the waiter waited ${acquire[1].waitedMs} ms`);
  assert.ok(release[0].heldMs >= DELAY, `the first was held ${release[0].heldMs} ms`);
  assert.deepEqual(
    release.map((m) => m.error?.code),
    [undefined, undefined, undefined, undefined, 'KEYLOCK_NOT_OWNER', undefined, undefined, undefined],
  );
  assert.equal(release[4].error, thrown, 'the error published is the one thrown');
  // A release is published before the waiter it hands the key to is granted.
  assert.deepEqual(order.slice(0, 7), [
    'acquire a',
    'wait a',
    'release a',
    'acquire a',
    'release a',
    'acquire x',
    'wait x,y',
  ]);
  assert.deepEqual(order.slice(7, 9), ['release x', 'acquire x,y']);
  assert.deepEqual(order.slice(-5), ['acquire p', 'wait p', 'release p', 'acquire p', 'release p']);
});

test('diagnostics_channel: names are as printed, and subscribers may come and go', T, async (t) => {
  const region = `shm:${REGION}-dc`;
  t.after(() => unlink(region));
  const shm = KeyPool.open(region, { capacity: 16, metrics: true });
  // A guard granted, and a wait begun, before anyone listened.
  const g = shm.tryLock('k');
  const late = shm.lock('k');
  const { events, stop } = listen();
  t.after(stop);
  g.release();
  (await late).release();
  assert.equal(events.wait.length, 0, 'the wait began unheard');
  assert.deepEqual(
    events.acquire.map((m) => [m.name, m.key, m.waitedMs]),
    [[region, 'k', null]],
    'a wait begun before anyone listened: waitedMs not known',
  );
  assert.deepEqual(
    events.release.map((m) => [m.name, m.heldMs === null]),
    [
      [region, true],
      [region, false],
    ],
    'a guard granted before anyone listened has no heldMs',
  );
  stop();
  shm.tryLock('k').release();
  assert.equal(events.acquire.length, 1, 'nothing heard once unsubscribed');
  // Metrics and events are independent: the counts are the same with and without listeners.
  assert.deepEqual(countsOf(shm.metrics()), counts({ acquired: 3, contended: 1 }));
});

test('diagnostics_channel: without subscribers nothing is published and nothing breaks', T, async () => {
  for (const kind of ['wait', 'acquire', 'release']) {
    assert.equal(dc.channel(`keylock:${kind}`).hasSubscribers, false);
  }
  const pool = new KeyPool({ metrics: true });
  const g = await pool.lock('k');
  const waiting = pool.lock('k', { timeout: 5_000 });
  g.release();
  (await waiting).release();
  await pool.withLock('k', async () => {});
  const sem = new Semaphore(1);
  await sem.withPermit('k', () => {});
  assert.deepEqual(countsOf(pool.metrics()), counts({ acquired: 3, contended: 1 }));
});

'use strict';
// Shared locks across worker_threads: exclusion, wake-ups across threads, exact counts, and
// which waiters keep their worker alive.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const { setTimeout: sleep } = require('node:timers/promises');
const { KeyPool, StripedLock, RwLock, LockManager } = require('..');
const native = require('../binding.js').load();
const { Occupancy } = require('./occupancy.js');

const T = { timeout: 60_000 };
const INDEX = JSON.stringify(path.join(__dirname, '..'));
const OCCUPANCY = JSON.stringify(path.join(__dirname, 'occupancy.js'));

// One worker of the shared-lock stress: `tasks` async tasks, `rounds` increments each of
// counters in a SharedArrayBuffer, with an await inside each critical section.
const STRESS_WORKER = `
const INDEX = ${INDEX};
const { workerData, parentPort } = require('node:worker_threads');
const { setImmediate: tick } = require('node:timers/promises');
const { KeyPool, StripedLock, RwLock } = require(INDEX);
const { Occupancy } = require(${OCCUPANCY});

const { kind, name, counters, inside, seed, rounds, tasks, many } = workerData;
const counts = new Int32Array(counters);
const occupancy = Occupancy.of(inside);
const keys = counts.length;
const lock = kind === 'pool' ? KeyPool.shared(name) : kind === 'striped' ? StripedLock.shared(name, 64) : RwLock.shared(name);

async function task(s) {
  let x = s;
  for (let r = 0; r < rounds; r++) {
    x = (x * 1103515245 + 12345) >>> 0;
    const a = x % keys;
    const b = (a + 1 + ((x >>> 8) % (keys - 1))) % keys;
    const held = kind === 'rw' ? [0] : many ? [a, b] : [a];
    const body = () =>
      occupancy.run(held, async () => {
        const before = held.map((k) => counts[k]); // plain reads and writes: the lock protects them
        await tick();
        held.forEach((k, i) => (counts[k] = before[i] + 1));
      });
    if (kind === 'rw' && r % 3 !== 0) {
      // A reader: no writer may be inside (readers share, so they count atomically).
      await lock.withRead(() =>
        occupancy.run(0, async () => {
          await tick();
          Atomics.add(counts, 1, 1);
        }, { shared: true }),
      );
    } else if (kind === 'rw') {
      await lock.withWrite(body);
    }
    else if (many) await lock.withLockMany(held.map((k) => \`k\${k}\`), body);
    else if (r % 2) await lock.withLock(\`k\${a}\`, body);
    else {
      const g = await lock.lock(\`k\${a}\`);
      try {
        await body();
      } finally {
        g.release();
      }
    }
  }
}

Promise.all(Array.from({ length: tasks }, (_, i) => task(seed * 1000 + i + 1))).then(() => parentPort.postMessage('done'));
`;

// Resolves once `check()` is true, checking every few milliseconds; rejects after 20 s, so a
// condition that never comes fails the test instead of keeping the process alive.
async function until(check, what = 'condition') {
  const deadline = Date.now() + 20_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

// Runs `body` (source of an async function body) in a worker; resolves to the worker's
// messages and its exit code once it exits. `seen(n)` resolves when `n` messages have arrived.
function runWorker(body, workerData, onMessage) {
  const src = `
    const { parentPort, workerData } = require('node:worker_threads');
    const { KeyPool, StripedLock, RwLock } = require(${INDEX});
    const post = (m) => parentPort.postMessage(m);
    (async () => { ${body} })().catch((e) => { post('error: ' + e.stack); process.exitCode = 1; });`;
  const w = new Worker(src, { eval: true, workerData });
  const messages = [];
  w.on('message', (m) => {
    messages.push(m);
    if (onMessage) onMessage(m, w);
  });
  const done = new Promise((resolve, reject) => {
    w.on('error', reject);
    w.on('exit', (code) => resolve({ code, messages }));
  });
  const seen = (n) => until(() => messages.length >= n, `${n} messages`);
  return { worker: w, done, seen };
}

for (const [kind, many] of [
  ['pool', false],
  ['pool', true],
  ['striped', false],
  ['striped', true],
  ['rw', false],
]) {
  test(`4 workers on a shared ${kind}${many ? ' (lockMany)' : ''}: exact counts`, T, async () => {
    const keys = 6;
    const counters = new SharedArrayBuffer(4 * keys);
    const occupancy = new Occupancy(keys);
    const rounds = 150;
    const tasks = 4;
    const name = `stress-${kind}-${many}`;
    const workers = Array.from(
      { length: 4 },
      (_, i) =>
        new Promise((resolve, reject) => {
          const w = new Worker(STRESS_WORKER, {
            eval: true,
            workerData: { kind, name, counters, inside: occupancy.buffer, seed: i + 1, rounds, tasks, many },
          });
          let done = false;
          w.on('message', (m) => (done = m === 'done'));
          w.on('error', reject);
          w.on('exit', (code) => (code === 0 && done ? resolve() : reject(new Error(`worker exit ${code}`))));
        }),
    );
    await Promise.all(workers);
    const total = new Int32Array(counters).reduce((s, c) => s + c, 0);
    occupancy.check();
    assert.equal(occupancy.completed, 4 * tasks * rounds * (many ? 2 : 1), 'one entry per key held');
    assert.equal(total, 4 * tasks * rounds * (many ? 2 : 1), 'every write (and read) counted');
    if (kind === 'pool') {
      const st = KeyPool.shared(name).stats();
      assert.equal(st.held, 0);
      assert.equal(st.waiting, 0);
      assert.equal(st.entriesInUse, 0);
    }
  });
}

test('a key taken in one thread excludes the others, and its release wakes them', T, async () => {
  const pool = KeyPool.shared('cross');
  const g = pool.tryLock('k');
  const { done, seen } = runWorker(`
    const pool = KeyPool.shared('cross');
    post(pool.tryLock('k') === null ? 'excluded' : 'NOT excluded');
    post(pool.isLocked('k') ? 'sees held' : 'sees free');
    const g = await pool.lock('k');   // nothing else keeps this worker alive
    post('acquired');
    g.release();
  `);
  await seen(2); // 'excluded', 'sees held'
  await until(() => pool.stats().waiting === 1); // the worker waits now
  await sleep(50); // with nothing else to do: it must stay alive
  assert.equal(pool.isLocked('k'), true);
  g.release();
  const { code, messages } = await done;
  assert.deepEqual(messages, ['excluded', 'sees held', 'acquired']);
  assert.equal(code, 0);
  assert.equal(pool.stats().entriesInUse, 0);
});

test('shared RwLock and StripedLock exclude across threads too', T, async () => {
  const rw = RwLock.shared('cross-rw');
  const striped = StripedLock.shared('cross-striped', 16);
  const w = rw.tryWrite();
  const s = striped.tryLock('x');
  const { done, seen } = runWorker(`
    const rw = RwLock.shared('cross-rw');
    const striped = StripedLock.shared('cross-striped', 16);
    post(rw.tryRead() === null && striped.tryLock('x') === null ? 'excluded' : 'NOT excluded');
    const [r, g] = await Promise.all([rw.read(), striped.lock('x')]);
    post('acquired');
    r.release();
    g.release();
  `);
  await seen(1); // 'excluded'
  await sleep(50); // let the worker start waiting (the outcome is the same if it has not yet)
  w.release();
  s.release();
  const { code, messages } = await done;
  assert.deepEqual(messages, ['excluded', 'acquired']);
  assert.equal(code, 0);
  assert.equal(rw.isLocked(), false);
});

test('lockSync in a worker blocks until another thread releases', T, async () => {
  const pool = KeyPool.shared('sync');
  const g = pool.tryLock('k');
  const { done, seen } = runWorker(`
    const pool = KeyPool.shared('sync');
    post('blocking');
    try { pool.lockSync('k', { timeout: 10 }); post('NOT timed out'); } catch (e) { post(e.code); }
    const g = pool.lockSync('k');
    post('acquired');
    g.release();
  `);
  await seen(2); // 'blocking', 'KEYLOCK_TIMEOUT'
  await until(() => pool.stats().waiting === 1); // blocked in lockSync now
  g.release();
  const { code, messages } = await done;
  assert.deepEqual(messages, ['blocking', 'KEYLOCK_TIMEOUT', 'acquired']);
  assert.equal(code, 0);
});

// Runs a worker that holds key 'k' of KeyPool.shared(name) and then waits for it again, with
// nothing else to do: only another thread's activity on the lock could keep it alive, so it
// must exit (and this resolves when it has).
async function selfWaiterExits(name) {
  const { done } = runWorker(`
    const pool = KeyPool.shared(${JSON.stringify(name)});
    globalThis.kept = pool.tryLock('k');
    pool.lock('k').then(() => post('NOT expected'));
    post('waiting');
  `);
  const { code, messages } = await done;
  assert.deepEqual(messages, ['waiting']);
  assert.equal(code, 0);
}

test('a waiter for a lock only its own worker holds does not keep that worker alive', T, async () => {
  // Another thread is present on the lock but idle: the worker must still exit.
  const pool = KeyPool.shared('self');
  await selfWaiterExits('self');
  // Its waiter was cancelled when the worker went away, and the lock its guard still held was
  // released with it (as dropping a guard releases in Rust).
  assert.equal(pool.stats().waiting, 0);
  assert.equal(pool.isLocked('k'), false);
  assert.equal(pool.stats().entriesInUse, 0);
});

test('acquisitions a thread has ended no longer count it as active on the lock', T, async () => {
  // This thread takes and releases the shared locks every way there is: at once, after a wait,
  // many keys, reads and writes, Web Locks. Then a worker waits for a key only it holds: if any
  // of those acquisitions were still counted here, the worker's waiter would keep it alive, and
  // it would never exit.
  const pool = KeyPool.shared('idle-after');
  const rw = RwLock.shared('idle-after');
  (await pool.lock('a')).release();
  (await pool.lock('a', { mode: 'shared', timeout: 1000 })).release();
  (await pool.lockMany(['a', 'b'])).release();
  pool.lockSync('a').release();
  pool.tryLockMany(['a', 'b']).release();
  const held = pool.tryLock('w');
  const waited = pool.lock('w');
  const waitedMany = pool.lockMany(['v', 'w']);
  held.release();
  (await waited).release();
  (await waitedMany).release();
  (await rw.read()).release();
  (await rw.write()).release();
  rw.tryRead().release();
  rw.writeSync().release();
  await new LockManager(pool).request('n', async () => {});
  const w = rw.tryWrite();
  const readWaiting = rw.read();
  w.release();
  (await readWaiting).release();
  assert.deepEqual(native.waiterCounts(), [0, 0]);
  await selfWaiterExits('idle-after');
  assert.equal(pool.isLocked('k'), false);
});

test('a worker that ends holding locks releases them; one terminated while holding too', T, async () => {
  const pool = KeyPool.shared('ends-holding');
  const rw = RwLock.shared('ends-holding');
  const { done } = runWorker(`
    const pool = KeyPool.shared('ends-holding');
    const rw = RwLock.shared('ends-holding');
    globalThis.kept = [pool.tryLock('a'), pool.tryLockMany(['b', 'c']), rw.tryWrite()];
    post(pool.isLocked('a') && pool.isLocked('c') && rw.isWriteLocked() ? 'holding' : 'NOT holding');
  `);
  const { code, messages } = await done;
  assert.deepEqual(messages, ['holding']);
  assert.equal(code, 0);
  assert.equal(pool.isLocked('a') || pool.isLocked('b') || pool.isLocked('c'), false);
  assert.equal(rw.isLocked(), false);
  const { worker, done: done2 } = runWorker(
    `
    const pool = KeyPool.shared('ends-holding');
    globalThis.kept = pool.tryLock('t');
    post('holding');
    setInterval(() => {}, 1000);
  `,
    undefined,
    (m, w) => m === 'holding' && w.terminate(),
  );
  await done2;
  void worker;
  assert.equal(pool.isLocked('t'), false);
  assert.equal(pool.stats().entriesInUse, 0);
});

test('a worker terminated while waiting leaves no waiter behind', T, async () => {
  const pool = KeyPool.shared('terminate');
  const g = pool.tryLock('k');
  const { worker, done } = runWorker(
    `
    const pool = KeyPool.shared('terminate');
    pool.lock('k').then(() => post('NOT expected'));
    pool.lockMany(['j', 'k']).then(() => post('NOT expected'));
    post('waiting');
  `,
    undefined,
    (m, w) => m === 'waiting' && setTimeout(() => w.terminate(), 50),
  );
  await done;
  assert.equal(pool.stats().waiting, 0);
  assert.equal(pool.isLocked('j'), false);
  g.release();
  assert.equal(pool.stats().entriesInUse, 0);
  void worker;
});

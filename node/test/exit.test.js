'use strict';
// Pending waiters and process exit: a process whose only pending work is lock waiters exits
// as it would with a pure-JavaScript lock; a waiter whose lock another thread holds keeps the
// process alive until it is served.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawn } = require('node:child_process');

const T = { timeout: 60_000 };
const INDEX = JSON.stringify(path.join(__dirname, '..'));

// Runs `src` in a fresh node process; a child that does not exit within 15 s is killed and
// reported as hung.
function runChild(src, args = []) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...args, '-e', src], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out: out.trim().split('\n').filter(Boolean), err });
    });
  });
}

test('exits on its own with a waiter pending on a lock it holds itself', T, async () => {
  const r = await runChild(`
    const { KeyPool, StripedLock, RwLock } = require(${INDEX});
    const pool = new KeyPool();
    pool.tryLock('k');
    pool.lock('k').then(() => console.log('NOT expected'));
    pool.lockMany(['j', 'k']).then(() => console.log('NOT expected'));
    const s = new StripedLock(4);
    s.tryLock('x');
    s.lock('x').then(() => console.log('NOT expected'));
    const rw = new RwLock();
    rw.tryWrite();
    rw.read().then(() => console.log('NOT expected'));
    console.log('pending');
  `);
  assert.equal(r.signal, null, 'the child hung and was killed');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.out, ['pending']);
});

test('exits on its own with a waiter pending on a shared lock it holds itself', T, async () => {
  const r = await runChild(`
    const { KeyPool } = require(${INDEX});
    const pool = KeyPool.shared('x');
    pool.tryLock('k');
    pool.lock('k').then(() => console.log('NOT expected'));
    console.log('pending');
  `);
  assert.equal(r.signal, null, 'the child hung and was killed');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.out, ['pending']);
});

test('an ESM module with a pending waiter exits too', T, async () => {
  const r = await runChild(
    `
    import { KeyPool } from ${JSON.stringify(path.join(__dirname, '..', 'index.mjs'))};
    const pool = new KeyPool();
    pool.tryLock('k');
    pool.lock('k').then(() => console.log('NOT expected'));
    console.log('pending');
  `,
    ['--input-type=module'],
  );
  assert.equal(r.signal, null, 'the child hung and was killed');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.out, ['pending']);
});

test('a waiter with a timeout keeps the process until the timeout, like a pure-JS lock', T, async () => {
  const r = await runChild(`
    const { KeyPool } = require(${INDEX});
    const pool = new KeyPool();
    pool.tryLock('k');
    pool.lock('k', { timeout: 100 }).catch((e) => console.log(e.code));
  `);
  assert.equal(r.signal, null);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.out, ['KEYLOCK_TIMEOUT']);
});

test('a release handing the lock to a waiter of the same thread is delivered before exit', T, async () => {
  const r = await runChild(`
    const { KeyPool } = require(${INDEX});
    const pool = new KeyPool();
    const g = pool.tryLock('k');
    pool.lock('k').then((h) => { console.log('served'); h.release(); });
    setTimeout(() => g.release(), 20);   // the last ref'd handle: nothing else keeps the loop
  `);
  assert.equal(r.signal, null);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.out, ['served']);
});

test('the main thread waits for a lock a worker holds, until it is served', T, async () => {
  // The worker holds the key, tells the main thread, then releases 200 ms later from a timer;
  // meanwhile the main thread has nothing pending but its waiter.
  const r = await runChild(`
    const { Worker } = require('node:worker_threads');
    const { KeyPool } = require(${INDEX});
    const pool = KeyPool.shared('exit-cross');
    const w = new Worker(\`
      const { parentPort } = require('node:worker_threads');
      const { KeyPool } = require(${INDEX.replace(/\\/g, '\\\\')});
      const g = KeyPool.shared('exit-cross').tryLock('k');
      parentPort.postMessage('held');
      setTimeout(() => g.release(), 200);
    \`, { eval: true });
    w.once('message', () => {
      w.unref();
      pool.lock('k').then((g) => { console.log('served'); g.release(); });
    });
  `);
  assert.equal(r.signal, null, 'the child hung and was killed');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.out, ['served']);
});

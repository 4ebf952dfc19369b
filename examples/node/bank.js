'use strict';
// The keylock bank in Node.js: tasks move money between accounts under per-key locks while an
// auditor checks that the total never changes.
//
// A transfer holds the RwLock for reading and both account keys (taken together with
// withLockMany, deadlock-free), and yields to the event loop between reading and writing the
// balances, so that without the locks money would be lost. The auditor takes the RwLock for
// writing, which stops every transfer, and sums all balances. Each run is done with KeyPool,
// then with StripedLock:
//   1. async tasks in one thread;
//   2. 4 worker_threads sharing KeyPool.shared('bank'), StripedLock.shared('bank') and
//      RwLock.shared('bank'), with the balances in a SharedArrayBuffer.
// Exit status 1 on any mismatch.
//
// Usage: node bank.js [tasks] [accounts] [millis-per-phase]

const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');
const { setImmediate: yieldToLoop, setTimeout: sleep } = require('node:timers/promises');
const { KeyPool, StripedLock, RwLock } = require('../../node');

const INITIAL = 1000;
const WORKERS = 4;

// A small xorshift generator: the demo needs no cryptographic randomness.
function rng(seed) {
  let x = seed >>> 0 || 1;
  return (n) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
}

// Runs `tasks` transfer loops until `deadline` on `balances` (an Int32Array, plain reads and
// writes); returns the number of transfers done.
async function transfers({ keys, rw, balances, tasks, seed, deadline }) {
  let done = 0;
  const accounts = balances.length;
  async function loop(i) {
    const below = rng(seed * 7919 + i);
    while (Date.now() < deadline) {
      const from = below(accounts);
      const to = (from + 1 + below(accounts - 1)) % accounts;
      const amount = 1 + below(50);
      await rw.withRead(() =>
        keys.withLockMany([`acct-${from}`, `acct-${to}`], async () => {
          const a = balances[from];
          const b = balances[to];
          await yieldToLoop();
          balances[from] = a - amount;
          balances[to] = b + amount;
        }),
      );
      done++;
    }
  }
  await Promise.all(Array.from({ length: tasks }, (_, i) => loop(i)));
  return done;
}

// Audits every few milliseconds until `until` resolves: [passed, total audits].
async function auditor(rw, balances, expected, until) {
  let running = true;
  until.then(() => (running = false));
  let passed = 0;
  let audits = 0;
  while (running) {
    await sleep(5);
    await rw.withWrite(() => {
      const total = balances.reduce((s, b) => s + b, 0);
      audits++;
      if (total === expected) passed++;
      else console.error(`  audit ${audits}: total ${total}, expected ${expected}`);
    });
  }
  return [passed, audits];
}

function row(name, count, ms, [passed, audits]) {
  const rate = Math.round((count * 1000) / ms);
  console.log(`  ${name.padEnd(12)} ${String(rate).padStart(9)} transfers/s  audits passed ${passed}/${audits}`);
  return passed === audits && audits > 0;
}

async function oneThread(tasks, accounts, ms) {
  console.log(`keylock bank (Node, async tasks in one thread): ${tasks} tasks, ${accounts} accounts`);
  const balances = new Int32Array(accounts).fill(INITIAL);
  const expected = INITIAL * accounts;
  let ok = true;
  for (const [name, keys] of [
    ['KeyPool', new KeyPool()],
    ['StripedLock', new StripedLock(1024)],
  ]) {
    const rw = new RwLock();
    const start = Date.now();
    const work = transfers({ keys, rw, balances, tasks, seed: 1, deadline: start + ms });
    const audit = auditor(rw, balances, expected, work);
    const [count, result] = await Promise.all([work, audit]);
    ok = row(name, count, Date.now() - start, result) && ok;
    if (keys instanceof KeyPool && keys.stats().held !== 0) ok = false;
  }
  const total = balances.reduce((s, b) => s + b, 0);
  console.log(`  final total ${total} (initial ${expected})`);
  return ok && total === expected;
}

async function workers(tasks, accounts, ms) {
  console.log(
    `keylock bank (Node, ${WORKERS} worker_threads sharing KeyPool.shared('bank')): ` +
      `${tasks} tasks each, ${accounts} accounts`,
  );
  const shared = new SharedArrayBuffer(4 * accounts);
  const balances = new Int32Array(shared).fill(INITIAL);
  const expected = INITIAL * accounts;
  const rw = RwLock.shared('bank');
  // Start the workers once and wait until each has loaded keylock, so that startup time is not
  // counted in the transfer rates.
  const pool = await Promise.all(
    Array.from(
      { length: WORKERS },
      (_, i) =>
        new Promise((resolve, reject) => {
          const w = new Worker(__filename, { workerData: { shared, tasks, seed: i + 1 } });
          w.once('message', () => resolve(w));
          w.once('error', reject);
          w.once('exit', (code) => code !== 0 && reject(new Error(`worker exited with ${code}`)));
        }),
    ),
  );
  const ask = (w, msg) =>
    new Promise((resolve, reject) => {
      w.once('message', resolve);
      w.once('error', reject);
      w.postMessage(msg);
    });
  let ok = true;
  for (const name of ['KeyPool', 'StripedLock']) {
    const start = Date.now();
    const work = Promise.all(pool.map((w) => ask(w, { name, deadline: start + ms }))).then((counts) =>
      counts.reduce((s, c) => s + c, 0),
    );
    const [count, result] = await Promise.all([work, auditor(rw, balances, expected, work)]);
    ok = row(name, count, Date.now() - start, result) && ok;
  }
  await Promise.all(pool.map((w) => new Promise((resolve) => w.once('exit', resolve).postMessage('stop'))));
  const stats = KeyPool.shared('bank').stats();
  if (stats.held !== 0 || stats.waiting !== 0) {
    console.error(`  KeyPool.shared('bank') still has ${stats.held} held, ${stats.waiting} waiting`);
    ok = false;
  }
  const total = balances.reduce((s, b) => s + b, 0);
  console.log(`  final total ${total} (initial ${expected})`);
  return ok && total === expected;
}

// A worker: runs one phase per message from the main thread and answers with its count.
function worker() {
  const { shared, tasks, seed } = workerData;
  const balances = new Int32Array(shared);
  const rw = RwLock.shared('bank');
  parentPort.on('message', async (msg) => {
    if (msg === 'stop') {
      parentPort.close();
      return;
    }
    const keys = msg.name === 'KeyPool' ? KeyPool.shared('bank') : StripedLock.shared('bank', 1024);
    parentPort.postMessage(await transfers({ keys, rw, balances, tasks, seed, deadline: msg.deadline }));
  });
  parentPort.postMessage('ready');
}

async function main() {
  const [tasks = 8, accounts = 64, ms = 250] = process.argv.slice(2).map(Number);
  const a = await oneThread(tasks, accounts, ms);
  const b = await workers(Math.max(1, tasks >> 1), accounts, ms);
  if (!(a && b)) {
    console.error('keylock bank: MISMATCH');
    process.exitCode = 1;
  }
}

if (isMainThread) {
  main().catch((err) => {
    console.error(err);
    process.exitCode = 1;
  });
} else {
  worker();
}

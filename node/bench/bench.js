'use strict';
// keylock for Node.js against what Node programmers use today, side by side in one run:
//
//  1. withLock on 1,000 keys with 100 concurrent tasks (ops/s), for keylock's KeyPool and
//     StripedLock, against async-lock's acquire(key, fn) and against a Map of async-mutex
//     Mutexes (runExclusive), and keylock's Web Locks `locks.request(name, fn)`. Targets: withLock
//     at least 1.5x async-lock's operations per second, and at least 3x the Map of Mutexes'.
//  2. Uncontended tryLock + release (ns/op) for KeyPool and StripedLock, against the closest
//     thing async-mutex offers (an uncontended acquire() + release(), awaited) and, as a floor
//     for what any native call costs, a JavaScript Set used as a try-lock.
//
// Every contender runs once per round, in rotating order, for several rounds; results are
// medians with min and max. Writes JSON (see --out) and prints a table.
//
// Usage: node bench.js [--quick] [--out FILE]

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const AsyncLock = require('async-lock');
const { Mutex } = require('async-mutex');
const { KeyPool, StripedLock, locks } = require('..');

const args = process.argv.slice(2);
const quick = args.includes('--quick');
const outIdx = args.indexOf('--out');
const out = outIdx >= 0 ? args[outIdx + 1] : null;

const ROUNDS = quick ? 3 : 9;
const KEYS = 1000;
const TASKS = 100;
const OPS = quick ? 100_000 : 300_000; // withLock operations per run, over all tasks
const TRY_OPS = quick ? 500_000 : 2_000_000;
const ASYNC_TRY_OPS = quick ? 100_000 : 300_000;

const keys = Array.from({ length: KEYS }, (_, i) => `key-${i}`);

// A fixed pseudo-random key sequence per task, the same for every contender: `ops` operations
// over all tasks.
function sequences(ops = OPS) {
  const perTask = Math.ceil(ops / TASKS);
  return Array.from({ length: TASKS }, (_, t) => {
    let x = (t + 1) * 2654435761;
    const seq = new Uint16Array(perTask);
    for (let i = 0; i < perTask; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      seq[i] = (x >>> 0) % KEYS;
    }
    return seq;
  });
}
const SEQ = sequences();

// 100 tasks, each doing its share of withLock calls (the sequences `seq`); the critical section
// is an async function that bumps a per-key counter. Returns ops/s; checks every operation ran.
async function withLockRun(withLock, seq = SEQ) {
  const counts = new Uint32Array(KEYS);
  const body = (k) => async () => {
    counts[k]++;
  };
  const bodies = Array.from({ length: KEYS }, (_, k) => body(k));
  const start = process.hrtime.bigint();
  await Promise.all(
    seq.map(async (task) => {
      for (let i = 0; i < task.length; i++) {
        const k = task[i];
        await withLock(keys[k], bodies[k]);
      }
    }),
  );
  const ns = Number(process.hrtime.bigint() - start);
  const total = counts.reduce((s, c) => s + c, 0);
  if (total !== seq.length * seq[0].length) throw new Error(`lost operations: ${total}`);
  return (total * 1e9) / ns;
}

function mutexMap() {
  const map = new Map();
  return (key, fn) => {
    let m = map.get(key);
    if (m === undefined) {
      m = new Mutex();
      map.set(key, m);
    }
    return m.runExclusive(fn);
  };
}

const withLockContenders = [
  [
    'keylock KeyPool withLock',
    () => {
      const pool = new KeyPool();
      return (key, fn) => pool.withLock(key, fn);
    },
  ],
  [
    'keylock StripedLock withLock',
    () => {
      const striped = new StripedLock(1024);
      return (key, fn) => striped.withLock(key, fn);
    },
  ],
  [
    'async-lock acquire(key, fn)',
    () => {
      const lock = new AsyncLock({ maxPending: Infinity });
      return (key, fn) => lock.acquire(key, fn);
    },
  ],
  ['async-mutex Map of Mutexes runExclusive', mutexMap],
  ['keylock locks.request(name, fn) (Web Locks)', () => (key, fn) => locks.request(key, fn)],
];

// Uncontended try + release, ns/op.
function tryRun(tryRelease, n) {
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) tryRelease(keys[i % KEYS]);
  return Number(process.hrtime.bigint() - start) / n;
}

async function asyncTryRun(acquireRelease, n) {
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await acquireRelease(keys[i % KEYS]);
  return Number(process.hrtime.bigint() - start) / n;
}

const tryContenders = [
  [
    'keylock KeyPool tryLock+release',
    () => {
      const pool = new KeyPool();
      return [false, (key) => pool.tryLock(key).release()];
    },
  ],
  [
    'keylock StripedLock tryLock+release',
    () => {
      const striped = new StripedLock(1024);
      return [false, (key) => striped.tryLock(key).release()];
    },
  ],
  [
    'async-mutex Map acquire+release (uncontended, awaited)',
    () => {
      const map = new Map(keys.map((k) => [k, new Mutex()]));
      return [true, async (key) => (await map.get(key).acquire())()];
    },
  ],
  [
    'JavaScript Set try-lock (floor, no native call)',
    () => {
      const held = new Set();
      return [
        false,
        (key) => {
          if (held.has(key)) throw new Error('held');
          held.add(key);
          held.delete(key);
        },
      ];
    },
  ],
];

function summary(runs) {
  const s = [...runs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median = s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
  return { median, min: s[0], max: s[s.length - 1] };
}

const loadAtStart = os.loadavg().map((x) => Math.round(x * 100) / 100);

async function main() {
  // How often a key was found held in this workload (KeyPool's own counts).
  const probe = new KeyPool({ metrics: true });
  await withLockRun((key, fn) => probe.withLock(key, fn));
  const probeCounts = probe.metrics();
  const contendedShare = probeCounts.contended / probeCounts.acquired;

  // Warm-up: JIT every path once.
  for (const [, make] of withLockContenders) await withLockRun(make());
  for (const [, make] of tryContenders) {
    const [isAsync, fn] = make();
    if (isAsync) await asyncTryRun(fn, 10_000);
    else tryRun(fn, 100_000);
  }

  const lockRuns = withLockContenders.map(() => []);
  const tryRuns = tryContenders.map(() => []);
  for (let r = 0; r < ROUNDS; r++) {
    for (let j = 0; j < withLockContenders.length; j++) {
      const i = (j + r) % withLockContenders.length; // rotate the order every round
      lockRuns[i].push(await withLockRun(withLockContenders[i][1]()));
    }
    for (let j = 0; j < tryContenders.length; j++) {
      const i = (j + r) % tryContenders.length;
      const [isAsync, fn] = tryContenders[i][1]();
      tryRuns[i].push(isAsync ? await asyncTryRun(fn, ASYNC_TRY_OPS) : tryRun(fn, TRY_OPS));
    }
    process.stderr.write(`round ${r + 1}/${ROUNDS}\r`);
  }
  process.stderr.write('\n');

  const results = [];
  const rowName = (i) => `${withLockContenders[i][0]}, ${KEYS} keys, ${TASKS} tasks`;
  // Each keylock row against async-lock (index 2) and, for withLock, a second row against the
  // Map of async-mutex Mutexes (index 3).
  withLockContenders.forEach(([name], i) => {
    const s = summary(lockRuns[i]);
    const isKeylock = name.startsWith('keylock');
    const isWithLock = name.includes('withLock');
    const against = [];
    if (isKeylock) against.push([2, isWithLock ? 1.5 : null, "async-lock's"]);
    if (isKeylock && isWithLock) against.push([3, 3, "the Map of async-mutex Mutexes'"]);
    if (against.length === 0) against.push([null, null, null]);
    for (const [base, goal, what] of against) {
      const ratio = base === null ? null : s.median / summary(lockRuns[base]).median;
      results.push({
        name: base === 3 ? `${rowName(i)} (vs async-mutex)` : rowName(i),
        unit: 'ops/s',
        ...s,
        runs: lockRuns[i],
        baseline: base === null ? null : rowName(base),
        ratio,
        target: goal === null ? null : `at least ${goal}x ${what} operations per second`,
        met: goal === null ? null : ratio >= goal,
      });
    }
  });
  const mutexTry = summary(tryRuns[2]).median;
  tryContenders.forEach(([name], i) => {
    const s = summary(tryRuns[i]);
    const isKeylock = name.startsWith('keylock');
    results.push({
      name,
      unit: 'ns/op',
      ...s,
      runs: tryRuns[i],
      baseline: isKeylock ? tryContenders[2][0] : null,
      // For ns/op, the ratio is how many times faster than the baseline.
      ratio: isKeylock ? mutexTry / s.median : null,
      target: null,
      met: null,
    });
  });

  const pkg = (name) => require(path.join(__dirname, '..', 'node_modules', name, 'package.json')).version;
  const report = {
    suite: 'node',
    machine: {
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cores: os.cpus().length,
      memory_gib: Math.round(os.totalmem() / 2 ** 30),
      os: `${os.type()} ${os.release()} ${os.arch()}`,
      load_average_at_start: loadAtStart,
      node: process.version,
      napi: process.versions.napi,
      v8: process.versions.v8,
      'async-lock': pkg('async-lock'),
      'async-mutex': pkg('async-mutex'),
      keylock: require('../package.json').version,
    },
    date: new Date().toISOString(),
    config: {
      rounds: ROUNDS,
      keys: KEYS,
      tasks: TASKS,
      with_lock_ops_per_run: OPS,
      try_ops_per_run: TRY_OPS,
      with_lock_contended_share: Math.round(contendedShare * 1000) / 1000,
      quick,
    },
    results,
  };

  const fmt = (x) => (x >= 100 ? Math.round(x).toLocaleString('en-US') : x.toFixed(1));
  console.log(
    `keylock Node benchmark (${ROUNDS} rounds; median [min - max]; ` +
      `${(contendedShare * 100).toFixed(1)}% of withLock calls found their key held; load ${loadAtStart.join(' ')})`,
  );
  for (const r of results) {
    // The ratio names the row it is against (its baseline).
    const ratio = r.ratio === null ? '' : `  ${r.ratio.toFixed(2)}x (${r.baseline})`;
    const met = r.met === null ? '' : r.met ? '  target met' : '  target MISSED';
    console.log(
      `  ${r.name.padEnd(58)} ${fmt(r.median).padStart(12)} ${r.unit}  [${fmt(r.min)} - ${fmt(r.max)}]${ratio}${met}`,
    );
  }
  if (out) {
    fs.mkdirSync(path.dirname(path.resolve(out)), { recursive: true });
    fs.writeFileSync(out, JSON.stringify(report, null, 2) + '\n');
    console.log(`wrote ${out}`);
  }
}

// node/bench/callgrind.js runs the same withLock workload under callgrind.
module.exports = { KEYS, TASKS, sequences, withLockRun, withLockContenders, summary };

if (require.main === module) {
  main().catch((err) => {
    console.error(err);
    process.exitCode = 1;
  });
}

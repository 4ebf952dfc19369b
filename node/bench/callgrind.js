'use strict';
// Instructions per operation of bench.js's withLock workload (1,000 keys, 100 tasks), under
// valgrind's callgrind: keylock's KeyPool and StripedLock against async-lock and a Map of
// async-mutex Mutexes, and the bare loop (no lock) for what the workload costs by itself.
//
// The timed suite (bench.js) swings by a third between runs on a loaded two-core machine, more
// than the gaps it judges; instruction counts do not. Each contender runs in its own process
// (V8 on one thread, fixed hash and random seeds) at three sizes after the same warm-up, and the
// instructions per operation are the differences between sizes (start-up, loading and warm-up
// cancel out): two estimates per contender, from sizes 1-2 and 2-3. The sizes are 200,000
// operations apart: with 100,000, a garbage collection that fell in one window and not the other
// put keylock's two estimates 8% apart (3,225 and 2,966). The ratios are the
// baseline's instructions over keylock's, as the timed ratios are keylock's operations per
// second over the baseline's. Instructions are not time (an atomic instruction or a cache miss
// costs more than an add), so these complement the timed figures; they do not replace them.
//
// Usage: node callgrind.js [--out FILE]     (needs valgrind)
//        node callgrind.js --child NAME OPS (one run, what the parent starts under callgrind)

const childProcess = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const WARM_UP = 100_000;
const SIZES = [100_000, 300_000, 500_000];
const BARE = 'no lock (the bare loop)';

async function child(name, ops) {
  const { sequences, withLockRun, withLockContenders } = require('./bench.js');
  const make = name === BARE ? () => (key, fn) => fn() : withLockContenders.find(([n]) => n === name)?.[1];
  if (make === undefined) throw new Error(`no contender named ${name}`);
  const withLock = make();
  await withLockRun(withLock, sequences(WARM_UP));
  if (ops > 0) await withLockRun(withLock, sequences(ops));
}

// Instructions of one child run under callgrind.
function instructions(name, ops) {
  const run = childProcess.spawnSync(
    'valgrind',
    [
      '--tool=callgrind',
      '--callgrind-out-file=/dev/null',
      process.execPath,
      '--single-threaded',
      '--hash-seed=1',
      '--random-seed=1',
      __filename,
      '--child',
      name,
      String(ops),
    ],
    { encoding: 'utf8', maxBuffer: 1 << 26 },
  );
  const m = /Collected : (\d+)/.exec(run.stderr ?? '');
  if (run.status !== 0 || !m) {
    throw new Error(`callgrind run of ${name} failed: ${(run.stderr ?? String(run.error)).slice(-2000)}`);
  }
  return Number(m[1]);
}

function main() {
  const args = process.argv.slice(2);
  const outIdx = args.indexOf('--out');
  const out = outIdx >= 0 ? args[outIdx + 1] : path.join('bench', 'results', 'node-callgrind.json');
  const { KEYS, TASKS, withLockContenders, summary } = require('./bench.js');
  const row = (name) => `${name}, ${KEYS} keys, ${TASKS} tasks`;
  const names = [...withLockContenders.map(([n]) => n).filter((n) => !n.includes('Web Locks')), BARE];
  const perOp = new Map();
  for (const name of names) {
    const counts = SIZES.map((ops) => instructions(name, ops));
    const estimates = [0, 1].map((i) => (counts[i + 1] - counts[i]) / (SIZES[i + 1] - SIZES[i]));
    perOp.set(name, estimates);
    process.stderr.write(`  ${name}: ${estimates.map((e) => e.toFixed(1)).join(', ')}\n`);
  }
  const results = [];
  for (const name of names) {
    const runs = perOp.get(name);
    const against = name.startsWith('keylock')
      ? [
          ['async-lock acquire(key, fn)', ''],
          ['async-mutex Map of Mutexes runExclusive', ' (vs async-mutex)'],
        ]
      : [[null, '']];
    for (const [base, suffix] of against) {
      results.push({
        name: row(name) + suffix,
        unit: 'instructions/op',
        ...summary(runs),
        runs,
        baseline: base === null ? null : row(base),
        // The baseline's instructions over keylock's: > 1 means keylock does less work.
        ratio: base === null ? null : summary(perOp.get(base)).median / summary(runs).median,
        target: null,
        met: null,
      });
    }
  }
  const valgrind = childProcess.spawnSync('valgrind', ['--version'], { encoding: 'utf8' }).stdout.trim();
  const report = {
    suite: 'node-callgrind',
    description:
      "instructions per operation of bench.js's withLock workload under callgrind (deterministic on a " +
      "loaded machine), from the differences between runs at three sizes; ratio: the baseline's " +
      "instructions over keylock's. A complement to node.json's timings, not a replacement",
    machine: {
      node: process.version,
      v8: process.versions.v8,
      valgrind,
      os: `${os.type()} ${os.release()} ${os.arch()}`,
    },
    date: new Date().toISOString(),
    config: { keys: KEYS, tasks: TASKS, warm_up_ops: WARM_UP, sizes: SIZES },
    results,
  };
  fs.mkdirSync(path.dirname(path.resolve(out)), { recursive: true });
  fs.writeFileSync(out, JSON.stringify(report, null, 2) + '\n');
  for (const r of results) {
    const ratio = r.ratio === null ? '' : `  ${r.ratio.toFixed(2)}x (${r.baseline})`;
    console.log(`  ${r.name.padEnd(70)} ${r.median.toFixed(1).padStart(9)} ${r.unit}${ratio}`);
  }
  console.log(`wrote ${out}`);
}

const argv = process.argv.slice(2);
if (argv[0] === '--child') {
  child(argv[1], Number(argv[2])).catch((err) => {
    console.error(err);
    process.exitCode = 1;
  });
} else {
  main();
}

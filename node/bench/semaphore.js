'use strict';
// keylock's Semaphore against a Map of async-mutex Semaphores (the usual keyed semaphore in
// Node), side by side in one run: withPermit on 1,000 keys with 100 concurrent tasks, 3 permits,
// weight 1 (ops/s). Target: at least 2x the Map. Every contender runs once per round, in
// rotating order; results are medians with min and max.
//
// Usage: node bench/semaphore.js [--quick] [--out FILE]

const fs = require('node:fs');
const os = require('node:os');
const { Semaphore: MutexSemaphore } = require('async-mutex');
const { Semaphore } = require('..');

const args = process.argv.slice(2);
const quick = args.includes('--quick');
const outIdx = args.indexOf('--out');
const out = outIdx >= 0 ? args[outIdx + 1] : null;

const ROUNDS = quick ? 3 : 9;
const KEYS = 1000;
const TASKS = 100;
const PERMITS = 3;
const OPS = quick ? 100_000 : 300_000;
const keys = Array.from({ length: KEYS }, (_, i) => `key-${i}`);

async function run(withPermit) {
  const perTask = Math.ceil(OPS / TASKS);
  let done = 0;
  const start = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: TASKS }, async (_, t) => {
      let x = (t + 1) * 2654435761;
      for (let i = 0; i < perTask; i++) {
        x ^= x << 13;
        x ^= x >>> 17;
        x ^= x << 5;
        await withPermit(keys[(x >>> 0) % KEYS], async () => {
          done++;
        });
      }
    }),
  );
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  if (done !== perTask * TASKS) throw new Error(`ran ${done} of ${perTask * TASKS}`);
  return done / s;
}

const contenders = {
  'keylock Semaphore.withPermit': () => {
    const sem = new Semaphore(PERMITS);
    return (k, fn) => sem.withPermit(k, fn);
  },
  'Map of async-mutex Semaphores (runExclusive)': () => {
    const m = new Map();
    return (k, fn) => {
      let s = m.get(k);
      if (!s) m.set(k, (s = new MutexSemaphore(PERMITS)));
      return s.runExclusive(fn);
    };
  },
};

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

(async () => {
  const loadBefore = os.loadavg();
  const names = Object.keys(contenders);
  const runs = Object.fromEntries(names.map((n) => [n, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (let i = 0; i < names.length; i++) {
      const n = names[(r + i) % names.length];
      runs[n].push(await run(contenders[n]()));
    }
  }
  const group = 'semaphore withPermit, 1,000 keys, 100 tasks, 3 permits, weight 1';
  const row = (n, base, target) => {
    const v = runs[n];
    const med = median(v);
    const ratio = base ? med / median(runs[base]) : null;
    return {
      name: `${group}: ${n}`,
      group,
      impl: n,
      unit: 'ops/s',
      median: med,
      min: Math.min(...v),
      max: Math.max(...v),
      runs: v,
      baseline: base ? `${group}: ${base}` : null,
      ratio,
      target: target ?? null,
      met: target ? ratio >= 2 : null,
    };
  };
  const result = {
    suite: 'Node.js: keyed semaphore (node/bench/semaphore.js)',
    machine: {
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cores: os.cpus().length,
      os: `${os.type()} ${os.release()}`,
      node: process.version,
    },
    date: new Date().toISOString().slice(0, 10),
    description: `${ROUNDS} rounds, contenders in rotating order; ratios are ops/s over the baseline's. Load average ${loadBefore[0].toFixed(2)} before, ${os.loadavg()[0].toFixed(2)} after.`,
    results: [
      row(names[1]),
      row(names[0], names[1], "at least 2x a Map of async-mutex Semaphores' operations per second"),
    ],
  };
  if (out) fs.writeFileSync(out, JSON.stringify(result, null, 2));
  for (const r of result.results) console.log(`${r.impl}: ${Math.round(r.median)} ops/s, ratio ${r.ratio}`);
})();

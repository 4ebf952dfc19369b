'use strict';
// keylock's host scope (`KeyPool.open('shm:NAME')`, regions in /dev/shm) for Node.js against
// proper-lockfile, side by side in one run:
//
//  1. Uncontended lock+unlock in one process, 1,024 keys (ns/op): tryLock + release on a shm
//     KeyPool and a shm StripedLock (and an awaited lock() + release() on the shm KeyPool),
//     against proper-lockfile's lockSync + release and its awaited lock + release (one file per
//     key), with the in-process KeyPool for reference.
//  2. 4 processes (child_process.fork) on 64 keys (total ops/s): each awaits lock(key) and
//     releases, on the shm KeyPool and StripedLock, against proper-lockfile's lock(file) with
//     retries (it has no way to wait but retrying: here every 1 to 5 ms). The workers are forked
//     once; each opens its locks, reports ready, starts on the parent's signal and reports its
//     start and end (process.hrtime, CLOCK_MONOTONIC: one clock for every process). The figure is
//     all operations over the time from the first start to the last end.
//  3. A killed holder (SIGKILL): how long until another process gets the key, for keylock shm
//     (the acquisition is marked ownerDied) and for proper-lockfile with its default options
//     (the lock is left in place until it is stale, 10 s after its last mtime update).
//
// Every contender runs once per round, in rotating order, for several rounds; results are
// medians with min and max, in the JSON format of bench/report.py. The load average is recorded
// at the start, after every round and at the end. Every region and file it creates is removed.
//
// Usage: node bench/shm.js [--quick] [--out FILE]

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { fork } = require('node:child_process');
const lockfile = require('proper-lockfile');
const { KeyPool, StripedLock } = require('..');

const PROCS = 4;
const PROC_KEYS = 64;
const KEYS = 1024;
const CAPACITY = 1024;
const keys = Array.from({ length: KEYS }, (_, i) => `user:${i}`);
const PREFIX = 'keylock-nodebench-';

// The retry schedule proper-lockfile waits with under contention (passed to the `retry` package,
// which builds the whole list of timeouts on every lock() call: a large `retries` costs each call
// that much; 500 tries of at most 5 ms are 2.5 s, far beyond any hold here).
const RETRIES = { retries: 500, factor: 1.5, minTimeout: 1, maxTimeout: 5 };

const lockPath = (dir, ctx, i) => path.join(dir, `${ctx}-${i}.lock`);

function touchAll(dir, ctx, n) {
  for (let i = 0; i < n; i++) fs.closeSync(fs.openSync(lockPath(dir, ctx, i), 'a'));
}

// ---- the contenders: make(dir, n, ctx) opens the locks of keys 0..n-1 and returns
// [isAsync, step], where step(i) takes and releases key i once (contended: waits). The same ctx in
// two processes opens the same locks. ----

const uncontended = {
  'keylock shm KeyPool tryLock+release': (dir, n, ctx) => {
    const pool = KeyPool.open(`shm:${PREFIX}${ctx}-pool`, { capacity: CAPACITY });
    return [false, (i) => pool.tryLock(keys[i]).release()];
  },
  'keylock shm StripedLock(1024) tryLock+release': (dir, n, ctx) => {
    const striped = StripedLock.open(`shm:${PREFIX}${ctx}-striped`, { stripes: 1024 });
    return [false, (i) => striped.tryLock(keys[i]).release()];
  },
  'keylock shm KeyPool lock+release (awaited)': (dir, n, ctx) => {
    const pool = KeyPool.open(`shm:${PREFIX}${ctx}-pool`, { capacity: CAPACITY });
    return [true, async (i) => (await pool.lock(keys[i])).release()];
  },
  'keylock KeyPool tryLock+release (in-process, reference)': () => {
    const pool = new KeyPool();
    return [false, (i) => pool.tryLock(keys[i]).release()];
  },
  'proper-lockfile lockSync+release': (dir, n, ctx) => {
    touchAll(dir, `plsync-${ctx}`, n);
    const files = Array.from({ length: n }, (_, i) => lockPath(dir, `plsync-${ctx}`, i));
    return [false, (i) => lockfile.lockSync(files[i])()];
  },
  'proper-lockfile lock+release (awaited)': (dir, n, ctx) => {
    touchAll(dir, `pl-${ctx}`, n);
    const files = Array.from({ length: n }, (_, i) => lockPath(dir, `pl-${ctx}`, i));
    return [true, async (i) => (await lockfile.lock(files[i]))()];
  },
};

const contended = {
  'keylock shm KeyPool lock+release (awaited)': (dir, n, ctx) => {
    const pool = KeyPool.open(`shm:${PREFIX}${ctx}-pool`, { capacity: CAPACITY });
    return [true, async (i) => (await pool.lock(keys[i])).release()];
  },
  'keylock shm StripedLock(1024) lock+release (awaited)': (dir, n, ctx) => {
    const striped = StripedLock.open(`shm:${PREFIX}${ctx}-striped`, { stripes: 1024 });
    return [true, async (i) => (await striped.lock(keys[i])).release()];
  },
  'proper-lockfile lock+release (awaited, retries every 1-5 ms)': (dir, n, ctx) => {
    const files = Array.from({ length: n }, (_, i) => lockPath(dir, `plc-${ctx}`, i));
    return [true, async (i) => (await lockfile.lock(files[i], { retries: RETRIES }))()];
  },
};

async function loop(isAsync, step, n, keyOf) {
  const start = process.hrtime.bigint();
  if (isAsync) for (let i = 0; i < n; i++) await step(keyOf(i));
  else for (let i = 0; i < n; i++) step(keyOf(i));
  return [start, process.hrtime.bigint()];
}

// ---- child processes ----

function child() {
  let job = null;
  let holding = null; // the killed-holder case keeps its guard here until it is killed
  process.on('message', async (msg) => {
    if (msg.kind === 'setup') {
      const [isAsync, step] = contended[msg.name](msg.dir, PROC_KEYS, msg.ctx);
      job = { isAsync, step, n: msg.n, t: msg.t };
      process.send({ kind: 'ready' });
    } else if (msg.kind === 'go') {
      const { isAsync, step, n, t } = job;
      const [start, end] = await loop(isAsync, step, n, (i) => (i * 7 + t) & (PROC_KEYS - 1));
      job = null;
      process.send({ kind: 'done', start: start.toString(), end: end.toString() });
    } else if (msg.kind === 'hold') {
      // The killed-holder case: take the key, say so, and wait to be killed.
      if (msg.scope === 'keylock') holding = KeyPool.open(msg.region).lockSync(msg.key);
      else holding = await lockfile.lock(msg.file);
      process.send({ kind: 'held' });
    } else if (msg.kind === 'exit') {
      process.exit(0);
    }
  });
}

const once = (proc, kind) =>
  new Promise((resolve, reject) => {
    const onMessage = (msg) => {
      if (msg.kind === kind) {
        proc.off('message', onMessage);
        proc.off('exit', onExit);
        resolve(msg);
      }
    };
    const onExit = (code) => reject(new Error(`worker exited (${code}) while waiting for ${kind}`));
    proc.on('message', onMessage);
    proc.once('exit', onExit);
  });

async function runProcs(workers, name, dir, n) {
  const ctx = `${process.pid}-p`;
  await Promise.all(
    workers.map((w, t) => {
      const ready = once(w, 'ready');
      w.send({ kind: 'setup', name, dir, n, t, ctx });
      return ready;
    }),
  );
  const done = workers.map((w) => once(w, 'done'));
  for (const w of workers) w.send({ kind: 'go' });
  const spans = await Promise.all(done);
  const start = spans.map((s) => BigInt(s.start)).reduce((a, b) => (a < b ? a : b));
  const end = spans.map((s) => BigInt(s.end)).reduce((a, b) => (a > b ? a : b));
  return (PROCS * n * 1e9) / Number(end - start);
}

// One killed holder: a forked process takes the key and is killed with SIGKILL; returns the ms
// from the kill to this process holding the key, and whether the acquisition says the owner died.
async function killedHolder(scope, dir, ctx) {
  const region = `shm:${PREFIX}${ctx}-kill`;
  const key = 'killed';
  const file = lockPath(dir, `kill-${ctx}`, 0);
  fs.closeSync(fs.openSync(file, 'a'));
  const proc = fork(__filename, ['--child'], { stdio: 'inherit' });
  const held = once(proc, 'held');
  proc.send({ kind: 'hold', scope, region, key, file });
  await held;
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  const t0 = process.hrtime.bigint();
  proc.kill('SIGKILL');
  let ownerDied = null;
  if (scope === 'keylock') {
    const guard = await KeyPool.open(region).lock(key, { timeout: 60_000 });
    ownerDied = guard.ownerDied;
    guard.release();
  } else {
    const release = await lockfile.lock(file, {
      retries: { retries: 10_000, factor: 1, minTimeout: 10, maxTimeout: 10 },
    });
    await release();
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  await exited;
  return [ms, ownerDied];
}

// ---- harness ----

function summary(runs) {
  const s = [...runs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median = s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
  return { median, min: s[0], max: s[s.length - 1] };
}

const loadavg = () => os.loadavg().map((x) => Math.round(x * 100) / 100);

function removeRegions() {
  for (const f of fs.readdirSync('/dev/shm')) {
    if (f.startsWith(`keylock.${PREFIX}${process.pid}-`) || f.startsWith(`.keylock.${PREFIX}${process.pid}-`)) {
      fs.rmSync(path.join('/dev/shm', f), { force: true });
    }
  }
}

async function main() {
  const args = process.argv.slice(2);
  const quick = args.includes('--quick');
  const outIdx = args.indexOf('--out');
  const out = outIdx >= 0 ? args[outIdx + 1] : null;
  const ROUNDS = quick ? 3 : 9;
  const N_FAST = quick ? 200_000 : 1_000_000;
  const N_AWAIT = quick ? 50_000 : 200_000;
  const N_FILE = quick ? 500 : 2_000;
  const N_PROC = quick ? 10_000 : 40_000;
  const N_PROC_FILE = quick ? 250 : 1_000;
  const KILLS_KEYLOCK = quick ? 3 : 9;
  const KILLS_LOCKFILE = 1; // ~10 s each

  const loadAtStart = loadavg();
  const roundLoads = [];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), PREFIX));
  const workers = [];
  const benches = [];
  const kills = { keylock: [], 'proper-lockfile': [] };
  let ownerDiedAll = true;
  const cleanUp = () => {
    for (const w of workers) w.kill('SIGKILL');
    removeRegions();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.once(sig, () => {
      cleanUp();
      process.exit(1);
    });
  }
  try {
    const ctx = `${process.pid}-u`;
    for (const [name, make] of Object.entries(uncontended)) {
      const n = name.startsWith('proper-lockfile') ? N_FILE : name.includes('awaited') ? N_AWAIT : N_FAST;
      benches.push({
        group: `uncontended, ${KEYS} keys`,
        name,
        unit: 'ns/op',
        n,
        runs: [],
        fn: async (n) => {
          const [isAsync, step] = make(dir, KEYS, ctx);
          const [start, end] = await loop(isAsync, step, n, (i) => i & (KEYS - 1));
          return Number(end - start) / n;
        },
      });
    }
    for (let t = 0; t < PROCS; t++) workers.push(fork(__filename, ['--child'], { stdio: 'inherit' }));
    touchAll(dir, `plc-${process.pid}-p`, PROC_KEYS);
    for (const name of Object.keys(contended)) {
      benches.push({
        group: `${PROCS} processes, ${PROC_KEYS} keys`,
        name,
        unit: 'ops/s',
        n: name.startsWith('proper-lockfile') ? N_PROC_FILE : N_PROC,
        runs: [],
        fn: (n) => runProcs(workers, name, dir, n),
      });
    }

    for (const b of benches) await b.fn(Math.max(Math.floor(b.n / 20), 100)); // warm-up
    for (let r = 0; r < ROUNDS; r++) {
      for (let j = 0; j < benches.length; j++) {
        const b = benches[(j + r) % benches.length];
        b.runs.push(await b.fn(b.n));
      }
      roundLoads.push(loadavg());
      process.stderr.write(`round ${r + 1}/${ROUNDS}, load ${roundLoads.at(-1).join(' ')}\n`);
    }

    for (let k = 0; k < KILLS_KEYLOCK; k++) {
      const [ms, died] = await killedHolder('keylock', dir, `${process.pid}-${k}`);
      kills.keylock.push(ms);
      ownerDiedAll &&= died === true;
    }
    for (let k = 0; k < KILLS_LOCKFILE; k++) {
      const [ms] = await killedHolder('proper-lockfile', dir, `${process.pid}-${k}`);
      kills['proper-lockfile'].push(ms);
    }
  } finally {
    cleanUp();
  }

  const full = (b) => `${b.group}: ${b.name}`;
  const find = (group, prefix) => benches.find((b) => b.group === group && b.name.startsWith(prefix));
  const results = [];
  for (const b of benches) {
    const s = summary(b.runs);
    const row = {
      name: full(b),
      unit: b.unit,
      ...s,
      runs: b.runs,
      baseline: null,
      ratio: null,
      target: null,
      met: null,
    };
    let base = null;
    if (b.name.startsWith('keylock') && b.unit === 'ns/op') {
      base = find(b.group, b.name.includes('awaited') ? 'proper-lockfile lock+' : 'proper-lockfile lockSync');
    } else if (b.name.startsWith('keylock')) {
      base = find(b.group, 'proper-lockfile');
    }
    if (base) {
      const m = summary(base.runs).median;
      row.baseline = full(base);
      // How many times faster keylock is: the baseline's time over keylock's, or keylock's rate
      // over the baseline's.
      row.ratio = b.unit === 'ns/op' ? m / s.median : s.median / m;
    }
    results.push(row);
  }
  const lockfileKill = summary(kills['proper-lockfile']).median;
  results.push({
    name: 'killed holder (SIGKILL) to the next acquirer: keylock shm KeyPool',
    unit: 'ms',
    ...summary(kills.keylock),
    runs: kills.keylock,
    baseline: 'killed holder (SIGKILL) to the next acquirer: proper-lockfile (default stale 10 s)',
    ratio: lockfileKill / summary(kills.keylock).median,
    target: 'the next acquirer gets the key within 100 ms, marked ownerDied',
    met: summary(kills.keylock).max <= 100 && ownerDiedAll,
    owner_died_every_time: ownerDiedAll,
  });
  results.push({
    name: 'killed holder (SIGKILL) to the next acquirer: proper-lockfile (default stale 10 s)',
    unit: 'ms',
    ...summary(kills['proper-lockfile']),
    runs: kills['proper-lockfile'],
    baseline: null,
    ratio: null,
    target: null,
    met: null,
    retry_interval_ms: 10,
  });

  const pkg = (name) => require(path.join(__dirname, '..', 'node_modules', name, 'package.json')).version;
  const report = {
    suite: 'node-shm',
    description:
      "keylock's host scope (shm:NAME regions in /dev/shm) from Node.js against proper-lockfile (one " +
      `file per key): uncontended in one process on ${KEYS} keys, then ${PROCS} forked processes on ` +
      `${PROC_KEYS} keys (total ops/s), then a killed holder's recovery. ratio = how many times faster ` +
      `keylock is than the baseline (>1: keylock faster); medians of ${ROUNDS} interleaved rounds`,
    machine: {
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cores: os.cpus().length,
      memory_gib: Math.round(os.totalmem() / 2 ** 30),
      os: `${os.type()} ${os.release()} ${os.arch()}`,
      load_average_at_start: loadAtStart,
      load_average_after_each_round: roundLoads,
      load_average_at_end: loadavg(),
      node: process.version,
      napi: process.versions.napi,
      'proper-lockfile': pkg('proper-lockfile'),
      keylock: require('../package.json').version,
      lock_files_on: os.tmpdir(),
    },
    date: new Date().toISOString(),
    config: {
      rounds: ROUNDS,
      keys: KEYS,
      uncontended_ops_per_run: N_FAST,
      uncontended_awaited_ops_per_run: N_AWAIT,
      uncontended_proper_lockfile_ops_per_run: N_FILE,
      processes: PROCS,
      process_keys: PROC_KEYS,
      ops_per_process_per_run: N_PROC,
      ops_per_process_per_run_proper_lockfile: N_PROC_FILE,
      proper_lockfile_retries: RETRIES,
      shm_capacity: CAPACITY,
      quick,
    },
    results,
  };

  const fmt = (x) => (x >= 100 ? Math.round(x).toLocaleString('en-US') : x.toFixed(2));
  console.log(`keylock Node shm benchmark (${ROUNDS} rounds; median [min - max]; load ${loadAtStart.join(' ')})`);
  for (const r of results) {
    const ratio = r.ratio === null ? '' : `  ${r.ratio.toFixed(2)}x`;
    const met = r.met === null ? '' : r.met ? '  target met' : '  target MISSED';
    console.log(
      `  ${r.name.padEnd(80)} ${fmt(r.median).padStart(12)} ${r.unit}  [${fmt(r.min)} - ${fmt(r.max)}]${ratio}${met}`,
    );
  }
  if (out) {
    fs.mkdirSync(path.dirname(path.resolve(out)), { recursive: true });
    fs.writeFileSync(out, JSON.stringify(report, null, 2) + '\n');
    console.log(`wrote ${out}`);
  }
}

if (process.argv.includes('--child')) {
  child();
} else {
  main().catch((err) => {
    console.error(err);
    process.exitCode = 1;
  });
}

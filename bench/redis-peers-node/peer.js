// node-redlock (redlock 4.2.0, the last stable release) for keylock's Redis scope benchmark:
// the same two workloads as bench/redis_peers.py (core/benches/redis.rs starts both).
//
//   node peer.js PORT uncontended RUNS OPS
//   node peer.js PORT contend KEYS DURATION_MS GO OUT [HOLD_MS]  (GO, OUT.ready: as in redis_peers.py)
//
// One Redis, a 30 s lease, and redlock's documented retry (200 ms + up to 200 ms of jitter
// between attempts, i.e. polling), with unlimited retries so that every acquire succeeds as
// keylock's do.
//
// With `semaphore PERMITS` after PORT, the same workloads take one unit of a key from
// redis-semaphore's Semaphore (redis-semaphore 5.8.0; core/benches/redis_semaphore.rs starts it):
//
//   node peer.js PORT semaphore PERMITS uncontended RUNS OPS
//   node peer.js PORT semaphore PERMITS contend KEYS DURATION_MS GO OUT [HOLD_MS]
//
// One Semaphore(client, key, PERMITS) per acquisition, as its README does, with its default
// options: lockTimeout 10 s (refreshed every 8 s), acquireTimeout 10 s, and retryInterval 10 ms,
// i.e. an acquire that finds no unit free tries again every 10 ms (polling).
'use strict';

const fs = require('fs');
const Redis = require('ioredis');
const Redlock = require('redlock');
const { Semaphore } = require('redis-semaphore');

const { performance } = require('perf_hooks');

// Wall-clock ns (the clock the other workers log with), at sub-microsecond resolution.
const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));

async function main() {
  let args = process.argv.slice(2);
  const port = args.shift();
  const client = new Redis({ host: '127.0.0.1', port: Number(port), lazyConnect: false });
  await client.ping();
  // take(name): holds the key (one unit of it for a semaphore); resolves to its release.
  let take;
  let prefix = 'peer';
  if (args[0] === 'semaphore') {
    const permits = Number(args[1]);
    args = args.slice(2);
    prefix = 'peer-sem';
    take = async (name) => {
      const sem = new Semaphore(client, name, permits);
      await sem.acquire();
      return () => sem.release();
    };
  } else {
    const redlock = new Redlock([client], { retryCount: -1, retryDelay: 200, retryJitter: 200 });
    take = async (name) => {
      const lock = await redlock.lock(name, 30000);
      return () => lock.unlock();
    };
  }
  const [what, ...rest] = args;
  if (what === 'uncontended') {
    const [runs, ops] = rest.map(Number);
    const name = `${prefix}-uncontended`;
    for (let i = 0; i < 50; i++) await (await take(name))();
    for (let r = 0; r < runs; r++) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < ops; i++) await (await take(name))();
      console.log(Number(process.hrtime.bigint() - t0) / ops);
    }
  } else if (what === 'contend') {
    const [keys, durationMs, go, out] = [Number(rest[0]), Number(rest[1]), rest[2], rest[3]];
    const holdMs = Number(rest[4] || 0);
    fs.writeFileSync(`${out}.ready`, '');
    let start = null;
    while (start === null) {
      const text = fs.existsSync(go) ? fs.readFileSync(go, 'utf8').trim() : '';
      if (text) start = BigInt(text);
      else await new Promise((r) => setTimeout(r, 1));
    }
    const end = start + BigInt(durationMs) * 1000000n;
    while (nowNs() < start) await new Promise((r) => setTimeout(r, 1));
    const rows = [];
    for (;;) {
      const k = Math.floor(Math.random() * keys);
      const req = nowNs();
      if (req >= end) break;
      const release = await take(`${prefix}-key-${k}`);
      const inside = nowNs();
      if (holdMs > 0) await new Promise((r) => setTimeout(r, holdMs));
      const rel = nowNs();
      await release();
      rows.push(`${k} ${req} ${inside} ${rel}\n`);
    }
    fs.writeFileSync(out, rows.join(''));
  } else {
    throw new Error(
      'usage: peer.js PORT [semaphore PERMITS] uncontended RUNS OPS | contend KEYS DURATION_MS GO OUT [HOLD_MS]'
    );
  }
  client.disconnect();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

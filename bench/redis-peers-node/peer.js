// node-redlock (redlock 4.2.0, the last stable release) for keylock's Redis scope benchmark:
// the same two workloads as bench/redis_peers.py (core/benches/redis.rs starts both).
//
//   node peer.js PORT uncontended RUNS OPS
//   node peer.js PORT contend KEYS DURATION_MS GO OUT   (GO, OUT.ready: as in redis_peers.py)
//
// One Redis, a 30 s lease, and redlock's documented retry (200 ms + up to 200 ms of jitter
// between attempts, i.e. polling), with unlimited retries so that every acquire succeeds as
// keylock's do.
'use strict';

const fs = require('fs');
const Redis = require('ioredis');
const Redlock = require('redlock');

const { performance } = require('perf_hooks');

// Wall-clock ns (the clock the other workers log with), at sub-microsecond resolution.
const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));

async function main() {
  const [port, what, ...rest] = process.argv.slice(2);
  const client = new Redis({ host: '127.0.0.1', port: Number(port), lazyConnect: false });
  await client.ping();
  const redlock = new Redlock([client], { retryCount: -1, retryDelay: 200, retryJitter: 200 });
  if (what === 'uncontended') {
    const [runs, ops] = rest.map(Number);
    for (let i = 0; i < 50; i++) await (await redlock.lock('peer-uncontended', 30000)).unlock();
    for (let r = 0; r < runs; r++) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < ops; i++) await (await redlock.lock('peer-uncontended', 30000)).unlock();
      console.log(Number(process.hrtime.bigint() - t0) / ops);
    }
  } else if (what === 'contend') {
    const [keys, durationMs, go, out] = [Number(rest[0]), Number(rest[1]), rest[2], rest[3]];
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
      const lock = await redlock.lock(`peer-key-${k}`, 30000);
      const inside = nowNs();
      const rel = nowNs();
      await lock.unlock();
      rows.push(`${k} ${req} ${inside} ${rel}\n`);
    }
    fs.writeFileSync(out, rows.join(''));
  } else {
    throw new Error('usage: peer.js PORT uncontended RUNS OPS | contend KEYS DURATION_MS GO OUT');
  }
  client.disconnect();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

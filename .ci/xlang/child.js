'use strict';
// The Node child of the cross-language process tests (.ci/xlang/run.py drives it; child.c and
// child.py speak the same protocol, described in .ci/xlang/README.md). It opens the scope named
// by KEYLOCK_XLANG_SCOPE with KeyPool.open, prints "ready node PID", then runs one command per
// line of stdin, in order, and answers on stdout. Every acquire is the asynchronous one: the
// event loop keeps running while the key is awaited.

const fs = require('fs');
const net = require('net');
const readline = require('readline');
const { KeyPool, Semaphore } = require(process.env.KEYLOCK_XLANG_NODE_MODULE);

const SCOPE = process.env.KEYLOCK_XLANG_SCOPE;
const DIR = process.env.KEYLOCK_XLANG_DIR;
const STORE = process.env.KEYLOCK_XLANG_STORE;
const BROKEN = process.env.KEYLOCK_XLANG_BREAK === '1'; // skip the lock (self-check only)
const WAIT_MS = 30000;

function say(line) {
  fs.writeSync(1, line + '\n');
}

function fail(msg) {
  say(`fail node ${process.pid}: ${msg}`);
  process.exit(3);
}

const now = () => process.hrtime.bigint(); // CLOCK_MONOTONIC, as the C and Python children
const sleep = (us) => new Promise((r) => setTimeout(r, us / 1000));
const encode = (count, fence) => `${String(count).padStart(20, '0')} ${String(fence).padStart(20, '0')}\n`;

function parse(text) {
  if (!text) return [0n, 0n];
  const [count, fence] = text.trim().split(/\s+/);
  return [BigInt(count), BigInt(fence)];
}

/** A record "COUNT FENCE" per key in DIR/ctr.KEY, read and rewritten in place. */
class FileStore {
  constructor() {
    this.fds = new Map();
  }
  async read(key) {
    let fd = this.fds.get(key);
    if (fd === undefined) {
      fd = fs.openSync(`${DIR}/ctr.${key}`, fs.constants.O_RDWR | fs.constants.O_CREAT, 0o600);
      this.fds.set(key, fd);
    }
    const buf = Buffer.alloc(128);
    const n = fs.readSync(fd, buf, 0, buf.length, 0);
    return parse(buf.toString('latin1', 0, n));
  }
  async write(key, count, fence) {
    fs.writeSync(this.fds.get(key), encode(count, fence), 0);
  }
}

/** The same record in the Redis string xlang:ctr:KEY: GET, then SET, in plain RESP. */
class RedisStore {
  constructor(port) {
    this.sock = net.connect(port, '127.0.0.1');
    this.sock.on('error', (e) => fail(`redis: ${e.message}`));
    this.buf = Buffer.alloc(0);
    this.waiting = null;
    this.sock.on('data', (d) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.poll();
    });
  }
  // Resolves the pending call once its whole reply is in the buffer.
  poll() {
    if (!this.waiting) return;
    const eol = this.buf.indexOf('\r\n');
    if (eol < 0) return;
    const head = this.buf.toString('latin1', 0, eol);
    let value;
    let used = eol + 2;
    if (head[0] === '-') fail(`redis: ${head}`);
    if (head[0] === '$') {
      const n = Number(head.slice(1));
      if (n >= 0) {
        if (this.buf.length < used + n + 2) return;
        value = this.buf.toString('latin1', used, used + n);
        used += n + 2;
      } else value = null;
    } else value = head;
    this.buf = this.buf.subarray(used);
    const resolve = this.waiting;
    this.waiting = null;
    resolve(value);
  }
  call(...args) {
    const parts = [`*${args.length}\r\n`];
    for (const a of args) parts.push(`$${Buffer.byteLength(a)}\r\n${a}\r\n`);
    return new Promise((resolve) => {
      this.waiting = resolve;
      this.sock.write(parts.join(''));
      this.poll();
    });
  }
  async read(key) {
    return parse(await this.call('GET', `xlang:ctr:${key}`));
  }
  async write(key, count, fence) {
    if ((await this.call('SET', `xlang:ctr:${key}`, encode(count, fence))) !== '+OK') {
      fail('redis SET refused');
    }
  }
  close() {
    this.sock.destroy();
  }
}

const makeStore = () => (STORE.startsWith('redis:') ? new RedisStore(Number(STORE.slice(6))) : new FileStore());

/** child.c's count_run, the same rule. */
async function count(pool, mode, iters, keys, ident, holdUs) {
  const store = makeStore();
  const log = [];
  for (let i = 0; i < iters; i++) {
    const k = `k${(i + ident) % keys}`;
    const write = mode === 'exclusive' || Math.floor((i + ident) / keys) % 3 === 0;
    let guard = null;
    let fence = 0n;
    if (!BROKEN) {
      guard = await pool.lock(k, { mode: write ? 'exclusive' : 'shared', timeout: WAIT_MS });
      if (guard.ownerDied) fail(`owner_died without a death (${k})`);
      fence = guard.fence;
    }
    const t0 = now();
    const [n, last] = await store.read(k);
    if (BROKEN) fence = write ? last + 1n : last;
    if (write && fence <= last) fail(`fence of ${k} did not rise: ${fence} after ${last}`);
    if (!write && fence < last) fail(`shared fence of ${k} below the record: ${fence} < ${last}`);
    if (holdUs) await sleep(holdUs);
    if (write) await store.write(k, n + 1n, fence);
    const t1 = now();
    if (guard) guard.release();
    log.push(`${write ? 'x' : 's'} ${k} ${t0} ${t1} ${fence}\n`);
  }
  if (store.close) store.close();
  fs.writeFileSync(`${DIR}/log.${ident}`, log.join(''));
  say(`counted ${iters}`);
}

/** child.c's units_run, the same rule: key (i + ident) % keys, weight 1 + (i + ident) % 3. */
async function units(sem, iters, keys, ident, holdUs) {
  const log = [];
  const last = new Map(); // this child's fences per key must rise (granted one after the other)
  for (let i = 0; i < iters; i++) {
    const k = `k${(i + ident) % keys}`;
    const weight = 1 + ((i + ident) % 3);
    let permit = null;
    let fence;
    if (BROKEN) {
      fence = 10n ** 15n + BigInt(ident) * 10n ** 6n + BigInt(i); // distinct: only the units tell
    } else {
      permit = await sem.acquire(k, { weight, timeout: WAIT_MS });
      fence = permit.fence;
    }
    const t0 = now();
    if (fence <= (last.get(k) ?? 0n)) fail(`semaphore fence of ${k} did not rise: ${fence} after ${last.get(k)}`);
    last.set(k, fence);
    if (holdUs) await sleep(holdUs);
    const t1 = now();
    if (permit) permit.release();
    log.push(`u ${k} ${t0} ${t1} ${fence} ${weight}\n`);
  }
  fs.writeFileSync(`${DIR}/log.${ident}`, log.join(''));
  say(`counted ${iters}`);
}

async function main() {
  const capacity = process.env.KEYLOCK_XLANG_CAPACITY;
  // A semaphore scope (KEYLOCK_XLANG_SEMAPHORE=1) is not a pool's: only `units` opens it.
  const pool =
    process.env.KEYLOCK_XLANG_SEMAPHORE === '1'
      ? null
      : KeyPool.open(SCOPE, capacity && SCOPE.startsWith('shm:') ? { capacity: Number(capacity) } : {});
  const store = makeStore();
  const held = [];
  let sem = null; // opened by the first `units`
  say(`ready node ${process.pid}`);
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const [cmd, ...args] = line.trim().split(/\s+/);
    if (cmd === 'count') {
      const [mode, ...nums] = args;
      const [iters, keys, ident, holdUs] = nums.map(Number);
      await count(pool, mode, iters, keys, ident, holdUs);
    } else if (cmd === 'units') {
      const [iters, keys, ident, holdUs, permits] = args.map(Number);
      if (!sem) sem = Semaphore.open(SCOPE, { permits });
      await units(sem, iters, keys, ident, holdUs);
    } else if (cmd === 'hold') {
      const [key, leaseMs] = [args[0], Number(args[1])];
      const guard = await pool.lock(key, { timeout: WAIT_MS, lease: leaseMs || null });
      const [n, last] = await store.read(key);
      if (guard.fence <= last) fail(`fence of ${key} did not rise: ${guard.fence} after ${last}`);
      await store.write(key, n, guard.fence);
      held.push(guard);
      say(`held ${guard.fence} ${guard.ownerDied ? 1 : 0}`);
    } else if (cmd === 'acquire') {
      const [key, timeoutMs, leaseMs] = [args[0], Number(args[1]), Number(args[2])];
      let guard;
      try {
        guard = await pool.lock(key, { timeout: timeoutMs, lease: leaseMs || null });
      } catch (e) {
        say(`error ${e.code}`);
        continue;
      }
      const t = now();
      const [n, last] = await store.read(key);
      if (guard.fence <= last) fail(`fence of ${key} did not rise: ${guard.fence} after ${last}`);
      await store.write(key, n + 1n, guard.fence);
      guard.release();
      say(`got ${guard.fence} ${guard.ownerDied ? 1 : 0} ${t}`);
    } else if (cmd === 'holdmany') {
      const [prefix, n] = [args[0], Number(args[1])];
      let i = 0;
      try {
        for (; i < n; i++) {
          const guard = pool.tryLock(`${prefix}${i}`);
          if (!guard) break;
          held.push(guard);
        }
      } catch (e) {
        say(`error ${e.code} ${i}`);
        continue;
      }
      say(i === n ? `heldmany ${n}` : `error KEYLOCK_WOULD_BLOCK ${i}`);
    } else if (cmd === 'release') {
      let refused = '';
      while (held.length) {
        try {
          held.pop().release();
        } catch (e) {
          if (e.code !== 'KEYLOCK_NOT_OWNER' && e.code !== 'KEYLOCK_LEASE_EXPIRED') throw e;
          refused += ` ${e.code}`;
        }
      }
      say(`released${refused}`);
    } else if (cmd === 'quit') {
      break;
    } else {
      fail(`unknown command: ${line}`);
    }
  }
  if (store.close) store.close();
  process.exit(0);
}

main().catch((e) => fail(e.stack || String(e)));

'use strict';
// Synchronous API: tryLock, guards, forceUnlock, isLocked, info, size, stats, lockSync, keys.

const test = require('node:test');
const assert = require('node:assert/strict');
const { KeyPool, StripedLock, RwLock, KeylockError, Guard, keyBytes } = require('..');

const T = { timeout: 20_000 };

test('tryLock gives a guard, then null while held', T, () => {
  const pool = new KeyPool();
  const g = pool.tryLock('a');
  assert.ok(g instanceof Guard);
  assert.equal(pool.tryLock('a'), null);
  assert.equal(pool.isLocked('a'), true);
  assert.equal(pool.size, 1);
  g.release();
  assert.equal(pool.isLocked('a'), false);
  assert.equal(pool.size, 0);
});

test('releasing a guard twice is a no-op', T, () => {
  const pool = new KeyPool();
  const g = pool.tryLock('a');
  g.release();
  assert.equal(g.released, true);
  const h = pool.tryLock('a'); // someone else holds it now
  g.release(); // must not release h's lock
  assert.equal(pool.isLocked('a'), true);
  h.release();
});

test('Symbol.dispose releases (what `using` calls)', T, () => {
  for (const lock of [new KeyPool(), new StripedLock(16)]) {
    const g = lock.tryLock('k');
    g[Symbol.dispose]();
    assert.equal(lock.isLocked('k'), false);
    g[Symbol.dispose](); // twice: no-op
  }
  const rw = new RwLock();
  const w = rw.tryWrite();
  w[Symbol.dispose]();
  assert.equal(rw.isLocked(), false);
});

test('no by-key release is left: forceUnlock is the only way to free a key without its guard', T, () => {
  for (const lock of [new KeyPool(), new StripedLock(8), new RwLock()]) {
    for (const name of ['unlock', 'unlockMany', 'readUnlock', 'writeUnlock', 'leak']) {
      assert.equal(lock[name], undefined, name);
    }
  }
  const pool = new KeyPool();
  pool.tryLock('a');
  assert.equal(pool.forceUnlock('a'), true);
  assert.equal(pool.isLocked('a'), false);
  assert.equal(pool.forceUnlock('a'), false, 'a free key: nothing to free');
  const striped = new StripedLock(8);
  striped.tryLock('zz', { mode: 'shared' });
  assert.equal(striped.forceUnlock('zz'), true, 'shared holders are freed too');
  assert.equal(striped.isLocked('zz'), false);
});

test('a guard force-unlocked behind its back reports KEYLOCK_NOT_OWNER once', T, () => {
  const pool = new KeyPool();
  const g = pool.tryLock('a');
  pool.forceUnlock('a');
  assert.equal(g.isCurrent(), false);
  assert.throws(
    () => g.release(),
    (e) => e instanceof KeylockError && e.code === 'KEYLOCK_NOT_OWNER',
  );
  g.release(); // already counted as released
  assert.equal(g.released, true);
});

test('string keys lock their UTF-8 bytes: the same key as a Buffer', T, () => {
  const pool = new KeyPool();
  const g = pool.tryLock('clé-✓');
  assert.equal(pool.tryLock(Buffer.from('clé-✓', 'utf8')), null);
  assert.equal(pool.isLocked(new TextEncoder().encode('clé-✓')), true);
  assert.equal(pool.isLocked('cle-✓'), false);
  g.release();
  // A long key (past the addon's inline buffer) and an empty key work the same way.
  const long = 'x'.repeat(1000) + 'é'.repeat(300);
  const l = pool.tryLock(long);
  assert.equal(pool.isLocked(Buffer.from(long)), true);
  l.release();
  const e = pool.tryLock('');
  assert.equal(pool.isLocked(new Uint8Array(0)), true);
  e.release();
});

test('integer keys are 8 bytes big-endian: numbers and bigints alike', T, () => {
  const pool = new KeyPool();
  const g = pool.tryLock(1);
  assert.ok(g);
  assert.equal(pool.isLocked(1n), true, '1 and 1n are one key');
  assert.equal(pool.isLocked(Buffer.from([0, 0, 0, 0, 0, 0, 0, 1])), true);
  assert.equal(pool.isLocked('1'), false, 'the text "1" is another key');
  g.release();
  assert.deepEqual(keyBytes(-1), Buffer.alloc(8, 0xff));
  assert.deepEqual(keyBytes(-0), keyBytes(0));
  assert.deepEqual(keyBytes(Number.MAX_SAFE_INTEGER), keyBytes(2n ** 53n - 1n));
  assert.deepEqual(keyBytes(2n ** 63n - 1n), Buffer.from('7fffffffffffffff', 'hex'));
  assert.deepEqual(keyBytes(-(2n ** 63n)), Buffer.from('8000000000000000', 'hex'));
  assert.equal(pool.size, 0);
});

test('keyBytes gives the UTF-8 of a string, a copy of a byte key', T, () => {
  assert.deepEqual(keyBytes('é😀'), Buffer.from('é😀'));
  assert.deepEqual(keyBytes('\ufffd'), Buffer.from('efbfbd', 'hex'));
  const buf = Buffer.from('ab');
  const bytes = keyBytes(buf);
  buf[0] = 0x7a;
  assert.deepEqual(bytes, Buffer.from('ab'));
});

test('a guard keeps its own copy of a byte key', T, () => {
  const pool = new KeyPool();
  const key = Buffer.from('abc');
  const g = pool.tryLock(key);
  key[0] = 0x7a; // the caller reuses its buffer
  assert.equal(pool.isLocked('abc'), true);
  g.release();
  assert.equal(pool.isLocked('abc'), false);
  assert.equal(pool.size, 0);
});

test('a Uint8Array view locks only the bytes it views', T, () => {
  const pool = new KeyPool();
  const backing = Buffer.from('xxkeyxx');
  const g = pool.tryLock(backing.subarray(2, 5));
  assert.equal(pool.isLocked('key'), true);
  g.release();
});

test('tryLockMany takes all or none, each key in its own mode', T, () => {
  const pool = new KeyPool();
  const b = pool.tryLock('b');
  assert.equal(pool.tryLockMany(['a', 'b', 'c']), null);
  assert.equal(pool.size, 1, 'nothing of a failed tryLockMany stays held');
  b.release();
  const all = pool.tryLockMany(['a', 'b', 'c', 'a']);
  assert.equal(pool.size, 3, 'duplicates collapse');
  assert.equal(all.fences.length, 3);
  for (const f of all.fences) assert.equal(typeof f, 'bigint');
  all.release();
  assert.equal(pool.size, 0);
  const mixed = pool.tryLockMany(['r', 'w'], { mode: ['shared', 'exclusive'] });
  const reader = pool.tryLock('r', { mode: 'shared' });
  assert.ok(reader, 'r is held shared: another reader joins');
  reader.release();
  assert.equal(pool.tryLock('w', { mode: 'shared' }), null, 'w is held exclusively');
  mixed.release();
  assert.equal(pool.size, 0);
  assert.throws(() => pool.tryLockMany(['a'], { mode: ['shared', 'shared'] }), { code: 'KEYLOCK_INVALID_ARGUMENT' });
});

test('lockSync takes a free key and times out on a held one', T, () => {
  const pool = new KeyPool();
  const g = pool.lockSync('a');
  assert.equal(pool.isLocked('a'), true);
  assert.throws(() => pool.lockSync('a', { timeout: 20 }), { code: 'KEYLOCK_TIMEOUT' });
  assert.throws(() => pool.lockManySync(['b', 'a'], { timeout: 0 }), { code: 'KEYLOCK_TIMEOUT' });
  assert.equal(pool.isLocked('b'), false, 'a timed-out lockManySync holds nothing');
  g.release();
  const m = pool.lockManySync(['a', 'b'], { timeout: 1000 });
  assert.equal(pool.size, 2);
  m.release();
  const s = new StripedLock(4);
  const sg = s.lockSync('k');
  assert.throws(() => s.lockSync('k', { timeout: 10 }), { code: 'KEYLOCK_TIMEOUT' });
  sg.release();
});

test('stats count holders and entries', T, () => {
  const pool = new KeyPool();
  const g = pool.tryLock('a');
  let st = pool.stats();
  assert.equal(st.held, 1);
  assert.equal(st.entriesInUse, 1);
  g.release();
  st = pool.stats();
  assert.equal(st.held, 0);
  assert.equal(st.entriesInUse, 0);
  assert.equal(st.waiting, 0);
  assert.deepEqual(Object.keys(st).sort(), [
    'capacity',
    'contended',
    'entriesAllocated',
    'entriesInUse',
    'held',
    'heldHere',
    'peakInUse',
    'sharedHolds',
    'waiting',
    'waitingHere',
  ]);
  // An in-process pool knows every figure but a capacity (it grows as it needs).
  for (const k of Object.keys(st)) assert.equal(typeof st[k], k === 'capacity' ? 'object' : 'number', k);
  assert.equal(st.capacity, null);
});

test('info(key): null when free, else fence, mode, holders, holds, lease and waiters', T, async () => {
  const pool = new KeyPool();
  assert.equal(pool.info('k'), null);
  const g = pool.tryLock('k', { lease: 60_000 });
  const info = pool.info('k');
  assert.equal(info.fence, g.fence);
  assert.equal(info.mode, 'exclusive');
  assert.equal(info.holders, 1);
  assert.equal(info.holds, 1);
  assert.equal(info.owner, null);
  assert.ok(info.leaseRemaining > 0 && info.leaseRemaining <= 60_000);
  assert.equal(info.waiters, 0);
  const waiting = pool.lock('k');
  assert.equal(pool.info('k').waiters, 1);
  g.release();
  const h = await waiting;
  assert.equal(pool.info('k').leaseRemaining, null, 'the new holder has no lease');
  h.release();
  const r1 = pool.tryLock('s', { mode: 'shared' });
  const r2 = pool.tryLock('s', { mode: 'shared' });
  assert.deepEqual([pool.info('s').mode, pool.info('s').holders], ['shared', 2]);
  assert.equal(r1.fence, r2.fence, 'shared holders read the same fence');
  r1.release();
  r2.release();
  assert.equal(pool.info('s'), null);
});

test('StripedLock: stripes round up, stripeOf is stable and in range', T, () => {
  const s = new StripedLock(1000);
  assert.equal(s.stripes, 1024);
  assert.equal(new StripedLock().stripes, 1024);
  assert.equal(new StripedLock(1).stripes, 1);
  const i = s.stripeOf('user:42');
  assert.ok(Number.isInteger(i) && i >= 0 && i < 1024);
  assert.equal(s.stripeOf(Buffer.from('user:42')), i);
  // Two keys on one stripe exclude each other.
  const one = new StripedLock(1);
  const g = one.tryLock('a');
  assert.equal(one.tryLock('b'), null);
  assert.equal(one.isLocked('b'), true);
  g.release();
});

test('RwLock: readers share, a writer excludes', T, () => {
  const rw = new RwLock();
  const r1 = rw.tryRead();
  const r2 = rw.tryRead();
  assert.ok(r1 && r2);
  assert.equal(rw.tryWrite(), null);
  assert.equal(rw.isLocked(), true);
  assert.equal(rw.isWriteLocked(), false);
  r1.release();
  r2.release();
  const w = rw.tryWrite();
  assert.ok(w);
  assert.equal(rw.isWriteLocked(), true);
  assert.equal(rw.tryRead(), null);
  assert.throws(() => rw.readSync({ timeout: 10 }), { code: 'KEYLOCK_TIMEOUT' });
  w.release();
  const r = rw.readSync();
  assert.equal(r.mode, 'shared');
  assert.throws(() => rw.writeSync({ timeout: 0 }), { code: 'KEYLOCK_TIMEOUT' });
  r.release();
  const w2 = rw.writeSync({ timeout: 100 });
  assert.ok(w2.fence > w.fence, 'each writer has a higher fence');
  w2.release();
  assert.equal(rw.isLocked(), false);
});

test('ESM import gives the same classes', T, async () => {
  const esm = await import('../index.mjs');
  assert.equal(esm.KeyPool, KeyPool);
  assert.equal(esm.default.RwLock, RwLock);
  const byName = await import('keylock');
  assert.equal(byName.StripedLock, StripedLock);
});

test('StripedLock: size and stats count held stripes', T, () => {
  const s = new StripedLock(8);
  assert.equal(s.size, 0);
  const g = s.tryLock('a');
  assert.equal(s.size, 1);
  const st = s.stats();
  assert.deepEqual([st.stripes, st.held, st.waiting, st.heldHere, st.capacity], [8, 1, 0, 1, 8]);
  g.release();
  assert.equal(s.size, 0);
  assert.equal(s.stats().held, 0);
});

test('name: what a lock was opened with, shown by util.inspect, a password never', T, () => {
  const { inspect } = require('node:util');
  assert.equal(new KeyPool().name, 'local:');
  assert.equal(new StripedLock(8).name, 'local:');
  assert.equal(KeyPool.open('').name, '');
  const shared = StripedLock.shared(`basic-name-${process.pid}`, 8);
  assert.equal(shared.name, `basic-name-${process.pid}`);
  assert.equal(inspect(new KeyPool()), "KeyPool { name: 'local:' }");
  assert.equal(inspect(shared), `StripedLock { name: 'basic-name-${process.pid}' }`);
  // A shared lock's name is any string; one shaped like a URL is printed as every name is.
  const url = KeyPool.shared('redis://u:hunter2@h/0');
  assert.equal(url.name, 'redis://u:***@h/0');
  assert.ok(!inspect(url).includes('hunter2'));
});

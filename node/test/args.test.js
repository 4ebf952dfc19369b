'use strict';
// Bad keys and bad options: TypeError / RangeError with code KEYLOCK_INVALID_ARGUMENT.

const test = require('node:test');
const assert = require('node:assert/strict');
const { KeyPool, StripedLock, RwLock, keyBytes } = require('..');

const T = { timeout: 20_000 };
const badKeys = [
  null,
  undefined,
  {},
  ['a'],
  Symbol('k'),
  () => 'k',
  new Uint16Array(2),
  new ArrayBuffer(4),
  new DataView(new ArrayBuffer(2)),
  true,
];
// Numbers that are not safe integers, bigints outside i64: RangeError.
const outOfRange = [1.5, -0.5, NaN, Infinity, -Infinity, 2 ** 53, -(2 ** 53), 1e300, 2n ** 63n, -(2n ** 63n) - 1n];
// Strings with a lone surrogate: TypeError (never replaced with U+FFFD).
const loneSurrogates = ['\ud800', 'a\udc00', '\ude00\ud83d', 'x'.repeat(100) + '\ud83d'];
const isTypeError = (e) => e instanceof TypeError && e.code === 'KEYLOCK_INVALID_ARGUMENT';
const isRangeError = (e) => e instanceof RangeError && e.code === 'KEYLOCK_INVALID_ARGUMENT';

test('bad keys throw TypeError from every keyed method', T, async () => {
  for (const lock of [new KeyPool(), new StripedLock(8)]) {
    for (const key of badKeys) {
      assert.throws(() => lock.tryLock(key), isTypeError, String(typeof key));
      assert.throws(() => lock.lockSync(key), isTypeError);
      assert.throws(() => lock.forceUnlock(key), isTypeError);
      assert.throws(() => lock.isLocked(key), isTypeError);
      assert.throws(() => lock.info(key), isTypeError);
      await assert.rejects(lock.lock(key), isTypeError);
      await assert.rejects(
        lock.withLock(key, () => 1),
        isTypeError,
      );
      assert.throws(() => lock.tryLockMany(['ok', key]), isTypeError);
      await assert.rejects(lock.lockMany(['ok', key]), isTypeError);
      await assert.rejects(
        lock.withLockMany([key], () => 1),
        isTypeError,
      );
    }
    assert.throws(() => lock.tryLockMany('ab'), isTypeError, 'keys must be an array');
    await assert.rejects(lock.lockMany(new Set(['a'])), isTypeError);
    assert.equal(lock.isLocked('ok'), false, 'a rejected call holds nothing');
  }
  assert.throws(() => new StripedLock(8).stripeOf(true), isTypeError);
});

// Every keyed method, with `key` in the key's place: each must throw (or reject) with `check`.
async function everyMethodRejects(key, check) {
  for (const lock of [new KeyPool(), new StripedLock(8)]) {
    assert.throws(() => lock.tryLock(key), check, String(key));
    assert.throws(() => lock.lockSync(key), check);
    assert.throws(() => lock.forceUnlock(key), check);
    assert.throws(() => lock.isLocked(key), check);
    assert.throws(() => lock.info(key), check);
    await assert.rejects(lock.lock(key), check);
    await assert.rejects(lock.lock(key, { timeout: 5 }), check);
    await assert.rejects(
      lock.withLock(key, () => 1),
      check,
    );
    assert.throws(() => lock.tryLockMany(['ok', key]), check);
    await assert.rejects(lock.lockMany(['ok', key]), check);
    await assert.rejects(
      lock.withLockMany([key], () => 1),
      check,
    );
    assert.equal(lock.isLocked('ok'), false, 'a rejected call holds nothing');
  }
  assert.throws(() => new StripedLock(8).stripeOf(key), check);
  assert.throws(() => keyBytes(key), check);
}

test('integer keys that are not safe integers or do not fit in 64 bits throw RangeError', T, async () => {
  for (const key of outOfRange) await everyMethodRejects(key, isRangeError);
});

test('a string with a lone surrogate throws TypeError naming it', T, async () => {
  const named = (e) => isTypeError(e) && /lone surrogate/.test(e.message);
  for (const key of loneSurrogates) await everyMethodRejects(key, named);
});

test('bad options throw or reject with TypeError / RangeError', T, async () => {
  const pool = new KeyPool();
  await assert.rejects(pool.lock('a', 5), isTypeError);
  await assert.rejects(pool.lock('a', { timeout: '10' }), isTypeError);
  await assert.rejects(pool.lock('a', { timeout: -1 }), isRangeError);
  await assert.rejects(pool.lock('a', { timeout: NaN }), isRangeError);
  await assert.rejects(pool.lock('a', { signal: {} }), isTypeError);
  await assert.rejects(pool.lock('a', { signal: 'abort' }), isTypeError);
  assert.throws(() => pool.lockSync('a', { timeout: -5 }), isRangeError);
  assert.throws(() => pool.lockSync('a', { signal: new AbortController().signal }), isTypeError);
  await assert.rejects(pool.lock('a', { mode: 'read' }), isTypeError);
  await assert.rejects(pool.lock('a', { mode: ['shared'] }), isTypeError, 'an array of modes is for lockMany');
  await assert.rejects(pool.lock('a', { lease: -1 }), isRangeError);
  await assert.rejects(pool.lock('a', { lease: '5' }), isTypeError);
  assert.throws(() => pool.tryLock('a', { lease: NaN }), isRangeError);
  assert.throws(() => pool.tryLock('a', 'shared'), isTypeError);
  await assert.rejects(pool.lockMany(['a', 'b'], { mode: ['shared'] }), isTypeError);
  await assert.rejects(pool.withLock('a', 'not a function'), isTypeError);
  await assert.rejects(pool.withLockMany(['a'], null), isTypeError);
  const rw = new RwLock();
  await assert.rejects(rw.read({ timeout: -1 }), isRangeError);
  await assert.rejects(rw.withWrite(42), isTypeError);
  assert.throws(() => rw.writeSync({ timeout: 'x' }), isTypeError);
  assert.equal(pool.size, 0);
  assert.equal(rw.isLocked(), false);
  // Accepted: no options, null, empty object, Infinity and null timeouts, null owner and lease.
  for (const opts of [
    undefined,
    null,
    {},
    { timeout: Infinity },
    { timeout: null, signal: null },
    { owner: null, lease: null },
  ]) {
    (await pool.lock('a', opts)).release();
    pool.lockSync('a', opts).release();
  }
  const g = pool.tryLock('a');
  assert.throws(() => g.extend(-1), isRangeError);
  assert.throws(() => g.extend(Infinity), isTypeError);
  g.release();
});

test('bad constructor options throw TypeError', T, () => {
  for (const opts of [5, 'fifo', { reentrant: 1 }, { fifo: 'yes' }]) {
    assert.throws(() => new KeyPool(opts), isTypeError);
    assert.throws(() => new StripedLock(8, opts), isTypeError);
    assert.throws(() => KeyPool.open('local:', opts), isTypeError);
  }
  for (const name of [5, null, undefined, {}]) assert.throws(() => KeyPool.open(name), isTypeError);
  // A lock name the core does not know: the core's own message, as a TypeError.
  assert.throws(
    () => KeyPool.open('nowhere:x'),
    (e) => isTypeError(e) && /scheme/.test(e.message),
  );
  assert.throws(() => KeyPool.open('local:named'), isTypeError);
});

test('bad stripe counts throw RangeError or TypeError', T, () => {
  for (const n of [0, -1, 1.5, NaN, StripedLock.MAX_STRIPES + 1]) {
    assert.throws(() => new StripedLock(n), isRangeError, String(n));
  }
  assert.throws(() => new StripedLock('8'), isTypeError);
  assert.equal(new StripedLock(StripedLock.MAX_STRIPES).stripes, StripedLock.MAX_STRIPES);
});

test('shared(): bad names, mismatched stripes', T, () => {
  for (const name of ['', 5, null, undefined, {}]) {
    assert.throws(() => KeyPool.shared(name), isTypeError);
    assert.throws(() => RwLock.shared(name), isTypeError);
    assert.throws(() => StripedLock.shared(name, 8), isTypeError);
  }
  const a = StripedLock.shared('args-test', 100);
  assert.equal(a.stripes, 128);
  assert.equal(StripedLock.shared('args-test', 128).stripes, 128, 'the same count after rounding');
  assert.equal(StripedLock.shared('args-test').stripes, 128, 'omitted: the existing count');
  assert.throws(
    () => StripedLock.shared('args-test', 256),
    (e) => e.code === 'KEYLOCK_SHARED_MISMATCH',
  );
  assert.throws(() => StripedLock.shared('args-test', 128, { fifo: true }), { code: 'KEYLOCK_SHARED_MISMATCH' });
  assert.throws(
    () =>
      KeyPool.shared('args-test-pool', { reentrant: true }) && KeyPool.shared('args-test-pool', { reentrant: false }),
    {
      code: 'KEYLOCK_SHARED_MISMATCH',
    },
  );
  assert.equal(KeyPool.shared('args-test-pool').reentrant, true, 'omitted: the existing pool');
  assert.throws(() => StripedLock.shared('args-test', 0), isRangeError);
  assert.equal(StripedLock.shared('args-test-default').stripes, 1024);
});

test('bad capacities throw TypeError or RangeError', () => {
  for (const bad of ['64', 1.5, null, 64n]) {
    assert.throws(() => KeyPool.open('local:', { capacity: bad }), TypeError, String(bad));
  }
  for (const bad of [0, -1, 2 ** 32]) {
    assert.throws(() => KeyPool.open('local:', { capacity: bad }), RangeError, String(bad));
  }
  // The core refuses a capacity where it means nothing.
  assert.throws(
    () => KeyPool.open('local:', { capacity: 64 }),
    (e) => e instanceof TypeError && e.code === 'KEYLOCK_INVALID_ARGUMENT' && /shared-memory/.test(e.message),
  );
});

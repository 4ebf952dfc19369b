'use strict';
// The key fixture every front end checks (core/tests/keys.json): Node gives every entry the
// bytes the fixture lists, or the same rejection as C and Python.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { KeyPool, keyBytes } = require('..');

const FIXTURE = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'core', 'tests', 'keys.json'), 'utf8'));
// What each rejection throws in Node, always with code KEYLOCK_INVALID_ARGUMENT.
const THROWS = { lone_surrogate: TypeError, integer_out_of_range: RangeError };

// A string of UTF-16 code units (in chunks: apply() takes a limited number of arguments).
function fromUnits(units) {
  let s = '';
  for (let i = 0; i < units.length; i += 8192) s += String.fromCharCode(...units.slice(i, i + 8192));
  return s;
}

function keyOf(entry) {
  const repeat = entry.repeat ?? 1;
  if (entry.text !== undefined) {
    const units = [];
    for (let i = 0; i < repeat; i++) units.push(...entry.text);
    return fromUnits(units.concat(entry.tail ?? []));
  }
  if (entry.int !== undefined) return BigInt(entry.int);
  return Buffer.from(entry.bytes.repeat(repeat), 'hex');
}

function rejects(entry) {
  const phrase = FIXTURE.errors[entry.error];
  return (e) => e instanceof THROWS[entry.error] && e.code === 'KEYLOCK_INVALID_ARGUMENT' && e.message.includes(phrase);
}

for (const entry of FIXTURE.keys) {
  test(`key fixture: ${entry.name}`, () => {
    const key = keyOf(entry);
    const pool = new KeyPool();
    if (entry.error !== undefined) {
      assert.throws(() => keyBytes(key), rejects(entry));
      assert.throws(() => pool.tryLock(key), rejects(entry));
      return;
    }
    const expected = Buffer.from(entry.hex.repeat(entry.repeat ?? 1), 'hex');
    assert.ok(keyBytes(key).equals(expected), `${keyBytes(key).length} bytes, expected ${expected.length}`);
    const g = pool.tryLock(key);
    assert.equal(pool.isLocked(expected), true, 'the lock takes it as those bytes');
    g.release();
    if (typeof key === 'bigint') {
      // The same integer as a number: the same key while it is a safe integer, else RangeError.
      const n = Number(key);
      if (Number.isSafeInteger(n)) assert.ok(keyBytes(n).equals(expected));
      else
        assert.throws(
          () => keyBytes(n),
          (e) => e instanceof RangeError && e.code === 'KEYLOCK_INVALID_ARGUMENT',
        );
    }
  });
}

test('the fixture has every kind of key, and Node every rejection', () => {
  const kinds = new Set(FIXTURE.keys.flatMap((e) => ['text', 'int', 'bytes'].filter((k) => k in e)));
  assert.deepEqual([...kinds].sort(), ['bytes', 'int', 'text']);
  assert.deepEqual(Object.keys(THROWS).sort(), Object.keys(FIXTURE.errors).sort());
});

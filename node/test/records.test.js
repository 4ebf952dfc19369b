'use strict';
// The records that cross between the addon and JavaScript: one schema (the addon's
// recordSchema(), from src/records.rs), every record the addon makes laid out as it says, and
// every JavaScript reader (lib/records.js) reading only declared fields, at their positions.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
require('..');
const native = require('../binding.js').load();
const { schemaAndReaders } = require('../lib/records.js');

const T = { timeout: 60_000 };
const TYPES = new Set(['u32', 'number', 'bigint', 'boolean', 'string']);
const thread = globalThis[Symbol.for('keylock.thread.v2')];

const SCHEMA = new Map(native.recordSchema().map((r) => [r.name, r]));

// `{ field: position }` of a record, from the schema alone.
function positions(record) {
  const r = SCHEMA.get(record);
  assert.ok(r, `the schema declares ${record}`);
  return Object.fromEntries(r.fields.map((f) => [f.name, f.position]));
}

// Checks a record's values against its declared fields: their number and each one's type.
function checkRecord(record, values) {
  const { fields } = SCHEMA.get(record);
  assert.equal(values.length, fields.length, `${record} has ${fields.length} fields`);
  for (const f of fields) {
    const v = values[f.position];
    if (f.type === 'u32') {
      assert.ok(Number.isInteger(v) && v >= 0 && v < 2 ** 32, `${record}.${f.name} is a u32: ${v}`);
    } else {
      assert.equal(typeof v, f.type, `${record}.${f.name} is a ${f.type}: ${String(v)}`);
    }
  }
}

test('the schema declares each record once, its fields at positions 0..n-1 with known types', T, () => {
  const names = native.recordSchema().map((r) => r.name);
  assert.deepEqual(names.slice().sort(), ['completion', 'info', 'output', 'webRequest']);
  for (const r of native.recordSchema()) {
    assert.deepEqual(
      r.fields.map((f) => f.position),
      r.fields.map((_, i) => i),
      `${r.name}'s positions`,
    );
    assert.equal(new Set(r.fields.map((f) => f.name)).size, r.fields.length, `${r.name}'s names are distinct`);
    for (const f of r.fields) assert.ok(TYPES.has(f.type), `${r.name}.${f.name} has a known type: ${f.type}`);
  }
  assert.equal(native.RECORD_WORDS, SCHEMA.get('completion').fields.length);
});

test("the JavaScript readers read every declared field, and only those, at the schema's positions", T, () => {
  const { read } = schemaAndReaders();
  assert.deepEqual([...read.keys()].sort(), [...SCHEMA.keys()].sort(), 'a reader for every record');
  for (const [record, names] of read) {
    assert.deepEqual(
      names.slice().sort(),
      SCHEMA.get(record)
        .fields.map((f) => f.name)
        .sort(),
      `${record}: the fields read are the fields declared`,
    );
  }
  const layouts = require('../lib/records.js');
  for (const [record, layout] of [
    ['output', layouts.OUTPUT],
    ['completion', layouts.COMPLETION],
    ['info', layouts.INFO],
    ['webRequest', layouts.WEB_REQUEST],
  ]) {
    assert.deepEqual({ ...layout }, positions(record), `${record}'s layout`);
  }
});

test('no module indexes a record with a position of its own', T, () => {
  const root = path.join(__dirname, '..');
  const files = ['index.js', ...fs.readdirSync(path.join(root, 'lib')).map((f) => path.join('lib', f))];
  // A literal index into the output or records buffer, an info() array or a query() entry.
  const literal = /\b(?:OUT|RECORDS|records|out|r|entry)\[(?:[^\]\n]*\+\s*)?\d+\s*\]/;
  for (const file of files) {
    const lines = fs.readFileSync(path.join(root, file), 'utf8').split('\n');
    lines.forEach((line, i) => assert.doesNotMatch(line, literal, `${file}:${i + 1}`));
  }
});

test('every record the addon makes is laid out as the schema says', T, () => {
  const OUT = positions('output');
  const DONE = positions('completion');
  const INFO = positions('info');
  const WEB = positions('webRequest');
  // Reentrant, so that info() reports the holder's owner.
  const h = native.keyedOpen('local:', { reentrant: true });
  const out = thread.out;
  assert.equal(out.length, SCHEMA.get('output').fields.length, 'the output buffer holds one output record');
  assert.equal(thread.records.length % SCHEMA.get('completion').fields.length, 0, 'whole completions');

  // Two shared holders, one with an owner and a lease, and an exclusive waiter: the output
  // record and info().
  const owner = native.nextOwnerId();
  // An acquire that takes its key returns undefined: its slot is in the output record.
  assert.equal(h.tryLockWith('k', 1, 60_000, owner), undefined, 'taken');
  const first = out[OUT.slot];
  assert.ok(first > 0, 'a slot');
  checkRecord('output', [...out]);
  assert.ok(out[OUT.flags] & native.FLAG_SHARED, 'the output flags say shared');
  const fence = (BigInt(out[OUT.fenceHigh]) << 32n) | BigInt(out[OUT.fenceLow]);
  assert.equal(h.tryLockWith('k', 1, undefined, 0), undefined, 'taken');
  const second = out[OUT.slot];
  assert.ok(second > 0 && second !== first, 'a second shared slot');
  const writer = native.nextOwnerId();
  assert.equal(h.lockAsync('k', 0, undefined, writer), 0, 'an exclusive waiter');
  const waiter = out[OUT.waiter];
  assert.ok(waiter > 0, 'the waiter id is in the output record');
  checkRecord('output', [...out]);

  const info = h.info('k');
  checkRecord('info', info);
  assert.equal(info[INFO.fence], fence, "info's fence is the output record's");
  assert.equal(info[INFO.shared], true);
  assert.equal(info[INFO.holders], 2);
  assert.ok(info[INFO.leaseRemaining] <= 60_000);
  assert.equal(info[INFO.waiters], 1);
  assert.equal(info[INFO.units], 2, "a lock's units are its holders");

  // The last shared release hands the key to the waiter: its completion.
  assert.equal(h.release(first) & 0xff, 0);
  const status = h.release(second);
  assert.equal(status & 0xff, 0);
  assert.ok(status & native.LOCAL_WAKE, 'the release woke a waiter of this thread');
  const n = native.runReadyFunction()();
  assert.equal(n, 1, 'one completion');
  const words = SCHEMA.get('completion').fields.length;
  const done = [...thread.records.subarray(0, words)];
  checkRecord('completion', done);
  assert.equal(done[DONE.id], waiter, "the completion is the waiter's");
  const slot = done[DONE.slot];
  assert.ok(slot > 0, 'granted a slot');
  assert.equal(done[DONE.flags] & native.FLAG_SHARED, 0, 'exclusive');
  const now = h.info('k');
  checkRecord('info', now);
  assert.equal((BigInt(done[DONE.fenceHigh]) << 32n) | BigInt(done[DONE.fenceLow]), now[INFO.fence]);
  assert.ok(now[INFO.fence] > fence, 'an exclusive acquisition advances the fence');
  assert.equal(now[INFO.shared], false);
  assert.equal(now[INFO.holders], 1);
  assert.equal(now[INFO.holds], 1);
  assert.equal(now[INFO.units], 1);
  assert.equal(now[INFO.owner], writer, "the waiter's owner holds it");
  assert.equal(now[INFO.waiters], 0);
  assert.equal(now[INFO.leaseRemaining], -1, 'no lease');
  assert.equal(h.release(slot) & 0xff, 0);
  assert.equal(h.info('k'), null);

  // A Web Locks request and query()'s entry for it.
  assert.equal(h.webRequest('name', 1, 0, 77), undefined, 'granted');
  const web = out[OUT.slot];
  assert.ok(web > 0, 'a slot');
  const entries = h.webQuery();
  assert.equal(entries.length, 1);
  checkRecord('webRequest', entries[0]);
  assert.equal(entries[0][WEB.name], 'name');
  assert.equal(entries[0][WEB.shared], true);
  assert.equal(entries[0][WEB.clientId], thread.clientId);
  assert.equal(entries[0][WEB.held], true);
  assert.equal(h.release(web) & 0xff, 0);
  assert.deepEqual(h.webQuery(), []);
  assert.equal(native.heldCount(h.handle), 0);
  assert.deepEqual(native.waiterCounts(), [0, 0]);
});

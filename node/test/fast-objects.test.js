'use strict';
// Every lock object the addon hands JavaScript (its entry points and `.handle`, see src/raw.rs
// `bind`) has fast properties, so that the JIT inlines `h.lock` and `h.release` instead of
// calling a generic lookup per operation. V8 reports that only with --allow-natives-syntax, so
// the check runs in a child process.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const path = require('node:path');

const ROOT = path.join(__dirname, '..');
const T = { timeout: 60_000 };

const CHILD = `
const native = require('./lib/native.js');
const { makeOptions } = require('./lib/options.js');
const name = 'fast-objects-' + process.pid;
const made = {
  keyedOpen: native.keyedOpen('local:', makeOptions()),
  keyedOpenStriped: native.keyedOpen('local:', makeOptions({}, 64)),
  keyedShared: native.keyedShared(name, false, makeOptions()),
  webLocksPool: native.webLocksPool(),
  rwNew: native.rwNew(),
  rwShared: native.rwShared(name),
};
const out = {};
for (const [k, h] of Object.entries(made)) {
  out[k] = { fast: %HasFastProperties(h), functions: Object.values(h).filter((v) => typeof v === 'function').length };
}
process.stdout.write(JSON.stringify(out));
`;

test('every lock object from the addon has fast properties', T, () => {
  const out = JSON.parse(
    execFileSync(process.execPath, ['--allow-natives-syntax', '-e', CHILD], { cwd: ROOT, encoding: 'utf8' }),
  );
  assert.deepEqual(Object.keys(out).sort(), [
    'keyedOpen',
    'keyedOpenStriped',
    'keyedShared',
    'rwNew',
    'rwShared',
    'webLocksPool',
  ]);
  for (const [maker, { fast, functions }] of Object.entries(out)) {
    assert.ok(functions >= 9, `${maker}'s object carries its entry points (${functions})`);
    assert.equal(fast, true, `${maker}'s object has fast properties`);
  }
});

'use strict';
// The README's API examples run: every ```js block of its "## API" section, with
// require('keylock') meaning this package. Each `console.log(...); // EXPECTED` names what it
// prints (the comment up to its first ':'); the lines printed must be those, in that order.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { format } = require('node:util');

const README = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
const api = README.slice(README.indexOf('\n## API\n'), README.indexOf('\n## How waiting works\n'));
const blocks = [...api.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
const AsyncFunction = (async () => {}).constructor;

test('the README has API examples', () => {
  assert.equal(blocks.length, 7);
});

blocks.forEach((code, i) => {
  test(`README API example ${i + 1} prints what its comments say`, { timeout: 30_000 }, async () => {
    const expected = [...code.matchAll(/console\.log\(.*\);\s*\/\/ ([^:\n]*)/g)].map((m) => m[1].trim());
    assert.ok(expected.length > 0, 'an example with nothing to check');
    const printed = [];
    const fakeConsole = { log: (...args) => printed.push(format(...args)) };
    const fakeRequire = (name) => require(name === 'keylock' ? '..' : name);
    await new AsyncFunction('require', 'console', code)(fakeRequire, fakeConsole);
    assert.deepEqual(printed, expected);
  });
});

'use strict';
// The package's modules: index.js gathers the public API from lib/, whose modules require one
// another without a cycle, and each uses only what the modules it requires export.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const ROOT = path.join(__dirname, '..');
const LIB = path.join(ROOT, 'lib');
const T = { timeout: 60_000 };

// The lib/ modules each lib/ module requires: `{ name: [required...] }`.
function requires() {
  const graph = new Map();
  for (const file of fs.readdirSync(LIB).filter((f) => f.endsWith('.js'))) {
    const src = fs.readFileSync(path.join(LIB, file), 'utf8');
    graph.set(
      file,
      [...src.matchAll(/require\('\.\/([\w-]+\.js)'\)/g)].map((m) => m[1]),
    );
  }
  return graph;
}

test('the lib/ modules require one another without a cycle', T, () => {
  const graph = requires();
  assert.ok(graph.size > 5, 'lib/ holds the modules');
  const done = new Set();
  const visit = (file, trail) => {
    assert.ok(!trail.includes(file), `a require cycle: ${[...trail, file].join(' -> ')}`);
    if (done.has(file)) return;
    assert.ok(graph.has(file), `${trail.at(-1)} requires a missing ./${file}`);
    for (const next of graph.get(file)) visit(next, [...trail, file]);
    done.add(file);
  };
  for (const file of graph.keys()) visit(file, []);
});

test('every name a lib/ module takes from another is one that module exports', T, () => {
  for (const [file, required] of requires()) {
    const src = fs.readFileSync(path.join(LIB, file), 'utf8');
    for (const dep of required) {
      const exported = require(path.join(LIB, dep));
      const pattern = new RegExp(`const \\{([^}]*)\\} = require\\('\\./${dep.replace('.', '\\.')}'\\)`, 'g');
      for (const m of src.matchAll(pattern)) {
        for (const name of m[1]
          .split(',')
          .map((s) => s.trim().split(':')[0].trim())
          .filter(Boolean)) {
          assert.ok(Object.hasOwn(exported, name), `${file} takes ${name}, which ${dep} does not export`);
        }
      }
    }
  }
});

test('index.js only gathers the public API from lib/', T, () => {
  const src = fs.readFileSync(path.join(ROOT, 'index.js'), 'utf8');
  const required = [...src.matchAll(/require\('([^']+)'\)/g)].map((m) => m[1]);
  assert.ok(required.length > 0);
  for (const r of required) assert.match(r, /^\.\/lib\/[\w-]+\.js$/, `index.js requires ${r}`);
  const keylock = require('..');
  assert.deepEqual(Object.keys(keylock).sort(), [
    'Guard',
    'KeyPool',
    'KeylockError',
    'Lock',
    'LockManager',
    'Permit',
    'RwLock',
    'Semaphore',
    'StripedLock',
    'keyBytes',
    'locks',
    'unlink',
  ]);
});

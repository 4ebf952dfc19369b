'use strict';
// The Redis scope's failures as Node sees them, on a redis-server of this file's own (a free
// loopback port, a password, a temporary directory; stopped by its PID): every error keeps the
// core's message, cause and all, with its `code`, and the password appears in nothing this
// front end prints (a lock's name, util.inspect, info, error messages). Skipped when
// redis-server is not installed, unless KEYLOCK_REQUIRE_REDIS is set (`make test-node` sets it).

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const { inspect } = require('node:util');
const { setTimeout: sleep } = require('node:timers/promises');
const { KeyPool, LockManager } = require('..');

const HAVE_REDIS = spawnSync('redis-server', ['--version']).status === 0;
const T = {
  timeout: 60_000,
  skip: HAVE_REDIS || process.env.KEYLOCK_REQUIRE_REDIS ? false : 'redis-server is not installed',
};
const PASSWORD = `pw-${process.pid}-secret`;

// A loopback port nothing listens on: bound, then closed.
async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

// Starts a redis-server that requires PASSWORD; resolves once it answers.
async function startRedis(port) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keylock-node-redis-'));
  const args = ['--port', `${port}`, '--bind', '127.0.0.1', '--requirepass', PASSWORD];
  const child = spawn('redis-server', [...args, '--save', '', '--appendonly', 'no', '--dir', dir], {
    stdio: 'ignore',
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  for (let i = 0; i < 200; i++) {
    const up = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (up) break;
    await sleep(25);
  }
  return {
    async stop() {
      child.kill('SIGKILL');
      await exited;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

// Everything a user could print about `value`.
function printed(value) {
  const json = JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? `${v}` : v)) ?? '';
  return [String(value), inspect(value, { depth: 8, showHidden: true }), json].join('\n');
}

function assertNoPassword(value, what) {
  assert.ok(!printed(value).includes(PASSWORD), `${what} shows the password: ${printed(value)}`);
}

// A KeylockError with `code` whose message names the server (redacted) and says why it failed.
function unavailable(port) {
  return (e) => {
    assertNoPassword(e, 'the error');
    assertNoPassword(e.stack, "the error's stack");
    assert.equal(e.code, 'KEYLOCK_UNAVAILABLE', e.message);
    assert.match(e.message, new RegExp(`127\\.0\\.0\\.1:${port}`), 'the message names the server');
    assert.match(e.message, /refused|reset|closed|broken|timed? ?out|no answer/i, 'the message says why');
    return true;
  };
}

test('a Redis scope: names, inspect, info and every error keep the cause and never the password', T, async () => {
  const port = await freePort();
  const url = `redis://default:${PASSWORD}@127.0.0.1:${port}/0?timeout=1s&connect_timeout=1s`;
  const server = await startRedis(port);
  let pool;
  try {
    pool = KeyPool.open(url);
    assert.equal(pool.name, `redis://default:***@127.0.0.1:${port}/0?timeout=1s&connect_timeout=1s`);
    assertNoPassword(pool, 'the pool');
    assertNoPassword(pool.name, "the pool's name");
    assertNoPassword(new LockManager(pool), 'a LockManager over it');

    const guard = await pool.lock('k');
    assertNoPassword(guard, 'a guard');
    assertNoPassword(pool.info('k'), 'info()');
    guard.release();
  } finally {
    await server.stop();
  }

  // The server is gone: each way of reaching it fails with its cause.
  await assert.rejects(pool.lock('k'), unavailable(port));
  assert.throws(() => pool.tryLock('k'), unavailable(port));
  assert.throws(() => pool.isLocked('k'), unavailable(port));
  assert.throws(() => pool.info('k'), unavailable(port));
  // A pool opened where nothing listens.
  assert.throws(() => KeyPool.open(url), unavailable(port));
});

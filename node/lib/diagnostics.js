'use strict';
// diagnostics_channel: what the keyed locks (KeyPool, StripedLock, Semaphore) publish, on named
// channels as Node's own modules do (`http.client.request.start`, `undici:request:create`):
//
//   keylock:wait     an async acquire could not be granted at once and waits
//   keylock:acquire  an acquisition was granted: a guard or permit was made
//   keylock:release  a guard or permit was released, or its release refused
//
// A message is made only while its channel has subscribers; without any, an acquire or a release
// does one `hasSubscribers` check more (two where a grant is made: acquire and release). Nothing
// here counts: the counts are the core's (`metrics()`), and publishing does not depend on them.
// The messages are described in README.md ("Diagnostics channels").

const dc = require('node:diagnostics_channel');
const { performance } = require('node:perf_hooks');
const { SHARED } = require('./options.js');
const { OK, statusError } = require('./errors.js');

const WAIT = dc.channel('keylock:wait');
const ACQUIRE = dc.channel('keylock:acquire');
const RELEASE = dc.channel('keylock:release');

// The printed name of each keyed lock's native handle, set when the lock object is made. A
// handle without one (an RwLock's) publishes nothing.
const names = new WeakMap();
// When each guard was granted (performance.now()), for those made while acquire or release had
// subscribers: a release's `heldMs`.
const grantedAt = new WeakMap();
// The native handle behind a guard (guard.js hands over its accessor: the field is private).
let handleOfGuard = () => undefined;

function nameHandle(h, name) {
  names.set(h, name);
}

function setHandleOfGuard(f) {
  handleOfGuard = f;
}

function modeName(mode) {
  return mode === SHARED ? 'shared' : 'exclusive';
}

// keylock:wait, for an async acquire on handle `h` whose native call started a waiter: `key`
// (one key) or `keys` (several), the mode asked for (one, or one per key), a semaphore's
// `weight`, and the timeout in ms (null: none).
function publishWait(h, key, keys, mode, weight, timeout) {
  const name = names.get(h);
  if (name === undefined) return;
  WAIT.publish({
    name,
    key,
    keys,
    mode: Array.isArray(mode) ? mode.map(modeName) : modeName(mode),
    weight,
    timeout: timeout ?? null,
  });
}

// What acquire and release messages say about `guard`, or undefined for a guard of a lock
// that publishes nothing.
function about(guard) {
  const name = names.get(handleOfGuard(guard));
  if (name === undefined) return undefined;
  return {
    name,
    key: guard.key,
    keys: guard.keys,
    mode: guard.mode,
    weight: guard.weight,
    fence: guard.fence,
    guard,
  };
}

// A grant: notes its time for the release, and publishes keylock:acquire. `waitedMs`: 0 for a
// call granted at once, the time it waited, or null when that is not known (a wait that began
// before anyone subscribed).
function publishAcquire(guard, waitedMs) {
  const message = about(guard);
  if (message === undefined) return;
  grantedAt.set(guard, performance.now());
  if (!ACQUIRE.hasSubscribers) return;
  message.waitedMs = waitedMs;
  ACQUIRE.publish(message);
}

// A release whose native status (without the local wake-up bit) is `status`: publishes
// keylock:release and returns the error the release throws (undefined when it succeeded).
function publishRelease(guard, status, what) {
  const error = status === OK ? undefined : statusError(status, what);
  const message = about(guard);
  if (message === undefined) return error;
  const at = grantedAt.get(guard);
  message.heldMs = at === undefined ? null : performance.now() - at;
  message.error = error;
  RELEASE.publish(message);
  return error;
}

// The start of a blocking or waiting acquire, for its `waitedMs`: -1 while nobody listens.
function startClock() {
  return ACQUIRE.hasSubscribers ? performance.now() : -1;
}

// The time since `started` (from startClock), or null when it was not read.
function since(started) {
  return started < 0 ? null : performance.now() - started;
}

module.exports = {
  WAIT,
  ACQUIRE,
  RELEASE,
  nameHandle,
  setHandleOfGuard,
  publishWait,
  publishAcquire,
  publishRelease,
  startClock,
  since,
};

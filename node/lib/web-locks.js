'use strict';
// The Web Locks API (https://w3c.github.io/web-locks/) over keylock's locks: `keylock.locks`,
// a LockManager shared by every worker thread of the process, and `new LockManager(pool)` over
// any KeyPool or StripedLock (so over any scope: in-process, shared memory, Redis).
//
// The spec's algorithms run in the core: a name is a key of the core's name space (WTF-8, so
// every string is a name of its own and none meets a plain key), its queue is the core's queue
// for that key, and `keylock.locks` is a strict-FIFO pool, so a request is granted exactly when
// the spec calls it grantable. What this file adds is the API around a grant: the argument
// checks and errors of the spec, calling back with a Lock, holding until the callback's promise
// settles, ifAvailable, signal, steal's AbortError for the previous holders; and `query()`,
// whose requests the addon keeps for every thread of the process (src/weblocks.rs).
//
// Where keylock differs from a browser, and why, is in README.md ("Web Locks").

const native = require('./native.js');
const { WEB_REQUEST } = require('./records.js');
const { WOULD_BLOCK, statusError } = require('./errors.js');
const { state } = require('./thread.js');
const { released, taken, startedWaiter, acquiredFlags, track, untrack } = require('./waiting.js');
const { KeyedLock, handleOf } = require('./pools.js');

const { FLAG_STOLEN } = native;
// The token of this module's own constructors (a Lock, and the process-wide LockManager).
const INTERNAL = Symbol('keylock.web-locks');
const Q_NAME = WEB_REQUEST.name;
const Q_SHARED = WEB_REQUEST.shared;
const Q_CLIENT_ID = WEB_REQUEST.clientId;
const Q_HELD = WEB_REQUEST.held;

const MODES = ['exclusive', 'shared'];

function notSupported(message) {
  return new DOMException(message, 'NotSupportedError');
}

function abortError(message) {
  return new DOMException(message, 'AbortError');
}

// WebIDL's DOMString conversion (ToString; a symbol throws TypeError).
function domString(v, what) {
  if (typeof v === 'symbol') throw new TypeError(`${what}: a symbol cannot be converted to a string`);
  return `${v}`;
}

// WebIDL's conversion of a LockOptions dictionary: members read once each, in lexicographic
// order (ifAvailable, mode, signal, steal).
function lockOptions(options) {
  if (options === undefined || options === null) {
    return { ifAvailable: false, mode: 'exclusive', signal: undefined, steal: false };
  }
  if (typeof options !== 'object' && typeof options !== 'function') {
    throw new TypeError(
      "Failed to execute 'request' on 'LockManager': The provided value is not of type 'LockOptions'.",
    );
  }
  const ifAvailable = Boolean(options.ifAvailable);
  const modeValue = options.mode;
  const mode = modeValue === undefined ? 'exclusive' : domString(modeValue, 'mode');
  if (!MODES.includes(mode)) {
    throw new TypeError(
      `Failed to execute 'request' on 'LockManager': Failed to read the 'mode' property from 'LockOptions': The provided value '${mode}' is not a valid enum value of type LockMode.`,
    );
  }
  const signal = options.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError(
      "Failed to execute 'request' on 'LockManager': Failed to read the 'signal' property from 'LockOptions': Failed to convert value to 'AbortSignal'.",
    );
  }
  const steal = Boolean(options.steal);
  return { ifAvailable, mode, signal, steal };
}

/** A granted lock, as the callback of `request()` sees it. */
class Lock {
  #name;
  #mode;

  constructor(token, name, mode) {
    if (token !== INTERNAL) throw new TypeError('Illegal constructor');
    this.#name = name;
    this.#mode = mode;
  }

  /** The name it was requested with. */
  get name() {
    return this.#name;
  }

  /** 'exclusive' or 'shared'. */
  get mode() {
    return this.#mode;
  }

  get [Symbol.toStringTag]() {
    return 'Lock';
  }
}

// A settled promise, whose `then` queues a microtask: Node's `queueMicrotask` also makes an
// async resource and a bound function for each call (an uncontended request took about 800
// instructions more with it, of 7,800).
const RESOLVED = Promise.resolve();

function nextRequest() {
  const id = state.nextRequest;
  state.nextRequest = id >= 2 ** 30 - 1 ? 1 : id + 1;
  return id;
}

// Runs `callback(lock)` and settles the request's promise with its result; the lock (if any)
// is released first, when the callback's promise settles.
function run(req, lock) {
  let waiting;
  try {
    waiting = Promise.resolve(req.callback(lock));
  } catch (err) {
    waiting = Promise.reject(err);
  }
  waiting.then(
    (value) => {
      finish(req);
      req.resolve(value);
    },
    (err) => {
      finish(req);
      req.reject(err);
    },
  );
}

// The request is over: its lock (if it still has one) goes back to the core.
function finish(req) {
  state.requests.delete(req.id);
  const slot = req.slot;
  if (slot === 0) return;
  req.slot = 0;
  // A stolen lock's release finds it no longer current, which is expected.
  released(req.h.release(slot));
}

// The request holds slot `slot`: its callback runs in a microtask (the spec queues a task),
// unless its signal was aborted meanwhile.
function granted(req, slot, flags) {
  req.slot = slot;
  req.state = 'granted';
  if (flags & FLAG_STOLEN) req.stolen();
  RESOLVED.then(() => {
    if (req.signal !== undefined) {
      if (req.signal.aborted) {
        finish(req);
        return;
      }
      req.signal.removeEventListener('abort', req.onAbort);
    }
    req.state = 'running';
    run(req, new Lock(INTERNAL, req.name, req.mode));
  });
}

/**
 * The Web Locks API's LockManager over a keylock lock: `new LockManager(pool)` takes any
 * KeyPool or StripedLock; `keylock.locks` is the process-wide one.
 */
class LockManager {
  #h;

  constructor(pool) {
    if (pool === INTERNAL) {
      this.#h = native.webLocksPool();
      return;
    }
    if (!(pool instanceof KeyedLock)) {
      throw new TypeError('keylock: new LockManager(pool) takes a KeyPool or a StripedLock');
    }
    this.#h = handleOf(pool);
  }

  /**
   * `request(name, callback)` or `request(name, options, callback)`: calls `callback(lock)`
   * once the lock is granted and holds it until the callback's promise settles; resolves
   * with the callback's result. Options: `{ mode, ifAvailable, steal, signal }`.
   */
  request(name, options) {
    try {
      const argc = arguments.length;
      if (argc < 2) {
        throw new TypeError(
          `Failed to execute 'request' on 'LockManager': 2 arguments required, but only ${argc} present.`,
        );
      }
      name = domString(name, 'name');
      let callback;
      let o;
      if (argc === 2) {
        callback = options;
        o = lockOptions(undefined);
      } else {
        o = lockOptions(options);
        callback = arguments[2];
      }
      if (typeof callback !== 'function') {
        throw new TypeError(
          "Failed to execute 'request' on 'LockManager': The callback provided as parameter is not a function.",
        );
      }
      return this.#request(name, o, callback);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  #request(name, o, callback) {
    if (name.startsWith('-')) throw notSupported("Names starting with '-' are reserved.");
    if (o.steal && o.ifAvailable) throw notSupported("The 'steal' and 'ifAvailable' options cannot be used together.");
    if (o.steal && o.mode !== 'exclusive')
      throw notSupported("The 'steal' option may only be used with 'exclusive' locks.");
    if (o.signal !== undefined && (o.steal || o.ifAvailable)) {
      throw notSupported("The 'signal' and 'steal' or 'ifAvailable' options cannot be used together.");
    }
    if (o.signal !== undefined && o.signal.aborted) return Promise.reject(o.signal.reason);

    const h = this.#h;
    const req = {
      id: nextRequest(),
      h,
      name,
      mode: o.mode,
      callback,
      signal: o.signal,
      onAbort: undefined,
      state: 'pending',
      slot: 0,
      waiter: 0,
      resolve: undefined,
      reject: undefined,
      stolen: () => {
        if (req.state === 'done') return;
        req.state = 'done';
        state.requests.delete(req.id);
        req.reject(abortError('The lock was stolen by a request with the steal option.'));
      },
    };
    const p = new Promise((resolve, reject) => {
      req.resolve = (v) => {
        req.state = 'done';
        resolve(v);
      };
      req.reject = (e) => {
        req.state = 'done';
        reject(e);
      };
    });
    state.requests.set(req.id, req);
    const flags = (o.ifAvailable ? 1 : 0) | (o.steal ? 2 : 0);
    let r;
    try {
      r = taken(h.webRequest(name, o.mode === 'shared' ? 1 : 0, flags, req.id));
    } catch (err) {
      state.requests.delete(req.id);
      throw err;
    }
    const grantFlags = acquiredFlags();
    const waiterId = startedWaiter();
    // A steal took the name from its holders first: those of this thread are told now, so
    // that their promises reject before the stealer's callback runs, as the spec orders it.
    if (o.steal) state.drain();
    if (r > 0) {
      granted(req, r, grantFlags);
    } else if (r === 0) {
      const id = waiterId;
      req.waiter = id;
      track(id, {
        granted: (slot, lo, hi, f) => granted(req, slot, f),
        fail: (err) => {
          state.requests.delete(req.id);
          req.reject(err);
        },
        what: () => `the lock ${JSON.stringify(name)}`,
        timer: undefined,
        signal: undefined,
        onAbort: undefined,
      });
    } else if (-r === WOULD_BLOCK && o.ifAvailable) {
      // Not grantable now: the callback gets null, and the request is over.
      state.requests.delete(req.id);
      req.state = 'running';
      RESOLVED.then(() => run(req, null));
    } else {
      state.requests.delete(req.id);
      req.reject(statusError(-r, `the lock ${JSON.stringify(name)}`));
    }
    if (o.signal !== undefined && req.state !== 'done') {
      req.onAbort = () => {
        if (req.state === 'pending') {
          // Still queued: leave the queue (the core passes on a grant it had just made).
          untrack(req.waiter);
          state.requests.delete(req.id);
          req.reject(o.signal.reason);
        } else if (req.state === 'granted') {
          // Granted, callback not yet called: it will not be, and the lock goes back.
          req.reject(o.signal.reason);
        }
      };
      o.signal.addEventListener('abort', req.onAbort, { once: true });
    }
    return p;
  }

  /**
   * A snapshot of the lock manager: `{ held, pending }`, each a list of `{ name, mode,
   * clientId }` in the order the requests were made, for every thread of the process.
   */
  query() {
    try {
      const held = [];
      const pending = [];
      for (const r of this.#h.webQuery()) {
        const request = { name: r[Q_NAME], mode: r[Q_SHARED] ? 'shared' : 'exclusive', clientId: r[Q_CLIENT_ID] };
        (r[Q_HELD] ? held : pending).push(request);
      }
      return Promise.resolve({ held, pending });
    } catch (err) {
      return Promise.reject(err);
    }
  }

  get [Symbol.toStringTag]() {
    return 'LockManager';
  }
}

let processLocks = null;

/** `keylock.locks`: the LockManager shared by every worker thread of the process. */
function locks() {
  if (processLocks === null) processLocks = new LockManager(INTERNAL);
  return processLocks;
}

module.exports = { LockManager, Lock, locks };

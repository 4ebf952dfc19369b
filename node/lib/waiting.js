'use strict';
// Waiting: native waiter ids become promises (timeouts, AbortSignal), and the completions the
// addon reports settle them.
//
// An async start polls the core's future once. If that settles it, the start returns the slot
// (or minus a status); otherwise it returns 0 with the waiter's id in the output buffer, and the
// addon calls `drain()` on this thread when the waiter completes (see src/reactor.rs), which
// reads the completions runReady wrote.

const native = require('./native.js');
const { OUTPUT, COMPLETION, COMPLETION_WORDS } = require('./records.js');
const { KeylockError, OK, WOULD_BLOCK, statusError, timeoutError } = require('./errors.js');
const { MAX_TIMER } = require('./options.js');
const { state, RECORDS_HELD } = require('./thread.js');
const { dropOwner } = require('./owners.js');
const { ACQUIRE, RELEASE, publishAcquire, startClock, since } = require('./diagnostics.js');
const { runHolding, runHoldingInto } = require('./holding.js');

const { FLAG_FAILED, FLAG_STOLEN, FLAG_LOST, STATUS_SHIFT } = native;
// Added to a release's status when it woke a waiter of this thread (served at once, below).
const LOCAL_WAKE = native.LOCAL_WAKE;
const OUT = state.out;
const RECORDS = state.records;
const waiters = state.waiters;

const OUT_FENCE_LOW = OUTPUT.fenceLow;
const OUT_FENCE_HIGH = OUTPUT.fenceHigh;
const OUT_FLAGS = OUTPUT.flags;
const OUT_WAITER = OUTPUT.waiter;
const OUT_SLOT = OUTPUT.slot;
const C_ID = COMPLETION.id;
const C_SLOT = COMPLETION.slot;
const C_FENCE_LOW = COMPLETION.fenceLow;
const C_FENCE_HIGH = COMPLETION.fenceHigh;
const C_FLAGS = COMPLETION.flags;

// Polls this thread's woken waiters and settles those that completed. Settling resolves or
// rejects promises and queues microtasks, and calls nothing that polls again, so the records
// buffer stays as runReady wrote it while it is read.
function drain() {
  let n;
  do {
    n = runReady();
    dispatch(RECORDS, n);
  } while (n === RECORDS_HELD);
}
if (state.drain === null) state.drain = drain;

function dispatch(records, n) {
  for (let i = 0; i < n * COMPLETION_WORDS; i += COMPLETION_WORDS) {
    const id = records[i + C_ID];
    const slot = records[i + C_SLOT];
    const flags = records[i + C_FLAGS];
    if (slot === 0 && flags & FLAG_STOLEN) {
      const req = state.requests.get(id);
      if (req !== undefined) req.stolen();
      continue;
    }
    if (slot === 0 && flags & FLAG_LOST) {
      const lost = state.watched.get(id);
      if (lost !== undefined) {
        state.watched.delete(id);
        lost();
      }
      continue;
    }
    const w = waiters.get(id);
    if (w === undefined) continue;
    waiters.delete(id);
    if (w.timer !== undefined) clearTimeout(w.timer);
    if (w.signal !== undefined) w.signal.removeEventListener('abort', w.onAbort);
    if (flags & FLAG_FAILED) {
      w.fail(new KeylockError('KEYLOCK_INTERNAL', 'keylock: a panic in the addon while waiting'));
    } else if (slot === 0) {
      // A failure's `fenceLow` word names its kept text.
      w.fail(statusError(flags >>> STATUS_SHIFT, w.what, records[i + C_FENCE_LOW]));
    } else {
      w.granted(slot, records[i + C_FENCE_LOW], records[i + C_FENCE_HIGH], flags);
    }
  }
}

// The status of a release, after serving the waiter of this thread that it woke, if any: the
// waiter's promise then resolves before the releasing call returns, as with a pure-JavaScript
// lock, instead of on the event loop's next turn. `release(slot)` returns undefined for OK with
// no waiter of this thread woken (the common case), and a number otherwise.
const runReady = native.runReadyFunction();
function released(status) {
  if (status === undefined) return OK;
  if (status < LOCAL_WAKE) return status;
  state.drain();
  return status & (LOCAL_WAKE - 1);
}

// Cancels waiter `id` (still pending: the addon's table and ours agree) and fails it.
function cancelWaiter(id, reason) {
  const w = waiters.get(id);
  if (w === undefined) return;
  waiters.delete(id);
  native.cancel(id);
  if (w.timer !== undefined) clearTimeout(w.timer);
  if (w.signal !== undefined) w.signal.removeEventListener('abort', w.onAbort);
  w.fail(typeof reason === 'function' ? reason() : reason);
}

// What a native acquire returned, as a number: `undefined` (taken: its slot is in the output
// buffer, with the fence and flags) becomes the slot; a slot, minus a status, or 0 for a waiter
// stays.
function taken(r) {
  return r === undefined ? OUT[OUT_SLOT] : r;
}

// The id of the waiter an async start just began (its result was 0).
function startedWaiter() {
  return OUT[OUT_WAITER];
}

// The flags of the acquisition a call just made (its result was a slot).
function acquiredFlags() {
  return OUT[OUT_FLAGS];
}

// Waits for waiter `id`: `w` is `{ granted(slot, lo, hi, flags), fail(err), what, timer,
// signal, onAbort }`, settled by its completion.
function track(id, w) {
  waiters.set(id, w);
}

// Stops waiting for waiter `id`, which the addon then cancels; `w.fail` is not called.
function untrack(id) {
  waiters.delete(id);
  native.cancel(id);
}

// The timeout to give the core for an async acquire: the core's waiter then ends itself at
// the deadline, and the core counts it as timed out (with metrics) rather than cancelled.
// Longer than a timer can wait (see MAX_TIMER), none, as the timers below take it.
function coreTimeout(timeout) {
  return timeout <= MAX_TIMER ? timeout : undefined;
}

// Timer ticks (of about 1 ms) that a wait the core ends at its deadline is given for its
// answer to arrive, before it is cancelled here instead.
const GRACE_TICKS = 1000;

// The timer of a wait that the core ends at its deadline (`coreTimeout`), fired at that
// deadline: the core's answer comes through the event loop once the core's timer thread wakes
// the waiter, so this serves any answer that is in, and otherwise looks again a tick later
// (keeping the event loop alive meanwhile). An answer that never comes is a timeout all the
// same, after GRACE_TICKS.
function atDeadline(id, w, timeout, ticks) {
  if (waiters.get(id) !== w) return;
  state.drain();
  if (waiters.get(id) !== w) return;
  if (ticks >= GRACE_TICKS) {
    cancelWaiter(id, () => timeoutError(w.what, timeout));
    return;
  }
  w.timer = setTimeout(atDeadline, 1, id, w, timeout, ticks + 1);
}

// A waiter's promise and what settles it: `make(slot, lo, hi, flags)` builds what it resolves
// to; `owner` (0: none) is dropped if it fails. With a function `fn` (a with-form's), what `make`
// builds is held while `fn` runs, and the promise settles with `fn`'s outcome instead (see
// holding.js). One object of a class per wait, and a closure when a granted `fn` is to run.
class Waiter {
  constructor(make, what, timeout, limited, owner, fn) {
    this.make = make;
    this.what = what;
    this.timeout = timeout;
    this.limited = limited;
    this.owner = owner;
    this.started = startClock();
    this.resolve = undefined;
    this.reject = undefined;
    this.timer = undefined;
    this.signal = undefined;
    this.onAbort = undefined;
    this.fn = fn;
  }

  granted(slot, lo, hi, flags) {
    const got = this.make(slot, lo, hi, flags);
    if (ACQUIRE.hasSubscribers || RELEASE.hasSubscribers) publishAcquire(got, since(this.started));
    if (this.fn === undefined) {
      this.resolve(got);
    } else {
      // `fn` runs on the microtask queue, where resolving the promise would have run it: never
      // inside `dispatch`, whose records buffer a nested drain would overwrite.
      RESOLVED.then(() => runHoldingInto(got, this.fn, this));
    }
  }

  fail(e) {
    dropOwner(this.owner);
    // The core's own timeout reads as one made here.
    const timedOut = this.limited && e instanceof KeylockError && e.code === 'KEYLOCK_TIMEOUT';
    this.reject(timedOut ? timeoutError(this.what, this.timeout) : e);
  }
}

const RESOLVED = Promise.resolve();

// The promise of the waiter just started (see Waiter). `timedByCore`: the waiter was given
// `coreTimeout(timeout)` and ends itself then; otherwise the timeout cancels it here.
function waitFor(make, what, timeout, signal, owner, timedByCore, fn) {
  const id = OUT[OUT_WAITER];
  const limited = timeout !== undefined && timeout <= MAX_TIMER;
  const w = new Waiter(make, what, timeout, limited, owner, fn);
  const promise = new Promise((resolve, reject) => {
    w.resolve = resolve;
    w.reject = reject;
  });
  waiters.set(id, w);
  if (limited) {
    w.timer = timedByCore
      ? setTimeout(atDeadline, timeout, id, w, timeout, 0)
      : setTimeout(() => cancelWaiter(id, () => timeoutError(what, timeout)), timeout);
  }
  if (signal !== undefined) {
    w.signal = signal;
    w.onAbort = () => cancelWaiter(id, signal.reason);
    signal.addEventListener('abort', w.onAbort, { once: true });
  }
  return promise;
}

// An acquire's outcome. `r` is the native call's result as `taken` gives it: a slot, minus a
// status, or 0 for a waiter (async starts). The fence and flags of a slot are in the output
// buffer now.
// `timedByCore`: the native start was given `coreTimeout(o.timeout)`. With `fn` (withLock's,
// withPermit's), what was acquired is held while `fn` runs, now or once granted, and the outcome
// is `fn`'s (see holding.js).
function outcome(r, make, what, o, owner, timedByCore = false, fn = undefined) {
  if (r > 0) {
    const got = make(r, OUT[OUT_FENCE_LOW], OUT[OUT_FENCE_HIGH], OUT[OUT_FLAGS]);
    if (ACQUIRE.hasSubscribers || RELEASE.hasSubscribers) publishAcquire(got, 0);
    return fn === undefined ? Promise.resolve(got) : runHolding(got, fn);
  }
  if (r < 0) {
    dropOwner(owner);
    const status = -r;
    if (status === WOULD_BLOCK && o.timeout === 0) return Promise.reject(timeoutError(what, 0));
    return Promise.reject(statusError(status, what));
  }
  return waitFor(make, what, o.timeout, o.signal, owner, timedByCore, fn);
}

module.exports = { released, taken, outcome, coreTimeout, startedWaiter, acquiredFlags, track, untrack };

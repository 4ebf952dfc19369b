'use strict';
// Holding a guard while a callback runs (withLock, withPermit, and the like): `fn(guard)` runs,
// and once it returns, throws or its promise settles, the guard is released. The outcome is what
// `fn` returned, or what it threw. A release that finds the acquisition no longer current
// (force-unlocked, or its lease ran out while `fn` ran) fails the outcome, unless `fn` failed
// first; a failure of `fn` disposes of the guard instead, whose own failure (other than finding
// the acquisition gone) then wins.
//
// The same rules, two ways to report: `runHolding` returns a promise of the outcome, for a guard
// held at once; `runHoldingInto` settles a waiter's promise that already exists (`w.resolve`,
// `w.reject`; see waiting.js), for a guard that was waited for. Chaining `runHolding`'s promise
// to the waiter's instead would make one more promise and take one more turn of the microtask
// queue per wait. Both are written with `then` rather than as async functions: the same steps as
// `await fn(guard)` (PromiseResolve, then one reaction), without a generator to make and resume
// for each call.
//
// This module requires nothing, so that waiting.js (which guard.js requires) can use it as well
// as the lock classes.

function runHolding(guard, fn) {
  let result;
  try {
    result = fn(guard);
  } catch (err) {
    guard[Symbol.dispose]();
    return Promise.reject(err);
  }
  return Promise.resolve(result).then(
    (value) => {
      guard.release();
      return value;
    },
    (err) => {
      guard[Symbol.dispose]();
      throw err;
    },
  );
}

function runHoldingInto(guard, fn, w) {
  let result;
  try {
    result = fn(guard);
  } catch (err) {
    failHolding(guard, err, w);
    return;
  }
  Promise.resolve(result).then(
    (value) => {
      try {
        guard.release();
      } catch (err) {
        w.reject(err);
        return;
      }
      w.resolve(value);
    },
    (err) => failHolding(guard, err, w),
  );
}

// `fn` failed with `err`: the guard is disposed of, and the waiter fails with `err`, or with the
// disposal's own failure.
function failHolding(guard, err, w) {
  try {
    guard[Symbol.dispose]();
  } catch (e) {
    w.reject(e);
    return;
  }
  w.reject(err);
}

module.exports = { runHolding, runHoldingInto };

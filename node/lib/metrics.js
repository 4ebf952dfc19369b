'use strict';
// Metrics: `metrics()` of a lock object opened with `{ metrics: true }`, a frozen copy of the
// core's counts and histograms (the core counts everything; nothing is counted here).
// Durations are in milliseconds, fractions kept, as Node's perf_hooks gives them.

const native = require('./native.js');
const { typeError, rangeError, describe } = require('./errors.js');

// A histogram of a reading: its figures, and quantile(q) answered by the core from the same
// reading.
function histogram(reading) {
  const { count, sumMs, maxMs, buckets } = reading.figures();
  return Object.freeze({
    count,
    sumMs,
    maxMs,
    buckets: Object.freeze(buckets.map((b) => Object.freeze(b))),
    quantile(q) {
      if (typeof q !== 'number') throw typeError(`q must be a number from 0 to 1, not ${describe(q)}`);
      if (!(q >= 0 && q <= 1)) throw rangeError(`q must be from 0 to 1, not ${q}`);
      return reading.quantile(q);
    },
  });
}

// The metrics of the lock object behind native handle `h`, or null when it has none.
function metricsOf(h) {
  const reading = native.keyedMetrics(h.handle);
  if (reading === null || reading === undefined) return null;
  return Object.freeze({ ...reading.counts(), wait: histogram(reading.wait()), hold: histogram(reading.hold()) });
}

module.exports = { metricsOf };

//! A lock object's metrics as JavaScript reads them (`metrics()`, see `lib/metrics.js`).
//!
//! The core counts everything (`keylock_core::metrics`); this module only converts one
//! `MetricsSnapshot`. A reading keeps the snapshot whole, so that its histograms answer
//! `quantile(q)` by the core's own rule rather than by a copy of it. Durations are in
//! milliseconds, fractions kept, as Node's `perf_hooks` gives them; counts are numbers, exact
//! below 2^53.

use keylock_core::{HistogramSnapshot, MetricsSnapshot};
use napi_derive::napi;

/// Nanoseconds as milliseconds.
fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// One reading of a lock object's metrics: the counts, and the two histograms.
#[napi]
#[derive(Debug)]
pub struct MetricsReading(MetricsSnapshot);

impl From<MetricsSnapshot> for MetricsReading {
    fn from(snapshot: MetricsSnapshot) -> Self {
        Self(snapshot)
    }
}

/// The counts of a reading, named as the core names them (in camelCase): totals since the
/// lock object was opened.
#[napi(object)]
#[derive(Debug, Clone, Copy)]
pub struct MetricsCounts {
    /// Acquisitions granted (a multi-key acquire counts each lock it returns).
    pub acquired: f64,
    /// Calls that could not be granted at once: they waited, timed out or were cancelled.
    pub contended: f64,
    /// Calls that waited as long as they were allowed and failed with `KEYLOCK_TIMEOUT`.
    pub timed_out: f64,
    /// Tries that failed because the key was taken.
    pub would_block: f64,
    /// Async acquires dropped before they finished (an `AbortSignal`, a worker that ended).
    pub cancelled: f64,
    /// Releases refused because the acquisition's lease had ended.
    pub lease_expired: f64,
    /// Acquisitions whose previous holder died holding the key.
    pub owner_died: f64,
    /// Releases refused because the hold had ended behind its holder's back (force-unlocked,
    /// stolen, lost by a remote scope).
    pub lost: f64,
    /// Force-unlocks through this lock object that freed a held key.
    pub force_unlocked: f64,
}

#[napi]
impl MetricsReading {
    /// The counts.
    #[napi]
    pub fn counts(&self) -> MetricsCounts {
        let m = &self.0;
        MetricsCounts {
            acquired: m.acquired as f64,
            contended: m.contended as f64,
            timed_out: m.timed_out as f64,
            would_block: m.would_block as f64,
            cancelled: m.cancelled as f64,
            lease_expired: m.lease_expired as f64,
            owner_died: m.owner_died as f64,
            lost: m.lost as f64,
            force_unlocked: m.force_unlocked as f64,
        }
    }

    /// How long each granted call waited (0 when granted at once).
    #[napi]
    pub fn wait(&self) -> HistogramReading {
        HistogramReading(self.0.wait)
    }

    /// How long each released acquisition was held.
    #[napi]
    pub fn hold(&self) -> HistogramReading {
        HistogramReading(self.0.hold)
    }
}

/// One histogram of a reading.
#[napi]
#[derive(Debug)]
pub struct HistogramReading(HistogramSnapshot);

/// A histogram's figures: `buckets` lists the non-empty buckets as `[upperBoundMs, count]`,
/// in order (the core's power-of-two buckets of nanoseconds: bucket 0 counts 0 ns, bucket `i`
/// up to `2^i - 1` ns; the last one has no bound, `Infinity`).
#[napi(object)]
#[derive(Debug, Clone)]
pub struct HistogramFigures {
    /// Durations recorded.
    pub count: f64,
    /// Their sum, in milliseconds.
    pub sum_ms: f64,
    /// The longest, in milliseconds.
    pub max_ms: f64,
    /// `[upperBoundMs, count]` of each non-empty bucket.
    pub buckets: Vec<Vec<f64>>,
}

#[napi]
impl HistogramReading {
    /// Its figures.
    #[napi]
    pub fn figures(&self) -> HistogramFigures {
        let h = &self.0;
        let last = h.buckets.len() - 1;
        let buckets = h
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| {
                let bound = if i == last {
                    f64::INFINITY
                } else {
                    ms(HistogramSnapshot::upper_bound_ns(i))
                };
                vec![bound, *n as f64]
            })
            .collect();
        HistogramFigures {
            count: h.count() as f64,
            sum_ms: ms(h.sum_ns),
            max_ms: ms(h.max_ns),
            buckets,
        }
    }

    /// The `q` quantile (0 to 1) in milliseconds, by the core's rule (the upper bound of the
    /// bucket that holds it, capped at the longest duration); `null` when nothing was recorded.
    #[napi]
    pub fn quantile(&self, q: f64) -> Option<f64> {
        self.0
            .quantile(q)
            .map(|d| ms(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
    }
}

//! `keylock.MetricsSnapshot` and `keylock.HistogramSnapshot`: the core's record of what a lock
//! object opened with `metrics=True` counted (`KeyedLock::metrics`), as frozen Python objects
//! under the core's names. The core counts and computes everything (counts, buckets,
//! quantiles); this module only converts: nanoseconds into seconds as floats (the unit of
//! `time.monotonic()` and of prometheus_client), the 64 power-of-two buckets into
//! `(upper bound, count)` pairs.

use std::fmt::Write as _;

use keylock_core::{self as core, metrics::BUCKETS};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyTuple};

/// Nanoseconds as seconds.
fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The upper bound of bucket `i` in seconds: the core's bound in nanoseconds, and infinity for
/// the last bucket (which counts everything from 2**62 ns up, as Prometheus's `+Inf`).
fn upper_bound(i: usize) -> f64 {
    if i + 1 >= BUCKETS {
        f64::INFINITY
    } else {
        seconds(core::HistogramSnapshot::upper_bound_ns(i))
    }
}

/// `x` as Python's `repr(float)` writes it.
fn float_repr(py: Python<'_>, x: f64) -> PyResult<String> {
    Ok(PyFloat::new(py, x).repr()?.to_string())
}

/// A histogram of durations from a MetricsSnapshot (`wait` or `hold`): how many were recorded,
/// their sum and the longest, in seconds, and how many fell in each power-of-two bucket of
/// nanoseconds. A snapshot: it does not change.
#[pyclass(module = "keylock", name = "HistogramSnapshot", frozen, eq)]
#[derive(PartialEq)]
pub(crate) struct HistogramSnapshot(core::HistogramSnapshot);

impl HistogramSnapshot {
    /// `((upper bound, count), ...)` for the buckets that counted anything.
    fn bucket_pairs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let pairs = self
            .0
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| (upper_bound(i), *n))
            .collect::<Vec<_>>();
        PyTuple::new(py, pairs)
    }

    /// The core's quantile in seconds, converted as `sum` and `max` are (so that the top
    /// quantile, capped at the longest duration, equals `max`).
    fn quantile_seconds(&self, q: f64) -> Option<f64> {
        self.0
            .quantile(q)
            .map(|d| seconds(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
    }

    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("count", self.count())?;
        d.set_item("sum", self.sum())?;
        d.set_item("max", self.max())?;
        d.set_item("buckets", self.bucket_pairs(py)?)?;
        Ok(d)
    }
}

#[pymethods]
impl HistogramSnapshot {
    /// The upper bound of each of the 64 buckets, in seconds: 0.0 (durations of 0 ns), then
    /// (2**i - 1) ns for bucket i, and math.inf for the last.
    #[classattr]
    #[pyo3(name = "BOUNDS")]
    fn bounds(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        Ok(PyTuple::new(py, (0..BUCKETS).map(upper_bound))?.unbind())
    }

    /// How many durations were recorded.
    #[getter]
    fn count(&self) -> u64 {
        self.0.count()
    }

    /// The sum of every recorded duration, in seconds.
    #[getter]
    fn sum(&self) -> f64 {
        seconds(self.0.sum_ns)
    }

    /// The longest recorded duration, in seconds (0.0 when nothing was recorded).
    #[getter]
    fn max(&self) -> f64 {
        seconds(self.0.max_ns)
    }

    /// `(upper_bound, count)` for each bucket that counted anything, in order: `count`
    /// durations were at most `upper_bound` seconds and above the previous bucket's bound (see
    /// BOUNDS).
    #[getter]
    fn buckets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        self.bucket_pairs(py)
    }

    /// Return the `q` quantile (0 <= q <= 1) in seconds, None when nothing was recorded: the
    /// upper bound of the bucket that holds it, capped at the longest duration (an
    /// overestimate by less than a factor of two). ValueError for q outside 0..1.
    fn quantile(&self, q: f64) -> PyResult<Option<f64>> {
        if !(0.0..=1.0).contains(&q) {
            return Err(PyValueError::new_err("q must be between 0 and 1"));
        }
        Ok(self.quantile_seconds(q))
    }

    /// Return the histogram as a dict: count, sum, max, buckets.
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.as_dict(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let opt = |v: Option<f64>| v.map_or(Ok("None".to_owned()), |s| float_repr(py, s));
        Ok(format!(
            "HistogramSnapshot(count={}, sum={}, max={}, p50={}, p99={})",
            self.count(),
            float_repr(py, self.sum())?,
            float_repr(py, self.max())?,
            opt(self.quantile_seconds(0.5))?,
            opt(self.quantile_seconds(0.99))?,
        ))
    }
}

/// What a lock object opened with `metrics=True` counted, from its `metrics()`: totals since it
/// was opened, the same names in every keylock front end. A snapshot: it does not change.
#[pyclass(module = "keylock", name = "MetricsSnapshot", frozen, eq)]
#[derive(PartialEq)]
pub(crate) struct MetricsSnapshot(core::MetricsSnapshot);

impl From<core::MetricsSnapshot> for MetricsSnapshot {
    fn from(m: core::MetricsSnapshot) -> Self {
        Self(m)
    }
}

impl MetricsSnapshot {
    /// The counts, by name, in the core's order.
    fn counts(&self) -> [(&'static str, u64); 9] {
        let m = &self.0;
        [
            ("acquired", m.acquired),
            ("contended", m.contended),
            ("timed_out", m.timed_out),
            ("would_block", m.would_block),
            ("cancelled", m.cancelled),
            ("lease_expired", m.lease_expired),
            ("owner_died", m.owner_died),
            ("lost", m.lost),
            ("force_unlocked", m.force_unlocked),
        ]
    }
}

#[pymethods]
impl MetricsSnapshot {
    /// Acquisitions granted (a lock_many acquire counts each key it takes).
    #[getter]
    fn acquired(&self) -> u64 {
        self.0.acquired
    }

    /// Calls that could not be granted at once: they waited (then were granted, timed out or
    /// were cancelled).
    #[getter]
    fn contended(&self) -> u64 {
        self.0.contended
    }

    /// Calls that waited as long as their timeout allowed and failed.
    #[getter]
    fn timed_out(&self) -> u64 {
        self.0.timed_out
    }

    /// Tries (a non-blocking acquire, or a timeout of 0) that failed.
    #[getter]
    fn would_block(&self) -> u64 {
        self.0.would_block
    }

    /// asyncio acquires given up before they finished (the task was cancelled).
    #[getter]
    fn cancelled(&self) -> u64 {
        self.0.cancelled
    }

    /// Releases refused because the acquisition's lease had ended (LeaseExpiredError).
    #[getter]
    fn lease_expired(&self) -> u64 {
        self.0.lease_expired
    }

    /// Acquisitions whose previous holder died holding the key (cross-process scopes).
    #[getter]
    fn owner_died(&self) -> u64 {
        self.0.owner_died
    }

    /// Releases refused (NotOwnerError) because the hold had ended behind its holder's back:
    /// force-unlocked, or lost by a remote scope.
    #[getter]
    fn lost(&self) -> u64 {
        self.0.lost
    }

    /// Force-unlocks through this object that freed a held key.
    #[getter]
    fn force_unlocked(&self) -> u64 {
        self.0.force_unlocked
    }

    /// How long each granted call waited (0 when granted at once).
    #[getter]
    fn wait(&self) -> HistogramSnapshot {
        HistogramSnapshot(self.0.wait)
    }

    /// How long each released acquisition was held, from its grant to its release.
    #[getter]
    fn hold(&self) -> HistogramSnapshot {
        HistogramSnapshot(self.0.hold)
    }

    /// Return the snapshot as a dict: the counts, and `wait` and `hold` as dicts of their own
    /// (see HistogramSnapshot._asdict).
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, n) in self.counts() {
            d.set_item(name, n)?;
        }
        d.set_item("wait", self.wait().as_dict(py)?)?;
        d.set_item("hold", self.hold().as_dict(py)?)?;
        Ok(d)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mut out = String::from("MetricsSnapshot(");
        for (name, n) in self.counts() {
            let _ = write!(out, "{name}={n}, ");
        }
        let _ = write!(
            out,
            "wait={}, hold={})",
            self.wait().__repr__(py)?,
            self.hold().__repr__(py)?
        );
        Ok(out)
    }
}

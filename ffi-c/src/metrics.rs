//! What `keylock_pool_metrics`, `keylock_striped_metrics` and `keylock_semaphore_metrics`
//! report: `keylock_metrics` and its two `keylock_histogram`s, plain structs in caller memory,
//! translated field by field from keylock-core's `MetricsSnapshot` (which a lock object opened
//! with `keylock_open_options.metrics` keeps); and the two questions a histogram answers, its
//! quantiles and its buckets' bounds, which the core's `HistogramSnapshot` answers.
//!
//! The core counts everything; nothing here counts or decides.

use keylock_core::{HistogramSnapshot, MetricsSnapshot};

/// The buckets of a `keylock_histogram`: one for 0 ns, then one per power of two of
/// nanoseconds.
pub const KEYLOCK_HISTOGRAM_BUCKETS: usize = 64;

// The header's number is the core's.
const _: () = assert!(KEYLOCK_HISTOGRAM_BUCKETS == keylock_core::metrics::BUCKETS);

/// Durations in power-of-two buckets of nanoseconds: part of a `keylock_metrics`.
///
/// `buckets[0]` counts durations of 0 ns, `buckets[i]` those of `2^(i-1)` to `2^i - 1` ns (the
/// last everything from `2^62` ns up); `keylock_histogram_upper_bound_ns(i)` is bucket `i`'s
/// upper bound, and `keylock_histogram_quantile` reads a quantile from the buckets.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct keylock_histogram {
    /// How many durations were recorded: the sum of `buckets`.
    pub count: u64,
    /// The sum of every recorded duration, in nanoseconds.
    pub sum_ns: u64,
    /// The longest recorded duration, in nanoseconds (0 when none was).
    pub max_ns: u64,
    /// The count of each bucket (see above).
    pub buckets: [u64; KEYLOCK_HISTOGRAM_BUCKETS],
}

impl keylock_histogram {
    fn of(h: &HistogramSnapshot) -> Self {
        Self {
            count: h.count(),
            sum_ns: h.sum_ns,
            max_ns: h.max_ns,
            buckets: h.buckets,
        }
    }

    /// The core's histogram of these buckets, to ask it what only it knows how to answer.
    fn to_core(self) -> HistogramSnapshot {
        HistogramSnapshot::new(self.buckets, self.sum_ns, self.max_ns)
    }
}

/// The counts of a lock object opened with metrics (`keylock_open_options.metrics`): what
/// `keylock_pool_metrics`, `keylock_striped_metrics` and `keylock_semaphore_metrics` report.
/// Totals since the object was opened, counted by this handle (each handle of a shared scope
/// counts its own calls); a snapshot whose fields may be read a moment apart. Every front end
/// of keylock shows these under the same names.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct keylock_metrics {
    /// Acquisitions granted. A `_many` call counts each acquisition it returns (`*count`).
    pub acquired: u64,
    /// Acquire calls that could not be granted at once and waited, whether they were then
    /// granted, timed out or failed otherwise. Tries (`KEYLOCK_NO_WAIT`) are never counted
    /// here.
    pub contended: u64,
    /// Acquire calls that failed with `KEYLOCK_TIMEOUT`.
    pub timed_out: u64,
    /// Tries that failed with `KEYLOCK_WOULD_BLOCK`.
    pub would_block: u64,
    /// Waits cancelled by their caller. The C ABI has no cancellable (asynchronous) acquire, so
    /// this counts only other front ends' calls on the same object (always 0 from C alone).
    pub cancelled: u64,
    /// Releases refused with `KEYLOCK_LEASE_EXPIRED`.
    pub lease_expired: u64,
    /// Acquisitions whose previous holder died holding the key (`owner_died`).
    pub owner_died: u64,
    /// Releases refused with `KEYLOCK_NOT_OWNER` because the hold had ended behind its holder's
    /// back (force-unlocked, or lost by a remote scope). A second release of the same record is
    /// refused by the record itself and not counted.
    pub lost: u64,
    /// Force-unlocks through this handle that freed a held key.
    pub force_unlocked: u64,
    /// How long each granted acquire call waited, 0 ns when granted at once: one per call (a
    /// `_many` call counts once).
    pub wait: keylock_histogram,
    /// How long each released acquisition was held, from its grant to its release: one per
    /// release that succeeded.
    pub hold: keylock_histogram,
}

impl keylock_metrics {
    pub(crate) fn of(m: &MetricsSnapshot) -> Self {
        Self {
            acquired: m.acquired,
            contended: m.contended,
            timed_out: m.timed_out,
            would_block: m.would_block,
            cancelled: m.cancelled,
            lease_expired: m.lease_expired,
            owner_died: m.owner_died,
            lost: m.lost,
            force_unlocked: m.force_unlocked,
            wait: keylock_histogram::of(&m.wait),
            hold: keylock_histogram::of(&m.hold),
        }
    }
}

/// The `q` quantile (0 to 1; NaN is 1) of `histogram`, in nanoseconds: the upper bound of the
/// bucket that holds it, capped at `max_ns`, so an overestimate by less than a factor of two.
/// `q = 1` gives `max_ns`. Reads `buckets` and `max_ns` (not `count`).
///
/// Returns 0 for an empty histogram (`count == 0`), and for NULL.
///
/// # Safety
/// `histogram` is NULL or points to a readable `keylock_histogram`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_histogram_quantile(
    histogram: *const keylock_histogram,
    q: f64,
) -> u64 {
    // SAFETY: histogram is NULL or readable (caller).
    let Some(histogram) = (unsafe { histogram.as_ref() }) else {
        return 0;
    };
    // A panic (none is expected: the core's quantile only adds and compares) reads as 0.
    std::panic::catch_unwind(|| {
        let q = histogram.to_core().quantile(q)?;
        Some(u64::try_from(q.as_nanos()).unwrap_or(u64::MAX))
    })
    .ok()
    .flatten()
    .unwrap_or(0)
}

/// The longest duration bucket `bucket` of a `keylock_histogram` counts, in nanoseconds:
/// `2^bucket - 1` (0 for bucket 0), and `UINT64_MAX` for the last bucket
/// (`KEYLOCK_HISTOGRAM_BUCKETS - 1`) and any number past it. The `le` bound a Prometheus
/// exporter gives the bucket.
#[unsafe(no_mangle)]
pub extern "C" fn keylock_histogram_upper_bound_ns(bucket: usize) -> u64 {
    HistogramSnapshot::upper_bound_ns(bucket)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(buckets: &[(usize, u64)], sum_ns: u64, max_ns: u64) -> keylock_histogram {
        let mut h = keylock_histogram {
            count: 0,
            sum_ns,
            max_ns,
            buckets: [0; KEYLOCK_HISTOGRAM_BUCKETS],
        };
        for &(i, n) in buckets {
            h.buckets[i] = n;
            h.count += n;
        }
        h
    }

    #[test]
    fn a_histogram_round_trips_through_the_core() {
        let h = histogram(&[(0, 3), (5, 2), (63, 1)], 1234, u64::MAX);
        let core = h.to_core();
        assert_eq!(keylock_histogram::of(&core), h);
        assert_eq!(core.count(), 6);
    }

    #[test]
    fn quantiles_are_the_cores() {
        // 4 at 0 ns, 1 in bucket 20 (2^19 to 2^20 - 1 ns), whose longest was 600 000 ns.
        let h = histogram(&[(0, 4), (20, 1)], 600_000, 600_000);
        let core = h.to_core();
        for q in [0.0, 0.5, 0.8, 0.81, 0.99, 1.0, -1.0, 2.0, f64::NAN] {
            let want = core.quantile(q).map_or(0, |d| d.as_nanos() as u64);
            // SAFETY: a live histogram.
            assert_eq!(unsafe { keylock_histogram_quantile(&h, q) }, want, "{q}");
        }
        // SAFETY: as above; NULL is allowed.
        unsafe {
            assert_eq!(keylock_histogram_quantile(&h, 0.5), 0);
            assert_eq!(keylock_histogram_quantile(&h, 1.0), 600_000);
            assert_eq!(keylock_histogram_quantile(std::ptr::null(), 0.5), 0);
            let empty = histogram(&[], 0, 0);
            assert_eq!(keylock_histogram_quantile(&empty, 0.5), 0);
        }
    }

    #[test]
    fn bucket_bounds_are_the_cores() {
        for i in 0..KEYLOCK_HISTOGRAM_BUCKETS {
            assert_eq!(
                keylock_histogram_upper_bound_ns(i),
                HistogramSnapshot::upper_bound_ns(i)
            );
        }
        assert_eq!(keylock_histogram_upper_bound_ns(0), 0);
        assert_eq!(keylock_histogram_upper_bound_ns(1), 1);
        assert_eq!(keylock_histogram_upper_bound_ns(10), 1023);
        assert_eq!(keylock_histogram_upper_bound_ns(63), u64::MAX);
        assert_eq!(keylock_histogram_upper_bound_ns(64), u64::MAX);
        assert_eq!(keylock_histogram_upper_bound_ns(usize::MAX), u64::MAX);
    }
}

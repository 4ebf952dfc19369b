//! A criterion measurement of the benchmarking thread's CPU time, instead of wall time.
//!
//! The uncontended benchmarks are single-threaded loops of a few nanoseconds. Timed by the wall
//! clock, every moment the thread spends preempted (this machine has two cores, shared with
//! other jobs) is charged to the loop: with the other core busy and one more runnable job, the
//! wall clock read 10-24 ns for a `parking_lot::Mutex` lock+unlock that a quiet run or a plain
//! timed loop reads at about 6 ns. That is how BENCHMARKS.md came to give the floor as 11.5 ns
//! and every "x the floor" ratio understated. The thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) counts only the time the loop actually ran, so the figure no
//! longer depends on what else the machine is doing; one read per sample of millions of
//! iterations costs nothing measurable.

use std::time::Duration;

use criterion::Throughput;
use criterion::measurement::{Measurement, ValueFormatter};

/// The calling thread's CPU time (see the module documentation).
pub(crate) struct ThreadTime;

fn now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux provides.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Measurement for ThreadTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        now()
    }

    fn end(&self, start: Duration) -> Duration {
        now().saturating_sub(start)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuTimeFormatter
    }
}

/// Shows nanoseconds of CPU time in ns, µs, ms or s.
struct CpuTimeFormatter;

impl ValueFormatter for CpuTimeFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = match typical {
            t if t < 1e3 => (1.0, "ns"),
            t if t < 1e6 => (1e-3, "µs"),
            t if t < 1e9 => (1e-6, "ms"),
            _ => (1e-9, "s"),
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per_iter = match throughput {
            Throughput::Bits(n)
            | Throughput::Bytes(n)
            | Throughput::BytesDecimal(n)
            | Throughput::Elements(n)
            | Throughput::ElementsAndBytes { elements: n, .. } => *n as f64,
        };
        values.iter_mut().for_each(|v| *v = per_iter * 1e9 / *v);
        "/s of CPU time"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

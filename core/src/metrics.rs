//! Metrics on a lock object: what [`OpenOptions::metrics`](crate::OpenOptions) turns on, at
//! every scope and through every front end, written once as a layer over the [`KeyedLock`]
//! trait.
//!
//! [`Metered`] wraps a lock object and counts what passes through it: acquisitions, the calls
//! that had to wait, timeouts, failed tries, cancelled waits, holds found ended behind their
//! holder's back (a lease's end, a force-unlock, a remote hold lost), holders that died, and
//! force-unlocks; and two histograms, the wait of each granted call and the hold of each
//! released acquisition. Counts are per lock object, never per key (the key space is
//! unbounded). [`KeyedLock::metrics`] reads them as a [`MetricsSnapshot`].
//!
//! Off by default, and then free: a lock object opened without `metrics` is the scope's own
//! object, with no layer and no check on any path. With them on, an acquire that may wait first
//! tries without waiting (that is how it knows the call had to wait, at every scope), reads the
//! clock when it waits and when a hold starts and ends, and adds to a few counters.
//!
//! With the cargo feature `metrics`, every count and histogram also goes to the
//! [`metrics`](https://docs.rs/metrics) facade, labelled `lock = NAME` (see
//! [`Metered::new`]), so that whichever exporter the program installs (Prometheus,
//! OpenTelemetry, ...) picks them up. Install the exporter before opening the lock object: its
//! handles are registered once, at open.
//!
//! ```
//! use keylock_core::{KeyedLock, LockKey, LockOptions, OpenOptions, Wait, open_with};
//! let locks = open_with("local:", &OpenOptions::new().metrics(true)).unwrap();
//! let held = locks.acquire(LockKey::new(b"k"), &LockOptions::new()).unwrap();
//! let tried = locks.acquire(LockKey::new(b"k"), &LockOptions::new().wait(Wait::No));
//! assert!(tried.is_err());
//! locks.release(held).unwrap();
//! let m = locks.metrics().unwrap();
//! assert_eq!((m.acquired, m.would_block, m.contended, m.hold.count()), (1, 1, 0, 1));
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner, Wait};
use crate::error::{Error, Result};
use crate::report::KeyReport;
use crate::scope::{AcquireFuture, AcquireManyFuture, KeyedLock, LockKey};
use crate::stats::ScopeStats;

/// Buckets of a histogram ([`HistogramSnapshot`]): bucket 0 counts zero, bucket `i` the
/// durations of `2^(i-1)` to `2^i - 1` nanoseconds; the last one everything from `2^62` ns
/// (146 years) up.
pub const BUCKETS: usize = 64;

/// A histogram of durations in power-of-two buckets of nanoseconds, counted with relaxed
/// atomics (a snapshot may see one record's count before its sum).
struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Histogram {
    fn new() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }

    fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns)].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
        self.max_ns.fetch_max(ns, Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Relaxed)),
            sum_ns: self.sum_ns.load(Relaxed),
            max_ns: self.max_ns.load(Relaxed),
        }
    }
}

/// The bucket of `ns` nanoseconds.
fn bucket_of(ns: u64) -> usize {
    ((u64::BITS - ns.leading_zeros()) as usize).min(BUCKETS - 1)
}

/// A histogram of durations read from a lock object's [`MetricsSnapshot`].
#[derive(Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistogramSnapshot {
    /// Bucket 0 counts durations of 0 ns, bucket `i` those of `2^(i-1)` to `2^i - 1` ns (see
    /// [`upper_bound_ns`](Self::upper_bound_ns)).
    pub buckets: [u64; BUCKETS],
    /// The sum of every recorded duration, in nanoseconds.
    pub sum_ns: u64,
    /// The longest recorded duration, in nanoseconds.
    pub max_ns: u64,
}

impl HistogramSnapshot {
    /// A histogram of these buckets, sum and maximum (a front end's copy, read back to ask
    /// [`quantile`](Self::quantile)).
    pub const fn new(buckets: [u64; BUCKETS], sum_ns: u64, max_ns: u64) -> Self {
        Self {
            buckets,
            sum_ns,
            max_ns,
        }
    }

    /// How many durations were recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The largest duration bucket `i` counts, in nanoseconds (`2^i - 1`; `u64::MAX` for the
    /// last): the `le` bound a Prometheus exporter gives it.
    pub fn upper_bound_ns(i: usize) -> u64 {
        if i >= BUCKETS - 1 {
            u64::MAX
        } else {
            (1u64 << i) - 1
        }
    }

    /// The `q` quantile (0 to 1) as the upper bound of the bucket that holds it, capped at
    /// the longest duration recorded: an overestimate by less than a factor of two. `None`
    /// when nothing was recorded.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
        // The rank of the quantile, 1-based (q = 0 is the first, q = 1 the last).
        let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Duration::from_nanos(
                    Self::upper_bound_ns(i).min(self.max_ns),
                ));
            }
        }
        Some(Duration::from_nanos(self.max_ns))
    }
}

impl fmt::Debug for HistogramSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistogramSnapshot")
            .field("count", &self.count())
            .field("sum_ns", &self.sum_ns)
            .field("max_ns", &self.max_ns)
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .finish_non_exhaustive()
    }
}

/// The counts of a lock object with metrics, from [`KeyedLock::metrics`]: totals since it was
/// opened. Every front end shows these under the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Acquisitions granted (an all-or-nothing acquire of several locks counts each lock it
    /// returns; a steal counts its one).
    pub acquired: u64,
    /// Calls that could not be granted at once and waited (or queued, or timed out, or were
    /// cancelled): the contended ones.
    pub contended: u64,
    /// Calls that waited as long as they were allowed and failed with `TimedOut`.
    pub timed_out: u64,
    /// Tries (`Wait::No`) that failed with `WouldBlock`.
    pub would_block: u64,
    /// Async acquires dropped before they finished (the caller cancelled the wait).
    pub cancelled: u64,
    /// Releases refused because the acquisition's lease had ended.
    pub lease_expired: u64,
    /// Acquisitions whose previous holder died holding the key (`owner_died`).
    pub owner_died: u64,
    /// Releases refused because the hold had ended behind its holder's back: force-unlocked,
    /// stolen, or lost by a remote scope.
    pub lost: u64,
    /// Force-unlocks through this lock object that freed a held key.
    pub force_unlocked: u64,
    /// How long each granted call waited (0 when granted at once).
    pub wait: HistogramSnapshot,
    /// How long each released acquisition was held, from its grant to its release.
    pub hold: HistogramSnapshot,
}

/// What a lock object counts (see the [module docs](self)).
struct Metrics {
    acquired: AtomicU64,
    contended: AtomicU64,
    timed_out: AtomicU64,
    would_block: AtomicU64,
    cancelled: AtomicU64,
    lease_expired: AtomicU64,
    owner_died: AtomicU64,
    lost: AtomicU64,
    force_unlocked: AtomicU64,
    wait: Histogram,
    hold: Histogram,
    #[cfg(feature = "metrics")]
    facade: facade::Facade,
}

/// One count of [`Metrics`], named for the facade.
#[derive(Clone, Copy)]
enum Count {
    Acquired,
    Contended,
    TimedOut,
    WouldBlock,
    Cancelled,
    LeaseExpired,
    OwnerDied,
    Lost,
    ForceUnlocked,
}

impl Metrics {
    fn new(_name: &str) -> Self {
        Self {
            acquired: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            would_block: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            lease_expired: AtomicU64::new(0),
            owner_died: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            force_unlocked: AtomicU64::new(0),
            wait: Histogram::new(),
            hold: Histogram::new(),
            #[cfg(feature = "metrics")]
            facade: facade::Facade::new(_name),
        }
    }

    fn cell(&self, count: Count) -> &AtomicU64 {
        match count {
            Count::Acquired => &self.acquired,
            Count::Contended => &self.contended,
            Count::TimedOut => &self.timed_out,
            Count::WouldBlock => &self.would_block,
            Count::Cancelled => &self.cancelled,
            Count::LeaseExpired => &self.lease_expired,
            Count::OwnerDied => &self.owner_died,
            Count::Lost => &self.lost,
            Count::ForceUnlocked => &self.force_unlocked,
        }
    }

    fn add(&self, count: Count, n: u64) {
        self.cell(count).fetch_add(n, Relaxed);
        #[cfg(feature = "metrics")]
        self.facade.add(count, n);
    }

    fn waited(&self, d: Duration) {
        self.wait.record(d);
        #[cfg(feature = "metrics")]
        self.facade.wait.record(d.as_secs_f64());
    }

    fn held(&self, d: Duration) {
        self.hold.record(d);
        #[cfg(feature = "metrics")]
        self.facade.hold.record(d.as_secs_f64());
    }

    /// Counts a granted acquisition and starts its hold.
    fn granted(&self, acq: &mut Acquisition, now: Instant) {
        self.add(Count::Acquired, 1);
        if acq.owner_died {
            self.add(Count::OwnerDied, 1);
        }
        acq.metered_since = Some(now);
    }

    /// Counts how an acquire call ended. `waited_since`: when it started, for a call that
    /// could not be granted at once (`None`: granted or refused at once).
    fn ended<T: Grants>(&self, got: &mut Result<T>, waited_since: Option<Instant>) {
        match got {
            Ok(acqs) => {
                let now = Instant::now();
                self.waited(waited_since.map_or(Duration::ZERO, |t| now - t));
                acqs.each(|acq| self.granted(acq, now));
            }
            Err(Error::WouldBlock) => self.add(Count::WouldBlock, 1),
            Err(Error::TimedOut) => self.add(Count::TimedOut, 1),
            Err(_) => {}
        }
    }

    /// Counts a release (or a check) that found `acq` no longer current.
    fn stale(&self, e: &Error, owner: Option<Owner>) {
        match e {
            Error::LeaseExpired => self.add(Count::LeaseExpired, 1),
            // A reentrant lock's release by another owner is the caller's mistake, not a loss.
            Error::NotOwner if owner.is_none() => self.add(Count::Lost, 1),
            _ => {}
        }
    }

    fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            acquired: self.acquired.load(Relaxed),
            contended: self.contended.load(Relaxed),
            timed_out: self.timed_out.load(Relaxed),
            would_block: self.would_block.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            lease_expired: self.lease_expired.load(Relaxed),
            owner_died: self.owner_died.load(Relaxed),
            lost: self.lost.load(Relaxed),
            force_unlocked: self.force_unlocked.load(Relaxed),
            wait: self.wait.snapshot(),
            hold: self.hold.snapshot(),
        }
    }
}

/// One acquisition or several, as an acquire call returns them.
trait Grants {
    fn each(&mut self, f: impl FnMut(&mut Acquisition));
}

impl Grants for Acquisition {
    fn each(&mut self, mut f: impl FnMut(&mut Acquisition)) {
        f(self);
    }
}

impl Grants for Vec<Acquisition> {
    fn each(&mut self, f: impl FnMut(&mut Acquisition)) {
        self.iter_mut().for_each(f);
    }
}

/// `opts` as a try, and as the wait that is left after the try (a deadline, so that the try's
/// time counts against it).
fn try_then(opts: &LockOptions, start: Instant) -> (LockOptions, LockOptions) {
    let mut first = *opts;
    first.wait = Wait::No;
    let mut then = *opts;
    if let Wait::For(d) = opts.wait {
        then.wait = start.checked_add(d).map_or(Wait::Forever, Wait::Until);
    }
    (first, then)
}

/// `acq` as its scope made it, without the hold's start.
fn scope_record(acq: &Acquisition) -> Acquisition {
    let mut copy = acq.duplicate();
    copy.metered_since = None;
    copy
}

/// A lock object with metrics: every call goes to the wrapped one, and what it did is counted.
/// [`open_with`](crate::open_with) makes one when [`OpenOptions::metrics`](crate::OpenOptions)
/// is set; Rust code can wrap any lock object itself with [`Metered::new`].
pub struct Metered {
    inner: Arc<dyn KeyedLock>,
    metrics: Arc<Metrics>,
}

impl fmt::Debug for Metered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metered")
            .field("inner", &self.inner)
            .field("metrics", &self.metrics.snapshot())
            .finish()
    }
}

impl Metered {
    /// `inner` with metrics. `name` labels them for the `metrics` facade (cargo feature
    /// `metrics`), as `lock = NAME`; it is not used otherwise.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use keylock_core::{KeyPool, KeyedLock, LockKey, LockOptions, Metered};
    /// let locks = Arc::new(Metered::new(Arc::new(KeyPool::<Vec<u8>>::new()), "orders"));
    /// let acq = locks.acquire(LockKey::new(b"k"), &LockOptions::new()).unwrap();
    /// locks.release(acq).unwrap();
    /// assert_eq!(locks.metrics().unwrap().acquired, 1);
    /// ```
    pub fn new(inner: Arc<dyn KeyedLock>, name: &str) -> Self {
        Self {
            inner,
            metrics: Arc::new(Metrics::new(name)),
        }
    }

    /// The lock object this one counts for.
    pub fn inner(&self) -> &Arc<dyn KeyedLock> {
        &self.inner
    }

    /// A blocking acquire (`call`, of one key or several) as `opts` asks, counted: a call
    /// that may wait first tries without waiting, and waits (counted as contended) only when
    /// the try would block, until the deadline the call began with.
    fn counted<T: Grants>(
        &self,
        opts: &LockOptions,
        call: impl Fn(&LockOptions) -> Result<T>,
    ) -> Result<T> {
        let m = &*self.metrics;
        if opts.wait == Wait::No {
            let mut got = call(opts);
            m.ended(&mut got, None);
            return got;
        }
        let start = Instant::now();
        let (first, then) = try_then(opts, start);
        let mut got = call(&first);
        let waited = if matches!(got, Err(Error::WouldBlock)) {
            m.add(Count::Contended, 1);
            got = call(&then);
            Some(start)
        } else {
            None
        };
        m.ended(&mut got, waited);
        got
    }
}

/// Counts a cancelled call if dropped while armed: the async acquires' guard.
struct CancelGuard<'a>(&'a Metrics, bool);

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.add(Count::Cancelled, 1);
        }
    }
}

impl KeyedLock for Metered {
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        self.counted(opts, |o| self.inner.acquire(key, o))
    }

    fn acquire_async(self: Arc<Self>, key: LockKey<'_>, opts: &LockOptions) -> AcquireFuture {
        let start = Instant::now();
        let (first, then) = try_then(opts, start);
        let try_now = self.inner.clone().acquire_async(key, &first);
        let space = key.space;
        let bytes = (opts.wait != Wait::No).then(|| key.bytes.to_vec());
        Box::pin(async move {
            let m = &*self.metrics;
            let mut cancel = CancelGuard(m, true);
            let mut got = try_now.await;
            let mut waited = None;
            if let (Err(Error::WouldBlock), Some(bytes)) = (&got, &bytes) {
                m.add(Count::Contended, 1);
                let key = LockKey { space, bytes };
                got = self.inner.clone().acquire_async(key, &then).await;
                waited = Some(start);
            }
            cancel.1 = false;
            m.ended(&mut got, waited);
            got
        })
    }

    fn acquire_many(
        &self,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> Result<Vec<Acquisition>> {
        self.counted(opts, |o| self.inner.acquire_many(keys, o))
    }

    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> AcquireManyFuture {
        let start = Instant::now();
        let (first, then) = try_then(opts, start);
        let try_now = self.inner.clone().acquire_many_async(keys, &first);
        let owned: Option<Vec<_>> = (opts.wait != Wait::No).then(|| {
            keys.iter()
                .map(|(k, mode)| (k.space, k.bytes.to_vec(), *mode))
                .collect()
        });
        Box::pin(async move {
            let m = &*self.metrics;
            let mut cancel = CancelGuard(m, true);
            let mut got = try_now.await;
            let mut waited = None;
            if let (Err(Error::WouldBlock), Some(owned)) = (&got, &owned) {
                m.add(Count::Contended, 1);
                let keys: Vec<_> = owned
                    .iter()
                    .map(|(space, bytes, mode)| {
                        (
                            LockKey {
                                space: *space,
                                bytes,
                            },
                            *mode,
                        )
                    })
                    .collect();
                got = self.inner.clone().acquire_many_async(&keys, &then).await;
                waited = Some(start);
            }
            cancel.1 = false;
            m.ended(&mut got, waited);
            got
        })
    }

    fn release_as(&self, mut acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
        let since = acquisition.metered_since.take();
        let got = self.inner.release_as(acquisition, owner);
        match &got {
            Ok(()) => {
                if let Some(since) = since {
                    self.metrics.held(since.elapsed());
                }
            }
            Err(e) => self.metrics.stale(e, owner),
        }
        got
    }

    fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        // The scope's own record goes in without the hold's start (a scope compares records).
        let since = acquisition.metered_since.take();
        let got = self.inner.extend(acquisition, lease);
        acquisition.metered_since = since;
        got
    }

    fn is_current_as(&self, acquisition: &Acquisition, owner: Option<Owner>) -> Result<bool> {
        self.inner.is_current_as(&scope_record(acquisition), owner)
    }

    fn force_unlock(&self, key: LockKey<'_>) -> Result<bool> {
        let got = self.inner.force_unlock(key);
        if matches!(got, Ok(true)) {
            self.metrics.add(Count::ForceUnlocked, 1);
        }
        got
    }

    fn steal(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        let mut got = self.inner.steal(key, opts);
        self.metrics.ended(&mut got, None);
        got
    }

    fn is_locked(&self, key: LockKey<'_>) -> Result<bool> {
        self.inner.is_locked(key)
    }

    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>> {
        self.inner.info(key)
    }

    fn is_reentrant(&self) -> bool {
        self.inner.is_reentrant()
    }

    fn stats(&self) -> Result<ScopeStats> {
        self.inner.stats()
    }

    fn list(&self) -> Result<Vec<KeyReport>> {
        self.inner.list()
    }

    fn permits(&self) -> Option<u32> {
        self.inner.permits()
    }

    fn would_wait(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<bool> {
        self.inner.would_wait(key, opts)
    }

    fn stripes(&self) -> Option<usize> {
        self.inner.stripes()
    }

    fn stripe_of(&self, key: LockKey<'_>) -> Option<usize> {
        self.inner.stripe_of(key)
    }

    fn lost_signal(&self, acquisition: &Acquisition) -> Option<crate::LostSignal> {
        self.inner.lost_signal(&scope_record(acquisition))
    }

    fn metrics(&self) -> Option<MetricsSnapshot> {
        Some(self.metrics.snapshot())
    }
}

/// The `metrics` facade's handles of one lock object, registered at open.
#[cfg(feature = "metrics")]
mod facade {
    use super::Count;

    pub(super) struct Facade {
        counters: [metrics::Counter; 9],
        pub(super) wait: metrics::Histogram,
        pub(super) hold: metrics::Histogram,
    }

    /// The facade's name of each count, in [`Count`]'s order.
    const NAMES: [&str; 9] = [
        "keylock_acquired_total",
        "keylock_contended_total",
        "keylock_timed_out_total",
        "keylock_would_block_total",
        "keylock_cancelled_total",
        "keylock_lease_expired_total",
        "keylock_owner_died_total",
        "keylock_lost_total",
        "keylock_force_unlocked_total",
    ];

    impl Facade {
        pub(super) fn new(name: &str) -> Self {
            let label = name.to_owned();
            Self {
                counters: NAMES.map(|n| metrics::counter!(n, "lock" => label.clone())),
                wait: metrics::histogram!("keylock_wait_seconds", "lock" => label.clone()),
                hold: metrics::histogram!("keylock_hold_seconds", "lock" => label),
            }
        }

        pub(super) fn add(&self, count: Count, n: u64) {
            self.counters[count as usize].increment(n);
        }
    }
}

//! Shared helpers for the integration tests.
// Each test crate uses its own subset of these helpers.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::thread;
use std::time::Duration;

/// Runs `body` on its own thread and fails the test if it has not finished within `limit`:
/// a hang is reported as a deadlock instead of hanging CI.
///
/// The hand-back uses parking_lot rather than std's channels: under ThreadSanitizer the
/// standard library is not instrumented here, and its channels would report false races.
pub(crate) fn within<T: Send + 'static>(
    limit: Duration,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let done = Arc::new((parking_lot::Mutex::new(false), parking_lot::Condvar::new()));
    let signal = done.clone();
    let handle = thread::spawn(move || {
        struct Finish(Arc<(parking_lot::Mutex<bool>, parking_lot::Condvar)>);
        impl Drop for Finish {
            // Runs on return and on panic alike.
            fn drop(&mut self) {
                *self.0.0.lock() = true;
                self.0.1.notify_all();
            }
        }
        let _finish = Finish(signal);
        body()
    });
    let (lock, cond) = &*done;
    let mut finished = lock.lock();
    if !*finished {
        let _ = cond.wait_for(&mut finished, limit);
    }
    if !*finished {
        panic!("deadlock: test body did not finish within {limit:?}");
    }
    drop(finished);
    match handle.join() {
        Ok(out) => out,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Waits (bounded: 20 s) until `cond` holds, looking every 5 ms; fails the test otherwise.
pub(crate) fn wait_until(mut cond: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < until,
            "condition not reached within 20 s"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// A counter that is deliberately not atomic: only the lock under test makes it correct.
pub(crate) struct Racy(std::cell::UnsafeCell<u64>);

// SAFETY: every access in the tests happens under the lock being tested; a lost update shows up
// as a wrong final count, which is what the tests check.
unsafe impl Sync for Racy {}

impl Racy {
    pub(crate) fn new() -> Self {
        Self(std::cell::UnsafeCell::new(0))
    }

    /// Read-modify-write in two steps, with a yield point between them to widen any race.
    pub(crate) fn bump(&self) {
        // SAFETY: see the Sync impl.
        unsafe {
            let v = std::ptr::read_volatile(self.0.get());
            std::hint::spin_loop();
            std::ptr::write_volatile(self.0.get(), v + 1);
        }
    }

    pub(crate) fn get(&self) -> u64 {
        // SAFETY: read after all writers joined.
        unsafe { *self.0.get() }
    }

    /// The first half of a split increment: read now, [`store`](Racy::store) the new value after
    /// an await point inside the critical section.
    pub(crate) fn load(&self) -> u64 {
        // SAFETY: see the Sync impl.
        unsafe { std::ptr::read_volatile(self.0.get()) }
    }

    pub(crate) fn store(&self, v: u64) {
        // SAFETY: see the Sync impl.
        unsafe { std::ptr::write_volatile(self.0.get(), v) }
    }
}

/// Who is inside each critical section, counted as it happens.
///
/// Each stress test wraps the body of a critical section in an [`Inside`] (from [`hold`] or
/// [`hold_shared`], made right after the lock is taken and dropped before it is released). The
/// entry counts the holders of that key inside at that moment; the exit counts whether the body
/// ran to its end ([`Inside::complete`]) or was cut short (dropped without it: a future
/// cancelled or timed out while holding the lock, or a panic). A final count of increments
/// alone cannot tell an overlap from an entry that a cancel legitimately interrupted: both leave
/// fewer increments than entries. [`check`] tells them apart.
///
/// [`hold`]: Occupancy::hold
/// [`hold_shared`]: Occupancy::hold_shared
/// [`check`]: Occupancy::check
pub(crate) struct Occupancy {
    /// Exclusive and shared holders inside now, per key.
    exclusive: Vec<AtomicUsize>,
    shared: Vec<AtomicUsize>,
    /// The most exclusive holders seen inside at once, per key.
    max_exclusive: Vec<AtomicUsize>,
    /// The most shared holders seen inside at once, per key.
    max_shared: Vec<AtomicUsize>,
    /// Entries that found another holder inside that the lock should have kept out.
    overlaps: AtomicUsize,
    entered: AtomicUsize,
    completed: AtomicUsize,
    interrupted: AtomicUsize,
}

/// One holder inside a critical section (see [`Occupancy`]).
#[must_use = "an Inside counts the holder inside until it is dropped"]
pub(crate) struct Inside<'a> {
    occupancy: &'a Occupancy,
    key: usize,
    shared: bool,
    completed: bool,
}

impl Occupancy {
    pub(crate) fn new(keys: usize) -> Self {
        let zeros = || (0..keys).map(|_| AtomicUsize::new(0)).collect();
        Self {
            exclusive: zeros(),
            shared: zeros(),
            max_exclusive: zeros(),
            max_shared: zeros(),
            overlaps: AtomicUsize::new(0),
            entered: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
            interrupted: AtomicUsize::new(0),
        }
    }

    /// An exclusive holder of `key` enters.
    pub(crate) fn hold(&self, key: usize) -> Inside<'_> {
        self.entered.fetch_add(1, SeqCst);
        let n = self.exclusive[key].fetch_add(1, SeqCst) + 1;
        self.max_exclusive[key].fetch_max(n, SeqCst);
        if n > 1 || self.shared[key].load(SeqCst) != 0 {
            self.overlaps.fetch_add(1, SeqCst);
        }
        Inside {
            occupancy: self,
            key,
            shared: false,
            completed: false,
        }
    }

    /// A shared holder (a reader) of `key` enters.
    pub(crate) fn hold_shared(&self, key: usize) -> Inside<'_> {
        self.entered.fetch_add(1, SeqCst);
        let n = self.shared[key].fetch_add(1, SeqCst) + 1;
        self.max_shared[key].fetch_max(n, SeqCst);
        if self.exclusive[key].load(SeqCst) != 0 {
            self.overlaps.fetch_add(1, SeqCst);
        }
        Inside {
            occupancy: self,
            key,
            shared: true,
            completed: false,
        }
    }

    /// Entries that found another holder inside that the lock should have kept out.
    pub(crate) fn overlaps(&self) -> usize {
        self.overlaps.load(SeqCst)
    }

    /// The most shared holders of `key` seen inside at once.
    pub(crate) fn max_shared(&self, key: usize) -> usize {
        self.max_shared[key].load(SeqCst)
    }

    /// Critical sections that ran to their end.
    pub(crate) fn completed(&self) -> usize {
        self.completed.load(SeqCst)
    }

    /// Critical sections cut short.
    pub(crate) fn interrupted(&self) -> usize {
        self.interrupted.load(SeqCst)
    }

    /// No overlap; the most exclusive holders inside at once was exactly 1 for every key
    /// entered exclusively; every entry completed or was interrupted; nobody is inside now.
    pub(crate) fn check(&self) {
        let load = |v: &[AtomicUsize]| v.iter().map(|a| a.load(SeqCst)).collect::<Vec<_>>();
        assert_eq!(
            self.overlaps.load(SeqCst),
            0,
            "entries that found another holder inside"
        );
        let entered = self.entered.load(SeqCst);
        assert!(entered > 0, "no critical section was entered");
        let max = load(&self.max_exclusive);
        assert!(
            max.iter().all(|&m| m <= 1),
            "most exclusive holders at once, per key: {max:?}"
        );
        assert_eq!(
            self.completed() + self.interrupted(),
            entered,
            "completed + interrupted == entered"
        );
        assert!(
            load(&self.exclusive).iter().all(|&n| n == 0),
            "still inside"
        );
        assert!(load(&self.shared).iter().all(|&n| n == 0), "still inside");
    }
}

impl Inside<'_> {
    /// The critical section ran to its end.
    pub(crate) fn complete(mut self) {
        self.completed = true;
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        let o = self.occupancy;
        let now = if self.shared { &o.shared } else { &o.exclusive };
        now[self.key].fetch_sub(1, SeqCst);
        if self.completed {
            o.completed.fetch_add(1, SeqCst);
        } else {
            o.interrupted.fetch_add(1, SeqCst);
        }
    }
}

/// Waits for child `pid` for at most `limit` (killing it then): whether it exited with 0.
#[cfg(unix)]
pub(crate) fn child_succeeded(pid: libc::pid_t, limit: Duration) -> bool {
    let start = std::time::Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waiting for our own child, without blocking.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            return libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        }
        if start.elapsed() > limit {
            // SAFETY: our own child, which hung.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

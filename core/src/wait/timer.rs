//! One timer thread per process, for async waiters that must look again at a set time.
//!
//! A blocked thread parks with a timeout of its own. A future cannot: the core depends on no
//! runtime. The only time a waiting future must wake without a release is when the holder's
//! lease ends, so the future asks this module to wake it then. The thread starts on the first
//! such request (never, in a program that uses no leases) and serves every lock object in the
//! process; there is no thread per lock.

use std::task::Waker;
use std::time::Instant;

/// Wakes `waker` at `at` (or soon after). Spurious extra wake-ups are harmless: the future
/// looks again and goes back to waiting.
#[cfg(not(keylock_loom))]
pub(crate) fn wake_at(at: Instant, waker: Waker) {
    imp::wake_at(at, waker);
}

/// Under loom time does not pass; a lease that ends has ended already, so wake at once.
#[cfg(keylock_loom)]
pub(crate) fn wake_at(_at: Instant, waker: Waker) {
    waker.wake();
}

#[cfg(not(keylock_loom))]
mod imp {
    use std::cmp::{Ordering, Reverse};
    use std::collections::BinaryHeap;
    use std::sync::{Condvar, Mutex, OnceLock};
    use std::task::Waker;
    use std::time::Instant;

    struct Entry {
        at: Instant,
        seq: u64,
        waker: Waker,
    }

    impl PartialEq for Entry {
        fn eq(&self, other: &Self) -> bool {
            (self.at, self.seq) == (other.at, other.seq)
        }
    }
    impl Eq for Entry {}
    impl PartialOrd for Entry {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Entry {
        fn cmp(&self, other: &Self) -> Ordering {
            (self.at, self.seq).cmp(&(other.at, other.seq))
        }
    }

    #[derive(Default)]
    struct State {
        heap: BinaryHeap<Reverse<Entry>>,
        seq: u64,
    }

    struct Timer {
        state: Mutex<State>,
        changed: Condvar,
    }

    fn timer() -> &'static Timer {
        static TIMER: OnceLock<&'static Timer> = OnceLock::new();
        TIMER.get_or_init(|| {
            let timer: &'static Timer = Box::leak(Box::new(Timer {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }));
            std::thread::Builder::new()
                .name("keylock-timer".into())
                .spawn(move || run(timer))
                .expect("keylock: cannot start the timer thread");
            timer
        })
    }

    fn run(timer: &'static Timer) {
        let mut state = timer.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while state.heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
                if let Some(Reverse(entry)) = state.heap.pop() {
                    due.push(entry.waker);
                }
            }
            if !due.is_empty() {
                drop(state);
                for waker in due {
                    waker.wake();
                }
                state = timer.state.lock().unwrap_or_else(|e| e.into_inner());
                continue;
            }
            state = match state.heap.peek() {
                Some(Reverse(next)) => {
                    let wait = next.at.saturating_duration_since(now);
                    timer
                        .changed
                        .wait_timeout(state, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => timer.changed.wait(state).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }

    pub(super) fn wake_at(at: Instant, waker: Waker) {
        let timer = timer();
        let mut state = timer.state.lock().unwrap_or_else(|e| e.into_inner());
        let earliest = state.heap.peek().is_none_or(|Reverse(e)| at < e.at);
        state.seq += 1;
        let seq = state.seq;
        state.heap.push(Reverse(Entry { at, seq, waker }));
        drop(state);
        if earliest {
            timer.changed.notify_one();
        }
    }
}

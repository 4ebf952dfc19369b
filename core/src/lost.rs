//! [`LostSignal`]: how the holder of a remote acquisition learns that it lost the lock.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How the holder of a remote acquisition learns that it lost the lock.
///
/// A lock that lives in another process (Redis) can be lost behind its holder's back: its lease
/// ran out because the holder's process could not renew it, or somebody force-unlocked it. The
/// scope that made the acquisition fires its signal once, when it finds out; the holder can ask
/// ([`is_lost`](LostSignal::is_lost)), block ([`wait_timeout`](LostSignal::wait_timeout)),
/// await ([`lost`](LostSignal::lost), on any executor), or register a callback
/// ([`on_lost`](LostSignal::on_lost)). Each front end maps one of these to its own idiom:
/// Python's `handle.lost` and an awaitable, Node's `AbortSignal`, C's query call.
///
/// [`KeyedLock::lost_signal`](crate::KeyedLock::lost_signal) hands out the signal of an
/// acquisition; in-process scopes have none (`None`), since their holders cannot be cut off.
///
/// ```
/// use std::time::Duration;
/// use keylock_core::LostSignal;
///
/// let signal = LostSignal::new();
/// assert!(!signal.is_lost());
/// assert!(!signal.wait_timeout(Duration::from_millis(1)));
/// signal.fire();
/// assert!(signal.is_lost() && signal.wait_timeout(Duration::ZERO));
/// ```
#[derive(Clone, Default)]
pub struct LostSignal(Arc<Inner>);

#[derive(Default)]
struct Inner {
    /// Set once, never cleared.
    lost: AtomicBool,
    /// Who to tell: wakers of pending [`Lost`] futures and callbacks, taken when fired.
    waiting: Mutex<Waiting>,
    /// Threads in `wait_timeout`.
    cond: Condvar,
}

#[derive(Default)]
struct Waiting {
    wakers: Vec<Waker>,
    callbacks: Vec<Box<dyn FnOnce() + Send>>,
}

impl LostSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the acquisition is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.0.lost.load(Ordering::Acquire)
    }

    /// Fires the signal (the scope that made the acquisition does this): wakes every waiter and
    /// runs every callback, once. Later calls do nothing.
    pub fn fire(&self) {
        let taken = {
            let mut waiting = self.0.waiting.lock();
            if self.0.lost.swap(true, Ordering::AcqRel) {
                return;
            }
            std::mem::take(&mut *waiting)
        };
        self.0.cond.notify_all();
        for waker in taken.wakers {
            waker.wake();
        }
        for callback in taken.callbacks {
            callback();
        }
    }

    /// Blocks until the signal fires or `timeout` passes; whether it fired.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let until = Instant::now().checked_add(timeout);
        let mut waiting = self.0.waiting.lock();
        while !self.is_lost() {
            match until {
                Some(t) => {
                    if self.0.cond.wait_until(&mut waiting, t).timed_out() {
                        return self.is_lost();
                    }
                }
                None => self.0.cond.wait(&mut waiting),
            }
        }
        true
    }

    /// A future that resolves once the signal fires (on any executor).
    pub fn lost(&self) -> Lost {
        Lost(self.clone())
    }

    /// Runs `callback` once when the signal fires, on the thread that fires it (at once, on
    /// this thread, if it has fired already). It must not block: it runs on the scope's own
    /// thread. Node's `AbortController.abort` through a threadsafe function is the model.
    pub fn on_lost(&self, callback: impl FnOnce() + Send + 'static) {
        {
            let mut waiting = self.0.waiting.lock();
            if !self.is_lost() {
                waiting.callbacks.push(Box::new(callback));
                return;
            }
        }
        callback();
    }
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostSignal")
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// The future of [`LostSignal::lost`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Lost(LostSignal);

impl Future for Lost {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.is_lost() {
            return Poll::Ready(());
        }
        let mut waiting = self.0.0.waiting.lock();
        if self.0.is_lost() {
            return Poll::Ready(());
        }
        if !waiting.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            waiting.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn fires_once_for_every_kind_of_waiter() {
        let signal = LostSignal::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&calls);
        signal.on_lost(move || {
            c.fetch_add(1, Ordering::SeqCst);
        });
        let s = signal.clone();
        let waiter = std::thread::spawn(move || s.wait_timeout(Duration::from_secs(30)));
        let s = signal.clone();
        let task = std::thread::spawn(move || {
            let mut fut = std::pin::pin!(s.lost());
            crate::wait::block_on_until(
                fut.as_mut(),
                Some(Instant::now() + Duration::from_secs(30)),
            )
            .is_ready()
        });
        std::thread::sleep(Duration::from_millis(20));
        signal.fire();
        signal.fire();
        assert!(waiter.join().unwrap());
        assert!(task.join().unwrap());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let c = Arc::clone(&calls);
        signal.on_lost(move || {
            c.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "a late callback runs at once"
        );
    }
}

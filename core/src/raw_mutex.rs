//! The mutex behind each stripe and behind the RwLock's writer side.
//!
//! Uncontended, it is one compare-and-swap to lock and one to unlock. Contended, waiters spin
//! briefly, then queue in a [`WaitList`] that holds parked threads and async tasks alike.

use std::time::Instant;

use crate::sync::{AtomicU8, AtomicU32, Mutex, MutexGuard, Ordering};
use crate::wait::{Queue, WaitList, Wake, wait_blocking};

/// Bit 0 of `state`: the mutex is held.
const LOCKED: u8 = 1;
/// Bit 1 of `state`: the wait list may be non-empty, so an unlock must take the slow path and
/// look at it. Only changed with the queue lock held.
const QUEUED: u8 = 2;

/// A queue-capable mutex with no data.
#[derive(Debug)]
pub(crate) struct RawMutex {
    /// `LOCKED | QUEUED` bits, see above.
    state: AtomicU8,
    /// Bumped by each holder right after acquiring (only the holder writes it); a guard releases
    /// only if it still matches, so a guard whose acquisition was released explicitly cannot
    /// release a later holder's.
    generation: AtomicU32,
    /// The waiters, guarded by their own short lock.
    queue: Mutex<WaitList>,
}

impl Default for RawMutex {
    fn default() -> Self {
        Self::new()
    }
}

impl RawMutex {
    #[cfg(not(keylock_loom))]
    pub(crate) const fn new() -> Self {
        Self {
            state: AtomicU8::new(0),
            generation: AtomicU32::new(0),
            queue: Mutex::new(WaitList::new()),
        }
    }

    #[cfg(keylock_loom)]
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicU8::new(0),
            generation: AtomicU32::new(0),
            queue: Mutex::new(WaitList::new()),
        }
    }

    /// Takes the mutex if it is free. Succeeds even while others are queued (a released mutex
    /// is up for grabs until a notified waiter takes it; see `wait`'s hand-off protocol).
    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & LOCKED != 0 {
                return false;
            }
            match self.state.compare_exchange_weak(
                state,
                state | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => state = now,
            }
        }
    }

    /// Blocks until the mutex is taken, or `deadline` passes (then `false`).
    #[inline]
    pub(crate) fn lock(&self, deadline: Option<Instant>) -> bool {
        if self
            .state
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
        self.lock_slow(deadline)
    }

    #[cold]
    fn lock_slow(&self, deadline: Option<Instant>) -> bool {
        wait_blocking(self, deadline, || {
            // Spin only while nobody is parked: queued waiters go first.
            self.state.load(Ordering::Relaxed) & QUEUED == 0 && self.try_lock()
        })
    }

    /// Releases the mutex; `false` when it was not locked.
    #[inline]
    pub(crate) fn unlock(&self) -> bool {
        if self
            .state
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
        self.unlock_slow()
    }

    #[cold]
    fn unlock_slow(&self) -> bool {
        let mut queue = self.queue.lock();
        let state = self.state.load(Ordering::Relaxed);
        if state & LOCKED == 0 {
            return false;
        }
        let wake = match queue.pop_front() {
            None => {
                // QUEUED is only set with the queue lock held and a waiter about to link, so an
                // empty list here means no waiter: clear both bits.
                self.state.store(0, Ordering::Release);
                None
            }
            Some(head) => {
                if queue.is_empty() {
                    self.state.fetch_and(!QUEUED, Ordering::Relaxed);
                }
                if head.is_due() {
                    // Hand-off: LOCKED stays set and now belongs to the waiter.
                    head.grant()
                } else {
                    self.state.fetch_and(!LOCKED, Ordering::Release);
                    head.notify()
                }
            }
        };
        drop(queue);
        if let Some(wake) = wake {
            wake.wake();
        }
        true
    }

    /// Called by a new holder: starts its acquisition and returns its generation.
    #[inline]
    pub(crate) fn begin(&self) -> u32 {
        let generation = self.generation.load(Ordering::Relaxed).wrapping_add(1);
        self.generation.store(generation, Ordering::Relaxed);
        generation
    }

    /// Releases the acquisition numbered `generation`, if it is still the current one.
    #[inline]
    pub(crate) fn unlock_if(&self, generation: u32) -> bool {
        self.generation.load(Ordering::Relaxed) == generation && self.unlock()
    }

    /// Whether waiters may be queued (a snapshot).
    #[inline]
    pub(crate) fn is_queued(&self) -> bool {
        self.state.load(Ordering::Relaxed) & QUEUED != 0
    }

    #[inline]
    pub(crate) fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }
}

impl Queue for RawMutex {
    type Locked<'a> = MutexGuard<'a, WaitList>;

    fn lock_queue<'q>(&'q self) -> Self::Locked<'q> {
        self.queue.lock()
    }

    fn waiters<'g, 'q>(&'q self, locked: &'g mut Self::Locked<'q>) -> &'g mut WaitList {
        locked
    }

    fn acquire_locked<'q>(&'q self, locked: &mut Self::Locked<'q>) -> bool {
        // Announce the waiter first, then look: an unlock that ran before this sees no QUEUED
        // and releases fully (we then take the mutex below); one that runs after must take the
        // queue lock we hold, and so will find our node.
        let mut state = self.state.fetch_or(QUEUED, Ordering::Acquire) | QUEUED;
        loop {
            if state & LOCKED != 0 {
                return false;
            }
            let queued = if locked.is_empty() { 0 } else { QUEUED };
            match self.state.compare_exchange_weak(
                state,
                LOCKED | queued,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => state = now,
            }
        }
    }

    fn leave_locked<'q>(&'q self, locked: &mut Self::Locked<'q>, notified: bool) -> Option<Wake> {
        if locked.is_empty() {
            self.state.fetch_and(!QUEUED, Ordering::Relaxed);
            return None;
        }
        if notified && self.state.load(Ordering::Relaxed) & LOCKED == 0 {
            let next = locked.pop_front()?;
            if locked.is_empty() {
                self.state.fetch_and(!QUEUED, Ordering::Relaxed);
            }
            return next.notify();
        }
        None
    }

    fn release_granted(&self) {
        self.unlock();
    }
}

//! Which JavaScript thread is running: an id per thread (the main thread and each worker), so
//! that a thread can tell its own activity on a shared lock from others' ([`crate::shared`]) and
//! a waker can tell whether it runs on its waiter's own thread ([`crate::reactor`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Source of per-thread ids.
static NEXT_THREAD_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_ID: u64 = NEXT_THREAD_ID.fetch_add(1, Ordering::Relaxed);
}

/// This JavaScript thread's id (stable for the thread's life).
pub(crate) fn thread_id() -> u64 {
    THREAD_ID.with(|id| *id)
}

//! The native half of the `keylock` Node.js package.
//!
//! This crate translates; it decides nothing about locking. Keys become byte slices
//! ([`keys`]), outcomes become small status numbers ([`status`]) that `index.js` turns into
//! `Error`s with a `code`, and async acquisitions run the core's owned futures on this thread's
//! event loop ([`reactor`]). Locks of the same name are shared by every worker of the process
//! ([`shared`]).
//!
//! The JavaScript-facing API (guards, `withLock`, options, `AbortSignal`, `using`) is in
//! `index.js`; the classes here are its private building blocks.

pub mod keys;
pub mod pool;
mod reactor;
pub mod rwlock;
mod shared;
mod status;
pub mod striped;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use napi::bindgen_prelude::{Function, Unknown};
use napi::{Env, Result};
use napi_derive::napi;

/// Installs this thread's dispatcher: `dispatch(ids)` receives the ids of waiters that acquired
/// their lock (ids with bit 31 set failed: a panic while polling them).
#[napi(catch_unwind)]
pub fn init(env: Env, dispatch: Function<'_, Vec<u32>, Unknown<'static>>) -> Result<()> {
    reactor::init(&env, dispatch)
}

/// Cancels a pending waiter: `true` when it was still pending (it then holds nothing).
#[napi(catch_unwind)]
pub fn cancel(id: u32) -> Result<bool> {
    reactor::cancel(id)
}

/// This thread's waiters: `[pending, keeping the event loop alive]` (for tests).
#[napi(catch_unwind)]
pub fn waiter_counts() -> Result<Vec<u32>> {
    reactor::counts().map(Vec::from)
}

/// Panics inside a synchronous export (for tests: it must throw, not crash).
#[napi(catch_unwind)]
pub fn testing_panic() {
    panic!("keylock: deliberate panic for a test");
}

/// Starts a waiter whose future panics when it is polled the second time (for tests: its
/// promise must reject, and the process must go on).
#[napi(catch_unwind)]
pub fn testing_panic_waiter() -> Result<u32> {
    reactor::start(Box::pin(PanicOnSecondPoll { polled: false }), None)
}

struct PanicOnSecondPoll {
    polled: bool,
}

impl Future for PanicOnSecondPoll {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.polled {
            panic!("keylock: deliberate panic in a waiter for a test");
        }
        self.polled = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

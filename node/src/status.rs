//! Outcomes of native calls as small numbers; `index.js` turns them into `Error`s with a `code`.
//!
//! The numbers and names are keylock-core's [`Status`] table, the one every front end shares
//! (C returns the same numbers); `index.js` reads the table from the addon ([`statuses`]) rather
//! than copying it. Expected outcomes (a lock that is taken, a timeout, an unlock of a free key)
//! are returned, not thrown: creating and catching an exception costs far more than the lock
//! operation itself.

use std::time::Duration;

use keylock_core::Status;

/// Done.
pub(crate) const OK: u32 = Status::Ok.code();

/// The lock is taken (a try).
pub(crate) const WOULD_BLOCK: u32 = Status::WouldBlock.code();

/// Added to a release's status when it woke a waiter of this same thread: `index.js` then
/// serves it at once (`runReady`) instead of waiting for the event loop's next turn, as a
/// pure-JavaScript lock hands over before `release()` returns. Above every status number.
pub(crate) const LOCAL_WAKE: u32 = 0x100;

const _: () = assert!((Status::ALL.len() as u32) < LOCAL_WAKE);

/// What a release or check of a slot that holds nothing reports (a guard released already):
/// the acquisition is not current.
pub(crate) const NOT_HELD: u32 = Status::NotOwner.code();

/// The status of a core result.
#[inline]
pub(crate) fn of<T>(result: keylock_core::Result<T>) -> u32 {
    Status::from(&result).code()
}

/// The status of a core error.
#[inline]
pub(crate) fn code(e: &keylock_core::Error) -> u32 {
    e.status().code()
}

/// `code`, plus [`LOCAL_WAKE`] when the call that made it woke a waiter of this thread.
#[inline]
pub(crate) fn with_local_wake(code: u32) -> u32 {
    if crate::reactor::take_local_wake() {
        code | LOCAL_WAKE
    } else {
        code
    }
}

/// One status of the table: `{ code, name, description }` in JavaScript.
#[napi_derive::napi(object)]
#[derive(Debug, Clone)]
pub struct StatusInfo {
    /// The number native calls return (C's `keylock_result`).
    pub code: u32,
    /// The name errors carry as their `code`, e.g. `KEYLOCK_TIMEOUT`.
    pub name: String,
    /// One line of English.
    pub description: String,
}

/// The status table, in number order.
pub(crate) fn statuses() -> Vec<StatusInfo> {
    Status::ALL
        .iter()
        .map(|s| StatusInfo {
            code: s.code(),
            name: s.name().to_owned(),
            description: s.description().to_owned(),
        })
        .collect()
}

/// A JavaScript timeout in milliseconds (validated finite and non-negative by `index.js`) as a
/// `Duration`; `None` (no timeout) for anything else.
pub(crate) fn timeout(ms: Option<f64>) -> Option<Duration> {
    ms.filter(|ms| ms.is_finite() && *ms >= 0.0)
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
}

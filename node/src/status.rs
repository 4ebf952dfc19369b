//! Outcomes of native calls as small numbers; `index.js` turns them into `Error`s with a `code`.
//!
//! Expected outcomes (a lock that is taken, a timeout, an unlock of a free key) are returned, not
//! thrown: creating and catching an exception costs far more than the lock operation itself.

use std::time::Duration;

use keylock_core::Error;

/// Done.
pub(crate) const OK: u32 = 0;
/// A try found the lock taken.
pub(crate) const WOULD_BLOCK: u32 = 1;
/// A timed wait ran out.
pub(crate) const TIMED_OUT: u32 = 2;
/// An unlock of something not locked.
pub(crate) const NOT_LOCKED: u32 = 3;
/// The core rejected an argument.
pub(crate) const INVALID_ARGUMENT: u32 = 4;
/// A core error this binding does not know yet (the core's `Error` is non-exhaustive).
pub(crate) const OTHER: u32 = 5;
/// Added to a release's status when it woke a waiter of this same thread: `index.js` then
/// serves it at once (`runReady`) instead of waiting for the event loop's next turn, as a
/// pure-JavaScript lock hands over before `release()` returns.
pub(crate) const LOCAL_WAKE: u32 = 0x100;

/// The status of a core result.
pub(crate) fn of<T>(result: keylock_core::Result<T>) -> u32 {
    match result {
        Ok(_) => OK,
        Err(e) => code(e),
    }
}

/// The status of a core error.
pub(crate) fn code(error: Error) -> u32 {
    match error {
        Error::WouldBlock => WOULD_BLOCK,
        Error::TimedOut => TIMED_OUT,
        Error::NotLocked => NOT_LOCKED,
        Error::InvalidArgument(_) => INVALID_ARGUMENT,
        _ => OTHER,
    }
}

/// A JavaScript timeout in milliseconds (validated finite and non-negative by `index.js`) as a
/// `Duration`; `None` (no timeout) for anything else.
pub(crate) fn timeout(ms: Option<f64>) -> Option<Duration> {
    ms.filter(|ms| ms.is_finite() && *ms >= 0.0)
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
}

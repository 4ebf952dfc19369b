//! The one error type of keylock.

use std::fmt;

/// Why an acquire or release did not happen.
///
/// Each variant is reported as a [`Status`](crate::Status) (`error.status()`), whose number and
/// name every front end shares: the C ABI returns the number, Node's errors carry the name as
/// their `code`, and Python raises the exception that the status maps to.
///
/// ```
/// use keylock_core::{Error, StripedLock};
///
/// assert_eq!(StripedLock::new(0).unwrap_err(), Error::InvalidArgument("stripes must be at least 1"));
/// let locks = StripedLock::new(4).unwrap();
/// assert_eq!(locks.unlock("k"), Err(Error::NotLocked));
/// let _held = locks.lock("k");
/// assert_eq!(locks.try_lock("k").unwrap_err(), Error::WouldBlock);
/// assert_eq!(Error::TimedOut.to_string(), "timed out waiting for the lock");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// A `try_*` call found the lock taken.
    WouldBlock,
    /// A timed call waited its whole timeout without getting the lock.
    TimedOut,
    /// An explicit unlock of something that is not locked.
    NotLocked,
    /// An argument outside what the call accepts; the text says which.
    InvalidArgument(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WouldBlock => f.write_str("the lock is held by someone else"),
            Error::TimedOut => f.write_str("timed out waiting for the lock"),
            Error::NotLocked => f.write_str("unlock of a lock that is not locked"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with keylock's [`Error`].
///
/// ```
/// fn take(pool: &keylock_core::KeyPool) -> keylock_core::Result<()> {
///     pool.try_lock(b"job".as_slice())?.leak();
///     pool.unlock(b"job".as_slice())
/// }
/// assert!(take(&keylock_core::KeyPool::new()).is_ok());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

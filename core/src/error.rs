//! The one error type of keylock.

use std::fmt;
use std::sync::Arc;

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
/// let acq = locks.lock("k").into_acquisition();
/// assert_eq!(locks.try_lock("k").unwrap_err(), Error::WouldBlock);
/// assert!(locks.force_unlock("k"));
/// assert_eq!(locks.release(acq), Err(Error::NotOwner)); // no longer current
/// assert_eq!(Error::TimedOut.to_string(), "timed out waiting for the lock");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// A `try_*` call found the lock taken.
    WouldBlock,
    /// A timed call waited its whole timeout without getting the lock.
    TimedOut,
    /// An unlock of something that is not locked (the RwLock's reader side).
    NotLocked,
    /// An argument outside what the call accepts; the text says which.
    InvalidArgument(&'static str),
    /// A release, extend or check of an acquisition that is no longer the lock's current one:
    /// it was released already, or force-unlocked (its key may have a new holder by now).
    NotOwner,
    /// A release or extend of an acquisition whose lease ran out: the lock freed itself, and
    /// another holder may have had it since.
    LeaseExpired,
    /// A reentrant acquire past the lock object's hold-count limit.
    ReentrancyLimit,
    /// A lock table of fixed capacity is full: every entry is held or awaited.
    CapacityExceeded,
    /// A lock object made elsewhere does not match what this build expects: another layout,
    /// version or capacity, or a corrupt header. The text says what differs.
    Incompatible(Arc<str>),
    /// The operating system refused access to a lock object (its permissions).
    PermissionDenied(Arc<str>),
    /// The place a lock lives could not be reached: an I/O error, a refused or lost connection.
    /// The text says what failed (never a password).
    Unavailable(Arc<str>),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WouldBlock => f.write_str("the lock is held by someone else"),
            Error::TimedOut => f.write_str("timed out waiting for the lock"),
            Error::NotLocked => f.write_str("unlock of a lock that is not locked"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::NotOwner => f.write_str("the acquisition is no longer the lock's current one"),
            Error::LeaseExpired => f.write_str("the acquisition's lease ran out"),
            Error::ReentrancyLimit => f.write_str("reentrant hold count limit reached"),
            Error::CapacityExceeded => f.write_str("the lock table is full"),
            Error::Incompatible(what) => write!(f, "incompatible lock object: {what}"),
            Error::PermissionDenied(what) => write!(f, "permission denied: {what}"),
            Error::Unavailable(what) => write!(f, "unavailable: {what}"),
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with keylock's [`Error`].
///
/// ```
/// fn take(pool: &keylock_core::KeyPool) -> keylock_core::Result<()> {
///     let acq = pool.try_lock(b"job".as_slice())?.into_acquisition();
///     pool.release(acq)
/// }
/// assert!(take(&keylock_core::KeyPool::new()).is_ok());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

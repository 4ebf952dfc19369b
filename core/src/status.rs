//! [`Status`]: the outcome codes every front end shares, with their numbers, names and
//! descriptions, declared once.
//!
//! The C ABI returns the numbers (`keylock_result`, and its header's `KEYLOCK_*` constants and
//! `keylock_result_str` are generated from this table), Node's errors carry the names as their
//! `code`, and Python picks its exception from the status. So a new status is one line in the
//! table below and nothing else, and no front end writes a number down by hand.
//!
//! ```
//! use keylock_core::{Error, Status};
//!
//! assert_eq!(Status::from(&Error::TimedOut), Status::TimedOut);
//! assert_eq!(Status::TimedOut.code(), 2);
//! assert_eq!(Status::TimedOut.name(), "KEYLOCK_TIMEOUT");
//! assert_eq!(Status::from_code(2), Some(Status::TimedOut));
//! assert_eq!(Status::from_code(9999), None);
//! ```

use std::fmt;

use crate::error::Error;

/// Declares [`Status`] and its table from one line per status.
macro_rules! statuses {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $code:literal, $name:literal, $description:literal;
    )*) => {
        /// The outcome of a keylock call, as every front end reports it.
        ///
        /// Each status has a stable number ([`code`](Status::code)), which is C's
        /// `keylock_result` and is part of the C ABI: numbers never change and are never
        /// reused (a retired one stays in the table as a comment). Its
        /// [`name`](Status::name) is the C macro and Node's `error.code`, and its
        /// [`description`](Status::description) is one line of English.
        ///
        /// Every core [`Error`] has its status; `NullArgument` and `Panic` arise only at the
        /// C ABI, but their numbers are reserved for every front end alike.
        #[repr(u32)]
        #[non_exhaustive]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Status {
            $( $(#[$doc])* $variant = $code, )*
        }

        impl Status {
            /// Every status, in the order of their numbers.
            pub const ALL: &'static [Status] = &[$(Status::$variant),*];

            /// The name every front end reports, e.g. `"KEYLOCK_TIMEOUT"`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Status::$variant => $name,)*
                }
            }

            /// One line of English, e.g. `"the timeout passed before the lock was acquired"`.
            pub const fn description(self) -> &'static str {
                match self {
                    $(Status::$variant => $description,)*
                }
            }
        }
    };
}

statuses! {
    /// Success.
    Ok = 0, "KEYLOCK_OK", "success";
    /// A `try` call found the lock held (by someone else, or by the caller itself).
    WouldBlock = 1, "KEYLOCK_WOULD_BLOCK", "the lock is held";
    /// A timed call waited its whole timeout without getting the lock.
    TimedOut = 2, "KEYLOCK_TIMEOUT", "the timeout passed before the lock was acquired";
    /// An explicit unlock of something that is not locked.
    NotLocked = 3, "KEYLOCK_NOT_LOCKED", "unlock of something that is not locked";
    /// A required pointer argument was NULL (C only).
    NullArgument = 4, "KEYLOCK_NULL_ARGUMENT", "a required pointer argument was NULL";
    /// An argument was out of range, or a key broke the encoding rules ([`crate::keys`]).
    InvalidArgument = 5, "KEYLOCK_INVALID_ARGUMENT", "an argument was out of range or malformed";
    /// An internal error (a Rust panic), caught before it reached the caller (C only).
    Panic = 6, "KEYLOCK_PANIC", "internal error in keylock (a caught Rust panic)";
    /// A release, extend or check of an acquisition that is no longer current (released,
    /// force-unlocked), or by an owner that does not hold it.
    NotOwner = 7, "KEYLOCK_NOT_OWNER", "the acquisition is not the lock's current one";
    /// A release or extend of an acquisition whose lease ran out.
    LeaseExpired = 8, "KEYLOCK_LEASE_EXPIRED", "the acquisition's lease ran out";
    /// A reentrant acquire past the hold-count limit.
    ReentrancyLimit = 9, "KEYLOCK_REENTRANCY_LIMIT", "reentrant hold count limit reached";
    /// A lock table of fixed capacity is full.
    CapacityExceeded = 10, "KEYLOCK_CAPACITY_EXCEEDED", "the lock table is full";
    /// A lock object of another layout, version or capacity, or a corrupt one.
    Incompatible = 11, "KEYLOCK_INCOMPATIBLE", "the lock object does not match this build";
    /// The operating system refused access to the lock object.
    PermissionDenied = 12, "KEYLOCK_PERMISSION_DENIED", "permission denied";
    /// The lock object could not be reached (I/O error, refused or lost connection).
    Unavailable = 13, "KEYLOCK_UNAVAILABLE", "the lock object could not be reached";
}
// Next free number: 14. Retired numbers (never to be reused): none yet.

impl Status {
    /// The status's number, e.g. 2 for [`Status::TimedOut`].
    #[inline]
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The status with number `code`, or `None` for a number this version does not know.
    #[inline]
    pub fn from_code(code: u32) -> Option<Status> {
        // The table is in number order with no gaps (checked by a test below).
        let status = *Status::ALL.get(usize::try_from(code).ok()?)?;
        Some(status)
    }
}

impl From<&Error> for Status {
    #[inline]
    fn from(error: &Error) -> Self {
        match error {
            Error::WouldBlock => Status::WouldBlock,
            Error::TimedOut => Status::TimedOut,
            Error::NotLocked => Status::NotLocked,
            Error::InvalidArgument(_) => Status::InvalidArgument,
            Error::NotOwner => Status::NotOwner,
            Error::LeaseExpired => Status::LeaseExpired,
            Error::ReentrancyLimit => Status::ReentrancyLimit,
            Error::CapacityExceeded => Status::CapacityExceeded,
            Error::Incompatible(_) => Status::Incompatible,
            Error::PermissionDenied(_) => Status::PermissionDenied,
            Error::Unavailable(_) => Status::Unavailable,
        }
    }
}

impl From<Error> for Status {
    #[inline]
    fn from(error: Error) -> Self {
        Status::from(&error)
    }
}

impl<T> From<&crate::Result<T>> for Status {
    /// [`Status::Ok`], or the error's status.
    #[inline]
    fn from(result: &crate::Result<T>) -> Self {
        match result {
            Ok(_) => Status::Ok,
            Err(e) => Status::from(e),
        }
    }
}

impl Error {
    /// The status this error is reported as: `Status::from(&error)`.
    #[inline]
    pub fn status(&self) -> Status {
        Status::from(self)
    }
}

impl fmt::Display for Status {
    /// `NAME: description`, as C's `keylock_result_str` gives it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name(), self.description())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_number_order_without_gaps() {
        for (i, status) in Status::ALL.iter().enumerate() {
            assert_eq!(status.code() as usize, i, "{status:?}");
            assert_eq!(Status::from_code(status.code()), Some(*status));
        }
        let next = Status::ALL.len() as u32;
        assert_eq!(Status::from_code(next), None);
        assert_eq!(Status::from_code(u32::MAX), None);
    }

    /// The numbers are C's published ABI: they never change.
    #[test]
    fn numbers_are_the_published_abi() {
        let abi = [
            (Status::Ok, 0, "KEYLOCK_OK"),
            (Status::WouldBlock, 1, "KEYLOCK_WOULD_BLOCK"),
            (Status::TimedOut, 2, "KEYLOCK_TIMEOUT"),
            (Status::NotLocked, 3, "KEYLOCK_NOT_LOCKED"),
            (Status::NullArgument, 4, "KEYLOCK_NULL_ARGUMENT"),
            (Status::InvalidArgument, 5, "KEYLOCK_INVALID_ARGUMENT"),
            (Status::Panic, 6, "KEYLOCK_PANIC"),
            (Status::NotOwner, 7, "KEYLOCK_NOT_OWNER"),
            (Status::LeaseExpired, 8, "KEYLOCK_LEASE_EXPIRED"),
            (Status::ReentrancyLimit, 9, "KEYLOCK_REENTRANCY_LIMIT"),
            (Status::CapacityExceeded, 10, "KEYLOCK_CAPACITY_EXCEEDED"),
            (Status::Incompatible, 11, "KEYLOCK_INCOMPATIBLE"),
            (Status::PermissionDenied, 12, "KEYLOCK_PERMISSION_DENIED"),
            (Status::Unavailable, 13, "KEYLOCK_UNAVAILABLE"),
        ];
        for (status, code, name) in abi {
            assert_eq!((status.code(), status.name()), (code, name));
        }
    }

    #[test]
    fn names_are_unique_c_identifiers_and_descriptions_one_line() {
        let mut names: Vec<_> = Status::ALL.iter().map(|s| s.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Status::ALL.len());
        for status in Status::ALL {
            let name = status.name();
            assert!(name.starts_with("KEYLOCK_"), "{name}");
            assert!(
                name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
                "{name}"
            );
            let d = status.description();
            assert!(!d.is_empty() && !d.contains(['\n', '\0']), "{d:?}");
        }
    }

    #[test]
    fn errors_map_to_their_status() {
        assert_eq!(Error::WouldBlock.status(), Status::WouldBlock);
        assert_eq!(Error::TimedOut.status(), Status::TimedOut);
        assert_eq!(Error::NotLocked.status(), Status::NotLocked);
        assert_eq!(
            Error::InvalidArgument("x").status(),
            Status::InvalidArgument
        );
        assert_eq!(Status::from(&Ok::<_, Error>(())), Status::Ok);
        assert_eq!(
            Status::from(&Err::<(), _>(Error::TimedOut)),
            Status::TimedOut
        );
        assert_eq!(
            Status::TimedOut.to_string(),
            "KEYLOCK_TIMEOUT: the timeout passed before the lock was acquired"
        );
    }
}

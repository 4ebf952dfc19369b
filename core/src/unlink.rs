//! [`unlink`]: removing a named lock object, by the same name [`open`](crate::open) takes.

use crate::error::{Error, Result};

/// Removes the lock object that `name` names, by the name [`open`](crate::open) takes;
/// whether it existed. Only a shared-memory region (`"shm:NAME"`) can be removed: see
/// [`shm::unlink`](crate::shm::unlink) (processes that have it open keep using it; the next
/// open of the name makes a new region). Every front end's `unlink` is this call.
///
/// `InvalidArgument` for any other name: in-process locks have nothing to remove, and a Redis
/// scope's keys free themselves. Also `InvalidArgument` in a build without the `shm` feature.
///
/// ```
/// # #[cfg(all(feature = "shm", target_os = "linux"))] {
/// let name = format!("shm:doc-unlink-{}", std::process::id());
/// drop(keylock_core::open(&name).unwrap());
/// assert_eq!(keylock_core::unlink(&name), Ok(true));
/// assert_eq!(keylock_core::unlink(&name), Ok(false));
/// # }
/// assert!(keylock_core::unlink("local:").is_err());
/// ```
pub fn unlink(name: &str) -> Result<bool> {
    match name.split_once(':') {
        #[cfg(all(feature = "shm", target_os = "linux"))]
        Some(("shm", region)) => crate::shm::unlink(region),
        #[cfg(not(all(feature = "shm", target_os = "linux")))]
        Some(("shm", _)) => Err(Error::InvalidArgument(
            "this build of keylock has no shared-memory scope (cargo feature \"shm\", Linux)",
        )),
        _ => Err(Error::InvalidArgument(
            "only a shared-memory region (shm:NAME) can be unlinked",
        )),
    }
}

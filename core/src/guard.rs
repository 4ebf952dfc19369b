//! [`KeyedGuard`]: a guard for an acquisition of any scope, over the [`KeyedLock`] trait.

use std::fmt;
use std::sync::Arc;

use crate::acquisition::{Acquisition, LockOptions, Mode};
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::scope::{KeyedLock, LockKey};

/// One held key of any scope (in-process, `shm:`, `redis://`); released on drop.
///
/// It does for an `Arc<dyn KeyedLock>` what [`PoolGuard`](crate::PoolGuard) does for a
/// [`KeyPool`](crate::KeyPool): it carries its [`Acquisition`] and releases exactly that
/// (never by key), and it answers the acquisition's questions, among them
/// [`owner_died`](Self::owner_died) (the previous holder's process died holding the key) and
/// [`lost_signal`](Self::lost_signal) (a remote lock lost behind the holder's back).
///
/// ```
/// use keylock_core::{KeyedGuard, LockKey, LockOptions, open};
/// let locks = open("local:").unwrap();
/// let guard = KeyedGuard::acquire(&locks, LockKey::new(b"job:7"), &LockOptions::new()).unwrap();
/// assert!(!guard.owner_died()); // in one process nobody dies holding a key
/// assert!(guard.lost_signal().is_none()); // nor loses it behind its back
/// assert!(locks.is_locked(LockKey::new(b"job:7")).unwrap());
/// guard.release().unwrap();
/// assert!(!locks.is_locked(LockKey::new(b"job:7")).unwrap());
/// ```
#[must_use = "the key is released as soon as the guard is dropped"]
pub struct KeyedGuard {
    lock: Arc<dyn KeyedLock>,
    /// `None` once released or handed out.
    acq: Option<Acquisition>,
}

impl KeyedGuard {
    /// Acquires `key` of `lock` as `opts` says (blocking the calling thread while it waits).
    pub fn acquire(
        lock: &Arc<dyn KeyedLock>,
        key: LockKey<'_>,
        opts: &LockOptions,
    ) -> Result<Self> {
        let acq = lock.acquire(key, opts)?;
        Ok(Self::new(Arc::clone(lock), acq))
    }

    /// A guard for `acquisition`, which `lock` made.
    pub fn new(lock: Arc<dyn KeyedLock>, acquisition: Acquisition) -> Self {
        Self {
            lock,
            acq: Some(acquisition),
        }
    }

    /// The acquisition (present until the guard is consumed).
    pub fn acquisition(&self) -> &Acquisition {
        self.acq.as_ref().expect("a live guard has its acquisition")
    }

    /// The fencing token (see [`Acquisition::fence`]).
    pub fn fence(&self) -> u64 {
        self.acquisition().fence()
    }

    /// Shared or exclusive.
    pub fn mode(&self) -> Mode {
        self.acquisition().mode()
    }

    /// Whether the previous holder died holding the key (see [`Acquisition::owner_died`]):
    /// the data it protected may be half-changed.
    pub fn owner_died(&self) -> bool {
        self.acquisition().owner_died()
    }

    /// Whether this acquisition is still the key's current one.
    pub fn is_current(&self) -> Result<bool> {
        self.lock.is_current(self.acquisition())
    }

    /// The signal that fires if the lock is lost behind the holder's back; `None` for scopes
    /// where that cannot happen (see [`KeyedLock::lost_signal`]).
    pub fn lost_signal(&self) -> Option<LostSignal> {
        self.lock.lost_signal(self.acquisition())
    }

    /// Releases the key now, saying whether this acquisition was still current
    /// (`NotOwner`, `LeaseExpired` otherwise). Dropping the guard does the same, silently.
    pub fn release(mut self) -> Result<()> {
        let acq = self.acq.take().ok_or(Error::NotOwner)?;
        self.lock.release(acq)
    }

    /// Keeps the key held and forgets the guard; release it later with
    /// [`KeyedLock::release`].
    pub fn into_acquisition(mut self) -> Acquisition {
        self.acq.take().expect("a live guard has its acquisition")
    }
}

impl fmt::Debug for KeyedGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedGuard")
            .field("acquisition", &self.acq)
            .finish_non_exhaustive()
    }
}

impl Drop for KeyedGuard {
    fn drop(&mut self) {
        if let Some(acq) = self.acq.take() {
            // A stale acquisition releases nothing; there is nobody to tell on drop.
            let _ = self.lock.release(acq);
        }
    }
}

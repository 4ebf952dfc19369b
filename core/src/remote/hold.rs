//! A remote hold and its renewal.
//!
//! The process holds at most one remote acquisition per key (a [`Hold`]); the local
//! acquisitions that share it are its *users* (one, or several shared holders, or an owner's
//! reentrant holds). While it has users, a task on the scope's runtime renews its lease every
//! third of the lease, from a third of the lease after it was granted; the task starts when the
//! scope's periodic look finds the hold still live (a hold released sooner never has one), or
//! at once for a hold whose users set their own deadlines. Renewal is bounded: the hold is given up as lost once the server has not
//! confirmed it for the lease's remaining time (counted from the moment each successful renewal
//! was sent, so the holder always learns of the loss no later than the server frees the key), or
//! at once if the server says the token is gone (force-unlocked, or expired and taken). Either way the
//! hold's [`LostSignal`] fires.
//!
//! A user with an explicit lease bounds the renewal: the hold is renewed only up to the latest
//! of its users' deadlines (no bound while any user has none).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::server::{RemoteKey, Server};
use crate::acquisition::{Mode, Owner};
use crate::lost::LostSignal;

/// How soon a failed renewal is tried again (while the lease still runs).
const RETRY: Duration = Duration::from_millis(200);

/// One remote acquisition of one key by this process.
pub(crate) struct Hold {
    pub(crate) key: RemoteKey,
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) died: bool,
    /// The owner of the first exclusive user (reentrant joins must match it).
    pub(crate) owner: Option<Owner>,
    pub(crate) lost: LostSignal,
    /// Lost because its lease ran out unrenewed (rather than taken away).
    pub(crate) expired: AtomicBool,
    /// Local users: acquisition id -> its own lease deadline.
    pub(crate) users: Mutex<HashMap<u64, Option<Instant>>>,
    /// When the acquire that granted it was sent.
    sent: Instant,
    /// Until when the server has confirmed the lease (local clock, conservative).
    confirmed: Mutex<Instant>,
    /// Its renewal has started.
    renewing: AtomicBool,
    stopped: AtomicBool,
    stop: Notify,
    /// A user came or its deadline moved: the renewal looks at the bound again.
    users_changed: Notify,
}

impl Hold {
    pub(crate) fn new(
        key: RemoteKey,
        token: String,
        fence: u64,
        died: bool,
        owner: Option<Owner>,
        sent: Instant,
        lease: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            key,
            token,
            fence,
            died,
            owner,
            lost: LostSignal::new(),
            expired: AtomicBool::new(false),
            users: Mutex::new(HashMap::new()),
            sent,
            confirmed: Mutex::new(sent + lease),
            renewing: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            stop: Notify::new(),
            users_changed: Notify::new(),
        })
    }

    /// Whether a new local acquisition in `mode` by `owner` may share this hold: shared with
    /// shared, or the exclusive holder's own owner in a reentrant scope.
    pub(crate) fn joinable(&self, mode: Mode, owner: Option<Owner>, reentrant: bool) -> bool {
        if self.lost.is_lost() || self.stopped.load(Ordering::Acquire) || self.key.units != 0 {
            // A semaphore's holders each have a remote hold of their own.
            return false;
        }
        match self.key.mode {
            Mode::Shared => mode == Mode::Shared,
            Mode::Exclusive => reentrant && owner.is_some() && owner == self.owner,
        }
    }

    /// Marks the hold lost (once) and stops its renewal.
    pub(crate) fn lose(&self, expired: bool) {
        if expired {
            self.expired.store(true, Ordering::Release);
        }
        self.halt();
        self.lost.fire();
    }

    /// Adds user `id` with its own lease deadline (or moves it), and has the renewal look at
    /// the bound again: a scope whose server keeps no lease (PostgreSQL) ends the hold only
    /// when the renewal sees the bound pass.
    pub(crate) fn add_user(&self, id: u64, deadline: Option<Instant>) {
        self.users.lock().insert(id, deadline);
        self.users_changed.notify_one();
    }

    /// Whether the caller is to start the renewal: once, and not after the hold ended.
    pub(crate) fn start_renewal(&self) -> bool {
        !self.stopped.load(Ordering::Acquire) && !self.renewing.swap(true, Ordering::AcqRel)
    }

    /// Stops the renewal (the hold was released, or lost).
    pub(crate) fn halt(&self) {
        self.stopped.store(true, Ordering::Release);
        self.stop.notify_waiters();
        self.stop.notify_one();
    }

    /// The latest deadline among the users; `None` if any user has none (or there are none).
    fn bound(&self) -> Option<Instant> {
        let users = self.users.lock();
        let mut latest: Option<Instant> = None;
        for d in users.values() {
            let d = (*d)?;
            latest = Some(latest.map_or(d, |l| l.max(d)));
        }
        latest
    }

    /// Notes that the server confirmed the lease until `until`.
    pub(crate) fn confirm(&self, until: Instant) {
        let mut c = self.confirmed.lock();
        *c = (*c).max(until);
    }

    /// Renews the hold until it is released or lost. See the [module docs](self).
    pub(crate) async fn renew_loop<S: Server>(self: Arc<Self>, remote: Arc<S>) {
        let interval = remote.lease() / 3;
        // Started when it was granted, or up to a sixth of the lease later.
        let mut next = (self.sent + interval).max(Instant::now());
        loop {
            if let Some(bound) = self.bound() {
                next = next.min(bound);
            }
            let woken = tokio::select! {
                () = tokio::time::sleep_until(next.into()) => false,
                () = self.stop.notified() => false,
                () = self.users_changed.notified() => true,
            };
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
            if woken && Instant::now() < next {
                // Only the bound may have moved: look at it again before sleeping.
                continue;
            }
            let now = Instant::now();
            let mut lease = remote.lease();
            if let Some(bound) = self.bound() {
                if bound <= now {
                    // Every user's own lease ended: so does the hold, on the server too (where
                    // the server keeps leases, it has already ended; the release then finds
                    // nothing).
                    self.lose(true);
                    let _ = remote.release(&self.key, &self.token).await;
                    return;
                }
                lease = lease.min(bound - now);
            }
            let confirmed = *self.confirmed.lock();
            let left = confirmed.saturating_duration_since(now);
            let sent = Instant::now();
            match tokio::time::timeout(left, remote.renew(&self.key, &self.token, lease)).await {
                Ok(Ok(true)) => {
                    self.confirm(sent + lease);
                    next = Instant::now() + interval;
                }
                // Released meanwhile (on another connection, which the server may run first).
                Ok(Ok(false)) if self.stopped.load(Ordering::Acquire) => return,
                Ok(Ok(false)) => {
                    self.lose(Instant::now() >= confirmed);
                    // Whatever the token still has on the server (a scope whose force-unlock
                    // moves the key elsewhere leaves the old hold in place) goes now.
                    let _ = remote.release(&self.key, &self.token).await;
                    return;
                }
                Ok(Err(_)) | Err(_) => {
                    if Instant::now() + RETRY >= *self.confirmed.lock() {
                        self.lose(true);
                        return;
                    }
                    next = Instant::now() + RETRY.min(interval);
                }
            }
        }
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("fence", &self.fence)
            .field("mode", &self.key.mode)
            .field("lost", &self.lost.is_lost())
            .finish_non_exhaustive()
    }
}

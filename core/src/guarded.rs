//! A guarded entry: an [`Entry`] together with the lock that guards its [`SlowState`], and the
//! acquire/release protocol on one, which every keyed primitive shares.
//!
//! A [`GuardedEntry`] is a stripe with its own queue mutex ([`RawLock`], also the RwLock's
//! writer side), or a pool slot under its shard's mutex. The functions here are the whole
//! protocol: the fast path on the word, then the slow path under the entry's lock, then waiting
//! in its queue. The primitives add only how they find an entry.

use std::ops::DerefMut;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::acquisition::{LockInfo, Mode, Wait, Want};
use crate::entry::{Entry, Hold, Policy, SlowState};
use crate::error::{Error, Result};
use crate::sync::{Mutex, MutexGuard};
use crate::wait::{Attempt, Grant, LazyWaiter, Queue, WaitList, Wakes, wait_blocking};

/// An entry and the lock that guards its slow state.
pub(crate) trait GuardedEntry {
    /// The held lock, giving access to the slow state.
    type Locked<'a>: DerefMut<Target = SlowState>
    where
        Self: 'a;

    /// The entry.
    fn entry(&self) -> &Entry;

    /// Locks the slow state.
    fn lock(&self) -> Self::Locked<'_>;

    /// How the lock object serves its entries.
    fn policy(&self) -> Policy;

    /// A waiter of this entry stops waiting (it got the lock, failed, or left). The pool drops
    /// the waiter's reservation on its slot here.
    fn waiter_done(&self) {}
}

/// A guarded entry seen as a [`Queue`] for the generic waiting code.
pub(crate) struct EntryQueue<'s, S: ?Sized>(pub(crate) &'s S);

impl<S: GuardedEntry + ?Sized> Queue for EntryQueue<'_, S> {
    type Locked<'a>
        = S::Locked<'a>
    where
        Self: 'a;

    fn lock_queue<'q>(&'q self) -> Self::Locked<'q> {
        self.0.lock()
    }

    fn waiters<'g, 'q>(&'q self, locked: &'g mut Self::Locked<'q>) -> &'g mut WaitList {
        &mut locked.waiters
    }

    fn acquire_locked<'q>(
        &'q self,
        locked: &mut Self::Locked<'q>,
        want: &Want,
        front: bool,
        wakes: &mut Wakes,
    ) -> Attempt {
        let policy = self.0.policy();
        let attempt = self
            .0
            .entry()
            .acquire_locked(locked, want, front, &policy, wakes);
        if !matches!(attempt, Attempt::Blocked { .. }) {
            self.0.waiter_done();
        }
        attempt
    }

    fn refresh_locked<'q>(
        &'q self,
        locked: &mut Self::Locked<'q>,
        wakes: &mut Wakes,
    ) -> Option<Instant> {
        let policy = self.0.policy();
        self.0.entry().expire_locked(locked, &policy, wakes);
        locked.earliest_lease()
    }

    fn leave_locked<'q>(
        &'q self,
        locked: &mut Self::Locked<'q>,
        notified: bool,
        wakes: &mut Wakes,
    ) {
        let policy = self.0.policy();
        self.0
            .entry()
            .leave_locked(locked, notified, &policy, wakes);
        self.0.waiter_done();
    }

    fn granted_seen(&self) {
        self.0.waiter_done();
    }

    fn release_granted(&self, grant: Grant, want: &Want) {
        let hold = Hold {
            mode: want.mode,
            fence: grant.fence,
            ticket: grant.ticket,
            owner: want.owner,
            units: want.units,
        };
        let _ = release(self.0, &hold);
    }
}

/// One attempt with the slow state locked. `Blocked` leaves no trace (the `QUEUED` bit it may have
/// set is cleared again when nobody is queued).
pub(crate) fn attempt_locked<S: GuardedEntry + ?Sized>(
    guarded: &S,
    locked: &mut S::Locked<'_>,
    want: &Want,
    wakes: &mut Wakes,
) -> Attempt {
    let policy = guarded.policy();
    let attempt = guarded
        .entry()
        .acquire_locked(locked, want, false, &policy, wakes);
    if matches!(attempt, Attempt::Blocked { .. }) {
        guarded.entry().settle_locked(locked);
    }
    attempt
}

/// Acquires `guarded` for `want`, waiting as `wait` says: the fast path, then one attempt under
/// the entry's lock, then its queue. `fast` is the caller's verdict that the fast path may be
/// tried (the pool skips it when it has just found the slot under its lock).
pub(crate) fn acquire<S: GuardedEntry + ?Sized>(
    guarded: &S,
    want: &Want,
    wait: Wait,
) -> Result<Grant> {
    let policy = guarded.policy();
    let entry = guarded.entry();
    if want.is_plain()
        && let Some(fence) = entry.try_fast(want.mode, policy.fifo)
    {
        return Ok(Grant {
            fence,
            ticket: 0,
            lease_until: None,
            reentered: false,
        });
    }
    let deadline = wait.deadline();
    {
        let mut locked = guarded.lock();
        let mut wakes = Wakes::default();
        let attempt = attempt_locked(guarded, &mut locked, want, &mut wakes);
        drop(locked);
        wakes.run();
        match attempt {
            Attempt::Acquired(grant) => return Ok(grant),
            Attempt::Failed(error) => return Err(error),
            Attempt::Blocked { .. } if wait == Wait::No => return Err(Error::WouldBlock),
            Attempt::Blocked { .. } => {}
        }
    }
    wait_queued(guarded, want, wait, deadline, true)
}

/// Waits in `guarded`'s queue (the caller has found it taken). `spin`: first spin briefly on the
/// fast path (only for a guarded entry whose waiter holds no reservation).
pub(crate) fn wait_queued<S: GuardedEntry + ?Sized>(
    guarded: &S,
    want: &Want,
    wait: Wait,
    deadline: Option<Instant>,
    spin: bool,
) -> Result<Grant> {
    let policy = guarded.policy();
    let entry = guarded.entry();
    let plain = spin && want.is_plain();
    match wait_blocking(&EntryQueue(guarded), want, deadline, || {
        // Spin only while nobody is queued: queued waiters go first.
        if plain && !entry.is_queued() {
            entry.try_fast(want.mode, policy.fifo).map(|fence| Grant {
                fence,
                ticket: 0,
                lease_until: None,
                reentered: false,
            })
        } else {
            None
        }
    })? {
        Some(grant) => Ok(grant),
        None => Err(wait.failure()),
    }
}

/// Releases `hold`; `Err(())` when it was not current (the caller names the error).
#[inline]
pub(crate) fn release<S: GuardedEntry + ?Sized>(
    guarded: &S,
    hold: &Hold,
) -> std::result::Result<(), ()> {
    // A leased shared hold is one named holder among counted ones: only the slow path can
    // tell whether it is still among them.
    if hold.ticket == 0
        && guarded
            .entry()
            .release_fast_hold(hold.mode, hold.fence, hold.units)
    {
        return Ok(());
    }
    release_slow(guarded, hold)
}

/// [`release`] under the entry's lock, for a caller that has tried the fast paths already.
#[cold]
pub(crate) fn release_slow<S: GuardedEntry + ?Sized>(
    guarded: &S,
    hold: &Hold,
) -> std::result::Result<(), ()> {
    let policy = guarded.policy();
    let mut locked = guarded.lock();
    let mut wakes = Wakes::default();
    let result = guarded
        .entry()
        .release_locked(&mut locked, hold, &policy, &mut wakes);
    drop(locked);
    wakes.run();
    result
}

/// Runs `f` with the slow state locked and the policy at hand, then runs the wake-ups it collected.
pub(crate) fn with_locked<S: GuardedEntry + ?Sized, T>(
    guarded: &S,
    f: impl FnOnce(&Entry, &mut SlowState, &Policy, &mut Wakes) -> T,
) -> T {
    let policy = guarded.policy();
    let mut locked = guarded.lock();
    let mut wakes = Wakes::default();
    let out = f(guarded.entry(), &mut locked, &policy, &mut wakes);
    drop(locked);
    wakes.run();
    out
}

/// Whether `hold` is still current.
pub(crate) fn is_current<S: GuardedEntry + ?Sized>(guarded: &S, hold: &Hold) -> bool {
    if hold.ticket == 0
        && hold.owner.is_none()
        && hold.units == 0
        && !guarded.entry().is_current_fast(hold)
    {
        return false;
    }
    with_locked(guarded, |e, slow, p, w| {
        e.is_current_locked(slow, hold, p, w)
    })
}

/// Sets `hold`'s lease to end at `until`.
pub(crate) fn extend<S: GuardedEntry + ?Sized>(
    guarded: &S,
    hold: &Hold,
    until: Instant,
) -> std::result::Result<(), Option<Error>> {
    with_locked(guarded, |e, slow, p, w| {
        e.extend_locked(slow, hold, until, p, w)
    })
}

/// Frees the guarded entry whoever holds it; whether it was held.
pub(crate) fn force_unlock<S: GuardedEntry + ?Sized>(guarded: &S) -> bool {
    with_locked(guarded, |e, slow, p, w| e.force_unlock_locked(slow, p, w))
}

/// Frees the entry whoever holds it and takes it exclusively for `want`, ahead of every queued
/// waiter ([`Entry::steal_locked`]). `InvalidArgument` for a shared `want`: only an exclusive
/// request may steal.
pub(crate) fn steal<S: GuardedEntry + ?Sized>(guarded: &S, want: &Want) -> Result<Grant> {
    if want.mode != Mode::Exclusive {
        return Err(Error::InvalidArgument(
            "only an exclusive request may steal",
        ));
    }
    Ok(with_locked(guarded, |e, slow, _, _| {
        e.steal_locked(slow, want)
    }))
}

/// A snapshot of the guarded entry's holders.
pub(crate) fn info<S: GuardedEntry + ?Sized>(guarded: &S) -> Option<LockInfo> {
    with_locked(guarded, |e, slow, p, w| e.info_locked(slow, p, w))
}

/// One guarded entry's acquisition as a future: the fast path on the first poll, then its queue.
/// Dropping it cancels the wait exactly; a lock granted to it and never seen is released.
#[derive(Debug, Default)]
pub(crate) struct EntryFuture {
    waiter: LazyWaiter,
}

impl EntryFuture {
    pub(crate) const fn new() -> Self {
        Self {
            waiter: LazyWaiter::new(),
        }
    }

    /// Polls for `guarded`. `deadline`: give up then, with `Err(TimedOut)`; the front end's own
    /// timer must poll again at that time (or a timer is set here for a lease's end).
    #[inline]
    pub(crate) fn poll<S: GuardedEntry + ?Sized>(
        &mut self,
        guarded: &S,
        want: &Want,
        deadline: Option<Instant>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Grant>> {
        if !self.waiter.is_registered() {
            let policy = guarded.policy();
            if want.is_plain()
                && let Some(fence) = guarded.entry().try_fast(want.mode, policy.fifo)
            {
                return Poll::Ready(Ok(Grant {
                    fence,
                    ticket: 0,
                    lease_until: None,
                    reentered: false,
                }));
            }
        }
        if let Some(deadline) = deadline
            && Instant::now() >= deadline
        {
            return Poll::Ready(match self.waiter.abandon(&EntryQueue(guarded), true) {
                Some(grant) => Ok(grant),
                None => Err(Error::TimedOut),
            });
        }
        let polled = self.waiter.poll(&EntryQueue(guarded), want, cx);
        if polled.is_pending()
            && let Some(deadline) = deadline
        {
            crate::wait::timer::wake_at(deadline, cx.waker().clone());
        }
        polled
    }

    /// Leaves the queue (a lock granted meanwhile is released).
    pub(crate) fn cancel<S: GuardedEntry + ?Sized>(&mut self, guarded: &S) {
        let _ = self.waiter.abandon(&EntryQueue(guarded), false);
    }
}

/// A stripe, and the RwLock's writer side: an entry whose slow state has a mutex of its own.
#[derive(Debug, Default)]
#[allow(unreachable_pub)] // named by the front's sealed table trait, unreachable outside
pub struct RawLock {
    pub(crate) entry: Entry,
    slow: Mutex<SlowState>,
}

impl RawLock {
    #[cfg(not(keylock_loom))]
    pub(crate) const fn new() -> Self {
        Self {
            entry: Entry::new(),
            slow: Mutex::new(SlowState::new()),
        }
    }

    #[cfg(keylock_loom)]
    pub(crate) fn new() -> Self {
        Self {
            entry: Entry::new(),
            slow: Mutex::new(SlowState::new()),
        }
    }
}

/// A [`RawLock`] with the policy of the lock object it belongs to.
#[derive(Debug, Clone, Copy)]
#[allow(unreachable_pub)] // named by the front's sealed table trait, unreachable outside
pub struct RawLockEntry<'a> {
    pub(crate) lock: &'a RawLock,
    pub(crate) policy: Policy,
}

impl GuardedEntry for RawLockEntry<'_> {
    type Locked<'b>
        = MutexGuard<'b, SlowState>
    where
        Self: 'b;

    #[inline]
    fn entry(&self) -> &Entry {
        &self.lock.entry
    }

    #[inline]
    fn lock(&self) -> Self::Locked<'_> {
        self.lock.slow.lock()
    }

    #[inline]
    fn policy(&self) -> Policy {
        self.policy
    }
}

/// Plain wants for the common calls.
#[inline]
pub(crate) const fn plain(mode: Mode) -> Want {
    match mode {
        Mode::Exclusive => Want::EXCLUSIVE,
        Mode::Shared => Want::SHARED,
    }
}

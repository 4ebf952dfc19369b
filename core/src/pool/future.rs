//! Futures that acquire pool keys, waiting in the same queues as blocked threads.
//!
//! A future looks its key up when it is made: a free key is taken at once; a held one gets a
//! reservation on its slot, so the future owns no copy of the key and the slot cannot be
//! recycled under it. Dropping a future cancels exactly: a waiter leaves the queue and drops
//! its reservation, a key already granted to it passes on, a key it holds is released.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use super::{PoolGuard, PoolManyGuard, PoolRef, SlotRef};
use crate::acquisition::{Mode, Wait, Want};
use crate::entry::Hold;
use crate::error::{Error, Result};
use crate::site::SiteQueue;
use crate::wait::{Attempt, Grant, LazyWaiter, timer};

/// An async acquire of one key: ready at once (the key was free when the future was made),
/// failed at once, or waiting on its reserved slot. A ready future is just its guard, so the
/// uncontended async path costs what the blocking one does.
pub(super) enum One<P: PoolRef> {
    Ready(PoolGuard<P>),
    Failed(Error),
    /// Boxed: a waiting future allocates anyway (its queue node), and the ready one stays small.
    Waiting(Box<Waiting<P>>),
    Done,
}

/// The error a wait that ran out reports: `WouldBlock` for a try, `TimedOut` otherwise.
fn ran_out(wait: Wait) -> Error {
    match wait {
        Wait::No => Error::WouldBlock,
        _ => Error::TimedOut,
    }
}

/// A future waiting for its reserved slot.
pub(super) struct Waiting<P: PoolRef> {
    /// `None` once finished (the reservation is then used up or dropped).
    pool: Option<P>,
    at: SlotRef,
    want: Want,
    wait: Wait,
    deadline: Option<Instant>,
    /// The waiter has been polled, so the reservation is its to use up.
    polled: bool,
    waiter: LazyWaiter,
}

impl<P: PoolRef> Waiting<P> {
    pub(super) fn new(pool: P, at: SlotRef, want: Want, wait: Wait) -> Self {
        Self {
            pool: Some(pool),
            at,
            want,
            wait,
            deadline: wait.deadline(),
            polled: false,
            waiter: LazyWaiter::new(),
        }
    }

    /// Polls the wait; when it ends, the pool handle is handed back with the outcome.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<(P, Result<Grant>)> {
        let pool = self.pool.as_ref().expect("a waiting future has its pool");
        let site = match pool.site_at(self.at) {
            Ok(site) => site,
            Err(e) => return Poll::Ready((self.pool.take().expect("checked"), Err(e))),
        };
        let queue = SiteQueue(&site);
        let result = if self.deadline.is_some_and(|d| Instant::now() >= d) {
            if self.polled {
                self.waiter
                    .abandon(&queue, true)
                    .ok_or_else(|| ran_out(self.wait))
            } else {
                site.slot.unreserve();
                Err(ran_out(self.wait))
            }
        } else {
            self.polled = true;
            match self.waiter.poll(&queue, &self.want, cx) {
                Poll::Ready(result) => result,
                Poll::Pending => {
                    if let Some(d) = self.deadline {
                        timer::wake_at(d, cx.waker().clone());
                    }
                    return Poll::Pending;
                }
            }
        };
        Poll::Ready((self.pool.take().expect("checked above"), result))
    }
}

impl<P: PoolRef> Drop for Waiting<P> {
    fn drop(&mut self) {
        let Some(pool) = &self.pool else { return };
        if !self.polled {
            pool.unreserve(self.at);
        } else if let Ok(site) = pool.site_at(self.at) {
            let _ = self.waiter.abandon(&SiteQueue(&site), false);
        }
    }
}

impl<P: PoolRef> One<P> {
    #[inline]
    fn poll_one(&mut self, cx: &mut Context<'_>) -> Poll<Result<PoolGuard<P>>> {
        if let One::Waiting(w) = self {
            let (pool, result) = match w.poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(done) => done,
            };
            let (at, want) = (w.at, w.want);
            *self = One::Done;
            return Poll::Ready(result.map(|grant| {
                let slot = std::ptr::NonNull::from(pool.own_slot(at));
                PoolGuard::from_ptr(pool, slot, want, grant)
            }));
        }
        match std::mem::replace(self, One::Done) {
            One::Ready(guard) => Poll::Ready(Ok(guard)),
            One::Failed(e) => Poll::Ready(Err(e)),
            One::Waiting(_) | One::Done => panic!("pool future polled after completion"),
        }
    }

    fn is_ready(&self) -> bool {
        matches!(self, One::Ready(_))
    }
}

/// Resolves to a [`PoolGuard`]. Dropping it before then cancels the wait exactly: the waiter
/// leaves the queue, its reservation is dropped, and a key already handed to it passes on.
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<String> = KeyPool::new();
/// futures::executor::block_on(async {
///     let guard = pool.lock_async("user:1").await;
///     assert!(pool.is_locked("user:1"));
///     drop(guard);
/// });
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct PoolLockFuture<P: PoolRef>(One<P>);

impl<P: PoolRef> PoolLockFuture<P> {
    pub(super) fn new(one: One<P>) -> Self {
        Self(one)
    }
}

impl<P: PoolRef> Future for PoolLockFuture<P> {
    type Output = PoolGuard<P>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PoolGuard<P>> {
        self.get_mut().0.poll_one(cx).map(|r| match r {
            Ok(guard) => guard,
            // A plain untimed acquire has no way to fail.
            Err(e) => unreachable!("an untimed plain acquire failed: {e}"),
        })
    }
}

impl<P: PoolRef> fmt::Debug for PoolLockFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolLockFuture")
            .field("ready", &self.0.is_ready())
            .finish_non_exhaustive()
    }
}

/// Resolves to `Ok(`[`PoolGuard`]`)`, or to the error that ended the wait (`TimedOut`,
/// `ReentrancyLimit`, ...). Dropping it cancels the wait exactly.
///
/// ```
/// use std::time::Duration;
/// use keylock_core::{Error, KeyPool, LockOptions, Wait};
/// let pool: KeyPool<String> = KeyPool::new();
/// let _held = pool.lock("k");
/// let opts = LockOptions::new().wait(Wait::For(Duration::from_millis(5)));
/// let late = futures::executor::block_on(pool.lock_with_async("k", opts));
/// assert_eq!(late.unwrap_err(), Error::TimedOut);
/// assert_eq!(pool.stats().waiting, 0);
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct PoolAcquireFuture<P: PoolRef>(One<P>);

impl<P: PoolRef> PoolAcquireFuture<P> {
    pub(super) fn new(one: One<P>) -> Self {
        Self(one)
    }
}

impl<P: PoolRef> Future for PoolAcquireFuture<P> {
    type Output = Result<PoolGuard<P>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.poll_one(cx)
    }
}

impl<P: PoolRef> fmt::Debug for PoolAcquireFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolAcquireFuture")
            .field("ready", &self.0.is_ready())
            .finish_non_exhaustive()
    }
}

/// Several keys, awaited one after another in the canonical order.
struct Many<P: PoolRef> {
    pool: Option<P>,
    /// Reserved slots in canonical order; `held.len()` of them are held.
    slots: Vec<(SlotRef, Mode)>,
    base: Want,
    wait: Wait,
    deadline: Option<Instant>,
    held: Vec<(SlotRef, Hold, Option<Instant>)>,
    waiter: LazyWaiter,
    /// The waiter has been polled for the current slot (its reservation is the waiter's).
    polled: bool,
}

impl<P: PoolRef> Many<P> {
    fn new(pool: P, slots: Vec<(SlotRef, Mode)>, base: Want, wait: Wait) -> Self {
        let held = Vec::with_capacity(slots.len());
        Self {
            pool: Some(pool),
            slots,
            base,
            wait,
            deadline: wait.deadline(),
            held,
            waiter: LazyWaiter::new(),
            polled: false,
        }
    }

    /// Gives up: drops the reservations not used yet (after the current one) and what is held.
    fn give_up(&mut self, pool: &P, error: Error) -> Poll<Result<PoolManyGuard<P>>> {
        for &(rest, _) in &self.slots[self.held.len() + 1..] {
            pool.unreserve(rest);
        }
        pool.release_holds(&self.held);
        self.held.clear();
        self.slots.clear();
        self.pool = None;
        Poll::Ready(Err(error))
    }

    fn poll_many(&mut self, cx: &mut Context<'_>) -> Poll<Result<PoolManyGuard<P>>> {
        let pool = self
            .pool
            .take()
            .expect("pool future polled after completion");
        while self.held.len() < self.slots.len() {
            let (at, mode) = self.slots[self.held.len()];
            let want = Want { mode, ..self.base };
            let site = match pool.site_at(at) {
                Ok(site) => site,
                Err(e) => return self.give_up(&pool, e),
            };
            let queue = SiteQueue(&site);
            let got = if self.deadline.is_some_and(|d| Instant::now() >= d) {
                let grant = if self.polled {
                    self.waiter.abandon(&queue, true)
                } else {
                    // The time is up before this key's wait began (a try, or a deadline
                    // reached on the keys before it): one attempt without waiting, as a
                    // blocking acquire makes.
                    match pool.attempt_reserved(at, &want) {
                        Attempt::Acquired(grant) => Some(grant),
                        Attempt::Failed(e) => return self.give_up(&pool, e),
                        Attempt::Blocked { .. } => {
                            site.slot.unreserve();
                            None
                        }
                    }
                };
                grant.ok_or_else(|| ran_out(self.wait))
            } else {
                self.polled = true;
                match self.waiter.poll(&queue, &want, cx) {
                    Poll::Ready(result) => result,
                    Poll::Pending => {
                        if let Some(d) = self.deadline {
                            timer::wake_at(d, cx.waker().clone());
                        }
                        self.pool = Some(pool);
                        return Poll::Pending;
                    }
                }
            };
            self.polled = false;
            match got {
                Ok(grant) => self
                    .held
                    .push((at, Hold::of(&want, grant), grant.lease_until)),
                Err(e) => return self.give_up(&pool, e),
            }
        }
        Poll::Ready(Ok(PoolManyGuard::new(pool, std::mem::take(&mut self.held))))
    }
}

impl<P: PoolRef> Drop for Many<P> {
    fn drop(&mut self) {
        let Some(pool) = &self.pool else { return };
        let next = self.held.len();
        if next < self.slots.len() {
            let (at, _) = self.slots[next];
            if self.polled {
                if let Ok(site) = pool.site_at(at) {
                    let _ = self.waiter.abandon(&SiteQueue(&site), false);
                }
            } else {
                pool.unreserve(at);
            }
            for &(rest, _) in &self.slots[next + 1..] {
                pool.unreserve(rest);
            }
        }
        pool.release_holds(&self.held);
    }
}

/// Resolves to a [`PoolManyGuard`]. Dropping it before then releases what it took, drops its
/// reservations and cancels the wait exactly.
///
/// ```
/// use keylock_core::KeyPool;
/// let pool: KeyPool<String> = KeyPool::new();
/// futures::executor::block_on(async {
///     let both = pool.lock_many_async(["from", "to"]).await;
///     assert_eq!(both.len(), 2);
/// });
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct PoolManyLockFuture<P: PoolRef>(Many<P>);

impl<P: PoolRef> PoolManyLockFuture<P> {
    pub(super) fn new(pool: P, slots: Vec<(SlotRef, Mode)>) -> Self {
        Self(Many::new(pool, slots, Want::EXCLUSIVE, Wait::Forever))
    }
}

impl<P: PoolRef> Future for PoolManyLockFuture<P> {
    type Output = PoolManyGuard<P>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PoolManyGuard<P>> {
        self.get_mut().0.poll_many(cx).map(|r| match r {
            Ok(guard) => guard,
            // Plain untimed acquires have no way to fail.
            Err(e) => unreachable!("an untimed plain acquire failed: {e}"),
        })
    }
}

impl<P: PoolRef> fmt::Debug for PoolManyLockFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolManyLockFuture")
            .field("keys", &self.0.slots.len())
            .field("held", &self.0.held.len())
            .finish_non_exhaustive()
    }
}

/// Resolves to `Ok(`[`PoolManyGuard`]`)` once every key is held in its mode, or to the error
/// that ended the wait, holding nothing. Dropping it cancels exactly.
#[must_use = "futures do nothing unless polled"]
pub struct PoolManyAcquireFuture<P: PoolRef>(Many<P>);

impl<P: PoolRef> PoolManyAcquireFuture<P> {
    pub(super) fn new(pool: P, slots: Vec<(SlotRef, Mode)>, base: Want, wait: Wait) -> Self {
        Self(Many::new(pool, slots, base, wait))
    }
}

impl<P: PoolRef> Future for PoolManyAcquireFuture<P> {
    type Output = Result<PoolManyGuard<P>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.poll_many(cx)
    }
}

impl<P: PoolRef> fmt::Debug for PoolManyAcquireFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolManyAcquireFuture")
            .field("keys", &self.0.slots.len())
            .field("held", &self.0.held.len())
            .finish_non_exhaustive()
    }
}

// The future pins nothing: its queue node is boxed (`LazyWaiter`), so moving it is harmless
// whatever `P` is.
impl<P: PoolRef> Unpin for PoolLockFuture<P> {}

// The future pins nothing: its queue node is boxed (`LazyWaiter`), so moving it is harmless
// whatever `P` is.
impl<P: PoolRef> Unpin for PoolAcquireFuture<P> {}

// The future pins nothing: its queue node is boxed (`LazyWaiter`), so moving it is harmless
// whatever `P` is.
impl<P: PoolRef> Unpin for PoolManyLockFuture<P> {}

// The future pins nothing: its queue node is boxed (`LazyWaiter`), so moving it is harmless
// whatever `P` is.
impl<P: PoolRef> Unpin for PoolManyAcquireFuture<P> {}

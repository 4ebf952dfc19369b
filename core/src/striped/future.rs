//! Futures that acquire stripes, waiting in the same queues as blocked threads. Dropping one
//! cancels its wait exactly: it leaves the queue, and a stripe already granted to it passes on.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use super::{StripeGuard, StripedLock, StripesGuard};
use crate::acquisition::{Mode, Wait, Want};
use crate::entry::Hold;
use crate::error::{Error, Result};
use crate::site::SiteFuture;

/// The error a wait that ran out reports: `WouldBlock` for a try, `TimedOut` otherwise.
fn ran_out(error: Error, wait: Wait) -> Error {
    match (error, wait) {
        (Error::TimedOut, Wait::No) => Error::WouldBlock,
        (e, _) => e,
    }
}

/// One stripe, awaited.
struct One<P: Deref<Target = StripedLock>> {
    lock: Option<P>,
    stripe: usize,
    want: Want,
    wait: Wait,
    deadline: Option<Instant>,
    fut: SiteFuture,
}

impl<P: Deref<Target = StripedLock>> One<P> {
    fn new(lock: P, stripe: usize, want: Want, wait: Wait) -> Self {
        Self {
            lock: Some(lock),
            stripe,
            want,
            wait,
            deadline: wait.deadline(),
            fut: SiteFuture::new(),
        }
    }

    #[inline]
    fn poll_one(&mut self, cx: &mut Context<'_>) -> Poll<Result<StripeGuard<P>>> {
        let lock = self
            .lock
            .as_ref()
            .expect("stripe future polled after completion");
        let site = lock.site(self.stripe);
        match self.fut.poll(&site, &self.want, self.deadline, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(grant)) => {
                let lock = self.lock.take().expect("checked above");
                Poll::Ready(Ok(StripeGuard::new(lock, self.stripe, self.want, grant)))
            }
            Poll::Ready(Err(e)) => {
                self.lock = None;
                Poll::Ready(Err(ran_out(e, self.wait)))
            }
        }
    }
}

/// An async acquire of one stripe: ready at once (taken when the future was made) or waiting.
/// A ready future is just its guard, so the uncontended async path costs what the blocking one
/// does.
enum Begin<P: Deref<Target = StripedLock>> {
    /// Taken at creation: the guard is made when the future is polled (kept as scalars, so
    /// that the future stays a few words and nothing large is moved).
    Ready {
        /// `None` once the guard was handed out.
        lock: Option<P>,
        stripe: usize,
        mode: Mode,
        fence: u64,
    },
    /// Boxed: a waiting future allocates anyway (its queue node), and the ready one stays small.
    Waiting(Box<One<P>>),
    Done,
}

impl<P: Deref<Target = StripedLock>> Begin<P> {
    #[inline]
    fn start(lock: P, stripe: usize, want: Want, wait: Wait) -> Self {
        if want.is_plain()
            && let Some(fence) = lock
                .stripe_at(stripe)
                .entry
                .try_fast(want.mode, lock.policy.fifo)
        {
            return Begin::Ready {
                lock: Some(lock),
                stripe,
                mode: want.mode,
                fence,
            };
        }
        Begin::Waiting(Box::new(One::new(lock, stripe, want, wait)))
    }

    #[inline]
    fn poll_begin(&mut self, cx: &mut Context<'_>) -> Poll<Result<StripeGuard<P>>> {
        if let Begin::Waiting(one) = self {
            let out = one.poll_one(cx);
            if out.is_ready() {
                *self = Begin::Done;
            }
            return out;
        }
        match self {
            Begin::Ready {
                lock,
                stripe,
                mode,
                fence,
            } => {
                let lock = lock.take().expect("stripe future polled after completion");
                Poll::Ready(Ok(StripeGuard::plain(lock, *stripe, *mode, *fence)))
            }
            _ => panic!("stripe future polled after completion"),
        }
    }

    fn stripe(&self) -> Option<usize> {
        match self {
            Begin::Ready { stripe, .. } => Some(*stripe),
            Begin::Waiting(one) => Some(one.stripe),
            Begin::Done => None,
        }
    }
}

impl<P: Deref<Target = StripedLock>> Drop for Begin<P> {
    #[inline]
    fn drop(&mut self) {
        // Taken at creation and never handed out: release it.
        if let Begin::Ready {
            lock: Some(_),
            stripe,
            mode,
            fence,
        } = *self
            && let Begin::Ready { lock, .. } = self
            && let Some(lock) = lock.take()
        {
            drop(StripeGuard::plain(lock, stripe, mode, fence));
        }
    }
}

impl<P: Deref<Target = StripedLock>> Drop for One<P> {
    #[inline]
    fn drop(&mut self) {
        if let Some(lock) = &self.lock
            && self.fut.is_registered()
        {
            self.fut.cancel(&lock.site(self.stripe));
        }
    }
}

/// Resolves to a [`StripeGuard`]. Dropping it before then cancels the wait exactly: a waiter
/// leaves the queue, and a lock already handed to it passes on.
///
/// ```
/// use keylock_core::StripedLock;
/// let locks = StripedLock::new(16).unwrap();
/// let guard = futures::executor::block_on(locks.lock_async(&5u32));
/// assert!(locks.is_locked(&5u32));
/// drop(guard);
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct StripeLockFuture<P: Deref<Target = StripedLock>>(Begin<P>);

impl<P: Deref<Target = StripedLock>> StripeLockFuture<P> {
    #[inline]
    pub(super) fn new(lock: P, stripe: usize, want: Want) -> Self {
        Self(Begin::start(lock, stripe, want, Wait::Forever))
    }
}

impl<P: Deref<Target = StripedLock>> Future for StripeLockFuture<P> {
    type Output = StripeGuard<P>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StripeGuard<P>> {
        self.get_mut().0.poll_begin(cx).map(|r| match r {
            Ok(guard) => guard,
            // A plain untimed acquire has no way to fail.
            Err(e) => unreachable!("an untimed plain acquire failed: {e}"),
        })
    }
}

impl<P: Deref<Target = StripedLock>> fmt::Debug for StripeLockFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripeLockFuture")
            .field("stripe", &self.0.stripe())
            .finish()
    }
}

/// Resolves to `Ok(`[`StripeGuard`]`)`, or to the error that ended the wait (`TimedOut`,
/// `ReentrancyLimit`, ...). Dropping it cancels the wait exactly.
///
/// ```
/// use std::time::Duration;
/// use keylock_core::{Error, LockOptions, StripedLock, Wait};
/// let locks = StripedLock::new(16).unwrap();
/// let _held = locks.lock("k");
/// let opts = LockOptions::new().wait(Wait::For(Duration::from_millis(5)));
/// let late = futures::executor::block_on(locks.lock_with_async("k", opts));
/// assert_eq!(late.unwrap_err(), Error::TimedOut);
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct StripeAcquireFuture<P: Deref<Target = StripedLock>>(Begin<P>);

impl<P: Deref<Target = StripedLock>> StripeAcquireFuture<P> {
    pub(super) fn new(lock: P, stripe: usize, want: Want, wait: Wait) -> Self {
        Self(Begin::start(lock, stripe, want, wait))
    }
}

impl<P: Deref<Target = StripedLock>> Future for StripeAcquireFuture<P> {
    type Output = Result<StripeGuard<P>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.poll_begin(cx)
    }
}

impl<P: Deref<Target = StripedLock>> fmt::Debug for StripeAcquireFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripeAcquireFuture")
            .field("stripe", &self.0.stripe())
            .finish()
    }
}

/// Several stripes, awaited one after another in ascending order.
struct Many<P: Deref<Target = StripedLock>> {
    lock: Option<P>,
    items: Vec<(usize, Mode)>,
    base: Want,
    wait: Wait,
    deadline: Option<Instant>,
    held: Vec<(usize, Hold, Option<Instant>)>,
    fut: SiteFuture,
}

impl<P: Deref<Target = StripedLock>> Many<P> {
    fn new(lock: P, items: Vec<(usize, Mode)>, base: Want, wait: Wait) -> Self {
        let held = Vec::with_capacity(items.len());
        Self {
            lock: Some(lock),
            items,
            base,
            wait,
            deadline: wait.deadline(),
            held,
            fut: SiteFuture::new(),
        }
    }

    fn poll_many(&mut self, cx: &mut Context<'_>) -> Poll<Result<StripesGuard<P>>> {
        let lock = self
            .lock
            .as_ref()
            .expect("stripes future polled after completion");
        while self.held.len() < self.items.len() {
            let (stripe, mode) = self.items[self.held.len()];
            let want = Want { mode, ..self.base };
            match self.fut.poll(&lock.site(stripe), &want, self.deadline, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(grant)) => {
                    self.held
                        .push((stripe, Hold::of(&want, grant), grant.lease_until));
                }
                Poll::Ready(Err(e)) => {
                    lock.release_holds(&self.held);
                    self.held.clear();
                    self.lock = None;
                    return Poll::Ready(Err(ran_out(e, self.wait)));
                }
            }
        }
        let lock = self.lock.take().expect("checked above");
        Poll::Ready(Ok(StripesGuard::new(lock, std::mem::take(&mut self.held))))
    }
}

impl<P: Deref<Target = StripedLock>> Drop for Many<P> {
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            if self.fut.is_registered() {
                let (stripe, _) = self.items[self.held.len()];
                self.fut.cancel(&lock.site(stripe));
            }
            lock.release_holds(&self.held);
        }
    }
}

/// Resolves to a [`StripesGuard`]. Dropping it before then releases what it took and cancels
/// the wait exactly.
///
/// ```
/// use keylock_core::StripedLock;
/// let locks = StripedLock::new(16).unwrap();
/// let guard = futures::executor::block_on(locks.lock_many_async([1u8, 2].iter()));
/// assert!(locks.is_locked(&1u8) && locks.is_locked(&2u8));
/// drop(guard);
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct StripesLockFuture<P: Deref<Target = StripedLock>>(Many<P>);

impl<P: Deref<Target = StripedLock>> StripesLockFuture<P> {
    pub(super) fn new(lock: P, items: Vec<(usize, Mode)>) -> Self {
        Self(Many::new(lock, items, Want::EXCLUSIVE, Wait::Forever))
    }
}

impl<P: Deref<Target = StripedLock>> Future for StripesLockFuture<P> {
    type Output = StripesGuard<P>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StripesGuard<P>> {
        self.get_mut().0.poll_many(cx).map(|r| match r {
            Ok(guard) => guard,
            // Plain untimed acquires have no way to fail.
            Err(e) => unreachable!("an untimed plain acquire failed: {e}"),
        })
    }
}

impl<P: Deref<Target = StripedLock>> fmt::Debug for StripesLockFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripesLockFuture")
            .field("stripes", &self.0.items.len())
            .field("held", &self.0.held.len())
            .finish()
    }
}

/// Resolves to `Ok(`[`StripesGuard`]`)` once every stripe is held in its mode, or to the error
/// that ended the wait, holding nothing. Dropping it cancels exactly.
#[must_use = "futures do nothing unless polled"]
pub struct StripesAcquireFuture<P: Deref<Target = StripedLock>>(Many<P>);

impl<P: Deref<Target = StripedLock>> StripesAcquireFuture<P> {
    pub(super) fn new(lock: P, items: Vec<(usize, Mode)>, base: Want, wait: Wait) -> Self {
        Self(Many::new(lock, items, base, wait))
    }
}

impl<P: Deref<Target = StripedLock>> Future for StripesAcquireFuture<P> {
    type Output = Result<StripesGuard<P>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.poll_many(cx)
    }
}

impl<P: Deref<Target = StripedLock>> fmt::Debug for StripesAcquireFuture<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripesAcquireFuture")
            .field("stripes", &self.0.items.len())
            .field("held", &self.0.held.len())
            .finish()
    }
}

// The future pins nothing: its queue node is boxed (`LazyWaiter`), so moving it is harmless
// whatever `P` is.
impl<P: Deref<Target = StripedLock>> Unpin for StripeLockFuture<P> {}

// The future pins nothing: its queue node is boxed (`LazyWaiter`), so moving it is harmless
// whatever `P` is.
impl<P: Deref<Target = StripedLock>> Unpin for StripeAcquireFuture<P> {}

// The future pins nothing: its queue node is boxed (`LazyWaiter`), so moving it is harmless
// whatever `P` is.
impl<P: Deref<Target = StripedLock>> Unpin for StripesLockFuture<P> {}

// The future pins nothing: its queue node is boxed (`LazyWaiter`), so moving it is harmless
// whatever `P` is.
impl<P: Deref<Target = StripedLock>> Unpin for StripesAcquireFuture<P> {}

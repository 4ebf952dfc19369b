//! Waiting for an entry: blocking (a futex wait on the waiter's own node) and async (a future
//! that the agent thread wakes). Both re-check the holders' liveness and leases on a bounded
//! timed wait ([`LIVENESS_SLICE`]); a grant always comes by futex wake.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use super::layout::NODE_WAITING;
use super::lock::ShmLock;
use super::sys::{self, now_ns};
use super::table::{self, Req, TableAttempt, TableGrant, TableWakes};
use super::watch::{Watch, watch};
use crate::acquisition::Acquisition;
use crate::error::{Error, Result};
use crate::scope::KeySpace;

/// How long a waiter sleeps at most before it checks that the holders are alive (and so the
/// bound on noticing a holder's death, plus scheduling).
pub const LIVENESS_SLICE: Duration = Duration::from_millis(20);

/// When a waiter on `entry` must look again: the liveness slice, the holders' earliest lease
/// end, or its own deadline, whichever comes first.
fn recheck_at(t: &super::region::TableGuard<'_>, entry: u32, deadline: Option<u64>) -> Result<u64> {
    let mut at = now_ns().saturating_add(LIVENESS_SLICE.as_nanos() as u64);
    if let Some(l) = table::earliest_lease(t, entry)? {
        at = at.min(l);
    }
    if let Some(d) = deadline {
        at = at.min(d);
    }
    Ok(at)
}

/// What a waiter does when it is due to look again (under the mutex): reclaim dead holders,
/// end expired leases, hand the entry on; then take its grant, or give up at its deadline.
/// `Ok(None)`: keep waiting until the returned time.
fn look_again(
    t: &super::region::TableGuard<'_>,
    entry: u32,
    node: u32,
    epoch: u32,
    deadline: Option<u64>,
    fail: &Error,
    wakes: &mut TableWakes,
) -> Result<std::result::Result<TableGrant, u64>> {
    if let Some(g) = table::take_grant(t, node, epoch)? {
        return Ok(Ok(g));
    }
    if let Some(g) = table::acquire_front(t, node, epoch)? {
        return Ok(Ok(g));
    }
    table::reap_holders(t, entry, wakes)?;
    table::expire(t, entry, wakes)?;
    table::dispatch(t, entry, wakes)?;
    if let Some(g) = table::take_grant(t, node, epoch)? {
        return Ok(Ok(g));
    }
    if let Some(g) = table::acquire_front(t, node, epoch)? {
        return Ok(Ok(g));
    }
    if deadline.is_some_and(|d| now_ns() >= d) {
        table::cancel(t, node, epoch, wakes)?;
        return Err(fail.clone());
    }
    Ok(Err(recheck_at(t, entry, deadline)?))
}

/// The first attempt under the mutex: acquired, failed (no wait allowed), or queued.
enum First {
    Got(TableGrant),
    Queued {
        entry: u32,
        node: u32,
        epoch: u32,
        recheck: u64,
    },
}

fn first_attempt(
    lock: &ShmLock,
    space: KeySpace,
    key: &[u8],
    req: &Req,
    deadline: Option<u64>,
    fail: &Error,
    is_async: bool,
) -> Result<First> {
    let mut wakes = TableWakes::default();
    let result = (|| {
        let t = lock.table(&mut wakes)?;
        let entry = lock.entry_locked(&t, space, key)?;
        if let TableAttempt::Acquired(g) =
            table::acquire_locked(&t, entry, req, lock.max_holds(), &mut wakes)?
        {
            return Ok(First::Got(g));
        }
        if deadline.is_some_and(|d| now_ns() >= d) {
            // A dead holder may be all that stands in the way.
            table::reap_holders(&t, entry, &mut wakes)?;
            if let TableAttempt::Acquired(g) =
                table::acquire_locked(&t, entry, req, lock.max_holds(), &mut wakes)?
            {
                return Ok(First::Got(g));
            }
            return Err(fail.clone());
        }
        let (node, epoch) = table::enqueue(&t, entry, req, is_async)?;
        // A grant may be possible at once (e.g. the holder is dead).
        table::dispatch(&t, entry, &mut wakes)?;
        Ok(First::Queued {
            entry,
            node,
            epoch,
            recheck: recheck_at(&t, entry, deadline)?,
        })
    })();
    wakes.run(lock.region());
    result
}

/// Acquires `key` for `req`, blocking the thread until `deadline` (monotonic ns; `None`: no
/// limit); `fail` is the error once the deadline passes.
pub(crate) fn acquire_blocking(
    lock: &ShmLock,
    space: KeySpace,
    key: &[u8],
    req: &Req,
    deadline: Option<u64>,
    fail: Error,
) -> Result<TableGrant> {
    let (entry, node, epoch, mut recheck) =
        match first_attempt(lock, space, key, req, deadline, &fail, false)? {
            First::Got(g) => return Ok(g),
            First::Queued {
                entry,
                node,
                epoch,
                recheck,
            } => (entry, node, epoch, recheck),
        };
    let region = lock.region();
    loop {
        let n = region.node(node)?;
        if n.state.load(Ordering::Acquire) == NODE_WAITING {
            let now = now_ns();
            if now < recheck {
                let left = Duration::from_nanos(recheck - now);
                match watch(lock.region(), entry, req.proc) {
                    Watch::Holder(word, value, _) => {
                        sys::futex_waitv(&[(&n.state, NODE_WAITING), (word, value)], left);
                    }
                    Watch::Gone => recheck = now, // look again at once
                    Watch::Nothing => sys::futex_wait(&n.state, NODE_WAITING, Some(left)),
                }
            }
            if n.state.load(Ordering::Acquire) == NODE_WAITING && now_ns() < recheck {
                continue; // woken early by a stray wake
            }
        }
        let mut wakes = TableWakes::default();
        let outcome = (|| {
            let t = lock.table(&mut wakes)?;
            look_again(&t, entry, node, epoch, deadline, &fail, &mut wakes)
        })();
        wakes.run(region);
        match outcome? {
            Ok(g) => return Ok(g),
            Err(at) => recheck = at,
        }
    }
}

/// An async acquire of one key through a region; dropping it cancels the wait exactly.
#[derive(Debug)]
pub(crate) struct AcquireOne {
    lock: Arc<ShmLock>,
    space: KeySpace,
    key: Vec<u8>,
    req: Req,
    opts: crate::acquisition::LockOptions,
    deadline: Option<u64>,
    fail: Error,
    state: State,
}

#[derive(Debug)]
enum State {
    Start,
    Waiting {
        entry: u32,
        node: u32,
        epoch: u32,
        recheck: u64,
        id: u64,
    },
    Done,
}

impl AcquireOne {
    pub(crate) fn new(
        lock: Arc<ShmLock>,
        space: KeySpace,
        key: &[u8],
        req: Req,
        opts: crate::acquisition::LockOptions,
        deadline: Option<u64>,
        fail: Error,
    ) -> Self {
        Self {
            lock,
            space,
            key: key.to_vec(),
            req,
            opts,
            deadline,
            fail,
            state: State::Start,
        }
    }

    fn finish(&mut self, g: TableGrant) -> Acquisition {
        self.state = State::Done;
        self.lock.acquisition(g, &self.opts)
    }
}

impl Future for AcquireOne {
    type Output = Result<Acquisition>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.state {
            State::Done => Poll::Ready(Err(Error::InvalidArgument("polled after completion"))),
            State::Start => {
                if let Some(g) = this.lock.try_fast(this.space, &this.key, &this.req) {
                    return Poll::Ready(Ok(this.finish(g)));
                }
                match first_attempt(
                    &this.lock,
                    this.space,
                    &this.key,
                    &this.req,
                    this.deadline,
                    &this.fail,
                    true,
                ) {
                    Err(e) => {
                        this.state = State::Done;
                        Poll::Ready(Err(e))
                    }
                    Ok(First::Got(g)) => Poll::Ready(Ok(this.finish(g))),
                    Ok(First::Queued {
                        entry,
                        node,
                        epoch,
                        recheck,
                    }) => {
                        let id = this.lock.agent().id();
                        this.state = State::Waiting {
                            entry,
                            node,
                            epoch,
                            recheck,
                            id,
                        };
                        this.lock.agent().register(
                            this.lock.region(),
                            this.req.proc,
                            super::agent::Wait {
                                id,
                                entry,
                                node,
                                epoch,
                                wake_at: recheck,
                            },
                            cx.waker(),
                        );
                        Poll::Pending
                    }
                }
            }
            State::Waiting {
                entry,
                node,
                epoch,
                recheck,
                id,
            } => {
                let region = this.lock.region();
                let waiting = region
                    .node(node)
                    .is_ok_and(|n| n.state.load(Ordering::Acquire) == NODE_WAITING);
                if waiting && now_ns() < recheck && !this.lock.agent().take_due(id) {
                    this.lock.agent().register(
                        region,
                        this.req.proc,
                        super::agent::Wait {
                            id,
                            entry,
                            node,
                            epoch,
                            wake_at: recheck,
                        },
                        cx.waker(),
                    );
                    return Poll::Pending;
                }
                let mut wakes = TableWakes::default();
                let outcome = (|| {
                    let t = this.lock.table(&mut wakes)?;
                    look_again(
                        &t,
                        entry,
                        node,
                        epoch,
                        this.deadline,
                        &this.fail,
                        &mut wakes,
                    )
                })();
                wakes.run(region);
                match outcome {
                    Ok(Ok(g)) => {
                        this.lock.agent().unregister(id);
                        Poll::Ready(Ok(this.finish(g)))
                    }
                    Ok(Err(at)) => {
                        this.state = State::Waiting {
                            entry,
                            node,
                            epoch,
                            recheck: at,
                            id,
                        };
                        this.lock.agent().register(
                            region,
                            this.req.proc,
                            super::agent::Wait {
                                id,
                                entry,
                                node,
                                epoch,
                                wake_at: at,
                            },
                            cx.waker(),
                        );
                        Poll::Pending
                    }
                    Err(e) => {
                        this.lock.agent().unregister(id);
                        this.state = State::Done;
                        Poll::Ready(Err(e))
                    }
                }
            }
        }
    }
}

impl Drop for AcquireOne {
    fn drop(&mut self) {
        if let State::Waiting {
            node, epoch, id, ..
        } = self.state
        {
            self.lock.agent().unregister(id);
            let mut wakes = TableWakes::default();
            if let Ok(t) = self.lock.table(&mut wakes) {
                let _ = table::cancel(&t, node, epoch, &mut wakes);
            }
            wakes.run(self.lock.region());
        }
    }
}

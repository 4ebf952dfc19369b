//! The agent: one thread per open of a region. It holds the process slot's robust mutex for
//! as long as the region is open (that is how other processes see this one alive), and it
//! waits on behalf of every async waiter of this open: on one futex word, the slot's doorbell,
//! which a grant to an async waiter bumps. So no async waiter blocks an event loop or needs a
//! thread of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Condvar, Mutex};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::Duration;

use super::layout::NODE_WAITING;
use super::region::Region;
use super::sys::{self, now_ns};
use super::table::Wakes;
use super::{procs, repair};
use crate::error::{Error, Result};

/// One registered async wait.
#[derive(Debug)]
struct Registered {
    id: u64,
    node: u32,
    epoch: u32,
    /// When the waiter must look again (liveness, lease, deadline), monotonic ns.
    wake_at: u64,
    waker: Waker,
}

/// An async wait, as the future registers it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    pub(crate) id: u64,
    pub(crate) node: u32,
    pub(crate) epoch: u32,
    /// When the waiter must look again, monotonic ns.
    pub(crate) wake_at: u64,
}

/// What the agent thread and the lock handle share.
#[derive(Debug, Default)]
pub(crate) struct Agent {
    stop: AtomicBool,
    waits: Mutex<Vec<Registered>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Agent {
    /// A new registration id.
    pub(crate) fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Registers (or updates) async wait `w` and rings the doorbell so the agent looks.
    pub(crate) fn register(&self, region: &Region, proc: u32, w: Wait, waker: &Waker) {
        {
            let mut waits = self.waits.lock();
            match waits.iter_mut().find(|r| r.id == w.id) {
                Some(r) => {
                    r.wake_at = w.wake_at;
                    if !r.waker.will_wake(waker) {
                        r.waker = waker.clone();
                    }
                }
                None => waits.push(Registered {
                    id: w.id,
                    node: w.node,
                    epoch: w.epoch,
                    wake_at: w.wake_at,
                    waker: waker.clone(),
                }),
            }
        }
        ring(region, proc);
    }

    /// Forgets async wait `id`.
    pub(crate) fn unregister(&self, id: u64) {
        let mut waits = self.waits.lock();
        waits.retain(|w| w.id != id);
    }
}

fn ring(region: &Region, proc: u32) {
    if let Ok(p) = region.proc(proc) {
        p.doorbell.fetch_add(1, Ordering::Release);
        sys::futex_wake(&p.doorbell, 1);
    }
}

/// Starts the agent of a new open: it claims a process slot (returned) and keeps it.
pub(crate) fn start(region: Arc<Region>, agent: Arc<Agent>) -> Result<(u32, JoinHandle<()>)> {
    // The claim's result comes back through a parking_lot slot (not a std channel, which
    // ThreadSanitizer cannot see into here).
    let ready: Arc<Ready> = Arc::default();
    let name = format!("keylock-shm-{}", region.name);
    let tx = Arc::clone(&ready);
    let thread = std::thread::Builder::new()
        .name(name.chars().take(15).collect())
        .spawn(move || run(&region, &agent, &tx))
        .map_err(|e| Error::Unavailable(format!("spawning the agent thread: {e}").into()))?;
    let mut slot = ready.slot.lock();
    while slot.is_none() {
        ready.cond.wait(&mut slot);
    }
    match slot.take() {
        Some(Ok(proc)) => Ok((proc, thread)),
        Some(Err(e)) => {
            drop(slot);
            let _ = thread.join();
            Err(e)
        }
        None => Err(Error::Unavailable(
            "the agent thread failed to start".into(),
        )),
    }
}

/// Where the agent thread reports its claim.
#[derive(Debug, Default)]
struct Ready {
    slot: Mutex<Option<Result<u32>>>,
    cond: Condvar,
}

impl Ready {
    fn send(&self, r: Result<u32>) {
        *self.slot.lock() = Some(r);
        self.cond.notify_all();
    }
}

/// Locks the table as the agent (slot `proc`, or none yet), repairing it if needed.
fn table<'r>(
    region: &'r Region,
    proc: Option<u32>,
    wakes: &mut Wakes,
) -> Result<super::region::TableGuard<'r>> {
    let mut g = region.lock_table()?;
    let dead = region.runtime().holder.load(Ordering::Relaxed);
    region
        .runtime()
        .holder
        .store(proc.map_or(0, |p| p + 1), Ordering::Relaxed);
    if g.died {
        repair::repair(&mut g, dead, wakes)?;
    }
    Ok(g)
}

fn run(region: &Region, agent: &Agent, ready: &Ready) {
    let mut wakes = Wakes::default();
    let claimed =
        table(region, None, &mut wakes).and_then(|g| procs::claim(&g, sys::pid(), &mut wakes));
    wakes.run(region);
    let proc = match claimed {
        Ok(p) => p,
        Err(e) => {
            ready.send(Err(e));
            return;
        }
    };
    if let Ok(slot) = region.proc(proc) {
        // This thread holds the slot's mutex now: check the C library's mutex layout.
        slot.alive.check_lock_word();
    }
    ready.send(Ok(proc));
    let Ok(slot) = region.proc(proc) else { return };
    let mut due = Vec::new();
    while !agent.stop.load(Ordering::Acquire) {
        let seen = slot.doorbell.load(Ordering::Acquire);
        if agent.stop.load(Ordering::Acquire) {
            break;
        }
        let now = now_ns();
        let mut next = u64::MAX;
        {
            let mut waits = agent.waits.lock();
            waits.retain(|w| {
                let settled = region.node(w.node).map_or(true, |n| {
                    n.epoch.load(Ordering::Relaxed) != w.epoch
                        || n.state.load(Ordering::Acquire) != NODE_WAITING
                });
                if settled || now >= w.wake_at {
                    due.push(w.waker.clone());
                    false
                } else {
                    next = next.min(w.wake_at);
                    true
                }
            });
        }
        for waker in due.drain(..) {
            waker.wake();
        }
        let timeout = (next != u64::MAX).then(|| Duration::from_nanos(next - now));
        sys::futex_wait(&slot.doorbell, seen, timeout);
    }
    let mut wakes = Wakes::default();
    if let Ok(g) = table(region, Some(proc), &mut wakes) {
        let _ = procs::detach(&g, proc, &mut wakes);
        drop(g);
    }
    wakes.run(region);
}

/// Stops the agent thread (after the last use of the open) and waits for it.
pub(crate) fn stop(region: &Region, agent: &Agent, proc: u32, thread: JoinHandle<()>) {
    agent.stop.store(true, Ordering::Release);
    ring(region, proc);
    let _ = thread.join();
}

//! The agent: one thread per open of a region. It holds the process slot's robust mutex for
//! as long as the region is open (that is how other processes see this one alive), and it
//! waits on behalf of every async waiter of this open: on one futex word, the slot's doorbell,
//! which a grant to an async waiter bumps. So no async waiter blocks an event loop or needs a
//! thread of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use parking_lot::{Condvar, Mutex};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::Duration;

use super::layout::NODE_WAITING;
use super::region::Region;
use super::sys::{self, now_ns};
use super::table::TableWakes;
use super::watch::{Watch, watch};
use super::{procs, repair};
use crate::error::{Error, Result};

/// One registered async wait.
#[derive(Debug)]
struct Registered {
    id: u64,
    entry: u32,
    node: u32,
    epoch: u32,
    /// When the waiter must look again (liveness, lease, deadline), monotonic ns.
    wake_at: u64,
    waker: Waker,
    /// The holder it waits behind died: its future must look again now.
    due: bool,
}

/// An async wait, as the future registers it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    pub(crate) id: u64,
    pub(crate) entry: u32,
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
                    r.due = false;
                    if !r.waker.will_wake(waker) {
                        r.waker = waker.clone();
                    }
                }
                None => waits.push(Registered {
                    id: w.id,
                    entry: w.entry,
                    node: w.node,
                    epoch: w.epoch,
                    wake_at: w.wake_at,
                    waker: waker.clone(),
                    due: false,
                }),
            }
        }
        ring(region, proc);
    }

    /// Whether async wait `id` must look again now (its holder died).
    pub(crate) fn take_due(&self, id: u64) -> bool {
        let mut waits = self.waits.lock();
        waits
            .iter_mut()
            .find(|w| w.id == id)
            .is_some_and(|w| std::mem::take(&mut w.due))
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
    wakes: &mut TableWakes,
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
    let mut wakes = TableWakes::default();
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
        // The doorbell first, then the liveness words of the holders the waits are behind:
        // a dead holder wakes this thread (the kernel does it), which tells the waits.
        let mut words: Vec<(&AtomicU32, u32)> = vec![(&slot.doorbell, seen)];
        let mut holders: Vec<u32> = Vec::new();
        {
            let mut waits = agent.waits.lock();
            waits.retain_mut(|w| {
                let settled = region.node(w.node).map_or(true, |n| {
                    n.epoch.load(Ordering::Relaxed) != w.epoch
                        || n.state.load(Ordering::Acquire) != NODE_WAITING
                });
                if settled || now >= w.wake_at {
                    due.push(w.waker.clone());
                    return false;
                }
                next = next.min(w.wake_at);
                if w.due {
                    // Told already; look again soon if its future has not.
                    next = next.min(now + 1_000_000);
                    return true;
                }
                match watch(region, w.entry, proc) {
                    Watch::Gone => {
                        w.due = true;
                        due.push(w.waker.clone());
                    }
                    Watch::Holder(word, value, holder) => {
                        if !holders.contains(&holder) && words.len() < 128 {
                            holders.push(holder);
                            words.push((word, value));
                        }
                    }
                    Watch::Nothing => {}
                }
                true
            });
        }
        for waker in due.drain(..) {
            waker.wake();
        }
        let timeout = if next == u64::MAX {
            Duration::from_secs(3600)
        } else {
            Duration::from_nanos(next.saturating_sub(now))
        };
        sys::futex_waitv(&words, timeout);
    }
    let mut wakes = TableWakes::default();
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

//! Processes attached to a region: their slots, the liveness test, and reclaiming what a dead
//! one held or waited for.
//!
//! Each open of a region claims a slot and has one agent thread ([`super::agent`]) that locks
//! the slot's robust mutex for as long as the region is open. When the process dies, the kernel
//! releases that mutex with the owner-died mark, so `trylock` by anyone else answers "busy"
//! while the process lives and "owner died" once it is gone: a liveness test that costs one
//! atomic read while the process lives and is immune to pid reuse.

use std::sync::atomic::Ordering;

use super::layout::*;
use super::region::TableGuard;
use super::sys::{Locked, Tried};
use super::table::{self, Wakes};
use crate::error::{Error, Result};

/// Whether slot `p` belongs to a live process. A dead one's holds and waits are reclaimed
/// (and its slot freed) before this returns `false`.
pub(crate) fn is_alive(t: &TableGuard<'_>, p: u32, wakes: &mut Wakes) -> Result<bool> {
    let proc = t.region.proc(p)?;
    if proc.state.load(Ordering::Relaxed) != PROC_LIVE {
        // Records of a slot nobody holds: reclaim them (none, usually).
        reclaim(t, p, wakes)?;
        return Ok(false);
    }
    let unavailable =
        |e: std::io::Error| Error::Unavailable(format!("process slot {p}: {e}").into());
    match proc.alive.try_lock().map_err(unavailable)? {
        Tried::Busy => Ok(true),
        Tried::Locked(how) => {
            if how == Locked::OwnerDied {
                proc.alive.consistent();
            }
            let result = reclaim(t, p, wakes);
            proc.alive.unlock();
            result.map(|()| false)
        }
    }
}

/// Reclaims everything slot `p` holds or waits for, and frees the slot. An exclusive hold
/// ends with the fence advanced and the entry marked `died`, so that its next acquirer is told.
pub(crate) fn reclaim(t: &TableGuard<'_>, p: u32, wakes: &mut Wakes) -> Result<()> {
    let r = t.region;
    let proc = r.proc(p)?;
    proc.state.store(PROC_FREE, Ordering::Relaxed);
    proc.pid.store(0, Ordering::Relaxed);
    let mut touched = Vec::new();
    for i in 0..r.header.capacity {
        if table::reclaim_exclusive(t, i, p)? {
            touched.push(i);
        }
    }
    for i in 0..r.header.nodes {
        let n = r.node(i)?;
        if n.state.load(Ordering::Relaxed) == NODE_FREE || n.proc.load(Ordering::Relaxed) != p {
            continue;
        }
        if let Some(entry) = table::reclaim_node(t, i)? {
            touched.push(entry);
        }
    }
    touched.sort_unstable();
    touched.dedup();
    for entry in touched {
        table::dispatch(t, entry, wakes)?;
    }
    Ok(())
}

/// Claims a free slot for the calling thread, which then holds the slot's robust mutex for as
/// long as the process stays attached. `CapacityExceeded` when every slot is taken by a live
/// process.
pub(crate) fn claim(t: &TableGuard<'_>, pid: u32, wakes: &mut Wakes) -> Result<u32> {
    let r = t.region;
    for pass in 0..2 {
        for p in 0..r.header.procs {
            let proc = r.proc(p)?;
            if proc.state.load(Ordering::Relaxed) != PROC_FREE {
                continue;
            }
            let tried = proc
                .alive
                .try_lock()
                .map_err(|e| Error::Unavailable(format!("process slot {p}: {e}").into()))?;
            if let Tried::Locked(how) = tried {
                if how == Locked::OwnerDied {
                    proc.alive.consistent();
                }
                // Leftovers of an earlier owner of the slot, if a repair left any.
                reclaim(t, p, wakes)?;
                proc.epoch.store(
                    proc.epoch.load(Ordering::Relaxed).wrapping_add(1),
                    Ordering::Relaxed,
                );
                proc.pid.store(pid, Ordering::Relaxed);
                proc.state.store(PROC_LIVE, Ordering::Relaxed);
                return Ok(p);
            }
        }
        if pass == 0 {
            // No free slot: reclaim the slots of dead processes, then look again.
            for p in 0..r.header.procs {
                if r.proc(p)?.state.load(Ordering::Relaxed) == PROC_LIVE {
                    is_alive(t, p, wakes)?;
                }
            }
        }
    }
    Err(Error::CapacityExceeded)
}

/// Detaches slot `p` (the caller is its agent thread, which holds the slot's mutex): reclaims
/// what it still holds, frees the slot and unlocks its mutex.
pub(crate) fn detach(t: &TableGuard<'_>, p: u32, wakes: &mut Wakes) -> Result<()> {
    let result = reclaim(t, p, wakes);
    t.region.proc(p)?.alive.unlock();
    result
}

/// Reclaims the slots of every dead process (before reporting a full table).
pub(crate) fn reap_all(t: &TableGuard<'_>, wakes: &mut Wakes) -> Result<()> {
    for p in 0..t.region.header.procs {
        if t.region.proc(p)?.state.load(Ordering::Relaxed) == PROC_LIVE {
            is_alive(t, p, wakes)?;
        }
    }
    Ok(())
}

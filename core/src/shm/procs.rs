//! Processes attached to a region: claiming a slot, detaching from it, and reaping the slots
//! of dead processes.
//!
//! Each open of a region claims a slot and has one agent thread ([`super::agent`]) that locks
//! the slot's robust mutex for as long as the region is open. When the process dies, the kernel
//! releases that mutex with the owner-died mark, so `trylock` by anyone else answers "busy"
//! while the process lives and "owner died" once it is gone: a liveness test that costs one
//! atomic read while the process lives and is immune to pid reuse. The test itself and the
//! reclaiming of what a dead process held or waited for are in [`super::table`]
//! ([`is_alive`](super::table::is_alive), [`reclaim`](super::table::reclaim)): a grant skips dead waiters, and
//! reclaiming grants again what it freed, so the two are one piece of the lock rules.

use std::sync::atomic::Ordering;

use super::layout::*;
use super::region::TableGuard;
use super::sys::{Locked, Tried};
use super::table::{TableWakes, is_alive, reclaim};
use crate::error::{Error, Result};

/// Claims a free slot for the calling thread, which then holds the slot's robust mutex for as
/// long as the process stays attached. `CapacityExceeded` when every slot is taken by a live
/// process.
pub(crate) fn claim(t: &TableGuard<'_>, pid: u32, wakes: &mut TableWakes) -> Result<u32> {
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
                .map_err(|f| r.mutex_error(&format!("process slot {p}"), &f))?;
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
pub(crate) fn detach(t: &TableGuard<'_>, p: u32, wakes: &mut TableWakes) -> Result<()> {
    let result = reclaim(t, p, wakes);
    t.region.proc(p)?.alive.unlock();
    result
}

/// Reclaims the slots of every dead process (before reporting a full table).
pub(crate) fn reap_all(t: &TableGuard<'_>, wakes: &mut TableWakes) -> Result<()> {
    for p in 0..t.region.header.procs {
        if t.region.proc(p)?.state.load(Ordering::Relaxed) == PROC_LIVE {
            is_alive(t, p, wakes)?;
        }
    }
    Ok(())
}

//! The region's counts for [`KeyedLock::stats`](crate::KeyedLock::stats): one pass over the
//! entries under the table mutex, after reclaiming dead processes and ending expired leases
//! (as `info` does for one key), so that a dead or lapsed holder is not counted.
//!
//! Under the mutex, queues, shared holders and bindings cannot change, so those figures are
//! one consistent snapshot. The one thing that moves meanwhile is a plain exclusive hold taken
//! or released by the lock-free fast path (one compare-and-swap on the lock word): such a hold
//! is counted if its word showed it when the pass read that entry.

use std::sync::atomic::Ordering;

use super::layout::*;
use super::procs;
use super::region::TableGuard;
use super::table::{self, TableWakes};
use crate::error::Result;
use crate::stats::ScopeStats;

/// The counts of the region, with `me` (a process slot) as "here".
pub(crate) fn stats_locked(
    t: &TableGuard<'_>,
    me: u32,
    wakes: &mut TableWakes,
) -> Result<ScopeStats> {
    let r = t.region;
    procs::reap_all(t, wakes)?;
    let (mut held, mut waiting, mut shared_holds, mut in_use) = (0, 0, 0, 0);
    let (mut held_here, mut waiting_here) = (0, 0);
    for i in 0..r.header.capacity {
        let e = r.entry(i)?;
        if r.is_pool() && e.bind.load(Ordering::Relaxed) & 3 != BIND_BOUND {
            continue; // no key: nothing held or awaited
        }
        table::expire(t, i, wakes)?;
        let xproc = word::xproc(e.word.load(Ordering::Acquire));
        let shared = e.shared.load(Ordering::Relaxed) as usize;
        // A semaphore counts the units held (as in one process), a lock its shared holders.
        let shared_units = if r.header.permits != 0 {
            table::units_held(t, i)? as usize
        } else {
            shared
        };
        let (queued, queued_here) = walk(t, e.head.load(Ordering::Relaxed), me, "a wait queue")?;
        let (_, holding_here) = walk(t, e.holders.load(Ordering::Relaxed), me, "a holder list")?;
        let is_held = xproc != 0 || shared != 0;
        held += usize::from(is_held);
        shared_holds += shared_units;
        waiting += queued;
        in_use += usize::from(is_held || queued != 0);
        held_here += usize::from(xproc == me + 1 || holding_here != 0);
        waiting_here += queued_here;
    }
    Ok(ScopeStats {
        held: Some(held),
        waiting: Some(waiting),
        shared_holds: Some(shared_holds),
        held_here,
        waiting_here,
        capacity: Some(r.header.capacity as usize),
        entries_in_use: Some(in_use),
        ..ScopeStats::default()
    })
}

/// The nodes of the list that starts at `head` (node + 1; 0: empty): how many, and how many of
/// them are process slot `me`'s.
fn walk(t: &TableGuard<'_>, head: u32, me: u32, what: &str) -> Result<(usize, usize)> {
    let r = t.region;
    let (mut all, mut mine) = (0usize, 0usize);
    let mut at = head;
    while let Some(i) = at.checked_sub(1) {
        let n = r.node(i)?;
        all += 1;
        mine += usize::from(n.proc.load(Ordering::Relaxed) == me);
        at = n.next.load(Ordering::Relaxed);
        if all > r.header.nodes as usize {
            return Err(r.corrupt(&format!("a cycle in {what}")));
        }
    }
    Ok((all, mine))
}

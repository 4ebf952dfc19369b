//! The region's keys for [`KeyedLock::list`](crate::KeyedLock::list): one pass over the entries
//! under the table mutex, after reclaiming dead processes (as `stats` does), reading each held
//! or awaited entry's key, its state as `info` gives it, and its holders and waiters with
//! their process ids. A waiter's record holds when its wait began (monotonic time, which every
//! process of the host shares), so the report says how long each has waited.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::index;
use super::layout::*;
use super::procs;
use super::region::{Region, TableGuard};
use super::sys::now_ns;
use super::table::{self, TableWakes};
use crate::acquisition::{Mode, Owner};
use crate::error::Result;
use crate::report::{KeyReport, LockId, Party};

/// Every entry held or awaited now, in entry order.
pub(crate) fn list_locked(t: &TableGuard<'_>, wakes: &mut TableWakes) -> Result<Vec<KeyReport>> {
    let r = t.region;
    procs::reap_all(t, wakes)?;
    let mut out = Vec::new();
    for i in 0..r.header.capacity {
        let e = r.entry(i)?;
        if r.is_pool() && e.bind.load(Ordering::Relaxed) & 3 != BIND_BOUND {
            continue; // no key: nothing held or awaited
        }
        let info = table::info_locked(t, i, wakes)?;
        let now = now_ns();
        let waiters = parties(r, e.head.load(Ordering::Relaxed), now, "a wait queue")?;
        if info.is_none() && waiters.is_empty() {
            continue;
        }
        let xproc = word::xproc(e.word.load(Ordering::Acquire));
        let holders = if let Some(p) = xproc.checked_sub(1) {
            vec![Party {
                pid: pid_of(r, p)?,
                mode: Mode::Exclusive,
                units: 1,
                owner: Owner::new(e.owner.load(Ordering::Relaxed)),
                waited: None,
            }]
        } else {
            parties(r, e.holders.load(Ordering::Relaxed), now, "a holder list")?
        };
        let id = if r.is_pool() {
            match index::stored_key(r, e)? {
                (0, bytes) => LockId::Key(bytes),
                (1, bytes) => LockId::Name(bytes),
                _ => return Err(r.corrupt("a key space")),
            }
        } else {
            LockId::Stripe(i as usize)
        };
        out.push(KeyReport {
            id,
            info,
            holders,
            waiters,
        });
    }
    Ok(out)
}

/// The process id recorded in slot `p`, if the slot is live.
fn pid_of(r: &Region, p: u32) -> Result<Option<u32>> {
    let proc = r.proc(p)?;
    Ok((proc.state.load(Ordering::Relaxed) == PROC_LIVE)
        .then(|| proc.pid.load(Ordering::Relaxed))
        .filter(|&pid| pid != 0))
}

/// The records on the list that starts at `head` (node + 1; 0: empty): waiters (with how long
/// each has waited, by `now`) or shared holders.
fn parties(r: &Region, head: u32, now: u64, what: &str) -> Result<Vec<Party>> {
    let mut out = Vec::new();
    let mut at = head;
    while let Some(i) = at.checked_sub(1) {
        let n = r.node(i)?;
        let state = n.state.load(Ordering::Relaxed);
        let waiting = state == NODE_WAITING || state == NODE_NOTIFIED;
        out.push(Party {
            pid: pid_of(r, n.proc.load(Ordering::Relaxed))?,
            mode: if n.flags.load(Ordering::Relaxed) & NODE_SHARED != 0 {
                Mode::Shared
            } else {
                Mode::Exclusive
            },
            units: n.units.load(Ordering::Relaxed).max(1),
            owner: Owner::new(n.owner.load(Ordering::Relaxed)),
            waited: waiting
                .then(|| Duration::from_nanos(now.saturating_sub(n.fence.load(Ordering::Relaxed)))),
        });
        at = n.next.load(Ordering::Relaxed);
        if out.len() > r.header.nodes as usize {
            return Err(r.corrupt(&format!("a cycle in {what}")));
        }
    }
    Ok(out)
}

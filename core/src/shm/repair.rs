//! Repair after a process died holding the table mutex (the locker got `EOWNERDEAD`).
//!
//! The dead process may have stopped anywhere inside a critical section, so the derived
//! structures (free lists, bucket chains, wait queues, holder lists and their counts) are
//! rebuilt from the records that are each changed by one store: an entry's `bind` state and
//! lock word, and each node's `state`, `entry` and `seq`. A grant that was half made (the
//! lock word names the waiter's process but the node still says waiting) is completed. Then
//! the dead process is reclaimed like any other, and every entry is handed on.

use std::sync::atomic::Ordering;

use super::layout::*;
use super::lockword;
use super::region::TableGuard;
use super::table::{self, Wakes};
use crate::error::Result;

/// Repairs the table; `dead`: the slot + 1 of the process that held the mutex (0: unknown,
/// which means it died before changing anything).
pub(crate) fn repair(t: &mut TableGuard<'_>, dead: u32, wakes: &mut Wakes) -> Result<()> {
    let r = t.region;
    let h = r.header;
    // 1. Half-made grants.
    for i in 0..h.capacity {
        let e = r.entry(i)?;
        if let Some(g) = e.granting.swap(0, Ordering::Relaxed).checked_sub(1) {
            let n = r.node(g)?;
            let w = e.word.load(Ordering::Acquire);
            let state = n.state.load(Ordering::Relaxed);
            let proc = n.proc.load(Ordering::Relaxed);
            if (state == NODE_WAITING || state == NODE_NOTIFIED)
                && proc < h.procs
                && word::xproc(w) == proc + 1
            {
                e.owner
                    .store(n.owner.load(Ordering::Relaxed), Ordering::Relaxed);
                e.holds.store(1, Ordering::Relaxed);
                let lease = n.lease.load(Ordering::Relaxed);
                e.lease.store(
                    if lease == 0 {
                        0
                    } else {
                        super::sys::now_ns().saturating_add(lease)
                    },
                    Ordering::Relaxed,
                );
                n.fence.store(lockword::fence_of(e), Ordering::Relaxed);
                n.state.store(NODE_GRANTED, Ordering::Release);
                wakes.granted(g, n);
            }
        }
    }
    // 2. Entries: bindings, chains, free list; lists emptied for the rebuild.
    if r.is_pool() {
        for b in 0..h.buckets {
            r.bucket(b)?.store(0, Ordering::Relaxed);
        }
    }
    let rt = r.runtime();
    rt.free_entries.store(0, Ordering::Relaxed);
    for i in (0..h.capacity).rev() {
        let e = r.entry(i)?;
        e.head.store(0, Ordering::Relaxed);
        e.tail.store(0, Ordering::Relaxed);
        e.waiters.store(0, Ordering::Relaxed);
        e.holders.store(0, Ordering::Relaxed);
        e.shared.store(0, Ordering::Relaxed);
        if !r.is_pool() {
            continue;
        }
        let bind = e.bind.load(Ordering::Relaxed);
        if bind & 3 == BIND_BOUND {
            let bucket = r.bucket((e.hash.load(Ordering::Relaxed) as u32) & (h.buckets - 1))?;
            e.next
                .store(bucket.load(Ordering::Relaxed), Ordering::Relaxed);
            bucket.store(i + 1, Ordering::Relaxed);
        } else {
            // Half bound or unbound: free, and SLOW so that no fast path takes it.
            e.bind.store((bind & !3) | BIND_FREE, Ordering::Relaxed);
            let w = e.word.load(Ordering::Relaxed);
            rt.fence_floor.fetch_max(
                word::fence(w, e.fence_hi.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
            e.word
                .store(word::make(word::lo(w), true, 0), Ordering::Release);
            e.next
                .store(rt.free_entries.load(Ordering::Relaxed), Ordering::Relaxed);
            rt.free_entries.store(i + 1, Ordering::Relaxed);
        }
    }
    // 3. Nodes: the free list, holder lists, and wait queues in their FIFO order.
    rt.free_nodes.store(0, Ordering::Relaxed);
    let mut waiting = Vec::new();
    for i in (0..h.nodes).rev() {
        let n = r.node(i)?;
        let state = n.state.load(Ordering::Relaxed);
        let entry = n.entry.load(Ordering::Relaxed);
        let valid = entry < h.capacity && n.proc.load(Ordering::Relaxed) < h.procs;
        match state {
            NODE_WAITING | NODE_NOTIFIED if valid => {
                n.state.store(NODE_WAITING, Ordering::Relaxed);
                waiting.push((n.seq.load(Ordering::Relaxed), i));
            }
            NODE_HELD if valid => {
                let e = r.entry(entry)?;
                n.next
                    .store(e.holders.load(Ordering::Relaxed), Ordering::Relaxed);
                e.holders.store(i + 1, Ordering::Relaxed);
                e.shared
                    .store(e.shared.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
            NODE_GRANTED if valid => {}
            _ => {
                n.state.store(NODE_FREE, Ordering::Relaxed);
                n.next
                    .store(rt.free_nodes.load(Ordering::Relaxed), Ordering::Relaxed);
                rt.free_nodes.store(i + 1, Ordering::Relaxed);
            }
        }
    }
    waiting.sort_unstable();
    for (_, i) in waiting {
        let n = r.node(i)?;
        let e = r.entry(n.entry.load(Ordering::Relaxed))?;
        n.next.store(0, Ordering::Relaxed);
        match e.tail.load(Ordering::Relaxed).checked_sub(1) {
            Some(last) => r.node(last)?.next.store(i + 1, Ordering::Relaxed),
            None => e.head.store(i + 1, Ordering::Relaxed),
        }
        e.tail.store(i + 1, Ordering::Relaxed);
        e.waiters
            .store(e.waiters.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
    // 4. The dead process, then every entry handed on.
    if let Some(p) = dead.checked_sub(1)
        && p < h.procs
    {
        table::reclaim(t, p, wakes)?;
    }
    for i in 0..h.capacity {
        lockword::fix_slow(r.entry(i)?);
        table::dispatch(t, i, wakes)?;
    }
    t.repaired();
    Ok(())
}

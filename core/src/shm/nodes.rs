//! Nodes: the region's waiter and shared-holder records. Allocation from the free list, the
//! singly linked lists they stand in (an entry's wait queue and holder list), and shared
//! holders' tickets. All under the table mutex.

use std::sync::atomic::Ordering;

use super::layout::*;
use super::lockword::{fence_of, lease_end};
use super::region::TableGuard;
use crate::error::{Error, Result};

pub(crate) fn alloc_node(t: &TableGuard<'_>) -> Result<u32> {
    let r = t.region;
    let rt = r.runtime();
    let Some(index) = rt.free_nodes.load(Ordering::Relaxed).checked_sub(1) else {
        return Err(Error::CapacityExceeded);
    };
    let n = r.node(index)?;
    if n.state.load(Ordering::Relaxed) != NODE_FREE {
        return Err(r.corrupt("a busy node on the free list"));
    }
    rt.free_nodes
        .store(n.next.load(Ordering::Relaxed), Ordering::Relaxed);
    n.epoch.store(
        n.epoch.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
    n.next.store(0, Ordering::Relaxed);
    n.died.store(0, Ordering::Relaxed);
    Ok(index)
}

pub(crate) fn free_node(t: &TableGuard<'_>, index: u32) -> Result<()> {
    let r = t.region;
    let rt = r.runtime();
    let n = r.node(index)?;
    n.state.store(NODE_FREE, Ordering::Release);
    n.next
        .store(rt.free_nodes.load(Ordering::Relaxed), Ordering::Relaxed);
    rt.free_nodes.store(index + 1, Ordering::Relaxed);
    Ok(())
}

/// Removes node `index` from the singly linked list starting at `head` (node + 1).
pub(crate) fn unlink(
    t: &TableGuard<'_>,
    head: &std::sync::atomic::AtomicU32,
    tail: Option<&std::sync::atomic::AtomicU32>,
    index: u32,
) -> Result<bool> {
    let r = t.region;
    let mut prev: Option<u32> = None;
    let mut at = head.load(Ordering::Relaxed);
    let mut steps = 0u32;
    while let Some(i) = at.checked_sub(1) {
        let node = r.node(i)?;
        let next = node.next.load(Ordering::Relaxed);
        if i == index {
            match prev {
                None => head.store(next, Ordering::Relaxed),
                Some(p) => r.node(p)?.next.store(next, Ordering::Relaxed),
            }
            if let Some(tail) = tail
                && tail.load(Ordering::Relaxed) == index + 1
            {
                tail.store(prev.map_or(0, |p| p + 1), Ordering::Relaxed);
            }
            node.next.store(0, Ordering::Relaxed);
            return Ok(true);
        }
        prev = Some(i);
        at = next;
        steps += 1;
        if steps > r.header.nodes {
            return Err(r.corrupt("a cycle in a node list"));
        }
    }
    Ok(false)
}

/// The ticket of a shared holder's node.
pub(crate) fn ticket_of(t: &TableGuard<'_>, index: u32) -> Result<u64> {
    let epoch = t.region.node(index)?.epoch.load(Ordering::Relaxed);
    Ok((u64::from(epoch) << 32) | u64::from(index + 1))
}

/// The node a ticket names, if it is still that allocation.
pub(crate) fn node_of_ticket(t: &TableGuard<'_>, ticket: u64) -> Result<Option<u32>> {
    let Some(index) = (ticket as u32).checked_sub(1) else {
        return Ok(None);
    };
    if index >= t.region.header.nodes {
        return Ok(None);
    }
    let n = t.region.node(index)?;
    Ok((n.epoch.load(Ordering::Relaxed) == (ticket >> 32) as u32).then_some(index))
}

/// Adds a shared holder record for `proc` on entry `entry`.
pub(crate) fn add_shared(t: &TableGuard<'_>, entry: u32, index: u32, lease: u64) -> Result<()> {
    let r = t.region;
    let e = r.entry(entry)?;
    let n = r.node(index)?;
    n.entry.store(entry, Ordering::Relaxed);
    n.lease.store(lease_end(lease), Ordering::Relaxed);
    n.fence.store(fence_of(e), Ordering::Relaxed);
    n.next
        .store(e.holders.load(Ordering::Relaxed), Ordering::Relaxed);
    e.holders.store(index + 1, Ordering::Relaxed);
    e.shared.store(
        e.shared.load(Ordering::Relaxed).saturating_add(1),
        Ordering::Relaxed,
    );
    n.state.store(NODE_HELD, Ordering::Release);
    Ok(())
}

/// Removes a shared holder record.
pub(crate) fn drop_shared(t: &TableGuard<'_>, entry: u32, index: u32) -> Result<()> {
    let e = t.region.entry(entry)?;
    if unlink(t, &e.holders, None, index)? {
        e.shared.store(
            e.shared.load(Ordering::Relaxed).saturating_sub(1),
            Ordering::Relaxed,
        );
    }
    free_node(t, index)
}

//! Nodes: the region's waiter and shared-holder records. Allocation from the free list, the
//! singly linked lists they stand in (an entry's wait queue and holder list), and shared
//! holders' tickets. All under the table mutex.

use std::sync::atomic::Ordering;

use super::layout::*;
use super::lockword::{advanced, fence_of, lease_end_ns, update};
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
    n.units.store(0, Ordering::Relaxed);
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

/// Adds a holder record (node `index`) on entry `entry`: a shared holder (`units` 0), which
/// reads the current fence, or a semaphore holder of `units` units, which advances the fence
/// and gets a fence of its own. The caller has checked that the units fit.
pub(crate) fn add_shared(
    t: &TableGuard<'_>,
    entry: u32,
    index: u32,
    lease: u64,
    units: u32,
) -> Result<()> {
    let r = t.region;
    let e = r.entry(entry)?;
    let n = r.node(index)?;
    n.entry.store(entry, Ordering::Relaxed);
    n.lease.store(lease_end_ns(lease), Ordering::Relaxed);
    n.units.store(units, Ordering::Relaxed);
    if units != 0 {
        let _ = update(e, |w| Some(advanced(e, w) | word::SLOW));
        e.units.store(
            e.units.load(Ordering::Relaxed).saturating_add(units),
            Ordering::Relaxed,
        );
    }
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

/// Removes a holder record (a semaphore holder's units go back).
pub(crate) fn drop_shared(t: &TableGuard<'_>, entry: u32, index: u32) -> Result<()> {
    let e = t.region.entry(entry)?;
    if unlink(t, &e.holders, None, index)? {
        e.shared.store(
            e.shared.load(Ordering::Relaxed).saturating_sub(1),
            Ordering::Relaxed,
        );
        let units = t.region.node(index)?.units.swap(0, Ordering::Relaxed);
        e.units.store(
            e.units.load(Ordering::Relaxed).saturating_sub(units),
            Ordering::Relaxed,
        );
    }
    free_node(t, index)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;
    use crate::shm::region::scratch;

    /// The nodes on the list at `head`, first to last.
    fn walk(t: &TableGuard<'_>, head: &AtomicU32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut at = head.load(Ordering::Relaxed);
        while let Some(i) = at.checked_sub(1) {
            assert!(out.len() <= t.region.header.nodes as usize, "a cycle");
            out.push(i);
            at = t.region.node(i).unwrap().next.load(Ordering::Relaxed);
        }
        out
    }

    /// A list of `nodes` linked in order at (`head`, `tail`).
    fn link(t: &TableGuard<'_>, head: &AtomicU32, tail: &AtomicU32, nodes: &[u32]) {
        head.store(0, Ordering::Relaxed);
        tail.store(0, Ordering::Relaxed);
        for &i in nodes.iter().rev() {
            t.region
                .node(i)
                .unwrap()
                .next
                .store(head.load(Ordering::Relaxed), Ordering::Relaxed);
            head.store(i + 1, Ordering::Relaxed);
        }
        tail.store(nodes.last().map_or(0, |i| i + 1), Ordering::Relaxed);
    }

    #[test]
    fn every_node_can_be_allocated_once_then_the_table_is_full() {
        let r = scratch::region(KIND_STRIPED, 1, 0);
        let t = r.lock_table().unwrap();
        let mut taken: Vec<u32> = (0..r.header.nodes)
            .map(|_| {
                let i = alloc_node(&t).unwrap();
                r.node(i)
                    .unwrap()
                    .state
                    .store(NODE_WAITING, Ordering::Relaxed);
                i
            })
            .collect();
        assert!(matches!(alloc_node(&t), Err(Error::CapacityExceeded)));
        taken.sort_unstable();
        assert_eq!(taken, (0..r.header.nodes).collect::<Vec<_>>());
        free_node(&t, 17).unwrap();
        assert_eq!(alloc_node(&t).unwrap(), 17);
    }

    #[test]
    fn a_busy_node_on_the_free_list_is_corruption_not_a_second_owner() {
        let r = scratch::region(KIND_STRIPED, 1, 0);
        let t = r.lock_table().unwrap();
        let head = r.runtime().free_nodes.load(Ordering::Relaxed) - 1;
        r.node(head)
            .unwrap()
            .state
            .store(NODE_HELD, Ordering::Relaxed);
        assert!(matches!(alloc_node(&t), Err(Error::Incompatible(_))));
    }

    #[test]
    fn unlinking_keeps_the_rest_of_the_list_and_its_tail() {
        let r = scratch::region(KIND_STRIPED, 1, 0);
        let t = r.lock_table().unwrap();
        let (head, tail) = (AtomicU32::new(0), AtomicU32::new(0));
        // (list, node to take out, the list after, the tail after)
        let cases: [(&[u32], u32, &[u32], u32); 5] = [
            (&[3, 5, 9], 5, &[3, 9], 10),
            (&[3, 5, 9], 3, &[5, 9], 10),
            (&[3, 5, 9], 9, &[3, 5], 6),
            (&[4], 4, &[], 0),
            (&[3, 5, 9], 7, &[3, 5, 9], 10),
        ];
        for (list, out, after, tail_after) in cases {
            link(&t, &head, &tail, list);
            let found = unlink(&t, &head, Some(&tail), out).unwrap();
            assert_eq!(found, list.contains(&out), "{list:?} less {out}");
            assert_eq!(walk(&t, &head), after, "{list:?} less {out}");
            assert_eq!(
                tail.load(Ordering::Relaxed),
                tail_after,
                "{list:?} less {out}"
            );
        }
        // A cycle is reported, not walked forever.
        link(&t, &head, &tail, &[1, 2]);
        r.node(2).unwrap().next.store(1 + 1, Ordering::Relaxed);
        assert!(matches!(
            unlink(&t, &head, Some(&tail), 7),
            Err(Error::Incompatible(_))
        ));
    }

    #[test]
    fn a_ticket_names_one_allocation_of_a_node() {
        let r = scratch::region(KIND_STRIPED, 1, 0);
        let t = r.lock_table().unwrap();
        let i = alloc_node(&t).unwrap();
        let ticket = ticket_of(&t, i).unwrap();
        assert_eq!(node_of_ticket(&t, ticket).unwrap(), Some(i));
        free_node(&t, i).unwrap();
        assert_eq!(alloc_node(&t).unwrap(), i, "the same node again");
        assert_eq!(
            node_of_ticket(&t, ticket).unwrap(),
            None,
            "a stale ticket matched"
        );
        let now = ticket_of(&t, i).unwrap();
        assert_ne!(now, ticket);
        assert_eq!(node_of_ticket(&t, now).unwrap(), Some(i));
        assert_eq!(node_of_ticket(&t, 0).unwrap(), None);
        let past_the_end = u64::from(r.header.nodes + 1) | (now & !u64::from(u32::MAX));
        assert_eq!(node_of_ticket(&t, past_the_end).unwrap(), None);
    }
}

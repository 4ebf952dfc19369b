//! The lock rules of one entry in the region: the fast paths on the lock word, and everything
//! else under the table mutex (queueing, hand-off, shared holders, leases, owners and hold
//! counts, force-unlock, introspection).
//!
//! Hand-off follows the region's policy. Strict FIFO (`fifo`): a release with waiters grants
//! the lock to the first of them (and to every shared waiter right behind a shared grant), and
//! a newcomer never passes a waiter. Eventual fairness (the default, as in one process): a
//! release wakes the first waiter (`NODE_NOTIFIED`) to try for the lock, and an exclusive
//! newcomer may take it first; a waiter that has waited [`FAIR_AFTER`], and an async waiter
//! always, is granted the lock directly. Shared waiters are always granted in order, and a shared request never passes a
//! queued waiter, so neither readers nor writers starve.

use std::sync::atomic::Ordering;

use super::layout::*;
use super::lockword::{
    advanced, clear_exclusive, fence_of, fix_slow, lease_end_ns, take_died, update,
};
use super::nodes::{
    add_shared, alloc_node, drop_shared, free_node, node_of_ticket, ticket_of, unlink,
};
use super::region::TableGuard;
use super::sys::{self, Locked, Tried, now_ns};
use crate::acquisition::{LockInfo, Mode, Owner};
use crate::error::{Error, Result};
use crate::wait::FAIR_AFTER;

/// What an acquire asks for, as the region stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Req {
    pub(crate) mode: Mode,
    /// Lease length in ns (0: none).
    pub(crate) lease: u64,
    /// Owner (0: none; always 0 in a region that is not reentrant).
    pub(crate) owner: u64,
    /// The caller's process slot.
    pub(crate) proc: u32,
    /// Semaphore: the units asked for (1 to the permits; the mode is then `Shared`). Lock: 0.
    pub(crate) units: u32,
}

impl Req {
    /// Whether the fast path may take it: exclusive, no lease, no owner.
    pub(crate) fn is_plain(&self) -> bool {
        self.mode == Mode::Exclusive && self.lease == 0 && self.owner == 0 && self.units == 0
    }
}

/// An acquisition made in the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableGrant {
    pub(crate) entry: u32,
    pub(crate) fence: u64,
    pub(crate) mode: Mode,
    /// Shared: node + 1 | generation << 32. Exclusive: 0.
    pub(crate) ticket: u64,
    /// Lease end, monotonic ns (0: none).
    pub(crate) lease_until: u64,
    pub(crate) died: bool,
    /// Semaphore: the units held. Lock: 0.
    pub(crate) units: u32,
}

/// The outcome of an acquire attempt under the mutex.
#[derive(Debug)]
pub(crate) enum TableAttempt {
    Acquired(TableGrant),
    Blocked,
}

/// Futex wakes to make once the table mutex is released.
#[derive(Debug, Default)]
pub(crate) struct TableWakes {
    nodes: Vec<u32>,
    doorbells: Vec<u32>,
}

impl TableWakes {
    /// Records a grant to `index` (and its process's doorbell if the waiter is async).
    pub(crate) fn granted(&mut self, index: u32, node: &Node) {
        self.nodes.push(index);
        if node.flags.load(Ordering::Relaxed) & NODE_ASYNC != 0 {
            self.doorbells.push(node.proc.load(Ordering::Relaxed));
        }
    }

    /// Wakes everyone collected. Nodes may have been reused since: a wake is only a prompt
    /// to re-read a word, so a stray one is harmless.
    pub(crate) fn run(self, r: &super::region::Region) {
        for n in self.nodes {
            if let Ok(node) = r.node(n) {
                sys::futex_wake(&node.state, i32::MAX);
            }
        }
        for p in self.doorbells {
            if let Ok(proc) = r.proc(p) {
                proc.doorbell.fetch_add(1, Ordering::Release);
                sys::futex_wake(&proc.doorbell, 1);
            }
        }
    }
}

// ----- acquire -----------------------------------------------------------------------------

/// Acquires entry `entry` for `req` now if the rules allow. `Blocked`: someone holds it or
/// waits ahead. Ends expired leases first.
pub(crate) fn acquire_locked(
    t: &TableGuard<'_>,
    entry: u32,
    req: &Req,
    max_holds: u32,
    wakes: &mut TableWakes,
) -> Result<TableAttempt> {
    let r = t.region;
    let e = r.entry(entry)?;
    expire(t, entry, wakes)?;
    let w = e.word.load(Ordering::Acquire);
    // Reentrancy: the exclusive holder's owner (in the same process) asks again.
    if req.owner != 0
        && word::xproc(w) == req.proc + 1
        && e.owner.load(Ordering::Relaxed) == req.owner
    {
        let holds = e.holds.load(Ordering::Relaxed);
        if holds >= max_holds {
            return Err(Error::ReentrancyLimit);
        }
        e.holds.store(holds + 1, Ordering::Relaxed);
        fix_slow(e);
        return Ok(TableAttempt::Acquired(TableGrant {
            entry,
            fence: fence_of(e),
            mode: Mode::Exclusive,
            ticket: 0,
            lease_until: e.lease.load(Ordering::Relaxed),
            died: false,
            units: 0,
        }));
    }
    if word::xproc(w) != 0 {
        if r.header.permits != 0 {
            return Err(r.corrupt("an exclusive holder in a semaphore region"));
        }
        return Ok(TableAttempt::Blocked);
    }
    if let Some(head) = e.head.load(Ordering::Relaxed).checked_sub(1) {
        // Only an exclusive newcomer may pass, and only a waiter woken to try (a young one:
        // an old one is granted the lock directly).
        let notified = r.node(head)?.state.load(Ordering::Relaxed) == NODE_NOTIFIED;
        if r.fifo() || req.mode != Mode::Exclusive || !notified {
            return Ok(TableAttempt::Blocked);
        }
    }
    match req.mode {
        Mode::Exclusive => {
            if e.shared.load(Ordering::Relaxed) != 0 {
                return Ok(TableAttempt::Blocked);
            }
            let Some((_, new)) = update(e, |w| {
                (word::xproc(w) == 0).then(|| {
                    let a = advanced(e, w);
                    word::make(word::lo(a), true, req.proc + 1)
                })
            }) else {
                return Ok(TableAttempt::Blocked);
            };
            e.owner.store(req.owner, Ordering::Relaxed);
            e.holds.store(1, Ordering::Relaxed);
            let until = lease_end_ns(req.lease);
            e.lease.store(until, Ordering::Relaxed);
            let died = take_died(e);
            fix_slow(e);
            Ok(TableAttempt::Acquired(TableGrant {
                entry,
                fence: word::fence(new, e.fence_hi.load(Ordering::Relaxed)),
                mode: Mode::Exclusive,
                ticket: 0,
                lease_until: until,
                died,
                units: 0,
            }))
        }
        Mode::Shared => {
            if r.header.permits != 0 {
                let held = units_held(t, entry)?;
                if req.units == 0 || req.units > r.header.permits {
                    return Err(Error::InvalidArgument(
                        "a semaphore's weight is at least 1 and at most its permits",
                    ));
                }
                if held + req.units > r.header.permits {
                    return Ok(TableAttempt::Blocked);
                }
            }
            // Shut out the fast path first: the word does not count shared holders, so an
            // exclusive fast acquire could otherwise slip in between the check and the add.
            if update(e, |w| (word::xproc(w) == 0).then_some(w | word::SLOW)).is_none() {
                return Ok(TableAttempt::Blocked);
            }
            let index = match alloc_node(t) {
                Ok(index) => index,
                Err(err) => {
                    fix_slow(e);
                    return Err(err);
                }
            };
            let n = r.node(index)?;
            n.proc.store(req.proc, Ordering::Relaxed);
            n.flags.store(NODE_SHARED, Ordering::Relaxed);
            n.owner.store(req.owner, Ordering::Relaxed);
            add_shared(t, entry, index, req.lease, req.units)?;
            let died = take_died(e);
            fix_slow(e);
            Ok(TableAttempt::Acquired(TableGrant {
                entry,
                fence: n.fence.load(Ordering::Relaxed),
                mode: Mode::Shared,
                ticket: ticket_of(t, index)?,
                lease_until: n.lease.load(Ordering::Relaxed),
                died,
                units: req.units,
            }))
        }
    }
}

/// Queues a waiter for `req` on `entry`; returns its node and generation.
pub(crate) fn enqueue(
    t: &TableGuard<'_>,
    entry: u32,
    req: &Req,
    is_async: bool,
) -> Result<(u32, u32)> {
    let r = t.region;
    let e = r.entry(entry)?;
    let index = alloc_node(t)?;
    let n = r.node(index)?;
    n.entry.store(entry, Ordering::Relaxed);
    n.proc.store(req.proc, Ordering::Relaxed);
    let mut flags = if req.mode == Mode::Shared {
        NODE_SHARED
    } else {
        0
    };
    if is_async {
        flags |= NODE_ASYNC;
    }
    n.flags.store(flags, Ordering::Relaxed);
    n.owner.store(req.owner, Ordering::Relaxed);
    n.lease.store(req.lease, Ordering::Relaxed);
    n.units.store(req.units, Ordering::Relaxed);
    let rt = r.runtime();
    // Counters read from the region wrap or saturate: a corrupt one must not panic.
    let seq = rt.next_seq.load(Ordering::Relaxed).wrapping_add(1);
    rt.next_seq.store(seq, Ordering::Relaxed);
    n.seq.store(seq, Ordering::Relaxed);
    n.fence.store(now_ns(), Ordering::Relaxed);
    n.state.store(NODE_WAITING, Ordering::Release);
    match e.tail.load(Ordering::Relaxed).checked_sub(1) {
        Some(last) => r.node(last)?.next.store(index + 1, Ordering::Relaxed),
        None => e.head.store(index + 1, Ordering::Relaxed),
    }
    e.tail.store(index + 1, Ordering::Relaxed);
    e.waiters.store(
        e.waiters.load(Ordering::Relaxed).saturating_add(1),
        Ordering::Relaxed,
    );
    fix_slow(e);
    Ok((index, n.epoch.load(Ordering::Relaxed)))
}

/// A waiter's node, if it is still that allocation.
fn waiter<'r>(t: &TableGuard<'r>, index: u32, epoch: u32) -> Result<&'r Node> {
    let n = t.region.node(index)?;
    if n.epoch.load(Ordering::Relaxed) != epoch || n.state.load(Ordering::Relaxed) == NODE_FREE {
        return Err(Error::Unavailable(
            "this process's wait was reclaimed (was it taken for dead?)".into(),
        ));
    }
    Ok(n)
}

/// The waiter's grant, if it has one: takes it up (an exclusive grant's node is freed; a
/// shared grant's node stays as the holder record).
pub(crate) fn take_grant(t: &TableGuard<'_>, index: u32, epoch: u32) -> Result<Option<TableGrant>> {
    let r = t.region;
    let n = waiter(t, index, epoch)?;
    let entry = n.entry.load(Ordering::Relaxed);
    let e = r.entry(entry)?;
    match n.state.load(Ordering::Acquire) {
        NODE_GRANTED if r.header.permits != 0 => {
            Err(r.corrupt("an exclusive grant in a semaphore region"))
        }
        NODE_GRANTED => {
            let grant = TableGrant {
                entry,
                fence: n.fence.load(Ordering::Relaxed),
                mode: Mode::Exclusive,
                ticket: 0,
                lease_until: e.lease.load(Ordering::Relaxed),
                died: n.died.load(Ordering::Relaxed) != 0,
                units: 0,
            };
            free_node(t, index)?;
            Ok(Some(grant))
        }
        NODE_HELD => Ok(Some(TableGrant {
            entry,
            fence: n.fence.load(Ordering::Relaxed),
            mode: Mode::Shared,
            ticket: ticket_of(t, index)?,
            lease_until: n.lease.load(Ordering::Relaxed),
            died: n.died.load(Ordering::Relaxed) != 0,
            units: n.units.load(Ordering::Relaxed),
        })),
        _ => Ok(None),
    }
}

/// A notified front waiter's try for the lock: takes it if it is free (the node goes),
/// else waits again. `None`: not taken.
pub(crate) fn acquire_front(
    t: &TableGuard<'_>,
    index: u32,
    epoch: u32,
) -> Result<Option<TableGrant>> {
    let r = t.region;
    let n = waiter(t, index, epoch)?;
    // A semaphore region hands off in strict FIFO order, so nobody is woken to try.
    if n.state.load(Ordering::Acquire) != NODE_NOTIFIED || r.header.permits != 0 {
        return Ok(None);
    }
    let entry = n.entry.load(Ordering::Relaxed);
    let e = r.entry(entry)?;
    let proc = n.proc.load(Ordering::Relaxed);
    r.proc(proc)?; // in range, so that `proc + 1` is a slot
    let free = e.head.load(Ordering::Relaxed) == index + 1
        && e.shared.load(Ordering::Relaxed) == 0
        && word::xproc(e.word.load(Ordering::Acquire)) == 0;
    if !free {
        n.state.store(NODE_WAITING, Ordering::Release);
        return Ok(None);
    }
    let (_, new) = update(e, |w| {
        (word::xproc(w) == 0).then(|| {
            let a = advanced(e, w);
            word::make(word::lo(a), true, proc + 1)
        })
    })
    .ok_or_else(|| r.corrupt("lock word"))?;
    unlink(t, &e.head, Some(&e.tail), index)?;
    e.waiters.store(
        e.waiters.load(Ordering::Relaxed).saturating_sub(1),
        Ordering::Relaxed,
    );
    e.owner
        .store(n.owner.load(Ordering::Relaxed), Ordering::Relaxed);
    e.holds.store(1, Ordering::Relaxed);
    let until = lease_end_ns(n.lease.load(Ordering::Relaxed));
    e.lease.store(until, Ordering::Relaxed);
    let died = take_died(e);
    free_node(t, index)?;
    fix_slow(e);
    Ok(Some(TableGrant {
        entry,
        fence: word::fence(new, e.fence_hi.load(Ordering::Relaxed)),
        mode: Mode::Exclusive,
        ticket: 0,
        lease_until: until,
        died,
        units: 0,
    }))
}

/// Ends a wait that will not be taken up (timed out, cancelled): unqueues it, or gives back
/// the grant it got in the meantime.
pub(crate) fn cancel(
    t: &TableGuard<'_>,
    index: u32,
    epoch: u32,
    wakes: &mut TableWakes,
) -> Result<()> {
    let r = t.region;
    let Ok(n) = waiter(t, index, epoch) else {
        return Ok(());
    };
    let entry = n.entry.load(Ordering::Relaxed);
    let e = r.entry(entry)?;
    match n.state.load(Ordering::Acquire) {
        NODE_WAITING | NODE_NOTIFIED => {
            if unlink(t, &e.head, Some(&e.tail), index)? {
                e.waiters.store(
                    e.waiters.load(Ordering::Relaxed).saturating_sub(1),
                    Ordering::Relaxed,
                );
            }
            free_node(t, index)?;
        }
        NODE_GRANTED => {
            let fence = n.fence.load(Ordering::Relaxed);
            let proc = n.proc.load(Ordering::Relaxed);
            free_node(t, index)?;
            let w = e.word.load(Ordering::Acquire);
            if word::xproc(w) == proc.wrapping_add(1) && word::lo(w) == fence & word::LO_MAX {
                clear_exclusive(e);
                let _ = update(e, |w| Some(w & !word::XPROC));
            }
        }
        NODE_HELD => drop_shared(t, entry, index)?,
        _ => {}
    }
    dispatch(t, entry, wakes)
}

// ----- release, extend, expiry, hand-off --------------------------------------------------------

/// Releases the hold `grant` describes for slot `proc`. `Err(NotOwner)` when it is no longer
/// current (the caller turns that into `LeaseExpired` when its lease ran out); `owner`: who
/// releases, for a reentrant lock (`None`: whoever).
pub(crate) fn release_locked(
    t: &TableGuard<'_>,
    grant: &TableGrant,
    proc: u32,
    owner: Option<Owner>,
    wakes: &mut TableWakes,
) -> Result<()> {
    let r = t.region;
    let e = r.entry(grant.entry)?;
    expire(t, grant.entry, wakes)?;
    match grant.mode {
        Mode::Exclusive => {
            let w = e.word.load(Ordering::Acquire);
            if word::xproc(w) != proc + 1
                || word::fence(w, e.fence_hi.load(Ordering::Relaxed)) != grant.fence
            {
                return Err(Error::NotOwner);
            }
            let holder = e.owner.load(Ordering::Relaxed);
            if let Some(o) = owner
                && holder != 0
                && holder != o.get()
            {
                return Err(Error::NotOwner);
            }
            let holds = e.holds.load(Ordering::Relaxed);
            if holds > 1 {
                e.holds.store(holds - 1, Ordering::Relaxed);
                fix_slow(e);
                return Ok(());
            }
            clear_exclusive(e);
            let _ = update(e, |w| Some(w & !word::XPROC));
        }
        Mode::Shared => {
            let index = node_of_ticket(t, grant.ticket)?.ok_or(Error::NotOwner)?;
            let n = r.node(index)?;
            if n.state.load(Ordering::Relaxed) != NODE_HELD
                || n.entry.load(Ordering::Relaxed) != grant.entry
                || n.proc.load(Ordering::Relaxed) != proc
            {
                return Err(Error::NotOwner);
            }
            drop_shared(t, grant.entry, index)?;
        }
    }
    dispatch(t, grant.entry, wakes)
}

/// Whether `grant` is still current.
pub(crate) fn is_current_locked(t: &TableGuard<'_>, grant: &TableGrant, proc: u32) -> Result<bool> {
    let r = t.region;
    let e = r.entry(grant.entry)?;
    let now = now_ns();
    Ok(match grant.mode {
        Mode::Exclusive => {
            let w = e.word.load(Ordering::Acquire);
            let lease = e.lease.load(Ordering::Relaxed);
            word::xproc(w) == proc + 1
                && word::fence(w, e.fence_hi.load(Ordering::Relaxed)) == grant.fence
                && (lease == 0 || now < lease)
        }
        Mode::Shared => match node_of_ticket(t, grant.ticket)? {
            Some(index) => {
                let n = r.node(index)?;
                let lease = n.lease.load(Ordering::Relaxed);
                n.state.load(Ordering::Relaxed) == NODE_HELD
                    && n.entry.load(Ordering::Relaxed) == grant.entry
                    && n.proc.load(Ordering::Relaxed) == proc
                    && (lease == 0 || now < lease)
            }
            None => false,
        },
    })
}

/// Whether the exclusive holder of `entry` is `owner` (a hold without an owner is anyone's,
/// and `None` asks nothing).
pub(crate) fn held_by(t: &TableGuard<'_>, entry: u32, owner: Option<Owner>) -> Result<bool> {
    let holder = t.region.entry(entry)?.owner.load(Ordering::Relaxed);
    Ok(match owner {
        Some(o) => holder == 0 || holder == o.get(),
        None => true,
    })
}

/// Moves the lease end of `grant` to `lease` ns from now. `NotOwner` when not current,
/// `InvalidArgument` for an acquisition without a lease. Returns the new end.
pub(crate) fn extend_locked(
    t: &TableGuard<'_>,
    grant: &TableGrant,
    proc: u32,
    lease: u64,
    wakes: &mut TableWakes,
) -> Result<u64> {
    expire(t, grant.entry, wakes)?;
    if !is_current_locked(t, grant, proc)? {
        return Err(Error::NotOwner);
    }
    let no_lease = Error::InvalidArgument("the acquisition has no lease");
    let until = lease_end_ns(lease.max(1));
    match grant.mode {
        Mode::Exclusive => {
            let e = t.region.entry(grant.entry)?;
            if e.lease.load(Ordering::Relaxed) == 0 {
                return Err(no_lease);
            }
            e.lease.store(until, Ordering::Relaxed);
        }
        Mode::Shared => {
            let index = node_of_ticket(t, grant.ticket)?.ok_or(Error::NotOwner)?;
            let n = t.region.node(index)?;
            if n.lease.load(Ordering::Relaxed) == 0 {
                return Err(no_lease);
            }
            n.lease.store(until, Ordering::Relaxed);
        }
    }
    Ok(until)
}

/// Ends the leases of `entry` that have run out (an exclusive one advances the fence) and
/// hands the lock on. Returns whether anything ended.
pub(crate) fn expire(t: &TableGuard<'_>, entry: u32, wakes: &mut TableWakes) -> Result<bool> {
    let r = t.region;
    let e = r.entry(entry)?;
    let now = now_ns();
    let mut ended = false;
    let lease = e.lease.load(Ordering::Relaxed);
    if lease != 0 && now >= lease && word::xproc(e.word.load(Ordering::Acquire)) != 0 {
        clear_exclusive(e);
        let _ = update(e, |w| Some(advanced(e, w) & !word::XPROC));
        ended = true;
    }
    let mut at = e.holders.load(Ordering::Relaxed);
    let mut steps = 0u32;
    while let Some(i) = at.checked_sub(1) {
        let n = r.node(i)?;
        at = n.next.load(Ordering::Relaxed);
        let lease = n.lease.load(Ordering::Relaxed);
        if lease != 0 && now >= lease {
            if r.header.permits != 0 {
                // A semaphore holder's lease end moves the fence on, as an exclusive one's.
                let _ = update(e, |w| Some(advanced(e, w)));
            }
            drop_shared(t, entry, i)?;
            ended = true;
        }
        steps += 1;
        if steps > r.header.nodes {
            return Err(r.corrupt("a cycle in a holder list"));
        }
    }
    if ended {
        dispatch(t, entry, wakes)?;
    }
    Ok(ended)
}

/// The earliest lease end among the holders of `entry` (monotonic ns), if any.
pub(crate) fn earliest_lease(t: &TableGuard<'_>, entry: u32) -> Result<Option<u64>> {
    let r = t.region;
    let e = r.entry(entry)?;
    let mut earliest = match e.lease.load(Ordering::Relaxed) {
        0 => None,
        l => Some(l),
    };
    let mut at = e.holders.load(Ordering::Relaxed);
    let mut steps = 0u32;
    while let Some(i) = at.checked_sub(1) {
        let n = r.node(i)?;
        let l = n.lease.load(Ordering::Relaxed);
        if l != 0 {
            earliest = Some(earliest.map_or(l, |x: u64| x.min(l)));
        }
        at = n.next.load(Ordering::Relaxed);
        steps += 1;
        if steps > r.header.nodes {
            return Err(r.corrupt("a cycle in a holder list"));
        }
    }
    Ok(earliest)
}

/// The units held of a semaphore `entry`, checked against its holder records: each holds 1 to
/// the permits, they sum to the entry's count, and the sum is at most the permits. Anything
/// else is a corrupt region (`Incompatible`), never a grant past the permits.
pub(crate) fn units_held(t: &TableGuard<'_>, entry: u32) -> Result<u32> {
    let r = t.region;
    let e = r.entry(entry)?;
    let permits = r.header.permits;
    let mut sum = 0u32;
    let mut at = e.holders.load(Ordering::Relaxed);
    let mut steps = 0u32;
    while let Some(i) = at.checked_sub(1) {
        let n = r.node(i)?;
        let units = n.units.load(Ordering::Relaxed);
        if units == 0 || units > permits {
            return Err(r.corrupt("a holder's units"));
        }
        sum = sum.saturating_add(units);
        at = n.next.load(Ordering::Relaxed);
        steps += 1;
        if steps > r.header.nodes {
            return Err(r.corrupt("a cycle in a holder list"));
        }
    }
    let count = e.units.load(Ordering::Relaxed);
    if sum > permits || sum != count {
        return Err(Error::Incompatible(
            format!(
                "corrupt region {}: entry {entry} counts {count} units held, its holders {sum}, \
                 of {permits} permits",
                r.name
            )
            .into(),
        ));
    }
    Ok(sum)
}

/// Grants `entry` to the waiters at the front of its queue that can have it now: one
/// exclusive waiter, or a run of shared ones. Waiters of dead processes are reclaimed first.
pub(crate) fn dispatch(t: &TableGuard<'_>, entry: u32, wakes: &mut TableWakes) -> Result<()> {
    let r = t.region;
    let e = r.entry(entry)?;
    let permits = r.header.permits;
    // Semaphore: the units held, checked against the holders once, then counted as granted.
    let mut held: Option<u32> = None;
    let mut steps = 0u32;
    while let Some(index) = e.head.load(Ordering::Relaxed).checked_sub(1) {
        steps += 1;
        if steps > r.header.nodes {
            return Err(r.corrupt("a cycle in a wait queue"));
        }
        let n = r.node(index)?;
        let proc = n.proc.load(Ordering::Relaxed);
        if !is_alive(t, proc, wakes)? {
            // Reclaiming the dead process removed its waiters (this one included), and its
            // holds: count the units again.
            if e.head.load(Ordering::Relaxed) == index + 1 {
                return Err(r.corrupt("a dead waiter left in its queue"));
            }
            held = None;
            continue;
        }
        let w = e.word.load(Ordering::Acquire);
        if word::xproc(w) != 0 {
            break;
        }
        // Semaphore: the head's units must fit, or it waits, and everyone behind it (strict
        // FIFO: a heavy request at the head is never passed).
        let units = n.units.load(Ordering::Relaxed);
        if permits != 0 {
            if units == 0 || units > permits {
                return Err(r.corrupt("a waiter's units"));
            }
            let now = match held {
                Some(h) => h,
                None => units_held(t, entry)?,
            };
            if now + units > permits {
                break;
            }
            held = Some(now + units);
        }
        let shared = permits != 0 || n.flags.load(Ordering::Relaxed) & NODE_SHARED != 0;
        if !shared && e.shared.load(Ordering::Relaxed) != 0 {
            break;
        }
        // An async task is always handed the lock, as in one process: woken to compete, it
        // would only come back for one more poll.
        let is_async = n.flags.load(Ordering::Relaxed) & NODE_ASYNC != 0;
        if !shared && !r.fifo() && !is_async {
            let waited = now_ns().saturating_sub(n.fence.load(Ordering::Relaxed));
            if waited < FAIR_AFTER.as_nanos() as u64 {
                // Eventual fairness: wake it to try; a running newcomer may get there first.
                if n.state.load(Ordering::Relaxed) == NODE_WAITING {
                    n.state.store(NODE_NOTIFIED, Ordering::Release);
                    wakes.granted(index, n);
                }
                break;
            }
        }
        // Off the queue first: the node is the grant's record from here on.
        unlink(t, &e.head, Some(&e.tail), index)?;
        e.waiters.store(
            e.waiters.load(Ordering::Relaxed).saturating_sub(1),
            Ordering::Relaxed,
        );
        let died = take_died(e);
        n.died.store(u32::from(died), Ordering::Relaxed);
        if shared {
            let units = if permits != 0 { units } else { 0 };
            add_shared(t, entry, index, n.lease.load(Ordering::Relaxed), units)?;
        } else {
            e.granting.store(index + 1, Ordering::Relaxed);
            let (_, new) = update(e, |w| {
                let a = advanced(e, w);
                Some(word::make(word::lo(a), true, proc + 1))
            })
            .ok_or_else(|| r.corrupt("lock word"))?;
            e.owner
                .store(n.owner.load(Ordering::Relaxed), Ordering::Relaxed);
            e.holds.store(1, Ordering::Relaxed);
            e.lease.store(
                lease_end_ns(n.lease.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
            n.fence.store(
                word::fence(new, e.fence_hi.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
            n.state.store(NODE_GRANTED, Ordering::Release);
            e.granting.store(0, Ordering::Relaxed);
        }
        wakes.granted(index, n);
        if !shared {
            // The next waiter now waits for a new holder: wake it to watch that one.
            if let Some(next) = e.head.load(Ordering::Relaxed).checked_sub(1) {
                wakes.nodes.push(next);
            }
            break;
        }
    }
    fix_slow(e);
    Ok(())
}

/// Frees `entry` whoever holds it, advancing the fence; whether it was held.
pub(crate) fn force_locked(t: &TableGuard<'_>, entry: u32, wakes: &mut TableWakes) -> Result<bool> {
    let r = t.region;
    let e = r.entry(entry)?;
    expire(t, entry, wakes)?;
    let w = e.word.load(Ordering::Acquire);
    let shared = e.shared.load(Ordering::Relaxed);
    if word::xproc(w) == 0 && shared == 0 {
        return Ok(false);
    }
    clear_exclusive(e);
    while let Some(i) = e.holders.load(Ordering::Relaxed).checked_sub(1) {
        drop_shared(t, entry, i)?;
    }
    let _ = update(e, |w| Some(advanced(e, w) & !word::XPROC));
    dispatch(t, entry, wakes)?;
    Ok(true)
}

/// Frees `entry` whoever holds it and takes it exclusively for `req` in the same
/// compare-and-swap, ahead of every queued waiter (the Web Locks `steal`). The fence advances
/// once, so every previous holder's acquisition is stale; the queue is left as it was, and its
/// head is served when this holder releases. `req` is exclusive.
pub(crate) fn steal_locked(t: &TableGuard<'_>, entry: u32, req: &Req) -> Result<TableGrant> {
    debug_assert_eq!(req.mode, Mode::Exclusive);
    let r = t.region;
    let e = r.entry(entry)?;
    clear_exclusive(e);
    while let Some(i) = e.holders.load(Ordering::Relaxed).checked_sub(1) {
        drop_shared(t, entry, i)?;
    }
    let (_, new) = update(e, |w| {
        let a = advanced(e, w);
        Some(word::make(word::lo(a), true, req.proc + 1))
    })
    .expect("the change always applies");
    e.owner.store(req.owner, Ordering::Relaxed);
    e.holds.store(1, Ordering::Relaxed);
    let until = lease_end_ns(req.lease);
    e.lease.store(until, Ordering::Relaxed);
    let died = take_died(e);
    fix_slow(e);
    Ok(TableGrant {
        entry,
        fence: word::fence(new, e.fence_hi.load(Ordering::Relaxed)),
        mode: Mode::Exclusive,
        ticket: 0,
        lease_until: until,
        died,
        units: 0,
    })
}

/// Reclaims the holds of dead processes on `entry` (exclusive holder, shared holders).
pub(crate) fn reap_holders(t: &TableGuard<'_>, entry: u32, wakes: &mut TableWakes) -> Result<()> {
    let r = t.region;
    let e = r.entry(entry)?;
    if let Some(p) = word::xproc(e.word.load(Ordering::Acquire)).checked_sub(1) {
        is_alive(t, p, wakes)?;
    }
    let mut at = e.holders.load(Ordering::Relaxed);
    let mut steps = 0u32;
    while let Some(i) = at.checked_sub(1) {
        let n = r.node(i)?;
        let proc = n.proc.load(Ordering::Relaxed);
        if !is_alive(t, proc, wakes)? {
            // The list changed under us: start again.
            at = e.holders.load(Ordering::Relaxed);
        } else {
            at = n.next.load(Ordering::Relaxed);
        }
        steps += 1;
        if steps > 2 * r.header.nodes {
            return Err(r.corrupt("a cycle in a holder list"));
        }
    }
    Ok(())
}

/// Reclaims the waiters of dead processes on `entry`.
pub(crate) fn reap_waiters(t: &TableGuard<'_>, entry: u32, wakes: &mut TableWakes) -> Result<()> {
    let r = t.region;
    let e = r.entry(entry)?;
    let mut at = e.head.load(Ordering::Relaxed);
    let mut steps = 0u32;
    while let Some(i) = at.checked_sub(1) {
        let n = r.node(i)?;
        if !is_alive(t, n.proc.load(Ordering::Relaxed), wakes)? {
            at = e.head.load(Ordering::Relaxed);
        } else {
            at = n.next.load(Ordering::Relaxed);
        }
        steps += 1;
        if steps > 2 * r.header.nodes {
            return Err(r.corrupt("a cycle in a wait queue"));
        }
    }
    Ok(())
}

/// A snapshot of `entry`'s holders, after ending expired leases and reclaiming dead
/// processes' holds and waits; `None` when free.
pub(crate) fn info_locked(
    t: &TableGuard<'_>,
    entry: u32,
    wakes: &mut TableWakes,
) -> Result<Option<LockInfo>> {
    let r = t.region;
    let e = r.entry(entry)?;
    reap_holders(t, entry, wakes)?;
    reap_waiters(t, entry, wakes)?;
    expire(t, entry, wakes)?;
    let w = e.word.load(Ordering::Acquire);
    let now = now_ns();
    let remaining =
        |until: Option<u64>| until.map(|u| std::time::Duration::from_nanos(u.saturating_sub(now)));
    let waiters = e.waiters.load(Ordering::Relaxed) as usize;
    let fence = word::fence(w, e.fence_hi.load(Ordering::Relaxed));
    if word::xproc(w) != 0 {
        let lease = e.lease.load(Ordering::Relaxed);
        return Ok(Some(LockInfo {
            fence,
            mode: Mode::Exclusive,
            holders: 1,
            holds: e.holds.load(Ordering::Relaxed).max(1),
            owner: Owner::new(e.owner.load(Ordering::Relaxed)),
            lease_remaining: remaining((lease != 0).then_some(lease)),
            waiters,
            units: 1,
        }));
    }
    let shared = e.shared.load(Ordering::Relaxed);
    if shared == 0 {
        return Ok(None);
    }
    let semaphore = r.header.permits != 0;
    Ok(Some(LockInfo {
        fence,
        mode: Mode::Shared,
        holders: shared,
        holds: u32::from(semaphore),
        owner: None,
        lease_remaining: remaining(earliest_lease(t, entry)?),
        waiters,
        units: if semaphore {
            units_held(t, entry)?
        } else {
            shared
        },
    }))
}

// ----- reclaiming a dead process's records ---------------------------------------------------

/// Ends slot `p`'s exclusive hold of `entry`, if it has one, as owner-died. Whether it did.
pub(crate) fn reclaim_exclusive(t: &TableGuard<'_>, entry: u32, p: u32) -> Result<bool> {
    let e = t.region.entry(entry)?;
    if word::xproc(e.word.load(Ordering::Acquire)) != p + 1 {
        return Ok(false);
    }
    clear_exclusive(e);
    let _ = update(e, |w| Some(advanced(e, w) & !word::XPROC));
    e.died.store(1, Ordering::Relaxed);
    fix_slow(e);
    Ok(true)
}

/// Frees node `index` of a dead process, out of whatever list it is on. Returns its entry.
pub(crate) fn reclaim_node(t: &TableGuard<'_>, index: u32) -> Result<Option<u32>> {
    let r = t.region;
    let n = r.node(index)?;
    let entry = n.entry.load(Ordering::Relaxed);
    let Ok(e) = r.entry(entry) else {
        free_node(t, index)?;
        return Ok(None);
    };
    match n.state.load(Ordering::Relaxed) {
        NODE_WAITING | NODE_NOTIFIED => {
            if unlink(t, &e.head, Some(&e.tail), index)? {
                e.waiters.store(
                    e.waiters.load(Ordering::Relaxed).saturating_sub(1),
                    Ordering::Relaxed,
                );
            }
            free_node(t, index)?;
        }
        NODE_HELD => {
            if r.header.permits != 0 {
                // A semaphore holder died holding units: they go back, the fence moves on,
                // and the next holder is told (`owner_died`), as after an exclusive holder.
                let _ = update(e, |w| Some(advanced(e, w)));
                e.died.store(1, Ordering::Relaxed);
            }
            drop_shared(t, entry, index)?
        }
        // An exclusive grant: the hold itself is in the lock word (reclaimed as a hold).
        _ => free_node(t, index)?,
    }
    fix_slow(e);
    Ok(Some(entry))
}

// ---- dead processes ---------------------------------------------------------------------------
//
// The liveness test of a process slot (see `super::procs` for how the slot's robust mutex makes
// one) and the reclaiming of what a dead process held or waited for. They live with the lock
// rules because the two call each other: a grant skips (and reclaims) dead waiters, and
// reclaiming grants again the entries it freed.

/// Whether slot `p` belongs to a live process. A dead one's holds and waits are reclaimed
/// (and its slot freed) before this returns `false`.
pub(crate) fn is_alive(t: &TableGuard<'_>, p: u32, wakes: &mut TableWakes) -> Result<bool> {
    let proc = t.region.proc(p)?;
    if proc.state.load(Ordering::Relaxed) != PROC_LIVE {
        // Records of a slot nobody holds: reclaim them (none, usually).
        reclaim(t, p, wakes)?;
        return Ok(false);
    }
    let tried = proc.alive.try_lock();
    match tried.map_err(|f| t.region.mutex_error(&format!("process slot {p}"), &f))? {
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
pub(crate) fn reclaim(t: &TableGuard<'_>, p: u32, wakes: &mut TableWakes) -> Result<()> {
    let r = t.region;
    let proc = r.proc(p)?;
    proc.state.store(PROC_FREE, Ordering::Relaxed);
    proc.pid.store(0, Ordering::Relaxed);
    let mut touched = Vec::new();
    for i in 0..r.header.capacity {
        if reclaim_exclusive(t, i, p)? {
            touched.push(i);
        }
    }
    for i in 0..r.header.nodes {
        let n = r.node(i)?;
        if n.state.load(Ordering::Relaxed) == NODE_FREE || n.proc.load(Ordering::Relaxed) != p {
            continue;
        }
        if let Some(entry) = reclaim_node(t, i)? {
            touched.push(entry);
        }
    }
    touched.sort_unstable();
    touched.dedup();
    for entry in touched {
        dispatch(t, entry, wakes)?;
    }
    Ok(())
}

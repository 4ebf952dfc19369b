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
use super::table::{self, TableWakes};
use crate::error::Result;

/// Repairs the table; `dead`: the slot + 1 of the process that held the mutex (0: unknown,
/// which means it died before changing anything).
pub(crate) fn repair(t: &mut TableGuard<'_>, dead: u32, wakes: &mut TableWakes) -> Result<()> {
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
        e.units.store(0, Ordering::Relaxed);
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
        // A semaphore region's waiter or holder asks for or holds 1 to the permits.
        let units = n.units.load(Ordering::Relaxed);
        let units_ok = h.permits == 0 || (1..=h.permits).contains(&units);
        let valid = entry < h.capacity && n.proc.load(Ordering::Relaxed) < h.procs && units_ok;
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
                if h.permits != 0 {
                    // (More than the permits in all is left for `units_held` to report.)
                    e.units.store(
                        e.units.load(Ordering::Relaxed).saturating_add(units),
                        Ordering::Relaxed,
                    );
                }
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

#[cfg(test)]
mod tests {
    //! Each test plays several processes in one: a process slot is held by a thread, and a
    //! process dies when its thread ends while holding the slot's robust mutex (and, for a
    //! death inside the table, the table mutex too), which the kernel reports exactly as it
    //! reports a process's death.

    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::sync::mpsc::{Sender, channel};
    use std::thread::JoinHandle;
    use std::time::Duration;

    use super::*;
    use crate::acquisition::Mode;
    use crate::shm::index::{bind_locked, find_fast, find_locked, hash_key};
    use crate::shm::region::{Region, scratch};
    use crate::shm::sys::Tried;
    use crate::shm::table::{
        Req, TableAttempt, TableGrant, acquire_locked, enqueue, release_locked, take_grant,
    };

    const MAX_HOLDS: u32 = 65_536;
    /// How long a test waits for a helper thread before it fails.
    const PATIENCE: Duration = Duration::from_secs(30);

    type Last = Box<dyn FnOnce(&Region) + Send>;

    /// A process slot held by a thread of its own, as an attached process's agent holds it.
    struct Process {
        /// What the process does last: it dies right after (its thread ends holding the
        /// slot's mutex), or, when the sender is dropped, it detaches.
        last: Sender<Last>,
        thread: JoinHandle<()>,
    }

    impl Process {
        fn attach(r: &Arc<Region>, slot: u32) -> Process {
            let (last, wait) = channel::<Last>();
            let (ready, attached) = channel();
            let region = Arc::clone(r);
            let thread = std::thread::spawn(move || {
                let proc = region.proc(slot).unwrap();
                assert!(matches!(proc.alive.try_lock(), Ok(Tried::Locked(_))));
                proc.state.store(PROC_LIVE, Ordering::Relaxed);
                ready.send(()).unwrap();
                match wait.recv() {
                    Ok(f) => f(&region), // ... and the thread ends holding `alive`.
                    Err(_) => proc.alive.unlock(),
                }
            });
            attached
                .recv_timeout(PATIENCE)
                .expect("the slot's thread started");
            Process { last, thread }
        }

        /// Does `f`, then dies.
        fn die_after(self, f: impl FnOnce(&Region) + Send + 'static) {
            self.last.send(Box::new(f)).unwrap();
            join(self.thread);
        }

        /// Lets go of the slot, as a process closing the region does.
        fn detach(self) {
            drop(self.last);
            join(self.thread);
        }
    }

    fn join(thread: JoinHandle<()>) {
        let (done, finished) = channel();
        std::thread::spawn(move || done.send(thread.join().is_ok()));
        assert!(finished.recv_timeout(PATIENCE).expect("the thread ended"));
    }

    fn exclusive(proc: u32) -> Req {
        Req {
            mode: Mode::Exclusive,
            lease: 0,
            owner: 0,
            proc,
            units: 0,
        }
    }

    fn shared(proc: u32) -> Req {
        Req {
            mode: Mode::Shared,
            ..exclusive(proc)
        }
    }

    fn acquire(r: &Region, entry: u32, req: &Req) -> TableGrant {
        let t = r.lock_table().unwrap();
        match acquire_locked(&t, entry, req, MAX_HOLDS, &mut TableWakes::default()).unwrap() {
            TableAttempt::Acquired(grant) => grant,
            TableAttempt::Blocked => panic!("entry {entry} is taken"),
        }
    }

    fn wait(r: &Region, entry: u32, req: &Req) -> (u32, u32) {
        enqueue(&r.lock_table().unwrap(), entry, req, false).unwrap()
    }

    /// Locks the table, which must report its last holder dead, and repairs it.
    fn lock_and_repair(r: &Region) {
        let mut t = r.lock_table().unwrap();
        assert!(t.died, "the table mutex did not report its holder's death");
        let dead = r.runtime().holder.load(Ordering::Relaxed);
        repair(&mut t, dead, &mut TableWakes::default()).unwrap();
    }

    /// The nodes on the free list; checks that the list holds exactly the free nodes.
    fn free_nodes(r: &Region) -> usize {
        let mut on_list = vec![false; r.header.nodes as usize];
        let mut at = r.runtime().free_nodes.load(Ordering::Relaxed);
        while let Some(i) = at.checked_sub(1) {
            assert!(!on_list[i as usize], "a cycle in the free node list");
            on_list[i as usize] = true;
            let n = r.node(i).unwrap();
            assert_eq!(
                n.state.load(Ordering::Relaxed),
                NODE_FREE,
                "node {i} listed free"
            );
            at = n.next.load(Ordering::Relaxed);
        }
        for (i, listed) in on_list.iter().enumerate() {
            let free = r.node(i as u32).unwrap().state.load(Ordering::Relaxed) == NODE_FREE;
            assert_eq!(
                free, *listed,
                "node {i}: free {free}, on the free list {listed}"
            );
        }
        on_list.iter().filter(|&&x| x).count()
    }

    fn died_inside_the_table(r: &Region, slot: u32, scramble: impl FnOnce(&Region)) {
        let t = r.lock_table().unwrap();
        r.runtime().holder.store(slot + 1, Ordering::Relaxed);
        scramble(r);
        // The process dies holding the mutex.
        std::mem::forget(t);
    }

    #[test]
    fn a_dead_holders_keys_pass_to_the_next_waiters_and_its_records_go() {
        let r = Arc::new(scratch::region(KIND_STRIPED, 4, FLAG_FIFO));
        let nodes = r.header.nodes as usize;
        let doomed = Process::attach(&r, 0);
        let first = Process::attach(&r, 1);
        let second = Process::attach(&r, 2);
        // Slot 0 holds entry 0 exclusively and entry 1 shared, and waits for entry 2.
        let dead_hold = acquire(&r, 0, &exclusive(0));
        acquire(&r, 1, &shared(0));
        let held_by_first = acquire(&r, 2, &exclusive(1));
        wait(&r, 2, &exclusive(0));
        // Slot 1 waits for entry 0, slot 2 for entries 0 (behind it) and 1.
        let (w0, e0) = wait(&r, 0, &exclusive(1));
        let (w0b, e0b) = wait(&r, 0, &exclusive(2));
        let (w1, e1) = wait(&r, 1, &exclusive(2));
        assert_eq!(free_nodes(&r), nodes - 5);

        // Slot 0 dies inside the table, having wiped the free node list and a queue.
        doomed.die_after(|r| {
            died_inside_the_table(r, 0, |r| {
                r.runtime().free_nodes.store(0, Ordering::Relaxed);
                r.entry(0).unwrap().head.store(0, Ordering::Relaxed);
            })
        });
        lock_and_repair(&r);

        let t = r.lock_table().unwrap();
        assert!(!t.died, "the repair left the table mutex inconsistent");
        assert_eq!(r.proc(0).unwrap().state.load(Ordering::Relaxed), PROC_FREE);
        // Entry 0: the first waiter has it, told of the death, with a higher fence.
        let grant = take_grant(&t, w0, e0).unwrap().expect("entry 0 granted");
        assert!(grant.died, "owner_died not reported");
        assert!(grant.fence > dead_hold.fence);
        assert_eq!(
            word::xproc(r.entry(0).unwrap().word.load(Ordering::Relaxed)),
            2
        );
        assert_eq!(take_grant(&t, w0b, e0b).unwrap(), None, "granted twice");
        assert_eq!(r.entry(0).unwrap().waiters.load(Ordering::Relaxed), 1);
        // Entry 1: the dead reader is gone, the writer has it, and no owner died.
        let after_reader = take_grant(&t, w1, e1).unwrap().expect("entry 1 granted");
        assert!(
            !after_reader.died,
            "a reader's death reported as owner_died"
        );
        assert_eq!(r.entry(1).unwrap().shared.load(Ordering::Relaxed), 0);
        // Entry 2: the dead waiter is off the queue; the holder keeps it.
        let e2 = r.entry(2).unwrap();
        assert_eq!(e2.waiters.load(Ordering::Relaxed), 0);
        assert_eq!(e2.head.load(Ordering::Relaxed), 0);
        assert_eq!(word::xproc(e2.word.load(Ordering::Relaxed)), 2);
        // Nothing leaks: once everyone lets go, every node is free and every entry idle.
        let mut wakes = TableWakes::default();
        release_locked(&t, &grant, 1, None, &mut wakes).unwrap();
        let last = take_grant(&t, w0b, e0b)
            .unwrap()
            .expect("entry 0 passed on");
        assert!(!last.died, "owner_died reported twice");
        release_locked(&t, &last, 2, None, &mut wakes).unwrap();
        release_locked(&t, &after_reader, 2, None, &mut wakes).unwrap();
        release_locked(&t, &held_by_first, 1, None, &mut wakes).unwrap();
        assert_eq!(free_nodes(&r), nodes);
        for i in 0..4 {
            let e = r.entry(i).unwrap();
            let w = e.word.load(Ordering::Relaxed);
            assert_eq!(
                w & (word::XPROC | word::SLOW),
                0,
                "entry {i} left busy: {w:#x}"
            );
            assert_eq!(e.waiters.load(Ordering::Relaxed), 0);
        }
        drop(t);
        first.detach();
        second.detach();
    }

    #[test]
    fn the_process_that_died_inside_the_table_is_reclaimed_by_the_repair() {
        let r = Arc::new(scratch::region(KIND_STRIPED, 2, FLAG_FIFO));
        let doomed = Process::attach(&r, 0);
        let waiter = Process::attach(&r, 1);
        // Slot 0 only holds (it waits for nothing, so no queue leads to it).
        let dead_hold = acquire(&r, 0, &exclusive(0));
        acquire(&r, 1, &shared(0));
        let (w0, e0) = wait(&r, 0, &exclusive(1));
        let (w1, e1) = wait(&r, 1, &exclusive(1));
        doomed.die_after(|r| died_inside_the_table(r, 0, |_| {}));
        lock_and_repair(&r);

        let t = r.lock_table().unwrap();
        assert_eq!(r.proc(0).unwrap().state.load(Ordering::Relaxed), PROC_FREE);
        let grant = take_grant(&t, w0, e0).unwrap().expect("entry 0 handed on");
        assert!(grant.died && grant.fence > dead_hold.fence);
        let after_reader = take_grant(&t, w1, e1).unwrap().expect("entry 1 handed on");
        assert!(!after_reader.died);
        let mut wakes = TableWakes::default();
        release_locked(&t, &grant, 1, None, &mut wakes).unwrap();
        release_locked(&t, &after_reader, 1, None, &mut wakes).unwrap();
        assert_eq!(free_nodes(&r), r.header.nodes as usize);
        drop(t);
        waiter.detach();
    }

    #[test]
    fn a_repair_keeps_live_holds_and_rebuilds_queues_in_arrival_order() {
        let r = Arc::new(scratch::region(KIND_STRIPED, 2, FLAG_FIFO));
        let doomed = Process::attach(&r, 0);
        let live: Vec<Process> = (1..4).map(|p| Process::attach(&r, p)).collect();
        let held = acquire(&r, 0, &exclusive(1));
        let reader = acquire(&r, 1, &shared(2));
        let (first, first_epoch) = wait(&r, 0, &exclusive(2));
        let (second, second_epoch) = wait(&r, 0, &exclusive(3));
        // Slot 0 dies inside the table having reversed entry 0's queue and miscounted
        // entry 1's readers.
        doomed.die_after(move |r| {
            died_inside_the_table(r, 0, |r| {
                let e0 = r.entry(0).unwrap();
                e0.head.store(second + 1, Ordering::Relaxed);
                e0.tail.store(first + 1, Ordering::Relaxed);
                r.node(second)
                    .unwrap()
                    .next
                    .store(first + 1, Ordering::Relaxed);
                r.node(first).unwrap().next.store(0, Ordering::Relaxed);
                e0.waiters.store(7, Ordering::Relaxed);
                let e1 = r.entry(1).unwrap();
                e1.shared.store(5, Ordering::Relaxed);
                e1.holders.store(0, Ordering::Relaxed);
            })
        });
        lock_and_repair(&r);

        let t = r.lock_table().unwrap();
        let (e0, e1) = (r.entry(0).unwrap(), r.entry(1).unwrap());
        assert_eq!(
            word::xproc(e0.word.load(Ordering::Relaxed)),
            2,
            "a live hold was lost"
        );
        assert_eq!(
            lockword::fence_of(e0),
            held.fence,
            "a live hold's fence moved"
        );
        assert_eq!(e0.head.load(Ordering::Relaxed), first + 1);
        assert_eq!(e0.tail.load(Ordering::Relaxed), second + 1);
        assert_eq!(e0.waiters.load(Ordering::Relaxed), 2);
        assert_eq!(e1.shared.load(Ordering::Relaxed), 1);
        assert_eq!(e1.holders.load(Ordering::Relaxed), (reader.ticket as u32));
        let mut wakes = TableWakes::default();
        release_locked(&t, &reader, 2, None, &mut wakes).unwrap();
        release_locked(&t, &held, 1, None, &mut wakes).unwrap();
        let next = take_grant(&t, first, first_epoch)
            .unwrap()
            .expect("the first arrival");
        assert!(!next.died, "nobody holding entry 0 died");
        assert_eq!(take_grant(&t, second, second_epoch).unwrap(), None);
        drop(t);
        for p in live {
            p.detach();
        }
    }

    #[test]
    fn a_grant_left_half_made_is_completed() {
        let r = Arc::new(scratch::region(KIND_STRIPED, 2, FLAG_FIFO));
        let doomed = Process::attach(&r, 0);
        let waiter = Process::attach(&r, 1);
        let (node, epoch) = wait(
            &r,
            0,
            &Req {
                owner: 7,
                ..exclusive(1)
            },
        );
        // Slot 0 dies granting entry 0 to the waiter: off the queue, the word set, the node
        // not yet marked granted.
        doomed.die_after(move |r| {
            died_inside_the_table(r, 0, |r| {
                let e = r.entry(0).unwrap();
                e.head.store(0, Ordering::Relaxed);
                e.tail.store(0, Ordering::Relaxed);
                e.waiters.store(0, Ordering::Relaxed);
                e.granting.store(node + 1, Ordering::Relaxed);
                let w = e.word.load(Ordering::Relaxed);
                e.word
                    .store(word::make(word::lo(w) + 1, true, 2), Ordering::Relaxed);
            })
        });
        lock_and_repair(&r);

        let t = r.lock_table().unwrap();
        let e = r.entry(0).unwrap();
        let grant = take_grant(&t, node, epoch)
            .unwrap()
            .expect("the grant was completed");
        assert!(!grant.died, "the dead process held nothing");
        assert_eq!(grant.fence, lockword::fence_of(e));
        assert_eq!(e.owner.load(Ordering::Relaxed), 7);
        assert_eq!(e.holds.load(Ordering::Relaxed), 1);
        assert_eq!(e.granting.load(Ordering::Relaxed), 0);
        assert_eq!(e.waiters.load(Ordering::Relaxed), 0);
        release_locked(&t, &grant, 1, None, &mut TableWakes::default()).unwrap();
        assert_eq!(free_nodes(&r), r.header.nodes as usize);
        drop(t);
        waiter.detach();
    }

    fn units(proc: u32, units: u32) -> Req {
        Req {
            mode: Mode::Shared,
            units,
            ..exclusive(proc)
        }
    }

    #[test]
    fn a_semaphores_units_are_recounted_and_a_dead_holders_come_back() {
        let r = Arc::new(scratch::semaphore(4, 3));
        let doomed = Process::attach(&r, 0);
        let live = Process::attach(&r, 1);
        let waiting = Process::attach(&r, 2);
        let entry = bind_locked(&r.lock_table().unwrap(), hash_key(0, b"s"), 0, b"s").unwrap();
        let dead_hold = acquire(&r, entry, &units(0, 2));
        let kept = acquire(&r, entry, &units(1, 1));
        assert!(kept.fence > dead_hold.fence, "a fence per acquisition");
        assert_eq!((dead_hold.units, kept.units), (2, 1));
        // The key is full: 2 more units wait.
        {
            let t = r.lock_table().unwrap();
            let attempt = acquire_locked(
                &t,
                entry,
                &units(2, 2),
                MAX_HOLDS,
                &mut TableWakes::default(),
            );
            assert!(matches!(attempt, Ok(TableAttempt::Blocked)));
        }
        let (node, epoch) = wait(&r, entry, &units(2, 2));
        // Slot 0 dies inside the table having miscounted the units and cut the holder list.
        doomed.die_after(move |r| {
            died_inside_the_table(r, 0, |r| {
                let e = r.entry(entry).unwrap();
                e.units.store(0, Ordering::Relaxed);
                e.holders.store(0, Ordering::Relaxed);
                e.shared.store(9, Ordering::Relaxed);
            })
        });
        lock_and_repair(&r);

        let t = r.lock_table().unwrap();
        let e = r.entry(entry).unwrap();
        // The dead holder's 2 units went back, so the waiter's 2 fit beside the live 1.
        let grant = take_grant(&t, node, epoch)
            .unwrap()
            .expect("the waiter got the dead holder's units");
        assert!(grant.died, "owner_died not reported");
        assert!(grant.fence > kept.fence);
        assert_eq!(grant.units, 2);
        assert_eq!(e.units.load(Ordering::Relaxed), 3);
        assert_eq!(e.shared.load(Ordering::Relaxed), 2);
        assert_eq!(table::units_held(&t, entry).unwrap(), 3);
        let mut wakes = TableWakes::default();
        release_locked(&t, &grant, 2, None, &mut wakes).unwrap();
        release_locked(&t, &kept, 1, None, &mut wakes).unwrap();
        assert_eq!(e.units.load(Ordering::Relaxed), 0);
        assert_eq!(free_nodes(&r), r.header.nodes as usize);
        // A count that disagrees with the holders is a corrupt region, not a grant.
        e.units.store(2, Ordering::Relaxed);
        assert!(matches!(
            acquire_locked(&t, entry, &units(1, 1), MAX_HOLDS, &mut wakes),
            Err(crate::Error::Incompatible(_))
        ));
        e.units.store(0, Ordering::Relaxed);
        drop(t);
        live.detach();
        waiting.detach();
    }

    #[test]
    fn bucket_chains_and_free_entries_are_rebuilt_from_the_bindings() {
        let r = Arc::new(scratch::region(KIND_POOL, 4, 0));
        let doomed = Process::attach(&r, 0);
        let keys: [&[u8]; 2] = [b"kept-1", b"kept-2"];
        let bound: Vec<u32> = keys
            .iter()
            .map(|k| bind_locked(&r.lock_table().unwrap(), hash_key(0, k), 0, k).unwrap())
            .collect();
        // Slot 0 dies binding a third key: the entry is off the free list and half written,
        // and it had already cut the chains and the free list.
        doomed.die_after(|r| {
            died_inside_the_table(r, 0, |r| {
                let rt = r.runtime();
                let index = rt.free_entries.load(Ordering::Relaxed) - 1;
                let e = r.entry(index).unwrap();
                rt.free_entries.store(0, Ordering::Relaxed);
                e.bind.store((5 << 2) | BIND_BUSY, Ordering::Relaxed);
                e.word.store(word::make(40, false, 0), Ordering::Relaxed);
                e.key_len.store(3, Ordering::Relaxed);
                for b in 0..r.header.buckets {
                    r.bucket(b).unwrap().store(0, Ordering::Relaxed);
                }
            })
        });
        lock_and_repair(&r);

        let t = r.lock_table().unwrap();
        for (k, index) in keys.iter().zip(&bound) {
            let h = hash_key(0, k);
            assert_eq!(find_locked(&t, h, 0, k).unwrap(), Some(*index));
            assert_eq!(find_fast(&r, h, 0, k).map(|(i, ..)| i), Some(*index));
        }
        // The half-bound entry and the never-used one are free again, the former shut to the
        // fast path, and the fences it gave out stay below every later one.
        let mut free = Vec::new();
        let mut at = r.runtime().free_entries.load(Ordering::Relaxed);
        while let Some(i) = at.checked_sub(1) {
            assert!(free.len() < 4, "a cycle in the free entry list");
            free.push(i);
            at = r.entry(i).unwrap().next.load(Ordering::Relaxed);
        }
        free.sort_unstable();
        let mut expected: Vec<u32> = (0..4).filter(|i| !bound.contains(i)).collect();
        expected.sort_unstable();
        assert_eq!(free, expected);
        for &i in &free {
            let e = r.entry(i).unwrap();
            assert_eq!(e.bind.load(Ordering::Relaxed) & 3, BIND_FREE);
            assert_ne!(e.word.load(Ordering::Relaxed) & word::SLOW, 0);
        }
        assert!(r.runtime().fence_floor.load(Ordering::Relaxed) >= 40);
        let index = bind_locked(&t, hash_key(0, b"new"), 0, b"new").unwrap();
        let fence = lockword::fence_of(r.entry(index).unwrap());
        assert!(
            fence > 40,
            "a rebound entry's fence {fence} is not above the floor"
        );
        drop(t);
    }
}

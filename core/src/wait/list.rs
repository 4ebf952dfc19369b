//! The intrusive FIFO of waiters, and all the `unsafe` it takes.
//!
//! A [`WaitList`] links [`WaitNode`]s that live elsewhere (on a blocked thread's stack, or on the
//! heap behind a future). It has no lock of its own: every method requires the lock that guards
//! the list (a stripe's queue mutex, a pool shard, the reader gate of an RwLock), which the type
//! system cannot see. The releasing side unlinks a node and then publishes its final state
//! (`NOTIFIED` or `GRANTED`) as its very last access, so the node's owner may free it as soon as
//! it sees that state.

use std::cell::UnsafeCell;
use std::marker::PhantomPinned;
use std::ptr::NonNull;
use std::time::Instant;

use super::Wake;
use crate::acquisition::Want;
use crate::sync::{AtomicU8, Ordering};

/// Node states. A node is `WAITING` while linked in a list; the releasing side unlinks it and
/// then stores `NOTIFIED` or `GRANTED` as its very last access to the node.
pub(crate) const WAITING: u8 = 0;
/// Unlinked; the lock was released for this waiter to compete for.
pub(crate) const NOTIFIED: u8 = 1;
/// Unlinked; the lock is held on this waiter's behalf, as [`Grant`] says.
pub(crate) const GRANTED: u8 = 2;

/// What a releaser hands a waiter along with the lock (parking_lot's `UnparkToken`): the
/// acquisition's fence, its lease's end and, for a leased shared hold, its ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Grant {
    pub(crate) fence: u64,
    pub(crate) ticket: u64,
    pub(crate) lease_until: Option<Instant>,
    /// A reentrant hold of the exclusive holder (whatever mode was asked).
    pub(crate) reentered: bool,
}

/// The part of a node that only the holder of the queue's lock may touch.
#[derive(Debug)]
pub(crate) struct Links {
    prev: Option<NonNull<WaitNode>>,
    next: Option<NonNull<WaitNode>>,
    pub(crate) wake: Option<Wake>,
    /// What the waiter asks for (mode, lease, owner); set before the node is linked.
    pub(crate) want: Want,
    /// Written by the releaser before it publishes `GRANTED`.
    pub(crate) grant: Grant,
    /// When this waiter first queued (for eventual fairness): a thread's only (a task is always
    /// handed the lock).
    #[cfg(not(keylock_loom))]
    pub(crate) since: Option<Instant>,
}

/// One waiter's place in a [`WaitList`].
#[derive(Debug)]
pub(crate) struct WaitNode {
    /// `WAITING`, `NOTIFIED` or `GRANTED` (see the constants above).
    state: AtomicU8,
    /// Guarded by the lock of the list the node is (or was last) linked in.
    links: UnsafeCell<Links>,
    _pin: PhantomPinned,
}

impl WaitNode {
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicU8::new(WAITING),
            links: UnsafeCell::new(Links {
                prev: None,
                next: None,
                wake: None,
                want: Want::EXCLUSIVE,
                grant: Grant::default(),
                #[cfg(not(keylock_loom))]
                since: None,
            }),
            _pin: PhantomPinned,
        }
    }

    #[inline]
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Resets the state before the node is linked again.
    ///
    /// # Safety
    /// The node is not linked, and the caller holds the lock of the list it will be linked in.
    pub(crate) unsafe fn set_waiting(&self) {
        self.state.store(WAITING, Ordering::Relaxed);
    }

    /// The node's links.
    ///
    /// # Safety
    /// The caller holds the lock of the list the node is linked in (or was last linked in, or
    /// will be linked in), or owns the unlinked node and has seen its final state.
    #[allow(clippy::mut_from_ref)] // guarded by the list's lock, as the contract says
    pub(crate) unsafe fn links(&self) -> &mut Links {
        // SAFETY: the caller upholds exclusive access through the list's lock.
        unsafe { &mut *self.links.get() }
    }
}

/// An intrusive FIFO of waiters. It has no lock of its own: every method requires the lock that
/// guards the list.
#[derive(Debug, Default)]
pub(crate) struct WaitList {
    head: Option<NonNull<WaitNode>>,
    tail: Option<NonNull<WaitNode>>,
    len: usize,
}

// SAFETY: a WaitList holds pointers to nodes whose linked state is only touched with the list's
// guarding lock held, from whichever thread holds that lock; the nodes' owners keep them alive and
// pinned while linked (see `Waiter`).
unsafe impl Send for WaitList {}

impl WaitList {
    pub(crate) const fn new() -> Self {
        Self {
            head: None,
            tail: None,
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Waiters linked now.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Links `node` at the back (or the front, for a waiter that was notified and lost).
    ///
    /// # Safety
    /// The caller holds the list's lock, `node` is not linked anywhere, and it stays pinned and
    /// alive until it is unlinked by `pop_front` or `remove`.
    pub(crate) unsafe fn push(&mut self, node: NonNull<WaitNode>, front: bool) {
        // SAFETY: the caller holds the list lock and owns the unlinked node.
        let links = unsafe { node.as_ref().links() };
        if front {
            links.prev = None;
            links.next = self.head;
            match self.head {
                // SAFETY: linked nodes are alive and guarded by the list lock we hold.
                Some(head) => unsafe { head.as_ref().links().prev = Some(node) },
                None => self.tail = Some(node),
            }
            self.head = Some(node);
        } else {
            links.next = None;
            links.prev = self.tail;
            match self.tail {
                // SAFETY: as above.
                Some(tail) => unsafe { tail.as_ref().links().next = Some(node) },
                None => self.head = Some(node),
            }
            self.tail = Some(node);
        }
        self.len += 1;
    }

    /// Unlinks `node`.
    ///
    /// # Safety
    /// The caller holds the list's lock and `node` is linked in this list.
    pub(crate) unsafe fn remove(&mut self, node: NonNull<WaitNode>) {
        // SAFETY: the node is linked here, so alive, and we hold the list lock.
        let links = unsafe { node.as_ref().links() };
        match links.prev {
            // SAFETY: neighbours of a linked node are linked, alive and guarded by our lock.
            Some(prev) => unsafe { prev.as_ref().links().next = links.next },
            None => self.head = links.next,
        }
        match links.next {
            // SAFETY: as above.
            Some(next) => unsafe { next.as_ref().links().prev = links.prev },
            None => self.tail = links.prev,
        }
        links.prev = None;
        links.next = None;
        self.len -= 1;
    }

    /// What the head waiter wants, without unlinking it.
    #[inline]
    pub(crate) fn front_want(&self) -> Option<Want> {
        // SAFETY: the head is linked, so alive; the caller holds the list lock (`&self` of a
        // list that lives inside the data its lock guards).
        self.head.map(|node| unsafe { node.as_ref().links().want })
    }

    /// Whether the head waiter is due to be handed the lock (see [`Completion::is_due`]).
    #[inline]
    pub(crate) fn front_is_due(&self, fifo: bool, clock: &mut super::FairClock) -> bool {
        match self.head {
            Some(node) => Completion { node }.is_due(fifo, clock),
            None => false,
        }
    }

    /// Unlinks the head. The caller then completes it with [`Completion::grant`] or
    /// [`Completion::notify`] while it still holds the list's lock.
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<Completion> {
        let node = self.head?;
        // SAFETY: `node` is the linked head; the caller holds the list lock (it has `&mut self`,
        // and every WaitList lives inside the data its lock guards).
        unsafe { self.remove(node) };
        Some(Completion { node })
    }
}

/// A node just unlinked by [`WaitList::pop_front`]; it must be completed while the list's lock is
/// still held, and the returned [`Wake`] invoked after releasing it.
#[derive(Debug)]
#[must_use]
pub(crate) struct Completion {
    node: NonNull<WaitNode>,
}

impl Completion {
    /// Whether this waiter is to be handed the lock rather than notified (`fifo`: always), by
    /// the entry whose fairness clock is `clock` (see [`FairClock::due`](super::FairClock::due)).
    pub(crate) fn is_due(&self, fifo: bool, clock: &mut super::FairClock) -> bool {
        if fifo {
            return true;
        }
        #[cfg(not(keylock_loom))]
        {
            // SAFETY: the node was unlinked under the list lock, which the caller still holds,
            // and its owner cannot free it before we store its final state.
            let links = unsafe { self.node.as_ref().links() };
            // A task is always handed the lock: woken to compete, it would only come back for
            // one more poll (and the lock's queue order is kept). A thread competes, also after
            // losing once (it is back at the front), until the entry's clock says it is due: a
            // running thread may take the lock meanwhile.
            matches!(links.wake, Some(super::Wake::Task(_))) || clock.due(links.since)
        }
        #[cfg(keylock_loom)]
        {
            let _ = clock;
            super::loom_hand_off_on()
        }
    }

    /// The waiter now holds the lock, as `grant` describes.
    pub(crate) fn grant(self, grant: Grant) -> Option<Wake> {
        // SAFETY: as in `is_due`.
        unsafe { self.node.as_ref().links().grant = grant };
        self.finish(GRANTED)
    }

    /// The lock was released; the waiter competes for it again.
    pub(crate) fn notify(self) -> Option<Wake> {
        self.finish(NOTIFIED)
    }

    fn finish(self, state: u8) -> Option<Wake> {
        // SAFETY: as in `is_due`. Taking the wake handle out before publishing the state means
        // the store below is our last access to the node: after it the owner may free it.
        unsafe {
            let node = self.node.as_ref();
            let wake = node.links().wake.take();
            node.state.store(state, Ordering::Release);
            wake
        }
    }
}

//! Locks shared by every JavaScript thread of the process (`KeyPool.shared(name)` and friends),
//! and each thread's activity on them.
//!
//! The registries live in this module's statics: Node loads one copy of the addon per process,
//! so every worker that asks for the same name gets the same core object. A shared lock lives
//! until the process ends, like a named global: a key taken through one worker's object and
//! released later through another's must find the same lock, even if no JavaScript object
//! pointed at it in between.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::thread::thread_id;

/// One lock of the registry with the activity board its users record on, and how it was made
/// (`C`: what a later `shared(name, ...)` must agree with).
#[derive(Debug)]
pub(crate) struct Shared<T: ?Sized, C> {
    pub(crate) core: Arc<T>,
    pub(crate) made: C,
    board: Board,
}

impl<T: ?Sized, C> Shared<T, C> {
    /// A shared lock outside any registry (one the binding keeps itself).
    pub(crate) fn new(core: Arc<T>, made: C) -> Self {
        Self {
            core,
            made,
            board: Board::default(),
        }
    }
}

/// A registry of shared locks of one kind, by name.
pub(crate) struct Registry<T: ?Sized, C> {
    locks: Mutex<BTreeMap<String, Arc<Shared<T, C>>>>,
}

impl<T: ?Sized, C> Registry<T, C> {
    pub(crate) const fn new() -> Self {
        Self {
            locks: Mutex::new(BTreeMap::new()),
        }
    }

    /// The lock registered under `name`, created by `make` if there is none yet (`make` gives
    /// the lock and how it was made).
    pub(crate) fn get_or_insert<E>(
        &self,
        name: &str,
        make: impl FnOnce() -> Result<(Arc<T>, C), E>,
    ) -> Result<Arc<Shared<T, C>>, E> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = locks.get(name) {
            return Ok(found.clone());
        }
        let (core, made) = make()?;
        let shared = Arc::new(Shared::new(core, made));
        locks.insert(name.to_owned(), shared.clone());
        Ok(shared)
    }
}

/// Who is active on a shared lock: one slot per JavaScript thread that uses it.
#[derive(Debug, Default)]
struct Board {
    slots: Mutex<Vec<Weak<Slot>>>,
}

/// One thread's activity on one shared lock.
#[derive(Debug)]
struct Slot {
    thread: u64,
    /// Locks this thread holds through the lock plus waiters it has pending on it. Releases count
    /// against the thread that performs them (a guard belongs to the thread that acquired it, so
    /// the two are the same thread); negative counts read as zero.
    active: AtomicIsize,
}

/// The current thread's handle on its slot of one shared lock. Cloned into every waiter.
#[derive(Debug, Clone)]
pub(crate) struct Presence {
    shared: Arc<dyn Activity>,
    slot: Arc<Slot>,
}

/// Type-erased access to a board, so [`Presence`] is not generic.
trait Activity: Send + Sync + std::fmt::Debug {
    fn board(&self) -> &Board;
}

impl<T: ?Sized + Send + Sync + std::fmt::Debug, C: Send + Sync + std::fmt::Debug> Activity
    for Shared<T, C>
{
    fn board(&self) -> &Board {
        &self.board
    }
}

impl Presence {
    /// The current thread's presence on `shared`, reusing its slot if it has one.
    pub(crate) fn join<T, C>(shared: &Arc<Shared<T, C>>) -> Self
    where
        T: ?Sized + Send + Sync + std::fmt::Debug + 'static,
        C: Send + Sync + std::fmt::Debug + 'static,
    {
        let me = thread_id();
        let mut slots = shared.board.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|w| w.strong_count() > 0);
        let slot = slots
            .iter()
            .filter_map(Weak::upgrade)
            .find(|s| s.thread == me);
        let slot = slot.unwrap_or_else(|| {
            let slot = Arc::new(Slot {
                thread: me,
                active: AtomicIsize::new(0),
            });
            slots.push(Arc::downgrade(&slot));
            slot
        });
        drop(slots);
        Presence {
            shared: shared.clone(),
            slot,
        }
    }

    /// One more lock held or waiter pending on this thread.
    pub(crate) fn enter(&self) {
        self.slot.active.fetch_add(1, Ordering::SeqCst);
    }

    /// One lock released or waiter cancelled on this thread.
    pub(crate) fn leave(&self) {
        self.slot.active.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether any other thread holds this lock or waits for it.
    pub(crate) fn others_active(&self) -> bool {
        let slots = self
            .shared
            .board()
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .filter_map(Weak::upgrade)
            .any(|s| s.thread != self.slot.thread && s.active.load(Ordering::SeqCst) > 0)
    }
}

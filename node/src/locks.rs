//! The locks as this binding holds them: the core object, this thread's presence on it for
//! locks other threads use, and the slab of what JavaScript holds through it.
//!
//! Every keyed lock is an `Arc<dyn KeyedLock>` from `keylock_core::open_with`, whatever its
//! scope. Every operation is one call into the core: an acquire stores its
//! [`Acquisition`] in the handle's [`Slab`] and gives JavaScript the slot's number and the
//! acquisition's fence; a release takes the record back out and hands it to the core, which
//! ends exactly that acquisition (or refuses a stale one). Nothing here decides anything about
//! locking: no state of a lock is kept outside the core.

use std::cell::RefCell;
use std::sync::Arc;

use keylock_core::{
    Acquisition, Error, KeyedLock, LockOptions, LostSignal, Mode, ReadGuard, RwLock, WriteGuard,
};

use crate::reactor::{Liveness, Record};
use crate::shared::Registry;
use crate::slab::Slab;
use crate::status;
use crate::weblocks::Ticket;

/// How a keyed lock was made: what `shared(name, ...)` compares, and what `stripes` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Made {
    pub(crate) stripes: Option<usize>,
    pub(crate) reentrant: bool,
    pub(crate) fifo: bool,
    /// Opened with the core's metrics (`OpenOptions::metrics`): `metrics()` reads them.
    pub(crate) metrics: bool,
}

pub(crate) type Core = Arc<dyn KeyedLock>;

pub(crate) static SHARED_POOLS: Registry<dyn KeyedLock, Made> = Registry::new();
pub(crate) static SHARED_STRIPED: Registry<dyn KeyedLock, Made> = Registry::new();
pub(crate) static SHARED_RWLOCKS: Registry<RwLock, ()> = Registry::new();

/// What one slot of a keyed lock's slab holds.
#[derive(Debug)]
pub(crate) enum Holding {
    /// One key's acquisition.
    One(Acquisition),
    /// The acquisitions of a multi-key acquire, in the lock's canonical order.
    Many(Vec<Acquisition>),
    /// A Web Locks request's acquisition, with its entry in the request registry (removed
    /// when the holding is dropped).
    Web { acq: Acquisition, _ticket: Ticket },
}

impl Holding {
    fn first(&self) -> Option<&Acquisition> {
        match self {
            Holding::One(a) | Holding::Web { acq: a, .. } => Some(a),
            Holding::Many(v) => v.first(),
        }
    }
}

/// What one slot of an RwLock's slab holds.
#[derive(Debug)]
pub(crate) enum RwHolding {
    // Kept only to be dropped, which releases it.
    Read(#[allow(dead_code)] ReadGuard<Arc<RwLock>>),
    Write(WriteGuard<Arc<RwLock>>),
}

/// The flags of a [`Record`]: shared mode.
pub(crate) const SHARED_FLAG: u32 = 1;
/// The flags of a [`Record`]: the previous holder died holding the lock.
pub(crate) const OWNER_DIED_FLAG: u32 = 1 << 1;
/// The flags of a [`Record`]: a failure's status sits above this shift.
pub(crate) const STATUS_SHIFT: u32 = 8;

/// The record of an acquisition stored in `slot`.
#[inline]
pub(crate) fn record(slot: u32, acq: Option<&Acquisition>) -> Record {
    let Some(acq) = acq else {
        return [slot, 0, 0, 0];
    };
    let fence = acq.fence();
    let mut flags = 0;
    if acq.mode() == Mode::Shared {
        flags |= SHARED_FLAG;
    }
    if acq.owner_died() {
        flags |= OWNER_DIED_FLAG;
    }
    [slot, fence as u32, (fence >> 32) as u32, flags]
}

/// The record of a failed acquisition: its status in the flags, and the number its text is
/// kept under (see [`status::code_and_text`]) where a granted one has its fence's low half.
pub(crate) fn failure(e: &Error) -> Record {
    let (code, text) = status::code_and_text(e);
    [0, text, 0, code << STATUS_SHIFT]
}

/// A keyed lock (a `KeyPool`, a `StripedLock` or a `Semaphore` in JavaScript) as one thread holds it.
#[derive(Debug)]
pub(crate) struct Keyed {
    pub(crate) core: Core,
    pub(crate) made: Made,
    pub(crate) live: Liveness,
    pub(crate) held: RefCell<Slab<Holding>>,
}

impl Keyed {
    pub(crate) fn new(core: Core, made: Made, live: Liveness) -> Self {
        Self {
            core,
            made,
            live,
            held: RefCell::new(Slab::default()),
        }
    }

    /// Stores what an acquire took; its record. (Its caller counts it on a lock of other
    /// threads, before the acquire: see [`Liveness::enter`].) A full slab (millions of holds by
    /// one thread) gives the holding back to the core and fails with `CapacityExceeded`.
    /// Inlined always: as a call, the holding was copied once more on its way in (9
    /// instructions of an uncontended `withLock`).
    #[inline(always)]
    pub(crate) fn store(&self, holding: Holding) -> Record {
        let record = record(0, holding.first());
        let mut held = self.held.borrow_mut();
        match held.vacant() {
            Some(index) => [held.fill(index, holding), record[1], record[2], record[3]],
            None => {
                drop(held);
                let _ = end(&self.core, holding);
                failure(&Error::CapacityExceeded)
            }
        }
    }

    /// Stores the outcome of an acquire of one key.
    #[inline]
    pub(crate) fn stored(&self, got: keylock_core::Result<Acquisition>) -> Record {
        match got {
            Ok(acq) => self.store(Holding::One(acq)),
            Err(e) => failure(&e),
        }
    }

    /// Stores the outcome of a multi-key acquire.
    pub(crate) fn stored_many(&self, got: keylock_core::Result<Vec<Acquisition>>) -> Record {
        match got {
            Ok(acqs) => self.store(Holding::Many(acqs)),
            Err(e) => failure(&e),
        }
    }

    /// Releases what `slot` holds: a status, with [`status::LOCAL_WAKE`] added when the release
    /// woke a waiter of this thread.
    #[inline]
    pub(crate) fn release(&self, slot: u32) -> u32 {
        let mut held = self.held.borrow_mut();
        // The uncontended case: the core's one compare-and-swap on the record where it lies
        // (`KeyedLock::try_release_cas`), which spends it. Nothing was queued behind it, so
        // nobody was woken.
        if let Some(Holding::One(acq)) = held.get(slot)
            && self.core.try_release_cas(acq)
        {
            held.remove(slot);
            drop(held);
            self.live.released();
            return status::OK;
        }
        let taken = held.take(slot);
        drop(held);
        let code = match taken {
            Some(Holding::One(acq)) => status::of(self.core.release(acq)),
            Some(holding) => status::of(end(&self.core, holding)),
            None => return status::NOT_HELD,
        };
        self.live.released();
        status::with_local_wake(code)
    }

    /// Runs `f` on the acquisition in `slot` (the first one of a multi-key hold).
    pub(crate) fn with_acquisition<T>(
        &self,
        slot: u32,
        f: impl FnOnce(&mut Acquisition) -> T,
    ) -> Option<T> {
        let mut held = self.held.borrow_mut();
        match held.get_mut(slot)? {
            Holding::One(a) | Holding::Web { acq: a, .. } => Some(f(a)),
            Holding::Many(v) => v.first_mut().map(f),
        }
    }

    /// The lost signals of the acquisitions in `slot`: none for a scope whose holders cannot
    /// lose a lock behind their backs (in-process, shared memory), or a slot that holds
    /// nothing.
    pub(crate) fn lost_signals(&self, slot: u32) -> Vec<LostSignal> {
        let held = self.held.borrow();
        let acqs: &[Acquisition] = match held.get(slot) {
            None => &[],
            Some(Holding::One(a) | Holding::Web { acq: a, .. }) => std::slice::from_ref(a),
            Some(Holding::Many(v)) => v,
        };
        acqs.iter()
            .filter_map(|a| self.core.lost_signal(a))
            .collect()
    }

    /// The fences of the acquisitions in `slot`.
    pub(crate) fn fences(&self, slot: u32) -> Option<Vec<u64>> {
        let held = self.held.borrow();
        Some(match held.get(slot)? {
            Holding::One(a) | Holding::Web { acq: a, .. } => vec![a.fence()],
            Holding::Many(v) => v.iter().map(Acquisition::fence).collect(),
        })
    }

    /// Whether every acquisition in `slot` is still current.
    pub(crate) fn is_current(&self, slot: u32) -> keylock_core::Result<bool> {
        let held = self.held.borrow();
        let Some(holding) = held.get(slot) else {
            return Ok(false);
        };
        match holding {
            Holding::One(a) | Holding::Web { acq: a, .. } => self.core.is_current(a),
            Holding::Many(v) => {
                for a in v {
                    if !self.core.is_current(a)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        }
    }

    /// Moves the lease of every acquisition in `slot` to end `lease` from now.
    pub(crate) fn extend(&self, slot: u32, lease: std::time::Duration) -> u32 {
        let mut held = self.held.borrow_mut();
        let Some(holding) = held.get_mut(slot) else {
            return status::NOT_HELD;
        };
        let result = match holding {
            Holding::One(a) | Holding::Web { acq: a, .. } => self.core.extend(a, lease),
            Holding::Many(v) => v.iter_mut().try_for_each(|a| self.core.extend(a, lease)),
        };
        status::of(result)
    }

    /// Acquires with `opts` now (blocking as `opts.wait` says) and stores the acquisition.
    pub(crate) fn acquire(&self, key: &[u8], opts: &LockOptions) -> Record {
        self.live
            .counted(|| self.stored(self.core.acquire(keylock_core::LockKey::new(key), opts)))
    }

    /// Acquires several keys with `opts` now, all or none, and stores the acquisitions.
    pub(crate) fn acquire_many(
        &self,
        keys: &[(keylock_core::LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> Record {
        self.live
            .counted(|| self.stored_many(self.core.acquire_many(keys, opts)))
    }
}

/// Ends a holding through the core (a Web Locks ticket leaves the registry as it drops).
fn end(core: &Core, holding: Holding) -> keylock_core::Result<()> {
    match holding {
        Holding::One(acq) | Holding::Web { acq, .. } => core.release(acq),
        Holding::Many(acqs) => {
            // Newest first, as the core releases a failed multi-key acquire; the first
            // refusal is reported, and every acquisition is handed back either way.
            let mut result = Ok(());
            for acq in acqs.into_iter().rev() {
                let r = core.release(acq);
                if result.is_ok() {
                    result = r;
                }
            }
            result
        }
    }
}

impl Drop for Keyed {
    /// A lock handle is dropped when no JavaScript object refers to it any more, or when its
    /// thread ends: what it still holds is released, as dropping a guard releases in Rust.
    fn drop(&mut self) {
        let held = self.held.get_mut().drain();
        let gave_back = !held.is_empty();
        for holding in held {
            let _ = end(&self.core, holding);
            self.live.leave();
        }
        // A release may have handed a key to a waiter of this thread (on another handle of a
        // shared lock), and no entry point reports it: the handle's finalizer is not one.
        if gave_back {
            crate::reactor::flush_local();
        }
    }
}

/// An RwLock as one thread holds it.
#[derive(Debug)]
pub(crate) struct Rw {
    pub(crate) core: Arc<RwLock>,
    pub(crate) live: Liveness,
    pub(crate) held: RefCell<Slab<RwHolding>>,
}

impl Rw {
    pub(crate) fn new(core: Arc<RwLock>, live: Liveness) -> Self {
        Self {
            core,
            live,
            held: RefCell::new(Slab::default()),
        }
    }

    /// Stores a guard; its record (the writer's fence for a write guard). Its caller counts it
    /// on a lock of other threads, before the acquire ([`Liveness::enter`]).
    pub(crate) fn store(&self, holding: RwHolding) -> Record {
        let fence = match &holding {
            RwHolding::Write(w) => w.fence(),
            RwHolding::Read(_) => 0,
        };
        let shared = matches!(holding, RwHolding::Read(_));
        match self.held.borrow_mut().insert(holding) {
            Ok(slot) => [slot, fence as u32, (fence >> 32) as u32, u32::from(shared)],
            // Dropping the guard releases it.
            Err(_) => failure(&Error::CapacityExceeded),
        }
    }

    /// Stores the outcome of a read acquire.
    pub(crate) fn stored_read(&self, got: keylock_core::Result<ReadGuard<Arc<RwLock>>>) -> Record {
        match got {
            Ok(g) => self.store(RwHolding::Read(g)),
            Err(e) => failure(&e),
        }
    }

    /// Stores the outcome of a write acquire.
    pub(crate) fn stored_write(
        &self,
        got: keylock_core::Result<WriteGuard<Arc<RwLock>>>,
    ) -> Record {
        match got {
            Ok(g) => self.store(RwHolding::Write(g)),
            Err(e) => failure(&e),
        }
    }

    /// Releases the guard in `slot`.
    pub(crate) fn release(&self, slot: u32) -> u32 {
        let taken = self.held.borrow_mut().take(slot);
        let code = match taken {
            Some(guard) => {
                drop(guard);
                self.live.released();
                status::OK
            }
            None => status::NOT_HELD,
        };
        status::with_local_wake(code)
    }
}

impl Drop for Rw {
    fn drop(&mut self) {
        let held = self.held.get_mut().drain();
        let gave_back = !held.is_empty();
        for guard in held {
            drop(guard);
            self.live.leave();
        }
        // As in `Keyed`'s drop: a waiter of this thread may have been handed the lock.
        if gave_back {
            crate::reactor::flush_local();
        }
    }
}

/// A lock handle as JavaScript sees it (one type, so one type tag guards them all).
#[derive(Debug)]
pub(crate) enum Handle {
    Keyed(Keyed),
    Rw(Rw),
}

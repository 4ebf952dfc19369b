//! The Web Locks request registry: what `LockManager.query()` reports, and whose requests a
//! `steal` rejects.
//!
//! The locks themselves are the core's: a Web Locks name is a key in the core's
//! [`KeySpace::Names`](keylock_core::KeySpace::Names), held and queued (strict FIFO for `keylock.locks`) by the core alone.
//! What the core does not keep, and the spec asks for, is *who* asked: each request's name (as
//! the JavaScript string it was, lone surrogates and all), mode and `clientId`, in the order
//! the requests were made. Every request of every thread of the process is recorded here, under
//! one mutex, from the moment it is made until it is released, aborted or stolen from; the
//! record decides nothing about who gets a lock.
//!
//! Consistency with the core comes from two rules:
//! - a request is recorded and enqueued in the core under the registry's mutex, so the
//!   registry's order is the core's queue order;
//! - a steal reads the holders of a name and takes it from them under the same mutex, and a
//!   granted waiter checks under it that its acquisition is still current before it records
//!   itself as a holder: a waiter granted just before a steal finds its acquisition
//!   force-unlocked and counts as stolen from.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use keylock_core::{Acquisition, KeyedLock, Mode};

use crate::reactor::Mailbox;

/// The core lock object a request is made on (what a KeyPool or StripedLock holds).
type Core = Arc<dyn KeyedLock>;

/// One request, as `query()` reports it.
#[derive(Debug)]
struct Request {
    /// The name's key bytes (WTF-8), to find the holders of a name.
    key: Vec<u8>,
    /// The name as the UTF-16 code units JavaScript gave.
    name: Vec<u16>,
    mode: Mode,
    client: Arc<str>,
    held: bool,
    /// The requesting thread, and its id for the request there.
    mailbox: Mailbox,
    request: u32,
}

/// Requests by (lock object, sequence number): one map for every lock manager of the process.
static REGISTRY: Mutex<BTreeMap<(usize, u64), Request>> = Mutex::new(BTreeMap::new());
static SEQ: AtomicU64 = AtomicU64::new(1);

fn registry() -> MutexGuard<'static, BTreeMap<(usize, u64), Request>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The registry's name for a lock object: its address (the object lives while any request
/// on it does, since every ticket's holder keeps a reference to it).
pub(crate) fn lock_id(core: &Core) -> usize {
    Arc::as_ptr(core).cast::<()>() as usize
}

/// A request's place in the registry; dropping it removes the request.
#[derive(Debug)]
pub(crate) struct Ticket {
    at: (usize, u64),
}

impl Drop for Ticket {
    fn drop(&mut self) {
        registry().remove(&self.at);
    }
}

/// A request about to be made: what the registry records about it.
#[derive(Debug)]
pub(crate) struct Asking<'a> {
    pub(crate) core: &'a Core,
    pub(crate) key: &'a [u8],
    pub(crate) name: Vec<u16>,
    pub(crate) mode: Mode,
    pub(crate) client: Arc<str>,
    pub(crate) mailbox: Mailbox,
    pub(crate) request: u32,
}

/// What `enqueue`'s `start` did.
#[derive(Debug)]
pub(crate) enum Began<T> {
    /// Holds the lock now.
    Held(T),
    /// Waits for it.
    Waiting(T),
    /// Did not get it and does not wait (`ifAvailable`): nothing is recorded.
    Declined(T),
}

/// Records `asking` and runs `start` under the registry's mutex (see the module docs). For a
/// `steal`, the name's recorded holders are first told they lost it (their requests are
/// removed); `start` then takes the name with the core's steal, which frees it and grants it
/// to this request ahead of every queued one. Returns the ticket of a recorded request.
pub(crate) fn enqueue<T>(
    asking: Asking<'_>,
    steal: bool,
    start: impl FnOnce() -> Began<T>,
) -> (Option<Ticket>, T) {
    let lock = lock_id(asking.core);
    let mut reg = registry();
    if steal {
        let stolen: Vec<(usize, u64)> = reg
            .range((lock, 0)..=(lock, u64::MAX))
            .filter(|(_, r)| r.held && r.key == asking.key)
            .map(|(at, _)| *at)
            .collect();
        for at in stolen {
            if let Some(r) = reg.remove(&at) {
                r.mailbox.post_stolen(r.request);
            }
        }
    }
    let (held, out) = match start() {
        Began::Held(t) => (true, t),
        Began::Waiting(t) => (false, t),
        Began::Declined(t) => return (None, t),
    };
    let at = (lock, SEQ.fetch_add(1, Ordering::Relaxed));
    reg.insert(
        at,
        Request {
            key: asking.key.to_vec(),
            name: asking.name,
            mode: asking.mode,
            client: asking.client,
            held,
            mailbox: asking.mailbox,
            request: asking.request,
        },
    );
    drop(reg);
    (Some(Ticket { at }), out)
}

/// A waiter's request was granted `acq`: records it as held, unless a steal took the lock
/// between the grant and now (the acquisition is then not current, and the request was
/// stolen from: its record is removed). Returns whether it was stolen from.
pub(crate) fn granted(ticket: &Ticket, core: &Core, acq: &Acquisition) -> bool {
    let mut reg = registry();
    let current = core.is_current(acq).unwrap_or(false);
    if current && let Some(r) = reg.get_mut(&ticket.at) {
        r.held = true;
        return false;
    }
    reg.remove(&ticket.at);
    true
}

/// One entry of a snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub(crate) name: Vec<u16>,
    pub(crate) mode: Mode,
    pub(crate) client: Arc<str>,
    pub(crate) held: bool,
}

/// The requests on `core`, in the order they were made.
pub(crate) fn snapshot(core: &Core) -> Vec<Snapshot> {
    let lock = lock_id(core);
    registry()
        .range((lock, 0)..=(lock, u64::MAX))
        .map(|(_, r)| Snapshot {
            name: r.name.clone(),
            mode: r.mode,
            client: r.client.clone(),
            held: r.held,
        })
        .collect()
}

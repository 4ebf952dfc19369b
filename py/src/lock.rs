//! What a lock handle locks ([`Target`]), what it holds ([`Held`], one record per acquire) and
//! the calls into the core on them, and the data of the handle base class ([`LockHandle`]).
//! The layer below both ways of waiting ([`crate::wait`]) and the handles' Python protocol
//! ([`crate::handle`]).
//!
//! A handle keeps the record of each acquisition it made (the core's `Acquisition`, or an RwLock
//! guard) and releases exactly that record: never by key. After a force-unlock or the end of a
//! lease the record is stale, and releasing it is refused by the core (`NotOwnerError`,
//! `LeaseExpiredError`) without touching the key's new holder.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use keylock_core::scope::{AcquireFuture, AcquireManyFuture};
use keylock_core::{
    self as core, Acquisition, Error, KeyedLock, LockKey, LockOptions, Mode, Owner, ReadFuture,
    ReadGuard, Wait, WriteFuture, WriteGuard,
};
use pyo3::prelude::*;

use crate::gil::{GilCell, with_gil_released};
use crate::key::OwnedKey;

/// Base class of KeyPool and StripedLock: a lock object with a lock per key (or per stripe),
/// opened by name. Every lock is reached through a handle (`lock`, `read`, `write`,
/// `lock_many`); the lock object itself can force a key free and say who holds it.
///
/// (Its methods are in [`crate::locks`]; the data is here because handles point at it.)
#[pyclass(module = "keylock", name = "KeyedLock", subclass, frozen)]
pub(crate) struct Keyed {
    pub(crate) inner: Arc<dyn KeyedLock>,
    /// The name it was opened with, its password (if any) redacted: all that is ever shown.
    pub(crate) name: String,
    /// Whether a call into it may wait on something outside this process (a network round
    /// trip, another process's mutex), so that it must be made with the GIL released. The
    /// in-process lock objects (those that give the core's `as_any`) answer at once.
    pub(crate) may_block: bool,
    /// Whether it was opened with metrics, so that the core counts every call: then the
    /// waiting styles make only the calls the caller asked for (no try of their own before a
    /// wait, which the core would count as a failed try).
    pub(crate) metered: bool,
    pub(crate) reentrant: bool,
    pub(crate) fifo: bool,
}

/// What a handle locks.
pub(crate) enum Target {
    /// One key of a keyed lock object (a KeyPool key, or a StripedLock key's stripe), or of a
    /// semaphore (which ignores the mode).
    Key {
        lock: Py<Keyed>,
        key: OwnedKey,
        mode: Mode,
        /// The units each acquire takes (`LockOptions::weight`): 1 for a lock, the caller's for
        /// a semaphore (the core refuses a weight its lock object does not allow).
        weight: u32,
    },
    /// Several keys taken together, each in its mode.
    Many {
        lock: Py<Keyed>,
        keys: Vec<(OwnedKey, Mode)>,
    },
    /// An RwLock, shared.
    Read(Arc<core::RwLock>),
    /// An RwLock, exclusive.
    Write(Arc<core::RwLock>),
}

/// One hold of a handle: what the core handed out for one acquire.
pub(crate) enum Held {
    One(Acquisition),
    Many(Vec<Acquisition>),
    // Kept for its Drop, which releases the read lock: nothing reads a read guard.
    Read(#[allow(dead_code)] ReadGuard<Arc<core::RwLock>>),
    Write(WriteGuard<Arc<core::RwLock>>),
}

impl Held {
    /// The acquisitions inside (none for RwLock guards).
    pub(crate) fn acquisitions(&self) -> &[Acquisition] {
        match self {
            Held::One(a) => std::slice::from_ref(a),
            Held::Many(v) => v,
            Held::Read(_) | Held::Write(_) => &[],
        }
    }

    fn acquisitions_mut(&mut self) -> &mut [Acquisition] {
        match self {
            Held::One(a) => std::slice::from_mut(a),
            Held::Many(v) => v,
            Held::Read(_) | Held::Write(_) => &mut [],
        }
    }
}

/// The core's cancel-safe future for a target: it keeps its place in the queue until it is
/// ready or dropped (dropping it cancels the wait exactly, passing on a lock it was just handed).
pub(crate) enum HoldFuture {
    One(AcquireFuture),
    Many(AcquireManyFuture),
    Read(Pin<Box<ReadFuture<Arc<core::RwLock>>>>),
    Write(Pin<Box<WriteFuture<Arc<core::RwLock>>>>),
}

impl HoldFuture {
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Held, Error>> {
        match self {
            HoldFuture::One(f) => f.as_mut().poll(cx).map_ok(Held::One),
            HoldFuture::Many(f) => f.as_mut().poll(cx).map_ok(Held::Many),
            HoldFuture::Read(f) => f.as_mut().poll(cx).map(|g| Ok(Held::Read(g))),
            HoldFuture::Write(f) => f.as_mut().poll(cx).map(|g| Ok(Held::Write(g))),
        }
    }
}

impl Future for HoldFuture {
    type Output = Result<Held, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        HoldFuture::poll(self.get_mut(), cx)
    }
}

impl Target {
    /// Whether a call into the core for this target may block (see [`Keyed::may_block`]); an
    /// RwLock's never does.
    #[inline]
    pub(crate) fn may_block(&self) -> bool {
        match self {
            Target::Key { lock, .. } | Target::Many { lock, .. } => lock.get().may_block,
            Target::Read(_) | Target::Write(_) => false,
        }
    }

    /// Whether the target's lock object counts its calls (see [`Keyed::metered`]); an
    /// RwLock's never does.
    #[inline]
    pub(crate) fn metered(&self) -> bool {
        match self {
            Target::Key { lock, .. } | Target::Many { lock, .. } => lock.get().metered,
            Target::Read(_) | Target::Write(_) => false,
        }
    }

    /// The lock object, for keyed targets.
    pub(crate) fn keyed(&self) -> Option<&Arc<dyn KeyedLock>> {
        match self {
            Target::Key { lock, .. } | Target::Many { lock, .. } => Some(&lock.get().inner),
            Target::Read(_) | Target::Write(_) => None,
        }
    }

    /// `opts` with this target's mode and weight (the many-keys form takes a mode per key
    /// instead).
    #[inline]
    pub(crate) fn options(&self, lease: Option<Duration>, owner: Option<Owner>) -> LockOptions {
        let mut opts = LockOptions::new();
        if let Target::Key { mode, weight, .. } = self {
            opts = opts.mode(*mode).weight(*weight);
        }
        if let Some(lease) = lease {
            opts = opts.lease(lease);
        }
        if let Some(owner) = owner {
            opts = opts.owner(owner);
        }
        opts
    }

    /// The core's uncontended plain acquire of one key ([`KeyedLock::try_acquire_fast`]: one
    /// compare-and-swap of a free key's lock word), for an acquire of one unit with no lease
    /// and no owner; `None` where it does not apply or the key is taken, for
    /// [`try_now`](Self::try_now).
    #[inline]
    pub(crate) fn try_fast(&self, lease: Option<Duration>, owner: Option<Owner>) -> Option<Held> {
        match self {
            Target::Key {
                lock,
                key,
                mode,
                weight: 1,
            } if lease.is_none() && owner.is_none() => lock
                .get()
                .inner
                .try_acquire_fast(LockKey::new(key), *mode)
                .map(Held::One),
            _ => None,
        }
    }

    /// Takes the lock now if it can be taken without waiting: `Err(WouldBlock)` otherwise.
    /// Never releases the GIL.
    #[inline]
    pub(crate) fn try_now(&self, opts: LockOptions) -> Result<Held, Error> {
        let opts = opts.wait(Wait::No);
        match self {
            Target::Key { lock, key, .. } => lock
                .get()
                .inner
                .acquire(LockKey::new(key), &opts)
                .map(Held::One),
            Target::Many { lock, keys } => lock
                .get()
                .inner
                .acquire_many(&lock_keys(keys), &opts)
                .map(Held::Many),
            Target::Read(rw) => rw.read_with_owned(Wait::No).map(Held::Read),
            Target::Write(rw) => rw.write_with_owned(Wait::No).map(Held::Write),
        }
    }

    /// The core's future for this lock: it waits until `deadline` (then it ends with
    /// `TimedOut`, unless the lock was handed to it), or for as long as it is polled. (An
    /// RwLock's waits for as long as it is polled.)
    pub(crate) fn future(&self, opts: LockOptions, deadline: Option<Instant>) -> HoldFuture {
        let opts = opts.wait(deadline.map_or(Wait::Forever, Wait::Until));
        match self {
            Target::Key { lock, key, .. } => HoldFuture::One(
                Arc::clone(&lock.get().inner).acquire_async(LockKey::new(key), &opts),
            ),
            Target::Many { lock, keys } => HoldFuture::Many(
                Arc::clone(&lock.get().inner).acquire_many_async(&lock_keys(keys), &opts),
            ),
            Target::Read(rw) => HoldFuture::Read(Box::pin(rw.read_async_owned())),
            Target::Write(rw) => HoldFuture::Write(Box::pin(rw.write_async_owned())),
        }
    }

    /// Releases one hold, on behalf of `owner` in a reentrant lock object. Every acquisition of
    /// a many-keys hold is released; the first refusal is the result. The GIL is released
    /// meanwhile when the scope may block.
    #[inline]
    pub(crate) fn release(
        &self,
        py: Python<'_>,
        held: Held,
        owner: Option<Owner>,
    ) -> Result<(), Error> {
        match (self.keyed(), held) {
            (Some(lock), Held::One(acq)) => {
                with_gil_released(py, self.may_block(), || lock.release_as(acq, owner))
            }
            (Some(lock), Held::Many(acqs)) => with_gil_released(py, self.may_block(), || {
                let mut result = Ok(());
                for acq in acqs.into_iter().rev() {
                    let r = lock.release_as(acq, owner);
                    if result.is_ok() {
                        result = r;
                    }
                }
                result
            }),
            // RwLock guards release on drop, exactly once.
            (_, held) => {
                drop(held);
                Ok(())
            }
        }
    }

    /// Whether every acquisition of `held` is still current (an RwLock guard always is).
    pub(crate) fn is_current(&self, py: Python<'_>, held: &Held) -> Result<bool, Error> {
        let Some(lock) = self.keyed() else {
            return Ok(true);
        };
        let acqs = held.acquisitions();
        with_gil_released(py, self.may_block(), || {
            for acq in acqs {
                if !lock.is_current(acq)? {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    /// Moves the end of every lease in `held` to `lease` from now.
    pub(crate) fn extend(
        &self,
        py: Python<'_>,
        held: &mut Held,
        lease: Duration,
    ) -> Result<(), Error> {
        let Some(lock) = self.keyed() else {
            return Err(Error::InvalidArgument("an RwLock acquisition has no lease"));
        };
        let acqs = held.acquisitions_mut();
        with_gil_released(py, self.may_block(), || {
            for acq in acqs {
                lock.extend(acq, lease)?;
            }
            Ok(())
        })
    }

    /// Whether a non-blocking acquire would fail now (`threading.Lock.locked()`,
    /// `asyncio.Semaphore.locked()`): the core's `would_wait` for each key.
    pub(crate) fn locked(&self, py: Python<'_>) -> Result<bool, Error> {
        let blocks = |lock: &Arc<dyn KeyedLock>, key: &OwnedKey, mode: Mode| {
            lock.would_wait(LockKey::new(key), &LockOptions::new().mode(mode))
        };
        match self {
            Target::Key {
                lock,
                key,
                mode,
                weight,
            } => {
                let lock = &lock.get().inner;
                let opts = LockOptions::new().mode(*mode).weight(*weight);
                with_gil_released(py, self.may_block(), || {
                    lock.would_wait(LockKey::new(key), &opts)
                })
            }
            Target::Many { lock, keys } => {
                let lock = &lock.get().inner;
                with_gil_released(py, self.may_block(), || {
                    for (key, mode) in keys {
                        if blocks(lock, key, *mode)? {
                            return Ok(true);
                        }
                    }
                    Ok(false)
                })
            }
            Target::Read(rw) => Ok(rw.is_write_locked()),
            Target::Write(rw) => Ok(rw.is_locked()),
        }
    }
}

fn lock_keys(keys: &[(OwnedKey, Mode)]) -> Vec<(LockKey<'_>, Mode)> {
    keys.iter().map(|(k, m)| (LockKey::new(k), *m)).collect()
}

/// One acquire's record in a handle: what it holds, and for which owner (reentrant lock
/// objects only).
pub(crate) struct Record {
    pub(crate) held: Held,
    pub(crate) owner: Option<Owner>,
}

/// A handle's records, oldest first. The first is kept inline: a handle almost always holds
/// one at most, and then taking a lock allocates nothing.
#[derive(Default)]
pub(crate) struct Records {
    first: Option<Record>,
    more: Vec<Record>,
}

impl Records {
    fn push(&mut self, record: Record) {
        if self.first.is_none() && self.more.is_empty() {
            self.first = Some(record);
        } else {
            self.more.push(record);
        }
    }

    /// Every record, oldest first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &Record> {
        self.first.iter().chain(self.more.iter())
    }

    /// Takes the newest record (of `owner`, if given).
    fn take_newest(&mut self, owner: Option<Owner>) -> Option<Record> {
        let mine = |r: &Record| owner.is_none() || r.owner == owner;
        if let Some(i) = self.more.iter().rposition(mine) {
            return Some(self.more.remove(i));
        }
        if self.first.as_ref().is_some_and(mine) {
            return self.first.take();
        }
        None
    }

    /// Takes every record (of `owner`, if given), oldest first.
    fn take_all(&mut self, owner: Option<Owner>) -> Vec<Record> {
        let mut out = Vec::new();
        let mine = |r: &Record| owner.is_none() || r.owner == owner;
        if self.first.as_ref().is_some_and(mine) {
            out.extend(self.first.take());
        }
        let (taken, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.more).into_iter().partition(mine);
        out.extend(taken);
        self.more = kept;
        out
    }
}

/// Base class of every keylock lock handle.
///
/// A handle follows `threading.Lock`'s protocol (`acquire`, `release`, `locked`, `with`) and
/// asyncio's (`async with`, `await acquire_async()`), so code written for a `threading.Lock`
/// works unchanged; a handle of a reentrant lock object follows `threading.RLock`'s. Handles are
/// made by `lock`, `read`, `write` and `lock_many` of KeyPool and StripedLock, by
/// `RwLock.read` and `RwLock.write`, and by `Semaphore.acquire`. A handle keeps the record of every acquisition it made and
/// releases exactly those: a stale record (force-unlocked, or its lease ran out) never releases
/// the key's next holder.
#[pyclass(module = "keylock", name = "LockHandle", subclass, frozen, weakref)]
pub(crate) struct LockHandle {
    pub(crate) target: Target,
    /// Limit for `with` / `async with`: `None` waits for as long as it takes.
    pub(crate) timeout: Option<f64>,
    /// The lease of every acquire through this handle unless the acquire gives its own.
    pub(crate) lease: Option<Duration>,
    /// Acquisitions belong to the calling thread or task (a reentrant lock object).
    pub(crate) reentrant: bool,
    /// Never dropped as a field: `Drop` moves out whatever it owns (see there).
    records: std::mem::ManuallyDrop<GilCell<Records>>,
    /// The two bound-method objects its `__enter__`, `__exit__`, `__aenter__` and `__aexit__`
    /// hand out ([`crate::bound`]).
    #[cfg(not(Py_GIL_DISABLED))]
    pub(crate) bound: crate::bound::Slots,
}

impl LockHandle {
    pub(crate) fn new(
        target: Target,
        timeout: Option<f64>,
        lease: Option<Duration>,
        reentrant: bool,
    ) -> Self {
        Self {
            target,
            timeout,
            lease,
            reentrant,
            records: std::mem::ManuallyDrop::new(GilCell::new(Records::default())),
            #[cfg(not(Py_GIL_DISABLED))]
            bound: crate::bound::Slots::new(),
        }
    }

    /// The bound-method slots of a handle object.
    ///
    /// # Safety
    /// `obj` is a live instance of `LockHandle` (or of a subclass), and the thread is attached.
    #[cfg(not(Py_GIL_DISABLED))]
    pub(crate) unsafe fn slots_of(obj: *mut pyo3::ffi::PyObject) -> *const crate::bound::Slots {
        // SAFETY: the caller's contract; the handle outlives this call, and the slots live
        // inside it.
        unsafe {
            let py = Python::assume_attached();
            let handle = Borrowed::from_ptr(py, obj).cast_unchecked::<LockHandle>();
            &raw const handle.get().bound
        }
    }

    /// The owner of an acquire or release made now: the calling thread or task for a reentrant
    /// lock object, none otherwise.
    #[inline]
    pub(crate) fn owner(&self, py: Python<'_>) -> PyResult<Option<Owner>> {
        if self.reentrant {
            crate::owner::current(py).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Keeps the record of an acquire that succeeded.
    #[inline]
    pub(crate) fn push(&self, py: Python<'_>, held: Held, owner: Option<Owner>) {
        // SAFETY: pushing moves the record in; nothing runs Python code.
        unsafe { self.records.with(py, |r| r.push(Record { held, owner })) }
    }

    /// Takes the newest record that `owner` may release: any for a plain handle, the caller's own
    /// for a reentrant one.
    #[inline]
    pub(crate) fn take(&self, py: Python<'_>, owner: Option<Owner>) -> Option<Record> {
        // SAFETY: the record is moved out, not dropped here; nothing runs Python code.
        unsafe { self.records.with(py, |r| r.take_newest(owner)) }
    }

    /// Ends a plain handle's one hold with the core's uncontended release
    /// ([`KeyedLock::try_release_cas`]), its record read where it is kept: true if that released
    /// it (the record is then gone), false if it changed nothing (the caller takes the full
    /// path). Moving the 80-byte record out and into the release, as the full path does, was
    /// most of what an uncontended `__exit__` spent outside the compare-and-swap.
    #[inline]
    pub(crate) fn try_release_only_cas(&self, py: Python<'_>) -> bool {
        let Some(lock) = self.target.keyed() else {
            return false;
        };
        // SAFETY: the core's release neither calls Python nor blocks; the record dropped
        // (spent) owns nothing.
        unsafe {
            self.records.with(py, |r| match &r.first {
                Some(Record {
                    held: Held::One(acq),
                    owner: None,
                }) if r.more.is_empty() && lock.try_release_cas(acq) => {
                    r.first = None;
                    true
                }
                _ => false,
            })
        }
    }

    /// Puts back a record taken by [`take`](Self::take), as the newest.
    pub(crate) fn put_back(&self, py: Python<'_>, record: Record) {
        // SAFETY: as for `push`.
        unsafe { self.records.with(py, |r| r.push(record)) }
    }

    /// Takes every record of `owner` (all of them for a plain handle).
    pub(crate) fn take_all(&self, py: Python<'_>, owner: Option<Owner>) -> Vec<Record> {
        // SAFETY: the records are moved out, not dropped here; nothing runs Python code.
        unsafe { self.records.with(py, |r| r.take_all(owner)) }
    }

    /// Reads the newest record that `owner` may release, if there is one. `f` only reads
    /// (fences, lease deadlines): it calls neither Python nor the core.
    pub(crate) fn read_newest<T>(
        &self,
        py: Python<'_>,
        owner: Option<Owner>,
        f: impl FnOnce(&Record) -> T,
    ) -> Option<T> {
        let newest = |r: &mut Records| {
            r.iter()
                .rev()
                .find(|r| owner.is_none() || r.owner == owner)
                .map(f)
        };
        // SAFETY: `f` reads plain fields of the record (its contract above).
        unsafe { self.records.with(py, newest) }
    }

    /// Runs `f` on the newest record that `owner` may release, if there is one, with the record
    /// taken out of the handle meanwhile: `f` calls the core (`is_current`, `extend`), whose
    /// wake-ups may run Python code, so the records must not be borrowed. (A release from
    /// another thread at that very moment does not find the record: it says NotLockedError, as
    /// it would have a moment later.)
    pub(crate) fn with_newest<T>(
        &self,
        py: Python<'_>,
        owner: Option<Owner>,
        f: impl FnOnce(&mut Record) -> T,
    ) -> Option<T> {
        let mut record = self.take(py, owner)?;
        let out = f(&mut record);
        self.put_back(py, record);
        Some(out)
    }

    /// How many records `owner` has here (all of them for a plain handle).
    pub(crate) fn count(&self, py: Python<'_>, owner: Option<Owner>) -> usize {
        let count = |r: &mut Records| {
            r.iter()
                .filter(|r| owner.is_none() || r.owner == owner)
                .count()
        };
        // SAFETY: counting reads owner fields only.
        unsafe { self.records.with(py, count) }
    }
}

impl Drop for LockHandle {
    /// A handle that is garbage-collected while it still holds releases what it holds (as a
    /// Rust guard does on drop: nobody else could), and says so with a `ResourceWarning`, as an
    /// unclosed file does. Stale records release nothing.
    fn drop(&mut self) {
        let records = self.records.get_mut();
        // The usual end: everything was released and nothing was ever allocated, so the records
        // own nothing to drop (checked in place, which spares their drop glue's checks).
        if records.first.is_none() && records.more.capacity() == 0 {
            return;
        }
        // (What the field holds after this is the empty default, which owns nothing: the field
        // is never dropped.)
        let records = std::mem::take(records);
        let mut released = 0usize;
        for record in records.first.into_iter().chain(records.more) {
            // Ok: it was still held (an RwLock guard always is), and now it is not.
            let outcome = Python::attach(|py| self.target.release(py, record.held, None));
            if outcome.is_ok() {
                released += 1;
            }
        }
        if released > 0 {
            Python::attach(|py| warn_released(py, released));
        }
    }
}

/// The `ResourceWarning` of a handle dropped while holding; never raises (a warning turned into
/// an error by a filter is reported as unraisable, as CPython does for files).
#[cold]
fn warn_released(py: Python<'_>, released: usize) {
    let pending = PyErr::take(py);
    let message = std::ffi::CString::new(format!(
        "a keylock handle was garbage-collected while holding {released} acquisition(s); \
         released them (release handles explicitly, or use `with`)"
    ))
    .expect("no NUL in the message");
    let category = py.get_type::<pyo3::exceptions::PyResourceWarning>();
    if let Err(e) = PyErr::warn(py, &category, &message, 1) {
        e.write_unraisable(py, None);
    }
    if let Some(pending) = pending {
        pending.restore(py);
    }
}

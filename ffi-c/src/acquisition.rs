//! `keylock_acquisition`: the record of one hold, in caller memory.
//!
//! Every acquire writes one; every release takes one and releases exactly that hold. The struct
//! has public fields for the caller to read (the fence, the mode, `owner_died`, the weight) and
//! private
//! storage into which the core's record is written: a `keylock_core::Acquisition` (the one the
//! core's fast path gives for an uncontended plain acquire of an in-process pool or striped
//! lock, and whatever other scopes and `lock_many` give), for an in-process object's other
//! acquires the core's guard of the hold, for the RwLock its guard. A state word says which, or
//! that the struct is empty
//! (never filled, or the output of a failed acquire) or released, so that a second release of
//! the same struct is refused instead of reaching the lock. A handle id says which lock object
//! the record belongs to, so that a record passed to another object is refused too.

use std::mem::{align_of, size_of};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use std::time::Duration;

use keylock_core::{
    Acquisition, KeyBuf, KeyPool, PoolGuard, ReadGuard, RwLock, StripeGuard, StripedLock,
    WriteGuard,
};

use crate::boundary::*;
use crate::contract::*;
use crate::options::*;
use crate::result::*;

/// The 64-bit words of private storage in a `keylock_acquisition` (part of the ABI: the
/// struct is 128 bytes). Layout, in bytes: `fence` 0..8, `mode` 8..12, `owner_died` 12,
/// `weight` 16..20, `_private_state` 24..32, `_private_lock` 32..40, `_private_storage` 40..128.
/// (Before `weight` was added the storage was 12 words from byte 32; the public fields kept
/// their offsets and the struct its size.)
pub const KEYLOCK_ACQUISITION_STORAGE_WORDS: usize = 11;
const STORAGE_WORDS: usize = KEYLOCK_ACQUISITION_STORAGE_WORDS;

/// The record of one acquisition, which the caller keeps (on its stack, or in its own structs)
/// from the acquire to the release. Every acquire writes it in full; release it with the
/// matching `_release` call, which releases this acquisition and nothing else.
///
/// - Read `fence`, `mode`, `owner_died` and `weight`; never write the `_private` fields.
///   (Changing the public ones changes nothing: they are a copy.)
/// - Do not duplicate a held acquisition: a byte copy (assignment, `memcpy`) may stand in for
///   the original only if the original is never passed to keylock again, as when moving it.
/// - Calls on one struct must not overlap (it is not synchronised); different structs are
///   independent, and a struct may be released by any thread.
/// - `KEYLOCK_ACQUISITION_INIT` (all zeros) is an empty record: releasing it reports
///   `KEYLOCK_NOT_LOCKED`. A failed acquire leaves its output empty too.
/// - After a release (successful or refused as stale) the struct is marked released: releasing
///   it again reports `KEYLOCK_NOT_OWNER` and touches no lock. The public fields keep their
///   values.
/// - A pool or striped acquisition holds no memory: one never released leaves its key held
///   (until `_force_unlock`) and nothing else. An RwLock acquisition holds a reference to the
///   lock's memory until it is released.
#[allow(non_camel_case_types)] // C naming: this is the name C programs see.
#[repr(C)]
#[derive(Debug)]
pub struct keylock_acquisition {
    /// The fencing token: strictly greater than the fence of every earlier exclusive
    /// acquisition of the same key (or stripe, or RwLock writer) in the same lock object, even
    /// after the key's memory was recycled, a force-unlock, or a lease ran out. Shared holders
    /// read the fence of the last exclusive acquisition; a reentrant re-acquire keeps the
    /// holder's fence; an RwLock read acquisition has fence 0. Every acquisition of a
    /// semaphore's units has a fence of its own, strictly greater than every earlier one's of
    /// the key. Pass it to the resource the lock protects, which rejects anything older than
    /// the newest it has seen.
    pub fence: u64,
    /// `KEYLOCK_EXCLUSIVE` or `KEYLOCK_SHARED` (always `KEYLOCK_SHARED` for a semaphore's
    /// acquisition: its holders share the key, up to the permits).
    pub mode: keylock_mode,
    /// Whether the previous holder died holding the lock, so the data it protected may be
    /// half-changed (scopes shared between processes only; always false in one process).
    pub owner_died: bool,
    /// The units held: the acquisition's weight for a semaphore (`keylock_semaphore`), 1 for
    /// every acquisition of a lock (pool, striped lock, RwLock), 0 for an empty record. The
    /// record keeps the units it holds in its private storage too, so that its release gives
    /// back exactly those units; this field is a copy for the caller to read.
    pub weight: u32,
    /// Private: what the struct holds. Never read or write it.
    pub _private_state: u64,
    /// Private: which lock object the record belongs to. Never read or write it.
    pub _private_lock: u64,
    /// Private: the library's record of the hold. Never read or write it.
    pub _private_storage: [u64; KEYLOCK_ACQUISITION_STORAGE_WORDS],
}

/// The guard of an in-process pool's hold, as a record keeps it. The `'static` is the handle's
/// lifetime: see [`crate::keyed`] for why a record's guard never outlives its use.
pub(crate) type PoolHold = PoolGuard<&'static KeyPool<KeyBuf>>;
/// The guard of an in-process striped lock's hold (as [`PoolHold`]).
pub(crate) type StripeHold = StripeGuard<&'static StripedLock>;

/// What a keyed record holds, taken out of it.
pub(crate) enum Held {
    /// An acquisition made through the `KeyedLock` trait.
    Acq(Acquisition),
    /// A guard of an in-process pool.
    Pool(PoolHold),
    /// A guard of an in-process striped lock.
    Stripe(StripeHold),
}

/// What a keyed record holds, in place.
pub(crate) enum HeldRef<'a> {
    Acq(&'a Acquisition),
    Pool(&'a PoolHold),
    Stripe(&'a StripeHold),
}

/// What a keyed record holds, in place, to change (extend a lease).
pub(crate) enum HeldMut<'a> {
    Acq(&'a mut Acquisition),
    Pool(&'a mut PoolHold),
    Stripe(&'a mut StripeHold),
}

// The records written into `_private_storage` must fit it, and its alignment (8) must serve.
const _: () = {
    assert!(size_of::<PoolHold>() <= size_of::<[u64; STORAGE_WORDS]>());
    assert!(align_of::<PoolHold>() <= align_of::<u64>());
    assert!(size_of::<StripeHold>() <= size_of::<[u64; STORAGE_WORDS]>());
    assert!(align_of::<StripeHold>() <= align_of::<u64>());
    assert!(size_of::<Acquisition>() <= size_of::<[u64; STORAGE_WORDS]>());
    assert!(align_of::<Acquisition>() <= align_of::<u64>());
    assert!(size_of::<ReadGuard<Arc<RwLock>>>() <= size_of::<[u64; STORAGE_WORDS]>());
    assert!(align_of::<ReadGuard<Arc<RwLock>>>() <= align_of::<u64>());
    assert!(size_of::<WriteGuard<Arc<RwLock>>>() <= size_of::<[u64; STORAGE_WORDS]>());
    assert!(align_of::<WriteGuard<Arc<RwLock>>>() <= align_of::<u64>());
    // `release_keyed_fast` reads a copy of a record's Acquisition and lets it go when the
    // release does not happen: that is sound only while it is plain data, with nothing to drop.
    assert!(!std::mem::needs_drop::<Acquisition>());
    // The C header's size: the tests check sizeof(keylock_acquisition) == 128.
    assert!(size_of::<keylock_acquisition>() == 128);
    // The public fields' offsets, unchanged since `weight` joined them (see the storage words).
    assert!(std::mem::offset_of!(keylock_acquisition, mode) == 8);
    assert!(std::mem::offset_of!(keylock_acquisition, owner_died) == 12);
    assert!(std::mem::offset_of!(keylock_acquisition, weight) == 16);
    assert!(std::mem::offset_of!(keylock_acquisition, _private_storage) == 40);
};

/// Values of `_private_state`. Arbitrary 64-bit patterns, so that stray bytes are unlikely to
/// pass for a held record; 0 is empty, so a zeroed struct is a valid empty one.
pub(crate) mod state {
    pub(crate) const EMPTY: u64 = 0;
    /// An `Acquisition` (made through the trait).
    pub(crate) const KEYED: u64 = 0x6b6c_6163_7100_4b59;
    /// A `PoolHold`.
    pub(crate) const POOL: u64 = 0x6b6c_6163_7100_504c;
    /// A `StripeHold`.
    pub(crate) const STRIPE: u64 = 0x6b6c_6163_7100_5354;
    /// Every state a keyed record can hold.
    pub(crate) const KEYED_ANY: [u64; 3] = [KEYED, POOL, STRIPE];
    pub(crate) const READ: u64 = 0x6b6c_6163_7100_5244;
    pub(crate) const WRITE: u64 = 0x6b6c_6163_7100_5752;
    pub(crate) const RELEASED: u64 = 0x6b6c_6163_7100_5253;
}

/// A fresh id for a new lock object (never 0, never reused in the process).
pub(crate) fn next_lock_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl keylock_acquisition {
    /// An empty record (`KEYLOCK_ACQUISITION_INIT`).
    pub(crate) const EMPTY: Self = Self {
        fence: 0,
        mode: KEYLOCK_EXCLUSIVE,
        owner_died: false,
        weight: 0,
        _private_state: state::EMPTY,
        _private_lock: 0,
        _private_storage: [0; STORAGE_WORDS],
    };

    /// The storage as a pointer to `T` (which fits and is aligned, by the assertions above).
    #[inline]
    fn storage<T>(&mut self) -> *mut T {
        self._private_storage.as_mut_ptr().cast()
    }

    /// Fills the record with a keyed acquisition of lock object `lock`, made through the trait.
    #[inline(always)]
    pub(crate) fn fill_keyed(&mut self, lock: u64, acq: Acquisition) {
        self.fence = acq.fence();
        self.mode = mode_code(acq.mode());
        self.owner_died = acq.owner_died();
        self.weight = acq.weight();
        self._private_state = state::KEYED;
        self._private_lock = lock;
        // SAFETY: the storage fits and aligns an Acquisition (checked at compile time); what
        // it held before is plain data or forgotten by the caller (documented).
        unsafe { self.storage::<Acquisition>().write(acq) };
    }

    /// Fills the record with the guard of an in-process pool's hold.
    #[inline(always)]
    pub(crate) fn fill_pool(&mut self, lock: u64, guard: PoolHold) {
        self.fence = guard.fence();
        self.mode = mode_code(guard.mode());
        self.owner_died = false;
        self.weight = 1;
        self._private_state = state::POOL;
        self._private_lock = lock;
        // SAFETY: as in fill_keyed; the guard is moved in, and taken out (or borrowed) only
        // while the state says POOL, which `take_keyed` changes before it reads it out.
        unsafe { self.storage::<PoolHold>().write(guard) };
    }

    /// Fills the record with the guard of an in-process striped lock's hold.
    #[inline(always)]
    pub(crate) fn fill_stripe(&mut self, lock: u64, guard: StripeHold) {
        self.fence = guard.fence();
        self.mode = mode_code(guard.mode());
        self.owner_died = false;
        self.weight = 1;
        self._private_state = state::STRIPE;
        self._private_lock = lock;
        // SAFETY: as in fill_pool.
        unsafe { self.storage::<StripeHold>().write(guard) };
    }

    /// Fills the record with an RwLock read hold.
    pub(crate) fn fill_read(&mut self, lock: u64, guard: ReadGuard<Arc<RwLock>>) {
        self.fence = 0;
        self.mode = KEYLOCK_SHARED;
        self.owner_died = false;
        self.weight = 1;
        self._private_state = state::READ;
        self._private_lock = lock;
        // SAFETY: as in fill_keyed; the guard is moved in and taken out exactly once, by
        // `release_rw`, which marks the record released.
        unsafe { self.storage::<ReadGuard<Arc<RwLock>>>().write(guard) };
    }

    /// Fills the record with the RwLock write hold.
    pub(crate) fn fill_write(&mut self, lock: u64, guard: WriteGuard<Arc<RwLock>>) {
        self.fence = guard.fence();
        self.mode = KEYLOCK_EXCLUSIVE;
        self.owner_died = false;
        self.weight = 1;
        self._private_state = state::WRITE;
        self._private_lock = lock;
        // SAFETY: as in fill_read.
        unsafe { self.storage::<WriteGuard<Arc<RwLock>>>().write(guard) };
    }

    /// Why the record cannot be used as a hold of lock object `lock` in state `want`, if it
    /// cannot: empty (`NOT_LOCKED`), released (`NOT_OWNER`), another object's or another
    /// primitive's (`INVALID_ARGUMENT`), or not a record at all (`INVALID_ARGUMENT`).
    #[inline]
    fn check(&self, lock: u64, want: &[u64]) -> Outcome {
        let s = self._private_state;
        if want.contains(&s) {
            return if self._private_lock == lock {
                Ok(())
            } else {
                Err(Fail(KEYLOCK_INVALID_ARGUMENT))
            };
        }
        Err(Fail(match s {
            state::EMPTY => KEYLOCK_NOT_LOCKED,
            state::RELEASED => KEYLOCK_NOT_OWNER,
            _ => KEYLOCK_INVALID_ARGUMENT,
        }))
    }

    /// What this keyed record holds for lock object `lock`, in place.
    #[inline(always)]
    pub(crate) fn keyed(&self, lock: u64) -> Result<HeldRef<'_>, Fail> {
        self.check(lock, &state::KEYED_ANY)?;
        let at = self._private_storage.as_ptr();
        // SAFETY: the state says which record fill_keyed / fill_pool / fill_stripe wrote there,
        // not taken out since.
        Ok(unsafe {
            match self._private_state {
                state::POOL => HeldRef::Pool(&*at.cast::<PoolHold>()),
                state::STRIPE => HeldRef::Stripe(&*at.cast::<StripeHold>()),
                _ => HeldRef::Acq(&*at.cast::<Acquisition>()),
            }
        })
    }

    /// What this keyed record holds, to change.
    #[inline(always)]
    pub(crate) fn keyed_mut(&mut self, lock: u64) -> Result<HeldMut<'_>, Fail> {
        self.check(lock, &state::KEYED_ANY)?;
        let state = self._private_state;
        let at = self._private_storage.as_mut_ptr();
        // SAFETY: as in `keyed`; `&mut self` makes the reference unique.
        Ok(unsafe {
            match state {
                state::POOL => HeldMut::Pool(&mut *at.cast::<PoolHold>()),
                state::STRIPE => HeldMut::Stripe(&mut *at.cast::<StripeHold>()),
                _ => HeldMut::Acq(&mut *at.cast::<Acquisition>()),
            }
        })
    }

    /// Takes what this keyed record holds out, marking the record released.
    #[inline(always)]
    pub(crate) fn take_keyed(&mut self, lock: u64) -> Result<Held, Fail> {
        self.check(lock, &state::KEYED_ANY)?;
        let state = std::mem::replace(&mut self._private_state, state::RELEASED);
        let at = self._private_storage.as_ptr();
        // SAFETY: as in `keyed`; the state now says released, so it is read out only once.
        Ok(unsafe {
            match state {
                state::POOL => Held::Pool(at.cast::<PoolHold>().read()),
                state::STRIPE => Held::Stripe(at.cast::<StripeHold>().read()),
                _ => Held::Acq(at.cast::<Acquisition>().read()),
            }
        })
    }

    /// Releases the `Acquisition` of a record that `fill_keyed` filled for lock object `lock`
    /// through `release` (the core's one compare-and-swap), marking the record released. `false`
    /// when the record is not such a record or `release` hands the acquisition back: the record
    /// is untouched, for the full release (`take_keyed`), which also says what is wrong.
    #[inline(always)]
    pub(crate) fn release_keyed_fast(
        &mut self,
        lock: u64,
        release: impl FnOnce(Acquisition) -> Result<(), Acquisition>,
    ) -> bool {
        self.release_keyed_cas(lock, |acq| {
            // SAFETY: a copy of plain data (no drop glue, asserted above): if `release` hands it
            // back, nothing was released and it is simply dropped, the record still holding it;
            // if not, the record is marked released and never read again.
            release(unsafe { std::ptr::read(acq) }).is_ok()
        })
    }

    /// Like [`Self::release_keyed_fast`] with a release that reads the acquisition in place and
    /// says whether it released (the core's `try_release_cas`).
    #[inline(always)]
    pub(crate) fn release_keyed_cas(
        &mut self,
        lock: u64,
        release: impl FnOnce(&Acquisition) -> bool,
    ) -> bool {
        if self._private_state != state::KEYED || self._private_lock != lock {
            return false;
        }
        // SAFETY: the state says KEYED: fill_keyed wrote an Acquisition there, not taken out
        // since; it is only read.
        if !release(unsafe { &*self.storage::<Acquisition>() }) {
            return false;
        }
        self._private_state = state::RELEASED;
        true
    }

    /// Takes the RwLock hold out and drops it (releasing it), marking the record released.
    pub(crate) fn release_rw(&mut self, lock: u64) -> Outcome {
        self.check(lock, &[state::READ, state::WRITE])?;
        let s = std::mem::replace(&mut self._private_state, state::RELEASED);
        // SAFETY: the state said which guard fill_read / fill_write wrote, not taken since; the
        // state now says released, so it is read out (and dropped) only once.
        unsafe {
            if s == state::READ {
                drop(self.storage::<ReadGuard<Arc<RwLock>>>().read());
            } else {
                drop(self.storage::<WriteGuard<Arc<RwLock>>>().read());
            }
        }
        Ok(())
    }

    /// Whether the record holds an acquisition not released through it yet.
    fn is_held(&self) -> bool {
        matches!(
            self._private_state,
            state::KEYED | state::POOL | state::STRIPE | state::READ | state::WRITE
        )
    }

    /// The lease left on a held record; `None` for no lease (the record's own figure).
    fn lease_left(&self) -> Result<Option<Duration>, Fail> {
        match self._private_state {
            state::READ | state::WRITE => return Ok(None),
            state::EMPTY => return Err(Fail(KEYLOCK_NOT_LOCKED)),
            state::RELEASED => return Err(Fail(KEYLOCK_NOT_OWNER)),
            _ => {}
        }
        Ok(match self.keyed(self._private_lock)? {
            HeldRef::Acq(a) => a
                .lease_deadline()
                .map(|t| t.saturating_duration_since(Instant::now())),
            HeldRef::Pool(g) => g.lease_remaining(),
            HeldRef::Stripe(g) => g.lease_remaining(),
        })
    }
}

/// Runs an acquire whose record goes to `out`: `out` is checked first (NULL is
/// `KEYLOCK_NULL_ARGUMENT`), and is left empty when `body` fails.
///
/// # Safety
/// `out` is NULL or points to a writable `keylock_acquisition` that nothing else uses during
/// the call.
#[inline(always)]
pub(crate) unsafe fn acquire_into(
    out: *mut keylock_acquisition,
    body: impl FnOnce(&mut keylock_acquisition) -> Outcome,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let out = unsafe { out.as_mut() }.ok_or(Fail(KEYLOCK_NULL_ARGUMENT))?;
        let result = body(out);
        if result.is_err() {
            *out = keylock_acquisition::EMPTY;
        }
        result
    })
}

/// Whether `acquisition` holds an acquisition that has not been released through it: true
/// from a successful acquire until its release call (even if the lock was force-unlocked or
/// its lease ran out meanwhile: ask `_is_current` for that). False for NULL, an empty record
/// and a released one.
///
/// # Safety
/// `acquisition` is NULL or points to a readable `keylock_acquisition`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_acquisition_is_held(
    acquisition: *const keylock_acquisition,
) -> bool {
    // SAFETY: the caller's contract above.
    unsafe { acquisition.as_ref() }.is_some_and(keylock_acquisition::is_held)
}

/// Stores in `*out_ns` the nanoseconds left on the lease of `acquisition` (0 once it has run
/// out), or `KEYLOCK_NO_LEASE` for an acquisition without a lease. The record's own figure
/// (as last set by the acquire or `_extend`); whether the acquisition is still current is
/// `_is_current`'s question.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out_ns` is set.
/// - `KEYLOCK_NOT_LOCKED`: the record is empty (never filled, or a failed acquire's).
/// - `KEYLOCK_NOT_OWNER`: the record was released.
/// - `KEYLOCK_NULL_ARGUMENT`: `acquisition` or `out_ns` is NULL.
/// - `KEYLOCK_INVALID_ARGUMENT`: the struct is not an acquisition record.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `acquisition` is NULL or points to a readable `keylock_acquisition`; `out_ns` is NULL or
/// points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_acquisition_lease_remaining(
    acquisition: *const keylock_acquisition,
    out_ns: *mut u64,
) -> keylock_result {
    ffi_boundary(|| {
        // SAFETY: the caller's contract above.
        let acquisition = unsafe { handle(acquisition)? };
        let out_ns = out(out_ns)?;
        let ns = acquisition.lease_left()?.map_or(KEYLOCK_NO_LEASE, nanos);
        // SAFETY: out_ns is non-NULL and writable (caller).
        unsafe { out_ns.write(ns) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_refuse_what_they_cannot_do() {
        let mut a = keylock_acquisition::EMPTY;
        assert_eq!(a.take_keyed(1).err(), Some(Fail(KEYLOCK_NOT_LOCKED)));
        a._private_state = state::RELEASED;
        assert_eq!(a.take_keyed(1).err(), Some(Fail(KEYLOCK_NOT_OWNER)));
        a._private_state = 12345;
        assert_eq!(a.take_keyed(1).err(), Some(Fail(KEYLOCK_INVALID_ARGUMENT)));
        a._private_state = state::READ;
        a._private_lock = 1;
        assert_eq!(a.take_keyed(1).err(), Some(Fail(KEYLOCK_INVALID_ARGUMENT)));
    }

    #[test]
    fn a_keyed_record_is_taken_once_and_only_by_its_lock() {
        let pool = keylock_core::KeyPool::<Vec<u8>>::new();
        let mut a = keylock_acquisition::EMPTY;
        a.fill_keyed(7, pool.lock(b"k".as_slice()).into_acquisition());
        // SAFETY: `a` is a live record.
        assert!(unsafe { keylock_acquisition_is_held(&a) });
        assert_eq!(a.take_keyed(8).err(), Some(Fail(KEYLOCK_INVALID_ARGUMENT)));
        let Ok(Held::Acq(acq)) = a.take_keyed(7) else {
            panic!("a trait acquisition comes back as one");
        };
        assert_eq!(acq.fence(), a.fence);
        assert_eq!(a.take_keyed(7).err(), Some(Fail(KEYLOCK_NOT_OWNER)));
        // SAFETY: as above.
        assert!(!unsafe { keylock_acquisition_is_held(&a) });
        pool.release(acq).unwrap();
    }
}

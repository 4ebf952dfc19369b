//! One entry's lock word: the fast paths (one compare-and-swap each way), and the helpers
//! the slow path uses under the table mutex to change the word and the holder's state beside
//! it. The word's bits are described in [`word`](super::layout::word).

use std::sync::atomic::Ordering;

use super::layout::*;
use super::sys::now_ns;

/// Takes entry `e` exclusively for process slot `proc` if its word is `w` and plain-free.
/// Returns the fence.
#[inline]
pub(crate) fn fast_acquire(e: &Entry, w: u64, proc: u32) -> Option<u64> {
    if w & (word::XPROC | word::SLOW) != 0 || word::lo(w) >= word::LO_MAX {
        return None;
    }
    let new = word::make(word::lo(w) + 1, false, proc + 1);
    e.word
        .compare_exchange(w, new, Ordering::Acquire, Ordering::Relaxed)
        .ok()?;
    Some(word::fence(new, e.fence_hi.load(Ordering::Relaxed)))
}

/// Releases a plain exclusive hold of slot `proc` with `fence`, if nothing needs the slow path.
#[inline]
pub(crate) fn fast_release(e: &Entry, fence: u64, proc: u32) -> bool {
    let lo = fence & word::LO_MAX;
    let held = word::make(lo, false, proc + 1);
    e.word
        .compare_exchange(
            held,
            word::make(lo, false, 0),
            Ordering::Release,
            Ordering::Relaxed,
        )
        .is_ok()
}

// Under the table mutex.

/// Changes the word by `f` (None: leave it), with a compare-and-swap loop against the fast
/// paths. Returns the old and new words.
pub(crate) fn update(e: &Entry, mut f: impl FnMut(u64) -> Option<u64>) -> Option<(u64, u64)> {
    let mut w = e.word.load(Ordering::Acquire);
    loop {
        let new = f(w)?;
        match e
            .word
            .compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Some((w, new)),
            Err(now) => w = now,
        }
    }
}

/// The word with its fence advanced by one (the high bits carried under the mutex).
pub(crate) fn advanced(e: &Entry, w: u64) -> u64 {
    let lo = word::lo(w);
    if lo >= word::LO_MAX {
        e.fence_hi.store(
            e.fence_hi.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        return word::make(0, w & word::SLOW != 0, word::xproc(w));
    }
    (w & !(word::LO_MAX << word::LO_SHIFT)) | ((lo + 1) << word::LO_SHIFT)
}

pub(crate) fn fence_of(e: &Entry) -> u64 {
    word::fence(
        e.word.load(Ordering::Acquire),
        e.fence_hi.load(Ordering::Relaxed),
    )
}

/// Whether the entry needs the slow path (see [`word`]).
pub(crate) fn needs_slow(e: &Entry) -> bool {
    e.head.load(Ordering::Relaxed) != 0
        || e.shared.load(Ordering::Relaxed) != 0
        || e.lease.load(Ordering::Relaxed) != 0
        || e.owner.load(Ordering::Relaxed) != 0
        || e.holds.load(Ordering::Relaxed) > 1
        || e.died.load(Ordering::Relaxed) != 0
        || e.bind.load(Ordering::Relaxed) & 3 != BIND_BOUND
}

/// Sets or clears `SLOW` to match the entry's state.
pub(crate) fn fix_slow(e: &Entry) {
    let slow = needs_slow(e);
    let _ = update(e, |w| {
        let want = if slow {
            w | word::SLOW
        } else {
            w & !word::SLOW
        };
        (want != w).then_some(want)
    });
}

pub(crate) fn clear_exclusive(e: &Entry) {
    e.owner.store(0, Ordering::Relaxed);
    e.lease.store(0, Ordering::Relaxed);
    e.holds.store(0, Ordering::Relaxed);
}

pub(crate) fn lease_end(lease: u64) -> u64 {
    if lease == 0 {
        0
    } else {
        now_ns().saturating_add(lease).max(1)
    }
}

/// Takes the died flag for a new acquisition.
pub(crate) fn take_died(e: &Entry) -> bool {
    e.died.swap(0, Ordering::Relaxed) != 0
}

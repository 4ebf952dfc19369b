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

pub(crate) fn lease_end_ns(lease: u64) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::region::scratch;

    fn stripe() -> crate::shm::region::Region {
        scratch::region(KIND_STRIPED, 1, 0)
    }

    #[test]
    fn the_fast_paths_take_and_give_back_exactly_one_word() {
        let r = stripe();
        let e = r.entry(0).unwrap();
        let free = e.word.load(Ordering::Relaxed);
        let fence = fast_acquire(e, free, 4).expect("free");
        assert_eq!(fence, fence_of(e));
        assert_eq!(word::lo(e.word.load(Ordering::Relaxed)), word::lo(free) + 1);
        assert_eq!(word::xproc(e.word.load(Ordering::Relaxed)), 5);
        assert_eq!(
            fast_acquire(e, e.word.load(Ordering::Relaxed), 6),
            None,
            "taken twice"
        );
        assert_eq!(fast_acquire(e, free, 6), None, "a stale word was accepted");
        let held = e.word.load(Ordering::Relaxed);
        assert!(!fast_release(e, fence, 5), "released by another slot");
        assert!(
            !fast_release(e, fence - 1, 4),
            "released with a stale fence"
        );
        assert_eq!(e.word.load(Ordering::Relaxed), held);
        assert!(fast_release(e, fence, 4));
        assert!(!fast_release(e, fence, 4), "released twice");
        assert_eq!(fence_of(e), fence, "a release keeps the fence");
    }

    #[test]
    fn the_fast_path_leaves_slow_words_and_the_fence_carry_to_the_mutex() {
        let r = stripe();
        let e = r.entry(0).unwrap();
        let slow = word::make(3, true, 0);
        e.word.store(slow, Ordering::Relaxed);
        assert_eq!(fast_acquire(e, slow, 0), None);
        let full = word::make(word::LO_MAX, false, 0);
        e.word.store(full, Ordering::Relaxed);
        assert_eq!(
            fast_acquire(e, full, 0),
            None,
            "the low bits would overflow"
        );
        assert_eq!(e.word.load(Ordering::Relaxed), full);
    }

    #[test]
    fn advancing_past_the_low_bits_carries_into_the_high_ones() {
        let r = stripe();
        let e = r.entry(0).unwrap();
        e.fence_hi.store(2, Ordering::Relaxed);
        let w = word::make(word::LO_MAX, true, 9);
        e.word.store(w, Ordering::Relaxed);
        let before = fence_of(e);
        let a = advanced(e, w);
        e.word.store(a, Ordering::Relaxed);
        assert_eq!(fence_of(e), before + 1);
        assert_eq!(e.fence_hi.load(Ordering::Relaxed), 3);
        assert_eq!((word::xproc(a), a & word::SLOW != 0), (9, true));
        let b = advanced(e, a);
        assert_eq!(word::fence(b, 3), before + 2);
        assert_eq!((word::xproc(b), b & word::SLOW != 0), (9, true));
    }

    #[test]
    fn slow_is_set_exactly_while_the_entry_has_state_beside_the_word() {
        let r = stripe();
        let e = r.entry(0).unwrap();
        let slow = |e: &Entry| e.word.load(Ordering::Relaxed) & word::SLOW != 0;
        fix_slow(e);
        assert!(!slow(e), "a plain free stripe needs no mutex");
        let fields: [(&std::sync::atomic::AtomicU32, u32); 4] =
            [(&e.head, 1), (&e.shared, 1), (&e.holds, 2), (&e.died, 1)];
        for (field, value) in fields {
            field.store(value, Ordering::Relaxed);
            fix_slow(e);
            assert!(slow(e));
            field.store(0, Ordering::Relaxed);
            fix_slow(e);
            assert!(!slow(e));
        }
        for field in [&e.lease, &e.owner] {
            field.store(1, Ordering::Relaxed);
            fix_slow(e);
            assert!(slow(e));
            field.store(0, Ordering::Relaxed);
            fix_slow(e);
            assert!(!slow(e));
        }
        e.bind.store(BIND_BUSY, Ordering::Relaxed);
        fix_slow(e);
        assert!(
            slow(e),
            "an entry being rebound must be shut to the fast path"
        );
    }
}

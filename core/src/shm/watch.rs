//! Watching a holder: the word a waiter sleeps on to learn, from the kernel, that the process
//! holding its key died (see the module docs, "Death and recovery").

use std::sync::atomic::Ordering;

use super::region::Region;
use super::sys;

/// What a waiter sleeps on besides its own grant.
pub(crate) enum Watch<'r> {
    /// The exclusive holder's liveness mutex word, with the value to sleep on (the kernel
    /// changes it and wakes a sleeper when the holder's process dies), and the holder's slot.
    Holder(&'r std::sync::atomic::AtomicU32, u32, u32),
    /// The holder's process is gone already: look again now.
    Gone,
    /// Nothing to watch (no exclusive holder in another process, or a C library whose
    /// mutex layout is not the checked one): the timed re-check covers it.
    Nothing,
}

/// The exclusive holder of `entry` to watch, read without the table mutex (a stale answer
/// only means a wake-up that finds nothing, or a timed re-check that does).
pub(crate) fn watch(region: &Region, entry: u32, me: u32) -> Watch<'_> {
    let Ok(e) = region.entry(entry) else {
        return Watch::Nothing;
    };
    let w = e.word.load(Ordering::Acquire);
    let Some(holder) = super::layout::word::xproc(w).checked_sub(1) else {
        return Watch::Nothing;
    };
    if holder == me {
        return Watch::Nothing;
    }
    let Some(word) = region.proc(holder).ok().and_then(|p| p.alive.lock_word()) else {
        return Watch::Nothing;
    };
    let mut v = word.load(Ordering::Acquire);
    loop {
        if v & sys::FUTEX_TID_MASK == 0 || v & sys::FUTEX_OWNER_DIED != 0 {
            return Watch::Gone;
        }
        if v & sys::FUTEX_WAITERS != 0 {
            return Watch::Holder(word, v, holder);
        }
        // Announce a sleeper, as a pthread waiter would, so that the kernel wakes one when
        // the holder dies (and the holder's own unlock at close wakes one, harmlessly).
        match word.compare_exchange(
            v,
            v | sys::FUTEX_WAITERS,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Watch::Holder(word, v | sys::FUTEX_WAITERS, holder),
            Err(now) => v = now,
        }
    }
}

//! The multi-key rules, written once for every scope. Acquiring several keys at once:
//!
//! - **canonical order**: the locks are taken in one total order, so two multi-key acquires
//!   never wait on each other in a cycle. Each scope says where a lock sits in that order (a
//!   pool's slot, a stripe's number, a key's space and bytes).
//! - **the strongest mode per lock**: keys that name one lock (a key given twice, two keys on
//!   one stripe) take it once, exclusively if any of them asked for that.
//! - **one deadline**: a timeout is for the whole set, not for each key.
//! - **all or nothing**: a key that cannot be taken gives back, newest first, every key taken
//!   before it.
//! - **results in key order**: one acquisition per distinct lock, in the order of that lock's
//!   first occurrence among the caller's keys.
//!
//! A scope supplies "take this one lock" and "give this one back"; [`plan`] and [`take_all`]
//! (or [`Taking`], for an acquire that awaits) do the rest. A scope that sends the whole set in
//! one request (Redis) uses [`plan`] for the order and the duplicates, and [`in_key_order`] for
//! the answer.

use std::time::Instant;

use crate::acquisition::{Acquisition, Mode, Wait};
use crate::error::{Error, Result};

/// One lock of a multi-key acquire, in the canonical order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step<L, T> {
    /// Where the lock sits in the canonical order (also what makes two keys one lock).
    pub(crate) lock: L,
    /// What the scope needs to take it: from the first of the caller's keys that named it.
    pub(crate) what: T,
    /// The strongest mode any of the caller's keys asked of this lock.
    pub(crate) mode: Mode,
    /// The position among the caller's keys of the first key that named this lock.
    pub(crate) first: usize,
}

/// The canonical plan for the caller's `(lock, what, mode)` list: sorted by `lock`, each lock
/// once with the strongest mode asked of it.
pub(crate) fn plan<L: Ord, T>(keys: impl IntoIterator<Item = (L, T, Mode)>) -> Vec<Step<L, T>> {
    plan_with(keys, |_| {})
}

/// [`plan`], calling `collapsed` with each step dropped as a duplicate of an earlier one (a
/// scope that reserved something per key gives the extra reservations back there).
pub(crate) fn plan_with<L: Ord, T>(
    keys: impl IntoIterator<Item = (L, T, Mode)>,
    mut collapsed: impl FnMut(&Step<L, T>),
) -> Vec<Step<L, T>> {
    let mut steps: Vec<Step<L, T>> = keys
        .into_iter()
        .enumerate()
        .map(|(first, (lock, what, mode))| Step {
            lock,
            what,
            mode,
            first,
        })
        .collect();
    // Within one lock, the caller's order: the step kept is the lock's first occurrence.
    steps.sort_unstable_by(|a, b| a.lock.cmp(&b.lock).then(a.first.cmp(&b.first)));
    steps.dedup_by(|later, kept| {
        if later.lock != kept.lock {
            return false;
        }
        kept.mode = kept.mode.min(later.mode); // Exclusive orders before Shared.
        collapsed(later);
        true
    });
    steps
}

/// [`plan`] in place and without allocating, for a scope that needs no positions (its answer
/// is its guard, in canonical order): sorted by lock, each lock once in its strongest mode.
pub(crate) fn plan_in_place<L: Ord + Copy>(locks: &mut Vec<(L, Mode)>) {
    // Exclusive orders before Shared, so the first of each lock carries its strongest mode.
    locks.sort_unstable();
    locks.dedup_by_key(|&mut (lock, _)| lock);
}

/// The wait of a multi-key acquire as one deadline for all its keys.
pub(crate) fn one_deadline(wait: Wait) -> Wait {
    match wait {
        Wait::For(d) => match Instant::now().checked_add(d) {
            Some(t) => Wait::Until(t),
            None => Wait::Forever,
        },
        w => w,
    }
}

/// A multi-key acquire's failure: which step failed, and why.
#[derive(Debug)]
pub(crate) struct Failed {
    /// The index of the step that could not be taken; every step after it was not tried.
    pub(crate) at: usize,
    /// Why.
    pub(crate) error: Error,
}

/// Takes `steps` in order with `take`: all, or none (on a failure every lock already taken is
/// given back with `give_back`, newest first, and the failed step's index is returned).
pub(crate) fn take_all<S, A>(
    steps: &[S],
    mut take: impl FnMut(&S) -> Result<A>,
    give_back: impl FnMut(A),
) -> std::result::Result<Vec<A>, Failed> {
    let mut held = Taking::new(steps.len(), give_back);
    for (at, step) in steps.iter().enumerate() {
        match take(step) {
            Ok(a) => held.push(a),
            Err(error) => return Err(Failed { at, error }),
        }
    }
    Ok(held.finish())
}

/// The locks a multi-key acquire has taken so far. Dropped before [`finish`](Self::finish)
/// (a failure, a panic, a future dropped mid-acquire), it gives every one back, newest first.
pub(crate) struct Taking<A, F: FnMut(A)> {
    held: Vec<A>,
    give_back: F,
}

impl<A, F: FnMut(A)> Taking<A, F> {
    /// Room for `n` locks, each given back with `give_back` unless the acquire finishes.
    pub(crate) fn new(n: usize, give_back: F) -> Self {
        Self {
            held: Vec::with_capacity(n),
            give_back,
        }
    }

    /// One more lock taken.
    pub(crate) fn push(&mut self, a: A) {
        self.held.push(a);
    }

    /// Every lock is taken: they are the caller's now.
    pub(crate) fn finish(mut self) -> Vec<A> {
        std::mem::take(&mut self.held)
    }
}

impl<A, F: FnMut(A)> Drop for Taking<A, F> {
    fn drop(&mut self) {
        while let Some(a) = self.held.pop() {
            (self.give_back)(a);
        }
    }
}

impl<A, F: FnMut(A)> std::fmt::Debug for Taking<A, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taking")
            .field("held", &self.held.len())
            .finish()
    }
}

/// The results of a plan's steps (taken in canonical order, each with its step's `first`) in
/// the order of the caller's keys.
pub(crate) fn in_key_order<A>(mut got: Vec<(usize, A)>) -> Vec<A> {
    got.sort_unstable_by_key(|&(first, _)| first);
    got.into_iter().map(|(_, a)| a).collect()
}

/// Puts `acqs` (one per distinct lock, any order) in the order of the keys' first
/// occurrence, for a scope whose guards hand back acquisitions without the plan's positions:
/// `places` says where each key's lock is (the `at` of its acquisition), in key order.
pub(crate) fn in_key_order_of_places(
    places: &[Option<u64>],
    acqs: Vec<Acquisition>,
) -> Vec<Acquisition> {
    let mut rest: Vec<Option<Acquisition>> = acqs.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(rest.len());
    for &at in places {
        let Some(at) = at else { continue };
        if let Some(slot) = rest
            .iter_mut()
            .find(|a| a.as_ref().is_some_and(|a| a.at == at))
        {
            out.extend(slot.take());
        }
    }
    // Anything not matched (it cannot happen: every key has a held lock) keeps its place.
    out.extend(rest.into_iter().flatten());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn plan_sorts_collapses_to_the_strongest_mode_and_keeps_the_first_position() {
        let steps = plan([
            (3, 'a', Mode::Shared),
            (1, 'b', Mode::Shared),
            (3, 'c', Mode::Exclusive),
            (1, 'd', Mode::Shared),
            (2, 'e', Mode::Exclusive),
        ]);
        let got: Vec<(i32, char, Mode, usize)> = steps
            .iter()
            .map(|s| (s.lock, s.what, s.mode, s.first))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, 'b', Mode::Shared, 1),
                (2, 'e', Mode::Exclusive, 4),
                (3, 'a', Mode::Exclusive, 0),
            ]
        );
    }

    #[test]
    fn plan_in_place_agrees_with_plan() {
        let keys = [
            (3, Mode::Shared),
            (1, Mode::Shared),
            (3, Mode::Exclusive),
            (1, Mode::Shared),
        ];
        let mut in_place = keys.to_vec();
        plan_in_place(&mut in_place);
        let planned: Vec<(i32, Mode)> = plan(keys.iter().map(|&(l, m)| (l, (), m)))
            .iter()
            .map(|s| (s.lock, s.mode))
            .collect();
        assert_eq!(in_place, planned);
        assert_eq!(in_place, vec![(1, Mode::Shared), (3, Mode::Exclusive)]);
    }

    #[test]
    fn plan_with_reports_each_collapsed_duplicate() {
        let mut dropped = Vec::new();
        let steps = plan_with(
            [
                (5, (), Mode::Shared),
                (5, (), Mode::Shared),
                (5, (), Mode::Shared),
            ],
            |s| dropped.push(s.first),
        );
        assert_eq!(steps.len(), 1);
        assert_eq!(dropped, vec![1, 2]);
    }

    #[test]
    fn take_all_gives_back_newest_first_and_says_which_step_failed() {
        let given_back = RefCell::new(Vec::new());
        let out = take_all(
            &[10, 20, 30, 40],
            |&s| {
                if s == 30 {
                    Err(Error::WouldBlock)
                } else {
                    Ok(s)
                }
            },
            |a| given_back.borrow_mut().push(a),
        );
        let failed = out.unwrap_err();
        assert_eq!(failed.at, 2);
        assert!(matches!(failed.error, Error::WouldBlock));
        assert_eq!(*given_back.borrow(), vec![20, 10]);
    }

    #[test]
    fn take_all_keeps_everything_on_success() {
        let given_back = RefCell::new(Vec::new());
        let out = take_all(&[1, 2], |&s| Ok(s), |a| given_back.borrow_mut().push(a));
        assert_eq!(out.unwrap(), vec![1, 2]);
        assert!(given_back.borrow().is_empty());
    }

    #[test]
    fn results_come_back_in_key_order() {
        let steps = plan([
            ("b", 0, Mode::Shared),
            ("a", 1, Mode::Shared),
            ("b", 2, Mode::Shared),
        ]);
        let got: Vec<(usize, &str)> = steps.iter().map(|s| (s.first, s.lock)).collect();
        assert_eq!(in_key_order(got), vec!["b", "a"]);
    }

    #[test]
    fn one_deadline_turns_a_timeout_into_an_instant_once() {
        let w = one_deadline(Wait::For(std::time::Duration::from_secs(5)));
        assert!(matches!(w, Wait::Until(_)));
        assert_eq!(
            one_deadline(Wait::For(std::time::Duration::MAX)),
            Wait::Forever
        );
        assert_eq!(one_deadline(Wait::No), Wait::No);
    }
}

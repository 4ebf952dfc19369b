//! The grant policy written down once, as data: who holds a key, who waits in which mode and
//! in which order, what happens next, and who holds the key afterwards. Every scope runs every
//! scenario (`tests/grant_policy.rs` in one process and in shared memory,
//! `tests/redis/grant_policy.rs` on Redis), so a scope whose policy drifts fails.
//!
//! The policy: a released key goes to the head of its queue (FIFO hand-off); a shared head is
//! granted together with every shared waiter right behind it, up to the next exclusive one (a
//! shared batch); a newcomer never passes a queued waiter it conflicts with, so a shared
//! arrival waits behind a queued exclusive waiter and a try-acquire is refused while waiters
//! queue. Waiters here are async tasks (or, on Redis, other processes), which every scope
//! hands the key to, so strict FIFO and eventual fairness agree on every scenario. The two
//! differ only for a blocked thread woken to compete under eventual fairness (a running
//! newcomer may take the key first), which depends on timing and is tested with threads
//! elsewhere; a scenario whose answers differ lists both.
// Each runner uses what its scopes need.
#![allow(dead_code)]

use keylock_core::Mode;
use keylock_core::Mode::{Exclusive as X, Shared as S};

/// What happens once the holders hold and the waiters are queued.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// The first `n` holders release, oldest first.
    Release(usize),
    /// A newcomer asks in this mode and waits (it is the waiter after the last queued one).
    Arrive(Mode),
    /// A newcomer tries this mode without waiting.
    Try(Mode),
    /// Every holder releases, then a newcomer tries this mode before any waiter runs.
    ReleaseThenTry(Mode),
}

/// One scenario of the grant policy.
#[derive(Debug)]
pub(crate) struct Scenario {
    pub(crate) name: &'static str,
    /// Who holds the key at the start.
    pub(crate) holders: &'static [Mode],
    /// Who waits, in queue order.
    pub(crate) waiters: &'static [Mode],
    pub(crate) event: Event,
    /// The waiters holding the key after the event (indexes into `waiters`; a newcomer is
    /// `waiters.len()`), under strict FIFO.
    pub(crate) strict: &'static [usize],
    /// The same under eventual fairness.
    pub(crate) eventual: &'static [usize],
}

pub(crate) const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "a release hands the key to the head of the queue, and only to it",
        holders: &[X],
        waiters: &[X, X],
        event: Event::Release(1),
        strict: &[0],
        eventual: &[0],
    },
    Scenario {
        name: "consecutive shared waiters are granted together, up to the next exclusive",
        holders: &[X],
        waiters: &[S, S, X, S],
        event: Event::Release(1),
        strict: &[0, 1],
        eventual: &[0, 1],
    },
    Scenario {
        name: "an exclusive head is granted alone even with shared waiters behind it",
        holders: &[S],
        waiters: &[X, S, S],
        event: Event::Release(1),
        strict: &[0],
        eventual: &[0],
    },
    Scenario {
        name: "an exclusive waiter waits until the last shared holder leaves",
        holders: &[S, S],
        waiters: &[X],
        event: Event::Release(1),
        strict: &[],
        eventual: &[],
    },
    Scenario {
        name: "a shared arrival waits behind a queued exclusive waiter",
        holders: &[S],
        waiters: &[X],
        event: Event::Arrive(S),
        strict: &[],
        eventual: &[],
    },
    Scenario {
        name: "a shared arrival joins shared holders when nobody queues",
        holders: &[S],
        waiters: &[],
        event: Event::Arrive(S),
        strict: &[0],
        eventual: &[0],
    },
    Scenario {
        name: "a shared try-acquire is refused while an exclusive waiter queues",
        holders: &[S],
        waiters: &[X],
        event: Event::Try(S),
        strict: &[],
        eventual: &[],
    },
    Scenario {
        name: "a shared try-acquire joins shared holders when nobody queues",
        holders: &[S, S],
        waiters: &[],
        event: Event::Try(S),
        strict: &[0],
        eventual: &[0],
    },
    Scenario {
        name: "a key released to a queued waiter is its: a try-acquire right after is refused",
        holders: &[X],
        waiters: &[X],
        event: Event::ReleaseThenTry(X),
        strict: &[0],
        eventual: &[0],
    },
];

//! The grant policy table (`common/grant_policy.rs`) run against every scope in this process
//! and in shared memory, pools and striped locks, with strict FIFO and eventual fairness.
//!
//! Waiters are futures polled by hand (no threads, no sleeps), so the order of events is
//! exactly the table's.

mod common;
#[path = "common/grant_policy.rs"]
mod table;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use keylock_core::{
    Acquisition, Error, KeyedLock, LockKey, LockOptions, Mode, OpenOptions, Result, Wait, open_with,
};

use table::{Event, SCENARIOS, Scenario};

/// A scope under test and the fairness it was opened with.
struct Scope {
    name: String,
    locks: Arc<dyn KeyedLock>,
    strict: bool,
}

fn scopes() -> Vec<Scope> {
    let mut out = Vec::new();
    for strict in [false, true] {
        for (kind, options) in [
            ("pool", OpenOptions::new()),
            ("striped", OpenOptions::new().stripes(64)),
        ] {
            let options = options.fifo(strict);
            out.push(Scope {
                name: format!("local {kind} strict={strict}"),
                locks: open_with("local:", &options).unwrap(),
                strict,
            });
            #[cfg(all(feature = "shm", target_os = "linux"))]
            {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let region = format!(
                    "grant-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                );
                out.push(Scope {
                    name: format!("shm {kind} strict={strict}"),
                    locks: open_with(&format!("shm:{region}"), &options).unwrap(),
                    strict,
                });
                keylock_core::shm::unlink(&region).unwrap();
            }
        }
    }
    out
}

type Waiting = Pin<Box<dyn Future<Output = Result<Acquisition>> + Send>>;

/// One waiter: still queued, holding, or gone (it held the key and released it).
enum Waiter {
    Queued(Waiting),
    Holding(Acquisition),
    Gone,
}

const KEY: LockKey<'static> = LockKey::new(b"grant-policy");

fn opts(mode: Mode) -> LockOptions {
    LockOptions::new().mode(mode)
}

/// Polls every queued waiter until none changes: what each one holds once all have run.
fn settle(waiters: &mut [Waiter], cx: &mut Context<'_>) {
    loop {
        let mut changed = false;
        for w in waiters.iter_mut() {
            if let Waiter::Queued(fut) = w
                && let Poll::Ready(got) = fut.as_mut().poll(cx)
            {
                *w = Waiter::Holding(got.expect("a waiter with no deadline is granted"));
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

fn holding(waiters: &[Waiter]) -> Vec<usize> {
    (0..waiters.len())
        .filter(|&i| matches!(waiters[i], Waiter::Holding(_)))
        .collect()
}

/// Runs `scenario` on `scope`: the indexes of the waiters (and newcomer) holding afterwards.
fn run(scope: &Scope, scenario: &Scenario) -> Vec<usize> {
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let locks = &scope.locks;
    let try_ = |mode| locks.acquire(KEY, &opts(mode).wait(Wait::No));
    let mut holders: Vec<Acquisition> = scenario
        .holders
        .iter()
        .map(|&m| try_(m).expect("the holders share or are alone"))
        .collect();
    let mut waiters: Vec<Waiter> = Vec::new();
    for &mode in scenario.waiters {
        let mut fut: Waiting = Arc::clone(locks).acquire_async(KEY, &opts(mode));
        assert!(
            fut.as_mut().poll(&mut cx).is_pending(),
            "{}: {}: a waiter queues behind the holders",
            scope.name,
            scenario.name
        );
        waiters.push(Waiter::Queued(fut));
    }
    settle(&mut waiters, &mut cx);
    assert_eq!(
        holding(&waiters),
        Vec::<usize>::new(),
        "{}: {}: nobody is granted before the event",
        scope.name,
        scenario.name
    );
    let newcomer = |got: Result<Acquisition>| match got {
        Ok(acq) => Some(Waiter::Holding(acq)),
        Err(Error::WouldBlock) => None,
        Err(e) => panic!(
            "{}: {}: a try-acquire failed: {e}",
            scope.name, scenario.name
        ),
    };
    match scenario.event {
        Event::Release(n) => {
            for acq in holders.drain(..n) {
                locks.release(acq).unwrap();
            }
        }
        Event::Arrive(mode) => {
            let mut fut: Waiting = Arc::clone(locks).acquire_async(KEY, &opts(mode));
            waiters.push(match fut.as_mut().poll(&mut cx) {
                Poll::Ready(got) => Waiter::Holding(got.unwrap()),
                Poll::Pending => Waiter::Queued(fut),
            });
        }
        Event::Try(mode) => waiters.extend(newcomer(try_(mode))),
        Event::ReleaseThenTry(mode) => {
            for acq in holders.drain(..) {
                locks.release(acq).unwrap();
            }
            let got = newcomer(try_(mode));
            settle(&mut waiters, &mut cx);
            waiters.extend(got);
        }
    }
    settle(&mut waiters, &mut cx);
    let out = holding(&waiters);
    // Clean up: the holders leave, then each waiter as it is granted; a key left held or
    // queued would mean a lost wake-up.
    for acq in holders {
        locks.release(acq).unwrap();
    }
    loop {
        settle(&mut waiters, &mut cx);
        let mut released = false;
        for w in waiters.iter_mut() {
            if !matches!(w, Waiter::Holding(_)) {
                continue;
            }
            if let Waiter::Holding(acq) = std::mem::replace(w, Waiter::Gone) {
                locks.release(acq).unwrap();
                released = true;
            }
        }
        if !released {
            break;
        }
    }
    assert!(
        !locks.is_locked(KEY).unwrap(),
        "{}: {}: every waiter is served in the end",
        scope.name,
        scenario.name
    );
    out
}

#[test]
fn every_scope_follows_the_grant_policy() {
    common::within(Duration::from_secs(120), || {
        let mut failures = Vec::new();
        for scope in scopes() {
            for scenario in SCENARIOS {
                let want = if scope.strict {
                    scenario.strict
                } else {
                    scenario.eventual
                };
                let got = run(&scope, scenario);
                if got != want {
                    failures.push(format!(
                        "{}: {}: holding {got:?}, expected {want:?}",
                        scope.name, scenario.name
                    ));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}

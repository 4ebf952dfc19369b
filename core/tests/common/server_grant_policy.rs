//! The grant policy table (`tests/common/grant_policy.rs`) run against a server scope, where the
//! policy is the server's (Lua in Redis, PostgreSQL's lock manager). A server scope has one
//! policy, queue order: a newcomer never passes a waiter queued on the key, so its answers are
//! the table's strict column. Each server's test calls [`follows_the_grant_policy`] with a
//! way to open a scope of its own.
//!
//! Every holder, waiter and newcomer is a scope object of its own (its own process as far as
//! the server knows), and each waiter blocks on a thread of its own, so every one of them
//! queues on the server. A waiter's place in the queue is fixed before the next one is started
//! (the queue's length, read from the server).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use keylock_core::{Acquisition, Error, KeyedLock, LockOptions, Mode, Result, Wait};

use crate::grant_table::{Event, SCENARIOS, Scenario};
use crate::{key, wait_until, within};

/// Opens a new scope object with this key prefix.
pub(crate) type Opener = Arc<dyn Fn(&str) -> Arc<dyn KeyedLock> + Send + Sync>;

const KEY: &str = "k";

/// The scope of each one holding the key, and what it holds, by its index in the scenario.
type Holding = BTreeMap<usize, (Arc<dyn KeyedLock>, Acquisition)>;

struct Run {
    opener: Opener,
    prefix: String,
    observer: Arc<dyn KeyedLock>,
    granted: Holding,
    tx: Sender<(usize, Arc<dyn KeyedLock>, Result<Acquisition>)>,
    rx: Receiver<(usize, Arc<dyn KeyedLock>, Result<Acquisition>)>,
    /// Waiters started, and those whose acquire has come back.
    started: usize,
    reported: usize,
}

impl Run {
    fn scope(&self) -> Arc<dyn KeyedLock> {
        (self.opener)(&self.prefix)
    }

    fn queued(&self) -> usize {
        self.observer
            .info(key(KEY))
            .unwrap()
            .map_or(0, |i| i.waiters)
    }

    /// Starts waiter `i` on a thread of its own, and returns once it is queued or holds.
    fn start_waiter(&mut self, i: usize, mode: Mode) {
        let before = self.queued();
        let (scope, tx) = (self.scope(), self.tx.clone());
        let opts = LockOptions::new()
            .mode(mode)
            .wait(Wait::For(Duration::from_secs(60)));
        std::thread::spawn(move || {
            let got = scope.acquire(key(KEY), &opts);
            let _ = tx.send((i, scope, got));
        });
        self.started += 1;
        wait_until(|| {
            self.collect();
            self.granted.contains_key(&i) || self.queued() > before
        });
    }

    /// Takes in every grant that has come back.
    fn collect(&mut self) {
        while let Ok((i, scope, got)) = self.rx.try_recv() {
            self.reported += 1;
            let acq = got.unwrap_or_else(|e| panic!("waiter {i} failed: {e}"));
            self.granted.insert(i, (scope, acq));
        }
    }

    /// A newcomer's try-acquire: it holds if it got the key.
    fn try_newcomer(&mut self, i: usize, mode: Mode) {
        let scope = self.scope();
        match scope.acquire(key(KEY), &LockOptions::new().mode(mode).wait(Wait::No)) {
            Ok(acq) => {
                self.granted.insert(i, (scope, acq));
            }
            Err(Error::WouldBlock) => {}
            Err(e) => panic!("a try-acquire failed: {e}"),
        }
    }
}

/// Runs `scenario` with its own key prefix: the waiters (and newcomer) holding afterwards.
fn run(opener: &Opener, n: usize, scenario: &Scenario) -> Vec<usize> {
    let prefix = format!("gp{n}");
    let (tx, rx) = mpsc::channel();
    let mut run = Run {
        opener: Arc::clone(opener),
        observer: opener(&prefix),
        prefix,
        granted: BTreeMap::new(),
        tx,
        rx,
        started: 0,
        reported: 0,
    };
    let mut holders: Vec<(Arc<dyn KeyedLock>, Acquisition)> = scenario
        .holders
        .iter()
        .map(|&m| {
            let scope = run.scope();
            let opts = LockOptions::new().mode(m).wait(Wait::No);
            let acq = scope
                .acquire(key(KEY), &opts)
                .expect("holders share or are alone");
            (scope, acq)
        })
        .collect();
    for (i, &mode) in scenario.waiters.iter().enumerate() {
        run.start_waiter(i, mode);
    }
    run.collect();
    assert!(
        run.granted.is_empty(),
        "{}: nobody is granted before the event",
        scenario.name
    );
    let newcomer = scenario.waiters.len();
    match scenario.event {
        Event::Release(n) => {
            for (scope, acq) in holders.drain(..n) {
                scope.release(acq).unwrap();
            }
        }
        Event::Arrive(mode) => run.start_waiter(newcomer, mode),
        Event::Try(mode) => run.try_newcomer(newcomer, mode),
        Event::ReleaseThenTry(mode) => {
            for (scope, acq) in holders.drain(..) {
                scope.release(acq).unwrap();
            }
            run.try_newcomer(newcomer, mode);
        }
    }
    // Grants arrive by push from the server: wait (bounded) for the expected ones, then take
    // what has come.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        run.collect();
        if scenario.strict.iter().all(|i| run.granted.contains_key(i)) || Instant::now() > until {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out: Vec<usize> = run.granted.keys().copied().collect();
    if out == scenario.strict {
        // The server agrees: exactly these hold, and the rest still queue.
        let info = run.observer.info(key(KEY)).unwrap();
        let holding = holders.len() + out.len();
        let queued = run.started - out.iter().filter(|&&i| i < run.started).count();
        assert_eq!(
            info.map_or((0, 0), |i| (i.holders as usize, i.waiters)),
            (holding, queued),
            "{}: the server's holders and waiters",
            scenario.name
        );
    }
    // Clean up: the holders leave, then each waiter as it is granted.
    for (scope, acq) in holders {
        scope.release(acq).unwrap();
    }
    loop {
        run.collect();
        for (_, (scope, acq)) in std::mem::take(&mut run.granted) {
            scope.release(acq).unwrap();
        }
        if run.reported == run.started {
            break;
        }
        let (i, scope, got) = run
            .rx
            .recv_timeout(Duration::from_secs(20))
            .expect("every waiter is served in the end");
        run.reported += 1;
        let acq = got.unwrap_or_else(|e| panic!("waiter {i} failed: {e}"));
        run.granted.insert(i, (scope, acq));
    }
    assert!(
        !run.observer.is_locked(key(KEY)).unwrap(),
        "{}: left free",
        scenario.name
    );
    out
}

/// Runs every scenario on scopes that `opener` opens, and fails with the list of those whose
/// answers differ from the strict column.
pub(crate) fn follows_the_grant_policy(opener: Opener) {
    within(Duration::from_secs(300), move || {
        let mut failures = Vec::new();
        for (n, scenario) in SCENARIOS.iter().enumerate() {
            let got = run(&opener, n, scenario);
            if got != scenario.strict {
                failures.push(format!(
                    "{}: holding {got:?}, expected {:?}",
                    scenario.name, scenario.strict
                ));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}

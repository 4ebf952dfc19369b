//! Property tests: random sequences of operations on each primitive, checked step by step
//! against a simple sequential reference model. A divergence fails and shrinks to a minimal
//! sequence.
//!
//! One thread drives everything, so every acquire that would wait is made as a `try_` or a timed
//! acquire (a blocking acquire of a held lock would wait forever); guards are kept in a list and
//! dropped at random, and some acquisitions are leaked and released explicitly instead.

use std::collections::BTreeSet;
use std::time::Duration;

use keylock_core::{Error, KeyPool, RwLock, StripedLock};
use proptest::prelude::*;

const TICK: Duration = Duration::from_micros(200);

#[derive(Debug, Clone)]
enum KeyOp {
    /// `try_lock(k)`; keep the guard.
    TryLock(u8),
    /// `try_lock_for(k)`; keep the guard.
    TryLockFor(u8),
    /// `try_lock(k)`, then leak the guard.
    LockLeak(u8),
    /// Explicit `unlock(k)`.
    Unlock(u8),
    /// Drop the n-th kept guard (modulo their number).
    DropGuard(usize),
    /// `try_lock_many(keys)` (all or nothing); keep the guard.
    TryLockMany(Vec<u8>),
    /// `try_lock_many_for(keys)`; keep the guard.
    TryLockManyFor(Vec<u8>),
    /// Explicit `unlock_many(keys)`.
    UnlockMany(Vec<u8>),
    /// `is_locked(k)`.
    IsLocked(u8),
}

fn key_op() -> impl Strategy<Value = KeyOp> {
    let key = 0u8..6;
    let keys = proptest::collection::vec(0u8..6, 1..4);
    prop_oneof![
        key.clone().prop_map(KeyOp::TryLock),
        key.clone().prop_map(KeyOp::TryLockFor),
        key.clone().prop_map(KeyOp::LockLeak),
        key.clone().prop_map(KeyOp::Unlock),
        (0usize..8).prop_map(KeyOp::DropGuard),
        keys.clone().prop_map(KeyOp::TryLockMany),
        keys.clone().prop_map(KeyOp::TryLockManyFor),
        keys.prop_map(KeyOp::UnlockMany),
        key.prop_map(KeyOp::IsLocked),
    ]
}

/// The reference model: which lock units (keys, or stripes) are held, and what each kept guard
/// holds.
#[derive(Default)]
struct Model {
    held: BTreeSet<usize>,
    guards: Vec<Vec<usize>>,
}

impl Model {
    fn try_take(&mut self, units: &[usize]) -> Result<(), Error> {
        if units.iter().any(|u| self.held.contains(u)) {
            return Err(Error::WouldBlock);
        }
        self.held.extend(units.iter().copied());
        Ok(())
    }

    fn release(&mut self, units: &[usize]) -> Result<(), Error> {
        if !units.iter().all(|u| self.held.contains(u)) {
            return Err(Error::NotLocked);
        }
        for u in units {
            self.held.remove(u);
        }
        // A guard whose units were force-released no longer holds them.
        for g in &mut self.guards {
            g.retain(|u| !units.contains(u));
        }
        Ok(())
    }

    fn drop_guard(&mut self, n: usize) -> Option<usize> {
        if self.guards.is_empty() {
            return None;
        }
        let i = n % self.guards.len();
        let units = self.guards.remove(i);
        for u in units {
            self.held.remove(&u);
        }
        Some(i)
    }
}

fn distinct(units: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let set: BTreeSet<usize> = units.into_iter().collect();
    set.into_iter().collect()
}

fn timed_err(e: Error) -> Error {
    // A timed acquire that runs out reports TimedOut where a try reports WouldBlock.
    if e == Error::WouldBlock {
        Error::TimedOut
    } else {
        e
    }
}

/// Runs `ops` on a keyed primitive through the callbacks, against the model.
macro_rules! check_keyed {
    ($ops:expr, $lock:expr, $unit:expr) => {{
        let lock = $lock;
        let unit = $unit;
        let mut model = Model::default();
        let mut guards = Vec::new();
        for op in $ops {
            match &op {
                &KeyOp::TryLock(k) | &KeyOp::TryLockFor(k) | &KeyOp::LockLeak(k) => {
                    let got = match op {
                        KeyOp::TryLockFor(_) => lock.try_lock_for(&k, TICK).map(Some),
                        _ => lock.try_lock(&k).map(Some),
                    };
                    let want = model.try_take(&[unit(&lock, k)]);
                    let want = if matches!(op, KeyOp::TryLockFor(_)) {
                        want.map_err(timed_err)
                    } else {
                        want
                    };
                    prop_assert_eq!(got.as_ref().map(|_| ()).map_err(|e| *e), want);
                    if let Ok(Some(g)) = got {
                        if matches!(op, KeyOp::LockLeak(_)) {
                            g.leak();
                        } else {
                            model.guards.push(vec![unit(&lock, k)]);
                            guards.push(either::Left(g));
                        }
                    }
                }
                &KeyOp::Unlock(k) => {
                    prop_assert_eq!(lock.unlock(&k), model.release(&[unit(&lock, k)]));
                }
                &KeyOp::DropGuard(n) => {
                    if let Some(i) = model.drop_guard(n) {
                        drop(guards.remove(i));
                    }
                }
                KeyOp::TryLockMany(keys) | KeyOp::TryLockManyFor(keys) => {
                    let units = distinct(keys.iter().map(|k| unit(&lock, *k)));
                    let timed = matches!(op, KeyOp::TryLockManyFor(_));
                    let got = if timed {
                        lock.try_lock_many_for(keys.iter(), TICK)
                    } else {
                        lock.try_lock_many(keys.iter())
                    };
                    let want = model.try_take(&units);
                    let want = if timed { want.map_err(timed_err) } else { want };
                    prop_assert_eq!(got.as_ref().map(|_| ()).map_err(|e| *e), want);
                    if let Ok(g) = got {
                        model.guards.push(units);
                        guards.push(either::Right(g));
                    }
                }
                KeyOp::UnlockMany(keys) => {
                    let units = distinct(keys.iter().map(|k| unit(&lock, *k)));
                    prop_assert_eq!(lock.unlock_many(keys.iter()), model.release(&units));
                }
                &KeyOp::IsLocked(k) => {
                    prop_assert_eq!(lock.is_locked(&k), model.held.contains(&unit(&lock, k)));
                }
            }
            for k in 0u8..6 {
                prop_assert_eq!(lock.is_locked(&k), model.held.contains(&unit(&lock, k)));
            }
        }
        drop(guards);
        // Leaked acquisitions are still held; release them and everything must be free.
        let rest: Vec<usize> = model.held.iter().copied().collect();
        for k in 0u8..6 {
            if rest.contains(&unit(&lock, k)) && lock.is_locked(&k) {
                lock.unlock(&k).unwrap();
            }
        }
        for k in 0u8..6 {
            prop_assert!(!lock.is_locked(&k));
        }
        lock
    }};
}

/// Tiny local Either so the guard list can hold single- and multi-key guards.
mod either {
    pub(crate) enum Either<L, R> {
        Left(L),
        Right(R),
    }
    pub(crate) use Either::{Left, Right};
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn key_pool_matches_model(ops in proptest::collection::vec(key_op(), 1..40)) {
        let pool = check_keyed!(ops, KeyPool::<u8>::new(), |_: &KeyPool<u8>, k: u8| k as usize);
        let stats = pool.stats();
        prop_assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
    }

    #[test]
    fn striped_lock_matches_model(ops in proptest::collection::vec(key_op(), 1..40)) {
        // Four stripes for six keys: collisions are part of the model.
        check_keyed!(
            ops,
            StripedLock::with_seed(4, 1).unwrap(),
            |s: &StripedLock, k: u8| s.stripe_of(&k)
        );
    }

    #[test]
    fn rwlock_matches_model(ops in proptest::collection::vec(0u8..8, 1..60)) {
        let rw = RwLock::new();
        let (mut readers, mut writer) = (0usize, false);
        let mut read_guards = Vec::new();
        let mut write_guard = None;
        for op in ops {
            match op {
                0 | 1 => {
                    let got = if op == 0 { rw.try_read() } else { rw.try_read_for(TICK) };
                    let expect_ok = !writer;
                    prop_assert_eq!(got.is_ok(), expect_ok);
                    if let Err(e) = &got {
                        prop_assert_eq!(*e, if op == 0 { Error::WouldBlock } else { Error::TimedOut });
                    }
                    if let Ok(g) = got {
                        readers += 1;
                        if readers % 2 == 0 { g.leak() } else { read_guards.push(g) }
                    }
                }
                2 | 3 => {
                    let got = if op == 2 { rw.try_write() } else { rw.try_write_for(TICK) };
                    prop_assert_eq!(got.is_ok(), !writer && readers == 0);
                    if let Ok(g) = got {
                        writer = true;
                        write_guard = Some(g);
                    }
                }
                4 => {
                    // Release one reader: a kept guard if any, else a leaked one explicitly.
                    if let Some(g) = read_guards.pop() {
                        drop(g);
                        readers -= 1;
                    } else {
                        let want = if readers > 0 { Ok(()) } else { Err(Error::NotLocked) };
                        prop_assert_eq!(rw.read_unlock(), want);
                        readers = readers.saturating_sub(1);
                    }
                }
                5 => {
                    if let Some(g) = write_guard.take() {
                        drop(g);
                        writer = false;
                    } else {
                        prop_assert_eq!(rw.write_unlock(), Err(Error::NotLocked));
                    }
                }
                6 => {
                    if let Some(g) = write_guard.take() {
                        g.leak();
                        prop_assert_eq!(rw.write_unlock(), Ok(()));
                        writer = false;
                    }
                }
                _ => {}
            }
            prop_assert_eq!(rw.is_write_locked(), writer);
            prop_assert_eq!(rw.is_locked(), writer || readers > 0);
        }
        drop(read_guards);
        drop(write_guard);
        while rw.read_unlock().is_ok() {}
        prop_assert!(!rw.is_locked());
    }
}

#[test]
fn model_sets_are_distinct() {
    // The helper the models rely on: duplicates collapse.
    assert_eq!(distinct([3, 1, 3]), vec![1, 3]);
}

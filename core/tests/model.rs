//! Property tests: random sequences of operations on each primitive, checked step by step
//! against a simple sequential reference model. A divergence fails and shrinks to a minimal
//! sequence.
//!
//! One thread drives everything, so every acquire that would wait is made as a `try_` or a timed
//! acquire (a blocking acquire of a held lock would wait forever). The keyed model covers both
//! modes, fences, releases of acquisition records (current or stale), force-unlock, leases
//! (zero-length ones, which end at once, and long ones that can be extended), and owners with
//! hold counts in reentrant locks.

use std::collections::BTreeMap;
use std::time::Duration;

use keylock_core::{
    Acquisition, Error, KeyBuf, KeyBytes, KeyPool, LockGuard, LockOptions, LockTable, Mode, Owner,
    RwLock, StripedLock, Wait,
};
use proptest::prelude::*;

const TICK: Duration = Duration::from_micros(200);
const KEYS: u8 = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lease {
    None,
    /// Ends at once: the acquisition succeeds, then is over by the next look at the key.
    Zero,
    /// An hour: never ends during a test.
    Long,
}

#[derive(Debug, Clone, Copy)]
struct Ask {
    key: u8,
    mode: Mode,
    lease: Lease,
    /// Owner number (reentrant locks only; 0 = none).
    owner: u8,
    timed: bool,
    /// Keep a guard (true) or turn it into an acquisition record at once.
    guard: bool,
}

#[derive(Debug, Clone)]
enum KeyOp {
    Acquire(Ask),
    /// Release the n-th kept holder (guard dropped, or record released), modulo their number.
    Release(usize),
    /// Extend the n-th kept holder's lease.
    Extend(usize),
    ForceUnlock(u8),
    /// `lock_many_with` over these keys and modes, as a try or timed.
    Many(Vec<(u8, Mode)>, bool),
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)]
}

fn lease() -> impl Strategy<Value = Lease> {
    prop_oneof![4 => Just(Lease::None), 1 => Just(Lease::Zero), 1 => Just(Lease::Long)]
}

fn key_op() -> impl Strategy<Value = KeyOp> {
    let ask = (
        0..KEYS,
        mode(),
        lease(),
        0u8..3,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(key, mode, lease, owner, timed, guard)| Ask {
            key,
            mode,
            lease,
            owner,
            timed,
            guard,
        });
    prop_oneof![
        6 => ask.prop_map(KeyOp::Acquire),
        3 => (0usize..8).prop_map(KeyOp::Release),
        1 => (0usize..8).prop_map(KeyOp::Extend),
        1 => (0..KEYS).prop_map(KeyOp::ForceUnlock),
        2 => (proptest::collection::vec((0..KEYS, mode()), 1..4), any::<bool>())
            .prop_map(|(keys, timed)| KeyOp::Many(keys, timed)),
    ]
}

/// How a unit (a key, or a stripe) is held in the model.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Held {
    #[default]
    Free,
    Exclusive {
        id: usize,
        owner: u8,
        holds: u32,
        lease: Lease,
    },
    Shared(Vec<usize>),
}

#[derive(Debug, Default)]
struct Unit {
    held: Held,
    /// The highest fence any acquisition of this unit was given.
    top: u64,
    /// Fences handed out from now on are at least this (above `top` after a force-unlock or
    /// a lease's end).
    floor: u64,
    /// The fence shared holders of the current epoch read, once one has.
    epoch: Option<u64>,
}

/// The model: units, and every acquisition ever made with whether it is still current.
#[derive(Debug, Default)]
struct Model {
    units: BTreeMap<usize, Unit>,
    current: Vec<bool>,
    reentrant: bool,
}

impl Model {
    fn unit(&mut self, u: usize) -> &mut Unit {
        self.units.entry(u).or_default()
    }

    fn is_held(&self, u: usize) -> bool {
        self.units.get(&u).is_some_and(|x| x.held != Held::Free)
    }

    /// Whether `mode` (by `owner`) can be had on `u` now, and if it is a reentrant hold.
    fn admits(&self, u: usize, mode: Mode, owner: u8) -> Option<bool> {
        let held = self.units.get(&u).map_or(&Held::Free, |x| &x.held);
        match (held, mode) {
            (Held::Free, _) => Some(false),
            (Held::Exclusive { owner: o, .. }, _)
                if self.reentrant && owner != 0 && *o == owner =>
            {
                Some(true)
            }
            (Held::Shared(_), Mode::Shared) => Some(false),
            _ => None,
        }
    }

    /// Records an acquisition of `u` with `fence`; checks the fence against the history.
    /// Returns its id and its lease (a reentrant hold keeps the holder's).
    fn take(
        &mut self,
        u: usize,
        mode: Mode,
        owner: u8,
        fence: u64,
        lease: Lease,
    ) -> Result<(usize, Lease), String> {
        let id = self.current.len();
        let reentrant = self.reentrant && owner != 0;
        let unit = self.unit(u);
        match (&mut unit.held, mode) {
            (
                Held::Exclusive {
                    id: held,
                    holds,
                    owner: o,
                    lease: l,
                },
                _,
            ) if reentrant && *o == owner => {
                if fence != unit.top {
                    return Err(format!(
                        "reentrant hold got fence {fence}, holder has {}",
                        unit.top
                    ));
                }
                *holds += 1;
                return Ok((*held, *l));
            }
            (Held::Free, Mode::Exclusive) => {
                if fence <= unit.top || fence < unit.floor {
                    return Err(format!(
                        "exclusive fence {fence} not above {} / {}",
                        unit.top, unit.floor
                    ));
                }
                unit.top = fence;
                unit.floor = fence;
                unit.epoch = None;
                unit.held = Held::Exclusive {
                    id,
                    owner,
                    holds: 1,
                    lease,
                };
            }
            (Held::Free, Mode::Shared) | (Held::Shared(_), Mode::Shared) => {
                if fence < unit.floor {
                    return Err(format!("shared fence {fence} below {}", unit.floor));
                }
                unit.top = unit.top.max(fence);
                if let Some(e) = unit.epoch
                    && fence != e
                {
                    return Err(format!(
                        "shared holders of one epoch differ: {fence} vs {e}"
                    ));
                }
                unit.epoch = Some(fence);
                match &mut unit.held {
                    Held::Shared(ids) => ids.push(id),
                    h => *h = Held::Shared(vec![id]),
                }
            }
            _ => return Err("model: take of an incompatible unit".into()),
        }
        self.current.push(true);
        Ok((id, lease))
    }

    /// Ends acquisition `id` on `u` (one hold of it).
    fn drop_hold(&mut self, u: usize, id: usize) {
        let unit = self.unit(u);
        match &mut unit.held {
            Held::Exclusive {
                id: held, holds, ..
            } if *held == id => {
                *holds -= 1;
                if *holds > 0 {
                    return;
                }
                unit.held = Held::Free;
            }
            Held::Shared(ids) if ids.contains(&id) => {
                ids.retain(|&x| x != id);
                if ids.is_empty() {
                    // A free key may change slots, and its fence may jump ahead meanwhile.
                    unit.held = Held::Free;
                    unit.epoch = None;
                }
            }
            _ => return,
        }
        self.current[id] = false;
    }

    /// The holders of `u` all stop being current; the fence advances.
    fn end_all(&mut self, u: usize) -> bool {
        let unit = self.unit(u);
        let ids = match std::mem::take(&mut unit.held) {
            Held::Free => return false,
            Held::Exclusive { id, .. } => vec![id],
            Held::Shared(ids) => ids,
        };
        unit.epoch = None;
        // The fence advanced: whatever is handed out next is above everything so far.
        unit.floor = unit.top + 1;
        for id in ids {
            self.current[id] = false;
        }
        true
    }
}

/// A kept acquisition, and the model's view of it.
struct Kept<G> {
    holder: Holder<G>,
    units: Vec<usize>,
    id: Vec<usize>,
    lease: Lease,
}

enum Holder<G> {
    Guard(G),
    Record(Vec<Acquisition>),
}

/// What a stale release reports.
fn stale(lease: Lease) -> Error {
    if lease == Lease::Zero {
        Error::LeaseExpired
    } else {
        Error::NotOwner
    }
}

fn options(ask: &Ask, reentrant: bool) -> LockOptions {
    let mut opts =
        LockOptions::new()
            .mode(ask.mode)
            .wait(if ask.timed { Wait::For(TICK) } else { Wait::No });
    match ask.lease {
        Lease::None => {}
        Lease::Zero => opts = opts.lease(Duration::ZERO),
        Lease::Long => opts = opts.lease(Duration::from_secs(3600)),
    }
    if reentrant && ask.owner != 0 {
        opts = opts.owner(Owner::new(u64::from(ask.owner)).unwrap());
    }
    opts
}

/// Runs `ops` on a keyed primitive (a `KeyPool<u8>`, a `KeyPool<KeyBuf>` or a `StripedLock`)
/// against the model. `$key` maps the model's key number to the key the lock is given.
macro_rules! check_keyed {
    ($ops:expr, $lock:expr, $unit:expr, $key:expr, $reentrant:expr) => {{
        let lock = $lock;
        let unit = $unit;
        let key_of = $key;
        let mut model = Model {
            reentrant: $reentrant,
            ..Model::default()
        };
        let mut kept: Vec<Kept<_>> = Vec::new();
        for op in $ops {
            match &op {
                KeyOp::Acquire(ask) => {
                    let u = unit(&lock, ask.key);
                    let got = lock.lock_with(key_of(&ask.key), options(ask, model.reentrant));
                    let owner = if model.reentrant { ask.owner } else { 0 };
                    match (model.admits(u, ask.mode, owner), got) {
                        (Some(_), Ok(g)) => {
                            let (id, lease) = model
                                .take(u, ask.mode, owner, g.fence(), ask.lease)
                                .map_err(TestCaseError::fail)?;
                            let holder = if ask.guard {
                                Holder::Guard(g)
                            } else {
                                Holder::Record(vec![g.into_acquisition()])
                            };
                            kept.push(Kept {
                                holder,
                                units: vec![u],
                                id: vec![id],
                                lease,
                            });
                            if lease == Lease::Zero {
                                // The lease has ended; the next look at the unit notices. An
                                // exclusive one advances the fence; a shared one just leaves.
                                match ask.mode {
                                    Mode::Exclusive => {
                                        model.end_all(u);
                                    }
                                    Mode::Shared => model.drop_hold(u, id),
                                }
                            }
                        }
                        (None, Err(e)) => {
                            let want = if ask.timed {
                                Error::TimedOut
                            } else {
                                Error::WouldBlock
                            };
                            prop_assert_eq!(e, want);
                        }
                        (admit, got) => {
                            return Err(TestCaseError::fail(format!(
                                "{ask:?}: model {admit:?}, lock {:?}",
                                got.map(|g| g.fence())
                            )));
                        }
                    }
                }
                &KeyOp::Release(n) => {
                    if kept.is_empty() {
                        continue;
                    }
                    let k = kept.remove(n % kept.len());
                    let acqs = match k.holder {
                        Holder::Guard(g) => guard_acquisitions(g),
                        Holder::Record(acqs) => acqs,
                    };
                    // A many-key record's acquisitions come in the lock's canonical order, not the
                    // model's: compare the outcomes as a multiset.
                    let mut want: Vec<_> =
                        k.id.iter()
                            .map(|&id| {
                                if model.current[id] {
                                    Ok(())
                                } else {
                                    Err(stale(k.lease))
                                }
                            })
                            .collect();
                    let mut got: Vec<_> = acqs.into_iter().map(|acq| lock.release(acq)).collect();
                    want.sort_by_key(|r| format!("{r:?}"));
                    got.sort_by_key(|r| format!("{r:?}"));
                    prop_assert_eq!(got, want);
                    for (&u, &id) in k.units.iter().zip(&k.id) {
                        if model.current[id] {
                            model.drop_hold(u, id);
                        }
                    }
                }
                &KeyOp::Extend(n) => {
                    if kept.is_empty() {
                        continue;
                    }
                    let i = n % kept.len();
                    let k = &mut kept[i];
                    if let (Holder::Record(acqs), [id]) = (&mut k.holder, k.id.as_slice()) {
                        let got = lock.extend(&mut acqs[0], Duration::from_secs(3600));
                        let want = match (model.current[*id], k.lease) {
                            (false, lease) => Err(stale(lease)),
                            (true, Lease::Long) => Ok(()),
                            (true, _) => {
                                Err(Error::InvalidArgument("the acquisition has no lease"))
                            }
                        };
                        prop_assert_eq!(got, want);
                    }
                }
                &KeyOp::ForceUnlock(key) => {
                    let u = unit(&lock, key);
                    prop_assert_eq!(lock.force_unlock(key_of(&key)), model.end_all(u));
                }
                KeyOp::Many(keys, timed) => {
                    let mut units: BTreeMap<usize, Mode> = BTreeMap::new();
                    for &(k, m) in keys {
                        let e = units.entry(unit(&lock, k)).or_insert(m);
                        *e = (*e).min(m);
                    }
                    let admits = units
                        .iter()
                        .all(|(&u, &m)| model.admits(u, m, 0) == Some(false));
                    let wait = if *timed { Wait::For(TICK) } else { Wait::No };
                    let got = lock.lock_many_with(
                        keys.iter().map(|(k, m)| (key_of(k), *m)),
                        LockOptions::new().wait(wait),
                    );
                    match (admits, got) {
                        (true, Ok(g)) => {
                            // The guard's fences come in the lock's canonical order, which the
                            // model does not know: read each unit's fence from `info`.
                            prop_assert_eq!(many_fences(&g).len(), units.len());
                            let mut ids = Vec::new();
                            for (&u, &m) in units.iter() {
                                let key = (0..KEYS).find(|&k| unit(&lock, k) == u).unwrap();
                                let f = lock.info(key_of(&key)).unwrap().fence;
                                ids.push(
                                    model
                                        .take(u, m, 0, f, Lease::None)
                                        .map_err(TestCaseError::fail)?
                                        .0,
                                );
                            }
                            let acqs = many_acquisitions(g);
                            kept.push(Kept {
                                holder: Holder::Record(acqs),
                                units: units.keys().copied().collect(),
                                id: ids,
                                lease: Lease::None,
                            });
                        }
                        (false, Err(e)) => {
                            prop_assert_eq!(
                                e,
                                if *timed {
                                    Error::TimedOut
                                } else {
                                    Error::WouldBlock
                                }
                            );
                        }
                        (admits, got) => {
                            return Err(TestCaseError::fail(format!(
                                "many {keys:?}: model {admits}, lock ok = {}",
                                got.is_ok()
                            )));
                        }
                    }
                }
            }
            for key in 0..KEYS {
                let u = unit(&lock, key);
                prop_assert_eq!(
                    lock.is_locked(key_of(&key)),
                    model.is_held(u),
                    "key {}",
                    key
                );
                if let (Some(info), Some(unit)) = (lock.info(key_of(&key)), model.units.get(&u)) {
                    match &unit.held {
                        Held::Exclusive { holds, .. } => {
                            prop_assert_eq!(
                                (info.mode, info.holds, info.fence),
                                (Mode::Exclusive, *holds, unit.top)
                            );
                        }
                        Held::Shared(ids) => {
                            prop_assert_eq!(
                                (info.mode, info.holders as usize),
                                (Mode::Shared, ids.len())
                            );
                        }
                        Held::Free => prop_assert!(false, "info for a free unit"),
                    }
                }
            }
        }
        // Release what is left; everything must be free.
        for k in kept {
            match k.holder {
                Holder::Guard(g) => drop(g),
                Holder::Record(acqs) => {
                    for acq in acqs {
                        let _ = lock.release(acq);
                    }
                }
            }
        }
        for key in 0..KEYS {
            // Reentrant records hold several times; free any that remain.
            while lock.is_locked(key_of(&key)) {
                prop_assert!(lock.force_unlock(key_of(&key)));
            }
        }
        lock
    }};
}

/// The model's key `k` as itself (a `KeyPool<u8>`, a `StripedLock`).
fn same_key(k: &u8) -> &u8 {
    k
}

/// The byte keys of the `KeyPool<KeyBuf>` model, one per key number (`KEYS` of them): one byte;
/// two of 16 bytes (the longest compared with word loads) that differ only in their last byte;
/// the longest kept inline (22 bytes); one byte longer (boxed); and another of 22 bytes that
/// differs from the inline one only in its last byte. Recycled slots pass them on to each other,
/// so a slot's key changes between inline and boxed and between lengths.
const BYTE_KEYS: [&[u8]; KEYS as usize] = [
    b"k",
    b"0123456789abcdef",
    b"0123456789abcdeg",
    b"xxxxxxxxxxxxxxxxxxxxxx",
    b"xxxxxxxxxxxxxxxxxxxxxxx",
    b"xxxxxxxxxxxxxxxxxxxxxy",
];

fn byte_key(k: &u8) -> &'static KeyBytes {
    KeyBytes::new(BYTE_KEYS[usize::from(*k)])
}

/// The acquisitions of a kept guard (a helper so the macro works for every lock type: all of
/// them hand out the front's one guard).
trait KeptGuard {
    fn into_records(self) -> Vec<Acquisition>;
}
impl<T: LockTable> KeptGuard for LockGuard<&T> {
    fn into_records(self) -> Vec<Acquisition> {
        vec![self.into_acquisition()]
    }
}
fn guard_acquisitions<G: KeptGuard>(g: G) -> Vec<Acquisition> {
    g.into_records()
}

trait ManyGuard {
    fn fence_list(&self) -> Vec<u64>;
    fn records(self) -> Vec<Acquisition>;
}
impl<T: LockTable> ManyGuard for keylock_core::ManyGuard<&T> {
    fn fence_list(&self) -> Vec<u64> {
        self.fences().collect()
    }
    fn records(self) -> Vec<Acquisition> {
        self.into_acquisitions()
    }
}
fn many_fences<G: ManyGuard>(g: &G) -> Vec<u64> {
    g.fence_list()
}
fn many_acquisitions<G: ManyGuard>(g: G) -> Vec<Acquisition> {
    g.records()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn key_pool_matches_model(ops in proptest::collection::vec(key_op(), 1..40)) {
        // A pool that keeps no released key indexed, so slots are recycled all the time.
        let pool: KeyPool<u8> = KeyPool::builder().shards(2).retain(0).build();
        let pool = check_keyed!(ops, pool, |_: &KeyPool<u8>, k: u8| k as usize, same_key, false);
        let stats = pool.stats();
        prop_assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
    }

    #[test]
    fn key_buf_pool_matches_model(ops in proptest::collection::vec(key_op(), 1..40)) {
        // Keys of every length class (see BYTE_KEYS), in slots recycled all the time.
        let pool: KeyPool<KeyBuf> = KeyPool::builder().shards(2).retain(0).build();
        let unit = |_: &KeyPool<KeyBuf>, k: u8| k as usize;
        let pool = check_keyed!(ops, pool, unit, byte_key, false);
        let stats = pool.stats();
        prop_assert_eq!((stats.held, stats.waiting, stats.entries_in_use), (0, 0, 0));
    }

    #[test]
    fn reentrant_key_pool_matches_model(ops in proptest::collection::vec(key_op(), 1..40)) {
        let pool: KeyPool<u8> = KeyPool::builder().shards(2).retain(0).reentrant(true).build();
        let pool = check_keyed!(ops, pool, |_: &KeyPool<u8>, k: u8| k as usize, same_key, true);
        prop_assert_eq!(pool.stats().entries_in_use, 0);
    }

    #[test]
    fn striped_lock_matches_model(ops in proptest::collection::vec(key_op(), 1..40)) {
        // Four stripes for six keys: collisions are part of the model.
        check_keyed!(
            ops,
            StripedLock::with_seed(4, 1).unwrap(),
            |s: &StripedLock, k: u8| s.stripe_of(&k),
            same_key,
            false
        );
    }

    #[test]
    fn reentrant_striped_lock_matches_model(ops in proptest::collection::vec(key_op(), 1..40)) {
        check_keyed!(
            ops,
            StripedLock::builder().stripes(4).seed(1).reentrant(true).build().unwrap(),
            |s: &StripedLock, k: u8| s.stripe_of(&k),
            same_key,
            true
        );
    }

    #[test]
    fn rwlock_matches_model(ops in proptest::collection::vec(0u8..6, 1..60)) {
        let rw = RwLock::new();
        let mut read_guards = Vec::new();
        let mut write_guard = None;
        let mut top = 0u64;
        for op in ops {
            let writer = write_guard.is_some();
            match op {
                0 | 1 => {
                    let got = if op == 0 { rw.try_read() } else { rw.try_read_for(TICK) };
                    prop_assert_eq!(got.is_ok(), !writer);
                    if let Err(e) = &got {
                        prop_assert_eq!(e.clone(), if op == 0 { Error::WouldBlock } else { Error::TimedOut });
                    }
                    if let Ok(g) = got {
                        read_guards.push(g);
                    }
                }
                2 | 3 => {
                    let got = if op == 2 { rw.try_write() } else { rw.try_write_for(TICK) };
                    prop_assert_eq!(got.is_ok(), !writer && read_guards.is_empty());
                    if let Ok(g) = got {
                        prop_assert!(g.fence() > top, "writer fences rise");
                        top = g.fence();
                        write_guard = Some(g);
                    }
                }
                4 => {
                    if let Some(g) = read_guards.pop() {
                        g.release();
                    }
                }
                _ => {
                    if let Some(g) = write_guard.take() {
                        g.release();
                    }
                }
            }
            prop_assert_eq!(rw.is_write_locked(), write_guard.is_some());
            prop_assert_eq!(rw.is_locked(), write_guard.is_some() || !read_guards.is_empty());
        }
        drop(read_guards);
        drop(write_guard);
        prop_assert!(!rw.is_locked());
    }
}

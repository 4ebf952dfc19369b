//! The keylock bank: workers move money between accounts under per-key locks while an auditor
//! checks that the total never changes.
//!
//! A transfer holds the RwLock for reading and both account keys (taken together with
//! `lock_many`, deadlock-free); the auditor takes the RwLock for writing, which stops every
//! transfer, and sums all balances. The run is done with keys through `KeyPool`, then through
//! `StripedLock`; each write records the fence of the lock it was made under, and a fence that
//! does not rise is counted as an error.
//!
//! A third phase shows why a lease alone is not enough: workers take their keys with a 2 ms
//! lease and now and then stall past it, so the key may pass to another worker meanwhile. The
//! accounts live in a "store" that, like `UPDATE ... WHERE fence < $fence`, refuses a write
//! whose fence is not above the last one it accepted: the stalled worker's late write is
//! refused instead of overwriting the newer holder's. Exit status 1 on any mismatch.
//!
//! Usage: keylock-bank [workers] [accounts] [millis-per-phase]

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use keylock_core::{KeyPool, LockOptions, Mode, RwLock, StripedLock};

const INITIAL: i64 = 1_000;

/// Balances. Each is read and written with plain loads and stores (no atomic read-modify-write),
/// so only the locks keep transfers from losing money.
struct Bank {
    balances: Vec<AtomicI64>,
    /// The fence of the lock each account was last written under.
    fences: Vec<AtomicU64>,
    audit: RwLock,
}

impl Bank {
    fn total(&self) -> i64 {
        self.balances
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }

    /// Moves `amount` under locks whose fences are `fa` (for `from`) and `fb` (for `to`);
    /// returns whether both fences rose, as they must under a correct lock.
    fn transfer(&self, from: usize, to: usize, amount: i64, fa: u64, fb: u64) -> bool {
        let a = self.balances[from].load(Ordering::Relaxed);
        let b = self.balances[to].load(Ordering::Relaxed);
        self.balances[from].store(a - amount, Ordering::Relaxed);
        self.balances[to].store(b + amount, Ordering::Relaxed);
        // Per stripe the fence rises too, so an account that shares its stripe sees it rise.
        let pa = self.fences[from].fetch_max(fa, Ordering::Relaxed);
        let pb = self.fences[to].fetch_max(fb, Ordering::Relaxed);
        pa < fa && pb < fb
    }
}

/// The store of the third phase: every account with the fence of its last accepted write. A
/// commit of two accounts is all or nothing, and only if both fences are above the stored ones.
struct Store {
    accounts: Vec<std::sync::Mutex<(i64, u64)>>,
}

impl Store {
    fn balance(&self, i: usize) -> i64 {
        self.accounts[i].lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// Reads a balance for a transaction under `fence`, and claims the row for it: from now on
    /// the row refuses writes under older fences, so a stalled holder that wakes after the next
    /// holder has read cannot overwrite what that holder computes from. `None`: a newer fence
    /// has claimed the row already (this holder's lease ran out).
    fn read(&self, i: usize, fence: u64) -> Option<i64> {
        let mut row = self.accounts[i].lock().unwrap_or_else(|e| e.into_inner());
        if fence < row.1 {
            return None;
        }
        row.1 = fence;
        Some(row.0)
    }

    /// Writes both balances if no newer fence has claimed either row; whether it did.
    fn commit(&self, a: (usize, i64, u64), b: (usize, i64, u64)) -> bool {
        let (first, second) = if a.0 < b.0 { (a, b) } else { (b, a) };
        let mut x = self.accounts[first.0]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut y = self.accounts[second.0]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if first.2 < x.1 || second.2 < y.1 {
            return false;
        }
        *x = (first.1, first.2);
        *y = (second.1, second.2);
        true
    }

    fn total(&self) -> i64 {
        (0..self.accounts.len()).map(|i| self.balance(i)).sum()
    }
}

/// A small xorshift generator: the demo needs no cryptographic randomness.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

enum Keys {
    Pool(KeyPool<u64>),
    Striped(StripedLock),
}

struct Outcome {
    transfers: u64,
    audits: u64,
    failed_audits: u64,
    /// Writes made under a fence that did not rise.
    bad_fences: u64,
    seconds: f64,
}

fn run(bank: &Arc<Bank>, keys: Arc<Keys>, workers: usize, length: Duration) -> Outcome {
    let accounts = bank.balances.len() as u64;
    let expected = bank.total();
    let stop = Arc::new(AtomicBool::new(false));
    let transfers = Arc::new(AtomicU64::new(0));
    let bad_fences = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (bank, keys, stop, transfers, bad) = (
                bank.clone(),
                keys.clone(),
                stop.clone(),
                transfers.clone(),
                bad_fences.clone(),
            );
            thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w as u64 + 1));
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) {
                    let from = rng.below(accounts);
                    let to = (from + 1 + rng.below(accounts - 1)) % accounts;
                    let amount = rng.below(100) as i64;
                    let _reading = bank.audit.read();
                    let (f, t) = (from as usize, to as usize);
                    let rose = match &*keys {
                        Keys::Pool(pool) => {
                            let both = pool.lock_many([from, to].iter());
                            let (fa, fb) = (both.fence_of(&from), both.fence_of(&to));
                            bank.transfer(f, t, amount, fa.unwrap_or(0), fb.unwrap_or(0))
                        }
                        Keys::Striped(striped) => {
                            let both = striped.lock_many([from, to].iter());
                            let (fa, fb) = (both.fence_of(&from), both.fence_of(&to));
                            bank.transfer(f, t, amount, fa.unwrap_or(0), fb.unwrap_or(0))
                        }
                    };
                    if !rose {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                    done += 1;
                }
                transfers.fetch_add(done, Ordering::Relaxed);
            })
        })
        .collect();
    let (mut audits, mut failed_audits) = (0, 0);
    while started.elapsed() < length {
        thread::sleep(Duration::from_millis(10));
        let _writing = bank.audit.write();
        audits += 1;
        if bank.total() != expected {
            failed_audits += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("worker panicked");
    }
    Outcome {
        transfers: transfers.load(Ordering::Relaxed),
        audits,
        failed_audits,
        bad_fences: bad_fences.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// The third phase: leased keys, stalls past the lease, and a store that checks fences.
/// Returns (commits, stale commits refused, total after).
fn run_leased(accounts: usize, workers: usize, length: Duration) -> (u64, u64, i64, i64) {
    let store = Arc::new(Store {
        accounts: (0..accounts)
            .map(|_| std::sync::Mutex::new((INITIAL, 0)))
            .collect(),
    });
    let initial = store.total();
    let pool: Arc<KeyPool<u64>> = Arc::new(KeyPool::new());
    let lease = LockOptions::new().lease(Duration::from_millis(2));
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (store, pool, stop, commits, refused) = (
                store.clone(),
                pool.clone(),
                stop.clone(),
                commits.clone(),
                refused.clone(),
            );
            thread::spawn(move || {
                let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (w as u64 + 1));
                let n = accounts as u64;
                while !stop.load(Ordering::Relaxed) {
                    let from = rng.below(n);
                    let to = (from + 1 + rng.below(n - 1)) % n;
                    let amount = rng.below(100) as i64;
                    let keys = [(&from, Mode::Exclusive), (&to, Mode::Exclusive)];
                    let both = pool.lock_many_with(keys, lease).expect("untimed");
                    let (fa, fb) = (both.fence_of(&from), both.fence_of(&to));
                    let (fa, fb) = (fa.unwrap_or(0), fb.unwrap_or(0));
                    let (Some(a), Some(b)) =
                        (store.read(from as usize, fa), store.read(to as usize, fb))
                    else {
                        refused.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    if rng.below(200) == 0 {
                        // A stall (a GC pause, a swapped-out page) past the lease: the keys may
                        // pass to another worker meanwhile.
                        thread::sleep(Duration::from_millis(5));
                    }
                    let ok = store.commit(
                        (from as usize, a - amount, fa),
                        (to as usize, b + amount, fb),
                    );
                    if ok {
                        commits.fetch_add(1, Ordering::Relaxed);
                    } else {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    thread::sleep(length);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("worker panicked");
    }
    (
        commits.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        initial,
        store.total(),
    )
}

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let workers = arg(1, 8) as usize;
    let accounts = arg(2, 64).max(2) as usize;
    let length = Duration::from_millis(arg(3, 500));
    let bank = Arc::new(Bank {
        balances: (0..accounts).map(|_| AtomicI64::new(INITIAL)).collect(),
        fences: (0..accounts).map(|_| AtomicU64::new(0)).collect(),
        audit: RwLock::new(),
    });
    let initial = bank.total();
    println!("keylock bank (Rust): {workers} workers, {accounts} accounts");
    let mut ok = true;
    let phases = [
        ("KeyPool", Keys::Pool(KeyPool::new())),
        (
            "StripedLock",
            Keys::Striped(StripedLock::new(1024).expect("valid stripe count")),
        ),
    ];
    for (name, keys) in phases {
        let keys = Arc::new(keys);
        let out = run(&bank, keys.clone(), workers, length);
        let rate = out.transfers as f64 / out.seconds;
        println!(
            "  {name:<12} {rate:>12.0} transfers/s  audits passed {}/{}  fences not rising {}",
            out.audits - out.failed_audits,
            out.audits,
            out.bad_fences
        );
        ok &= out.failed_audits == 0 && out.bad_fences == 0;
        // A new stripe lock per phase: fences start again, so do the records.
        for f in &bank.fences {
            f.store(0, Ordering::Relaxed);
        }
        if let Keys::Pool(pool) = &*keys {
            ok &= pool.is_empty() && pool.stats().entries_in_use == 0;
        }
    }
    let (commits, refused, before, after) = run_leased(accounts, workers, length);
    println!(
        "  leases+fences {commits:>8} commits, {refused} stale commits refused by their fence, \
         store total {after} (initial {before})"
    );
    ok &= before == after;
    let total = bank.total();
    println!("  final total {total} (initial {initial})");
    if total != initial || !ok {
        eprintln!("MISMATCH: the bank lost or made money, or a lock was left held");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

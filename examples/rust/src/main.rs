//! The keylock bank: workers move money between accounts under per-key locks while an auditor
//! checks that the total never changes.
//!
//! A transfer holds the RwLock for reading and both account keys (taken together with
//! `lock_many`, deadlock-free); the auditor takes the RwLock for writing, which stops every
//! transfer, and sums all balances. The run is done twice: keys through `KeyPool`, then through
//! `StripedLock`. Exit status 1 on any mismatch.
//!
//! Usage: keylock-bank [workers] [accounts] [millis-per-phase]

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use keylock_core::{KeyPool, RwLock, StripedLock};

const INITIAL: i64 = 1_000;

/// Balances. Each is read and written with plain loads and stores (no atomic read-modify-write),
/// so only the locks keep transfers from losing money.
struct Bank {
    balances: Vec<AtomicI64>,
    audit: RwLock,
}

impl Bank {
    fn total(&self) -> i64 {
        self.balances
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }

    fn transfer(&self, from: usize, to: usize, amount: i64) {
        let a = self.balances[from].load(Ordering::Relaxed);
        let b = self.balances[to].load(Ordering::Relaxed);
        self.balances[from].store(a - amount, Ordering::Relaxed);
        self.balances[to].store(b + amount, Ordering::Relaxed);
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
    seconds: f64,
}

fn run(bank: &Arc<Bank>, keys: Arc<Keys>, workers: usize, length: Duration) -> Outcome {
    let accounts = bank.balances.len() as u64;
    let expected = bank.total();
    let stop = Arc::new(AtomicBool::new(false));
    let transfers = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (bank, keys, stop, transfers) =
                (bank.clone(), keys.clone(), stop.clone(), transfers.clone());
            thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w as u64 + 1));
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) {
                    let from = rng.below(accounts);
                    let to = (from + 1 + rng.below(accounts - 1)) % accounts;
                    let amount = rng.below(100) as i64;
                    let _reading = bank.audit.read();
                    match &*keys {
                        Keys::Pool(pool) => {
                            let _both = pool.lock_many([from, to].iter());
                            bank.transfer(from as usize, to as usize, amount);
                        }
                        Keys::Striped(striped) => {
                            let _both = striped.lock_many([from, to].iter());
                            bank.transfer(from as usize, to as usize, amount);
                        }
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
        seconds: started.elapsed().as_secs_f64(),
    }
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
            "  {name:<12} {rate:>12.0} transfers/s  audits passed {}/{}",
            out.audits - out.failed_audits,
            out.audits
        );
        ok &= out.failed_audits == 0;
        if let Keys::Pool(pool) = &*keys {
            ok &= pool.is_empty() && pool.stats().entries_in_use == 0;
        }
    }
    let total = bank.total();
    println!("  final total {total} (initial {initial})");
    if total != initial || !ok {
        eprintln!("MISMATCH: the bank lost or made money, or a lock was left held");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

//! The host scope against hostile regions: a region's bytes may be anything (corruption, a
//! stray write, another program), and no byte pattern may crash or hang a process that opens
//! and uses it. A wrong answer from a region corrupted on purpose is out of scope; a crash
//! (SIGILL, SIGSEGV, SIGABRT, a panic) or a hang is not.
//!
//! Each region under test is opened by a child process (this test binary re-run as the
//! `child` test, driven by `KEYLOCK_HOSTILE_CHILD`) with a time limit, so a crash or a hang
//! fails the test instead of killing or freezing it.
//!
//! - Mutexes of another kind are refused before any pthread call (glibc's lock elision path
//!   dies of SIGILL on kind 0x100, a priority-protect kind trips an assertion).
//! - A table mutex that is never freed is reported (`Unavailable`) within the bound, at open
//!   and under an open region.
//! - A seeded fuzz test: copies of populated regions, corrupted in their body, words, indices,
//!   lengths and mutex fields, each opened and used by a child. `KEYLOCK_FUZZ_SEED` replays a
//!   run, `KEYLOCK_FUZZ_TRIALS` sets its length (300 by default; `make fuzz-shm` runs
//!   thousands), `KEYLOCK_FUZZ_ONLY` runs one trial of it, `KEYLOCK_FUZZ_JOBS` children at once.
#![cfg(all(feature = "shm", target_os = "linux"))]

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use keylock_core::shm::{self, TABLE_MUTEX_WAIT};
use keylock_core::{Error, KeyedLock, LockKey, LockOptions, OpenOptions, Owner, Wait};

// ----- the region's layout, as the module docs of `keylock_core::shm` give it -----------------

/// The runtime part of the header, which starts with the table mutex.
const RUNTIME: usize = 512;
/// The process slots: 256 of 64 bytes, each starting with its liveness mutex.
const PROCS: usize = 4096;
const PROC_SIZE: usize = 64;
const ENTRY_SIZE: usize = 384;
/// An entry's count of semaphore units held.
const ENTRY_UNITS: usize = 84;
/// The header's `permits` (a semaphore region's units per key).
const PERMITS_AT: usize = 112;
const NODE_SIZE: usize = 64;
/// glibc's `pthread_mutex_t`: `__lock`, `__count`, `__owner`, `__nusers`, `__kind`, then
/// `__spins`/`__elision` and the robust list pointers.
const MUTEX_LOCK: usize = 0;
const MUTEX_OWNER: usize = 8;
const MUTEX_KIND: usize = 16;
const MUTEX_SPINS: usize = 20;
const MUTEX_SIZE: usize = size_of::<libc::pthread_mutex_t>();
/// The runtime fields after the table mutex: holder, free lists, hand, fence floor, sequence.
const RUNTIME_FIELDS: usize = 40;
/// The header's checksum covers the bytes before it.
const CHECKSUM_AT: usize = 120;

/// The header fields a fuzz trial needs, read from a region's bytes.
#[derive(Debug, Clone, Copy)]
struct Layout {
    capacity: u32,
    buckets: u32,
    nodes: u32,
    off_entries: usize,
    off_buckets: usize,
    off_nodes: usize,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

impl Layout {
    fn of(b: &[u8]) -> Layout {
        Layout {
            capacity: u32_at(b, 28),
            buckets: u32_at(b, 32),
            nodes: u32_at(b, 40),
            off_entries: u64_at(b, 80) as usize,
            off_buckets: u64_at(b, 88) as usize,
            off_nodes: u64_at(b, 96) as usize,
        }
    }
}

// ----- names and children -----------------------------------------------------------------------

/// A region name unique to this test run, unlinked when dropped.
struct Name(String);

impl Name {
    fn new(test: &str) -> Name {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "h-{}-{test}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let _ = shm::unlink(&name);
        Name(name)
    }

    fn path(&self) -> std::path::PathBuf {
        shm::path(&self.0).unwrap()
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = shm::unlink(&self.0);
    }
}

/// The two kinds of region the tests use, and the options that open each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    /// A key pool of 16 entries, eventual fairness, not reentrant.
    Pool,
    /// 8 stripes, strict FIFO, reentrant.
    Striped,
    /// A keyed semaphore of 16 entries and 3 permits per key.
    Semaphore,
}

impl Base {
    fn as_str(self) -> &'static str {
        match self {
            Base::Pool => "pool",
            Base::Striped => "striped",
            Base::Semaphore => "semaphore",
        }
    }

    fn parse(s: &str) -> Base {
        match s {
            "pool" => Base::Pool,
            "striped" => Base::Striped,
            "semaphore" => Base::Semaphore,
            other => panic!("unknown base {other}"),
        }
    }

    fn options(self) -> OpenOptions {
        let mut o = OpenOptions::default();
        match self {
            Base::Pool => o.capacity = Some(16),
            Base::Striped => {
                o.stripes = Some(8);
                o.reentrant = true;
                o.fifo = true;
            }
            Base::Semaphore => {
                o.capacity = Some(16);
                o.permits = Some(3);
            }
        }
        o
    }

    fn open(self, name: &str) -> keylock_core::Result<Arc<dyn KeyedLock>> {
        keylock_core::open_with(&format!("shm:{name}"), &self.options())
    }
}

/// How a child ended.
#[derive(Debug)]
enum Ending {
    /// It exited by itself; its status and output.
    Exited {
        status: ExitStatus,
        stdout: String,
        stderr: String,
    },
    /// It was still running at the time limit (and was killed).
    Hung { stdout: String, stderr: String },
}

impl Ending {
    fn stdout(&self) -> &str {
        match self {
            Ending::Exited { stdout, .. } | Ending::Hung { stdout, .. } => stdout,
        }
    }

    /// The child ran to its end and said `done`.
    fn clean(&self) -> bool {
        matches!(self, Ending::Exited { status, stdout, .. }
            if status.success() && stdout.contains("hostile-child: done"))
    }

    /// What went wrong, for a report.
    fn describe(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        let tail = |s: &str| {
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(6)..].join(" | ")
        };
        match self {
            Ending::Hung { stdout, stderr } => format!(
                "HANG (killed at the time limit); stdout: {}; stderr: {}",
                tail(stdout),
                tail(stderr)
            ),
            Ending::Exited {
                status,
                stdout,
                stderr,
            } => match status.signal() {
                Some(sig) => format!(
                    "CRASH (signal {sig}); stdout: {}; stderr: {}",
                    tail(stdout),
                    tail(stderr)
                ),
                None => format!(
                    "FAILED ({status}); stdout: {}; stderr: {}",
                    tail(stdout),
                    tail(stderr)
                ),
            },
        }
    }
}

/// A running child with its time limit.
struct Running {
    child: Child,
    started: Instant,
    limit: Duration,
}

fn spawn(role: &str, region: &str, base: Base, limit: Duration) -> Running {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env("KEYLOCK_HOSTILE_CHILD", role)
        .env("KEYLOCK_HOSTILE_REGION", region)
        .env("KEYLOCK_HOSTILE_BASE", base.as_str())
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Running {
        child,
        started: Instant::now(),
        limit,
    }
}

impl Running {
    /// The ending, if the child has ended or run past its limit (then it is killed).
    fn poll(&mut self) -> Option<Ending> {
        let status = self.child.try_wait().unwrap();
        if status.is_none() && self.started.elapsed() < self.limit {
            return None;
        }
        let hung = status.is_none();
        if hung {
            let _ = self.child.kill();
        }
        let status = self.child.wait().unwrap();
        let mut stdout = String::new();
        let mut stderr = String::new();
        let _ = self
            .child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout);
        let _ = self
            .child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr);
        Some(if hung {
            Ending::Hung { stdout, stderr }
        } else {
            Ending::Exited {
                status,
                stdout,
                stderr,
            }
        })
    }

    fn finish(mut self) -> Ending {
        loop {
            if let Some(ending) = self.poll() {
                return ending;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The most a child may take: its open and its close may each wait out the table mutex's
/// bound once, and the rest is short. Past this it is taken as hung.
fn child_limit() -> Duration {
    2 * TABLE_MUTEX_WAIT + Duration::from_secs(20)
}

/// Writes `bytes` at `offset` of a region's file.
fn poke(name: &Name, offset: usize, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(name.path())
        .unwrap();
    f.write_all_at(bytes, offset as u64).unwrap();
}

fn error_line(e: &Error) -> String {
    let variant = format!("{e:?}");
    let variant = variant.split('(').next().unwrap_or("").to_owned();
    format!("{variant}: {e}")
}

// ----- the child ----------------------------------------------------------------------------

/// The child processes' entry point (a no-op when run as a plain test).
#[test]
fn child() {
    let Ok(role) = std::env::var("KEYLOCK_HOSTILE_CHILD") else {
        return;
    };
    let region = std::env::var("KEYLOCK_HOSTILE_REGION").unwrap();
    let base = Base::parse(&std::env::var("KEYLOCK_HOSTILE_BASE").unwrap());
    let lock = match base.open(&region) {
        Ok(lock) => lock,
        Err(e) => {
            println!("open: {}", error_line(&e));
            println!("hostile-child: done");
            return;
        }
    };
    println!("open: ok");
    match role.as_str() {
        "open" => {}
        // The table mutex's lock word turns into a thread's that never lets go.
        "stuck-after-open" => {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(shm::path(&region).unwrap())
                .unwrap();
            f.write_all_at(&STUCK_LOCK_WORD.to_le_bytes(), RUNTIME as u64)
                .unwrap();
            match lock.info(LockKey::new(b"k")) {
                Ok(info) => println!("info: ok {info:?}"),
                Err(e) => println!("info: {}", error_line(&e)),
            }
        }
        "fuzz" => use_everything(&*lock, &lock, base),
        // One unit of a key, tried.
        "units" => match lock.acquire(LockKey::new(b"k0"), &LockOptions::new().wait(Wait::No)) {
            Ok(acq) => {
                println!("acquire: ok {}", acq.weight());
                let _ = lock.release(acq);
            }
            Err(e) => println!("acquire: {}", error_line(&e)),
        },
        other => panic!("unknown child role {other}"),
    }
    drop(lock);
    println!("hostile-child: done");
}

/// A lock word naming a thread id above Linux's largest (`PID_MAX_LIMIT`, 2^22), without the
/// owner-died bit: a holder that exists nowhere, so nobody ever frees it.
const STUCK_LOCK_WORD: u32 = 0x3fff_fff0;

/// Every operation, on the keys the populated regions hold and on new ones; each result is
/// counted, not checked (a corrupt region may answer anything but a crash or a hang).
fn use_everything(lock: &dyn KeyedLock, arc: &Arc<dyn KeyedLock>, base: Base) {
    let brief = Wait::For(Duration::from_millis(3));
    let owner = Owner::new(7).unwrap();
    let mut x = LockOptions::new();
    if base == Base::Striped {
        x = x.owner(owner);
    }
    let (mut ok, mut err) = (0u32, 0u32);
    let mut count = |r: bool| {
        if r {
            ok += 1;
        } else {
            err += 1;
        }
    };
    for key in KEYS.iter().copied().chain([&b"new-1"[..], b"new-2"]) {
        let k = LockKey::new(key);
        for opts in [
            x.wait(Wait::No),
            x.shared().wait(Wait::No),
            x.wait(brief),
            x.shared().wait(brief),
            x.lease(Duration::from_millis(50)).wait(brief),
            // (A lock region refuses a weight of 2; a semaphore takes 2 units.)
            x.weight(2).wait(brief),
        ] {
            match lock.acquire(k, &opts) {
                Ok(mut acq) => {
                    count(true);
                    count(lock.info(k).is_ok());
                    count(lock.is_current(&acq).is_ok());
                    count(lock.extend(&mut acq, Duration::from_millis(50)).is_ok());
                    count(lock.release(acq).is_ok());
                }
                Err(_) => count(false),
            }
        }
        count(lock.info(k).is_ok());
        count(lock.is_locked(k).is_ok());
    }
    let many = [
        (LockKey::new(b"k0"), keylock_core::Mode::Exclusive),
        (LockKey::new(b"new-3"), keylock_core::Mode::Shared),
        (LockKey::new(b"k4"), keylock_core::Mode::Exclusive),
    ];
    match lock.acquire_many(&many, &x.wait(brief)) {
        Ok(acqs) => {
            for a in acqs {
                count(lock.release(a).is_ok());
            }
        }
        Err(_) => count(false),
    }
    let fut = Arc::clone(arc).acquire_async(LockKey::new(b"k5"), &x.wait(brief));
    match futures::executor::block_on(fut) {
        Ok(a) => count(lock.release(a).is_ok()),
        Err(_) => count(false),
    }
    count(lock.force_unlock(LockKey::new(b"k1")).is_ok());
    count(lock.force_unlock(LockKey::new(b"k0")).is_ok());
    for key in [&b"k0"[..], b"new-4"] {
        match lock.acquire(LockKey::new(key), &x.wait(brief)) {
            Ok(a) => count(lock.release(a).is_ok()),
            Err(_) => count(false),
        }
    }
    println!("ops: {ok} ok, {err} errors");
}

// ----- the deterministic cases ----------------------------------------------------------------

/// A fresh region of `base`, made and closed by this process.
fn fresh(test: &str, base: Base) -> Name {
    let name = Name::new(test);
    drop(base.open(&name.0).unwrap());
    name
}

/// The line of `ending`'s output that starts with `prefix`.
fn line<'e>(ending: &'e Ending, prefix: &str) -> &'e str {
    ending
        .stdout()
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line: {}", ending.describe()))
}

#[test]
fn mutexes_of_another_kind_are_refused_before_any_pthread_call() {
    // (offset, value): the table mutex's and a process slot's kind: lock elision (SIGILL
    // without it), elision with the shared bit, priority-protect (an assertion), plain
    // non-robust, robust but private; and a nonzero spin/elision word.
    let slot = PROCS + MUTEX_KIND;
    let cases: Vec<(&str, usize, u32)> = vec![
        ("table kind elision", RUNTIME + MUTEX_KIND, 0x100),
        ("table kind elision shared", RUNTIME + MUTEX_KIND, 0x180),
        ("table kind prio-protect", RUNTIME + MUTEX_KIND, 0xc0),
        ("table kind plain", RUNTIME + MUTEX_KIND, 0x80),
        ("table kind private", RUNTIME + MUTEX_KIND, 0x10),
        ("table spins", RUNTIME + MUTEX_SPINS, 0x0001_0001),
        ("slot kind elision", slot, 0x100),
        ("slot kind prio-protect", slot, 0xc0),
    ];
    let mut running = Vec::new();
    for (what, offset, value) in &cases {
        let name = fresh("kind", Base::Pool);
        poke(&name, *offset, &value.to_le_bytes());
        let child = spawn("open", &name.0, Base::Pool, child_limit());
        running.push((what, name, child));
    }
    for (what, _name, child) in running {
        let ending = child.finish();
        assert!(ending.clean(), "{what}: {}", ending.describe());
        let open = line(&ending, "open: ");
        assert!(
            open.starts_with("open: Incompatible") && open.contains("kind"),
            "{what}: {open}"
        );
    }
}

#[test]
fn a_table_mutex_that_never_frees_is_reported_at_open() {
    let name = fresh("stuck", Base::Pool);
    poke(&name, RUNTIME + MUTEX_LOCK, &STUCK_LOCK_WORD.to_le_bytes());
    let ending = spawn("open", &name.0, Base::Pool, child_limit()).finish();
    assert!(ending.clean(), "{}", ending.describe());
    let open = line(&ending, "open: ");
    assert!(
        open.starts_with("open: Unavailable") && open.contains("table mutex"),
        "{open}"
    );
}

#[test]
fn a_table_mutex_stuck_under_an_open_region_is_reported() {
    let name = fresh("stuck-open", Base::Striped);
    let ending = spawn("stuck-after-open", &name.0, Base::Striped, child_limit()).finish();
    assert!(ending.clean(), "{}", ending.describe());
    assert_eq!(line(&ending, "open: "), "open: ok");
    let info = line(&ending, "info: ");
    assert!(
        info.starts_with("info: Unavailable") && info.contains("table mutex"),
        "{info}"
    );
}

#[test]
fn a_corrupt_units_count_is_incompatible_not_a_grant() {
    // Every entry of a semaphore region of 3 permits claims units that no holder has: more
    // than the permits, or fewer but not the holders' sum (0).
    for bad in [1u32, 2, 3, 4, u32::MAX] {
        let name = fresh("units", Base::Semaphore);
        let l = Layout::of(&std::fs::read(name.path()).unwrap());
        for e in 0..l.capacity as usize {
            poke(
                &name,
                l.off_entries + e * ENTRY_SIZE + ENTRY_UNITS,
                &bad.to_le_bytes(),
            );
        }
        let ending = spawn("units", &name.0, Base::Semaphore, child_limit()).finish();
        assert!(ending.clean(), "units {bad}: {}", ending.describe());
        assert_eq!(line(&ending, "open: "), "open: ok");
        let got = line(&ending, "acquire: ");
        assert!(
            got.starts_with("acquire: Incompatible") && got.contains("units"),
            "units {bad}: {got}"
        );
    }
}

#[test]
fn a_semaphore_regions_permits_are_checked_at_open() {
    // The header's permits, with the checksum made to match: other permits than the
    // opener's, out of range, or none (a lock region).
    for permits in [0u32, 4, 32768, u32::MAX] {
        let name = fresh("permits", Base::Semaphore);
        let mut bytes = std::fs::read(name.path()).unwrap();
        bytes[PERMITS_AT..PERMITS_AT + 4].copy_from_slice(&permits.to_le_bytes());
        let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..CHECKSUM_AT]);
        poke(&name, PERMITS_AT, &permits.to_le_bytes());
        poke(&name, CHECKSUM_AT, &sum.to_le_bytes());
        let ending = spawn("open", &name.0, Base::Semaphore, child_limit()).finish();
        assert!(ending.clean(), "permits {permits}: {}", ending.describe());
        let open = line(&ending, "open: ");
        assert!(
            open.starts_with("open: Incompatible") && open.contains("permits"),
            "permits {permits}: {open}"
        );
    }
}

// ----- the fuzz test ----------------------------------------------------------------------------

/// splitmix64: a small seeded generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// The keys the populated regions use and the fuzz children try.
const KEYS: [&[u8]; 12] = [
    b"k0", b"k1", b"k2", b"k3", b"k4", b"k5", b"k6", b"k7", b"k8", b"k9", b"k10", b"k11",
];

/// A populated region's bytes: keys held exclusively (twice by one owner, when reentrant),
/// shared by two opens, leased, waited for, and bound but free. Each role takes the next of
/// [`KEYS`] that a try acquire gets (two keys may share a stripe). Taken while nobody holds
/// the table mutex.
fn populated(base: Base) -> Vec<u8> {
    let name = Name::new(&format!("base-{}", base.as_str()));
    let a = base.open(&name.0).unwrap();
    let b = base.open(&name.0).unwrap();
    let mut x = LockOptions::new().wait(Wait::No);
    if base == Base::Striped {
        x = x.owner(Owner::new(7).unwrap());
    }
    let mut keys = KEYS.iter().map(|k| LockKey::new(k));
    // Acquisitions to release at the end: (open, acquisition).
    let mut held: Vec<(&Arc<dyn KeyedLock>, keylock_core::Acquisition)> = Vec::new();
    let mut take = |by: &'static str| -> LockKey<'static> {
        for k in keys.by_ref() {
            let got = match by {
                // (A semaphore key is taken whole: all 3 units.)
                "exclusive" if base == Base::Semaphore => {
                    a.acquire(k, &x.weight(3)).map(|acq| vec![(&a, acq)])
                }
                "exclusive" => a.acquire(k, &x).map(|acq| vec![(&a, acq)]),
                "reentrant" => a.acquire(k, &x).and_then(|one| {
                    let two = a.acquire(k, &x)?;
                    Ok(vec![(&a, one), (&a, two)])
                }),
                "shared" => a.acquire(k, &x.shared()).and_then(|one| {
                    let two = b.acquire(k, &x.shared())?;
                    Ok(vec![(&a, one), (&b, two)])
                }),
                "leased" => a
                    .acquire(k, &x.lease(Duration::from_secs(600)))
                    .map(|acq| vec![(&a, acq)]),
                "free" => b
                    .acquire(k, &x)
                    .and_then(|acq| b.release(acq))
                    .map(|()| vec![]),
                other => panic!("{other}"),
            };
            if let Ok(acqs) = got {
                held.extend(acqs);
                return k;
            }
        }
        panic!("no key left for {by}");
    };
    take(if base == Base::Striped {
        "reentrant"
    } else {
        "exclusive"
    });
    take("shared");
    take("leased");
    take("free");
    take("free");
    let waited = take("exclusive");
    let b2 = Arc::clone(&b);
    let waiter = std::thread::spawn(move || {
        b2.acquire(
            waited,
            &LockOptions::new().wait(Wait::For(Duration::from_secs(60))),
        )
    });
    let t0 = Instant::now();
    while a.info(waited).unwrap().is_none_or(|i| i.waiters < 1) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the waiter never queued"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let bytes = loop {
        let bytes = std::fs::read(name.path()).unwrap();
        if u32_at(&bytes, RUNTIME + MUTEX_LOCK) == 0 {
            break bytes;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the table mutex never free"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    // The waiter gets its key once the holder of `waited` (the last exclusive one) lets go.
    let (by, last) = held.pop().unwrap();
    by.release(last).unwrap();
    b.release(waiter.join().unwrap().unwrap()).unwrap();
    for (by, acq) in held.into_iter().rev() {
        by.release(acq).unwrap();
    }
    bytes
}

/// One change a trial makes to a region, for the report.
struct Mutation {
    at: usize,
    what: &'static str,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for Mutation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}: ", self.what, self.at)?;
        for b in &self.bytes {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A 32-bit value likely to break something at a word of a table record.
fn nasty_u32(rng: &mut Rng, old: u32, l: &Layout) -> u32 {
    match rng.below(12) {
        0 => 0,
        1 => rng.below(6) as u32,
        2 => l.capacity.wrapping_add(rng.below(3) as u32).wrapping_sub(1),
        3 => l.nodes.wrapping_add(rng.below(3) as u32).wrapping_sub(1),
        4 => rng.pick(&[255, 256, 257, 4095, 4096]),
        5 => rng.pick(&[0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0xffff_fffe]),
        6 => old ^ (1 << rng.below(32)),
        7 => old.wrapping_add(1),
        8 => old.wrapping_sub(1),
        9 => rng.below(l.nodes as usize + 2) as u32,
        10 => rng.below(l.capacity as usize + 2) as u32,
        _ => rng.next() as u32,
    }
}

/// A value for the word at `field` of a glibc mutex.
fn nasty_mutex_word(rng: &mut Rng, field: usize, old: u32, l: &Layout) -> u32 {
    let random = rng.next() as u32;
    match field {
        MUTEX_LOCK => rng.pick(&[
            0,
            STUCK_LOCK_WORD,
            std::process::id(),
            0x4000_0000,
            0x4000_0000 | std::process::id(),
            0xc000_0000 | 12345,
            0x8000_0000,
            0x8000_0000 | std::process::id(),
            0xffff_ffff,
            random,
        ]),
        MUTEX_OWNER => rng.pick(&[0, 0x7fff_ffff, 0x7fff_fffe, std::process::id(), 0xffff_ffff]),
        MUTEX_KIND => rng.pick(&[
            0x100, 0x180, 0xc0, 0x80, 0x10, 0x90, 0x190, 0x20, 0xa0, 0x91, 0x92, 0x93, 0x200,
            random,
        ]),
        _ => nasty_u32(rng, old, l),
    }
}

/// Corrupts `bytes` (a copy of a populated region) in 1 to 3 places.
fn corrupt(rng: &mut Rng, bytes: &mut [u8]) -> Vec<Mutation> {
    let l = Layout::of(bytes);
    let mut done = Vec::new();
    for _ in 0..1 + rng.below(3) {
        // A word of a record: (where, what); 4-byte words, so each half of a u64 field too.
        let (at, what, mutex_field) = match rng.below(100) {
            0..12 => {
                let f = 4 * rng.below(MUTEX_SIZE / 4);
                (RUNTIME + f, "table mutex", Some(f))
            }
            12..22 => {
                let f = 4 * rng.below(MUTEX_SIZE / 4);
                let slot = if rng.below(4) == 0 {
                    rng.below(256)
                } else {
                    rng.below(3)
                };
                (PROCS + slot * PROC_SIZE + f, "slot mutex", Some(f))
            }
            22..34 => (
                RUNTIME + MUTEX_SIZE + 4 * rng.below(RUNTIME_FIELDS / 4),
                "runtime",
                None,
            ),
            34..42 => {
                let slot = if rng.below(4) == 0 {
                    rng.below(256)
                } else {
                    rng.below(3)
                };
                let f = MUTEX_SIZE + 4 * rng.below((PROC_SIZE - MUTEX_SIZE) / 4);
                (PROCS + slot * PROC_SIZE + f, "slot", None)
            }
            42..67 => {
                let e = rng.below(l.capacity as usize);
                // The fields (88 bytes) mostly, sometimes the key bytes.
                let f = if rng.below(6) == 0 {
                    88 + 4 * rng.below(64)
                } else {
                    4 * rng.below(22)
                };
                (l.off_entries + e * ENTRY_SIZE + f, "entry", None)
            }
            67..73 if l.buckets > 0 => (
                l.off_buckets + 4 * rng.below(l.buckets as usize),
                "bucket",
                None,
            ),
            67..93 => {
                let n = if rng.below(3) == 0 {
                    rng.below(l.nodes as usize)
                } else {
                    rng.below(8)
                };
                (
                    l.off_nodes + n * NODE_SIZE + 4 * rng.below(NODE_SIZE / 4),
                    "node",
                    None,
                )
            }
            93..97 => {
                // Random bytes anywhere past the header.
                let len = 1 + rng.below(64);
                let at = RUNTIME + rng.below(bytes.len() - RUNTIME - len);
                let junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                bytes[at..at + len].copy_from_slice(&junk);
                done.push(Mutation {
                    at,
                    what: "random bytes",
                    bytes: junk,
                });
                continue;
            }
            _ => {
                // A header field, with the checksum made to match.
                let at = 4 * rng.below(CHECKSUM_AT / 4);
                let v = nasty_u32(rng, u32_at(bytes, at), &l);
                bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
                let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..CHECKSUM_AT]);
                bytes[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
                done.push(Mutation {
                    at,
                    what: "header (checksum fixed)",
                    bytes: v.to_le_bytes().to_vec(),
                });
                continue;
            }
        };
        let old = u32_at(bytes, at);
        let v = match mutex_field {
            Some(f) => nasty_mutex_word(rng, f, old, &l),
            None => nasty_u32(rng, old, &l),
        };
        bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        done.push(Mutation {
            at,
            what,
            bytes: v.to_le_bytes().to_vec(),
        });
    }
    done
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number"))
    })
}

/// One trial: its number, base, mutations, region and child.
struct Trial {
    number: u64,
    base: Base,
    mutations: Vec<Mutation>,
    name: Name,
    child: Running,
}

#[test]
fn fuzzed_regions_neither_crash_nor_hang() {
    if std::env::var("KEYLOCK_HOSTILE_CHILD").is_ok() {
        return;
    }
    let seed = env_u64("KEYLOCK_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    let trials = env_u64("KEYLOCK_FUZZ_TRIALS").unwrap_or(300);
    let only = env_u64("KEYLOCK_FUZZ_ONLY");
    let jobs = env_u64("KEYLOCK_FUZZ_JOBS").unwrap_or(4).max(1) as usize;
    println!(
        "shm fuzz: seed {seed}, {trials} trials, {jobs} at once \
         (replay: KEYLOCK_FUZZ_SEED={seed}; one trial: KEYLOCK_FUZZ_ONLY=N)"
    );
    let bases = [
        (Base::Pool, populated(Base::Pool)),
        (Base::Striped, populated(Base::Striped)),
        (Base::Semaphore, populated(Base::Semaphore)),
    ];
    let numbers: Vec<u64> = match only {
        Some(n) => vec![n],
        None => (0..trials).collect(),
    };
    let mut queue = numbers.into_iter();
    let mut running: Vec<Trial> = Vec::new();
    let mut failures = Vec::new();
    let (mut opened, mut refused) = (0u32, 0u32);
    loop {
        while running.len() < jobs {
            let Some(number) = queue.next() else { break };
            let mut rng = Rng(seed ^ number.wrapping_mul(0xA24B_AED4_963E_E407));
            let (base, original) = &bases[rng.below(bases.len())];
            let mut bytes = original.clone();
            let mutations = corrupt(&mut rng, &mut bytes);
            let name = Name::new("fuzz");
            {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(name.path())
                    .unwrap();
                f.write_all(&bytes).unwrap();
            }
            let child = spawn("fuzz", &name.0, *base, child_limit());
            running.push(Trial {
                number,
                base: *base,
                mutations,
                name,
                child,
            });
        }
        if running.is_empty() {
            break;
        }
        let mut i = 0;
        while i < running.len() {
            match running[i].child.poll() {
                None => i += 1,
                Some(ending) => {
                    let trial = running.swap_remove(i);
                    if !ending.clean() {
                        failures.push(format!(
                            "trial {} ({}; {:?}): {}",
                            trial.number,
                            trial.base.as_str(),
                            trial.mutations,
                            ending.describe()
                        ));
                    } else if ending.stdout().contains("open: ok") {
                        opened += 1;
                    } else {
                        refused += 1;
                    }
                    drop(trial.name);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    println!(
        "shm fuzz: {opened} corrupted regions opened and used, {refused} refused at open, \
         {} crashed or hung",
        failures.len()
    );
    for f in failures.iter().take(20) {
        println!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of the trials crashed or hung (seed {seed}); the first: {}",
        failures.len(),
        failures[0]
    );
}

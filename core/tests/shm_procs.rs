//! The host scope across real processes: this test binary re-runs itself as child processes
//! (the `child` test, driven by `KEYLOCK_SHM_CHILD`), which share a region and a data file.
//! Exact counts in exclusive and shared modes, kill -9 of holders and waiters, and permission
//! denied for a process of another user.
#![cfg(all(feature = "shm", target_os = "linux"))]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use keylock_core::shm;
use keylock_core::{Error, KeyedGuard, KeyedLock, LockKey, LockOptions, Mode, Wait};

/// Data shared by the processes of a test: a mapped file of atomics. The counters are read and
/// written with separate loads and stores, so only the lock under test keeps them exact.
struct Data {
    ptr: *mut AtomicU64,
    len: usize,
    _path: String,
}

// SAFETY: the mapping is only accessed through atomics.
unsafe impl Send for Data {}
// SAFETY: as above.
unsafe impl Sync for Data {}

const SLOTS: usize = 512;
/// Data layout (u64 slots): a[k] at k, b[k] at 64 + k, inside[k] at 128 + k, max inside at
/// 192 + k, per-child completed writes at 256 + child, shared-barrier count at 400.
const A: usize = 0;
const B: usize = 64;
const INSIDE: usize = 128;
const MAX_INSIDE: usize = 192;
const DONE: usize = 256;
const BARRIER: usize = 400;
/// Set to 1 to end the "keep-using" child's loop; its completed rounds go to `ROUNDS`.
const STOP: usize = 402;
const ROUNDS: usize = 403;

impl Data {
    fn open(path: &str) -> Data {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap();
        let len = SLOTS * 8;
        f.set_len(len as u64).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a shared read-write mapping of a file we just sized.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Data {
            ptr: p.cast(),
            len,
            _path: path.to_owned(),
        }
    }

    fn at(&self, i: usize) -> &AtomicU64 {
        assert!(i < SLOTS);
        // SAFETY: i < SLOTS, inside the mapping, 8-aligned; atomics are valid for any bytes.
        unsafe { &*self.ptr.add(i) }
    }
}

impl Drop for Data {
    fn drop(&mut self) {
        // SAFETY: our mapping of `len` bytes.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

struct Names {
    region: String,
    data: String,
}

impl Names {
    fn new(test: &str) -> Names {
        static N: AtomicU32 = AtomicU32::new(0);
        let region = format!(
            "p-{}-{test}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let _ = shm::unlink(&region);
        let data = format!("/dev/shm/keylock-test-data.{region}");
        let _ = std::fs::remove_file(&data);
        Names { region, data }
    }
}

impl Drop for Names {
    fn drop(&mut self) {
        let _ = shm::unlink(&self.region);
        let _ = std::fs::remove_file(&self.data);
    }
}

fn spawn(role: &str, names: &Names, args: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env("KEYLOCK_SHM_CHILD", role)
        .env("KEYLOCK_SHM_REGION", &names.region)
        .env("KEYLOCK_SHM_DATA", &names.data)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in args {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Reads stdout lines until one starts with `prefix`; returns its rest.
fn expect_line(child: &mut Child, prefix: &str) -> String {
    let out = child.stdout.as_mut().unwrap();
    let mut reader = BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        assert_ne!(
            reader.read_line(&mut line).unwrap(),
            0,
            "child exited before {prefix:?}"
        );
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.trim().to_owned();
        }
    }
}

fn wait_ok(mut child: Child, limit: Duration) {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "child failed: {status}");
            return;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("deadlock: child did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn kill9(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    let _ = child.wait();
}

fn env_usize(name: &str) -> usize {
    std::env::var(name).map_or(0, |v| v.parse().unwrap())
}

fn open_env() -> Arc<dyn KeyedLock> {
    let region = std::env::var("KEYLOCK_SHM_REGION").unwrap();
    let stripes = env_usize("KEYLOCK_SHM_STRIPES");
    let permits = env_usize("KEYLOCK_SHM_PERMITS");
    let mut o = keylock_core::OpenOptions::default();
    if stripes > 0 {
        o.stripes = Some(stripes);
    }
    if permits > 0 {
        o.permits = Some(permits as u32);
    }
    keylock_core::open_with(&format!("shm:{region}"), &o).unwrap()
}

/// A small xorshift, seeded per process.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        Rng(u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn spin(n: u64) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

/// One critical section on key `key`: a[k] += 1, a pause, b[k] += 1, counting holders inside.
fn write_section(d: &Data, key: usize, pause: u64) {
    let now = d.at(INSIDE + key).fetch_add(1, Ordering::SeqCst) + 1;
    d.at(MAX_INSIDE + key).fetch_max(now, Ordering::SeqCst);
    let a = d.at(A + key).load(Ordering::Relaxed);
    d.at(A + key).store(a + 1, Ordering::Relaxed);
    spin(pause);
    let b = d.at(B + key).load(Ordering::Relaxed);
    d.at(B + key).store(b + 1, Ordering::Relaxed);
    d.at(INSIDE + key).fetch_sub(1, Ordering::SeqCst);
}

/// The child processes' entry point (a no-op when run as a plain test).
#[test]
fn child() {
    let Ok(role) = std::env::var("KEYLOCK_SHM_CHILD") else {
        return;
    };
    let data = Data::open(&std::env::var("KEYLOCK_SHM_DATA").unwrap());
    let lock = open_env();
    let x = LockOptions::new();
    let mut rng = Rng::new();
    match role.as_str() {
        // Mixed exclusive writes and shared reads; reports its completed writes.
        "count" => {
            let keys = env_usize("KEYLOCK_SHM_KEYS");
            let iters = env_usize("KEYLOCK_SHM_ITERS");
            let me = env_usize("KEYLOCK_SHM_INDEX");
            let mut writes = 0;
            for _ in 0..iters {
                let key = (rng.next() as usize) % keys;
                let bytes = (key as u64).to_be_bytes();
                if rng.next().is_multiple_of(4) {
                    let acq = lock.acquire(LockKey::new(&bytes), &x.shared()).unwrap();
                    assert_eq!(d_inside(&data, key), 0, "a writer inside with a reader");
                    let (a, b) = (
                        data.at(A + key).load(Ordering::Relaxed),
                        data.at(B + key).load(Ordering::Relaxed),
                    );
                    assert_eq!(a, b, "a reader saw a half-made write");
                    lock.release(acq).unwrap();
                } else {
                    let acq = lock.acquire(LockKey::new(&bytes), &x).unwrap();
                    write_section(&data, key, rng.next() % 200);
                    lock.release(acq).unwrap();
                    writes += 1;
                }
            }
            data.at(DONE + me).store(writes, Ordering::SeqCst);
        }
        // Holds the key shared until all N shared holders are inside together.
        "barrier" => {
            let n = env_usize("KEYLOCK_SHM_N") as u64;
            let acq = lock.acquire(LockKey::new(b"shared"), &x.shared()).unwrap();
            data.at(BARRIER).fetch_add(1, Ordering::SeqCst);
            let t0 = Instant::now();
            while data.at(BARRIER).load(Ordering::SeqCst) < n {
                assert!(
                    t0.elapsed() < Duration::from_secs(30),
                    "the shared holders were never inside together"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            // Everyone stays until everyone has seen everyone.
            data.at(BARRIER + 1).fetch_add(1, Ordering::SeqCst);
            while data.at(BARRIER + 1).load(Ordering::SeqCst) < n {
                std::thread::sleep(Duration::from_millis(1));
            }
            lock.release(acq).unwrap();
        }
        // Takes the key and keeps writing under it until killed.
        "hold" => {
            let acq = lock.acquire(LockKey::new(b"k"), &x).unwrap();
            println!("held {}", acq.fence());
            loop {
                write_section(&data, 0, rng.next() % 2000);
            }
        }
        // Takes `KEYLOCK_SHM_WEIGHT` units of the semaphore key "k" and keeps them until killed.
        "hold-units" => {
            let weight = env_usize("KEYLOCK_SHM_WEIGHT") as u32;
            let acq = lock
                .acquire(LockKey::new(b"k"), &LockOptions::new().weight(weight))
                .unwrap();
            assert_eq!(acq.weight(), weight);
            println!("held {}", acq.fence());
            std::thread::sleep(Duration::from_secs(60));
        }
        // Waits for the key (the test kills it while it waits).
        "wait" => {
            println!("waiting");
            let acq = lock.acquire(LockKey::new(b"k"), &x).unwrap();
            println!("got {}", acq.fence());
            std::thread::sleep(Duration::from_secs(60));
        }
        // Acquire-write-release cycles until killed; checks each acquisition's data.
        "cycle" => {
            let keys = env_usize("KEYLOCK_SHM_KEYS");
            println!("started");
            loop {
                let key = (rng.next() as usize) % keys;
                let bytes = (key as u64).to_be_bytes();
                let acq = lock
                    .acquire(
                        LockKey::new(&bytes),
                        &x.wait(Wait::For(Duration::from_secs(20))),
                    )
                    .unwrap();
                let (a, b) = (
                    data.at(A + key).load(Ordering::Relaxed),
                    data.at(B + key).load(Ordering::Relaxed),
                );
                if acq.owner_died() {
                    assert!(a == b || a == b + 1, "a dead writer left {a} / {b}");
                    data.at(B + key).store(a, Ordering::Relaxed);
                } else {
                    assert_eq!(a, b, "a live writer's section was interrupted");
                }
                write_section(&data, key, rng.next() % 3000);
                lock.release(acq).unwrap();
            }
        }
        // Holds key "x" exclusively, "s" shared, then takes the table mutex and is killed.
        "die-in-table" => {
            let x = lock.acquire(LockKey::new(b"x"), &x).unwrap();
            let s = lock
                .acquire(LockKey::new(b"s"), &LockOptions::new().shared())
                .unwrap();
            let region = std::env::var("KEYLOCK_SHM_REGION").unwrap();
            let raw = keylock_core::shm::ShmLock::open(&region, &Default::default()).unwrap();
            raw.hold_table_mutex_until_killed();
            println!("holding {} {}", x.fence(), s.fence());
            std::thread::sleep(Duration::from_secs(60));
        }
        // Holds key "mine" and keeps using the region (acquire, release, info on other keys)
        // until told to stop; then checks that its hold is still there.
        "keep-using" => {
            let mine = lock.acquire(LockKey::new(b"mine"), &x).unwrap();
            println!("ready {}", mine.fence());
            let mut rounds = 0u64;
            while data.at(STOP).load(Ordering::SeqCst) == 0 {
                let key = (rounds % 8).to_be_bytes();
                let acq = lock.acquire(LockKey::new(&key), &x).unwrap();
                assert!(lock.info(LockKey::new(&key)).unwrap().is_some());
                lock.release(acq).unwrap();
                rounds += 1;
                data.at(ROUNDS).store(rounds, Ordering::SeqCst);
            }
            assert!(lock.is_current(&mine).unwrap(), "the hold was lost");
            lock.release(mine).unwrap();
        }
        other => panic!("unknown child role {other}"),
    }
}

fn d_inside(d: &Data, key: usize) -> u64 {
    d.at(INSIDE + key).load(Ordering::SeqCst)
}

fn counts_across_processes(stripes: Option<usize>) {
    let names = Names::new(if stripes.is_some() {
        "count-s"
    } else {
        "count"
    });
    let data = Data::open(&names.data);
    const PROCS: usize = 4;
    const KEYS: usize = 8;
    const ITERS: usize = 2000;
    let mut extra = vec![
        ("KEYLOCK_SHM_KEYS", KEYS.to_string()),
        ("KEYLOCK_SHM_ITERS", ITERS.to_string()),
    ];
    if let Some(s) = stripes {
        extra.push(("KEYLOCK_SHM_STRIPES", s.to_string()));
    }
    let children: Vec<_> = (0..PROCS)
        .map(|i| {
            let mut args = extra.clone();
            args.push(("KEYLOCK_SHM_INDEX", i.to_string()));
            spawn("count", &names, &args)
        })
        .collect();
    for c in children {
        wait_ok(c, Duration::from_secs(120));
    }
    let writes: u64 = (0..PROCS)
        .map(|i| data.at(DONE + i).load(Ordering::SeqCst))
        .sum();
    let a: u64 = (0..KEYS)
        .map(|k| data.at(A + k).load(Ordering::SeqCst))
        .sum();
    let b: u64 = (0..KEYS)
        .map(|k| data.at(B + k).load(Ordering::SeqCst))
        .sum();
    assert!(writes > 0);
    assert_eq!((a, b), (writes, writes), "lost or torn updates");
    for k in 0..KEYS {
        assert!(
            data.at(MAX_INSIDE + k).load(Ordering::SeqCst) <= 1,
            "two writers inside key {k}"
        );
    }
}

#[test]
fn exact_counts_across_processes_pool() {
    counts_across_processes(None);
}

#[test]
fn exact_counts_across_processes_striped() {
    counts_across_processes(Some(4));
}

#[test]
fn shared_holders_of_four_processes_are_inside_together() {
    let names = Names::new("barrier");
    let data = Data::open(&names.data);
    let n = 4;
    let children: Vec<_> = (0..n)
        .map(|_| spawn("barrier", &names, &[("KEYLOCK_SHM_N", n.to_string())]))
        .collect();
    for c in children {
        wait_ok(c, Duration::from_secs(60));
    }
    assert_eq!(data.at(BARRIER + 1).load(Ordering::SeqCst), n as u64);
}

fn parent_open(names: &Names) -> Arc<dyn KeyedLock> {
    keylock_core::open(&format!("shm:{}", names.region)).unwrap()
}

/// 100 times: a child takes the key and writes under it; the parent waits for the key; the
/// child is killed at a random point of its critical section; the parent's wait ends with
/// `owner_died`, a higher fence, and data at most one step torn. Prints the recovery times.
#[test]
fn killed_holders_are_recovered_with_owner_died() {
    let names = Names::new("kill-holder");
    let data = Data::open(&names.data);
    let lock = parent_open(&names);
    let mut rng = Rng::new();
    let mut recovery = Vec::new();
    for round in 0..100 {
        let mut child = spawn("hold", &names, &[]);
        let fence: u64 = expect_line(&mut child, "held ").parse().unwrap();
        let l2 = Arc::clone(&lock);
        let waiter = std::thread::spawn(move || {
            let acq = l2.acquire(
                LockKey::new(b"k"),
                &LockOptions::new().wait(Wait::For(Duration::from_secs(10))),
            );
            (acq, Instant::now())
        });
        let t0 = Instant::now();
        while lock
            .info(LockKey::new(b"k"))
            .unwrap()
            .map_or(0, |i| i.waiters)
            < 1
        {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the waiter never queued"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(Duration::from_micros(rng.next() % 3000));
        // Timed from just before the kill: the recovery can finish before kill(2) returns.
        let killed = Instant::now();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
        let (acq, got) = waiter.join().unwrap();
        let acq = acq.unwrap_or_else(|e| panic!("round {round}: {e}"));
        let _ = child.wait();
        recovery.push(got.saturating_duration_since(killed));
        assert!(acq.owner_died(), "round {round}: owner_died not reported");
        assert!(
            acq.fence() > fence + 1,
            "round {round}: fence {} after {fence}",
            acq.fence()
        );
        let (a, b) = (
            data.at(A).load(Ordering::SeqCst),
            data.at(B).load(Ordering::SeqCst),
        );
        assert!(
            a == b || a == b + 1,
            "round {round}: torn by more than one step: {a} / {b}"
        );
        data.at(B).store(a, Ordering::SeqCst);
        data.at(INSIDE).store(0, Ordering::SeqCst);
        lock.release(acq).unwrap();
    }
    recovery.sort();
    println!(
        "recovery after kill -9: p50 {:?}, p99 {:?}, max {:?}",
        recovery[49], recovery[98], recovery[99]
    );
}

/// `KeyedGuard::owner_died` reads the acquisition's flag: true for the guard that takes a key
/// from a holder killed with it, false for the next one.
#[test]
fn a_guard_after_a_killed_holder_says_owner_died() {
    let names = Names::new("kill-guard");
    let _data = Data::open(&names.data);
    let lock = parent_open(&names);
    let mut child = spawn("hold", &names, &[]);
    let fence: u64 = expect_line(&mut child, "held ").parse().unwrap();
    kill9(&mut child);
    let opts = LockOptions::new().wait(Wait::For(Duration::from_secs(10)));
    let guard = KeyedGuard::acquire(&lock, LockKey::new(b"k"), &opts).unwrap();
    assert!(guard.owner_died());
    assert!(guard.fence() > fence + 1);
    guard.release().unwrap();
    let guard = KeyedGuard::acquire(&lock, LockKey::new(b"k"), &opts).unwrap();
    assert!(!guard.owner_died(), "owner_died is reported once");
    drop(guard);
    assert!(!lock.is_locked(LockKey::new(b"k")).unwrap());
}

/// 100 kills at random points of children that cycle through acquire-write-release on a few
/// keys: nothing stays stuck, survivors see consistent data, and at the end every key is free.
#[test]
fn random_kills_leave_nothing_stuck() {
    let names = Names::new("kill-random");
    let data = Data::open(&names.data);
    const KEYS: usize = 4;
    let args = [("KEYLOCK_SHM_KEYS", KEYS.to_string())];
    let mut children: Vec<Child> = (0..3).map(|_| spawn("cycle", &names, &args)).collect();
    for c in &mut children {
        expect_line(c, "started");
    }
    let mut rng = Rng::new();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_micros(rng.next() % 5000));
        let i = (rng.next() as usize) % children.len();
        if let Some(status) = children[i].try_wait().unwrap() {
            panic!("a cycling child failed: {status}");
        }
        kill9(&mut children[i]);
        children[i] = spawn("cycle", &names, &args);
        expect_line(&mut children[i], "started");
    }
    for c in &mut children {
        assert!(c.try_wait().unwrap().is_none(), "a cycling child failed");
        kill9(c);
    }
    let lock = parent_open(&names);
    for key in 0..KEYS {
        let bytes = (key as u64).to_be_bytes();
        let acq = lock
            .acquire(
                LockKey::new(&bytes),
                &LockOptions::new().wait(Wait::For(Duration::from_secs(10))),
            )
            .unwrap_or_else(|e| panic!("key {key} stuck: {e}"));
        let info = lock.info(LockKey::new(&bytes)).unwrap().unwrap();
        assert_eq!(info.waiters, 0, "a dead process's wait is still queued");
        lock.release(acq).unwrap();
    }
    let _ = data;
}

/// A process killed while waiting leaves no reservation: the queue empties, and the release
/// does not hand the key to the dead.
#[test]
fn killed_waiters_leave_no_reservation() {
    let names = Names::new("kill-waiter");
    let _data = Data::open(&names.data);
    let lock = parent_open(&names);
    let key = LockKey::new(b"k");
    let held = lock.acquire(key, &LockOptions::new()).unwrap();
    let mut child = spawn("wait", &names, &[]);
    expect_line(&mut child, "waiting");
    let t0 = Instant::now();
    while lock.info(key).unwrap().unwrap().waiters < 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the child never queued"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    kill9(&mut child);
    assert_eq!(
        lock.info(key).unwrap().unwrap().waiters,
        0,
        "the dead waiter's reservation stayed"
    );
    lock.release(held).unwrap();
    assert!(
        !lock.is_locked(key).unwrap(),
        "the key went to the dead waiter"
    );
    let again = lock
        .acquire(key, &LockOptions::new().wait(Wait::No))
        .unwrap();
    assert!(!again.owner_died());
    lock.release(again).unwrap();
}

/// A process of another user may not open a 0600 region: `PermissionDenied`. As root (as the
/// tests run here) a forked child drops to `nobody` first; as another user, the region is made
/// unreadable instead.
#[test]
fn permission_denied_for_another_user() {
    let names = Names::new("perm");
    let lock = parent_open(&names);
    let name = format!("shm:{}", names.region);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        let path = shm::path(&names.region).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        assert!(matches!(
            keylock_core::open(&name),
            Err(Error::PermissionDenied(_))
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        return;
    }
    // SAFETY: the child only drops privileges, opens, and exits with _exit (no unwinding, no
    // destructors of the parent's state); glibc's malloc is usable after fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: plain system calls in the child; it never returns into the test harness.
        unsafe {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(2);
            }
            let code = match keylock_core::open(&name) {
                Err(Error::PermissionDenied(_)) => 0,
                Err(_) => 3,
                Ok(_) => 4,
            };
            libc::_exit(code);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "the child crashed");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "2: setuid failed, 3: another error, 4: it opened"
    );
    drop(lock);
    let _ = Mode::Shared;
}

/// A child of fork() must not act as its parent's open (its holds would count as the
/// parent's): the inherited handle answers `Unavailable`, and a fresh open works.
#[test]
fn a_forked_child_reopens() {
    let names = Names::new("fork");
    let lock = parent_open(&names);
    let held = lock
        .acquire(LockKey::new(b"k"), &LockOptions::new())
        .unwrap();
    let name = format!("shm:{}", names.region);
    // SAFETY: the child makes a few calls and leaves with _exit, never returning into the
    // test harness; glibc's malloc is usable after fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let inherited = matches!(
            lock.acquire(LockKey::new(b"other"), &LockOptions::new().wait(Wait::No)),
            Err(Error::Unavailable(_))
        );
        let fresh = keylock_core::open(&name).is_ok_and(|l| {
            l.acquire(LockKey::new(b"k"), &LockOptions::new().wait(Wait::No))
                == Err(Error::WouldBlock)
        });
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(if inherited && fresh { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child misbehaved"
    );
    lock.release(held).unwrap();
}

/// A process killed while it holds the table mutex (the region's one critical section):
/// the next locker gets EOWNERDEAD, rebuilds the table, and everything is as it should be:
/// the dead process's keys are free (its exclusive one with owner_died and a higher fence),
/// everyone else's holds and waits are intact.
#[test]
fn a_death_inside_the_table_is_repaired() {
    let names = Names::new("die-in-table");
    let _data = Data::open(&names.data);
    let lock = parent_open(&names);
    let mine = lock
        .acquire(LockKey::new(b"mine"), &LockOptions::new())
        .unwrap();
    let shared_mine = lock
        .acquire(LockKey::new(b"s"), &LockOptions::new().shared())
        .unwrap();
    // A waiter of ours, queued behind our own hold, must survive the repair.
    let l2 = Arc::clone(&lock);
    let waiter = std::thread::spawn(move || {
        l2.acquire(
            LockKey::new(b"mine"),
            &LockOptions::new().wait(Wait::For(Duration::from_secs(20))),
        )
    });
    let t0 = Instant::now();
    while lock.info(LockKey::new(b"mine")).unwrap().unwrap().waiters < 1 {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut child = spawn("die-in-table", &names, &[]);
    let line = expect_line(&mut child, "holding ");
    let fence: u64 = line.split_whitespace().next().unwrap().parse().unwrap();
    kill9(&mut child);
    // Repaired on the next lock of the table.
    let x = lock
        .acquire(
            LockKey::new(b"x"),
            &LockOptions::new().wait(Wait::For(Duration::from_secs(10))),
        )
        .unwrap();
    assert!(x.owner_died(), "the dead process's key was not reported");
    assert!(x.fence() > fence + 1);
    let s = lock.info(LockKey::new(b"s")).unwrap().unwrap();
    assert_eq!(
        (s.mode, s.holders),
        (Mode::Shared, 1),
        "only our shared hold is left"
    );
    let m = lock.info(LockKey::new(b"mine")).unwrap().unwrap();
    assert_eq!(
        (m.fence, m.waiters),
        (mine.fence(), 1),
        "our hold and our waiter survive"
    );
    lock.release(mine).unwrap();
    let handed = waiter.join().unwrap().unwrap();
    assert!(!handed.owner_died());
    lock.release(handed).unwrap();
    lock.release(shared_mine).unwrap();
    lock.release(x).unwrap();
    for key in [&b"x"[..], b"s", b"mine"] {
        assert!(!lock.is_locked(LockKey::new(key)).unwrap());
    }
}

/// The same for async waiters: the agent thread watches the holder for them, so a killed
/// holder's key reaches an async waiter (with `owner_died`) without waiting out a re-check.
#[test]
fn killed_holders_are_recovered_for_async_waiters() {
    let names = Names::new("kill-async");
    let _data = Data::open(&names.data);
    let lock = parent_open(&names);
    let mut recovery = Vec::new();
    for round in 0..20 {
        let mut child = spawn("hold", &names, &[]);
        let fence: u64 = expect_line(&mut child, "held ").parse().unwrap();
        let fut = Arc::clone(&lock).acquire_async(
            LockKey::new(b"k"),
            &LockOptions::new().wait(Wait::For(Duration::from_secs(10))),
        );
        let waiter = std::thread::spawn(move || (futures::executor::block_on(fut), Instant::now()));
        let t0 = Instant::now();
        while lock
            .info(LockKey::new(b"k"))
            .unwrap()
            .map_or(0, |i| i.waiters)
            < 1
        {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the async waiter never queued"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(Duration::from_millis(2));
        let killed = Instant::now();
        kill9(&mut child);
        let (acq, got) = waiter.join().unwrap();
        let acq = acq.unwrap_or_else(|e| panic!("round {round}: {e}"));
        recovery.push(got.saturating_duration_since(killed));
        assert!(acq.owner_died(), "round {round}: owner_died not reported");
        assert!(acq.fence() > fence + 1);
        lock.release(acq).unwrap();
    }
    recovery.sort();
    println!(
        "async recovery after kill -9: p50 {:?}, max {:?}",
        recovery[10], recovery[19]
    );
}

/// keylock's own `unlink` and re-create never pull a region from under a process that has it
/// open: `unlink` only removes the name (the file lives on while mapped), and a new region is
/// a new file, sized before it is linked in. (Were either to truncate the file, the process
/// using it would die of SIGBUS at its next access.)
#[test]
fn unlink_and_recreate_leave_a_running_process_alone() {
    let names = Names::new("recreate");
    let data = Data::open(&names.data);
    let mut child = spawn("keep-using", &names, &[]);
    expect_line(&mut child, "ready ");
    for round in 0..20u64 {
        assert!(shm::unlink(&names.region).unwrap(), "round {round}");
        let fresh = parent_open(&names);
        // A new region: the child's hold on "mine" is not in it.
        let acq = fresh
            .acquire(LockKey::new(b"mine"), &LockOptions::new().wait(Wait::No))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        fresh.release(acq).unwrap();
        // Let the child use its region a little in between.
        let seen = data.at(ROUNDS).load(Ordering::SeqCst);
        let t0 = Instant::now();
        while data.at(ROUNDS).load(Ordering::SeqCst) < seen + 10 {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("round {round}: the child ended, {status}");
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "round {round}: the child stopped using its region"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    data.at(STOP).store(1, Ordering::SeqCst);
    wait_ok(child, Duration::from_secs(60));
}

/// A semaphore holder killed with SIGKILL gives its units back: a waiter behind it gets them
/// with `owner_died` and a higher fence, and so does a try acquire when nobody waits. Ten
/// rounds of each.
#[test]
fn a_killed_semaphore_holders_units_come_back_with_owner_died() {
    let names = Names::new("kill-units");
    let lock = keylock_core::open_with(
        &format!("shm:{}", names.region),
        &keylock_core::OpenOptions::new().permits(3),
    )
    .unwrap();
    let units = [
        ("KEYLOCK_SHM_PERMITS", "3".to_owned()),
        ("KEYLOCK_SHM_WEIGHT", "2".to_owned()),
    ];
    let key = LockKey::new(b"k");
    for round in 0..20 {
        let mut child = spawn("hold-units", &names, &units);
        let fence: u64 = expect_line(&mut child, "held ").parse().unwrap();
        // One unit of the parent's own: the key is full while the child lives.
        let mine = lock
            .acquire(key, &LockOptions::new().wait(Wait::No))
            .unwrap();
        assert!(mine.fence() > fence);
        assert_eq!(lock.info(key).unwrap().unwrap().units, 3);
        let waiter = (round % 2 == 0).then(|| {
            let l2 = Arc::clone(&lock);
            let t = std::thread::spawn(move || {
                l2.acquire(
                    LockKey::new(b"k"),
                    &LockOptions::new()
                        .weight(2)
                        .wait(Wait::For(Duration::from_secs(10))),
                )
            });
            let t0 = Instant::now();
            while lock.info(key).unwrap().map_or(0, |i| i.waiters) < 1 {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "round {round}: the waiter never queued"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
            t
        });
        kill9(&mut child);
        let got = match waiter {
            Some(t) => t.join().unwrap(),
            None => lock.acquire(key, &LockOptions::new().weight(2).wait(Wait::No)),
        }
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(got.owner_died(), "round {round}: owner_died not reported");
        assert!(
            got.fence() > mine.fence(),
            "round {round}: the fence did not rise"
        );
        assert_eq!(got.weight(), 2);
        let info = lock.info(key).unwrap().unwrap();
        assert_eq!((info.units, info.holders), (3, 2), "round {round}");
        lock.release(got).unwrap();
        lock.release(mine).unwrap();
        assert_eq!(lock.info(key).unwrap(), None, "round {round}");
    }
}

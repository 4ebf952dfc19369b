//! The host scope against what processes on one host use today, all from Rust via libc, in
//! one run: a process-shared robust pthread mutex array (the floor), flock and OFD fcntl locks
//! (one file per key).
//!
//! - uncontended lock+unlock of one key, one process;
//! - 4 processes on 64 keys (random keys, a short critical section), total throughput;
//! - hand-off latency between two processes (release to the blocked waiter's return);
//! - recovery after kill -9 of a holder (kill to the blocked waiter's return), keylock only
//!   against the robust mutex (flock and OFD locks are released by the kernel at exit too).
//!
//! The binary re-runs itself as the child processes (`KEYLOCK_BENCH_CHILD`). With
//! `KEYLOCK_BENCH_DIR` set it writes `rust-shm.json` there; `KEYLOCK_BENCH_QUICK` shortens it.

#[cfg(not(all(feature = "shm", target_os = "linux")))]
fn main() {}

#[cfg(all(feature = "shm", target_os = "linux"))]
mod common;

#[cfg(all(feature = "shm", target_os = "linux"))]
fn main() {
    imp::main();
}

#[cfg(all(feature = "shm", target_os = "linux"))]
mod imp {
    use std::hint::black_box;
    use std::io::{BufRead, BufReader};
    use std::os::fd::AsRawFd;
    use std::process::{Child, Command, Stdio};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use keylock_core::{KeyedLock, LockKey, LockOptions, OpenOptions, Wait};

    use super::common::{Figure, quick, report};

    const KEYS: usize = 64;
    const PROCS: usize = 4;

    /// The implementations, by name.
    const IMPLS: [&str; 5] = [
        "robust pthread mutex",
        "keylock shm KeyPool",
        "keylock shm StripedLock",
        "flock",
        "OFD fcntl",
    ];

    fn tag() -> String {
        std::env::var("KEYLOCK_BENCH_TAG").unwrap_or_else(|_| std::process::id().to_string())
    }

    /// A mapped shared file of atomics (the robust mutex array, or the benchmark's data).
    struct Map {
        ptr: *mut u8,
        len: usize,
    }

    // SAFETY: the mapping is shared memory used through atomics and pthread mutexes.
    unsafe impl Send for Map {}
    // SAFETY: as above.
    unsafe impl Sync for Map {}

    impl Map {
        fn open(path: &str, len: usize) -> Map {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .unwrap();
            f.set_len(len as u64).unwrap();
            // SAFETY: a shared read-write mapping of a file just sized to `len`.
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
            Map { ptr: p.cast(), len }
        }

        fn u64(&self, i: usize) -> &AtomicU64 {
            assert!((i + 1) * 8 <= self.len);
            // SAFETY: in bounds and 8-aligned (page-aligned mapping); atomics take any bytes.
            unsafe { &*self.ptr.add(i * 8).cast::<AtomicU64>() }
        }

        fn mutex(&self, i: usize) -> *mut libc::pthread_mutex_t {
            assert!((i + 1) * 64 <= self.len);
            // SAFETY: in bounds; each mutex has its own 64-byte slot.
            unsafe { self.ptr.add(i * 64).cast() }
        }
    }

    fn data_path() -> String {
        format!("/dev/shm/keylock-bench-data.{}", tag())
    }

    fn mutex_path() -> String {
        format!("/dev/shm/keylock-bench-mutexes.{}", tag())
    }

    fn region() -> String {
        format!("bench-{}", tag())
    }

    fn init_mutexes() {
        let m = Map::open(&mutex_path(), KEYS * 64);
        for i in 0..KEYS {
            // SAFETY: nobody uses the mutexes yet; attr is initialized before use.
            unsafe {
                let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
                libc::pthread_mutexattr_init(attr.as_mut_ptr());
                libc::pthread_mutexattr_setpshared(attr.as_mut_ptr(), libc::PTHREAD_PROCESS_SHARED);
                libc::pthread_mutexattr_setrobust(attr.as_mut_ptr(), libc::PTHREAD_MUTEX_ROBUST);
                libc::pthread_mutex_init(m.mutex(i), attr.as_ptr());
                libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            }
        }
    }

    /// Where a key's acquisition waits for its release. Aligned so that none straddles a page:
    /// a 72-byte record at an address that does (1 in 64 of the 8-byte-aligned addresses)
    /// makes every copy of it a split access, which cost the striped lock+unlock 32.5 ns
    /// against 22.8 here (Intel Xeon), from where the allocator happened to put the vector, so
    /// that the figure depended on which other allocations the run had made before it.
    #[repr(align(128))]
    struct Slot(Option<keylock_core::Acquisition>);

    /// One implementation, opened in this process.
    enum Lock {
        Mutex(Map),
        Keylock(Arc<dyn KeyedLock>, Vec<Slot>),
        Flock(Vec<std::fs::File>),
        Ofd(Vec<std::fs::File>),
    }

    fn files() -> Vec<std::fs::File> {
        (0..KEYS)
            .map(|i| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(format!("/dev/shm/keylock-bench-file.{}.{i}", tag()))
                    .unwrap()
            })
            .collect()
    }

    fn ofd(f: &std::fs::File, kind: libc::c_int) {
        // SAFETY: a zeroed flock is a valid argument; we set the fields F_OFD_SETLKW reads.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        // SAFETY: fcntl on an open file with a valid flock.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLKW, &fl) };
        assert_eq!(rc, 0);
    }

    impl Lock {
        fn open(name: &str) -> Lock {
            match name {
                "robust pthread mutex" => Lock::Mutex(Map::open(&mutex_path(), KEYS * 64)),
                "keylock shm KeyPool" => Lock::Keylock(
                    keylock_core::open(&format!("shm:{}", region())).unwrap(),
                    (0..KEYS).map(|_| Slot(None)).collect(),
                ),
                "keylock shm StripedLock" => {
                    let mut o = OpenOptions::default();
                    o.stripes = Some(KEYS);
                    Lock::Keylock(
                        keylock_core::open_with(&format!("shm:{}-s", region()), &o).unwrap(),
                        (0..KEYS).map(|_| Slot(None)).collect(),
                    )
                }
                "flock" => Lock::Flock(files()),
                "OFD fcntl" => Lock::Ofd(files()),
                other => panic!("unknown implementation {other}"),
            }
        }

        #[inline]
        fn lock(&mut self, key: usize) {
            match self {
                Lock::Mutex(m) => {
                    // SAFETY: an initialized robust process-shared mutex.
                    let rc = unsafe { libc::pthread_mutex_lock(m.mutex(key)) };
                    if rc == libc::EOWNERDEAD {
                        // SAFETY: we hold it after EOWNERDEAD.
                        unsafe { libc::pthread_mutex_consistent(m.mutex(key)) };
                    }
                }
                Lock::Keylock(l, held) => {
                    let bytes = (key as u64).to_be_bytes();
                    held[key].0 = Some(
                        l.acquire(LockKey::new(&bytes), &LockOptions::new())
                            .unwrap(),
                    );
                }
                Lock::Flock(f) => {
                    // SAFETY: flock on an open file.
                    unsafe { libc::flock(f[key].as_raw_fd(), libc::LOCK_EX) };
                }
                Lock::Ofd(f) => ofd(&f[key], libc::F_WRLCK),
            }
        }

        #[inline]
        fn unlock(&mut self, key: usize) {
            match self {
                // SAFETY: we hold it.
                Lock::Mutex(m) => unsafe {
                    libc::pthread_mutex_unlock(m.mutex(key));
                },
                Lock::Keylock(l, held) => l.release(held[key].0.take().unwrap()).unwrap(),
                // SAFETY: flock on an open file.
                Lock::Flock(f) => unsafe {
                    libc::flock(f[key].as_raw_fd(), libc::LOCK_UN);
                },
                Lock::Ofd(f) => ofd(&f[key], libc::F_UNLCK),
            }
        }
    }

    fn now_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn spawn(role: &str, imp: &str, extra: &[(&str, String)]) -> Child {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.env("KEYLOCK_BENCH_CHILD", role)
            .env("KEYLOCK_BENCH_IMPL", imp)
            .env("KEYLOCK_BENCH_TAG", tag())
            .stdout(Stdio::piped());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    }

    fn line(child: &mut Child) -> String {
        let mut s = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut s)
            .unwrap();
        s.trim().to_owned()
    }

    fn child(role: &str) {
        let imp = std::env::var("KEYLOCK_BENCH_IMPL").unwrap();
        let data = Map::open(&data_path(), 4096);
        let mut lock = Lock::open(&imp);
        match role {
            // Random keys until the stop flag, a counter bump inside; prints the count.
            "throughput" => {
                let mut rng = std::process::id() as u64 | 1;
                data.u64(1).fetch_add(1, Ordering::SeqCst);
                while data.u64(0).load(Ordering::Acquire) == 0 {
                    std::hint::spin_loop();
                }
                let mut ops = 0u64;
                while data.u64(0).load(Ordering::Relaxed) == 1 {
                    for _ in 0..64 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let key = (rng as usize) % KEYS;
                        lock.lock(key);
                        let c = data.u64(8 + key);
                        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                        lock.unlock(key);
                        ops += 1;
                    }
                }
                println!("{ops}");
            }
            // Ping-pong on key 0 with the parent: see `handoff`.
            "handoff" => handoff_loop(&mut lock, &data, 1),
            // Takes key 0 and holds it until killed.
            "hold" => {
                lock.lock(0);
                println!("held");
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            other => panic!("unknown role {other}"),
        }
    }

    /// Two processes (sides 0 and 1) pass key 0 back and forth `rounds` times. Turns count
    /// from one, and turn `t` belongs to side `(t - 1) % 2`. A side queues for its turn only
    /// once the other side holds the key (so nobody barges), announces it, and takes the key;
    /// the holder waits for that announcement, lets the waiter fall asleep, stamps the time
    /// and releases; the waiter measures from the stamp.
    fn handoff_loop(lock: &mut Lock, data: &Map, side: usize) {
        let rounds = data.u64(2).load(Ordering::SeqCst);
        let (turn, stamp) = (data.u64(40), data.u64(3));
        let announce = |s: usize| data.u64(16 + s);
        let other = 1 - side;
        let wait_for = |cond: &dyn Fn() -> bool| {
            let t0 = Instant::now();
            while !cond() && t0.elapsed() < Duration::from_secs(5) {
                std::hint::spin_loop();
            }
        };
        let mut lat = Vec::new();
        let mut t = side as u64 + 1;
        while t <= rounds + 1 {
            if t > 1 {
                wait_for(&|| turn.load(Ordering::SeqCst) == t - 1);
                announce(side).store(t, Ordering::SeqCst);
            }
            lock.lock(0);
            let s = stamp.swap(0, Ordering::SeqCst);
            if s != 0 {
                lat.push(now_ns().saturating_sub(s) as f64);
            }
            turn.store(t, Ordering::SeqCst);
            if t <= rounds {
                wait_for(&|| announce(other).load(Ordering::SeqCst) == t + 1);
                std::thread::sleep(Duration::from_micros(200));
                stamp.store(now_ns(), Ordering::SeqCst);
            }
            lock.unlock(0);
            t += 2;
        }
        if side == 1 {
            let s: Vec<String> = lat.iter().map(|x| format!("{x}")).collect();
            println!("{}", s.join(" "));
        } else {
            data.u64(32).store(lat.len() as u64, Ordering::SeqCst);
            for (j, x) in lat.iter().enumerate().take(400) {
                data.u64(64 + j).store(*x as u64, Ordering::SeqCst);
            }
        }
    }

    /// Uncontended lock+unlock of every implementation, `runs` times each, interleaved (one
    /// run of each in turn), so that a change in the machine's load falls on all alike.
    fn uncontended(iters: usize, runs: usize) -> Vec<Vec<f64>> {
        let mut locks: Vec<Lock> = IMPLS.iter().map(|imp| Lock::open(imp)).collect();
        for lock in &mut locks {
            for _ in 0..iters / 10 {
                lock.lock(1);
                lock.unlock(1);
            }
        }
        let mut out = vec![Vec::with_capacity(runs); locks.len()];
        for _ in 0..runs {
            for (i, lock) in locks.iter_mut().enumerate() {
                let t0 = Instant::now();
                for _ in 0..iters {
                    lock.lock(black_box(1));
                    lock.unlock(black_box(1));
                }
                out[i].push(t0.elapsed().as_nanos() as f64 / iters as f64);
            }
        }
        out
    }

    fn throughput(imp: &str, secs: f64) -> f64 {
        let data = Map::open(&data_path(), 4096);
        for i in 0..512 {
            data.u64(i).store(0, Ordering::SeqCst);
        }
        let mut children: Vec<Child> = (0..PROCS).map(|_| spawn("throughput", imp, &[])).collect();
        while data.u64(1).load(Ordering::SeqCst) < PROCS as u64 {
            std::thread::sleep(Duration::from_millis(1));
        }
        data.u64(0).store(1, Ordering::SeqCst);
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(secs));
        data.u64(0).store(2, Ordering::SeqCst);
        let ops: u64 = children
            .iter_mut()
            .map(|c| line(c).parse::<u64>().unwrap())
            .sum();
        let elapsed = t0.elapsed().as_secs_f64();
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
        let counted: u64 = (0..KEYS)
            .map(|k| data.u64(8 + k).load(Ordering::SeqCst))
            .sum();
        assert_eq!(counted, ops, "{imp}: lost updates");
        ops as f64 / elapsed
    }

    fn handoff(imp: &str, rounds: usize) -> Vec<f64> {
        let data = Map::open(&data_path(), 4096);
        for i in 0..512 {
            data.u64(i).store(0, Ordering::SeqCst);
        }
        data.u64(2).store(rounds as u64, Ordering::SeqCst);
        let mut lock = Lock::open(imp);
        let mut child = spawn("handoff", imp, &[]);
        handoff_loop(&mut lock, &data, 0);
        let out = line(&mut child);
        assert!(child.wait().unwrap().success());
        let mut lat: Vec<f64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
        let n = data.u64(32).load(Ordering::SeqCst) as usize;
        lat.extend((0..n.min(400)).map(|j| data.u64(64 + j).load(Ordering::SeqCst) as f64));
        lat.iter().map(|x| x / 1000.0).collect()
    }

    fn recovery(imp: &str, rounds: usize) -> Vec<f64> {
        let lock = Arc::new(parking_lot::Mutex::new(Lock::open(imp)));
        let mut out = Vec::new();
        for _ in 0..rounds {
            let mut child = spawn("hold", imp, &[]);
            assert_eq!(line(&mut child), "held");
            let l2 = Arc::clone(&lock);
            let (tx, rx) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                tx.send(()).unwrap();
                let mut l = l2.lock();
                l.lock(0);
                let t = Instant::now();
                l.unlock(0);
                t
            });
            rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(2)); // the waiter is asleep in lock()
            // Timed from just before the kill: the recovery can finish before kill(2)
            // returns here.
            let killed = Instant::now();
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
            let got = waiter.join().unwrap();
            let _ = child.wait();
            out.push(got.saturating_duration_since(killed).as_secs_f64() * 1e3);
        }
        out
    }

    fn percentile(v: &[f64], p: f64) -> f64 {
        let mut s = v.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        s[((s.len() - 1) as f64 * p).round() as usize]
    }

    fn load() -> String {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Removes every file this run made in /dev/shm.
    fn cleanup() {
        let _ = keylock_core::shm::unlink(&region());
        let _ = keylock_core::shm::unlink(&format!("{}-s", region()));
        let _ = std::fs::remove_file(data_path());
        let _ = std::fs::remove_file(mutex_path());
        for i in 0..KEYS {
            let _ = std::fs::remove_file(format!("/dev/shm/keylock-bench-file.{}.{i}", tag()));
        }
    }

    pub(super) fn main() {
        if let Ok(role) = std::env::var("KEYLOCK_BENCH_CHILD") {
            child(&role);
            return;
        }
        // KEYLOCK_BENCH_COUNT="IMPL:N": only N uncontended lock+unlock pairs of IMPL, for
        // `valgrind --tool=callgrind` to count instructions (make bench-shm-callgrind).
        if let Ok(spec) = std::env::var("KEYLOCK_BENCH_COUNT") {
            let (imp, n) = spec.rsplit_once(':').expect("IMPL:N");
            if imp == "robust pthread mutex" {
                init_mutexes();
            }
            let mut lock = Lock::open(imp);
            for _ in 0..n.parse::<usize>().unwrap() {
                lock.lock(black_box(1));
                lock.unlock(black_box(1));
            }
            drop(lock);
            cleanup();
            return;
        }
        if std::env::args().any(|a| a == "--bench" || a == "--list")
            && std::env::args().any(|a| a == "--list")
        {
            return;
        }
        let q = quick();
        // KEYLOCK_BENCH_ONLY=uncontended|throughput|handoff|recovery runs one part.
        let only = std::env::var("KEYLOCK_BENCH_ONLY").unwrap_or_default();
        let part = |p: &str| only.is_empty() || only == p;
        init_mutexes();
        let _ = keylock_core::shm::unlink(&region());
        let _ = keylock_core::shm::unlink(&format!("{}-s", region()));
        let load_before = load();
        let mut figs = Vec::new();
        let (iters, runs) = if q { (200_000, 5) } else { (2_000_000, 11) };
        let floor = "uncontended/robust pthread mutex";
        let times = if part("uncontended") {
            uncontended(iters, runs)
        } else {
            Vec::new()
        };
        for (imp, runs) in IMPLS.into_iter().zip(times) {
            let mut f = Figure::new(format!("uncontended/{imp}"), "ns/op", runs)
                .param("group", "uncontended lock+unlock, one process")
                .param("impl", imp);
            if imp != "robust pthread mutex" {
                f.baseline = Some(floor.into());
            }
            if imp.starts_with("keylock") {
                f.target = Some("within 2x a robust pthread mutex");
                f.goal = Some(2.0);
            }
            figs.push(f);
        }
        // keylock against a flock pair: at least 40x faster (ratio <= 1/40).
        for imp in ["keylock shm KeyPool", "keylock shm StripedLock"]
            .into_iter()
            .filter(|_| part("uncontended"))
        {
            let base = figs
                .iter()
                .find(|f| f.name == format!("uncontended/{imp}"))
                .unwrap()
                .runs
                .clone();
            let mut f = Figure::new(format!("uncontended/{imp} (vs flock)"), "ns/op", base)
                .param("group", "uncontended lock+unlock, one process")
                .param("impl", imp);
            f.baseline = Some("uncontended/flock".into());
            f.target = Some("at least 40x faster than a flock pair");
            f.goal = Some(1.0 / 40.0);
            figs.push(f);
        }
        let secs = if q { 0.2 } else { 1.0 };
        let reps = if q { 1 } else { 3 };
        for imp in IMPLS.into_iter().filter(|_| part("throughput")) {
            let runs: Vec<f64> = (0..reps).map(|_| throughput(imp, secs)).collect();
            let mut f = Figure::new(format!("4 processes, 64 keys/{imp}"), "ops/s", runs)
                .param("group", "4 processes on 64 keys (total throughput)")
                .param("impl", imp)
                .param("keys", KEYS);
            if imp != "robust pthread mutex" {
                f.baseline = Some("4 processes, 64 keys/robust pthread mutex".into());
            }
            figs.push(f);
        }
        let rounds = if q { 40 } else { 400 };
        for imp in IMPLS.into_iter().filter(|_| part("handoff")) {
            let lat = handoff(imp, rounds);
            for (p, label) in [(0.5, "p50"), (0.99, "p99")] {
                let mut f = Figure::new(
                    format!("hand-off {label}/{imp}"),
                    "us",
                    vec![percentile(&lat, p)],
                )
                .param(
                    "group",
                    format!("hand-off latency between processes ({label})"),
                )
                .param("impl", imp);
                if imp != "robust pthread mutex" {
                    f.baseline = Some(format!("hand-off {label}/robust pthread mutex"));
                }
                figs.push(f);
            }
        }
        let rounds = if q { 20 } else { 100 };
        for imp in [
            "robust pthread mutex",
            "keylock shm KeyPool",
            "keylock shm StripedLock",
        ]
        .into_iter()
        .filter(|_| part("recovery"))
        {
            let ms = recovery(imp, rounds);
            for (p, label) in [(0.5, "p50"), (0.99, "p99")] {
                let mut f = Figure::new(
                    format!("recovery {label}/{imp}"),
                    "ms",
                    vec![percentile(&ms, p)],
                )
                .param(
                    "group",
                    format!("recovery after kill -9 of a holder ({label}, {rounds} kills)"),
                )
                .param("impl", imp);
                if imp.starts_with("keylock") && label == "p99" {
                    f.target = Some("recovery p99 under 100 ms");
                    f.met = Some(percentile(&ms, p) < 100.0);
                }
                figs.push(f);
            }
        }
        let load_after = load();
        for f in &mut figs {
            f.params
                .push(("load", format!("{load_before} .. {load_after}")));
        }
        report(
            &format!(
                "keylock host scope (shm) against flock, OFD fcntl and robust pthread mutexes, across processes (load {load_before} .. {load_after})"
            ),
            "rust-shm.json",
            &figs,
        );
        cleanup();
        let _ = Wait::No;
    }
}

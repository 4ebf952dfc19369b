//! Benchmarks of the Redis scope against its peers, all against one `redis-server` started
//! here, in one run (`make bench-redis`; results in `$KEYLOCK_BENCH_DIR/redis.json`):
//!
//! - uncontended acquire+release (keylock, and the peers through `bench/redis_peers.py`),
//!   beside the floor of two plain round trips (`PING`);
//! - round trips per acquire and per release: the commands clients send, counted on a `MONITOR`
//!   feed (commands run inside scripts are not round trips; `INFO commandstats` counts them too);
//! - 4 processes on 16 keys: ops/s, and the hand-off latency from a holder's release to the
//!   next holder inside (only for a next holder that was already waiting), p50 and p99;
//! - the local hand-off: 4 threads of one process on one key (the local coalescing choice).
//!
//! The peers: redis-py's `Lock` and python-redis-lock (`bench/redis_peers.py`, run by
//! `KEYLOCK_BENCH_PY`, default `python3`), and node-redlock (`bench/redis-peers-node`, after
//! `npm ci` there). A peer that cannot run here is left out, and the report says so.

#[path = "common/contention.rs"]
mod contention;
#[path = "../tests/redis/server.rs"]
#[allow(dead_code)] // the tests use more of the server helper than this benchmark does
mod server;

use contention::{
    Rec, handoffs, median, percentile, read_recs, uptime, wait_for_start, write_recs,
};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keylock_core::{KeyedLock, LockKey, LockOptions};
use server::Server;

const KEYS: usize = 16;

/// What the report says about these workloads.
const DESCRIPTION: &str = "Workloads. *Uncontended*: one thread, acquire+release of one key, 7 runs of 500 interleaved with the floor (two PINGs on a plain connection); the peers' runs follow keylock's. *Round trips*: the commands clients sent (a MONITOR feed, less the commands scripts run inside the server), per operation, over 1,000 uncontended acquires and then their releases. *4 processes on 16 keys*: each process locks a random key of 16 and releases it at once for 3 s (3 rounds); a hand-off is the time from a holder's release to the next holder inside, counted only when that holder was already waiting. *Local hand-off*: 4 threads of one process on one key (each local holder takes its own remote acquisition). Peers: redis-py's Lock (polls every 0.1 s), python-redis-lock (BLPOP), node-redlock 4.2.0 (retries every 200 ms + jitter); each gets a 30 s lease. The machine is shared and was loaded (uptime above): read ratios in one run, not absolute figures.";
const PROCESSES: usize = 4;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn child() {
    let url = std::env::var("KEYLOCK_REDIS_URL").unwrap();
    let duration: u64 = std::env::var("KEYLOCK_DURATION_MS")
        .unwrap()
        .parse()
        .unwrap();
    let go = std::env::var("KEYLOCK_GO").unwrap();
    let out = std::env::var("KEYLOCK_OUT").unwrap();
    let threads: usize = std::env::var("KEYLOCK_THREADS").unwrap().parse().unwrap();
    let keys: usize = std::env::var("KEYLOCK_KEYS").unwrap().parse().unwrap();
    let locks = keylock_core::open(&url).unwrap();
    std::fs::write(format!("{out}.ready"), "").unwrap();
    let start = wait_for_start(&go);
    let recs = contend(&locks, threads, keys, start, duration);
    write_recs(&out, &recs);
}

fn contend(
    locks: &Arc<dyn KeyedLock>,
    threads: usize,
    keys: usize,
    start: u64,
    duration_ms: u64,
) -> Vec<Rec> {
    let end = start + duration_ms * 1_000_000;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let locks = Arc::clone(locks);
            std::thread::spawn(move || {
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (now_ns() + t as u64);
                let mut recs = Vec::new();
                while now_ns() < start {
                    std::thread::sleep(Duration::from_micros(200));
                }
                loop {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let key = (rng % keys as u64) as usize;
                    let name = format!("key-{key}");
                    let req = now_ns();
                    if req >= end {
                        break;
                    }
                    let acq = locks
                        .acquire(LockKey::new(name.as_bytes()), &LockOptions::new())
                        .unwrap();
                    let inside = now_ns();
                    let rel = now_ns();
                    locks.release(acq).unwrap();
                    recs.push(Rec {
                        key,
                        req,
                        inside,
                        rel,
                    });
                }
                recs
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// Counts the commands that clients send (not those scripts run inside the server), from a
/// `MONITOR` feed: every line except those marked `lua`.
struct Monitor {
    count: Arc<std::sync::atomic::AtomicU64>,
    _stream: std::net::TcpStream,
}

impl Monitor {
    fn start(port: u16) -> Monitor {
        use std::io::{BufRead, BufReader};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let c = Arc::clone(&count);
        let reader = BufReader::new(stream.try_clone().unwrap());
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { break };
                if line.contains("] \"") && !line.contains(" lua]") {
                    c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        Monitor {
            count,
            _stream: stream,
        }
    }

    /// Commands seen so far, once the feed has caught up.
    fn settled(&self) -> u64 {
        let mut last = u64::MAX;
        loop {
            std::thread::sleep(Duration::from_millis(150));
            let now = self.count.load(std::sync::atomic::Ordering::SeqCst);
            if now == last {
                return now;
            }
            last = now;
        }
    }
}

struct Report {
    rows: Vec<serde_json::Value>,
    notes: Vec<String>,
}

impl Report {
    #[allow(clippy::too_many_arguments)] // one row of the shared format, field by field
    fn row(
        &mut self,
        group: &str,
        imp: &str,
        unit: &str,
        runs: &[f64],
        baseline: Option<(&str, f64)>,
        target: Option<(&str, bool)>,
    ) {
        let mut sorted = runs.to_vec();
        let med = median(&mut sorted);
        self.rows.push(serde_json::json!({
            "name": format!("{group}: {imp}"),
            "group": group,
            "impl": imp,
            "unit": unit,
            "median": med,
            "min": sorted.first(),
            "max": sorted.last(),
            "runs": runs,
            "baseline": baseline.map(|(b, _)| format!("{group}: {b}")),
            "ratio": baseline.map(|(_, v)| med / v),
            "target": target.map(|(t, _)| t),
            "met": target.map(|(_, m)| m),
        }));
    }
}

/// A peer library and how to start one of its workers (`uncontended ...` or `contend ...`
/// follows).
struct Peer {
    name: &'static str,
    program: String,
    args: Vec<String>,
}

impl Peer {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args);
        c
    }
}

/// The peers this machine can run: Python's (with `redis` and `python-redis-lock`) and
/// node-redlock (`bench/redis-peers-node` installed with `npm ci`).
fn peers(port: u16, notes: &mut Vec<String>) -> Vec<Peer> {
    let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench");
    let mut out = Vec::new();
    let py = std::env::var("KEYLOCK_BENCH_PY").unwrap_or_else(|_| "python3".to_owned());
    let has_py = Command::new(&py)
        .args(["-c", "import redis, redis_lock"])
        .status()
        .is_ok_and(|s| s.success());
    if has_py {
        for name in ["redis-py", "python-redis-lock"] {
            out.push(Peer {
                name,
                program: py.clone(),
                args: vec![
                    bench.join("redis_peers.py").display().to_string(),
                    name.to_owned(),
                    port.to_string(),
                ],
            });
        }
    } else {
        notes.push("Python peers left out: no Python with redis and python-redis-lock".into());
    }
    let node_dir = bench.join("redis-peers-node");
    if node_dir.join("node_modules/redlock").exists() {
        out.push(Peer {
            name: "node-redlock",
            program: "node".to_owned(),
            args: vec![
                node_dir.join("peer.js").display().to_string(),
                port.to_string(),
            ],
        });
    } else {
        notes.push("node-redlock left out: bench/redis-peers-node not installed".into());
    }
    out
}

fn main() {
    if std::env::var("KEYLOCK_BENCH_CHILD").is_ok() {
        child();
        return;
    }
    let quick = std::env::var("KEYLOCK_BENCH_QUICK").is_ok();
    let (runs, ops, duration_ms) = if quick {
        (3, 200, 1000)
    } else {
        (7, 500, 3000)
    };
    let server = Server::start();
    let url = server.url("prefix=bench");
    let load_before = uptime();
    let mut report = Report {
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let mut con = server.client();
    let peers = peers(server.port, &mut report.notes);

    // Uncontended acquire+release, beside two plain round trips.
    let locks = keylock_core::open(&url).unwrap();
    let g = "redis uncontended acquire+release";
    let key = LockKey::new(b"uncontended");
    for _ in 0..100 {
        let a = locks.acquire(key, &LockOptions::new()).unwrap();
        locks.release(a).unwrap();
    }
    let mut ping = Vec::new();
    let mut ours = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        for _ in 0..ops {
            let _: String = redis::cmd("PING").query(&mut con).unwrap();
            let _: String = redis::cmd("PING").query(&mut con).unwrap();
        }
        ping.push(t.elapsed().as_secs_f64() * 1e6 / ops as f64);
        let t = Instant::now();
        for _ in 0..ops {
            let a = locks.acquire(key, &LockOptions::new()).unwrap();
            locks.release(a).unwrap();
        }
        ours.push(t.elapsed().as_secs_f64() * 1e6 / ops as f64);
    }
    let ping_med = median(&mut ping.clone());
    report.row(g, "2 x PING (round-trip floor)", "us/op", &ping, None, None);
    report.row(
        g,
        "keylock Redis scope",
        "us/op",
        &ours,
        Some(("2 x PING (round-trip floor)", ping_med)),
        None,
    );
    let ours_med = median(&mut ours.clone());
    let mut peer_trips = Vec::new();
    {
        for peer in &peers {
            let lib = peer.name;
            let monitor = Monitor::start(server.port);
            let before = monitor.settled();
            let out = peer
                .command()
                .args(["uncontended", &runs.to_string(), &ops.to_string()])
                .output()
                .unwrap();
            let after = monitor.settled();
            assert!(
                out.status.success(),
                "{lib}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: Vec<f64> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| l.trim().parse::<f64>().unwrap() / 1e3)
                .collect();
            report.row(
                g,
                lib,
                "us/op",
                &v,
                Some(("keylock Redis scope", ours_med)),
                None,
            );
            let n = (runs * ops + 50) as f64;
            // Less the connection's PING and handshake (a few commands outside the loop).
            peer_trips.push((lib, (after - before) as f64 / n));
        }
    }

    // Round trips per uncontended acquire and per release.
    let g = "redis round trips (MONITOR)";
    let n = 1000;
    let held_keys: Vec<String> = (0..n).map(|i| format!("rt-{i}")).collect();
    let monitor = Monitor::start(server.port);
    let s0 = monitor.settled();
    let held: Vec<_> = held_keys
        .iter()
        .map(|k| {
            locks
                .acquire(LockKey::new(k.as_bytes()), &LockOptions::new())
                .unwrap()
        })
        .collect();
    let s1 = monitor.settled();
    for a in held {
        locks.release(a).unwrap();
    }
    let s2 = monitor.settled();
    drop(monitor);
    let acq_trips = (s1 - s0) as f64 / n as f64;
    let rel_trips = (s2 - s1) as f64 / n as f64;
    report.row(
        g,
        "keylock acquire",
        "commands/op",
        &[acq_trips],
        None,
        Some((
            "at most one round trip per uncontended acquire",
            acq_trips <= 1.0,
        )),
    );
    report.row(
        g,
        "keylock release",
        "commands/op",
        &[rel_trips],
        None,
        Some(("at most one round trip per release", rel_trips <= 1.0)),
    );
    for (lib, t) in &peer_trips {
        report.row(
            g,
            &format!("{lib} acquire+release"),
            "commands/op",
            &[*t],
            None,
            None,
        );
    }

    // 4 processes on 16 keys.
    let g = format!("redis {PROCESSES} processes on {KEYS} keys");
    let dir = std::env::temp_dir().join(format!("keylock-redis-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let rounds = if quick { 1 } else { 3 };
    type Figures = (String, Vec<f64>, Vec<f64>, Vec<f64>); // impl, ops/s, p50, p99
    let mut results: Vec<Figures> = Vec::new();
    let mut impls = vec!["keylock Redis scope".to_owned()];
    impls.extend(peers.iter().map(|p| p.name.to_owned()));
    for imp in &impls {
        let (mut rate, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let files: Vec<PathBuf> = (0..PROCESSES)
                .map(|p| dir.join(format!("{}-{round}-{p}", imp.replace(' ', "_"))))
                .collect();
            let go = dir.join(format!("{}-{round}-go", imp.replace(' ', "_")));
            let kids: Vec<_> = files
                .iter()
                .map(|f| {
                    if imp.starts_with("keylock") {
                        Command::new(&exe)
                            .env("KEYLOCK_BENCH_CHILD", "1")
                            .env("KEYLOCK_REDIS_URL", &url)
                            .env("KEYLOCK_DURATION_MS", duration_ms.to_string())
                            .env("KEYLOCK_GO", &go)
                            .env("KEYLOCK_OUT", f)
                            .env("KEYLOCK_THREADS", "1")
                            .env("KEYLOCK_KEYS", KEYS.to_string())
                            .spawn()
                            .unwrap()
                    } else {
                        let peer = peers.iter().find(|p| p.name == imp).unwrap();
                        peer.command()
                            .args(["contend".to_owned(), KEYS.to_string()])
                            .arg(duration_ms.to_string())
                            .arg(&go)
                            .arg(f)
                            .spawn()
                            .unwrap()
                    }
                })
                .collect();
            // Every worker connected and ready, then one start time for all.
            let ready = |f: &PathBuf| PathBuf::from(format!("{}.ready", f.display())).exists();
            while !files.iter().all(ready) {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::fs::write(&go, (now_ns() + 100_000_000).to_string()).unwrap();
            for mut k in kids {
                assert!(k.wait().unwrap().success(), "{imp} worker failed");
            }
            let recs: Vec<Rec> = files.iter().flat_map(|f| read_recs(f)).collect();
            rate.push(recs.len() as f64 / (duration_ms as f64 / 1e3));
            let h = handoffs(&recs);
            p50.push(percentile(&h, 0.5));
            p99.push(percentile(&h, 0.99));
            eprintln!(
                "{imp} round {round}: {} ops, {} hand-offs",
                recs.len(),
                h.len()
            );
        }
        results.push((imp.clone(), rate, p50, p99));
    }
    // The polling peers (python-redis-lock waits on BLPOP, a push): the best is the lowest p99.
    let best_polling = results
        .iter()
        .filter(|r| r.0 == "redis-py" || r.0 == "node-redlock")
        .map(|r| (r.0.clone(), median(&mut r.3.clone())))
        .min_by(|a, b| a.1.partial_cmp(&b.1).unwrap());
    for (imp, rate, p50, p99) in &results {
        report.row(&format!("{g}: throughput"), imp, "ops/s", rate, None, None);
        report.row(&format!("{g}: hand-off p50"), imp, "us", p50, None, None);
        let best = best_polling.as_ref().filter(|_| imp.starts_with("keylock"));
        let target = best.map(|(_, b)| {
            (
                "hand-off p99 at least 10x lower than the best polling peer",
                median(&mut p99.clone()) * 10.0 <= *b,
            )
        });
        let base = best.map(|(name, b)| (name.as_str(), *b));
        report.row(&format!("{g}: hand-off p99"), imp, "us", p99, base, target);
    }

    // The local hand-off: 4 threads of one process on one key.
    let g = "redis local hand-off (1 process, 4 threads, 1 key)";
    let (mut rate, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let recs = contend(&locks, 4, 1, now_ns() + 200_000_000, duration_ms);
        let h = handoffs(&recs);
        rate.push(recs.len() as f64 / (duration_ms as f64 / 1e3));
        p50.push(percentile(&h, 0.5));
        p99.push(percentile(&h, 0.99));
    }
    report.row(
        &format!("{g}: throughput"),
        "keylock Redis scope",
        "ops/s",
        &rate,
        None,
        None,
    );
    report.row(
        &format!("{g}: hand-off p50"),
        "keylock Redis scope",
        "us",
        &p50,
        None,
        None,
    );
    report.row(
        &format!("{g}: hand-off p99"),
        "keylock Redis scope",
        "us",
        &p99,
        None,
        None,
    );
    let _ = std::fs::remove_dir_all(&dir);

    let redis_version = Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default();
    let doc = serde_json::json!({
        "suite": "keylock Redis scope against its peers (one redis-server on loopback, one run)",
        "machine": {
            "cpu": cpu,
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "redis": redis_version,
            "uptime before": load_before,
            "uptime after": uptime(),
            "notes": report.notes.join("; "),
        },
        "date": humantime_now(),
        "description": DESCRIPTION,
        "results": report.rows,
    });
    let out_dir = std::env::var("KEYLOCK_BENCH_DIR").unwrap_or_else(|_| "target".to_owned());
    std::fs::create_dir_all(&out_dir).unwrap();
    let path = Path::new(&out_dir).join("redis.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    println!("wrote {}", path.display());
}

/// The date in the report's form (UTC, from `date`).
fn humantime_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

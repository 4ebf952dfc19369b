//! The keyed semaphore on Redis against the npm package `redis-semaphore` (its `Semaphore`,
//! which polls), side by side against one `redis-server` started here, in one run
//! (`make bench-redis-semaphore`; results in `$KEYLOCK_BENCH_DIR/redis-semaphore.json`):
//!
//! - uncontended acquire+release of one unit (permits 2), beside two plain round trips (`PING`);
//! - round trips per uncontended acquire and per release: the commands clients send, counted on
//!   a `MONITOR` feed (commands run inside scripts are not round trips), and the scripts Redis
//!   ran (`INFO commandstats`, `EVAL`/`EVALSHA` calls) as a second count;
//! - 4 processes on 4 keys, then on 1 key, permits 2, weight 1, each holding its unit 1 ms:
//!   ops/s, the hand-off latency (a waiter's entry after the release that made room for it),
//!   p50 and p99, and the wait (request to inside) of every acquisition, p50 and p99.
//!
//! The peer runs from `bench/redis-peers-node` (`node peer.js PORT semaphore PERMITS ...`, after
//! `npm ci` there); if it cannot run here it is left out, and the report says so.

#[path = "common/contention.rs"]
mod contention;
#[path = "../tests/redis/server.rs"]
#[allow(dead_code)] // the tests use more of the server helper than this benchmark does
mod server;

use contention::{Rec, median, percentile, read_recs, uptime, wait_for_start, write_recs};

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keylock_core::{KeyedLock, LockKey, LockOptions, OpenOptions};
use server::Server;

const PERMITS: u32 = 2;
/// The contended workloads: 4 keys (a process waits when two others hold its key), and 1 key
/// (two hold, two wait: every acquisition is a hand-off candidate).
const KEYS: [usize; 2] = [4, 1];
const PROCESSES: usize = 4;
const HOLD_MS: u64 = 1;
const KEYLOCK: &str = "keylock Redis semaphore";
const PEER: &str = "redis-semaphore";

/// What the report says about these workloads.
const DESCRIPTION: &str = "Workloads, all with permits 2 and weight 1. *Uncontended*: one thread, acquire+release of one unit of one key, 7 runs of 500 interleaved with the floor (two PINGs on a plain connection); the peer's runs follow keylock's. *Round trips*: the commands clients sent (a MONITOR feed, less the commands scripts run inside the server), per operation, over 1,000 uncontended acquires of distinct keys and then their releases; the scripts Redis ran (INFO commandstats, EVAL+EVALSHA calls) are counted beside; the peer's are per acquire+release over its uncontended runs (its connection's few setup commands included). *4 processes on 4 keys* and *4 processes on 1 key*: each process (one thread, one connection) takes one unit of a random key, holds it 1 ms (a sleep), releases it, for 3 s (3 rounds); each acquisition is logged as key, request, inside, release (one wall clock for all processes). Hand-off: per key, the acquisitions in the order they got in each take the unit that came free first (free from its last holder's release); one whose unit came free only after it asked (every unit held by the logs, so it waited) was handed it, and its hand-off is from that release to its getting in (with one permit, redis.rs's rule). Wait: from request to inside, for every acquisition. Commands per acquire+release under contention: a MONITOR feed over one more 1 s round of each (not timed), the workers' connection setup included. On 1 key keylock queues strictly FIFO, so nearly every acquisition is a hand-off; redis-semaphore lets a releaser take a unit again at once while the others poll, so few of its acquisitions count as hand-offs and its waits show what polling costs. Peer: redis-semaphore 5.8.0's Semaphore on ioredis 5.4.1, one Semaphore(client, key, 2) per acquisition, default options: lockTimeout 10 s, acquireTimeout 10 s, retryInterval 10 ms (an acquire that finds no room tries again every 10 ms: polling). keylock's waiters wait on BLPOP of their own list and are woken by the release's push. The machine is shared and was loaded (uptime above): read ratios in one run, not absolute figures.";

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn open_sem(url: &str) -> Arc<dyn KeyedLock> {
    keylock_core::open_with(url, &OpenOptions::new().permits(PERMITS)).unwrap()
}

/// A contend worker: one process, one thread, one unit of a random key at a time.
fn child() {
    let url = std::env::var("KEYLOCK_REDIS_URL").unwrap();
    let duration: u64 = std::env::var("KEYLOCK_DURATION_MS")
        .unwrap()
        .parse()
        .unwrap();
    let go = std::env::var("KEYLOCK_GO").unwrap();
    let out = std::env::var("KEYLOCK_OUT").unwrap();
    let keys: u64 = std::env::var("KEYLOCK_KEYS").unwrap().parse().unwrap();
    let sem = open_sem(&url);
    std::fs::write(format!("{out}.ready"), "").unwrap();
    let start = wait_for_start(&go);
    let end = start + duration * 1_000_000;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ now_ns() ^ u64::from(std::process::id());
    let mut recs = Vec::new();
    while now_ns() < start {
        std::thread::sleep(Duration::from_micros(200));
    }
    let one = LockOptions::new().weight(1);
    loop {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = (rng % keys) as usize;
        let name = format!("key-{key}");
        let req = now_ns();
        if req >= end {
            break;
        }
        let acq = sem.acquire(LockKey::new(name.as_bytes()), &one).unwrap();
        let inside = now_ns();
        std::thread::sleep(Duration::from_millis(HOLD_MS));
        let rel = now_ns();
        sem.release(acq).unwrap();
        recs.push(Rec {
            key,
            req,
            inside,
            rel,
        });
    }
    write_recs(&out, &recs);
}

/// Hand-off latencies (µs) with `permits` units per key. Per key, the acquisitions in the order
/// they got in each take the unit that came free first (the release that made room for them):
/// a unit is free from its last holder's release. An acquisition whose unit came free only
/// after it asked (every unit held, by the holders' own logs, so it had to wait) was handed
/// that unit: its hand-off is from that release to its getting in. With one permit this is
/// `redis.rs`'s rule (the previous holder's release to the next holder inside, for a holder
/// already waiting).
fn handoffs(recs: &[Rec], permits: usize) -> Vec<f64> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut by_key: HashMap<usize, Vec<Rec>> = HashMap::new();
    for r in recs {
        by_key.entry(r.key).or_default().push(*r);
    }
    let mut out = Vec::new();
    for v in by_key.values_mut() {
        v.sort_by_key(|r| r.inside);
        let mut free: BinaryHeap<Reverse<u64>> = (0..permits).map(|_| Reverse(0)).collect();
        for n in v.iter() {
            let Reverse(f) = free.pop().expect("permits units");
            if f > n.req && n.inside >= f {
                out.push((n.inside - f) as f64 / 1e3);
            }
            free.push(Reverse(n.rel));
        }
    }
    out.sort_by(|a, b| a.total_cmp(b));
    out
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

/// The scripts Redis has run (`EVAL` and `EVALSHA` calls), from `INFO commandstats`.
fn scripts_run(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_eval:") || l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split([':', ','])
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
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

/// `node peer.js PORT semaphore PERMITS` (the mode follows), if `bench/redis-peers-node` has
/// redis-semaphore installed.
fn peer(port: u16, notes: &mut Vec<String>) -> Option<Command> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/redis-peers-node");
    let has_node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_node || !dir.join("node_modules/redis-semaphore").exists() {
        notes.push(
            "redis-semaphore left out: no node, or bench/redis-peers-node not installed".into(),
        );
        return None;
    }
    let mut c = Command::new("node");
    c.arg(dir.join("peer.js"))
        .arg(port.to_string())
        .args(["semaphore", &PERMITS.to_string()]);
    Some(c)
}

fn main() {
    if std::env::var("KEYLOCK_BENCH_CHILD").is_ok() {
        child();
        return;
    }
    let quick = std::env::var("KEYLOCK_BENCH_QUICK").is_ok();
    let (runs, ops, duration_ms, rounds) = if quick {
        (3, 200, 1000, 1)
    } else {
        (7, 500, 3000, 3)
    };
    let server = Server::start();
    let url = server.url("prefix=semb");
    let load_before = uptime();
    let mut report = Report {
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let mut con = server.client();
    let has_peer = peer(server.port, &mut report.notes).is_some();
    let sem = open_sem(&url);
    let one = LockOptions::new().weight(1);

    // Uncontended acquire+release of one unit, beside two plain round trips.
    let g = "redis semaphore uncontended acquire+release";
    let key = LockKey::new(b"uncontended");
    for _ in 0..100 {
        let a = sem.acquire(key, &one).unwrap();
        sem.release(a).unwrap();
    }
    let (mut ping, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        for _ in 0..ops {
            let _: String = redis::cmd("PING").query(&mut con).unwrap();
            let _: String = redis::cmd("PING").query(&mut con).unwrap();
        }
        ping.push(t.elapsed().as_secs_f64() * 1e6 / ops as f64);
        let t = Instant::now();
        for _ in 0..ops {
            let a = sem.acquire(key, &one).unwrap();
            sem.release(a).unwrap();
        }
        ours.push(t.elapsed().as_secs_f64() * 1e6 / ops as f64);
    }
    let floor = "2 x PING (round-trip floor)";
    report.row(g, floor, "us/op", &ping, None, None);
    report.row(
        g,
        KEYLOCK,
        "us/op",
        &ours,
        Some((floor, median(&mut ping.clone()))),
        None,
    );
    let ours_med = median(&mut ours.clone());
    let mut peer_trips = None;
    if has_peer {
        let monitor = Monitor::start(server.port);
        // INFO is a client command too: asked before the feed settles, it falls outside.
        let scripts_before = scripts_run(&mut con);
        let before = monitor.settled();
        let out = peer(server.port, &mut Vec::new())
            .unwrap()
            .args(["uncontended", &runs.to_string(), &ops.to_string()])
            .output()
            .unwrap();
        let after = monitor.settled();
        let scripts_after = scripts_run(&mut con);
        assert!(
            out.status.success(),
            "{PEER}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Vec<f64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().parse::<f64>().unwrap() / 1e3)
            .collect();
        report.row(g, PEER, "us/op", &v, Some((KEYLOCK, ours_med)), None);
        // Per acquire+release, the 50 warm-up ones included; the connection's PING and handshake
        // (a few commands outside the loop) are counted too.
        let n = (runs * ops + 50) as f64;
        peer_trips = Some((
            (after - before) as f64 / n,
            (scripts_after - scripts_before) as f64 / n,
        ));
    }

    // Round trips per uncontended acquire and per release.
    let g = "redis semaphore round trips";
    let n = 1000;
    let held_keys: Vec<String> = (0..n).map(|i| format!("rt-{i}")).collect();
    let monitor = Monitor::start(server.port);
    // Each INFO is a client command on the feed: the first falls before `s0`, and the one
    // after the acquires is taken out of the releases' count.
    let e0 = scripts_run(&mut con);
    let s0 = monitor.settled();
    let held: Vec<_> = held_keys
        .iter()
        .map(|k| sem.acquire(LockKey::new(k.as_bytes()), &one).unwrap())
        .collect();
    let s1 = monitor.settled();
    let e1 = scripts_run(&mut con);
    for a in held {
        sem.release(a).unwrap();
    }
    let s2 = monitor.settled();
    let e2 = scripts_run(&mut con);
    drop(monitor);
    let per = |a: u64, b: u64| (b - a) as f64 / n as f64;
    let (acq_trips, rel_trips) = (per(s0, s1), per(s1 + 1, s2));
    report.row(
        g,
        "keylock acquire (MONITOR)",
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
        "keylock release (MONITOR)",
        "commands/op",
        &[rel_trips],
        None,
        Some(("at most one round trip per release", rel_trips <= 1.0)),
    );
    // INFO's own calls are no scripts; the counts are of EVAL/EVALSHA only.
    report.row(
        g,
        "keylock acquire (INFO commandstats: scripts)",
        "scripts/op",
        &[per(e0, e1)],
        None,
        None,
    );
    report.row(
        g,
        "keylock release (INFO commandstats: scripts)",
        "scripts/op",
        &[per(e1, e2)],
        None,
        None,
    );
    if let Some((t, s)) = peer_trips {
        report.row(
            g,
            &format!("{PEER} acquire+release (MONITOR)"),
            "commands/op",
            &[t],
            None,
            None,
        );
        report.row(
            g,
            &format!("{PEER} acquire+release (INFO commandstats: scripts)"),
            "scripts/op",
            &[s],
            None,
            None,
        );
    }

    // 4 processes on 4 keys, then on 1 key, permits 2.
    let dir = std::env::temp_dir().join(format!("keylock-redis-sem-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    // impl, ops/s, hand-offs, hand-off p50, p99, wait p50, p99, commands per acquisition
    type Figures = (
        String,
        Vec<f64>,
        Vec<f64>,
        Vec<f64>,
        Vec<f64>,
        Vec<f64>,
        Vec<f64>,
        Vec<f64>,
    );
    let mut impls = vec![KEYLOCK];
    if has_peer {
        impls.push(PEER);
    }
    // One contended round of `imp` on `keys` keys: every worker's log.
    let run_round = |imp: &str, keys: usize, tag: &str, duration_ms: u64| -> Vec<Rec> {
        let files: Vec<PathBuf> = (0..PROCESSES)
            .map(|p| dir.join(format!("{tag}-{p}")))
            .collect();
        let go = dir.join(format!("{tag}-go"));
        let kids: Vec<_> = files
            .iter()
            .map(|f| {
                if imp == KEYLOCK {
                    Command::new(&exe)
                        .env("KEYLOCK_BENCH_CHILD", "1")
                        .env("KEYLOCK_REDIS_URL", &url)
                        .env("KEYLOCK_DURATION_MS", duration_ms.to_string())
                        .env("KEYLOCK_GO", &go)
                        .env("KEYLOCK_OUT", f)
                        .env("KEYLOCK_KEYS", keys.to_string())
                        .spawn()
                        .unwrap()
                } else {
                    peer(server.port, &mut Vec::new())
                        .unwrap()
                        .args(["contend".to_owned(), keys.to_string()])
                        .arg(duration_ms.to_string())
                        .arg(&go)
                        .arg(f)
                        .arg(HOLD_MS.to_string())
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
        files.iter().flat_map(|f| read_recs(f)).collect()
    };
    let mut tables = Vec::new();
    for keys in KEYS {
        let g = format!(
            "redis semaphore {PROCESSES} processes on {keys} key{}, permits {PERMITS}",
            if keys == 1 { "" } else { "s" }
        );
        let mut results: Vec<Figures> = impls
            .iter()
            .map(|imp| {
                (
                    imp.to_string(),
                    vec![],
                    vec![],
                    vec![],
                    vec![],
                    vec![],
                    vec![],
                    vec![],
                )
            })
            .collect();
        // The implementations take turns, round by round (the machine's load drifts).
        for round in 0..rounds {
            for (&imp, res) in impls.iter().zip(results.iter_mut()) {
                let (_, rate, count, p50, p99, w50, w99, _) = res;
                let tag = format!("{}-{keys}-{round}", imp.replace(' ', "_"));
                let recs = run_round(imp, keys, &tag, duration_ms);
                rate.push(recs.len() as f64 / (duration_ms as f64 / 1e3));
                let h = handoffs(&recs, PERMITS as usize);
                count.push(h.len() as f64);
                let mut waits: Vec<f64> = recs
                    .iter()
                    .map(|r| (r.inside - r.req) as f64 / 1e3)
                    .collect();
                waits.sort_by(|a, b| a.total_cmp(b));
                w50.push(percentile(&waits, 0.5));
                w99.push(percentile(&waits, 0.99));
                p50.push(percentile(&h, 0.5));
                p99.push(percentile(&h, 0.99));
                eprintln!(
                    "{keys} key(s), {imp} round {round}: {} ops, {} hand-offs, p50 {:.0} us, p99 {:.0} us",
                    recs.len(),
                    h.len(),
                    percentile(&h, 0.5),
                    percentile(&h, 0.99)
                );
            }
        }
        // The commands clients send per acquisition under contention (waits, wake-ups and
        // polls included), in a round of its own: a MONITOR feed slows the server down.
        for (&imp, res) in impls.iter().zip(results.iter_mut()) {
            let monitor = Monitor::start(server.port);
            let before = monitor.settled();
            let tag = format!("{}-{keys}-monitor", imp.replace(' ', "_"));
            let recs = run_round(imp, keys, &tag, 1000);
            let after = monitor.settled();
            res.7.push((after - before) as f64 / recs.len() as f64);
        }
        let peer_p99 = results
            .iter()
            .find(|r| r.0 == PEER)
            .map(|r| median(&mut r.4.clone()));
        for (imp, rate, count, p50, p99, w50, w99, commands) in &results {
            report.row(&format!("{g}: throughput"), imp, "ops/s", rate, None, None);
            report.row(&format!("{g}: hand-offs"), imp, "count", count, None, None);
            report.row(&format!("{g}: hand-off p50"), imp, "us", p50, None, None);
            let best = peer_p99.filter(|_| imp == KEYLOCK);
            let target = best.map(|b| {
                (
                    "hand-off p99 at least 10x lower than redis-semaphore's",
                    median(&mut p99.clone()) * 10.0 <= b,
                )
            });
            let base = best.map(|b| (PEER, b));
            report.row(&format!("{g}: hand-off p99"), imp, "us", p99, base, target);
            report.row(&format!("{g}: wait p50"), imp, "us", w50, None, None);
            report.row(&format!("{g}: wait p99"), imp, "us", w99, None, None);
            report.row(
                &format!("{g}: commands per acquire+release (MONITOR, a 1 s round of its own)"),
                imp,
                "commands/op",
                commands,
                None,
                None,
            );
        }
        tables.push((g, results, peer_p99));
    }
    let _ = std::fs::remove_dir_all(&dir);

    // A small table.
    println!();
    println!(
        "{:<26} {:>12} {:>10} {:>12} {:>12} {:>12}",
        "", "acq+rel us", "ops/s", "hand-off p50", "hand-off p99", "wait p99"
    );
    let uncontended = |imp: &str| {
        report
            .rows
            .iter()
            .find(|r| {
                r["group"] == "redis semaphore uncontended acquire+release" && r["impl"] == imp
            })
            .and_then(|r| r["median"].as_f64())
            .unwrap_or(f64::NAN)
    };
    for (g, results, peer_p99) in &tables {
        println!("{g}");
        for (imp, rate, _, p50, p99, _, w99, _) in results {
            println!(
                "{:<26} {:>12.1} {:>10.0} {:>9.0} us {:>9.0} us {:>9.0} us",
                imp,
                uncontended(imp),
                median(&mut rate.clone()),
                median(&mut p50.clone()),
                median(&mut p99.clone()),
                median(&mut w99.clone())
            );
        }
        if let (Some(b), Some(k)) = (peer_p99, results.first()) {
            println!(
                "hand-off p99 ratio {PEER} / keylock: {:.1}x",
                b / median(&mut k.4.clone())
            );
        }
    }
    println!(
        "keylock round trips: {acq_trips:.3} per uncontended acquire, {rel_trips:.3} per release (MONITOR)"
    );

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
    let node_version = Command::new("node")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let doc = serde_json::json!({
        "suite": "keylock's Redis semaphore against redis-semaphore (one redis-server on loopback, one run)",
        "machine": {
            "cpu": cpu,
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "redis": redis_version,
            "node": node_version,
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
    let path = Path::new(&out_dir).join("redis-semaphore.json");
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

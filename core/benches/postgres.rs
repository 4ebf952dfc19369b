//! Benchmark of the PostgreSQL scope against the bare `pg_advisory_lock` / `pg_advisory_unlock`
//! pair, all against one PostgreSQL 15 server started here, in one run (`make bench-postgres`;
//! results in `$KEYLOCK_BENCH_DIR/postgres.json`):
//!
//! - round trips per uncontended acquire and per release: the statements clients sent, counted
//!   on the server by `pg_stat_statements` (top-level statements only: what runs inside the
//!   scope's SQL functions is not a round trip);
//! - uncontended acquire+release of one key, one client: keylock from Rust, keylock from Python
//!   (the wheel in `KEYLOCK_BENCH_PY`'s environment) and the bare pair through psycopg
//!   (`bench/postgres_peers.py`), median and p99 of 2,000 pairs each, in interleaved rounds;
//! - the hand-off between 4 processes on one key: from a holder's release to the next holder
//!   inside, p50 and p99 (CLOCK_MONOTONIC in every process), for keylock-postgres, the bare pair
//!   through psycopg, and keylock's Redis scope (with the `redis` feature; a `redis-server`
//!   started here);
//! - 4 processes on 16 keys: acquires+releases per second in total, keylock-postgres against
//!   the bare pair.

#[path = "../tests/postgres/server.rs"]
#[allow(dead_code)] // the tests use more of the server helper than this benchmark does
mod server;

#[path = "common/contention.rs"]
mod contention;
#[cfg(feature = "redis")]
#[path = "../tests/redis/server.rs"]
#[allow(dead_code)]
mod redis_server;

use contention::{Rec, handoffs, percentile, read_recs, uptime, wait_for_start, write_recs};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use keylock_core::{LockKey, LockOptions};
use server::Server;

const PROCESSES: usize = 4;

const DESCRIPTION: &str = "Workloads, all on one PostgreSQL 15 server on loopback (fsync=on, synchronous_commit=on) in one run. *Round trips*: top-level statements clients sent, counted by pg_stat_statements (track=top), over 1,000 uncontended acquires of distinct keys and then their releases, from an opened scope. Server execution time per operation comes from pg_stat_statements' total_exec_time over the same statements. *Uncontended*: one client, one key, 2,000 acquire+release pairs per implementation, in 4 interleaved rounds of 500 (after 200 warm-up pairs); per-pair latency, median and p99. The bare pair: `SELECT pg_advisory_lock(1)` then `SELECT pg_advisory_unlock(1)` through psycopg, autocommit, server-side prepared (prepare=True). The diagnostic row repeats the Rust loop after `ALTER DATABASE ... SET synchronous_commit = off` (reset afterwards): not the target's configuration, it shows the share of the WAL flush at each commit. *Hand-off*: 4 processes on one key, each acquires, reads CLOCK_MONOTONIC, releases at once, for ~5 s; a hand-off is the time from one holder's release call to the next holder inside, counted only when that holder asked before the release. *Throughput*: 4 processes on 16 keys (a random key each time), acquires+releases per second in total over ~5 s. The machine has 2 cores shared with other builds and tests and was loaded (uptime above): read the ratios within this run, not the absolute figures.";

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass it and nothing else.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// A worker process (this binary with `KEYLOCK_BENCH_CHILD`): one thread on `KEYLOCK_KEYS`
/// keys of the scope at `KEYLOCK_URL`.
fn child() {
    let url = std::env::var("KEYLOCK_URL").unwrap();
    let duration: u64 = std::env::var("KEYLOCK_DURATION_MS")
        .unwrap()
        .parse()
        .unwrap();
    let go = std::env::var("KEYLOCK_GO").unwrap();
    let out = std::env::var("KEYLOCK_OUT").unwrap();
    let keys: usize = std::env::var("KEYLOCK_KEYS").unwrap().parse().unwrap();
    let locks = keylock_core::open(&url).unwrap();
    let a = locks
        .acquire(LockKey::new(b"key-0"), &LockOptions::new())
        .unwrap();
    locks.release(a).unwrap();
    std::fs::write(format!("{out}.ready"), "").unwrap();
    let start = wait_for_start(&go);
    let end = start + duration * 1_000_000;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (mono_ns() + u64::from(std::process::id()));
    while mono_ns() < start {
        std::thread::sleep(Duration::from_micros(200));
    }
    let mut recs = Vec::new();
    loop {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = (rng % keys as u64) as usize;
        let name = format!("key-{key}");
        let req = mono_ns();
        if req >= end {
            break;
        }
        let acq = locks
            .acquire(LockKey::new(name.as_bytes()), &LockOptions::new())
            .unwrap();
        let inside = mono_ns();
        let rel = mono_ns();
        locks.release(acq).unwrap();
        recs.push(Rec {
            key,
            req,
            inside,
            rel,
        });
    }
    write_recs(&out, &recs);
}

/// How to start one contending worker of an implementation.
enum Worker<'a> {
    /// This binary as a child, on the scope at the URL.
    Rust(&'a str),
    /// `postgres_peers.py contend IMPL URL ...`.
    Py(&'a str, &'a str, &'a str),
}

/// Runs `PROCESSES` workers of `w` on `keys` keys for `duration_ms`; returns their records and
/// the measured window (s).
fn contend(
    w: &Worker<'_>,
    keys: usize,
    duration_ms: u64,
    tmp: &Path,
    tag: &str,
) -> (Vec<Rec>, f64) {
    let go = tmp.join(format!("{tag}.go"));
    let _ = std::fs::remove_file(&go);
    let outs: Vec<PathBuf> = (0..PROCESSES)
        .map(|i| tmp.join(format!("{tag}.{i}")))
        .collect();
    let children: Vec<Child> = outs
        .iter()
        .map(|out| {
            let _ = std::fs::remove_file(out);
            let _ = std::fs::remove_file(format!("{}.ready", out.display()));
            let mut c = match w {
                Worker::Rust(url) => {
                    let mut c = Command::new(std::env::current_exe().unwrap());
                    c.env("KEYLOCK_BENCH_CHILD", "1")
                        .env("KEYLOCK_URL", url)
                        .env("KEYLOCK_KEYS", keys.to_string())
                        .env("KEYLOCK_DURATION_MS", duration_ms.to_string())
                        .env("KEYLOCK_GO", &go)
                        .env("KEYLOCK_OUT", out);
                    c
                }
                Worker::Py(py, imp, url) => {
                    let mut c = Command::new(py);
                    c.arg(peers_script())
                        .args(["contend", imp, url])
                        .arg(keys.to_string())
                        .arg(duration_ms.to_string())
                        .arg(&go)
                        .arg(out);
                    c
                }
            };
            c.stdin(Stdio::null()).spawn().unwrap()
        })
        .collect();
    for out in &outs {
        let ready = PathBuf::from(format!("{}.ready", out.display()));
        let until = Instant::now() + Duration::from_secs(60);
        while !ready.exists() {
            assert!(Instant::now() < until, "a worker did not start: {tag}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let start = mono_ns() + 200_000_000;
    std::fs::write(&go, start.to_string()).unwrap();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a worker failed: {tag}");
    }
    let recs: Vec<Rec> = outs.iter().flat_map(|o| read_recs(o)).collect();
    (recs, duration_ms as f64 / 1e3)
}

fn peers_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/postgres_peers.py")
}

/// Top-level statements clients ran in the benchmark's database so far (less the counting
/// queries themselves), by query text: (calls, total execution time in ms).
fn statements(server: &Server) -> HashMap<String, (u64, f64)> {
    server
        .psql(
            "select calls, total_exec_time, regexp_replace(query, '\\s+', ' ', 'g') from pg_stat_statements \
             where dbid = (select oid from pg_database where datname = current_database()) \
             and query not like '%pg_stat_statements%'",
        )
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '|');
            let c = f.next()?.parse().ok()?;
            let t = f.next()?.parse().ok()?;
            Some((f.next()?.to_owned(), (c, t)))
        })
        .collect()
}

/// What ran between two snapshots: (total calls, total server execution time in ms, the
/// statements with their calls).
fn delta(
    a: &HashMap<String, (u64, f64)>,
    b: &HashMap<String, (u64, f64)>,
) -> (u64, f64, Vec<(String, u64)>) {
    let mut ms = 0.0;
    let mut out: Vec<(String, u64)> = b
        .iter()
        .map(|(q, &(c, t))| {
            let (c0, t0) = a.get(q).copied().unwrap_or((0, 0.0));
            ms += t - t0;
            (q.clone(), c - c0)
        })
        .filter(|(_, c)| *c > 0)
        .collect();
    out.sort_by_key(|x| std::cmp::Reverse(x.1));
    (out.iter().map(|(_, c)| c).sum(), ms, out)
}

fn py_latencies(py: &str, imp: &str, url: &str, pairs: usize) -> Vec<f64> {
    let out = Command::new(py)
        .arg(peers_script())
        .args(["uncontended", imp, url, &pairs.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{imp}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse::<f64>().unwrap() / 1e3)
        .collect()
}

fn main() {
    if std::env::var("KEYLOCK_BENCH_CHILD").is_ok() {
        child();
        return;
    }
    let quick = std::env::var("KEYLOCK_BENCH_QUICK").is_ok();
    let (rounds, per_round, duration_ms) = if quick {
        (2, 100, 1000)
    } else {
        (4, 500, 5000)
    };
    let py = std::env::var("KEYLOCK_BENCH_PY").unwrap_or_else(|_| "python3".to_owned());
    let tmp = std::env::temp_dir().join(format!("keylock-bench-pg-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let server = Server::with_settings(&[
        ("shared_preload_libraries", "pg_stat_statements"),
        ("pg_stat_statements.track", "top"),
    ]);
    server.psql("create extension pg_stat_statements");
    let pg_version = server.psql("show server_version").trim().to_owned();
    let url = server.url("bench");
    let load_before = uptime();
    println!("load before: {load_before}");
    let mut rows: Vec<serde_json::Value> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut table: Vec<String> = Vec::new();

    // 1. Round trips per uncontended acquire and per release (a lease long enough that no
    // hold is checked while they are counted).
    {
        let locks = keylock_core::open(&format!("{url}&lease=600s")).unwrap();
        let warm = locks
            .acquire(LockKey::new(b"warm"), &LockOptions::new())
            .unwrap();
        locks.release(warm).unwrap();
        let n = 1000u64;
        let names: Vec<String> = (0..n).map(|i| format!("rt-{i}")).collect();
        let s0 = statements(&server);
        let held: Vec<_> = names
            .iter()
            .map(|k| {
                locks
                    .acquire(LockKey::new(k.as_bytes()), &LockOptions::new())
                    .unwrap()
            })
            .collect();
        let s1 = statements(&server);
        for a in held {
            locks.release(a).unwrap();
        }
        let s2 = statements(&server);
        let (acq, acq_ms, acq_q) = delta(&s0, &s1);
        let (rel, rel_ms, rel_q) = delta(&s1, &s2);
        let per_acq = acq as f64 / n as f64;
        let per_rel = rel as f64 / n as f64;
        for (what, v, exec_us, qs) in [
            (
                "acquire (uncontended)",
                per_acq,
                acq_ms * 1e3 / n as f64,
                &acq_q,
            ),
            ("release", per_rel, rel_ms * 1e3 / n as f64, &rel_q),
        ] {
            rows.push(serde_json::json!({
                "name": format!("postgres round trips (pg_stat_statements): keylock {what}"),
                "group": "postgres round trips (pg_stat_statements)",
                "impl": format!("keylock {what}"),
                "unit": "statements/op",
                "median": v,
                "ops": n,
                "server exec us/op (pg_stat_statements total_exec_time)": exec_us,
                "statements": qs.iter().map(|(q, c)| serde_json::json!({"calls": c, "query": q})).collect::<Vec<_>>(),
                "target": "at most 1",
                "met": v <= 1.0,
            }));
            table.push(format!(
                "round trips per {what:<22} {v:>8.3} statements, server exec {exec_us:.1} us/op ({})",
                qs.iter()
                    .map(|(q, c)| format!("{c} x {}", &q[..q.len().min(50)]))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }

    // 2. Uncontended acquire+release, one key, one client: interleaved rounds.
    let g = "postgres uncontended acquire+release";
    let locks = keylock_core::open(&url).unwrap();
    let key = LockKey::new(b"key-0");
    for _ in 0..200 {
        let a = locks.acquire(key, &LockOptions::new()).unwrap();
        locks.release(a).unwrap();
    }
    let py_ok = Command::new(&py)
        .args(["-c", "import keylock, psycopg"])
        .status()
        .is_ok_and(|s| s.success());
    let mut lat: HashMap<&str, Vec<f64>> = HashMap::new();
    for _ in 0..rounds {
        let v = lat.entry("keylock (Rust)").or_default();
        for _ in 0..per_round {
            let t = Instant::now();
            let a = locks.acquire(key, &LockOptions::new()).unwrap();
            locks.release(a).unwrap();
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
        if py_ok {
            for (name, imp) in [
                ("keylock (Python)", "keylock"),
                (
                    "bare pg_advisory_lock/unlock (psycopg, prepared)",
                    "psycopg",
                ),
            ] {
                let got = py_latencies(&py, imp, &url, per_round);
                lat.entry(name).or_default().extend(got);
            }
        }
    }
    drop(locks);
    // Diagnostic, not the configuration the target is about: the same Rust loop with the
    // database's synchronous_commit off (new sessions only), to show how much of the gap is
    // the WAL flush at the commits (both calls write keylock_owners, an unlogged table, which
    // flushes nothing; the acquire takes a fence from a sequence, which logs, and then flushes
    // at commit, every 32nd value; the bare pair writes nothing). Set back after.
    server.psql("alter database keylock set synchronous_commit = off");
    {
        let locks = keylock_core::open(&url).unwrap();
        for _ in 0..200 {
            let a = locks.acquire(key, &LockOptions::new()).unwrap();
            locks.release(a).unwrap();
        }
        let v = lat
            .entry("keylock (Rust), diagnostic: synchronous_commit=off")
            .or_default();
        for _ in 0..rounds * per_round {
            let t = Instant::now();
            let a = locks.acquire(key, &LockOptions::new()).unwrap();
            locks.release(a).unwrap();
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    server.psql("alter database keylock reset synchronous_commit");
    if !py_ok {
        notes.push(format!(
            "Python parts left out: {py} cannot import keylock and psycopg"
        ));
    }
    let bare = "bare pg_advisory_lock/unlock (psycopg, prepared)";
    let bare_med = lat.get(bare).map(|v| percentile(&sorted(v.clone()), 0.5));
    for name in [
        bare,
        "keylock (Rust)",
        "keylock (Python)",
        "keylock (Rust), diagnostic: synchronous_commit=off",
    ] {
        let Some(v) = lat.get(name) else { continue };
        let s = sorted(v.clone());
        let (p50, p99) = (percentile(&s, 0.5), percentile(&s, 0.99));
        let ratio = bare_med.filter(|_| name != bare).map(|b| p50 / b);
        rows.push(serde_json::json!({
            "name": format!("{g}: {name}"),
            "group": g,
            "impl": name,
            "unit": "us/op",
            "median": p50,
            "p99": p99,
            "min": s.first(),
            "max": s.last(),
            "pairs": s.len(),
            "baseline": ratio.map(|_| format!("{g}: {bare}")),
            "ratio": ratio,
            "target": ratio.filter(|_| !name.contains("diagnostic")).map(|_| "<= 1.3x the bare pair"),
            "met": ratio.filter(|_| !name.contains("diagnostic")).map(|r| r <= 1.3),
        }));
        table.push(format!(
            "uncontended {name:<52} p50 {p50:>8.1} us  p99 {p99:>8.1} us{}",
            ratio.map(|r| format!("  {r:.2}x bare")).unwrap_or_default()
        ));
    }

    // 3 and 4. Hand-off (4 processes, 1 key) and throughput (4 processes, 16 keys).
    #[cfg(feature = "redis")]
    let redis = redis_server::Server::start();
    #[cfg(feature = "redis")]
    let redis_url = redis.url("prefix=bench");
    let mut contenders: Vec<(String, Worker<'_>, bool)> =
        vec![("keylock-postgres".to_owned(), Worker::Rust(&url), true)];
    if py_ok {
        contenders.push((
            "bare pg_advisory_lock/unlock (psycopg, 4 Python processes)".to_owned(),
            Worker::Py(&py, "psycopg", &url),
            true,
        ));
    }
    #[cfg(feature = "redis")]
    contenders.push(("keylock-redis".to_owned(), Worker::Rust(&redis_url), false));
    #[cfg(not(feature = "redis"))]
    notes.push("keylock-redis hand-off left out: built without the redis feature".into());
    for (name, w, throughput) in &contenders {
        let (recs, _) = contend(w, 1, duration_ms, &tmp, "handoff");
        let h = handoffs(&recs);
        let g = "postgres hand-off, 4 processes on 1 key";
        let (p50, p99) = (percentile(&h, 0.5), percentile(&h, 0.99));
        rows.push(serde_json::json!({
            "name": format!("{g}: {name}"),
            "group": g,
            "impl": name,
            "unit": "us",
            "median": p50,
            "p99": p99,
            "handoffs": h.len(),
            "acquisitions": recs.len(),
        }));
        table.push(format!(
            "hand-off   {name:<58} p50 {p50:>8.1} us  p99 {p99:>8.1} us  ({} hand-offs)",
            h.len()
        ));
        if *throughput {
            let (recs, secs) = contend(w, 16, duration_ms, &tmp, "throughput");
            let ops = recs.len() as f64 / secs;
            let g = "postgres throughput, 4 processes on 16 keys";
            rows.push(serde_json::json!({
                "name": format!("{g}: {name}"),
                "group": g,
                "impl": name,
                "unit": "ops/s",
                "median": ops,
                "acquisitions": recs.len(),
                "seconds": secs,
            }));
            table.push(format!(
                "throughput {name:<58} {ops:>10.0} acquire+release/s"
            ));
        }
    }
    // Ratios of the contended figures to the bare pair's, in this run.
    let bare_name = "bare pg_advisory_lock/unlock (psycopg, 4 Python processes)";
    for g in [
        "postgres throughput, 4 processes on 16 keys",
        "postgres hand-off, 4 processes on 1 key",
    ] {
        let base = rows
            .iter()
            .find(|r| r["group"] == g && r["impl"] == bare_name)
            .and_then(|r| r["median"].as_f64());
        if let Some(b) = base {
            for r in rows
                .iter_mut()
                .filter(|r| r["group"] == g && r["impl"] != bare_name)
            {
                let m = r["median"].as_f64().unwrap_or(f64::NAN);
                r["baseline"] = serde_json::json!(format!("{g}: {bare_name}"));
                r["ratio"] = serde_json::json!(m / b);
            }
        }
    }

    let load_after = uptime();
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
        "suite": "keylock PostgreSQL scope against the bare advisory-lock pair (one PostgreSQL 15 server on loopback, one run)",
        "machine": {
            "cpu": cpu,
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "postgres": pg_version,
            "uptime before": load_before,
            "uptime after": load_after,
            "notes": notes.join("; "),
        },
        "date": Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"]).output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default(),
        "description": DESCRIPTION,
        "results": rows,
    });
    for l in &table {
        println!("{l}");
    }
    println!("load before: {load_before}\nload after:  {load_after}");
    for n in &notes {
        println!("note: {n}");
    }
    let out_dir = std::env::var("KEYLOCK_BENCH_DIR").unwrap_or_else(|_| "target".to_owned());
    std::fs::create_dir_all(&out_dir).unwrap();
    let path = Path::new(&out_dir).join("postgres.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    println!("wrote {}", path.display());
    let _ = std::fs::remove_dir_all(&tmp);
}

//! What the server scopes' benchmarks share (`redis.rs`, `redis_semaphore.rs`, `postgres.rs`):
//! the records of a contended run, written by worker processes and read back, their hand-off
//! latencies, the start signal, percentiles and the machine's load. Each benchmark keeps its
//! own clock (the one its peers read) and its own workers.
// Each benchmark uses its own subset of these.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One acquisition in a contended run: key, when it was asked for, when the holder was
/// inside, when it began to release (ns on one clock for every process).
#[derive(Clone, Copy)]
pub(crate) struct Rec {
    pub(crate) key: usize,
    pub(crate) req: u64,
    pub(crate) inside: u64,
    pub(crate) rel: u64,
}

/// Writes `recs` to `path`, one `KEY REQ INSIDE REL` line each.
pub(crate) fn write_recs(path: &str, recs: &[Rec]) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for r in recs {
        writeln!(f, "{} {} {} {}", r.key, r.req, r.inside, r.rel).unwrap();
    }
}

/// Reads what [`write_recs`] wrote.
pub(crate) fn read_recs(path: &Path) -> Vec<Rec> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            Rec {
                key: f[0] as usize,
                req: f[1],
                inside: f[2],
                rel: f[3],
            }
        })
        .collect()
}

/// Hand-off latencies (µs), sorted: per key, holders in the order they got in; a next holder
/// that asked before the previous one's release call was handed the key.
pub(crate) fn handoffs(recs: &[Rec]) -> Vec<f64> {
    let mut by_key: HashMap<usize, Vec<Rec>> = HashMap::new();
    for r in recs {
        by_key.entry(r.key).or_default().push(*r);
    }
    let mut out = Vec::new();
    for v in by_key.values_mut() {
        v.sort_by_key(|r| r.inside);
        for w in v.windows(2) {
            let (p, n) = (w[0], w[1]);
            if n.req < p.rel && n.inside >= p.rel {
                out.push((n.inside - p.rel) as f64 / 1e3);
            }
        }
    }
    out.sort_by(|a, b| a.total_cmp(b));
    out
}

/// Waits for the file `go` to hold the start time (ns), as every worker does.
pub(crate) fn wait_for_start(go: &str) -> u64 {
    loop {
        if let Ok(text) = std::fs::read_to_string(go)
            && let Ok(t) = text.trim().parse()
        {
            return t;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The median of `v` (sorted in place); NaN for none.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The `p` quantile (0 to 1) of `sorted`, nearest rank; NaN for none.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// `uptime`'s line: the machine's load beside the figures.
pub(crate) fn uptime() -> String {
    Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

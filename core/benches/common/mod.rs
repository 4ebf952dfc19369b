//! Alternatives shared by the benchmarks: keyed locks written the way people write them.
#![allow(dead_code)] // each benchmark binary uses a different subset

pub(crate) mod cpu_time;

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use dashmap::DashMap;

/// The naive keyed lock: one global mutex around a map of `Arc<Mutex<()>>`, lookup-or-insert,
/// then lock the per-key mutex outside the map lock. Entries are never removed (removing one
/// safely is the hard part, and the usual code does not try).
pub(crate) struct NaiveMap<K> {
    map: parking_lot::Mutex<HashMap<K, Arc<parking_lot::Mutex<()>>>>,
}

impl<K> Default for NaiveMap<K> {
    fn default() -> Self {
        Self {
            map: parking_lot::Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone> NaiveMap<K> {
    /// The per-key mutex for `key`, created on first use.
    pub(crate) fn get(&self, key: &K) -> Arc<parking_lot::Mutex<()>> {
        let mut map = self.map.lock();
        match map.get(key) {
            Some(m) => Arc::clone(m),
            None => Arc::clone(map.entry(key.clone()).or_default()),
        }
    }

    /// Entries in the map.
    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }
}

impl NaiveMap<Vec<u8>> {
    /// Like `get`, for a borrowed byte string (no allocation when the entry exists).
    pub(crate) fn get_bytes(&self, key: &[u8]) -> Arc<parking_lot::Mutex<()>> {
        let mut map = self.map.lock();
        match map.get(key) {
            Some(m) => Arc::clone(m),
            None => Arc::clone(map.entry(key.to_vec()).or_default()),
        }
    }
}

/// The DashMap keyed lock: a sharded concurrent map of `Arc<Mutex<()>>`; lookup under the
/// shard's read lock, insert under its write lock; lock the per-key mutex outside the map.
pub(crate) struct DashKeyed<K: Hash + Eq> {
    map: DashMap<K, Arc<parking_lot::Mutex<()>>>,
}

impl<K: Hash + Eq> Default for DashKeyed<K> {
    fn default() -> Self {
        Self {
            map: DashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> DashKeyed<K> {
    /// The per-key mutex for `key`, created on first use.
    pub(crate) fn get(&self, key: &K) -> Arc<parking_lot::Mutex<()>> {
        if let Some(m) = self.map.get(key) {
            return Arc::clone(&m);
        }
        Arc::clone(&self.map.entry(key.clone()).or_default())
    }
}

impl DashKeyed<Vec<u8>> {
    /// Like `get`, for a borrowed byte string.
    pub(crate) fn get_bytes(&self, key: &[u8]) -> Arc<parking_lot::Mutex<()>> {
        if let Some(m) = self.map.get(key) {
            return Arc::clone(&m);
        }
        Arc::clone(&self.map.entry(key.to_vec()).or_default())
    }
}

/// A 16-byte key made from `i`, as a binding would pass it.
pub(crate) fn key16(i: u64) -> [u8; 16] {
    let mut k = *b"user:0000000000_";
    let digits = format!("{:010}", i % 10_000_000_000);
    k[5..15].copy_from_slice(digits.as_bytes());
    k
}

/// One benchmark figure, written in the shared results format (see bench/README.md).
pub(crate) struct Figure {
    pub(crate) name: String,
    pub(crate) unit: &'static str,
    pub(crate) runs: Vec<f64>,
    pub(crate) baseline: Option<String>,
    pub(crate) target: Option<&'static str>,
    /// Extra fields for tables and plots: group, impl, threads, read_pct, keys, ...
    pub(crate) params: Vec<(&'static str, String)>,
    /// true when a bigger figure is better (ops/s), false for ns/op and bytes.
    pub(crate) higher_is_better: bool,
    /// The ratio this figure must reach against its baseline for its target, if any:
    /// `ratio >= min_ratio` when higher is better, `ratio <= min_ratio` otherwise.
    pub(crate) goal: Option<f64>,
    /// A verdict set directly, for targets that are not ratios (sizes in bytes).
    pub(crate) met: Option<bool>,
}

impl Figure {
    pub(crate) fn new(name: impl Into<String>, unit: &'static str, runs: Vec<f64>) -> Self {
        Self {
            name: name.into(),
            unit,
            runs,
            baseline: None,
            target: None,
            params: Vec::new(),
            higher_is_better: unit.ends_with("/s"),
            goal: None,
            met: None,
        }
    }

    pub(crate) fn param(mut self, k: &'static str, v: impl ToString) -> Self {
        self.params.push((k, v.to_string()));
        self
    }

    pub(crate) fn median(&self) -> f64 {
        median(&self.runs)
    }
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return f64::NAN;
    }
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

fn sh(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The machine, in the shared format's `machine` object.
pub(crate) fn machine_json() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{{\"cpu\": {}, \"cores\": {}, \"os\": {}, \"rustc\": {}}}",
        json_str(&cpu),
        cores,
        json_str(&sh("uname", &["-sr"])),
        json_str(&sh("rustc", &["--version"])),
    )
}

/// Fills ratio and met from each figure's baseline, prints a table and writes the JSON file
/// named by `$KEYLOCK_BENCH_DIR/<file>` (when that variable is set).
pub(crate) fn report(suite: &str, file: &str, figures: &[Figure]) {
    let by_name: HashMap<&str, f64> = figures
        .iter()
        .map(|f| (f.name.as_str(), f.median()))
        .collect();
    let mut rows = Vec::new();
    println!("\n{suite}");
    println!(
        "{:<72} {:>14} {:>12} {:>12} {:>8}",
        "name", "median", "min", "max", "ratio"
    );
    for f in figures {
        let med = f.median();
        let min = f.runs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = f.runs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let ratio = f
            .baseline
            .as_deref()
            .and_then(|b| by_name.get(b))
            .map(|b| med / b);
        let met = f.met.or(match (f.goal, ratio) {
            (Some(g), Some(r)) => Some(if f.higher_is_better { r >= g } else { r <= g }),
            _ => None,
        });
        println!(
            "{:<72} {:>14.4e} {:>12.4e} {:>12.4e} {:>8} {}",
            f.name,
            med,
            min,
            max,
            ratio.map_or("-".into(), |r| format!("{r:.2}x")),
            match met {
                Some(true) => "target met",
                Some(false) => "TARGET MISSED",
                None => "",
            }
        );
        let runs: Vec<String> = f.runs.iter().map(|&x| json_num(x)).collect();
        let mut params = String::new();
        for (k, v) in &f.params {
            let val = if v.parse::<f64>().is_ok() {
                v.clone()
            } else {
                json_str(v)
            };
            params.push_str(&format!(", {}: {}", json_str(k), val));
        }
        rows.push(format!(
            "    {{\"name\": {}, \"unit\": {}, \"median\": {}, \"min\": {}, \"max\": {}, \"runs\": [{}], \"baseline\": {}, \"ratio\": {}, \"target\": {}, \"met\": {}{}}}",
            json_str(&f.name),
            json_str(f.unit),
            json_num(med),
            json_num(min),
            json_num(max),
            runs.join(", "),
            f.baseline.as_deref().map_or("null".into(), json_str),
            ratio.map_or("null".into(), json_num),
            f.target.map_or("null".into(), json_str),
            met.map_or("null".into(), |m| m.to_string()),
            params,
        ));
    }
    let date = sh("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]);
    let json = format!(
        "{{\n  \"suite\": {},\n  \"machine\": {},\n  \"date\": {},\n  \"results\": [\n{}\n  ]\n}}\n",
        json_str(suite),
        machine_json(),
        json_str(&date),
        rows.join(",\n")
    );
    if let Some(dir) = std::env::var_os("KEYLOCK_BENCH_DIR") {
        let path = std::path::Path::new(&dir).join(file);
        std::fs::create_dir_all(&dir).expect("create the results folder");
        std::fs::write(&path, json).expect("write the results file");
        println!("wrote {}", path.display());
    }
}

/// Whether this is a quick run (`--quick` or `KEYLOCK_BENCH_QUICK`).
pub(crate) fn quick() -> bool {
    std::env::var_os("KEYLOCK_BENCH_QUICK").is_some() || std::env::args().any(|a| a == "--quick")
}

/// The thread counts given as arguments, or 1 2 4 8 16.
pub(crate) fn thread_counts() -> Vec<usize> {
    let v: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if v.is_empty() {
        vec![1, 2, 4, 8, 16]
    } else {
        v
    }
}

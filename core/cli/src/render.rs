//! What the command prints: the keys as a table, one key in full, and both as JSON.
//!
//! JSON records (one per key, `list --json` gives an array of them, `info --json` one):
//! `key` (the text, when the bytes are printable UTF-8), `key_hex`, `space` ("keys" or
//! "names"), or `stripe` for a striped lock's stripe; `held` (false while its waiters are
//! between a release and their grant), `mode`, `fence`, `holders`, `holds`, `owner`,
//! `lease_remaining_ms`, `units`, `permits` (a keyed semaphore's units per key; null for a
//! lock), `waiters` (a count), `holder_records` and `waiter_records` (pid, mode, units, owner
//! and, for waiters, `waited_ms`; empty where the scope keeps none).

use std::collections::HashMap;
use std::time::Duration;

use keylock_core::{
    KeyReport, KeySpace, KeyedLock, LockId, LockInfo, LockKey, Mode, Party, Result,
};
use serde_json::{Value, json};

/// `key` in `space` with its holders and waiters; `None` when it is free and unawaited.
pub(crate) fn one(lock: &dyn KeyedLock, space: KeySpace, key: &[u8]) -> Result<Option<KeyReport>> {
    let info = lock.info(LockKey { space, bytes: key })?;
    let id = match lock.stripe_of(LockKey { space, bytes: key }) {
        Some(stripe) => LockId::Stripe(stripe),
        None if space == KeySpace::Names => LockId::Name(key.to_vec()),
        None => LockId::Key(key.to_vec()),
    };
    // The holders and waiters, where the scope records them, are in its list.
    let listed = lock.list()?.into_iter().find(|r| r.id == id);
    Ok(match (listed, info) {
        (Some(r), _) => Some(r),
        (None, Some(info)) => Some(KeyReport {
            id,
            info: Some(info),
            holders: Vec::new(),
            waiters: Vec::new(),
        }),
        (None, None) => None,
    })
}

/// The key's text, when its bytes are printable UTF-8.
fn printable(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes)
        .ok()
        .filter(|s| !s.is_empty() && !s.chars().any(char::is_control))
}

/// A key as text: itself when its bytes are printable UTF-8, else `0x` and hex.
pub(crate) fn key_text(space: KeySpace, bytes: &[u8]) -> String {
    let text = printable(bytes).map_or_else(|| format!("0x{}", hex(bytes)), str::to_owned);
    match space {
        KeySpace::Keys => text,
        KeySpace::Names => format!("name {text}"),
    }
}

fn id_text(id: &LockId) -> String {
    match id {
        LockId::Key(b) => key_text(KeySpace::Keys, b),
        LockId::Name(b) => key_text(KeySpace::Names, b),
        LockId::Stripe(s) => format!("stripe {s}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A duration as a person reads it: `850ms`, `12.4s`, `3m07s`, `2h05m`.
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", d.as_secs_f64()),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

fn mode(m: Mode) -> &'static str {
    match m {
        Mode::Exclusive => "exclusive",
        Mode::Shared => "shared",
    }
}

/// Who holds: pids where known, else the count.
fn holders_text(r: &KeyReport) -> String {
    let count = r.info.as_ref().map_or(0, |i| i.holders as usize);
    let pids: Vec<String> = r
        .holders
        .iter()
        .map(|p| p.pid.map_or_else(|| "?".to_owned(), |pid| pid.to_string()))
        .collect();
    match (count, pids.is_empty()) {
        (0, true) => "-".to_owned(),
        (n, true) => n.to_string(),
        (_, false) if pids.len() <= 4 => format!("pid {}", pids.join(",")),
        (_, false) => format!("{} (pid {},...)", pids.len(), pids[..3].join(",")),
    }
}

const HEADINGS: [&str; 8] = [
    "KEY",
    "MODE",
    "FENCE",
    "HOLDERS",
    "LEASE",
    "WAITERS",
    "LONGEST WAIT",
    "HELD",
];

/// What a key's MODE column says: its mode, or for a keyed semaphore (`permits`) its units
/// held of the permits (the UNITS column).
fn mode_cell(info: Option<&LockInfo>, permits: Option<u32>) -> String {
    match (info, permits) {
        (None, _) => "free".to_owned(),
        (Some(i), None) => mode(i.mode).to_owned(),
        (Some(i), Some(p)) => format!("{}/{p}", i.units),
    }
}

/// The keys as an aligned table, at most `max_rows` of them; the HELD column (how long each
/// hold has been seen, by `watch`) only when `held_for` is given. A keyed semaphore's
/// (`permits`) shows UNITS, held of the permits, where a lock's shows MODE.
pub(crate) fn table(
    keys: &[KeyReport],
    held_for: Option<&HashMap<(LockId, u64), Duration>>,
    max_rows: usize,
    permits: Option<u32>,
) -> String {
    let columns = if held_for.is_some() { 8 } else { 7 };
    let mut headings: Vec<String> = HEADINGS[..columns].iter().map(|s| s.to_string()).collect();
    if permits.is_some() {
        headings[1] = "UNITS".to_owned();
    }
    let mut rows: Vec<Vec<String>> = vec![headings];
    for r in keys.iter().take(max_rows) {
        let info = r.info.as_ref();
        let mut row = vec![
            id_text(&r.id),
            mode_cell(info, permits),
            info.map_or("-".to_owned(), |i| i.fence.to_string()),
            holders_text(r),
            info.and_then(|i| i.lease_remaining)
                .map_or("-".to_owned(), duration),
            r.waiting().to_string(),
            r.longest_wait().map_or("-".to_owned(), duration),
        ];
        if let Some(held) = held_for {
            let seen = info.and_then(|i| held.get(&(r.id.clone(), i.fence)));
            row.push(seen.map_or("-".to_owned(), |d| format!(">={}", duration(*d))));
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    if keys.len() > max_rows {
        out.push_str(&format!("... and {} more\n", keys.len() - max_rows));
    }
    if keys.is_empty() {
        out.push_str("(no key is held or awaited)\n");
    }
    out
}

fn party_text(p: &Party) -> String {
    let mut s = format!(
        "pid {} {}",
        p.pid.map_or_else(|| "?".to_owned(), |pid| pid.to_string()),
        mode(p.mode)
    );
    if p.units > 1 {
        s.push_str(&format!(" units {}", p.units));
    }
    if let Some(o) = p.owner {
        s.push_str(&format!(" owner {}", o.get()));
    }
    if let Some(w) = p.waited {
        s.push_str(&format!(" waiting {}", duration(w)));
    }
    s
}

/// One key in full, a field per line; a keyed semaphore's (`permits`) with its units held of
/// the permits.
pub(crate) fn detail(r: &KeyReport, permits: Option<u32>) -> String {
    let mut out = format!("key:      {}\n", id_text(&r.id));
    match &r.info {
        Some(i) => {
            match permits {
                Some(p) => out.push_str(&format!("units:    {} of {p}\n", i.units)),
                None => out.push_str(&format!("mode:     {}\n", mode(i.mode))),
            }
            out.push_str(&format!("fence:    {}\n", i.fence));
            out.push_str(&format!("holders:  {}\n", i.holders));
            if i.mode == Mode::Exclusive {
                out.push_str(&format!("holds:    {}\n", i.holds));
            }
            if let Some(o) = i.owner {
                out.push_str(&format!("owner:    {}\n", o.get()));
            }
            out.push_str(&format!(
                "lease:    {}\n",
                i.lease_remaining
                    .map_or("none".to_owned(), |d| format!("{} left", duration(d)))
            ));
            if permits.is_none() && i.units != i.holders {
                out.push_str(&format!("units:    {}\n", i.units));
            }
        }
        None => out.push_str("mode:     free (its waiters are being granted)\n"),
    }
    out.push_str(&format!("waiters:  {}\n", r.waiting()));
    for p in &r.holders {
        out.push_str(&format!("  holder  {}\n", party_text(p)));
    }
    for p in &r.waiters {
        out.push_str(&format!("  waiter  {}\n", party_text(p)));
    }
    out
}

fn json_party(p: &Party) -> Value {
    json!({
        "pid": p.pid,
        "mode": mode(p.mode),
        "units": p.units,
        "owner": p.owner.map(|o| o.get()),
        "waited_ms": p.waited.map(|d| d.as_millis() as u64),
    })
}

/// One key's JSON record; `permits`, a keyed semaphore's units per key.
pub(crate) fn json_key(r: &KeyReport, permits: Option<u32>) -> Value {
    let mut v = match &r.id {
        LockId::Key(b) | LockId::Name(b) => {
            let space = if matches!(r.id, LockId::Name(_)) {
                "names"
            } else {
                "keys"
            };
            json!({
                "key": printable(b),
                "key_hex": hex(b),
                "space": space,
            })
        }
        LockId::Stripe(s) => json!({ "stripe": s }),
    };
    let info = r.info.as_ref();
    let fields = json!({
        "held": info.is_some(),
        "mode": info.map(|i| mode(i.mode)),
        "fence": info.map(|i| i.fence),
        "holders": info.map_or(0, |i| i.holders),
        "holds": info.map_or(0, |i| i.holds),
        "owner": info.and_then(|i| i.owner).map(|o| o.get()),
        "lease_remaining_ms": info.and_then(|i| i.lease_remaining).map(|d| d.as_millis() as u64),
        "units": info.map_or(0, |i| i.units),
        "permits": permits,
        "waiters": r.waiting(),
        "holder_records": r.holders.iter().map(json_party).collect::<Vec<_>>(),
        "waiter_records": r.waiters.iter().map(json_party).collect::<Vec<_>>(),
    });
    if let (Value::Object(m), Value::Object(f)) = (&mut v, fields) {
        m.extend(f);
    }
    v
}

/// `list --json`: an array of key records.
pub(crate) fn json_list(keys: &[KeyReport], permits: Option<u32>) -> Value {
    Value::Array(keys.iter().map(|r| json_key(r, permits)).collect())
}

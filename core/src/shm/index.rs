//! The pool's index: which entry holds which key. Keys hash (spec 1, XXH3-64) into buckets;
//! each bucket is a chain of entries. Lookups read the chains without the table mutex; binding
//! a key to an entry, and taking an idle entry from another key (eviction), happen under it.
//!
//! An entry stays bound to its key after it is released, so that the next acquire of the same
//! key finds it without the mutex; only an idle entry (free, nobody waiting) is evicted, when a
//! new key needs one and the free list is empty.

use std::sync::atomic::{Ordering, fence};

use super::layout::*;
use super::region::{Region, TableGuard};
use crate::error::{Error, Result};

/// The hash of `key` in `space` (spec 1): `XXH3_64bits_withSeed(key, HASH_SEED + space)`.
#[inline]
pub(crate) fn hash_key(space: u8, key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, HASH_SEED.wrapping_add(u64::from(space)))
}

/// The key's bytes as the region stores them: 8-byte little-endian words, zero-padded.
#[inline(always)]
fn key_word(key: &[u8], i: usize) -> u64 {
    let start = i * 8;
    if let Some(chunk) = key.get(start..start + 8) {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(chunk);
        return u64::from_le_bytes(buf);
    }
    let mut w = 0u64;
    for (j, &b) in key[start.min(key.len())..].iter().enumerate() {
        w |= u64::from(b) << (8 * j);
    }
    w
}

/// Whether entry `e` holds (`space`, `key`), by relaxed reads (callers validate).
#[inline(always)]
fn holds_key(e: &Entry, h: u64, space: u8, key: &[u8]) -> bool {
    // (No entry holds a longer key; the check also keeps a corrupt `key_len` from sending
    // the comparison past the entry's key space.)
    if key.len() > KEY_MAX
        || e.hash.load(Ordering::Relaxed) != h
        || e.key_len.load(Ordering::Relaxed) as usize != key.len()
        || e.space.load(Ordering::Relaxed) != u32::from(space)
    {
        return false;
    }
    (0..key.len().div_ceil(8)).all(|i| e.key[i].load(Ordering::Relaxed) == key_word(key, i))
}

/// The longest chain a lock-free lookup walks before leaving the search to the mutex.
const FAST_WALK: usize = 32;

/// Finds the entry bound to the key without the table mutex: the entry and a lock word read
/// while the entry was bound to this key (a compare-and-swap expecting that word can only
/// succeed on this key's entry). `None`: not found (the caller asks under the mutex).
#[inline]
pub(crate) fn find_fast(r: &Region, h: u64, space: u8, key: &[u8]) -> Option<(u32, u64)> {
    let mask = r.header.buckets - 1;
    let mut next = r.bucket((h as u32) & mask).ok()?.load(Ordering::Acquire);
    for _ in 0..FAST_WALK {
        let index = next.checked_sub(1)?;
        let e = r.entry(index).ok()?;
        let bind = e.bind.load(Ordering::Acquire);
        if bind & 3 == BIND_BOUND && holds_key(e, h, space, key) {
            // Seqlock-style: the key was read between two reads of `bind`; an eviction
            // changes `bind` (and the word) before it rewrites the key.
            fence(Ordering::Acquire);
            let w = e.word.load(Ordering::Acquire);
            if e.bind.load(Ordering::Relaxed) == bind {
                return Some((index, w));
            }
            return None;
        }
        next = e.next.load(Ordering::Acquire);
    }
    None
}

/// Finds the entry bound to the key, under the mutex.
pub(crate) fn find_locked(
    t: &TableGuard<'_>,
    h: u64,
    space: u8,
    key: &[u8],
) -> Result<Option<u32>> {
    let r = t.region;
    let mask = r.header.buckets - 1;
    let mut next = r.bucket((h as u32) & mask)?.load(Ordering::Relaxed);
    let mut steps = 0u32;
    while let Some(index) = next.checked_sub(1) {
        let e = r.entry(index)?;
        if e.bind.load(Ordering::Relaxed) & 3 == BIND_BOUND && holds_key(e, h, space, key) {
            return Ok(Some(index));
        }
        next = e.next.load(Ordering::Relaxed);
        steps += 1;
        if steps > r.header.capacity {
            return Err(r.corrupt("a cycle in a bucket chain"));
        }
    }
    Ok(None)
}

/// The entry bound to the key, binding one if needed: from the free list, else an idle
/// entry taken from its key. `CapacityExceeded` when every entry is held or awaited.
pub(crate) fn bind_locked(t: &TableGuard<'_>, h: u64, space: u8, key: &[u8]) -> Result<u32> {
    if let Some(index) = find_locked(t, h, space, key)? {
        return Ok(index);
    }
    if key.len() > KEY_MAX {
        return Err(Error::InvalidArgument(
            "a shm key pool key is at most 256 bytes",
        ));
    }
    let r = t.region;
    let rt = r.runtime();
    let index = match rt.free_entries.load(Ordering::Relaxed).checked_sub(1) {
        Some(index) => {
            let e = r.entry(index)?;
            rt.free_entries
                .store(e.next.load(Ordering::Relaxed), Ordering::Relaxed);
            index
        }
        None => evict(t)?.ok_or(Error::CapacityExceeded)?,
    };
    let e = r.entry(index)?;
    // The entry is unbound and SLOW (so no fast path touches it): write the key, then publish.
    let epoch = e.bind.load(Ordering::Relaxed) >> 2;
    e.bind
        .store(((epoch + 1) << 2) | BIND_BUSY, Ordering::Relaxed);
    fence(Ordering::Release);
    for i in 0..KEY_MAX / 8 {
        let w = if i * 8 < key.len() {
            key_word(key, i)
        } else {
            0
        };
        e.key[i].store(w, Ordering::Relaxed);
    }
    e.key_len.store(key.len() as u32, Ordering::Relaxed);
    e.space.store(u32::from(space), Ordering::Relaxed);
    e.hash.store(h, Ordering::Relaxed);
    // The new binding's fence starts above every fence any evicted key ever had, so a key
    // that comes back gets fences above its old ones.
    let start = rt.fence_floor.load(Ordering::Relaxed).saturating_add(1);
    e.fence_hi
        .store((start >> word::LO_BITS) as u32, Ordering::Relaxed);
    e.bind
        .store(((epoch + 1) << 2) | BIND_BOUND, Ordering::Release);
    let bucket = r.bucket((h as u32) & (r.header.buckets - 1))?;
    e.next
        .store(bucket.load(Ordering::Relaxed), Ordering::Relaxed);
    bucket.store(index + 1, Ordering::Release);
    e.word.store(
        word::make(start & word::LO_MAX, false, 0),
        Ordering::Release,
    );
    Ok(index)
}

/// Takes an idle entry from its key, leaving it unbound and `SLOW`; `None` when none is idle.
fn evict(t: &TableGuard<'_>) -> Result<Option<u32>> {
    let r = t.region;
    let rt = r.runtime();
    let n = r.header.capacity;
    for _ in 0..n {
        let index = rt.hand.load(Ordering::Relaxed) % n;
        rt.hand.store((index + 1) % n, Ordering::Relaxed);
        let e = r.entry(index)?;
        let w = e.word.load(Ordering::Acquire);
        if w & (word::XPROC | word::SLOW) != 0 || e.bind.load(Ordering::Relaxed) & 3 != BIND_BOUND {
            continue;
        }
        // Idle: free, no waiters, no holder state. SLOW shuts out the fast path; if a fast
        // acquire got there first, look further.
        if e.word
            .compare_exchange(w, w | word::SLOW, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        let fence_now = word::fence(w, e.fence_hi.load(Ordering::Relaxed));
        rt.fence_floor.fetch_max(fence_now, Ordering::Relaxed);
        unchain(t, index)?;
        let epoch = e.bind.load(Ordering::Relaxed) >> 2;
        e.bind
            .store(((epoch + 1) << 2) | BIND_FREE, Ordering::Relaxed);
        return Ok(Some(index));
    }
    Ok(None)
}

/// Removes entry `index` from its bucket's chain.
fn unchain(t: &TableGuard<'_>, index: u32) -> Result<()> {
    let r = t.region;
    let e = r.entry(index)?;
    let bucket = r.bucket((e.hash.load(Ordering::Relaxed) as u32) & (r.header.buckets - 1))?;
    let after = e.next.load(Ordering::Relaxed);
    if bucket.load(Ordering::Relaxed) == index + 1 {
        bucket.store(after, Ordering::Release);
        return Ok(());
    }
    let mut at = bucket.load(Ordering::Relaxed);
    let mut steps = 0u32;
    while let Some(i) = at.checked_sub(1) {
        let prev = r.entry(i)?;
        let next = prev.next.load(Ordering::Relaxed);
        if next == index + 1 {
            prev.next.store(after, Ordering::Release);
            return Ok(());
        }
        at = next;
        steps += 1;
        if steps > r.header.capacity {
            return Err(r.corrupt("a cycle in a bucket chain"));
        }
    }
    Err(r.corrupt("an entry missing from its bucket chain"))
}

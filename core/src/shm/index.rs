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
    tail_word(&key[start.min(key.len())..])
}

/// A key's last bytes (fewer than 8) as the region stores them: zero-padded.
#[inline(always)]
fn tail_word(tail: &[u8]) -> u64 {
    let mut w = 0u64;
    for (j, &b) in tail.iter().enumerate() {
        w |= u64::from(b) << (8 * j);
    }
    w
}

/// The key entry `e` is bound to, as its space and bytes (under the table mutex, where the
/// binding cannot change). A length or space out of range is `Incompatible`.
pub(crate) fn stored_key(r: &Region, e: &Entry) -> Result<(u8, Vec<u8>)> {
    let len = e.key_len.load(Ordering::Relaxed) as usize;
    let space = e.space.load(Ordering::Relaxed);
    if len > KEY_MAX {
        return Err(r.corrupt("a key length"));
    }
    let space = u8::try_from(space).map_err(|_| r.corrupt("a key space"))?;
    let mut bytes = Vec::with_capacity(len.next_multiple_of(8));
    for w in &e.key[..len.div_ceil(8)] {
        bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    bytes.truncate(len);
    Ok((space, bytes))
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
    // Whole words first, then the zero-padded tail (as `key_word` stores it).
    let words = &e.key[..key.len().div_ceil(8)];
    let chunks = key.chunks_exact(8);
    let tail = chunks.remainder();
    for (stored, chunk) in words.iter().zip(chunks) {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(chunk);
        if stored.load(Ordering::Relaxed) != u64::from_le_bytes(buf) {
            return false;
        }
    }
    tail.is_empty() || words[words.len() - 1].load(Ordering::Relaxed) == tail_word(tail)
}

/// The longest key [`short_key_words`] reads.
const SHORT_KEY: usize = 16;

/// A key of at most [`SHORT_KEY`] bytes as the region stores it (`key_word`: two
/// little-endian words, zero-padded), read with at most three loads (overlapping) and no loop.
#[inline(always)]
fn short_key_words(key: &[u8]) -> [u64; 2] {
    #[inline(always)]
    fn word(key: &[u8], at: usize) -> u64 {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&key[at..at + 8]);
        u64::from_le_bytes(buf)
    }
    #[inline(always)]
    fn half(key: &[u8], at: usize) -> u64 {
        let mut buf = [0u8; 4];
        buf.copy_from_slice(&key[at..at + 4]);
        u64::from(u32::from_le_bytes(buf))
    }
    let n = key.len();
    match n {
        // The last 8 bytes, shifted down past the ones the first word has.
        9..=SHORT_KEY => [word(key, 0), word(key, n - 8) >> ((SHORT_KEY - n) * 8)],
        8 => [word(key, 0), 0],
        // Two 4-byte loads that overlap; the bytes they share are the same.
        4..=7 => [half(key, 0) | half(key, n - 4) << ((n - 4) * 8), 0],
        1..=3 => [
            u64::from(key[0])
                | u64::from(key[n / 2]) << (n / 2 * 8)
                | u64::from(key[n - 1]) << ((n - 1) * 8),
            0,
        ],
        _ => [0, 0],
    }
}

/// [`holds_key`] for a key of at most [`SHORT_KEY`] bytes, given as [`short_key_words`].
#[inline(always)]
fn holds_short_key(e: &Entry, h: u64, space: u8, len: usize, words: [u64; 2]) -> bool {
    e.hash.load(Ordering::Relaxed) == h
        && e.key_len.load(Ordering::Relaxed) as usize == len
        && e.space.load(Ordering::Relaxed) == u32::from(space)
        && (len == 0 || e.key[0].load(Ordering::Relaxed) == words[0])
        && (len <= 8 || e.key[1].load(Ordering::Relaxed) == words[1])
}

/// The longest chain a lock-free lookup walks before leaving the search to the mutex.
const FAST_WALK: usize = 32;

/// Finds the entry bound to the key without the table mutex: the entry's index, the entry and
/// a lock word read while the entry was bound to this key (a compare-and-swap expecting that
/// word can only succeed on this key's entry). `None`: not found (the caller asks under the
/// mutex).
#[inline(always)]
pub(crate) fn find_fast<'r>(
    r: &'r Region,
    h: u64,
    space: u8,
    key: &[u8],
) -> Option<(u32, &'r Entry, u64)> {
    if key.len() <= SHORT_KEY {
        let words = short_key_words(key);
        find_fast_by(
            r,
            h,
            &ShortKey {
                h,
                space,
                len: key.len(),
                words,
            },
        )
    } else {
        find_fast_by(r, h, &LongKey { h, space, key })
    }
}

/// How [`find_fast_by`] compares an entry's key with the one it looks for (a trait rather
/// than a closure, whose call the compiler may leave out of line).
trait KeyMatch {
    fn holds(&self, e: &Entry) -> bool;
}

/// A key of at most [`SHORT_KEY`] bytes, read once as [`short_key_words`].
struct ShortKey {
    h: u64,
    space: u8,
    len: usize,
    words: [u64; 2],
}

impl KeyMatch for ShortKey {
    #[inline(always)]
    fn holds(&self, e: &Entry) -> bool {
        holds_short_key(e, self.h, self.space, self.len, self.words)
    }
}

/// Any key.
struct LongKey<'k> {
    h: u64,
    space: u8,
    key: &'k [u8],
}

impl KeyMatch for LongKey<'_> {
    #[inline(always)]
    fn holds(&self, e: &Entry) -> bool {
        holds_key(e, self.h, self.space, self.key)
    }
}

/// [`find_fast`] with the key's comparison `key`.
#[inline(always)]
fn find_fast_by<'r>(r: &'r Region, h: u64, key: &impl KeyMatch) -> Option<(u32, &'r Entry, u64)> {
    let mask = r.header.buckets - 1;
    let mut next = r.bucket_if((h as u32) & mask)?.load(Ordering::Acquire);
    for _ in 0..FAST_WALK {
        let index = next.checked_sub(1)?;
        let e = r.entry_if(index)?;
        let bind = e.bind.load(Ordering::Acquire);
        if bind & 3 == BIND_BOUND && key.holds(e) {
            // Seqlock-style: the key was read between two reads of `bind`; an eviction
            // changes `bind` (and the word) before it rewrites the key.
            fence(Ordering::Acquire);
            let w = e.word.load(Ordering::Acquire);
            if e.bind.load(Ordering::Relaxed) == bind {
                return Some((index, e, w));
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::*;
    use crate::shm::lockword::{fast_acquire, fast_release, fence_of};
    use crate::shm::region::scratch;

    fn pool(capacity: u32) -> Region {
        scratch::region(KIND_POOL, capacity, 0)
    }

    fn bucket_of(r: &Region, key: &[u8]) -> u32 {
        (hash_key(0, key) as u32) & (r.header.buckets - 1)
    }

    /// `n` keys (of space 0) that all hash to one bucket of `r`.
    fn colliding(r: &Region, n: usize) -> Vec<Vec<u8>> {
        let target = bucket_of(r, b"c0");
        let keys: Vec<Vec<u8>> = (0..)
            .map(|i| format!("c{i}").into_bytes())
            .filter(|k| bucket_of(r, k) == target)
            .take(n)
            .collect();
        assert!(keys.iter().all(|k| bucket_of(r, k) == target));
        keys
    }

    /// The entries on `bucket`'s chain, first to last.
    fn chain(r: &Region, bucket: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut at = r.bucket(bucket).unwrap().load(Ordering::Relaxed);
        while let Some(i) = at.checked_sub(1) {
            assert!(out.len() <= r.header.capacity as usize, "a cycle");
            out.push(i);
            at = r.entry(i).unwrap().next.load(Ordering::Relaxed);
        }
        out
    }

    fn bind(r: &Region, space: u8, key: &[u8]) -> Result<u32> {
        bind_locked(&r.lock_table()?, hash_key(space, key), space, key)
    }

    fn find(r: &Region, space: u8, key: &[u8]) -> Option<u32> {
        let h = hash_key(space, key);
        let locked = find_locked(&r.lock_table().unwrap(), h, space, key).unwrap();
        let fast = find_fast(r, h, space, key).map(|(index, ..)| index);
        assert_eq!(locked, fast, "the two lookups disagree on {key:?}");
        locked
    }

    /// `holds_key`, checked against the short keys' comparison (`find_fast`'s for keys of at
    /// most `SHORT_KEY` bytes) wherever that applies.
    fn holds(e: &Entry, h: u64, space: u8, key: &[u8]) -> bool {
        let long = holds_key(e, h, space, key);
        if key.len() <= SHORT_KEY {
            let short = ShortKey {
                h,
                space,
                len: key.len(),
                words: short_key_words(key),
            };
            assert_eq!(short.holds(e), long, "the comparisons disagree on {key:?}");
        }
        long
    }

    #[test]
    fn short_keys_are_read_as_the_region_stores_them() {
        // Every length the short read takes, with bytes that show a misplaced, dropped or
        // doubled one: distinct bytes, all ones, and zeros inside.
        for len in 0..=SHORT_KEY {
            let patterns: [Vec<u8>; 3] = [
                (0..len).map(|i| 0x0f * (i as u8 + 1)).collect(),
                vec![0xff; len],
                (0..len)
                    .map(|i| if i % 3 == 1 { 0 } else { 0x80 | i as u8 })
                    .collect(),
            ];
            for key in patterns {
                assert_eq!(
                    short_key_words(&key),
                    [key_word(&key, 0), key_word(&key, 1)],
                    "length {len}: {key:?}"
                );
            }
        }
    }

    #[test]
    fn keys_are_stored_as_zero_padded_little_endian_words() {
        assert_eq!(key_word(b"abc", 0), 0x63_62_61);
        assert_eq!(key_word(b"abcdefgh", 0), u64::from_le_bytes(*b"abcdefgh"));
        assert_eq!(key_word(b"abcdefghi", 1), u64::from(b'i'));
        assert_ne!(
            hash_key(0, b"k"),
            hash_key(1, b"k"),
            "the space is in the hash"
        );
    }

    #[test]
    fn bound_keys_are_found_by_both_lookups_and_others_are_not() {
        let r = pool(8);
        let keys: [(u8, &[u8]); 5] = [
            (0, b"a"),
            (1, b"a"),
            (0, b"abcdefgh"),
            (0, b"abcdefgh\0"),
            (0, &[7u8; KEY_MAX]),
        ];
        let mut entries = Vec::new();
        for (space, key) in keys {
            let index = bind(&r, space, key).unwrap();
            assert_eq!(bind(&r, space, key).unwrap(), index, "bound twice");
            entries.push(index);
        }
        let mut distinct = entries.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            keys.len(),
            "two keys share an entry: {entries:?}"
        );
        for ((space, key), index) in keys.into_iter().zip(entries) {
            assert_eq!(find(&r, space, key), Some(index), "{space} {key:?}");
        }
        assert_eq!(find(&r, 0, b"b"), None);
        assert_eq!(find(&r, 2, b"a"), None);
        assert_eq!(find(&r, 0, b"abcdefg"), None);
    }

    #[test]
    fn an_entry_matches_only_its_own_key_even_when_hashes_collide() {
        let r = pool(2);
        let key = b"abcdefgh";
        let e = r.entry(bind(&r, 0, key).unwrap()).unwrap();
        let h = hash_key(0, key);
        assert!(holds(e, h, 0, key));
        // The same hash with another key: the zero padding makes the words equal, the
        // length tells them apart; then the bytes, then the space.
        assert!(!holds(e, h, 0, b"abcdefgh\0"));
        assert!(!holds(e, h, 0, b"abcdefgi"));
        assert!(!holds(e, h, 0, b"abcdefg"));
        assert!(!holds(e, h, 1, key));
        assert!(!holds(e, h ^ 1, 0, key));
    }

    #[test]
    fn every_byte_of_a_key_of_every_length_is_compared() {
        // Whole words and the zero-padded tail: for each length, the bound key matches and a
        // key that differs from it in any one byte (same hash, length and space) does not.
        let r = pool(KEY_MAX as u32 + 1);
        for len in 0..=KEY_MAX {
            let key: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8 | 1).collect();
            let e = r.entry(bind(&r, 0, &key).unwrap()).unwrap();
            let h = hash_key(0, &key);
            assert!(holds(e, h, 0, &key), "length {len}");
            for at in 0..len {
                let mut other = key.clone();
                other[at] ^= 0x80;
                assert!(!holds(e, h, 0, &other), "length {len}, byte {at}");
                other[at] = 0;
                assert!(!holds(e, h, 0, &other), "length {len}, byte {at} zero");
            }
            assert_eq!(
                find(&r, 0, &key).map(|i| r.entry(i).unwrap() as *const _),
                Some(e as *const _)
            );
        }
    }

    #[test]
    fn a_key_longer_than_an_entry_holds_is_refused() {
        let r = pool(2);
        let long = [1u8; KEY_MAX + 1];
        assert!(matches!(bind(&r, 0, &long), Err(Error::InvalidArgument(_))));
        assert_eq!(find(&r, 0, &long), None);
        // Nothing was taken from the free list.
        assert_ne!(bind(&r, 0, b"x").unwrap(), bind(&r, 0, b"y").unwrap());
    }

    #[test]
    fn colliding_keys_share_one_chain_and_each_is_found() {
        let r = pool(4);
        let keys = colliding(&r, 3);
        let entries: Vec<u32> = keys.iter().map(|k| bind(&r, 0, k).unwrap()).collect();
        let mut newest_first = entries.clone();
        newest_first.reverse();
        assert_eq!(chain(&r, bucket_of(&r, &keys[0])), newest_first);
        for (key, index) in keys.iter().zip(&entries) {
            assert_eq!(find(&r, 0, key), Some(*index));
        }
    }

    #[test]
    fn evicting_an_entry_in_the_middle_of_a_chain_keeps_the_others() {
        let r = pool(4);
        let keys = colliding(&r, 3);
        let entries: Vec<u32> = keys.iter().map(|k| bind(&r, 0, k).unwrap()).collect();
        let other = bind(&r, 0, b"elsewhere").unwrap();
        // The table is full; the clock hand points at the middle of the three-entry chain.
        let middle = entries[1];
        r.runtime().hand.store(middle, Ordering::Relaxed);
        let newcomer = b"newcomer";
        assert_eq!(bind(&r, 0, newcomer).unwrap(), middle);
        assert_eq!(
            find(&r, 0, &keys[1]),
            None,
            "the evicted key is still found"
        );
        assert_eq!(find(&r, 0, &keys[0]), Some(entries[0]));
        assert_eq!(find(&r, 0, &keys[2]), Some(entries[2]));
        assert_eq!(find(&r, 0, b"elsewhere"), Some(other));
        assert_eq!(find(&r, 0, newcomer), Some(middle));
        let mut expected = vec![entries[2], entries[0]];
        if bucket_of(&r, newcomer) == bucket_of(&r, &keys[0]) {
            expected.insert(0, middle);
        }
        assert_eq!(chain(&r, bucket_of(&r, &keys[0])), expected);
    }

    #[test]
    fn held_entries_are_never_evicted_and_a_full_table_says_so() {
        let r = pool(3);
        let keys: [&[u8]; 3] = [b"k0", b"k1", b"k2"];
        let mut fences = Vec::new();
        for key in keys {
            let index = bind(&r, 0, key).unwrap();
            let e = r.entry(index).unwrap();
            let fence = fast_acquire(e, e.word.load(Ordering::Acquire), 0).expect("free");
            fences.push((index, fence));
        }
        assert!(matches!(bind(&r, 0, b"k3"), Err(Error::CapacityExceeded)));
        for key in keys {
            assert!(find(&r, 0, key).is_some(), "a held key lost its entry");
        }
        // Releasing one makes exactly that entry the one to take.
        let (index, fence) = fences[1];
        assert!(fast_release(r.entry(index).unwrap(), fence, 0));
        assert_eq!(bind(&r, 0, b"k3").unwrap(), index);
        assert_eq!(find(&r, 0, b"k1"), None);
        let e = r.entry(index).unwrap();
        fast_acquire(e, e.word.load(Ordering::Acquire), 0).expect("k3 is free");
        assert!(matches!(bind(&r, 0, b"k4"), Err(Error::CapacityExceeded)));
    }

    #[test]
    fn a_key_that_comes_back_after_eviction_gets_a_higher_fence() {
        let r = pool(1);
        let index = bind(&r, 0, b"k").unwrap();
        let e = r.entry(index).unwrap();
        let mut last = 0;
        for _ in 0..5 {
            last = fast_acquire(e, e.word.load(Ordering::Acquire), 0).expect("free");
            assert!(fast_release(e, last, 0));
        }
        assert_eq!(bind(&r, 0, b"other").unwrap(), index, "evicts k");
        assert_eq!(bind(&r, 0, b"k").unwrap(), index, "evicts other");
        let again = fast_acquire(e, e.word.load(Ordering::Acquire), 0).expect("free");
        assert!(again > last, "fence {again} after eviction, {last} before");
        assert!(fence_of(e) > last);
    }

    #[test]
    fn an_entry_missing_from_its_chain_is_reported_as_corruption() {
        let r = pool(1);
        let index = bind(&r, 0, b"k").unwrap();
        r.bucket(bucket_of(&r, b"k"))
            .unwrap()
            .store(0, Ordering::Relaxed);
        let err = bind(&r, 0, b"other").unwrap_err();
        assert!(matches!(err, Error::Incompatible(_)), "{err:?}");
        let _ = index;
    }

    #[test]
    fn a_cycle_in_a_chain_is_reported_not_walked_forever() {
        let r = Arc::new(pool(4));
        let keys = colliding(&r, 2);
        let first = bind(&r, 0, &keys[0]).unwrap();
        bind(&r, 0, &keys[1]).unwrap();
        // The first entry (the chain's end) points back at the head.
        let head = r
            .bucket(bucket_of(&r, &keys[0]))
            .unwrap()
            .load(Ordering::Relaxed);
        r.entry(first).unwrap().next.store(head, Ordering::Relaxed);
        let region = Arc::clone(&r);
        // A thread of its own, watched with a deadline, so that a walk without end fails the
        // test instead of hanging it. (No std channel: ThreadSanitizer cannot see into std's,
        // uninstrumented here.)
        let lookup = std::thread::spawn(move || {
            let missing = b"not bound";
            let h = (hash_key(0, &keys[0]) & !u64::from(u32::MAX))
                | u64::from(bucket_of(&region, &keys[0]));
            let fast = find_fast(&region, h, 0, missing).map(|(index, ..)| index);
            let t = region.lock_table().unwrap();
            let locked = find_locked(&t, h, 0, missing).map_err(|e| e.to_string());
            (fast, locked)
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !lookup.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "a lookup walked the cycle without end"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let (fast, locked) = lookup.join().unwrap();
        assert_eq!(fast, None);
        let err = locked.expect_err("a cycle is corruption");
        assert!(err.contains("cycle"), "{err}");
    }
}

//! The region's layout: the header, the records in it, and the bits of an entry's lock word.
//! The [module docs](super) describe the same layout for another implementation.

use std::sync::atomic::{AtomicU32, AtomicU64};

use super::sys::ShmMutex;

/// `b"keylock\x01"` read as a little-endian u64: the first 8 bytes of every region.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"keylock\x01");
/// The layout version; any change to this file's records or rules is a new version.
/// Version 2 added semaphores: the header's `permits`, an entry's `units`, a node's `units`.
pub(crate) const VERSION: u32 = 2;
/// Hash spec 1: XXH3-64 with seed [`HASH_SEED`] plus the key space.
pub(crate) const HASH_SPEC: u32 = 1;
/// The seed of hash spec 1 (the bytes `"keylock\0"` read big-endian); a key's hash is
/// `XXH3_64bits_withSeed(key, HASH_SEED + space)`.
pub(crate) const HASH_SEED: u64 = u64::from_be_bytes(*b"keylock\0");
/// The header page.
pub(crate) const HEADER_LEN: usize = 4096;
/// Where the mutable part of the header starts.
pub(crate) const RUNTIME_OFFSET: usize = 512;
/// The most processes (opens) attached at once.
pub(crate) const MAX_PROCS: u32 = 256;
/// The longest key a pool entry stores, in bytes.
pub(crate) const KEY_MAX: usize = 256;
/// Waiter and shared-holder records per unit of capacity.
pub(crate) const NODES_PER_ENTRY: u32 = 4;
/// The largest capacity (entries or stripes) a region may have.
pub(crate) const MAX_CAPACITY: u32 = 1 << 24;

/// Region kinds.
pub(crate) const KIND_POOL: u32 = 1;
pub(crate) const KIND_STRIPED: u32 = 2;
/// Flag bit: the region is reentrant.
pub(crate) const FLAG_REENTRANT: u32 = 1;
/// Flag bit: strict FIFO hand-off (else eventual fairness). Always set in a semaphore region.
pub(crate) const FLAG_FIFO: u32 = 2;
/// The most permits per key of a semaphore region (as in one process).
pub(crate) const MAX_PERMITS: u32 = crate::entry::Policy::MAX_PERMITS;

/// The immutable header fields, written once before the region gets its name. Read by value
/// at open and validated; never read again.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) magic: u64,
    pub(crate) version: u32,
    pub(crate) header_len: u32,
    pub(crate) hash_spec: u32,
    pub(crate) kind: u32,
    pub(crate) flags: u32,
    /// Pool: entries (the most keys held or awaited at once). Striped: stripes.
    pub(crate) capacity: u32,
    /// Pool: hash buckets (a power of two). Striped: 0.
    pub(crate) buckets: u32,
    pub(crate) procs: u32,
    pub(crate) nodes: u32,
    pub(crate) key_max: u32,
    pub(crate) entry_size: u32,
    pub(crate) node_size: u32,
    pub(crate) proc_size: u32,
    pub(crate) max_holds: u32,
    pub(crate) total_len: u64,
    pub(crate) off_procs: u64,
    pub(crate) off_entries: u64,
    pub(crate) off_buckets: u64,
    pub(crate) off_nodes: u64,
    /// A random number naming this region (acquisitions carry its low bits).
    pub(crate) region_id: u64,
    /// A semaphore region's units per key (1 to [`MAX_PERMITS`]; the region is then a pool
    /// with strict FIFO); 0 for a lock region.
    pub(crate) permits: u32,
    /// Always 0 (keeps the checksum 8-aligned with no padding before it).
    pub(crate) reserved: u32,
    /// XXH3-64 (seed 0) of every byte above.
    pub(crate) checksum: u64,
}

impl Header {
    /// The header for a region of `kind` with `capacity` entries or stripes, and `permits`
    /// units per key (0: a lock region).
    pub(crate) fn new(
        kind: u32,
        capacity: u32,
        flags: u32,
        max_holds: u32,
        id: u64,
        permits: u32,
    ) -> Header {
        let buckets = if kind == KIND_POOL {
            capacity.next_power_of_two()
        } else {
            0
        };
        let nodes = capacity.saturating_mul(NODES_PER_ENTRY).max(64);
        let align = |x: u64| (x + 63) & !63;
        let off_procs = HEADER_LEN as u64;
        let off_entries = align(off_procs + u64::from(MAX_PROCS) * size_of::<Proc>() as u64);
        let off_buckets = align(off_entries + u64::from(capacity) * size_of::<Entry>() as u64);
        let off_nodes = align(off_buckets + u64::from(buckets) * 4);
        let total = (off_nodes + u64::from(nodes) * size_of::<Node>() as u64 + 4095) & !4095;
        let mut h = Header {
            magic: MAGIC,
            version: VERSION,
            header_len: HEADER_LEN as u32,
            hash_spec: HASH_SPEC,
            kind,
            flags,
            capacity,
            buckets,
            procs: MAX_PROCS,
            nodes,
            key_max: KEY_MAX as u32,
            entry_size: size_of::<Entry>() as u32,
            node_size: size_of::<Node>() as u32,
            proc_size: size_of::<Proc>() as u32,
            max_holds,
            total_len: total,
            off_procs,
            off_entries,
            off_buckets,
            off_nodes,
            region_id: id,
            permits,
            reserved: 0,
            checksum: 0,
        };
        h.checksum = h.compute_checksum();
        h
    }

    pub(crate) fn compute_checksum(&self) -> u64 {
        let len = std::mem::offset_of!(Header, checksum);
        // SAFETY: `Header` is repr(C) plain integers with no padding before `checksum` (every
        // field is 8- or 4-byte aligned and the u32 fields come in pairs), so its first `len`
        // bytes are initialized and readable.
        let bytes =
            unsafe { std::slice::from_raw_parts((self as *const Header).cast::<u8>(), len) };
        xxhash_rust::xxh3::xxh3_64(bytes)
    }

    /// What is wrong with a header read from a region of `file_len` bytes, if anything.
    pub(crate) fn problem(&self, file_len: u64) -> Option<String> {
        if self.magic != MAGIC {
            return Some("not a keylock region (bad magic number)".into());
        }
        if self.version != VERSION {
            return Some(format!(
                "layout version {} (this build reads version {VERSION})",
                self.version
            ));
        }
        if self.checksum != self.compute_checksum() {
            return Some("corrupt header (checksum mismatch)".into());
        }
        if self.hash_spec != HASH_SPEC {
            return Some(format!(
                "hash spec {} (this build hashes with spec {HASH_SPEC})",
                self.hash_spec
            ));
        }
        if self.kind != KIND_POOL && self.kind != KIND_STRIPED {
            return Some(format!("unknown region kind {}", self.kind));
        }
        if self.capacity == 0 || self.capacity > MAX_CAPACITY {
            return Some(format!("capacity {} out of range", self.capacity));
        }
        if self.permits > MAX_PERMITS
            || (self.permits != 0 && (self.kind != KIND_POOL || self.flags & FLAG_FIFO == 0))
        {
            return Some(format!(
                "permits {} out of range for this region (at most {MAX_PERMITS}, pools in strict FIFO order only)",
                self.permits
            ));
        }
        let expected = Header::new(
            self.kind,
            self.capacity,
            self.flags,
            self.max_holds,
            self.region_id,
            self.permits,
        );
        if expected != *self {
            return Some("the layout differs from this build's (record sizes or offsets)".into());
        }
        if self.total_len != file_len {
            return Some(format!(
                "the region is {file_len} bytes, its header says {}",
                self.total_len
            ));
        }
        None
    }
}

/// The mutable part of the header, at [`RUNTIME_OFFSET`].
#[repr(C)]
pub(crate) struct Runtime {
    /// The table mutex: every slow-path change to entries, nodes and processes happens under it.
    pub(crate) mutex: ShmMutex,
    /// The process slot + 1 holding the table mutex now (0: none), for repair after a death.
    pub(crate) holder: AtomicU32,
    /// Head of the free entry list (entry + 1; pool only).
    pub(crate) free_entries: AtomicU32,
    /// Head of the free node list (node + 1).
    pub(crate) free_nodes: AtomicU32,
    /// The eviction clock hand (pool).
    pub(crate) hand: AtomicU32,
    /// Every fence a pool entry had when it was given to another key is at most this.
    pub(crate) fence_floor: AtomicU64,
    /// The next waiter's sequence number (FIFO order, also for repair).
    pub(crate) next_seq: AtomicU64,
}

/// One process slot (one open of the region by one process).
#[repr(C, align(64))]
pub(crate) struct Proc {
    /// Held for the whole attachment by the process's agent thread: when the process dies, the
    /// kernel marks it, and the next `trylock` gets `EOWNERDEAD`. That is the liveness test.
    pub(crate) alive: ShmMutex,
    /// `PROC_FREE` or `PROC_LIVE`.
    pub(crate) state: AtomicU32,
    /// Bumped each time the slot is claimed.
    pub(crate) epoch: AtomicU32,
    /// The process id (for diagnostics).
    pub(crate) pid: AtomicU32,
    /// Bumped (and futex-woken) when one of the process's async waiters is granted.
    pub(crate) doorbell: AtomicU32,
}

pub(crate) const PROC_FREE: u32 = 0;
pub(crate) const PROC_LIVE: u32 = 1;

/// One lock: a pool key's entry or a stripe.
#[repr(C, align(64))]
pub(crate) struct Entry {
    /// The lock word (see [`word`]).
    pub(crate) word: AtomicU64,
    /// The key's hash (pool).
    pub(crate) hash: AtomicU64,
    /// The exclusive holder's owner (0: none).
    pub(crate) owner: AtomicU64,
    /// The exclusive holder's lease end, monotonic ns (0: none).
    pub(crate) lease: AtomicU64,
    /// Pool: generation << 2 | `BIND_*`. Stripes: always `BIND_BOUND`.
    pub(crate) bind: AtomicU32,
    /// Pool: the next entry in the bucket's chain, or in the free list (entry + 1; 0 = end).
    pub(crate) next: AtomicU32,
    /// The key's length (pool).
    pub(crate) key_len: AtomicU32,
    /// The key's space (pool).
    pub(crate) space: AtomicU32,
    /// The high bits of the fence (above the word's 51).
    pub(crate) fence_hi: AtomicU32,
    /// The wait queue: first and last node + 1.
    pub(crate) head: AtomicU32,
    pub(crate) tail: AtomicU32,
    /// Waiters queued.
    pub(crate) waiters: AtomicU32,
    /// Shared holders (the nodes on the `holders` list).
    pub(crate) shared: AtomicU32,
    /// The shared holders' records: first node + 1.
    pub(crate) holders: AtomicU32,
    /// The exclusive holder's hold count (reentrant; 1 otherwise).
    pub(crate) holds: AtomicU32,
    /// 1 when a dead exclusive holder was reclaimed and no acquirer has been told yet.
    pub(crate) died: AtomicU32,
    /// A grant to this node + 1 is in progress (for repair).
    pub(crate) granting: AtomicU32,
    /// Semaphore: the units held, the sum of the `units` of the nodes on the `holders` list
    /// (at most the region's permits; checked against the list whenever it is used). Lock: 0.
    pub(crate) units: AtomicU32,
    /// The key's bytes, zero-padded (pool).
    pub(crate) key: [AtomicU64; KEY_MAX / 8],
}

pub(crate) const BIND_FREE: u32 = 0;
pub(crate) const BIND_BUSY: u32 = 1;
pub(crate) const BIND_BOUND: u32 = 2;

/// One waiter, or one shared holder, or one semaphore holder (with its units, fence and lease).
#[repr(C, align(64))]
pub(crate) struct Node {
    /// The futex word: `NODE_*`.
    pub(crate) state: AtomicU32,
    /// Bumped on each allocation: a shared acquisition's ticket names node and generation.
    pub(crate) epoch: AtomicU32,
    /// The entry waited for or held.
    pub(crate) entry: AtomicU32,
    /// The process slot of the waiter or holder.
    pub(crate) proc: AtomicU32,
    /// `NODE_SHARED`, `NODE_ASYNC`.
    pub(crate) flags: AtomicU32,
    /// The next node in the queue, the holders list or the free list (node + 1).
    pub(crate) next: AtomicU32,
    /// The waiter's owner (0: none).
    pub(crate) owner: AtomicU64,
    /// The waiter's requested lease, ns (0: none); a shared holder's lease end (0: none).
    pub(crate) lease: AtomicU64,
    /// The fence granted; while waiting, when the wait began (monotonic ns).
    pub(crate) fence: AtomicU64,
    /// FIFO order among waiters.
    pub(crate) seq: AtomicU64,
    /// 1 when granted after a dead holder was reclaimed.
    pub(crate) died: AtomicU32,
    /// Semaphore: the units the waiter asks for or the holder holds (1 to the permits); lock: 0.
    pub(crate) units: AtomicU32,
}

pub(crate) const NODE_FREE: u32 = 0;
pub(crate) const NODE_WAITING: u32 = 1;
/// An exclusive grant not yet taken up by its waiter.
pub(crate) const NODE_GRANTED: u32 = 2;
/// A shared holder's record (granted, or acquired at once).
pub(crate) const NODE_HELD: u32 = 3;
/// A waiter at the front, woken to try for a lock just released (eventual fairness): it
/// takes the lock if nobody took it first, else waits again. Still queued.
pub(crate) const NODE_NOTIFIED: u32 = 4;

pub(crate) const NODE_SHARED: u32 = 1;
pub(crate) const NODE_ASYNC: u32 = 2;

/// The lock word of an entry.
///
/// ```text
///  63                                  13   12    11          0
/// +--------------------------------------+------+-------------+
/// |          fence, low 51 bits          | SLOW |    XPROC    |
/// +--------------------------------------+------+-------------+
/// ```
///
/// - `XPROC`: the exclusive holder's process slot + 1; 0 when not held exclusively.
/// - `SLOW`: every acquire and release must take the table mutex: waiters are queued, shared
///   holders exist, the holder has a lease, owner or hold count, a dead holder was reclaimed
///   (`died`), or a pool entry is being given to another key.
/// - fence: the low 51 bits of the current fence; the high bits are in `Entry::fence_hi`.
///
/// The fast path is one compare-and-swap each way: acquire turns a word with neither `XPROC`
/// nor `SLOW` into one with `XPROC` = the caller's slot and the fence plus one; release turns
/// exactly that word back (so a stale release, whose fence or slot differs, cannot succeed).
pub(crate) mod word {
    pub(crate) const XPROC: u64 = (1 << 12) - 1;
    pub(crate) const SLOW: u64 = 1 << 12;
    pub(crate) const LO_SHIFT: u32 = 13;
    pub(crate) const LO_BITS: u32 = 64 - LO_SHIFT;
    pub(crate) const LO_MAX: u64 = (1 << LO_BITS) - 1;

    #[inline]
    pub(crate) const fn xproc(w: u64) -> u32 {
        (w & XPROC) as u32
    }

    #[inline]
    pub(crate) const fn lo(w: u64) -> u64 {
        w >> LO_SHIFT
    }

    #[inline]
    pub(crate) const fn make(lo: u64, slow: bool, xproc: u32) -> u64 {
        (lo << LO_SHIFT) | if slow { SLOW } else { 0 } | (xproc as u64 & XPROC)
    }

    #[inline]
    pub(crate) const fn fence(w: u64, hi: u32) -> u64 {
        ((hi as u64) << LO_BITS) | lo(w)
    }
}

const _: () = assert!(size_of::<ShmMutex>() <= 48);
const _: () = assert!(RUNTIME_OFFSET + size_of::<Runtime>() <= HEADER_LEN);
const _: () = assert!(size_of::<Header>() <= RUNTIME_OFFSET);
const _: () = assert!(MAX_PROCS as u64 <= word::XPROC);

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    /// The end of each section: process slots, entries, buckets, nodes.
    fn ends(h: &Header) -> [u64; 4] {
        [
            h.off_procs + u64::from(h.procs) * u64::from(h.proc_size),
            h.off_entries + u64::from(h.capacity) * u64::from(h.entry_size),
            h.off_buckets + u64::from(h.buckets) * 4,
            h.off_nodes + u64::from(h.nodes) * u64::from(h.node_size),
        ]
    }

    #[test]
    fn record_sizes_are_the_documented_ones() {
        // Another implementation joining a region relies on these; changing one is a new
        // layout version.
        assert_eq!(size_of::<Entry>(), 384);
        assert_eq!(size_of::<Node>(), 64);
        assert_eq!(size_of::<Proc>(), 64);
        assert_eq!(VERSION, 2);
        assert_eq!(MAGIC.to_le_bytes(), *b"keylock\x01");
        assert_eq!(HASH_SEED, 0x6b65796c6f636b00);
    }

    #[test]
    fn offsets_of_small_regions_match_the_arithmetic_by_hand() {
        // (kind, capacity) -> (off_entries, off_buckets, off_nodes, buckets, nodes, total_len),
        // worked out by hand from: 4096-byte header, 256 slots of 64 bytes, entries of 384
        // bytes, u32 buckets, nodes of 64 bytes, each section 64-aligned, the total a whole
        // number of pages.
        let cases = [
            ((KIND_POOL, 1), (20480, 20864, 20928, 1, 64, 28672)),
            ((KIND_STRIPED, 1), (20480, 20864, 20864, 0, 64, 28672)),
            ((KIND_POOL, 3), (20480, 21632, 21696, 4, 64, 28672)),
            (
                (KIND_POOL, 1000),
                (20480, 404480, 408576, 1024, 4000, 667648),
            ),
            ((KIND_STRIPED, 64), (20480, 45056, 45056, 0, 256, 61440)),
        ];
        for ((kind, capacity), (entries, buckets_at, nodes_at, buckets, nodes, total)) in cases {
            let h = Header::new(kind, capacity, 0, 65_536, 9, 0);
            let got = (
                h.off_entries,
                h.off_buckets,
                h.off_nodes,
                h.buckets,
                h.nodes,
                h.total_len,
            );
            assert_eq!(
                got,
                (entries, buckets_at, nodes_at, buckets, nodes, total),
                "kind {kind}, capacity {capacity}"
            );
            assert_eq!(h.off_procs, HEADER_LEN as u64);
        }
    }

    #[test]
    fn sections_are_aligned_in_order_and_fit_the_region_for_every_size() {
        let capacities = [
            1,
            2,
            3,
            7,
            15,
            16,
            17,
            63,
            64,
            65,
            1000,
            1 << 20,
            MAX_CAPACITY - 1,
        ];
        for kind in [KIND_POOL, KIND_STRIPED] {
            for capacity in capacities.into_iter().chain([MAX_CAPACITY]) {
                let h = Header::new(kind, capacity, 0, 65_536, 1, 0);
                let what = format!("kind {kind}, capacity {capacity}");
                let starts = [h.off_procs, h.off_entries, h.off_buckets, h.off_nodes];
                let ends = ends(&h);
                for start in starts {
                    assert_eq!(start % 64, 0, "{what}: a section is not 64-aligned");
                }
                for i in 0..3 {
                    assert!(
                        ends[i] <= starts[i + 1],
                        "{what}: section {i} overlaps the next"
                    );
                    assert!(
                        starts[i + 1] - ends[i] < 64,
                        "{what}: more than alignment between"
                    );
                }
                assert_eq!(h.total_len % PAGE, 0, "{what}: not whole pages");
                assert!(ends[3] <= h.total_len, "{what}: the nodes run past the end");
                assert!(
                    h.total_len - ends[3] < PAGE,
                    "{what}: a spare page at the end"
                );
                if kind == KIND_POOL {
                    assert!(
                        h.buckets.is_power_of_two() && h.buckets >= capacity,
                        "{what}"
                    );
                    assert!(h.buckets / 2 < capacity, "{what}: more buckets than needed");
                } else {
                    assert_eq!(h.buckets, 0, "{what}");
                }
                assert_eq!(h.nodes, (capacity * NODES_PER_ENTRY).max(64), "{what}");
                assert_eq!(h.problem(h.total_len), None, "{what}");
            }
        }
    }

    #[test]
    fn capacity_out_of_range_is_refused() {
        for capacity in [0, MAX_CAPACITY + 1] {
            let h = Header::new(KIND_POOL, capacity, 0, 65_536, 1, 0);
            let problem = h.problem(h.total_len).expect("refused");
            assert!(problem.contains("out of range"), "{capacity}: {problem}");
        }
        // A header read from a region may say anything: it is refused before its capacity
        // goes into any arithmetic.
        let mut h = Header::new(KIND_POOL, 1, 0, 65_536, 1, 0);
        h.capacity = u32::MAX;
        h.checksum = h.compute_checksum();
        let problem = h.problem(h.total_len).expect("refused");
        assert!(problem.contains("out of range"), "{problem}");
    }

    #[test]
    fn every_header_fault_is_named() {
        let good = Header::new(KIND_POOL, 100, FLAG_FIFO, 65_536, 42, 0);
        assert_eq!(good.problem(good.total_len), None);
        let sealed = |f: &dyn Fn(&mut Header)| {
            let mut h = good;
            f(&mut h);
            h.checksum = h.compute_checksum();
            h
        };
        let cases: [(Header, &str); 9] = [
            (
                sealed(&|h| h.permits = MAX_PERMITS + 1),
                "permits 32768 out of range",
            ),
            (
                sealed(&|h| {
                    h.permits = 3;
                    h.flags = 0;
                }),
                "permits 3 out of range",
            ),
            (sealed(&|h| h.magic ^= 1), "bad magic"),
            (sealed(&|h| h.version = 1), "layout version 1"),
            (sealed(&|h| h.hash_spec = 2), "hash spec 2"),
            (sealed(&|h| h.kind = 3), "unknown region kind 3"),
            (sealed(&|h| h.entry_size = 320), "layout differs"),
            (sealed(&|h| h.off_nodes += 64), "layout differs"),
            (
                Header {
                    region_id: 43,
                    ..good
                },
                "checksum mismatch",
            ),
        ];
        for (h, expected) in cases {
            let problem = h.problem(h.total_len).expect("refused");
            assert!(problem.contains(expected), "{problem:?} lacks {expected:?}");
        }
        let problem = good.problem(good.total_len + PAGE).expect("refused");
        assert!(problem.contains("its header says"), "{problem}");
    }

    #[test]
    fn the_checksum_covers_every_field_before_it() {
        let good = Header::new(KIND_STRIPED, 8, 0, 65_536, 7, 0);
        let len = std::mem::offset_of!(Header, checksum);
        for byte in 0..len {
            let mut h = good;
            // SAFETY: `byte` is within the header's plain-integer fields before `checksum`,
            // and any bytes are a valid `Header`.
            unsafe { *(&mut h as *mut Header).cast::<u8>().add(byte) ^= 0x10 };
            assert_ne!(
                h.compute_checksum(),
                good.checksum,
                "byte {byte} is not covered"
            );
        }
    }

    #[test]
    fn the_lock_word_packs_fence_slow_and_holder_apart() {
        for (lo, slow, xproc) in [(0, false, 0), (1, true, 1), (word::LO_MAX, true, 256)] {
            let w = word::make(lo, slow, xproc);
            assert_eq!(word::lo(w), lo);
            assert_eq!(w & word::SLOW != 0, slow);
            assert_eq!(word::xproc(w), xproc);
            assert_eq!(word::fence(w, 0), lo);
            assert_eq!(word::fence(w, 3), (3 << word::LO_BITS) | lo);
        }
        assert_eq!(word::XPROC & word::SLOW, 0);
        assert_eq!(
            word::make(word::LO_MAX, false, 0) & (word::XPROC | word::SLOW),
            0
        );
        // A slot number past XPROC cannot spill into SLOW.
        assert_eq!(word::make(0, false, 1 << 12) & word::SLOW, 0);
    }
}

//! A LongAdder-style striped counter that only ever increments.
//!
//! Uncontended, a counter is one word (`base`) and a null pointer. The first failed
//! compare-and-swap on `base` (another thread incremented at the same time) allocates a table of
//! two cache-padded cells; each further collision on a cell doubles the table, up to the next
//! power of two at or above the available parallelism. Threads pick a cell by a per-thread probe
//! that is re-hashed on collision, as Java's `LongAdder` does. Memory is therefore O(cores), not
//! O(threads), and a lock that never sees contention never allocates.
//!
//! Older tables are kept (linked from the newer one) rather than copied: cells only grow, so the
//! sum over every table ever allocated is the exact count, and a thread still holding an old
//! table pointer may keep incrementing it. They are freed with the counter.
//!
//! Every increment is a sequentially consistent read-modify-write and `sum` reads every cell
//! with sequentially consistent loads: the RwLock's correctness argument (egress read before
//! ingress) relies on it.

use std::ptr;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicPtr, AtomicUsize, Ordering};

/// One table of cells, linking the smaller table it replaced.
struct Table {
    cells: Box<[CachePadded<AtomicUsize>]>,
    older: *mut Table,
    /// The table has the most cells it may have: collisions no longer lead anywhere, so
    /// increments skip the compare-and-swap that detects them.
    full: bool,
}

/// An increment-only striped counter.
pub(crate) struct Adder {
    /// Where increments go until the first contention.
    base: AtomicUsize,
    /// The newest table, or null. Set once per growth, never cleared until drop.
    table: AtomicPtr<Table>,
}

impl std::fmt::Debug for Adder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adder")
            .field("sum", &self.sum())
            .field("cells", &self.cells())
            .finish()
    }
}

/// The largest table: the next power of two at or above the available parallelism.
fn max_cells() -> usize {
    #[cfg(not(keylock_loom))]
    {
        // Computed once; a race computes the same value twice, which is harmless. (An atomic
        // rather than OnceLock keeps it visible to ThreadSanitizer, which cannot see into the
        // uninstrumented standard library.)
        use crate::sync::unmodelled::{AtomicUsize, available_parallelism};
        static MAX: AtomicUsize = AtomicUsize::new(0);
        let cached = MAX.load(Ordering::Relaxed);
        if cached != 0 {
            return cached;
        }
        let max = available_parallelism()
            .map_or(8, |n| n.get())
            .next_power_of_two()
            .max(2);
        MAX.store(max, Ordering::Relaxed);
        max
    }
    #[cfg(keylock_loom)]
    {
        2
    }
}

#[cfg(not(keylock_loom))]
std::thread_local! {
    /// This thread's cell probe; 0 until first used.
    static PROBE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

#[cfg(not(keylock_loom))]
#[inline]
fn probe() -> u32 {
    PROBE.with(|p| {
        let mut v = p.get();
        if v == 0 {
            static NEXT: crate::sync::unmodelled::AtomicU32 =
                crate::sync::unmodelled::AtomicU32::new(0);
            // Thread n gets n times an odd constant: consecutive threads differ in their low
            // bits, which pick the cell, so two threads start on different cells. Bit 31 marks
            // the probe as set (never 0).
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            v = n.wrapping_mul(0x9E37_79B9) | 0x8000_0000;
            p.set(v);
        }
        v
    })
}

#[cfg(not(keylock_loom))]
fn rehash_probe() {
    PROBE.with(|p| {
        // xorshift32: a cheap move to another cell after a collision.
        let mut v = p.get().max(1);
        v ^= v << 13;
        v ^= v >> 17;
        v ^= v << 5;
        p.set(v);
    });
}

#[cfg(keylock_loom)]
fn probe() -> u32 {
    0
}

#[cfg(keylock_loom)]
fn rehash_probe() {}

impl Adder {
    #[cfg(not(keylock_loom))]
    pub(crate) const fn new() -> Self {
        Self {
            base: AtomicUsize::new(0),
            table: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[cfg(keylock_loom)]
    pub(crate) fn new() -> Self {
        Self {
            base: AtomicUsize::new(0),
            table: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Adds one.
    #[inline]
    pub(crate) fn increment(&self) {
        let table = self.table.load(Ordering::Acquire);
        if table.is_null() {
            let base = self.base.load(Ordering::Relaxed);
            if self
                .base
                .compare_exchange(
                    base,
                    base.wrapping_add(1),
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return;
            }
            self.grow(table);
            self.base.fetch_add(1, Ordering::SeqCst);
            return;
        }
        // SAFETY: tables are only freed in `drop`, which has `&mut self`.
        let cells = unsafe { &(*table).cells };
        let cell = &cells[probe() as usize & (cells.len() - 1)];
        // SAFETY: as above.
        if unsafe { (*table).full } {
            cell.fetch_add(1, Ordering::SeqCst);
            return;
        }
        let value = cell.load(Ordering::Relaxed);
        if cell
            .compare_exchange(
                value,
                value.wrapping_add(1),
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_err()
        {
            // Collision: count anyway, then move this thread elsewhere and maybe widen.
            cell.fetch_add(1, Ordering::SeqCst);
            rehash_probe();
            if cells.len() < max_cells() {
                self.grow(table);
            }
        }
    }

    /// Replaces `seen` (the table this thread found too crowded) with one twice its size.
    #[cold]
    fn grow(&self, seen: *mut Table) {
        let len = if seen.is_null() {
            2
        } else {
            // SAFETY: see `increment`.
            let seen: &Table = unsafe { &*seen };
            seen.cells.len() * 2
        };
        if len > max_cells() {
            return;
        }
        let fresh = Box::into_raw(Box::new(Table {
            cells: (0..len)
                .map(|_| CachePadded::new(AtomicUsize::new(0)))
                .collect(),
            older: seen,
            full: len >= max_cells(),
        }));
        if self
            .table
            .compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another thread grew it first; ours was never published.
            // SAFETY: `fresh` came from Box::into_raw above and nobody else saw it.
            drop(unsafe { Box::from_raw(fresh) });
        }
    }

    /// The total of every increment so far (exact when no increment runs concurrently).
    pub(crate) fn sum(&self) -> usize {
        let mut total = self.base.load(Ordering::SeqCst);
        let mut table = self.table.load(Ordering::SeqCst);
        while !table.is_null() {
            // SAFETY: see `increment`.
            let t = unsafe { &*table };
            for cell in t.cells.iter() {
                total = total.wrapping_add(cell.load(Ordering::SeqCst));
            }
            table = t.older;
        }
        total
    }

    /// Cells allocated (0 while uncontended).
    pub(crate) fn cells(&self) -> usize {
        let table = self.table.load(Ordering::Acquire);
        if table.is_null() {
            0
        } else {
            let mut n = 0;
            let mut t = table;
            while !t.is_null() {
                // SAFETY: see `increment`.
                let table: &Table = unsafe { &*t };
                n += table.cells.len();
                t = table.older;
            }
            n
        }
    }
}

impl Drop for Adder {
    fn drop(&mut self) {
        let mut table = self.table.load(Ordering::Relaxed);
        while !table.is_null() {
            // SAFETY: every table was made by Box::into_raw and is owned by this counter alone.
            let t = unsafe { Box::from_raw(table) };
            table = t.older;
        }
    }
}

// SAFETY: the raw table pointers are owned by the counter; all shared access is atomic.
unsafe impl Send for Adder {}
// SAFETY: as above.
unsafe impl Sync for Adder {}

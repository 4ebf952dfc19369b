//! The host scope: a key pool, a striped lock or a keyed semaphore in a named shared-memory
//! region, shared by every process on the host that opens the same name (cargo feature `shm`,
//! Linux).
//!
//! ```
//! use keylock_core::{KeyedLock, LockKey, LockOptions, OpenOptions};
//!
//! let name = format!("shm:doc-mod-{}", std::process::id());
//! let pool = keylock_core::open(&name).unwrap();                  // a KeyPool
//! let mut options = OpenOptions::default();
//! options.stripes = Some(64);
//! let stripes = keylock_core::open_with(&format!("{name}-s"), &options).unwrap(); // a StripedLock
//! let acq = pool.acquire(LockKey::new(b"job:7"), &LockOptions::new()).unwrap();
//! assert!(!acq.owner_died());
//! pool.release(acq).unwrap();
//! drop(stripes.acquire(LockKey::new(b"job:7"), &LockOptions::new().shared()).unwrap());
//! keylock_core::shm::unlink(&name["shm:".len()..]).unwrap();
//! keylock_core::shm::unlink(&format!("{}-s", &name["shm:".len()..])).unwrap();
//! ```
//!
//! Same operations and semantics as in one process ([`KeyedLock`](crate::KeyedLock)):
//! blocking, try, timed and async acquire; `acquire_many` (all or nothing, canonical order);
//! shared and exclusive modes, FIFO per key; fences, leases, force-unlock; reentrancy when the
//! region is made reentrant; `is_locked`/`info`. What differs:
//!
//! - **Fairness is the region's**, fixed by its creator (`OpenOptions::fifo`; an open that
//!   asks otherwise is `Incompatible`). Default, as in one process: eventual fairness, where a
//!   release wakes the first waiter to try and an exclusive newcomer may take the key first,
//!   but a waiter that has waited [`FAIR_AFTER`](crate::wait::FAIR_AFTER) (0.5 ms) is
//!   granted it directly. `fifo`: every release grants the key to the first waiter, and
//!   nobody passes a waiter. Either way a shared request never passes a queued waiter.
//! - **Owners are per open**: reentrancy matches the owner number *and* the process (open) that
//!   holds the key, so owner 7 in one process is not owner 7 in another.
//! - **Owner death**: when a process holding a key dies, the next acquirer gets it with
//!   [`Acquisition::owner_died`](crate::Acquisition::owner_died) set, and a higher fence.
//! - Limits, fixed when the region is made: [`DEFAULT_CAPACITY`] keys held or awaited at once
//!   (a pool's `capacity`), 4 × capacity waiting or shared acquisitions at once (at least
//!   1,024), 256 opens attached at once, keys of at most 256 bytes (pool). Past a limit an
//!   acquire fails with `CapacityExceeded`; nothing is overwritten and nothing hangs.
//! - A process that forks keeps its locks; the child must open the region again (the
//!   parent's handle answers `Unavailable` in the child).
//!
//! # Semaphores
//!
//! Opened with [`OpenOptions::permits`](crate::OpenOptions::permits), the region is a keyed
//! semaphore (a pool, strict FIFO, no stripes or owners): at most `permits` units of a key
//! held at once across every process that opens it. The permits are the region's, recorded in
//! its header; an open with other permits, or a lock region opened as a semaphore (or the
//! reverse), is `Incompatible`. Each acquisition takes its `weight` in units (1 to the
//! permits, else `InvalidArgument`) and is a holder record on the entry's holders list, with
//! its units, its lease, its process and a fence of its own (every acquisition advances the
//! key's fence, as do a force-unlock, a lease's end and a dead holder's reclaim). Waiters are
//! served strictly in order: a request whose units do not fit waits, and so does everyone
//! behind it, so a heavy request at the head is never passed. A release goes by acquisition
//! (a stale one is `NotOwner` or `LeaseExpired` and frees nothing). A holder whose process
//! dies (or closes the region) gives its units back, and the next holder of the key gets
//! [`owner_died`](crate::Acquisition::owner_died); a waiter behind semaphore holders learns of
//! such a death by the bounded re-check ([`LIVENESS_SLICE`]), as a waiter behind shared
//! holders does. Every semaphore operation takes the table mutex (the units held are checked
//! against the holder records there, so a corrupt count is `Incompatible`, never a grant past
//! the permits); a lock region's fast path only tests that the region has no permits.
//!
//! # The region
//!
//! `shm:NAME` is the file `/dev/shm/keylock.NAME` (NAME: 1 to 200 of `A-Z a-z 0-9 . _ -`, not
//! starting with `.`). The first open creates it, mode 0600 unless
//! [`OpenOptions::mode`](crate::OpenOptions::mode) says otherwise, atomically: it is built
//! under a temporary name and `link`ed into place, so the name never shows a half-made region.
//! [`unlink`] removes the name; processes that have it open keep using it, and the memory goes
//! when the last one closes. Nothing survives a reboot (`/dev/shm` is memory).
//!
//! Layout (version 2; all integers little-endian, native alignment; x86-64 and aarch64 Linux
//! with glibc):
//!
//! | offset | what |
//! |---|---|
//! | 0 | header: `magic` u64 = `b"keylock\x01"`, `version` u32 = 2, `header_len` u32 = 4096, `hash_spec` u32 = 1, `kind` u32 (1 pool, 2 striped), `flags` u32 (bit 0 reentrant, bit 1 strict FIFO), `capacity` u32 (entries, or stripes), `buckets` u32 (pool: capacity rounded up to a power of two; striped 0), `procs` u32 = 256, `nodes` u32, `key_max` u32 = 256, `entry_size` u32 = 384, `node_size` u32 = 64, `proc_size` u32 = 64, `max_holds` u32 = 65536, `total_len` u64, `off_procs`, `off_entries`, `off_buckets`, `off_nodes` u64, `region_id` u64, `permits` u32 (a semaphore's units per key, 1 to 32767, the region then a pool with bit 1 of `flags` set; 0: a lock region), `reserved` u32 = 0, `checksum` u64 = XXH3-64 (seed 0) of the bytes before it |
//! | 512 | runtime: the table mutex (robust, process-shared pthread mutex), its holder's slot + 1, free lists, eviction hand, fence floor, waiter sequence |
//! | 4096 | `procs` process slots of 64 bytes: a robust mutex held by the process's agent thread, state, generation, pid, doorbell futex word |
//! | `off_entries` | `capacity` entries of 384 bytes: lock word, hash, owner, lease end, bind state, chain link, key length and space, fence high bits, wait queue, shared (or semaphore) holders, hold count, died flag, grant in progress, units held (semaphore), key bytes |
//! | `off_buckets` | pool: `buckets` u32 chain heads (entry + 1) |
//! | `off_nodes` | `nodes` records of 64 bytes: a waiter, a shared holder or a semaphore holder (with its units) |
//!
//! Opening checks everything: magic, version, checksum, hash spec, kind, every size and
//! offset against this build's layout, the file's length, and (when the opener gives them)
//! stripes, capacity, reentrancy, fairness and permits. Any difference is [`Error::Incompatible`](crate::Error)
//! naming it; a file the process may not open is [`Error::PermissionDenied`](crate::Error).
//! Every index read from the region later is range-checked, so a garbage region yields
//! `Incompatible`, never a wild access.
//!
//! The lock word of an entry:
//!
//! ```text
//!  63                                  13   12    11          0
//! +--------------------------------------+------+-------------+
//! |          fence, low 51 bits          | SLOW |    XPROC    |
//! +--------------------------------------+------+-------------+
//! ```
//!
//! `XPROC` is the exclusive holder's process slot + 1 (0: not held exclusively); `SLOW` says
//! that everything must go through the table mutex (waiters queued, shared holders, a lease,
//! an owner or hold count, a reclaimed dead holder not yet reported, an entry being rebound).
//! An uncontended plain exclusive acquire is one compare-and-swap from a word with neither
//! bit to one with `XPROC` set and the fence plus one; its release is one compare-and-swap
//! back from exactly that word, so a stale release (force-unlocked, lease expired) cannot free
//! a later holder. Everything else happens under the table mutex.
//!
//! # Keys and the hash
//!
//! Keys are the bytes of the core's key encoding ([`keys`](crate::keys)), in a space (plain keys
//! 0, Web Locks names 1). **Hash spec 1**: `XXH3_64bits_withSeed(key, 0x6b65796c6f636b00 +
//! space)` (the seed is `"keylock\0"` read big-endian). A pool's bucket is `hash & (buckets -
//! 1)`; a stripe is `hash & (stripes - 1)`. XXH3 is specified (the xxHash specification),
//! stable across versions by its authors' promise, fast on short keys (a few ns, which the
//! uncontended path needs), and implemented in every language keylock serves (C `xxhash.h`,
//! Python `xxhash`, Node), so another implementation can join a region; the Rust code is the
//! `xxhash-rust` crate. ahash and foldhash, the in-process hashers, promise neither a
//! specification nor stable output.
//!
//! # Death and recovery, and why this way
//!
//! Linux tells a process about another's death in few ways. Robust futex lists are the one
//! that needs no polling, but each thread has one list and glibc owns it, so keylock cannot
//! keep its own. What glibc gives instead is the **robust process-shared pthread mutex**: when
//! the thread holding one dies, the kernel marks it, wakes a waiter, and the next locker gets
//! `EOWNERDEAD`. keylock builds on exactly that, twice. (The alternative, a holder's pid plus
//! start time checked with a pidfd, needs a poll on the pidfd, which no futex wait can join,
//! and so a polling slice; the robust mutex gives the kernel's own wake-up instead.)
//!
//! - **Liveness.** Each open of a region claims a process slot and starts one agent thread,
//!   which locks the slot's robust mutex and keeps it until the region is closed. Anyone can
//!   test whether that process is alive with `pthread_mutex_trylock`: `EBUSY` while it lives,
//!   `EOWNERDEAD` once it died. The test is an atomic read while the process lives, and is
//!   immune to pid reuse (no pids are compared, so no pidfd or start time is needed).
//! - **The table's critical sections.** All slow-path changes happen under one robust mutex.
//!   A process killed inside one leaves `EOWNERDEAD` to the next locker, which rebuilds the
//!   derived structures (free lists, chains, queues, holder counts) from the records that each
//!   change in one store, completes a half-made grant, and reclaims the dead process.
//!
//! Holders are recorded per process: an exclusive holder in the lock word, a shared holder and
//! a waiter in a node with its process slot. A dead holder's acquisitions end with the fence
//! advanced and the entry marked `died`; the lock passes to the next waiter, whose acquisition
//! reports `owner_died`. How a waiter learns of the death:
//!
//! - **Pushed, for a waiter behind an exclusive holder.** A blocking waiter sleeps with
//!   `futex_waitv` (Linux 5.16) on two words at once: its own node's state (the grant) and the
//!   holder's liveness mutex word, after setting that word's `FUTEX_WAITERS` bit exactly as a
//!   pthread waiter does. The agent thread does the same for the open's async waiters, on its
//!   doorbell plus the liveness words of the holders they wait behind (up to 127). When the
//!   holder dies, the kernel's robust-futex exit handling marks that word `FUTEX_OWNER_DIED`
//!   and wakes a sleeper, which reclaims the dead process under the table mutex and hands its
//!   keys on (each grant wakes its waiter). This reads the mutex's futex word, which is the
//!   first word of glibc's `pthread_mutex_t`; each agent checks that at run time (the word
//!   must hold its own thread id once it has locked its slot's mutex), and where it does not
//!   hold, waiters fall back to the timed re-check below. Measured: a killed holder's key
//!   reaches the waiter in about a millisecond or less (BENCHMARKS.md, "recovery after kill
//!   -9"; `shm_procs.rs` prints the async figures).
//! - **A bounded re-check, for everything else.** Every waiter also sleeps at most
//!   [`LIVENESS_SLICE`] (20 ms) before it tests the holders' liveness under the table mutex:
//!   shared holders (there may be many), a holder that changed while it slept (each exclusive
//!   hand-off wakes the next waiter so that it watches the new holder, but a race can still
//!   leave it watching an old one), kernels before 5.16, other C libraries. So no waiter waits
//!   much more than 20 ms past a death.
//!
//! A try acquire of a key whose holder died, `info`, and a full table all reclaim dead processes
//! too, so a killed waiter's reservation goes as soon as anyone looks; a release never hands a
//! key to a dead waiter (the grant checks the waiter's liveness first).
//!
//! `owner_died` means what `EOWNERDEAD` means: the previous exclusive holder was killed while
//! holding the key, so whatever it protected may be half-changed. The new holder should check
//! or repair that data (the fence, higher than the dead holder's, lets a store reject the dead
//! holder's late writes). A shared holder's death does not set it (readers change nothing).
//! Closing a region (dropping the last handle of an open) while holding keys releases them the
//! same way, as owner-died.
//!
//! # Waiting
//!
//! Blocking waiters sleep on their own node's futex word (and the holder's, above). A grant
//! is a futex wake; nothing polls (the 20 ms re-check is a bound, not the mechanism). Async
//! waiters (`acquire_async`) block nothing: the future registers with its open's agent
//! thread, which sleeps on the slot's doorbell (a futex word that every grant to an async
//! waiter of that process bumps) and on its holders' liveness words, and wakes the future's
//! waker. One thread per open serves all its async waiters.
//!
//! # Trust
//!
//! Every process that the region's permissions let write it is trusted: it can write anything
//! there, and the table has no checksum, so a region corrupted on purpose may give wrong
//! answers. What holds for any bytes is that a process opening or using the region neither
//! crashes nor hangs:
//!
//! - every index and length read from the region is range-checked (`Incompatible`);
//! - before any pthread call on a mutex in the region (the table mutex, the process slots'
//!   liveness mutexes; there are no other pthread objects), its kind words are compared with
//!   those of a mutex this process initialized the same way, since glibc picks its code path
//!   by the kind alone and some kinds kill the process (lock elision: SIGILL; priority
//!   protection: an assertion). Another kind is `Incompatible`;
//! - the table mutex is waited for at most [`TABLE_MUTEX_WAIT`] plus 200 ns per record (the
//!   longest legitimate hold is one pass over the records), in `pthread_mutex_timedlock`
//!   slices; past it the caller gets `Unavailable` naming the holder's thread id, so a lock
//!   word that no live thread owns (or a stopped holder) does not freeze every process on the
//!   host. The liveness mutexes are only ever tried (`trylock`), never waited for.
//!
//! Writes to a mutex while this process holds it are outside the promise (the C library keeps
//! its robust-list links there), as is truncating the file under processes that map it (they
//! die of SIGBUS); keylock itself never truncates a region: [`unlink`] removes the name, and a
//! new region is a new file.

mod agent;
mod index;
mod layout;
mod list;
mod lock;
mod lockword;
mod nodes;
mod operations;
mod procs;
mod region;
mod repair;
mod stats;
mod sys;
mod table;
mod wait;
mod watch;

pub use lock::{DEFAULT_CAPACITY, ShmLock};
pub use region::TABLE_MUTEX_WAIT;
pub use wait::LIVENESS_SLICE;

pub(crate) use operations::open_scope;

/// Removes region `name` (the `NAME` of `shm:NAME`); whether it existed. Processes that have
/// it open keep using it; the next open of the name creates a new region.
pub fn unlink(name: &str) -> crate::Result<bool> {
    region::unlink(name)
}

/// The file that holds region `name` (`/dev/shm/keylock.NAME`).
pub fn path(name: &str) -> crate::Result<std::path::PathBuf> {
    region::path_of(name).map(Into::into)
}

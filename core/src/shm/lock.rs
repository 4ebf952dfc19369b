//! [`ShmLock`]: a key pool or a striped lock in a region: the handle (its region, agent thread
//! and process slot), finding a key's entry, and the fast path on its lock word. The
//! [`KeyedLock`](crate::KeyedLock) operations, which add waiting ([`super::wait`]), are in
//! [`super::operations`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::agent::{self, Agent};
use super::index;
use super::layout::*;
use super::lockword;
use super::region::{self, Region, TableGuard};
use super::repair;
use super::sys::{self, now_ns};
use super::table::{Req, TableGrant, TableWakes};
use crate::acquisition::{Acquisition, LockOptions, Mode, Owner};
use crate::error::{Error, Result};
use crate::scope::{KeySpace, OpenOptions};

/// The default capacity of a new key pool region: the most keys held or awaited at once.
pub const DEFAULT_CAPACITY: usize = 4096;
/// The reentrant hold-count limit of every region.
const MAX_HOLDS: u32 = 1 << 16;

/// A key pool or striped lock in a named shared-memory region, shared by every process on the
/// host that opens the same name. See the [module docs](super).
///
/// ```
/// # if cfg!(target_os = "linux") {
/// use keylock_core::{KeyedLock, LockKey, LockOptions, shm::ShmLock};
/// let name = format!("doc-{}", std::process::id());
/// let pool = ShmLock::open(&name, &Default::default()).unwrap();
/// let acq = pool.acquire(LockKey::new(b"acct:1"), &LockOptions::new()).unwrap();
/// assert!(pool.is_locked(LockKey::new(b"acct:1")).unwrap());
/// pool.release(acq).unwrap();
/// keylock_core::shm::unlink(&name).unwrap();
/// # }
/// ```
#[derive(Debug)]
pub struct ShmLock {
    pub(super) region: Arc<Region>,
    agent: Arc<Agent>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// This open's process slot.
    pub(super) proc: u32,
    /// The region's permits (0: a lock region), kept beside `proc` so that the lock fast
    /// path's test of it reads no other cache line.
    pub(super) permits: u32,
    /// The process's fork generation at open: a child of a fork must not act as the parent.
    pub(super) fork_gen: u64,
    /// The low bits of the region id that acquisitions carry.
    pub(super) tag: u64,
    /// The high 32 bits of this open's acquisitions' `at` (the tag and the process slot + 1),
    /// made once: the fast paths write and check them on every call.
    pub(super) at_hi: u32,
}

pub(super) const TAG_SHIFT: u32 = 44;
const TAG_MASK: u64 = (1 << (64 - TAG_SHIFT)) - 1;

impl ShmLock {
    /// Opens (creating if needed) region `name`: a key pool, or a striped lock when
    /// `options.stripes` is set (rounded up to a power of two). `options.capacity` is the most
    /// keys held or awaited at once for a new pool (default [`DEFAULT_CAPACITY`]); for an
    /// existing region it must match when given. `options.mode` sets a new region's file
    /// permissions (default 0o600). `options.fifo` and `options.reentrant` are the region's:
    /// fixed by its creator, and an open that asks otherwise is `Incompatible`.
    /// `options.permits` makes (or opens) a semaphore region, a pool with that many units per
    /// key (1 to 32767), always strict FIFO, without stripes or owners; every open of it must
    /// give the same permits, and a lock region opened with permits (or the reverse) is
    /// `Incompatible`.
    pub fn open(name: &str, options: &OpenOptions) -> Result<Arc<ShmLock>> {
        let to_u32 = |n: usize, what: &'static str| -> Result<u32> {
            u32::try_from(n)
                .ok()
                .filter(|&n| n > 0 && n <= MAX_CAPACITY)
                .ok_or(Error::InvalidArgument(what))
        };
        let permits = match options.permits {
            None => 0,
            Some(p) => {
                if options.stripes.is_some() || options.reentrant || options.fifo {
                    return Err(Error::InvalidArgument(
                        "a semaphore has no stripes or owners, and is always FIFO",
                    ));
                }
                if p == 0 || p > MAX_PERMITS {
                    return Err(Error::InvalidArgument(
                        "a semaphore's permits are at least 1 and at most 32767",
                    ));
                }
                p
            }
        };
        let want = match options.stripes {
            Some(stripes) => {
                if options.capacity.is_some() {
                    return Err(Error::InvalidArgument(
                        "a striped region's size is its stripes; capacity applies to pools",
                    ));
                }
                let s = to_u32(stripes, "stripes must be between 1 and 2^24")?;
                let s = s.next_power_of_two();
                region::Want {
                    kind: KIND_STRIPED,
                    capacity: Some(s),
                    create_capacity: s,
                    reentrant: options.reentrant,
                    fifo: options.fifo,
                    mode: options.mode.unwrap_or(0o600),
                    max_holds: MAX_HOLDS,
                    permits: 0,
                }
            }
            None => region::Want {
                kind: KIND_POOL,
                capacity: options
                    .capacity
                    .map(|c| to_u32(c, "capacity must be between 1 and 2^24"))
                    .transpose()?,
                create_capacity: DEFAULT_CAPACITY as u32,
                reentrant: options.reentrant,
                // A semaphore region always hands off in strict FIFO order.
                fifo: options.fifo || permits != 0,
                mode: options.mode.unwrap_or(0o600),
                max_holds: MAX_HOLDS,
                permits,
            },
        };
        if let Some(mode) = options.mode
            && mode & !0o777 != 0
        {
            return Err(Error::InvalidArgument(
                "mode is permission bits (at most 0o777)",
            ));
        }
        Self::start(Region::open(name, &want)?, permits)
    }

    /// Opens region `name` as its creator made it (a key pool or a striped lock, any
    /// capacity, policy or permits), never creating it: what [`crate::inspect`] opens.
    /// A missing region is `Unavailable`.
    pub fn open_existing(name: &str) -> Result<Arc<ShmLock>> {
        let region = Region::open_existing(name)?;
        let permits = region.header.permits;
        Self::start(region, permits)
    }

    /// This process's attachment to a mapped region: its process slot and agent thread.
    fn start(region: Region, permits: u32) -> Result<Arc<ShmLock>> {
        let fork_gen = sys::watch_forks();
        let region = Arc::new(region);
        let agent = Arc::new(Agent::default());
        let (proc, thread) = agent::start(Arc::clone(&region), Arc::clone(&agent))?;
        let tag = region.header.region_id & TAG_MASK;
        let at_hi = ((tag << TAG_SHIFT | u64::from(proc + 1) << 32) >> 32) as u32;
        Ok(Arc::new(ShmLock {
            region,
            agent,
            thread: Mutex::new(Some(thread)),
            proc,
            permits,
            fork_gen,
            tag,
            at_hi,
        }))
    }

    pub(crate) fn region(&self) -> &Region {
        &self.region
    }

    pub(crate) fn agent(&self) -> &Agent {
        &self.agent
    }

    pub(crate) fn max_holds(&self) -> u32 {
        self.region.header.max_holds
    }

    /// A semaphore region's units per key; `None` for a lock region.
    pub fn permits(&self) -> Option<u32> {
        (self.region.header.permits != 0).then_some(self.region.header.permits)
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        &self.region.name
    }

    /// Whether this is a striped region (else a key pool).
    pub fn is_striped(&self) -> bool {
        !self.region.is_pool()
    }

    /// Pool: the most keys held or awaited at once. Striped: the number of stripes.
    pub fn capacity(&self) -> usize {
        self.region.header.capacity as usize
    }

    /// Takes the region's table mutex and never gives it back: for tests of the repair that
    /// runs when a process dies holding it (the caller's process is about to be killed).
    #[doc(hidden)]
    pub fn hold_table_mutex_until_killed(&self) {
        let mut wakes = TableWakes::default();
        if let Ok(g) = self.table(&mut wakes) {
            std::mem::forget(g);
        }
    }

    /// This open's process slot, checked against fork.
    pub(super) fn me(&self) -> Result<u32> {
        if sys::fork_generation() != self.fork_gen {
            return Err(Error::Unavailable(
                "this shm lock was opened before fork(); open it again in the child".into(),
            ));
        }
        Ok(self.proc)
    }

    /// The table mutex, repaired if its last holder died inside.
    pub(crate) fn table(&self, wakes: &mut TableWakes) -> Result<TableGuard<'_>> {
        let mut g = self.region.lock_table()?;
        let rt = self.region.runtime();
        let dead = rt.holder.load(Ordering::Relaxed);
        rt.holder.store(self.proc + 1, Ordering::Relaxed);
        if g.died {
            repair::repair(&mut g, dead, wakes)?;
        }
        Ok(g)
    }

    #[inline]
    pub(super) fn stripe_of(&self, space: KeySpace, key: &[u8]) -> u32 {
        (index::hash_key(space as u8, key) as u32) & (self.region.header.capacity - 1)
    }

    /// The entry of the key, binding one if needed (under the mutex).
    pub(crate) fn entry_locked(
        &self,
        t: &TableGuard<'_>,
        space: KeySpace,
        key: &[u8],
    ) -> Result<u32> {
        if !self.region.is_pool() {
            return Ok(self.stripe_of(space, key));
        }
        let h = index::hash_key(space as u8, key);
        match index::bind_locked(t, h, space as u8, key) {
            Err(Error::CapacityExceeded) => {
                // Dead processes may be holding entries: reclaim them and try once more.
                let mut wakes = TableWakes::default();
                super::procs::reap_all(t, &mut wakes)?;
                // (their grants are woken when the caller's wakes run; these are rare)
                wakes.run(&self.region);
                index::bind_locked(t, h, space as u8, key)
            }
            other => other,
        }
    }

    /// The entry of the key if it has one (under the mutex).
    pub(super) fn find_locked(
        &self,
        t: &TableGuard<'_>,
        space: KeySpace,
        key: &[u8],
    ) -> Result<Option<u32>> {
        if !self.region.is_pool() {
            return Ok(Some(self.stripe_of(space, key)));
        }
        index::find_locked(t, index::hash_key(space as u8, key), space as u8, key)
    }

    /// The fast path: a plain exclusive acquire of a free, bound entry.
    #[inline(always)]
    pub(crate) fn try_fast(&self, space: KeySpace, key: &[u8], req: &Req) -> Option<TableGrant> {
        if !req.is_plain() {
            return None;
        }
        let h = index::hash_key(space as u8, key);
        let (entry, e, w) = if self.region.is_pool() {
            index::find_fast(&self.region, h, space as u8, key)?
        } else {
            let entry = (h as u32) & (self.region.header.capacity - 1);
            let e = self.region.entry_if(entry)?;
            (entry, e, e.word.load(Ordering::Acquire))
        };
        let fence = lockword::fast_acquire(e, w, req.proc)?;
        Some(TableGrant {
            entry,
            fence,
            mode: Mode::Exclusive,
            ticket: 0,
            lease_until: 0,
            died: false,
            units: 0,
        })
    }

    /// What `opts` asks of the region. In a semaphore region every request is for `weight`
    /// units, in shared mode (a semaphore has no modes), and the weight's range is checked by
    /// [`ShmLock::check_request`].
    pub(super) fn req(&self, opts: &LockOptions, proc: u32) -> Req {
        let permits = self.region.header.permits;
        Req {
            mode: if permits == 0 {
                opts.mode
            } else {
                Mode::Shared
            },
            lease: opts.lease.map_or(0, |d| {
                (d.as_nanos().min(u64::MAX as u128 / 2) as u64).max(1)
            }),
            owner: if self.region.reentrant() {
                opts.owner.map_or(0, Owner::get)
            } else {
                0
            },
            proc,
            units: if permits == 0 { 0 } else { opts.weight },
        }
    }

    /// `InvalidArgument` for a Web Locks name in a semaphore region (its keys are plain keys).
    pub(super) fn check_key(&self, key: crate::scope::LockKey<'_>) -> Result<()> {
        if self.permits != 0 && key.space == KeySpace::Names {
            return Err(Error::InvalidArgument("a semaphore's keys are plain keys"));
        }
        Ok(())
    }

    /// `InvalidArgument` for what this region does not take: a weight other than 1 in a lock
    /// region; in a semaphore region, a weight of 0 or more than its permits, or a Web Locks
    /// name.
    pub(super) fn check_request(&self, space: KeySpace, opts: &LockOptions) -> Result<()> {
        let permits = self.region.header.permits;
        if permits == 0 {
            return opts.check_lock_weight();
        }
        if space == KeySpace::Names {
            return Err(Error::InvalidArgument("a semaphore's keys are plain keys"));
        }
        if opts.weight == 0 || opts.weight > permits {
            return Err(Error::InvalidArgument(
                "a semaphore's weight is at least 1 and at most its permits",
            ));
        }
        Ok(())
    }

    /// The acquisition record of a grant.
    #[inline(always)]
    pub(crate) fn acquisition(&self, g: TableGrant, opts: &LockOptions) -> Acquisition {
        Acquisition {
            fence: g.fence,
            at: u64::from(g.entry) | u64::from(self.at_hi) << 32,
            ticket: g.ticket,
            owner: opts.owner,
            lease_until: instant_of(g.lease_until),
            mode: g.mode,
            owner_died: g.died,
            units: g.units,
            metered_since: None,
        }
    }

    /// The grant an acquisition names, and its process slot + 1; `InvalidArgument` for an
    /// acquisition of another lock object.
    pub(super) fn grant_of(&self, acq: &Acquisition) -> Result<(TableGrant, u32)> {
        let entry = acq.at as u32;
        let proc = ((acq.at >> 32) & 0xFFF) as u32;
        if (acq.at >> TAG_SHIFT) != self.tag || entry >= self.region.header.capacity {
            return Err(Error::InvalidArgument(
                "the acquisition belongs to another lock",
            ));
        }
        let g = TableGrant {
            entry,
            fence: acq.fence,
            mode: acq.mode,
            ticket: acq.ticket,
            lease_until: 0,
            died: false,
            units: acq.units,
        };
        Ok((g, proc))
    }

    pub(super) fn deadline_of(wait: crate::acquisition::Wait) -> Option<u64> {
        wait.deadline().map(ns_of)
    }
}

/// An `Instant` for a monotonic-ns deadline (0: none).
#[inline]
pub(super) fn instant_of(ns: u64) -> Option<Instant> {
    if ns == 0 {
        return None;
    }
    let now_i = Instant::now();
    let now = now_ns();
    Some(if ns >= now {
        now_i + Duration::from_nanos(ns - now)
    } else {
        now_i
            .checked_sub(Duration::from_nanos(now - ns))
            .unwrap_or(now_i)
    })
}

/// Monotonic ns for an `Instant`.
fn ns_of(t: Instant) -> u64 {
    let now_i = Instant::now();
    let now = now_ns();
    if t >= now_i {
        now.saturating_add((t - now_i).as_nanos().min(u64::MAX as u128) as u64)
    } else {
        now.saturating_sub((now_i - t).as_nanos().min(u64::MAX as u128) as u64)
    }
}

impl Drop for ShmLock {
    fn drop(&mut self) {
        let thread = self.thread.get_mut().take();
        if let Some(thread) = thread {
            if sys::fork_generation() == self.fork_gen {
                agent::stop(&self.region, &self.agent, self.proc, thread);
            } else {
                // A fork's child: the agent thread is the parent's; leave it (and the
                // mapping it uses) alone.
                std::mem::forget(thread);
                std::mem::forget(Arc::clone(&self.region));
            }
        }
    }
}

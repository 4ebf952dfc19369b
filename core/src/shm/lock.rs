//! [`ShmLock`]: a key pool or a striped lock in a region, as a [`KeyedLock`].

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
use super::table::{self, Grant, Req, Wakes};
use super::wait::{self, AcquireOne};
use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner};
use crate::error::{Error, Result};
use crate::scope::{AcquireFuture, AcquireManyFuture, KeySpace, KeyedLock, LockKey, OpenOptions};

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
    region: Arc<Region>,
    agent: Arc<Agent>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// This open's process slot.
    proc: u32,
    /// The process's fork generation at open: a child of a fork must not act as the parent.
    fork_gen: u64,
    /// The low bits of the region id that acquisitions carry.
    tag: u64,
}

const TAG_SHIFT: u32 = 44;
const TAG_MASK: u64 = (1 << (64 - TAG_SHIFT)) - 1;

impl ShmLock {
    /// Opens (creating if needed) region `name`: a key pool, or a striped lock when
    /// `options.stripes` is set (rounded up to a power of two). `options.capacity` is the most
    /// keys held or awaited at once for a new pool (default [`DEFAULT_CAPACITY`]); for an
    /// existing region it must match when given. `options.mode` sets a new region's file
    /// permissions (default 0o600). `options.fifo` and `options.reentrant` are the region's:
    /// fixed by its creator, and an open that asks otherwise is `Incompatible`.
    pub fn open(name: &str, options: &OpenOptions) -> Result<Arc<ShmLock>> {
        let to_u32 = |n: usize, what: &'static str| -> Result<u32> {
            u32::try_from(n)
                .ok()
                .filter(|&n| n > 0 && n <= MAX_CAPACITY)
                .ok_or(Error::InvalidArgument(what))
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
                fifo: options.fifo,
                mode: options.mode.unwrap_or(0o600),
                max_holds: MAX_HOLDS,
            },
        };
        if let Some(mode) = options.mode
            && mode & !0o777 != 0
        {
            return Err(Error::InvalidArgument(
                "mode is permission bits (at most 0o777)",
            ));
        }
        let fork_gen = sys::watch_forks();
        let region = Arc::new(Region::open(name, &want)?);
        let agent = Arc::new(Agent::default());
        let (proc, thread) = agent::start(Arc::clone(&region), Arc::clone(&agent))?;
        let tag = region.header.region_id & TAG_MASK;
        Ok(Arc::new(ShmLock {
            region,
            agent,
            thread: Mutex::new(Some(thread)),
            proc,
            fork_gen,
            tag,
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
        let mut wakes = Wakes::default();
        if let Ok(g) = self.table(&mut wakes) {
            std::mem::forget(g);
        }
    }

    /// This open's process slot, checked against fork.
    fn me(&self) -> Result<u32> {
        if sys::fork_generation() != self.fork_gen {
            return Err(Error::Unavailable(
                "this shm lock was opened before fork(); open it again in the child".into(),
            ));
        }
        Ok(self.proc)
    }

    /// The table mutex, repaired if its last holder died inside.
    pub(crate) fn table(&self, wakes: &mut Wakes) -> Result<TableGuard<'_>> {
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
    fn stripe_of(&self, space: KeySpace, key: &[u8]) -> u32 {
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
                let mut wakes = Wakes::default();
                super::procs::reap_all(t, &mut wakes)?;
                // (their grants are woken when the caller's wakes run; these are rare)
                wakes.run(&self.region);
                index::bind_locked(t, h, space as u8, key)
            }
            other => other,
        }
    }

    /// The entry of the key if it has one (under the mutex).
    fn find_locked(&self, t: &TableGuard<'_>, space: KeySpace, key: &[u8]) -> Result<Option<u32>> {
        if !self.region.is_pool() {
            return Ok(Some(self.stripe_of(space, key)));
        }
        index::find_locked(t, index::hash_key(space as u8, key), space as u8, key)
    }

    /// The fast path: a plain exclusive acquire of a free, bound entry.
    #[inline(always)]
    pub(crate) fn try_fast(&self, space: KeySpace, key: &[u8], req: &Req) -> Option<Grant> {
        if !req.is_plain() {
            return None;
        }
        let (entry, w) = if self.region.is_pool() {
            index::find_fast(
                &self.region,
                index::hash_key(space as u8, key),
                space as u8,
                key,
            )?
        } else {
            let entry = self.stripe_of(space, key);
            (
                entry,
                self.region.entry(entry).ok()?.word.load(Ordering::Acquire),
            )
        };
        let fence = lockword::fast_acquire(self.region.entry(entry).ok()?, w, req.proc)?;
        Some(Grant {
            entry,
            fence,
            mode: Mode::Exclusive,
            ticket: 0,
            lease_until: 0,
            died: false,
        })
    }

    fn req(&self, opts: &LockOptions, proc: u32) -> Req {
        Req {
            mode: opts.mode,
            lease: opts.lease.map_or(0, |d| {
                (d.as_nanos().min(u64::MAX as u128 / 2) as u64).max(1)
            }),
            owner: if self.region.reentrant() {
                opts.owner.map_or(0, Owner::get)
            } else {
                0
            },
            proc,
        }
    }

    /// The acquisition record of a grant.
    #[inline]
    pub(crate) fn acquisition(&self, g: Grant, opts: &LockOptions) -> Acquisition {
        Acquisition {
            fence: g.fence,
            at: u64::from(g.entry) | (u64::from(self.proc + 1) << 32) | (self.tag << TAG_SHIFT),
            ticket: g.ticket,
            owner: opts.owner,
            lease_until: instant_of(g.lease_until),
            mode: g.mode,
            owner_died: g.died,
        }
    }

    /// The grant an acquisition names, and its process slot + 1; `InvalidArgument` for an
    /// acquisition of another lock object.
    fn grant_of(&self, acq: &Acquisition) -> Result<(Grant, u32)> {
        let entry = acq.at as u32;
        let proc = ((acq.at >> 32) & 0xFFF) as u32;
        if (acq.at >> TAG_SHIFT) != self.tag || entry >= self.region.header.capacity {
            return Err(Error::InvalidArgument(
                "the acquisition belongs to another lock",
            ));
        }
        let g = Grant {
            entry,
            fence: acq.fence,
            mode: acq.mode,
            ticket: acq.ticket,
            lease_until: 0,
            died: false,
        };
        Ok((g, proc))
    }

    fn deadline_of(wait: crate::acquisition::Wait) -> Option<u64> {
        wait.deadline().map(ns_of)
    }
}

/// An `Instant` for a monotonic-ns deadline (0: none).
#[inline]
fn instant_of(ns: u64) -> Option<Instant> {
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

/// Holds the acquisitions of a multi-key acquire until it completes; releases them if it fails
/// or is dropped.
struct Holding<'l> {
    lock: &'l ShmLock,
    acqs: Vec<Acquisition>,
}

impl Holding<'_> {
    fn take(mut self) -> Vec<Acquisition> {
        std::mem::take(&mut self.acqs)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        for acq in self.acqs.drain(..).rev() {
            let _ = self.lock.release_as(acq, None);
        }
    }
}

/// The keys of a multi-key acquire in the canonical order, duplicates merged (the strongest
/// mode wins), each with the index of its first occurrence among `keys` (the order the
/// acquisitions are returned in).
fn canonical(
    lock: &ShmLock,
    keys: &[(LockKey<'_>, Mode)],
) -> Vec<(KeySpace, Vec<u8>, Mode, usize)> {
    let mut out: Vec<(KeySpace, Vec<u8>, Mode, usize)> = keys
        .iter()
        .enumerate()
        .map(|(i, (k, m))| (k.space, k.bytes.to_vec(), *m, i))
        .collect();
    // Pools: by space and bytes. Stripes: by stripe (two keys on one stripe are one lock).
    let lock_of = |space: KeySpace, key: &[u8]| -> (u32, KeySpace, Vec<u8>) {
        if lock.region.is_pool() {
            (0, space, key.to_vec())
        } else {
            (lock.stripe_of(space, key), KeySpace::Keys, Vec::new())
        }
    };
    out.sort_by_key(|a| (lock_of(a.0, &a.1), a.3));
    out.dedup_by(|b, a| {
        let same = lock_of(a.0, &a.1) == lock_of(b.0, &b.1);
        if same && b.2 == Mode::Exclusive {
            a.2 = Mode::Exclusive;
        }
        same
    });
    out
}

/// The acquisitions of a multi-key acquire (made in canonical order) in key order.
fn in_key_order(mut acqs: Vec<(usize, Acquisition)>) -> Vec<Acquisition> {
    acqs.sort_by_key(|(first, _)| *first);
    acqs.into_iter().map(|(_, a)| a).collect()
}

impl KeyedLock for ShmLock {
    #[inline]
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        // The fast path, first and inline: a plain exclusive acquire of a free entry.
        if opts.mode == Mode::Exclusive
            && opts.lease.is_none()
            && (opts.owner.is_none() || !self.region.reentrant())
            && sys::fork_generation() == self.fork_gen
        {
            let req = Req {
                mode: Mode::Exclusive,
                lease: 0,
                owner: 0,
                proc: self.proc,
            };
            if let Some(g) = self.try_fast(key.space, key.bytes, &req) {
                return Ok(self.acquisition(g, opts));
            }
        }
        let proc = self.me()?;
        let req = self.req(opts, proc);
        if let Some(g) = self.try_fast(key.space, key.bytes, &req) {
            return Ok(self.acquisition(g, opts));
        }
        let deadline = Self::deadline_of(opts.wait);
        let g = wait::acquire_blocking(
            self,
            key.space,
            key.bytes,
            &req,
            deadline,
            opts.wait.failure(),
        )?;
        Ok(self.acquisition(g, opts))
    }

    fn acquire_async(self: Arc<Self>, key: LockKey<'_>, opts: &LockOptions) -> AcquireFuture {
        let proc = match self.me() {
            Ok(p) => p,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let req = self.req(opts, proc);
        let deadline = Self::deadline_of(opts.wait);
        Box::pin(AcquireOne::new(
            self,
            key.space,
            key.bytes,
            req,
            *opts,
            deadline,
            opts.wait.failure(),
        ))
    }

    fn acquire_many(
        &self,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> Result<Vec<Acquisition>> {
        let wait = crate::scope::shared_wait(opts.wait);
        let mut held = Holding {
            lock: self,
            acqs: Vec::with_capacity(keys.len()),
        };
        let mut firsts = Vec::with_capacity(keys.len());
        for (space, bytes, mode, first) in canonical(self, keys) {
            let o = LockOptions {
                mode,
                wait,
                ..*opts
            };
            held.acqs.push(self.acquire(
                LockKey {
                    space,
                    bytes: &bytes,
                },
                &o,
            )?);
            firsts.push(first);
        }
        Ok(in_key_order(firsts.into_iter().zip(held.take()).collect()))
    }

    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> AcquireManyFuture {
        let wait = crate::scope::shared_wait(opts.wait);
        let keys = canonical(&self, keys);
        let opts = *opts;
        Box::pin(async move {
            let mut held = Holding {
                lock: &self,
                acqs: Vec::with_capacity(keys.len()),
            };
            let mut firsts = Vec::with_capacity(keys.len());
            for (space, bytes, mode, first) in keys {
                let o = LockOptions { mode, wait, ..opts };
                let fut = Arc::clone(&self).acquire_async(
                    LockKey {
                        space,
                        bytes: &bytes,
                    },
                    &o,
                );
                held.acqs.push(fut.await?);
                firsts.push(first);
            }
            Ok(in_key_order(firsts.into_iter().zip(held.take()).collect()))
        })
    }

    #[inline]
    fn release(&self, acquisition: Acquisition) -> Result<()> {
        // The fast path: a plain exclusive hold of this open, nothing queued.
        let entry = acquisition.at as u32;
        if acquisition.mode == Mode::Exclusive
            && acquisition.at >> 32 == (self.tag << (TAG_SHIFT - 32)) | u64::from(self.proc + 1)
            && sys::fork_generation() == self.fork_gen
            && let Ok(e) = self.region.entry(entry)
            && lockword::fast_release(e, acquisition.fence, self.proc)
        {
            return Ok(());
        }
        self.release_as(acquisition, None)
    }

    fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
        let (g, aproc) = self.grant_of(&acquisition)?;
        let proc = self.me()?;
        if aproc != proc + 1 {
            return Err(Error::NotOwner);
        }
        let owner = owner.or(acquisition.owner);
        if g.mode == Mode::Exclusive
            && lockword::fast_release(self.region.entry(g.entry)?, g.fence, proc)
        {
            return Ok(());
        }
        let mut wakes = Wakes::default();
        let result = (|| {
            let t = self.table(&mut wakes)?;
            table::release_locked(&t, &g, proc, owner, &mut wakes)
        })();
        wakes.run(&self.region);
        result.map_err(|e| match e {
            Error::NotOwner => acquisition.stale_error(),
            e => e,
        })
    }

    fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        let (g, aproc) = self.grant_of(acquisition)?;
        let proc = self.me()?;
        if aproc != proc + 1 {
            return Err(Error::NotOwner);
        }
        let ns = (lease.as_nanos().min(u64::MAX as u128 / 2) as u64).max(1);
        let mut wakes = Wakes::default();
        let result = (|| {
            let t = self.table(&mut wakes)?;
            table::extend_locked(&t, &g, proc, ns, &mut wakes)
        })();
        wakes.run(&self.region);
        match result {
            Ok(until) => {
                acquisition.lease_until = instant_of(until);
                Ok(())
            }
            Err(Error::NotOwner) => Err(acquisition.stale_error()),
            Err(e) => Err(e),
        }
    }

    fn is_current_as(&self, acquisition: &Acquisition, owner: Option<Owner>) -> Result<bool> {
        let (g, aproc) = self.grant_of(acquisition)?;
        let proc = self.me()?;
        if aproc != proc + 1 {
            return Ok(false);
        }
        let owner = owner.or(acquisition.owner);
        let mut wakes = Wakes::default();
        let result = (|| {
            let t = self.table(&mut wakes)?;
            Ok(table::is_current_locked(&t, &g, proc)?
                && (g.mode == Mode::Shared
                    || !self.region.reentrant()
                    || table::held_by(&t, g.entry, owner)?))
        })();
        wakes.run(&self.region);
        result
    }

    fn force_unlock(&self, key: LockKey<'_>) -> Result<bool> {
        self.me()?;
        let mut wakes = Wakes::default();
        let result = (|| {
            let t = self.table(&mut wakes)?;
            match self.find_locked(&t, key.space, key.bytes)? {
                Some(entry) => table::force_locked(&t, entry, &mut wakes),
                None => Ok(false),
            }
        })();
        wakes.run(&self.region);
        result
    }

    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>> {
        self.me()?;
        let mut wakes = Wakes::default();
        let result = (|| {
            let t = self.table(&mut wakes)?;
            match self.find_locked(&t, key.space, key.bytes)? {
                Some(entry) => table::info_locked(&t, entry, &mut wakes),
                None => Ok(None),
            }
        })();
        wakes.run(&self.region);
        result
    }

    fn is_reentrant(&self) -> bool {
        self.region.reentrant()
    }
}

/// Opens `shm:NAME` for [`crate::open_with`].
pub(crate) fn open_scope(name: &str, options: &OpenOptions) -> Result<Arc<dyn KeyedLock>> {
    Ok(ShmLock::open(name, options)?)
}

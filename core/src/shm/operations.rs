//! [`KeyedLock`] for [`ShmLock`]: each operation of the trait on a region, from the fast path
//! of the handle ([`super::lock`]) and, when that is not enough, a wait ([`super::wait`]) or the
//! lock rules under the table mutex ([`super::table`]).

use std::sync::Arc;
use std::time::Duration;

use super::lock::{ShmLock, instant_of};
use super::lockword;
use super::sys;
use super::table::{self, Req, TableWakes};
use super::wait::{self, AcquireOne};
use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner};
use crate::error::{Error, Result};
use crate::many;
use crate::report::KeyReport;
use crate::scope::{AcquireFuture, AcquireManyFuture, KeySpace, KeyedLock, LockKey, OpenOptions};
use crate::stats::ScopeStats;

/// Where a lock of a region sits in the canonical order: a pool's is its key (0, space, bytes);
/// a striped region's is its stripe (stripe, `Keys`, empty).
type Place = (u32, KeySpace, Vec<u8>);

/// One lock of a multi-key acquire on a region, taken by the key (space, bytes) that named it
/// first.
type Step = many::Step<Place, (KeySpace, Vec<u8>)>;

/// The plan of a multi-key acquire: a pool's lock is its key; a striped region's lock is its
/// stripe (two keys on one stripe are one lock, taken by the first key).
fn plan(lock: &ShmLock, keys: &[(LockKey<'_>, Mode)]) -> Vec<Step> {
    many::plan(keys.iter().map(|(k, m)| {
        let place = if lock.region.is_pool() {
            (0, k.space, k.bytes.to_vec())
        } else {
            (lock.stripe_of(k.space, k.bytes), KeySpace::Keys, Vec::new())
        };
        (place, (k.space, k.bytes.to_vec()), *m)
    }))
}

impl ShmLock {
    /// The rest of [`KeyedLock::acquire`], out of line so that the fast path keeps a small
    /// frame: checks the request, then tries the fast path with the request's own fields and
    /// else waits.
    #[inline(never)]
    fn acquire_slow(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        self.check_request(key.space, opts)?;
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
}

impl KeyedLock for ShmLock {
    fn as_host(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    #[inline]
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        // The fast path, first and inline (an owner is only recorded where the region is not
        // reentrant: it decides nothing there).
        if opts.lease.is_none()
            && opts.weight == 1
            && (opts.owner.is_none() || !self.region.reentrant())
            && let Some(mut acq) = self.try_acquire_fast(key, opts.mode)
        {
            acq.owner = opts.owner;
            return Ok(acq);
        }
        self.acquire_slow(key, opts)
    }

    /// A plain exclusive acquire of a free entry with one compare-and-swap (of a lock region:
    /// a semaphore's acquires all take the table mutex, and a shared one may have to join
    /// shared holders, which is the table mutex's work too).
    #[inline(always)]
    fn try_acquire_fast(&self, key: LockKey<'_>, mode: Mode) -> Option<Acquisition> {
        if mode != Mode::Exclusive || self.permits != 0 || sys::fork_generation() != self.fork_gen {
            return None;
        }
        let req = Req {
            mode: Mode::Exclusive,
            lease: 0,
            owner: 0,
            proc: self.proc,
            units: 0,
        };
        let g = self.try_fast(key.space, key.bytes, &req)?;
        Some(self.acquisition(g, &LockOptions::new()))
    }

    fn acquire_async(self: Arc<Self>, key: LockKey<'_>, opts: &LockOptions) -> AcquireFuture {
        if let Err(e) = self.check_request(key.space, opts) {
            return Box::pin(std::future::ready(Err(e)));
        }
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
        for (k, _) in keys {
            self.check_request(k.space, opts)?;
        }
        let wait = many::one_deadline(opts.wait);
        let steps = plan(self, keys);
        let take = |step: &Step| {
            let (space, bytes) = &step.what;
            let o = LockOptions {
                mode: step.mode,
                wait,
                ..*opts
            };
            let acq = self.acquire(
                LockKey {
                    space: *space,
                    bytes,
                },
                &o,
            )?;
            Ok((step.first, acq))
        };
        let give_back = |(_, acq)| {
            let _ = self.release_as(acq, None);
        };
        let got = many::take_all(&steps, take, give_back).map_err(|f| f.error)?;
        Ok(many::in_key_order(got))
    }

    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> AcquireManyFuture {
        if let Some(e) = keys
            .iter()
            .find_map(|(k, _)| self.check_request(k.space, opts).err())
        {
            return Box::pin(std::future::ready(Err(e)));
        }
        let wait = many::one_deadline(opts.wait);
        let steps = plan(&self, keys);
        let opts = *opts;
        Box::pin(async move {
            let lock = &self;
            // Dropped mid-acquire, or on a failure, it gives back what was taken.
            let mut held = many::Taking::new(steps.len(), |(_, acq)| {
                let _ = lock.release_as(acq, None);
            });
            for step in &steps {
                let (space, bytes) = &step.what;
                let o = LockOptions {
                    mode: step.mode,
                    wait,
                    ..opts
                };
                let key = LockKey {
                    space: *space,
                    bytes,
                };
                let acq = Arc::clone(lock).acquire_async(key, &o).await?;
                held.push((step.first, acq));
            }
            Ok(many::in_key_order(held.finish()))
        })
    }

    #[inline]
    fn release(&self, acquisition: Acquisition) -> Result<()> {
        if self.try_release_cas(&acquisition) {
            return Ok(());
        }
        self.release_as(acquisition, None)
    }

    /// A plain exclusive hold of this open, nothing queued: the lock word's compare-and-swap.
    #[inline(always)]
    fn try_release_cas(&self, acquisition: &Acquisition) -> bool {
        acquisition.mode == Mode::Exclusive
            && (acquisition.at >> 32) as u32 == self.at_hi
            && sys::fork_generation() == self.fork_gen
            && self
                .region
                .entry_if(acquisition.at as u32)
                .is_some_and(|e| lockword::fast_release(e, acquisition.fence, self.proc))
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
        let mut wakes = TableWakes::default();
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
        let mut wakes = TableWakes::default();
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
        let mut wakes = TableWakes::default();
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
        self.check_key(key)?;
        self.me()?;
        let mut wakes = TableWakes::default();
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

    fn steal(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        if self.permits != 0 {
            return Err(Error::InvalidArgument(
                "a semaphore's units cannot be stolen; use force_release",
            ));
        }
        if opts.mode != Mode::Exclusive {
            return Err(Error::InvalidArgument(
                "only an exclusive request may steal",
            ));
        }
        let proc = self.me()?;
        let req = self.req(opts, proc);
        let mut wakes = TableWakes::default();
        let result = (|| {
            let t = self.table(&mut wakes)?;
            let entry = self.entry_locked(&t, key.space, key.bytes)?;
            table::steal_locked(&t, entry, &req)
        })();
        wakes.run(&self.region);
        Ok(self.acquisition(result?, opts))
    }

    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>> {
        self.check_key(key)?;
        self.me()?;
        let mut wakes = TableWakes::default();
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

    fn permits(&self) -> Option<u32> {
        ShmLock::permits(self)
    }

    fn stripes(&self) -> Option<usize> {
        self.is_striped().then(|| self.capacity())
    }

    fn stripe_of(&self, key: LockKey<'_>) -> Option<usize> {
        self.is_striped()
            .then(|| ShmLock::stripe_of(self, key.space, key.bytes) as usize)
    }

    fn stats(&self) -> Result<ScopeStats> {
        let proc = self.me()?;
        let mut wakes = TableWakes::default();
        let result = (|| {
            let t = self.table(&mut wakes)?;
            super::stats::stats_locked(&t, proc, &mut wakes)
        })();
        wakes.run(&self.region);
        result
    }

    fn list(&self) -> Result<Vec<KeyReport>> {
        self.me()?;
        let mut wakes = TableWakes::default();
        let result = (|| {
            let t = self.table(&mut wakes)?;
            super::list::list_locked(&t, &mut wakes)
        })();
        wakes.run(&self.region);
        result
    }
}

/// Opens `shm:NAME` for [`crate::open_with`].
pub(crate) fn open_scope(name: &str, options: &OpenOptions) -> Result<Arc<dyn KeyedLock>> {
    Ok(ShmLock::open(name, options)?)
}

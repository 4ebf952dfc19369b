//! The in-process scope (`local:`): [`KeyedLock`] for [`KeyPool`] and [`StripedLock`], and the
//! lock object that [`open`](crate::open) makes for a `local:` name.
//!
//! A layer above the two lock types and the trait ([`scope`](crate::scope)), beside the shared
//! memory and Redis scopes: what each method of the trait means is the trait's, and this file
//! only maps it onto the types' own methods (a pool's two key spaces, a striped lock's stripes).

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crate::acquisition::{Acquisition, LockInfo, LockOptions, Mode, Owner};
use crate::error::{Error, Result};
use crate::many;
use crate::pool::{KeyBuf, KeyBytes, KeyPool, PoolStats};
use crate::scope::{AcquireFuture, AcquireManyFuture, KeySpace, KeyedLock, LockKey, OpenOptions};
use crate::stats::ScopeStats;
use crate::striped::StripedLock;

/// An in-process lock object for `options`.
pub(crate) fn open(options: &OpenOptions) -> Result<Arc<dyn KeyedLock>> {
    if options.capacity.is_some() || options.mode.is_some() {
        return Err(Error::InvalidArgument(
            "capacity and mode apply to shared-memory scopes only",
        ));
    }
    if let Some(permits) = options.permits {
        if options.stripes.is_some() || options.seed.is_some() || options.reentrant || options.fifo
        {
            return Err(Error::InvalidArgument(
                "a semaphore has no stripes, seed or owners, and is always FIFO",
            ));
        }
        return Ok(Arc::new(
            crate::KeyedSemaphore::builder(permits).build::<KeyBuf>()?,
        ));
    }
    Ok(match options.stripes {
        Some(stripes) => {
            let mut builder = StripedLock::builder()
                .stripes(stripes)
                .reentrant(options.reentrant)
                .fifo(options.fifo);
            if let Some(seed) = options.seed {
                builder = builder.seed(seed);
            }
            Arc::new(builder.build()?)
        }
        None if options.seed.is_some() => {
            return Err(Error::InvalidArgument(
                "a seed applies to striped lock objects only",
            ));
        }
        None => Arc::new(
            KeyPool::builder()
                .reentrant(options.reentrant)
                .fifo(options.fifo)
                .build::<KeyBuf>(),
        ),
    })
}
/// Bit of an in-process pool acquisition's `at` that says it belongs to the names pool.
const NAMES: u64 = 1 << 63;

fn tagged(mut acq: Acquisition, space: KeySpace) -> Acquisition {
    if space == KeySpace::Names {
        acq.at |= NAMES;
    }
    acq
}

fn untagged(mut acq: Acquisition) -> (Acquisition, KeySpace) {
    if acq.at & NAMES != 0 {
        acq.at &= !NAMES;
        (acq, KeySpace::Names)
    } else {
        (acq, KeySpace::Keys)
    }
}

/// The key types of the pools that are lock objects of the trait ([`KeyedLock`]): byte
/// strings, owned as a `Vec<u8>` (a [`KeyPool`]'s default) or as a [`KeyBuf`] (what
/// [`open`](crate::open) makes for `local:`), each looked up by its borrowed form.
pub trait ByteStringKey:
    sealed::Sealed + Hash + Eq + Borrow<Self::Borrowed> + Send + Sync + 'static
{
    /// The borrowed form the pool is locked with: `[u8]` or [`KeyBytes`].
    type Borrowed: ?Sized + Hash + Eq + ToOwned<Owned = Self> + Sync;

    /// `bytes` as the borrowed form.
    fn borrowed(bytes: &[u8]) -> &Self::Borrowed;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for Vec<u8> {}
    impl Sealed for super::KeyBuf {}
}

impl ByteStringKey for Vec<u8> {
    type Borrowed = [u8];

    #[inline]
    fn borrowed(bytes: &[u8]) -> &[u8] {
        bytes
    }
}

impl ByteStringKey for KeyBuf {
    type Borrowed = KeyBytes;

    #[inline]
    fn borrowed(bytes: &[u8]) -> &KeyBytes {
        KeyBytes::new(bytes)
    }
}

impl<K: ByteStringKey, S: std::hash::BuildHasher> KeyPool<K, S> {
    /// Where `key`'s slot is, as an acquisition's `at`, if it has one.
    fn at_of(&self, key: LockKey<'_>) -> Option<u64> {
        match key.space {
            KeySpace::Keys => self
                .table
                .slot_of(K::borrowed(key.bytes))
                .map(|at| at.to_u64()),
            KeySpace::Names => self
                .names_if()?
                .table
                .slot_of(key.bytes)
                .map(|at| at.to_u64() | NAMES),
        }
    }
}

impl<K, S> KeyedLock for KeyPool<K, S>
where
    K: ByteStringKey,
    S: std::hash::BuildHasher + Send + Sync + 'static,
{
    #[inline]
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        // The uncontended plain case straight from the lock word: what the front ends pay on
        // every call.
        if key.space == KeySpace::Keys
            && opts.lease.is_none()
            && opts.weight == 1
            && (opts.owner.is_none() || !self.is_reentrant())
            && let Some(acq) = self.try_acquire_fast_inlined(K::borrowed(key.bytes), opts.mode)
        {
            return Ok(acq);
        }
        let acq = match key.space {
            KeySpace::Keys => self
                .lock_with(K::borrowed(key.bytes), *opts)?
                .into_acquisition(),
            KeySpace::Names => self.names().lock_with(key.bytes, *opts)?.into_acquisition(),
        };
        Ok(tagged(acq, key.space))
    }

    fn try_acquire_fast(&self, key: LockKey<'_>, mode: Mode) -> Option<Acquisition> {
        // Names live in a pool of their own, which has no fast path here.
        if key.space != KeySpace::Keys {
            return None;
        }
        // The inherent method (the lock object's own fast path), not this one.
        KeyPool::try_acquire_fast(self, K::borrowed(key.bytes), mode)
    }

    fn try_release_cas(&self, acquisition: &Acquisition) -> bool {
        // The inherent method; a name's record (tagged) names no slot of this table, so it is
        // `false` here and released on the full path.
        KeyPool::try_release_cas(self, acquisition)
    }

    fn acquire_async(self: Arc<Self>, key: LockKey<'_>, opts: &LockOptions) -> AcquireFuture {
        let space = key.space;
        match space {
            KeySpace::Keys => {
                let fut = self.lock_with_async_owned(K::borrowed(key.bytes), *opts);
                Box::pin(async move { Ok(fut.await?.into_acquisition()) })
            }
            KeySpace::Names => {
                let fut = self.names().lock_with_async_owned(key.bytes, *opts);
                Box::pin(async move { Ok(tagged(fut.await?.into_acquisition(), space)) })
            }
        }
    }

    fn acquire_many(
        &self,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> Result<Vec<Acquisition>> {
        // Plain keys first, then names: one order for every caller, so no deadlock.
        let opts = LockOptions {
            wait: many::one_deadline(opts.wait),
            ..*opts
        };
        let plain = keys
            .iter()
            .filter(|(k, _)| k.space == KeySpace::Keys)
            .map(|(k, m)| (K::borrowed(k.bytes), *m));
        let mut out = self.lock_many_with(plain, opts)?.into_acquisitions();
        if keys.iter().any(|(k, _)| k.space == KeySpace::Names) {
            let names = keys
                .iter()
                .filter(|(k, _)| k.space == KeySpace::Names)
                .map(|(k, m)| (k.bytes, *m));
            match self.names().lock_many_with(names, opts) {
                Ok(g) => out.extend(
                    g.into_acquisitions()
                        .into_iter()
                        .map(|a| tagged(a, KeySpace::Names)),
                ),
                Err(e) => {
                    for acq in out {
                        let _ = self.release_as(acq, None);
                    }
                    return Err(e);
                }
            }
        }
        let ats: Vec<Option<u64>> = keys.iter().map(|(k, _)| self.at_of(*k)).collect();
        Ok(many::in_key_order_of_places(&ats, out))
    }

    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> AcquireManyFuture {
        let opts = LockOptions {
            wait: many::one_deadline(opts.wait),
            ..*opts
        };
        let plain: Vec<(&K::Borrowed, Mode)> = keys
            .iter()
            .filter(|(k, _)| k.space == KeySpace::Keys)
            .map(|(k, m)| (K::borrowed(k.bytes), *m))
            .collect();
        let named: Vec<(&[u8], Mode)> = keys
            .iter()
            .filter(|(k, _)| k.space == KeySpace::Names)
            .map(|(k, m)| (k.bytes, *m))
            .collect();
        let first = self.lock_many_with_async_owned(plain, opts);
        let second = (!named.is_empty()).then(|| {
            let names = Arc::clone(self.names());
            // Reserved now, awaited after the plain keys (the canonical order).
            names.lock_many_with_async_owned(named, opts)
        });
        // Every key's slot is reserved now, so where each one is stays put.
        let ats: Vec<Option<u64>> = keys.iter().map(|(k, _)| self.at_of(*k)).collect();
        Box::pin(async move {
            let mut out = first.await?.into_acquisitions();
            if let Some(second) = second {
                match second.await {
                    Ok(g) => out.extend(
                        g.into_acquisitions()
                            .into_iter()
                            .map(|a| tagged(a, KeySpace::Names)),
                    ),
                    Err(e) => {
                        for acq in out {
                            let _ = self.release_as(acq, None);
                        }
                        return Err(e);
                    }
                }
            }
            Ok(many::in_key_order_of_places(&ats, out))
        })
    }

    #[inline]
    fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
        if owner.is_none() && self.release_fast(&acquisition) {
            return Ok(());
        }
        let owner = owner.or(acquisition.owner);
        match untagged(acquisition) {
            (acq, KeySpace::Keys) => KeyPool::release_as(self, acq, owner),
            (acq, KeySpace::Names) => match self.names_if() {
                Some(names) => names.release_as(acq, owner),
                None => Err(Error::InvalidArgument(
                    "the acquisition belongs to another lock",
                )),
            },
        }
    }

    fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        if acquisition.at & NAMES == 0 {
            return KeyPool::extend(self, acquisition, lease);
        }
        let names = self.names_if().ok_or(Error::InvalidArgument(
            "the acquisition belongs to another lock",
        ))?;
        acquisition.at &= !NAMES;
        let result = names.extend(acquisition, lease);
        acquisition.at |= NAMES;
        result
    }

    fn is_current_as(&self, acquisition: &Acquisition, owner: Option<Owner>) -> Result<bool> {
        let owner = owner.or(acquisition.owner);
        if acquisition.at & NAMES == 0 {
            return Ok(KeyPool::is_current_as(self, acquisition, owner));
        }
        let Some(names) = self.names_if() else {
            return Ok(false);
        };
        let probe = Acquisition {
            at: acquisition.at & !NAMES,
            ..acquisition.duplicate()
        };
        Ok(names.is_current_as(&probe, owner))
    }

    fn force_unlock(&self, key: LockKey<'_>) -> Result<bool> {
        Ok(match key.space {
            KeySpace::Keys => KeyPool::force_unlock(self, K::borrowed(key.bytes)),
            KeySpace::Names => self.names_if().is_some_and(|n| n.force_unlock(key.bytes)),
        })
    }

    fn steal(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        Ok(match key.space {
            KeySpace::Keys => self
                .steal_with(K::borrowed(key.bytes), *opts)?
                .into_acquisition(),
            KeySpace::Names => tagged(
                self.names()
                    .steal_with(key.bytes, *opts)?
                    .into_acquisition(),
                KeySpace::Names,
            ),
        })
    }

    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>> {
        Ok(match key.space {
            KeySpace::Keys => KeyPool::info(self, K::borrowed(key.bytes)),
            KeySpace::Names => self.names_if().and_then(|n| n.info(key.bytes)),
        })
    }

    fn is_reentrant(&self) -> bool {
        KeyPool::is_reentrant(self)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn stats(&self) -> Result<ScopeStats> {
        let mut s = KeyPool::stats(self);
        if let Some(names) = self.names_if() {
            s = sum(s, names.stats());
        }
        Ok(s.scope())
    }
}

/// The counters of a pool's two key spaces together.
fn sum(a: PoolStats, b: PoolStats) -> PoolStats {
    PoolStats {
        held: a.held + b.held,
        waiting: a.waiting + b.waiting,
        queued: a.queued + b.queued,
        shared_holds: a.shared_holds + b.shared_holds,
        entries_in_use: a.entries_in_use + b.entries_in_use,
        entries_allocated: a.entries_allocated + b.entries_allocated,
        peak_in_use: a.peak_in_use + b.peak_in_use,
        contended: a.contended + b.contended,
    }
}

/// The plan of a multi-key acquire on a striped lock: its stripes in the canonical order (each
/// once, in the strongest mode asked of it), and for each the position of the first key on it.
fn stripe_plan(
    locks: &StripedLock,
    keys: &[(LockKey<'_>, Mode)],
) -> (Vec<(usize, Mode)>, Vec<usize>) {
    many::plan(keys.iter().map(|(k, m)| (locks.stripe_of_key(*k), (), *m)))
        .into_iter()
        .map(|step| ((step.lock, step.mode), step.first))
        .unzip()
}

impl KeyedLock for StripedLock {
    #[inline]
    fn acquire(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        let stripe = self.stripe_of_key(key);
        if opts.lease.is_none()
            && opts.weight == 1
            && (opts.owner.is_none() || !self.is_reentrant())
            && let Some(acq) = self.acquire_stripe_fast(stripe, opts.mode)
        {
            return Ok(acq);
        }
        Ok(self.lock_stripe_with(stripe, *opts)?.into_acquisition())
    }

    fn try_acquire_fast(&self, key: LockKey<'_>, mode: Mode) -> Option<Acquisition> {
        self.acquire_stripe_fast(self.stripe_of_key(key), mode)
    }

    fn try_release_cas(&self, acquisition: &Acquisition) -> bool {
        StripedLock::try_release_cas(self, acquisition)
    }

    fn acquire_async(self: Arc<Self>, key: LockKey<'_>, opts: &LockOptions) -> AcquireFuture {
        let fut = self.lock_stripe_with_async_owned(self.stripe_of_key(key), *opts);
        Box::pin(async move { Ok(fut.await?.into_acquisition()) })
    }

    fn acquire_many(
        &self,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> Result<Vec<Acquisition>> {
        let (stripes, firsts) = stripe_plan(self, keys);
        let acqs = self.lock_stripes(stripes, *opts)?.into_acquisitions();
        Ok(many::in_key_order(firsts.into_iter().zip(acqs).collect()))
    }

    fn acquire_many_async(
        self: Arc<Self>,
        keys: &[(LockKey<'_>, Mode)],
        opts: &LockOptions,
    ) -> AcquireManyFuture {
        let (stripes, firsts) = stripe_plan(&self, keys);
        let fut = self.lock_stripes_async_owned(stripes, *opts);
        Box::pin(async move {
            let acqs = fut.await?.into_acquisitions();
            Ok(many::in_key_order(firsts.into_iter().zip(acqs).collect()))
        })
    }

    #[inline]
    fn release_as(&self, acquisition: Acquisition, owner: Option<Owner>) -> Result<()> {
        if owner.is_none() && self.release_fast(&acquisition) {
            return Ok(());
        }
        let owner = owner.or(acquisition.owner);
        StripedLock::release_as(self, acquisition, owner)
    }

    fn extend(&self, acquisition: &mut Acquisition, lease: Duration) -> Result<()> {
        StripedLock::extend(self, acquisition, lease)
    }

    fn is_current_as(&self, acquisition: &Acquisition, owner: Option<Owner>) -> Result<bool> {
        let owner = owner.or(acquisition.owner);
        Ok(StripedLock::is_current_as(self, acquisition, owner))
    }

    fn force_unlock(&self, key: LockKey<'_>) -> Result<bool> {
        Ok(self.force_unlock_stripe(self.stripe_of_key(key)))
    }

    fn steal(&self, key: LockKey<'_>, opts: &LockOptions) -> Result<Acquisition> {
        Ok(self
            .steal_stripe(self.stripe_of_key(key), *opts)?
            .into_acquisition())
    }

    fn info(&self, key: LockKey<'_>) -> Result<Option<LockInfo>> {
        Ok(self.info_stripe(self.stripe_of_key(key)))
    }

    fn is_reentrant(&self) -> bool {
        StripedLock::is_reentrant(self)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn stats(&self) -> Result<ScopeStats> {
        // Stripe by stripe, each under its queue lock.
        let (mut held, mut shared, mut queued, mut in_use) = (0, 0, 0, 0);
        for stripe in 0..StripedLock::stripes(self) {
            let (h, s, q) = self.stripe_counts(stripe);
            held += usize::from(h);
            shared += s;
            queued += q;
            in_use += usize::from(h || q > 0);
        }
        Ok(ScopeStats {
            held: Some(held),
            waiting: Some(queued),
            shared_holds: Some(shared),
            held_here: held,
            waiting_here: queued,
            capacity: Some(StripedLock::stripes(self)),
            entries_in_use: Some(in_use),
            ..ScopeStats::default()
        })
    }

    fn stripes(&self) -> Option<usize> {
        Some(StripedLock::stripes(self))
    }

    fn stripe_of(&self, key: LockKey<'_>) -> Option<usize> {
        Some(self.stripe_of_key(key))
    }
}

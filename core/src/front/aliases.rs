//! The names the guards and futures had before the one front: a pool's and a striped lock's
//! were separate types, and are now [`LockGuard`], [`ManyGuard`] and the four futures for
//! both. Kept so that code written against them still builds.

use super::{AcquireFuture, LockFuture, LockGuard, ManyAcquireFuture, ManyGuard, ManyLockFuture};

/// A held key of a [`KeyPool`](crate::KeyPool): the front's [`LockGuard`], under the pool's name.
pub type PoolGuard<P> = LockGuard<P>;
/// Several held keys of a [`KeyPool`](crate::KeyPool): the front's [`ManyGuard`].
pub type PoolManyGuard<P> = ManyGuard<P>;
/// A [`KeyPool`](crate::KeyPool)'s future of one key: the front's [`LockFuture`].
pub type PoolLockFuture<P> = LockFuture<P>;
/// A [`KeyPool`](crate::KeyPool)'s future of one key with options: the front's [`AcquireFuture`].
pub type PoolAcquireFuture<P> = AcquireFuture<P>;
/// A [`KeyPool`](crate::KeyPool)'s future of several keys: the front's [`ManyLockFuture`].
pub type PoolManyLockFuture<P> = ManyLockFuture<P>;
/// A [`KeyPool`](crate::KeyPool)'s future of several keys with options: the front's [`ManyAcquireFuture`].
pub type PoolManyAcquireFuture<P> = ManyAcquireFuture<P>;

/// A held stripe of a [`StripedLock`](crate::StripedLock): the front's [`LockGuard`], under the stripes' name.
pub type StripeGuard<P> = LockGuard<P>;
/// Several held stripes of a [`StripedLock`](crate::StripedLock): the front's [`ManyGuard`].
pub type StripesGuard<P> = ManyGuard<P>;
/// A [`StripedLock`](crate::StripedLock)'s future of one stripe: the front's [`LockFuture`].
pub type StripeLockFuture<P> = LockFuture<P>;
/// A [`StripedLock`](crate::StripedLock)'s future of one stripe with options: the front's [`AcquireFuture`].
pub type StripeAcquireFuture<P> = AcquireFuture<P>;
/// A [`StripedLock`](crate::StripedLock)'s future of several stripes: the front's [`ManyLockFuture`].
pub type StripesLockFuture<P> = ManyLockFuture<P>;
/// A [`StripedLock`](crate::StripedLock)'s future of several stripes with options: the front's
/// [`ManyAcquireFuture`].
pub type StripesAcquireFuture<P> = ManyAcquireFuture<P>;

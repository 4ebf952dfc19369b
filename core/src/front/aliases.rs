//! The names the guards and futures had before the one front: a pool's and a striped lock's
//! were separate types, and are now [`LockGuard`], [`ManyGuard`] and the four futures for
//! both. Kept so that code written against them still builds.

use super::{AcquireFuture, LockFuture, LockGuard, ManyAcquireFuture, ManyGuard, ManyLockFuture};

/// The six old names of one primitive: `$lock` is its type, `$one` and `$many` what one guard
/// holds ("key", "stripe") and several ("keys", "stripes").
macro_rules! old_names {
    ($lock:literal, $one:literal, $many:literal;
     $guard:ident, $many_guard:ident, $fut:ident, $acq:ident, $many_fut:ident, $many_acq:ident) => {
        #[doc = concat!("A held ", $one, " of a [`", $lock, "`](crate::", $lock, "): the front's [`LockGuard`].")]
        pub type $guard<P> = LockGuard<P>;
        #[doc = concat!("Several held ", $many, " of a [`", $lock, "`](crate::", $lock, "): the front's [`ManyGuard`].")]
        pub type $many_guard<P> = ManyGuard<P>;
        #[doc = concat!("A [`", $lock, "`](crate::", $lock, ")'s future of one ", $one, ": the front's [`LockFuture`].")]
        pub type $fut<P> = LockFuture<P>;
        #[doc = concat!("A [`", $lock, "`](crate::", $lock, ")'s future of one ", $one, " with options: the front's [`AcquireFuture`].")]
        pub type $acq<P> = AcquireFuture<P>;
        #[doc = concat!("A [`", $lock, "`](crate::", $lock, ")'s future of several ", $many, ": the front's [`ManyLockFuture`].")]
        pub type $many_fut<P> = ManyLockFuture<P>;
        #[doc = concat!("A [`", $lock, "`](crate::", $lock, ")'s future of several ", $many, " with options: the front's [`ManyAcquireFuture`].")]
        pub type $many_acq<P> = ManyAcquireFuture<P>;
    };
}

old_names!("KeyPool", "key", "keys"; PoolGuard, PoolManyGuard, PoolLockFuture,
    PoolAcquireFuture, PoolManyLockFuture, PoolManyAcquireFuture);
old_names!("StripedLock", "stripe", "stripes"; StripeGuard, StripesGuard, StripeLockFuture,
    StripeAcquireFuture, StripesLockFuture, StripesAcquireFuture);

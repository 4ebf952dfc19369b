//! [`open`] and [`open_with`]: a lock object from a name, at the scope the name picks (see the
//! [`scope`](crate::scope) module). The top layer of the scopes: it calls each of them (the
//! in-process one, shared memory, Redis, PostgreSQL), and none of them calls it.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::local;
use crate::scope::{KeyedLock, OpenOptions};

/// Opens the lock object that `name` names (see the [`scope`](crate::scope) module), as a `KeyPool`.
pub fn open(name: &str) -> Result<Arc<dyn KeyedLock>> {
    open_with(name, &OpenOptions::default())
}

/// Opens the lock object that `name` names, with `options` (with metrics, in a
/// [`Metered`](crate::Metered) labelled with the name, its password left out).
pub fn open_with(name: &str, options: &OpenOptions) -> Result<Arc<dyn KeyedLock>> {
    let locks = open_scope(name, options)?;
    if options.metrics {
        let label = crate::redact_scope_name(name);
        return Ok(Arc::new(crate::metrics::Metered::new(locks, &label)));
    }
    Ok(locks)
}

/// The scope's own lock object that `name` names.
fn open_scope(name: &str, options: &OpenOptions) -> Result<Arc<dyn KeyedLock>> {
    let (scheme, rest) = match name.split_once(':') {
        Some((scheme, rest)) => (scheme, rest),
        None if name.is_empty() => ("local", ""),
        None => {
            return Err(Error::InvalidArgument(
                "a lock name starts with a scheme: local:, shm:NAME, redis://... or postgres://...",
            ));
        }
    };
    match scheme {
        "local" => {
            if !rest.is_empty() {
                return Err(Error::InvalidArgument(
                    "local: takes no name (in-process locks are not shared by name)",
                ));
            }
            local::open(options)
        }
        #[cfg(all(feature = "shm", target_os = "linux"))]
        "shm" => crate::shm::open_scope(rest, options),
        #[cfg(not(all(feature = "shm", target_os = "linux")))]
        "shm" => Err(Error::InvalidArgument(
            "this build of keylock has no shared-memory scope (cargo feature \"shm\", Linux)",
        )),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => crate::redis::open(name, options),
        #[cfg(not(feature = "redis"))]
        "redis" | "rediss" => Err(Error::InvalidArgument(
            "this build of keylock has no Redis scope (cargo feature \"redis\")",
        )),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => crate::postgres::open(name, options),
        #[cfg(not(feature = "postgres"))]
        "postgres" | "postgresql" => Err(Error::InvalidArgument(
            "this build of keylock has no PostgreSQL scope (cargo feature \"postgres\")",
        )),
        _ => Err(Error::InvalidArgument(
            "unknown lock scheme: use local:, shm:NAME, redis://... or postgres://...",
        )),
    }
}

/// Opens `scope` to look at it from outside: `shm:NAME` as its creator made it (a key pool or
/// a striped lock, any capacity, policy or permits), `redis://...` and `postgres://...` as
/// [`open`](crate::open) does. A missing region is [`Error::Unavailable`] (this never creates
/// one); a scope only one process can see (`local:`) is [`Error::InvalidArgument`].
pub fn inspect(scope: &str) -> Result<Arc<dyn KeyedLock>> {
    let scheme = scope.split_once(':').map_or(scope, |(scheme, _)| scheme);
    match scheme {
        "" | "local" => Err(Error::InvalidArgument(
            "local: lives in one process; only shm:, redis:// and postgres:// can be inspected from outside",
        )),
        #[cfg(all(feature = "shm", target_os = "linux"))]
        "shm" => Ok(crate::shm::ShmLock::open_existing(&scope[4..])?),
        // Everything else as open takes it, with its errors for unknown schemes and scopes
        // this build has not.
        _ => open(scope),
    }
}

/// Opens the keyed semaphore of `scope` to look at it from outside, as [`inspect`] opens its
/// locks: `shm:NAME` as its creator made it (a region of locks is [`Error::Incompatible`]);
/// `redis://...` and `postgres://...` with the permits recorded under the prefix by the
/// semaphore's first open (a prefix where no semaphore was opened is
/// [`Error::Incompatible`]). A prefix can hold locks and a semaphore side by side: [`inspect`]
/// shows the one, this the other.
pub fn inspect_semaphore(scope: &str) -> Result<Arc<dyn KeyedLock>> {
    let scheme = scope.split_once(':').map_or(scope, |(scheme, _)| scheme);
    match scheme {
        "redis" | "rediss" | "postgres" | "postgresql" => {
            let options = OpenOptions {
                recorded_permits: true,
                ..OpenOptions::new()
            };
            open_with(scope, &options)
        }
        _ => {
            let lock = inspect(scope)?;
            if lock.permits().is_none() {
                return Err(Error::Incompatible(
                    format!("{scope} holds locks, not a keyed semaphore").into(),
                ));
            }
            Ok(lock)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acquisition::LockOptions;
    use crate::scope::LockKey;

    #[test]
    fn open_with_seed_gives_the_same_stripes() {
        let options = OpenOptions {
            stripes: Some(64),
            seed: Some(7),
            ..OpenOptions::default()
        };
        let (a, b) = (
            open_with("local:", &options).unwrap(),
            open_with("", &options).unwrap(),
        );
        assert_eq!((a.stripes(), b.stripes()), (Some(64), Some(64)));
        for i in 0u64..100 {
            let bytes = i.to_be_bytes();
            let key = LockKey::new(&bytes);
            assert_eq!(a.stripe_of(key), b.stripe_of(key));
        }
        let pool_with_seed = OpenOptions {
            seed: Some(7),
            ..OpenOptions::default()
        };
        assert!(matches!(
            open_with("local:", &pool_with_seed),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn stats_and_stripes_say_what_kind_of_lock_it_is() {
        let pool = open("local:").unwrap();
        assert_eq!(
            (pool.stripes(), pool.stripe_of(LockKey::new(b"k"))),
            (None, None)
        );
        let acq = pool
            .acquire(LockKey::new(b"k"), &LockOptions::new())
            .unwrap();
        assert_eq!(pool.stats().unwrap().held, Some(1));
        pool.release(acq).unwrap();
        assert_eq!(pool.stats().unwrap().entries_in_use, Some(0));
        let striped = open_with(
            "local:",
            &OpenOptions {
                stripes: Some(4),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        let stats = striped.stats().unwrap();
        assert_eq!((stats.capacity, stats.held), (Some(4), Some(0)));
        assert!(striped.stripe_of(LockKey::new(b"k")).is_some_and(|s| s < 4));
    }
}

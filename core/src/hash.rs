//! Key hashing, seeded per instance at random or from a caller's seed: ahash for the pools'
//! indexes, foldhash for a striped lock's stripes.

use std::hash::{BuildHasher, Hash};

/// The default hasher of keylock's pools (a striped lock hashes with foldhash: see
/// `StripeHashBuilder`).
///
/// ```
/// use keylock_core::{DefaultHashBuilder, KeyPool};
/// // A pool with fixed hash seeds (for reproducible benchmarks, say).
/// let pool: KeyPool<u64> = KeyPool::with_hasher(DefaultHashBuilder::with_seeds(1, 2, 3, 4));
/// drop(pool.lock(&1));
/// ```
pub type DefaultHashBuilder = ahash::RandomState;

/// A hasher with a random per-instance seed.
pub(crate) fn random() -> DefaultHashBuilder {
    ahash::RandomState::new()
}

#[inline]
pub(crate) fn hash_of<K: Hash + ?Sized, S: BuildHasher>(hasher: &S, key: &K) -> u64 {
    hasher.hash_one(key)
}

/// The hasher of a striped lock's stripes: foldhash, about half of ahash's instructions on a
/// short key. A stripe number has only as many bits as the stripe count's logarithm, so whoever
/// picks keys finds one that shares a given key's stripe by trying about as many keys as there
/// are stripes, whatever the hash; resistance to hash flooding, which the pools' indexes keep
/// (ahash: a flooded index would probe long chains), buys a striped lock nothing.
pub(crate) type StripeHashBuilder = foldhash::fast::SeedableRandomState;

/// A stripe hasher with a random per-instance seed.
pub(crate) fn stripe_random() -> StripeHashBuilder {
    foldhash::fast::SeedableRandomState::random()
}

/// A stripe hasher that gives the same stripes for the same seed in every process running the
/// same build of keylock.
pub(crate) fn stripe_seeded(seed: u64) -> StripeHashBuilder {
    foldhash::fast::SeedableRandomState::with_seed(seed, foldhash::SharedSeed::global_fixed())
}

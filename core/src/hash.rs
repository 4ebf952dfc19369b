//! Key hashing: ahash, seeded per instance at random or from a caller's seed.

use std::hash::{BuildHasher, Hash};

/// The default hasher of keylock's maps and stripes.
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

/// A hasher that gives the same hashes for the same seed in every process running the same
/// build of keylock.
pub(crate) fn seeded(seed: u64) -> DefaultHashBuilder {
    // Four independent-looking words from one seed (splitmix64 steps).
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    ahash::RandomState::with_seeds(next(), next(), next(), next())
}

#[inline]
pub(crate) fn hash_of<K: Hash + ?Sized, S: BuildHasher>(hasher: &S, key: &K) -> u64 {
    hasher.hash_one(key)
}

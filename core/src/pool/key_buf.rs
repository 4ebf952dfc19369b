//! Byte-string keys kept inside the pool's slot: the key type of the pools that
//! [`open`](crate::open) makes for `local:`, which every front end (C, Python, Node) locks
//! through.
//!
//! A `KeyPool<Vec<u8>>` keeps each key in a heap block of its own, so the fast path's key
//! comparison, made right after the compare-and-swap on the slot's lock word, reads one more
//! cache line, wherever the allocator put it, and calls `memcmp`. A [`KeyBuf`] keeps keys of up
//! to [`KeyBuf::INLINE`] bytes (an integer key's 8, most names and ids) in the slot itself, beside
//! the lock word, and [`KeyBytes`] compares keys of up to 16 bytes with two word loads each
//! instead of a call. Longer keys are boxed, as a `Vec<u8>` would keep them.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// A byte-string key as a pool keeps it: up to [`KeyBuf::INLINE`] bytes in place (no
/// allocation), longer keys boxed. Borrowed as [`KeyBytes`], which is what a
/// `KeyPool<KeyBuf>` is locked with.
///
/// ```
/// use keylock_core::{KeyBuf, KeyBytes, KeyPool};
/// let pool: KeyPool<KeyBuf> = KeyPool::new();
/// let guard = pool.lock(KeyBytes::new(b"user:42"));
/// assert!(pool.is_locked(KeyBytes::new(b"user:42")));
/// drop(guard);
/// assert_eq!(KeyBuf::from(&b"user:42"[..]).as_bytes(), b"user:42");
/// ```
#[derive(Clone)]
pub struct KeyBuf(Repr);

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        bytes: [u8; KeyBuf::INLINE],
    },
    Boxed(Box<[u8]>),
}

impl KeyBuf {
    /// The longest key kept in place: the size of a `Vec<u8>` (three words) less the length
    /// and the variant's tag.
    pub const INLINE: usize = 22;

    /// The key's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Boxed(b) => b,
        }
    }
}

impl From<&[u8]> for KeyBuf {
    #[inline]
    fn from(key: &[u8]) -> Self {
        if key.len() <= Self::INLINE {
            let mut bytes = [0u8; Self::INLINE];
            bytes[..key.len()].copy_from_slice(key);
            // The length fits: at most INLINE (22).
            KeyBuf(Repr::Inline {
                len: key.len() as u8,
                bytes,
            })
        } else {
            KeyBuf(Repr::Boxed(key.into()))
        }
    }
}

impl Deref for KeyBuf {
    type Target = KeyBytes;

    #[inline]
    fn deref(&self) -> &KeyBytes {
        KeyBytes::new(self.as_bytes())
    }
}

impl Borrow<KeyBytes> for KeyBuf {
    #[inline]
    fn borrow(&self) -> &KeyBytes {
        self
    }
}

impl AsRef<[u8]> for KeyBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for KeyBuf {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for KeyBuf {}

/// As its bytes, the way [`KeyBytes`] hashes (so that a pool finds a `KeyBuf` by its borrowed
/// form).
impl Hash for KeyBuf {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl fmt::Debug for KeyBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A borrowed byte-string key: what a `KeyPool<KeyBuf>` is locked with
/// (`KeyBytes::new(b"...")`), the borrowed form of [`KeyBuf`] as `str` is of `String`.
#[repr(transparent)]
pub struct KeyBytes([u8]);

impl KeyBytes {
    /// The key `bytes`.
    #[inline]
    pub fn new(bytes: &[u8]) -> &KeyBytes {
        // SAFETY: `KeyBytes` is a transparent wrapper of `[u8]`: the same layout and metadata,
        // and the reference keeps the borrow's lifetime.
        unsafe { &*(std::ptr::from_ref::<[u8]>(bytes) as *const KeyBytes) }
    }

    /// The key's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl PartialEq for KeyBytes {
    #[inline(always)]
    fn eq(&self, other: &Self) -> bool {
        bytes_eq(&self.0, &other.0)
    }
}

impl Eq for KeyBytes {}

/// As a `[u8]` hashes.
impl Hash for KeyBytes {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl ToOwned for KeyBytes {
    type Owned = KeyBuf;

    #[inline]
    fn to_owned(&self) -> KeyBuf {
        KeyBuf::from(&self.0)
    }
}

impl fmt::Debug for KeyBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

/// Whether `a` and `b` are the same bytes: keys of up to 16 bytes are compared with two
/// (overlapping) loads of each, longer ones by the slices' own comparison (`memcmp`).
#[inline(always)]
fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n > 16 {
        return a == b;
    }
    if n >= 8 {
        word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8)
    } else if n >= 4 {
        word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4)
    } else if n > 0 {
        // 1 to 3 bytes: the first, the middle and the last cover every position.
        a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]
    } else {
        true
    }
}

/// `N` bytes of `s` from `at` as one number (`at + N <= s.len()`).
#[inline(always)]
fn word<const N: usize>(s: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w[..N].copy_from_slice(&s[at..at + N]);
    u64::from_ne_bytes(w)
}

#[cfg(all(test, not(keylock_loom)))]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of<T: Hash + ?Sized>(t: &T) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    #[test]
    fn keeps_every_length_and_hashes_as_its_bytes() {
        let data: Vec<u8> = (0..=255u8).rev().collect();
        for n in 0..64 {
            let key = &data[..n];
            let buf = KeyBuf::from(key);
            assert_eq!(buf.as_bytes(), key);
            assert_eq!(matches!(buf.0, Repr::Inline { .. }), n <= KeyBuf::INLINE);
            let borrowed: &KeyBytes = buf.borrow();
            assert_eq!(hash_of(borrowed), hash_of(KeyBytes::new(key)));
            assert_eq!(hash_of(&buf), hash_of(KeyBytes::new(key)));
            assert_eq!(hash_of(KeyBytes::new(key)), hash_of(key));
            assert_eq!(KeyBytes::new(key).to_owned(), buf);
        }
        assert_eq!(
            std::mem::size_of::<Option<KeyBuf>>(),
            std::mem::size_of::<Vec<u8>>()
        );
    }

    #[test]
    fn equal_exactly_when_the_bytes_are() {
        // For every length up to 20: a key equals a copy of itself, and differs from itself
        // with any one byte changed and from itself one byte longer.
        for n in 0..=20usize {
            let a: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            assert!(KeyBytes::new(&a) == KeyBytes::new(&a.clone()));
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(KeyBytes::new(&a) != KeyBytes::new(&b), "{n} bytes, at {at}");
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(KeyBytes::new(&a) != KeyBytes::new(&longer));
        }
        assert!(KeyBytes::new(b"") == KeyBytes::new(b""));
    }

    #[test]
    fn prints_as_a_byte_string() {
        assert_eq!(
            format!("{:?}", KeyBuf::from(&b"a\x00b"[..])),
            "b\"a\\x00b\""
        );
    }
}

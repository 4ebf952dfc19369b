//! Key encoding: how every front end turns a key into the bytes the locks compare.
//!
//! The locks compare keys as byte strings. So that a C, a Python and a Node program name the same
//! lock with the same key, every front end encodes keys by these rules, with these functions:
//!
//! | key | bytes | here |
//! |---|---|---|
//! | bytes (`&[u8]`, C buffers, Python `bytes`/`bytearray`/`memoryview`, Node `Uint8Array`) | themselves | |
//! | text | its UTF-8 encoding | [`encode_str`]; [`encode_utf16`] for UTF-16 code units |
//! | integer | 8 bytes: the value as an `i64`, two's complement, big-endian | [`encode_i64`], [`encode_int`] |
//!
//! Text must be valid Unicode. Text that arrives as UTF-16 code units (a JavaScript string, a C
//! `uint16_t` buffer) or as code points (a Python `str`) can hold a lone surrogate, a code unit
//! in U+D800..U+DFFF without its pair, which has no UTF-8 encoding: it is rejected with
//! [`KeyError::LoneSurrogate`], never replaced (replacing it with U+FFFD, as `TextEncoder` does,
//! would give two different strings the same lock). An integer outside the `i64` range is
//! rejected with [`KeyError::IntegerOutOfRange`]. Both become [`Error::InvalidArgument`] naming
//! the problem. Booleans, floats and other types are not keys: each binding rejects them with its
//! own `TypeError` (a boolean would otherwise share a key with 0 or 1).
//!
//! Web Locks names are not keys: any JavaScript string is a name, lone surrogates included, so
//! [`encode_name_utf16`] encodes names as WTF-8 (never failing, one-to-one), and they live in a
//! key space of their own ([`KeySpace::Names`](crate::KeySpace::Names)).
//!
//! Different values with the same bytes are the same key: the text `"a"` and the bytes `b"a"`
//! name one lock, and so do the integer 1 and the bytes `00 00 00 00 00 00 00 01`.
//! `core/tests/keys.json` lists keys with their bytes (or their rejection), and the Rust, C,
//! Python and Node test suites each check every entry.
//!
//! ```
//! use keylock_core::keys::{self, KeyError};
//!
//! assert_eq!(keys::encode_str("é"), b"\xc3\xa9");
//! assert_eq!(keys::encode_i64(-1), [0xff; 8]);
//! assert_eq!(keys::encode_utf16(&[0xd83d, 0xde00]).unwrap(), "😀".as_bytes());
//! assert_eq!(keys::encode_utf16(&[0x61, 0xd800]), Err(KeyError::LoneSurrogate));
//! assert_eq!(keys::encode_int(1u128 << 63), Err(KeyError::IntegerOutOfRange));
//! ```

use std::fmt;
use std::mem::MaybeUninit;

use crate::error::Error;

/// The length of every integer key, in bytes.
pub const INT_KEY_LEN: usize = 8;

/// The most UTF-8 bytes that `units` UTF-16 code units can encode to (3 per unit: a surrogate
/// pair is 2 units and 4 bytes). A buffer this long is always enough for [`encode_utf16_into`].
#[inline]
pub const fn utf16_max_len(units: usize) -> usize {
    units.saturating_mul(3)
}

/// Why a value is not a key, or could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyError {
    /// Text with a lone surrogate: a UTF-16 code unit (or code point) in U+D800..U+DFFF that is
    /// not part of a high-low pair.
    LoneSurrogate,
    /// An integer outside `-2^63 ..= 2^63 - 1`.
    IntegerOutOfRange,
    /// The output buffer of [`encode_utf16_into`] is shorter than the key, which needs `needed`
    /// bytes.
    BufferTooSmall {
        /// The key's length in bytes.
        needed: usize,
    },
}

impl KeyError {
    /// What is wrong, as every front end words it.
    pub const fn message(self) -> &'static str {
        match self {
            KeyError::LoneSurrogate => {
                "a text key must be valid Unicode: it has a lone surrogate (a code unit in \
                 U+D800..U+DFFF without its pair)"
            }
            KeyError::IntegerOutOfRange => {
                "an integer key must fit in a signed 64-bit integer (-2^63 <= key <= 2^63 - 1)"
            }
            KeyError::BufferTooSmall { .. } => "the output buffer is too small for the key",
        }
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::BufferTooSmall { needed } => {
                write!(f, "{} (it needs {needed} bytes)", self.message())
            }
            _ => f.write_str(self.message()),
        }
    }
}

impl std::error::Error for KeyError {}

impl From<KeyError> for Error {
    /// [`Error::InvalidArgument`], naming the problem.
    #[inline]
    fn from(e: KeyError) -> Self {
        Error::InvalidArgument(e.message())
    }
}

/// The bytes of a text key: its UTF-8 encoding, which a `&str` already is.
#[inline]
pub const fn encode_str(text: &str) -> &[u8] {
    text.as_bytes()
}

/// The bytes of an integer key: 8 bytes, two's complement, big-endian.
#[inline]
pub const fn encode_i64(value: i64) -> [u8; INT_KEY_LEN] {
    value.to_be_bytes()
}

/// The bytes of an integer key of any integer type: [`KeyError::IntegerOutOfRange`] unless it
/// fits in an `i64`.
#[inline]
pub fn encode_int<T: TryInto<i64>>(value: T) -> Result<[u8; INT_KEY_LEN], KeyError> {
    value
        .try_into()
        .map(encode_i64)
        .map_err(|_| KeyError::IntegerOutOfRange)
}

/// Whether `unit` is a high (leading) surrogate.
#[inline]
const fn is_high(unit: u16) -> bool {
    matches!(unit, 0xD800..=0xDBFF)
}

/// Whether `unit` is a low (trailing) surrogate.
#[inline]
const fn is_low(unit: u16) -> bool {
    matches!(unit, 0xDC00..=0xDFFF)
}

/// The length in bytes of the key that the text `units` (UTF-16 code units) encodes to, or
/// [`KeyError::LoneSurrogate`].
pub fn utf16_len(units: &[u16]) -> Result<usize, KeyError> {
    let mut len = 0;
    let mut i = 0;
    while i < units.len() {
        let u = units[i];
        len += match u {
            0..=0x7F => 1,
            0x80..=0x7FF => 2,
            _ if is_high(u) => {
                if !units.get(i + 1).is_some_and(|&next| is_low(next)) {
                    return Err(KeyError::LoneSurrogate);
                }
                i += 1;
                4
            }
            _ if is_low(u) => return Err(KeyError::LoneSurrogate),
            _ => 3,
        };
        i += 1;
    }
    Ok(len)
}

/// Encodes the text `units` (UTF-16 code units) into the start of `out` and returns the key's
/// length in bytes. Allocates nothing: a buffer of [`utf16_max_len`]`(units.len())` bytes is
/// always enough.
///
/// Errors: [`KeyError::LoneSurrogate`]; [`KeyError::BufferTooSmall`] (with the length the key
/// needs) when `out` is shorter than the key. On an error, what was written to `out` is
/// unspecified.
pub fn encode_utf16_into(units: &[u16], out: &mut [u8]) -> Result<usize, KeyError> {
    // SAFETY: `[u8]` and `[MaybeUninit<u8>]` have one layout, and `encode_utf16_uninit` only
    // ever writes initialized bytes, so `out` stays initialized.
    let out = unsafe { &mut *(std::ptr::from_mut(out) as *mut [MaybeUninit<u8>]) };
    encode_utf16_uninit(units, out)
}

/// [`encode_utf16_into`] into a buffer that need not be initialized: on `Ok(n)`, the first `n`
/// bytes of `out` are initialized (and are the key). A caller that encodes onto the stack (the
/// Node binding) then need not zero its buffer first.
///
/// ```
/// use std::mem::MaybeUninit;
/// use keylock_core::keys;
/// let mut buf = [MaybeUninit::<u8>::uninit(); 16];
/// let n = keys::encode_utf16_uninit(&[0x6b, 0xe9], &mut buf).unwrap();
/// // SAFETY: the first `n` bytes were written.
/// let key = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
/// assert_eq!(key, "k\u{e9}".as_bytes());
/// ```
pub fn encode_utf16_uninit(units: &[u16], out: &mut [MaybeUninit<u8>]) -> Result<usize, KeyError> {
    if out.len() < utf16_max_len(units.len()) {
        // Maybe too short: measure first (which also finds a lone surrogate).
        let needed = utf16_len(units)?;
        if out.len() < needed {
            return Err(KeyError::BufferTooSmall { needed });
        }
    }
    // `out` has room for the whole key from here on (at least a byte per unit). ASCII first,
    // the common case for keys: eight units at a time, which the compiler turns into a few
    // vector instructions, then one at a time.
    let mut n = 0;
    for (src, dst) in units.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
        if src.iter().fold(0, |any, &u| any | u) >= 0x80 {
            break;
        }
        for (o, &u) in dst.iter_mut().zip(src) {
            o.write(u as u8);
        }
        n += 8;
    }
    for (o, &u) in out[n..].iter_mut().zip(&units[n..]) {
        if u >= 0x80 {
            break;
        }
        o.write(u as u8);
        n += 1;
    }
    let mut i = n;
    while i < units.len() {
        let u = units[i];
        i += 1;
        if u < 0x80 {
            out[n].write(u as u8);
            n += 1;
        } else if u < 0x800 {
            if let [a, b] = &mut out[n..n + 2] {
                a.write(0xC0 | (u >> 6) as u8);
                b.write(0x80 | (u & 0x3F) as u8);
            }
            n += 2;
        } else if !(0xD800..=0xDFFF).contains(&u) {
            if let [a, b, c] = &mut out[n..n + 3] {
                a.write(0xE0 | (u >> 12) as u8);
                b.write(0x80 | ((u >> 6) & 0x3F) as u8);
                c.write(0x80 | (u & 0x3F) as u8);
            }
            n += 3;
        } else {
            // A surrogate: it must be a high one followed by a low one.
            let low = match units.get(i) {
                Some(&low) if is_high(u) && is_low(low) => low,
                _ => return Err(KeyError::LoneSurrogate),
            };
            i += 1;
            let c = 0x10000 + ((u32::from(u) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
            if let [a, b, d, e] = &mut out[n..n + 4] {
                a.write(0xF0 | (c >> 18) as u8);
                b.write(0x80 | ((c >> 12) & 0x3F) as u8);
                d.write(0x80 | ((c >> 6) & 0x3F) as u8);
                e.write(0x80 | (c & 0x3F) as u8);
            }
            n += 4;
        }
    }
    Ok(n)
}

/// The bytes of the text key `units` (UTF-16 code units): its UTF-8 encoding, or
/// [`KeyError::LoneSurrogate`].
pub fn encode_utf16(units: &[u16]) -> Result<Vec<u8>, KeyError> {
    let mut out = vec![0; utf16_len(units)?];
    let n = encode_utf16_into(units, &mut out)?;
    debug_assert_eq!(n, out.len());
    Ok(out)
}

/// The bytes of a Web Locks name given as UTF-16 code units: its WTF-8 encoding, which
/// never fails. Valid text encodes as its UTF-8; a lone surrogate (which UTF-8 cannot encode)
/// becomes the three bytes UTF-8's scheme gives its code point. The encoding is one-to-one, so
/// two different strings are two different names, as the Web Locks spec compares them (code
/// unit by code unit). Names live in [`KeySpace::Names`](crate::KeySpace::Names), so the bytes
/// of a name never meet the bytes of a plain key, which must be valid Unicode.
///
/// ```
/// use keylock_core::keys;
/// assert_eq!(keys::encode_name_utf16(&[0x61, 0xd83d, 0xde00]), "a😀".as_bytes());
/// assert_eq!(keys::encode_name_utf16(&[0xd800]), [0xed, 0xa0, 0x80]);
/// assert_ne!(keys::encode_name_utf16(&[0xd800]), keys::encode_name_utf16(&[0xfffd]));
/// ```
pub fn encode_name_utf16(units: &[u16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(units.len());
    // The leading ASCII units (a whole name, as a rule) are copied as they are, in one go.
    let ascii = units.iter().position(|&u| u >= 0x80).unwrap_or(units.len());
    out.extend(units[..ascii].iter().map(|&u| u as u8));
    let mut i = ascii;
    while i < units.len() {
        let u = units[i];
        let c = match units.get(i + 1) {
            Some(&low) if is_high(u) && is_low(low) => {
                i += 1;
                0x10000 + ((u32::from(u) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
            }
            // Everything else is one code point, lone surrogates included.
            _ => u32::from(u),
        };
        match c {
            0..=0x7F => out.push(c as u8),
            0x80..=0x7FF => out.extend([0xC0 | (c >> 6) as u8, 0x80 | (c & 0x3F) as u8]),
            0x800..=0xFFFF => out.extend([
                0xE0 | (c >> 12) as u8,
                0x80 | ((c >> 6) & 0x3F) as u8,
                0x80 | (c & 0x3F) as u8,
            ]),
            _ => out.extend([
                0xF0 | (c >> 18) as u8,
                0x80 | ((c >> 12) & 0x3F) as u8,
                0x80 | ((c >> 6) & 0x3F) as u8,
                0x80 | (c & 0x3F) as u8,
            ]),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WTF-8 back to UTF-16 code units (for the round-trip property).
    fn decode_wtf8(bytes: &[u8]) -> Vec<u16> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            let (len, init) = match b {
                0..=0x7F => (1, u32::from(b)),
                0xC0..=0xDF => (2, u32::from(b & 0x1F)),
                0xE0..=0xEF => (3, u32::from(b & 0x0F)),
                _ => (4, u32::from(b & 0x07)),
            };
            let c = bytes[i + 1..i + len]
                .iter()
                .fold(init, |c, &b| (c << 6) | u32::from(b & 0x3F));
            if c >= 0x10000 {
                let c = c - 0x10000;
                out.extend([0xD800 + (c >> 10) as u16, 0xDC00 + (c & 0x3FF) as u16]);
            } else {
                out.push(c as u16);
            }
            i += len;
        }
        out
    }

    fn units(s: &str) -> Vec<u16> {
        s.encode_utf16().collect()
    }

    #[test]
    fn text_is_utf8() {
        for s in [
            "",
            "a",
            "user:42",
            "é",
            "漢字",
            "😀",
            "a😀b",
            "\u{7ff}\u{800}\u{ffff}",
            "\0",
        ] {
            assert_eq!(encode_utf16(&units(s)).unwrap(), s.as_bytes(), "{s:?}");
            assert_eq!(utf16_len(&units(s)), Ok(s.len()));
            assert_eq!(encode_str(s), s.as_bytes());
        }
    }

    #[test]
    fn lone_surrogates_are_rejected_not_replaced() {
        for bad in [
            &[0xD800][..],
            &[0xDC00],
            &[0x61, 0xD83D],
            &[0xDE00, 0xD83D],
            &[0xD83D, 0xD83D, 0xDE00],
            &[0xD83D, 0x61, 0xDE00],
        ] {
            assert_eq!(encode_utf16(bad), Err(KeyError::LoneSurrogate), "{bad:x?}");
            assert_eq!(utf16_len(bad), Err(KeyError::LoneSurrogate));
            let mut out = [0; 32];
            assert_eq!(
                encode_utf16_into(bad, &mut out),
                Err(KeyError::LoneSurrogate)
            );
        }
        // U+FFFD itself is fine, and differs from every rejected string.
        assert_eq!(encode_utf16(&[0xFFFD]).unwrap(), "\u{fffd}".as_bytes());
        assert_eq!(
            Error::from(KeyError::LoneSurrogate),
            Error::InvalidArgument(KeyError::LoneSurrogate.message())
        );
    }

    #[test]
    fn integers_are_8_bytes_big_endian() {
        assert_eq!(encode_i64(0), [0; 8]);
        assert_eq!(encode_i64(1), [0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(encode_i64(i64::MIN), [0x80, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(encode_int(-1i8), Ok([0xff; 8]));
        assert_eq!(encode_int(i64::MAX as u64), Ok(encode_i64(i64::MAX)));
        assert_eq!(encode_int(1u64 << 63), Err(KeyError::IntegerOutOfRange));
        assert_eq!(
            encode_int(i128::from(i64::MIN) - 1),
            Err(KeyError::IntegerOutOfRange)
        );
    }

    #[test]
    fn a_short_buffer_reports_the_length_needed() {
        let text = units("ab漢😀");
        let needed = "ab漢😀".len();
        for cap in 0..needed {
            let mut out = vec![0; cap];
            assert_eq!(
                encode_utf16_into(&text, &mut out),
                Err(KeyError::BufferTooSmall { needed }),
                "{cap}"
            );
        }
        let mut out = vec![0; needed];
        assert_eq!(encode_utf16_into(&text, &mut out), Ok(needed));
        assert_eq!(out, "ab漢😀".as_bytes());
        let mut big = vec![0; utf16_max_len(text.len())];
        assert_eq!(encode_utf16_into(&text, &mut big), Ok(needed));
        // A lone surrogate is reported before a short buffer.
        assert_eq!(
            encode_utf16_into(&[0x61, 0x62, 0xD800], &mut [0; 1]),
            Err(KeyError::LoneSurrogate)
        );
    }

    #[test]
    fn names_are_wtf8() {
        // Valid text: its UTF-8, as for keys.
        for s in ["", "a", "é", "漢字", "😀", "-x", "\0"] {
            assert_eq!(encode_name_utf16(&units(s)), s.as_bytes(), "{s:?}");
        }
        // Lone surrogates: the generalized UTF-8 of their code point, distinct from U+FFFD.
        assert_eq!(encode_name_utf16(&[0xDC00]), [0xED, 0xB0, 0x80]);
        assert_eq!(encode_name_utf16(&[0xD83D, 0x61]), [0xED, 0xA0, 0xBD, 0x61]);
        // A reversed pair is two lone surrogates, not a character.
        assert_eq!(
            encode_name_utf16(&[0xDE00, 0xD83D]),
            [0xED, 0xB8, 0x80, 0xED, 0xA0, 0xBD]
        );
    }

    proptest::proptest! {
        /// Agrees with std's UTF-16 decoder on any code units: the same bytes when the text is
        /// valid, a rejection exactly when it is not.
        #[test]
        fn agrees_with_std(units in proptest::collection::vec(
            proptest::prop_oneof![0u16..0x80, 0x80u16..0x800, 0xD7F0u16..0xE010, proptest::num::u16::ANY],
            0..40,
        )) {
            let expected = String::from_utf16(&units).map(String::into_bytes).map_err(|_| KeyError::LoneSurrogate);
            proptest::prop_assert_eq!(encode_utf16(&units), expected.clone());
            let mut out = vec![0; utf16_max_len(units.len())];
            let n = encode_utf16_into(&units, &mut out);
            proptest::prop_assert_eq!(n.map(|n| out[..n].to_vec()), expected);
        }

        /// Names: the UTF-8 of valid text, and one-to-one on any code units (decoding the
        /// WTF-8 back gives the same units).
        #[test]
        fn names_are_lossless(units in proptest::collection::vec(
            proptest::prop_oneof![0u16..0x80, 0x80u16..0x800, 0xD7F0u16..0xE010, proptest::num::u16::ANY],
            0..40,
        )) {
            let bytes = encode_name_utf16(&units);
            if let Ok(text) = String::from_utf16(&units) {
                proptest::prop_assert_eq!(&bytes, &text.into_bytes());
            }
            proptest::prop_assert_eq!(decode_wtf8(&bytes), units);
        }
    }
}

//! Key encoders: the bytes that text and integer keys stand for, by the rules every front end
//! shares (keylock-core's `keys` module), so that a C program names the same lock as a Python or
//! Node program with the same key.
//!
//! C text in UTF-8 needs no encoder: its bytes are the key. These are for text held as UTF-16
//! (`uint16_t` code units, as from JavaScript, Java, Windows or ICU) and for integers.

use keylock_core::keys;

use crate::boundary::*;
use crate::contract::*;
use crate::result::*;

/// Encodes the text `units[0..n]` (UTF-16 code units) as the key it stands for in every keylock
/// front end: its UTF-8 bytes. Text with a lone surrogate (a code unit in 0xD800..0xDFFF without
/// its pair) has no UTF-8 form and is rejected, never replaced. `units` may be NULL when `n` is
/// 0 (the empty text).
///
/// Writes the key to `out[0..*out_len]`; `3 * n` bytes of `out` are always enough. With `out`
/// NULL and `cap` 0, only measures: `*out_len` is set to the key's length.
///
/// Returns:
/// - `KEYLOCK_OK`: `*out_len` is the key's length (and the key is in `out`, unless measuring).
/// - `KEYLOCK_INVALID_ARGUMENT`: a lone surrogate (`*out_len` is then 0), or `cap` is shorter
///   than the key (`*out_len` is then the length needed, more than `cap`), or `n` is over
///   `PTRDIFF_MAX / 2`.
/// - `KEYLOCK_NULL_ARGUMENT`: `out_len` is NULL, `units` is NULL with `n > 0`, or `out` is
///   NULL with `cap > 0`.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `units` is NULL or points to `n` readable code units; `out` is NULL or points to `cap`
/// writable bytes (which may not overlap `units`); `out_len` is NULL or points to a writable
/// `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_key_from_utf16(
    units: *const u16,
    n: usize,
    out: *mut u8,
    cap: usize,
    out_len: *mut usize,
) -> keylock_result {
    ffi_boundary(|| {
        let out_len = crate::boundary::out(out_len)?;
        // SAFETY: the caller's contract above.
        let units = unsafe { slice(units, n)? };
        let result = if out.is_null() {
            if cap != 0 {
                return Err(Fail(KEYLOCK_NULL_ARGUMENT));
            }
            keys::utf16_len(units)
        } else {
            // SAFETY: `out` points to `cap` writable bytes, apart from `units` (caller).
            let out = unsafe { slice_mut(out, cap)? };
            keys::encode_utf16_into(units, out)
        };
        let len = match result {
            Ok(len) => len,
            Err(keys::KeyError::BufferTooSmall { needed }) => needed,
            Err(_) => 0,
        };
        // SAFETY: out_len is non-NULL and writable (caller).
        unsafe { out_len.write(len) };
        result?;
        Ok(())
    })
}

/// Encodes the integer `value` as the key it stands for in every keylock front end: 8 bytes,
/// two's complement, big-endian (`KEYLOCK_INT_KEY_LEN` bytes are written to `out`).
///
/// Returns:
/// - `KEYLOCK_OK`: the key is in `out[0..KEYLOCK_INT_KEY_LEN]`.
/// - `KEYLOCK_NULL_ARGUMENT`: `out` is NULL.
/// - `KEYLOCK_PANIC`: internal error.
///
/// # Safety
/// `out` is NULL or points to `KEYLOCK_INT_KEY_LEN` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keylock_key_from_i64(value: i64, out: *mut u8) -> keylock_result {
    ffi_boundary(|| {
        let out = crate::boundary::out(out)?;
        let key = keys::encode_i64(value);
        // SAFETY: `out` is non-NULL with KEYLOCK_INT_KEY_LEN writable bytes (caller), and
        // `key` is a local array of that length.
        unsafe { std::ptr::copy_nonoverlapping(key.as_ptr(), out.as_ptr(), KEYLOCK_INT_KEY_LEN) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(units: &[u16], cap: usize) -> (keylock_result, usize, Vec<u8>) {
        let mut out = vec![0u8; cap];
        let mut len = usize::MAX;
        // SAFETY: `units` and `out` are live slices of the lengths passed.
        let r = unsafe {
            keylock_key_from_utf16(units.as_ptr(), units.len(), out.as_mut_ptr(), cap, &mut len)
        };
        out.truncate(len.min(cap));
        (r, len, out)
    }

    #[test]
    fn utf16_text_is_utf8() {
        let text: Vec<u16> = "ké😀".encode_utf16().collect();
        assert_eq!(
            utf16(&text, 16),
            (KEYLOCK_OK, 7, "ké😀".as_bytes().to_vec())
        );
        assert_eq!(utf16(&[], 0).0, KEYLOCK_OK);
        let mut len = 99;
        // SAFETY: NULL units with n == 0, NULL out with cap == 0 (measuring).
        let r = unsafe {
            keylock_key_from_utf16(text.as_ptr(), text.len(), std::ptr::null_mut(), 0, &mut len)
        };
        assert_eq!((r, len), (KEYLOCK_OK, 7));
        // SAFETY: as above.
        let r = unsafe {
            keylock_key_from_utf16(std::ptr::null(), 0, std::ptr::null_mut(), 0, &mut len)
        };
        assert_eq!((r, len), (KEYLOCK_OK, 0));
    }

    #[test]
    fn utf16_errors() {
        assert_eq!(utf16(&[0x61, 0xD800], 16).0, KEYLOCK_INVALID_ARGUMENT);
        assert_eq!(utf16(&[0x61, 0xD800], 16).1, 0);
        let (r, len, _) = utf16(&[0x61, 0x62, 0x63], 2);
        assert_eq!((r, len), (KEYLOCK_INVALID_ARGUMENT, 3));
        let mut len = 0;
        // SAFETY: every pointer is NULL or live; the calls must reject, not read.
        unsafe {
            assert_eq!(
                keylock_key_from_utf16(std::ptr::null(), 1, std::ptr::null_mut(), 0, &mut len),
                KEYLOCK_NULL_ARGUMENT
            );
            assert_eq!(
                keylock_key_from_utf16([0u16].as_ptr(), 1, std::ptr::null_mut(), 3, &mut len),
                KEYLOCK_NULL_ARGUMENT
            );
            assert_eq!(
                keylock_key_from_utf16(
                    [0u16].as_ptr(),
                    1,
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut()
                ),
                KEYLOCK_NULL_ARGUMENT
            );
            assert_eq!(
                keylock_key_from_utf16(
                    [0u16].as_ptr(),
                    usize::MAX,
                    std::ptr::null_mut(),
                    0,
                    &mut len
                ),
                KEYLOCK_INVALID_ARGUMENT
            );
        }
    }

    #[test]
    fn integers() {
        let mut out = [0u8; KEYLOCK_INT_KEY_LEN];
        // SAFETY: `out` has KEYLOCK_INT_KEY_LEN bytes.
        let r = unsafe { keylock_key_from_i64(-2, out.as_mut_ptr()) };
        assert_eq!(r, KEYLOCK_OK);
        assert_eq!(out, (-2i64).to_be_bytes());
        // SAFETY: NULL is rejected before any write.
        let r = unsafe { keylock_key_from_i64(1, std::ptr::null_mut()) };
        assert_eq!(r, KEYLOCK_NULL_ARGUMENT);
    }
}

//! What every export goes through: panic catching, NULL checks, and the translation of C
//! arguments (keys, key arrays); a core error becomes a `keylock_result` through
//! [`Fail`](crate::result::Fail).
//!
//! Nothing here decides anything about locking; that is keylock-core's job.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use crate::contract::*;
use crate::result::*;

/// What the body of an export returns: `Ok(())` becomes `KEYLOCK_OK`.
pub(crate) type Outcome = Result<(), Fail>;

/// Runs the body of an export that returns `keylock_result`, catching any panic so that none
/// crosses into C (unwinding out of an `extern "C"` function aborts the process).
///
/// The one exception: the uncontended plain lock and release (`keyed::acquire_plain`,
/// `keyed::release`) check their arguments and try the core's fast path before this guard,
/// because that path cannot panic (see `Keyed::acquire_fast`, `keyed::acquire_host_plain` and
/// `Keyed::release_cas` for why), and around it the guard (a call through memory) cost about
/// 50 instructions of a striped lock+release's 220 (callgrind); whatever it does not finish
/// runs in here, reached by a jump (`keyed::acquire_plain_guarded`, `keyed::release_guarded`).
///
/// `AssertUnwindSafe`: after a panic the caller only gets `KEYLOCK_PANIC`; the closure's
/// captures are the call's own arguments, which the caller still owns and may inspect.
#[inline]
pub(crate) fn ffi_boundary(body: impl FnOnce() -> Outcome) -> keylock_result {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => KEYLOCK_OK,
        Ok(Err(Fail(code))) => code,
        Err(_) => KEYLOCK_PANIC,
    }
}

/// Like [`ffi_boundary`] for the `_new` functions: a handle on success, NULL on a failure or a
/// caught panic.
pub(crate) fn ffi_boundary_new<T>(body: impl FnOnce() -> Option<T>) -> *mut T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Some(value)) => Box::into_raw(Box::new(value)),
        Ok(None) | Err(_) => std::ptr::null_mut(),
    }
}

/// Like [`ffi_boundary`] for the `_free` functions, which return nothing: frees `handle` unless
/// it is NULL. A panic in a destructor is swallowed, since the caller could not act on it.
///
/// # Safety
/// `handle` is NULL or a pointer returned by the matching `_new` and not freed since, that no
/// other thread uses any more.
pub(crate) unsafe fn ffi_boundary_free<T>(handle: *mut T) {
    if handle.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller passes a pointer from Box::into_raw (in ffi_boundary_new) that
        // nobody else uses now, so we own the box again.
        drop(unsafe { Box::from_raw(handle) });
    }));
}

/// The handle behind `ptr`, or `KEYLOCK_NULL_ARGUMENT`.
///
/// # Safety
/// `ptr` is NULL or points to a live handle of type `T` for the lifetime `'a`.
#[inline]
pub(crate) unsafe fn handle<'a, T>(ptr: *const T) -> Result<&'a T, Fail> {
    // SAFETY: the caller promises a live handle when ptr is not NULL.
    unsafe { ptr.as_ref() }.ok_or(Fail(KEYLOCK_NULL_ARGUMENT))
}

/// The output pointer `out`, or `KEYLOCK_NULL_ARGUMENT`.
#[inline]
pub(crate) fn out<T>(ptr: *mut T) -> Result<NonNull<T>, Fail> {
    NonNull::new(ptr).ok_or(Fail(KEYLOCK_NULL_ARGUMENT))
}

/// The most elements a slice of `T` may have (`from_raw_parts` requires at most `isize::MAX`
/// bytes; we check it rather than let a bad length be undefined behaviour).
#[inline]
const fn max_len<T>() -> usize {
    isize::MAX as usize / size_of::<T>()
}

/// The array `ptr[0..len]`. NULL with `len == 0` is empty; NULL with `len > 0` is
/// `KEYLOCK_NULL_ARGUMENT`; more than `PTRDIFF_MAX` bytes is `KEYLOCK_INVALID_ARGUMENT`.
///
/// # Safety
/// When `ptr` is not NULL it points to `len` readable elements that stay unchanged for `'a`.
#[inline]
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize) -> Result<&'a [T], Fail> {
    if ptr.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            Err(Fail(KEYLOCK_NULL_ARGUMENT))
        };
    }
    if len > max_len::<T>() {
        return Err(Fail(KEYLOCK_INVALID_ARGUMENT));
    }
    // SAFETY: ptr is not NULL, len elements fit in isize bytes, and the caller promises len
    // readable elements.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// The writable array `ptr[0..len]`, checked as [`slice`] checks.
///
/// # Safety
/// When `ptr` is not NULL it points to `len` writable elements that nothing else reads or
/// writes for `'a`.
#[inline]
pub(crate) unsafe fn slice_mut<'a, T>(ptr: *mut T, len: usize) -> Result<&'a mut [T], Fail> {
    if ptr.is_null() {
        return if len == 0 {
            Ok(&mut [])
        } else {
            Err(Fail(KEYLOCK_NULL_ARGUMENT))
        };
    }
    if len > max_len::<T>() {
        return Err(Fail(KEYLOCK_INVALID_ARGUMENT));
    }
    // SAFETY: ptr is not NULL, len elements fit in isize bytes, and the caller promises len
    // writable elements that only this slice uses.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// The key bytes `ptr[0..len]`. NULL with `len == 0` is the empty key; NULL with `len > 0` is
/// `KEYLOCK_NULL_ARGUMENT`; a length over `PTRDIFF_MAX` is `KEYLOCK_INVALID_ARGUMENT`.
///
/// # Safety
/// When `ptr` is not NULL it points to `len` readable bytes that stay unchanged for `'a`.
#[inline]
pub(crate) unsafe fn key<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], Fail> {
    // SAFETY: forwarded from our caller.
    unsafe { slice(ptr, len) }
}

/// The keys of a `_many` call: `n` pointers in `keys` and `n` lengths in `lens`.
/// `n == 0` is `KEYLOCK_INVALID_ARGUMENT` (whatever the arrays), NULL arrays are
/// `KEYLOCK_NULL_ARGUMENT`, and each key is checked as in [`key`].
///
/// # Safety
/// When not NULL, `keys` and `lens` point to `n` readable elements each, and each key pointer
/// satisfies [`key`]'s contract with its length.
pub(crate) unsafe fn keys<'a>(
    keys: *const *const u8,
    lens: *const usize,
    n: usize,
) -> Result<Vec<&'a [u8]>, Fail> {
    // n first: with n == 0 the arrays are never read, so what they hold does not matter.
    if n == 0 || n > max_len::<*const u8>() {
        return Err(Fail(KEYLOCK_INVALID_ARGUMENT));
    }
    if keys.is_null() || lens.is_null() {
        return Err(Fail(KEYLOCK_NULL_ARGUMENT));
    }
    // SAFETY: both arrays are non-NULL with n elements (caller), and n fits in isize bytes for
    // the larger element size (pointers and usize are the same size).
    let (ptrs, lens) = unsafe {
        (
            std::slice::from_raw_parts(keys, n),
            std::slice::from_raw_parts(lens, n),
        )
    };
    ptrs.iter()
        .zip(lens)
        // SAFETY: each key pointer and its length satisfy `key`'s contract (caller).
        .map(|(&p, &len)| unsafe { key(p, len) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_keylock_panic() {
        // The only way to reach KEYLOCK_PANIC: no input from C makes the library panic.
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let code = ffi_boundary(|| panic!("boom"));
        let ptr = ffi_boundary_new::<u8>(|| panic!("boom"));
        std::panic::set_hook(prev);
        assert_eq!(code, KEYLOCK_PANIC);
        assert!(ptr.is_null());
    }

    #[test]
    fn outcomes_map_to_codes() {
        assert_eq!(ffi_boundary(|| Ok(())), KEYLOCK_OK);
        assert_eq!(ffi_boundary(|| Err(Fail(KEYLOCK_TIMEOUT))), KEYLOCK_TIMEOUT);
        let err = |e| ffi_boundary(|| Err(e)?);
        assert_eq!(err(keylock_core::Error::WouldBlock), KEYLOCK_WOULD_BLOCK);
        assert_eq!(err(keylock_core::Error::TimedOut), KEYLOCK_TIMEOUT);
        assert_eq!(err(keylock_core::Error::NotLocked), KEYLOCK_NOT_LOCKED);
        assert_eq!(
            err(keylock_core::Error::InvalidArgument("x")),
            KEYLOCK_INVALID_ARGUMENT
        );
    }

    #[test]
    fn keys_are_checked() {
        // SAFETY: every non-NULL pointer below points to at least `len` bytes.
        unsafe {
            assert_eq!(key(std::ptr::null(), 0), Ok(&[][..]));
            assert_eq!(key(std::ptr::null(), 1), Err(Fail(KEYLOCK_NULL_ARGUMENT)));
            assert_eq!(key(b"ab".as_ptr(), 2), Ok(&b"ab"[..]));
            assert_eq!(
                key(b"ab".as_ptr(), usize::MAX),
                Err(Fail(KEYLOCK_INVALID_ARGUMENT))
            );
            let ptrs = [b"a".as_ptr(), std::ptr::null()];
            let lens = [1, 0];
            assert_eq!(
                keys(ptrs.as_ptr(), lens.as_ptr(), 2),
                Ok(vec![&b"a"[..], &[][..]])
            );
            assert_eq!(
                keys(ptrs.as_ptr(), lens.as_ptr(), 0),
                Err(Fail(KEYLOCK_INVALID_ARGUMENT))
            );
            assert_eq!(
                keys(std::ptr::null(), lens.as_ptr(), 2),
                Err(Fail(KEYLOCK_NULL_ARGUMENT))
            );
            assert_eq!(
                keys(ptrs.as_ptr(), std::ptr::null(), 2),
                Err(Fail(KEYLOCK_NULL_ARGUMENT))
            );
            let lens = [1, 3];
            assert_eq!(
                keys(ptrs.as_ptr(), lens.as_ptr(), 2),
                Err(Fail(KEYLOCK_NULL_ARGUMENT))
            );
        }
    }
}

//! Per-thread values that JavaScript reads without a call: the output buffer that acquires
//! write their fence and flags to, and this thread's Web Locks `clientId`.
//!
//! The buffer is a 16-byte `ArrayBuffer` that `index.js` makes at load and hands to `init`; it
//! reads it as a `Uint32Array`: `[fence low 32 bits, fence high 32 bits, flags, waiter id]`.
//! An `ArrayBuffer`'s memory never moves, and a reference made here keeps it alive for the
//! thread's life.

use std::cell::{Cell, RefCell};
use std::ptr;
use std::sync::Arc;

use napi::sys;

use crate::reactor::Record;

thread_local! {
    static OUT: Cell<*mut u32> = const { Cell::new(ptr::null_mut()) };
    static CLIENT: RefCell<Arc<str>> = RefCell::new(Arc::from(""));
}

/// Words of the buffer.
const WORDS: usize = 4;

/// Adopts `buffer` (an `ArrayBuffer` of at least 16 bytes) as this thread's output buffer.
///
/// # Safety
/// `env` is the current call's environment and `buffer` a value of it.
pub(crate) unsafe fn set(env: sys::napi_env, buffer: sys::napi_value) -> napi::Result<()> {
    let mut data = ptr::null_mut();
    let mut len = 0usize;
    // SAFETY: a query on a live value; it fails for anything but an ArrayBuffer.
    let status = unsafe { sys::napi_get_arraybuffer_info(env, buffer, &mut data, &mut len) };
    if status != sys::Status::napi_ok || len < WORDS * 4 || data.is_null() {
        return Err(napi::Error::new(
            napi::Status::InvalidArg,
            "keylock: the output buffer must be an ArrayBuffer of 16 bytes",
        ));
    }
    let mut reference = ptr::null_mut();
    // SAFETY: a strong reference, never deleted: the buffer lives as long as the environment.
    let status = unsafe { sys::napi_create_reference(env, buffer, 1, &mut reference) };
    if status != sys::Status::napi_ok {
        return Err(napi::Error::new(
            napi::Status::GenericFailure,
            "keylock: referencing the output buffer failed",
        ));
    }
    if data.align_offset(std::mem::align_of::<u32>()) != 0 {
        return Err(napi::Error::new(
            napi::Status::InvalidArg,
            "keylock: the output buffer is not aligned",
        ));
    }
    OUT.with(|o| o.set(data.cast()));
    Ok(())
}

fn write(words: &[(usize, u32)]) {
    OUT.with(|o| {
        let p = o.get();
        if p.is_null() {
            return;
        }
        for &(i, v) in words {
            debug_assert!(i < WORDS);
            // SAFETY: `p` points to the WORDS aligned words of the adopted buffer, which lives
            // for the thread's life; only this thread touches it, between JavaScript's reads.
            unsafe { p.add(i).write(v) };
        }
    });
}

/// Writes an acquisition's fence and flags.
#[inline]
pub(crate) fn put(record: &Record) {
    write(&[(0, record[1]), (1, record[2]), (2, record[3])]);
}

/// Writes the id of a waiter just started.
#[inline]
pub(crate) fn put_waiter(id: u32) {
    write(&[(3, id)]);
}

/// Sets this thread's Web Locks `clientId`.
pub(crate) fn set_client_id(id: &str) {
    CLIENT.with(|c| *c.borrow_mut() = Arc::from(id));
}

/// This thread's Web Locks `clientId`.
pub(crate) fn client_id() -> Arc<str> {
    CLIENT.with(|c| c.borrow().clone())
}

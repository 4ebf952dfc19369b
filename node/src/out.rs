//! Per-thread values that JavaScript reads without a call: the output buffer that acquires
//! write their fence and flags to, the records buffer that `runReady` fills, and this thread's
//! Web Locks `clientId`.
//!
//! The output buffer is an `ArrayBuffer` that JavaScript makes at load and hands to `init`; it
//! reads it as a `Uint32Array` laid out as `records::OUTPUT` declares. The records buffer holds
//! the completions of waiters (`records::COMPLETION`, see `reactor::init`); completions that do
//! not fit wait for the next `runReady`. An `ArrayBuffer`'s
//! memory never moves, and a reference made here keeps each alive for the thread's life.

use std::cell::{Cell, RefCell};
use std::ptr;
use std::sync::Arc;

use napi::sys;

use crate::reactor::Record;
use crate::records::{completion, output};

thread_local! {
    static OUT: Cell<*mut u32> = const { Cell::new(ptr::null_mut()) };
    static RECORDS: Cell<(*mut u32, usize)> = const { Cell::new((ptr::null_mut(), 0)) };
    static OVERFLOW: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    static CLIENT: RefCell<Arc<str>> = RefCell::new(Arc::from(""));
}

/// Words of one completion in the records buffer.
pub(crate) const RECORD_WORDS: usize = completion::WORDS;

/// Words of the output buffer.
const WORDS: usize = output::WORDS;

/// The memory of `buffer`, an `ArrayBuffer` of at least `min` bytes, kept alive from now on:
/// its words and their number.
///
/// # Safety
/// `env` is the current call's environment and `buffer` a value of it.
unsafe fn adopt(
    env: sys::napi_env,
    buffer: sys::napi_value,
    min: usize,
) -> napi::Result<(*mut u32, usize)> {
    let mut data = ptr::null_mut();
    let mut len = 0usize;
    // SAFETY: a query on a live value; it fails for anything but an ArrayBuffer.
    let status = unsafe { sys::napi_get_arraybuffer_info(env, buffer, &mut data, &mut len) };
    if status != sys::Status::napi_ok || len < min || data.is_null() {
        return Err(napi::Error::new(
            napi::Status::InvalidArg,
            format!("keylock: an output buffer must be an ArrayBuffer of at least {min} bytes"),
        ));
    }
    if data.align_offset(std::mem::align_of::<u32>()) != 0 {
        return Err(napi::Error::new(
            napi::Status::InvalidArg,
            "keylock: an output buffer is not aligned",
        ));
    }
    let mut reference = ptr::null_mut();
    // SAFETY: a strong reference, never deleted: the buffer lives as long as the environment.
    let status = unsafe { sys::napi_create_reference(env, buffer, 1, &mut reference) };
    if status != sys::Status::napi_ok {
        return Err(napi::Error::new(
            napi::Status::GenericFailure,
            "keylock: referencing an output buffer failed",
        ));
    }
    Ok((data.cast(), len / 4))
}

/// Adopts `out` (`output::WORDS` words at least) and `records` (one record at least) as this thread's
/// buffers.
///
/// # Safety
/// `env` is the current call's environment and both buffers are values of it.
pub(crate) unsafe fn set(
    env: sys::napi_env,
    out: sys::napi_value,
    records: sys::napi_value,
) -> napi::Result<()> {
    // SAFETY: as the caller promises.
    let (o, _) = unsafe { adopt(env, out, WORDS * 4)? };
    // SAFETY: as above.
    let (r, words) = unsafe { adopt(env, records, RECORD_WORDS * 4)? };
    OUT.with(|c| c.set(o));
    RECORDS.with(|c| c.set((r, words - words % RECORD_WORDS)));
    Ok(())
}

/// Writes `records` (whole records) to the records buffer, after those that did not fit last
/// time; returns how many records it holds now. What does not fit waits for the next call.
pub(crate) fn deliver(records: &[u32]) -> u32 {
    let (buf, cap) = RECORDS.with(Cell::get);
    if buf.is_null() {
        // Before `init`: there is no buffer to deliver to.
        return 0;
    }
    OVERFLOW.with(|o| {
        let mut o = o.borrow_mut();
        let copy = |words: &[u32]| {
            let n = words.len().min(cap);
            // SAFETY: `buf` holds `cap` words of the adopted buffer, which lives for the
            // thread's life; only this thread touches it, between JavaScript's reads.
            unsafe { ptr::copy_nonoverlapping(words.as_ptr(), buf, n) };
            n
        };
        let n = if o.is_empty() {
            let n = copy(records);
            o.extend_from_slice(&records[n..]);
            n
        } else {
            o.extend_from_slice(records);
            let n = copy(&o);
            o.drain(..n);
            n
        };
        (n / RECORD_WORDS) as u32
    })
}

/// Writes `words` (position, value) to the output buffer; whether there is one (`init` has
/// adopted it on this thread).
fn write(words: &[(usize, u32)]) -> bool {
    OUT.with(|o| {
        let p = o.get();
        if p.is_null() {
            return false;
        }
        for &(i, v) in words {
            debug_assert!(i < WORDS);
            // SAFETY: `p` points to the WORDS aligned words of the adopted buffer, which lives
            // for the thread's life; only this thread touches it, between JavaScript's reads.
            unsafe { p.add(i).write(v) };
        }
        true
    })
}

/// Writes an acquisition's slot, fence and flags; whether it could (see `write`).
#[inline]
pub(crate) fn put(record: &Record) -> bool {
    write(&[
        (output::SLOT, record[0]),
        (output::FENCE_LOW, record[1]),
        (output::FENCE_HIGH, record[2]),
        (output::FLAGS, record[3]),
    ])
}

/// Writes the id of a waiter just started.
#[inline]
pub(crate) fn put_waiter(id: u32) {
    let _ = write(&[(output::WAITER, id)]);
}

/// Sets this thread's Web Locks `clientId`.
pub(crate) fn set_client_id(id: &str) {
    CLIENT.with(|c| *c.borrow_mut() = Arc::from(id));
}

/// This thread's Web Locks `clientId`.
pub(crate) fn client_id() -> Arc<str> {
    CLIENT.with(|c| c.borrow().clone())
}

//! Lock handles as JavaScript values: a type-tagged external holding an `Rc<Handle>`
//! (handles stay on their JavaScript thread: the external's finalizer and every waiter that keeps
//! a reference run there).
//!
//! The napi-rs functions of `lib.rs` (statistics, stripes) receive it as an argument; the tag
//! check makes sure that a value is one of ours before its pointer is used. The per-operation
//! functions ([`crate::raw`]) need no such check: they carry their handle as Node-API data.

use std::ffi::c_void;
use std::ptr;

use napi::{Error, Result, Status, sys};

use std::rc::Rc;

use crate::locks::Handle;

/// The type tag of keylock handles (a random 128-bit value, fixed for the addon's life).
static TAG: sys::napi_type_tag = sys::napi_type_tag {
    lower: 0x8f1c_53a4_6be2_0d71,
    upper: 0x2e97_c4b0_51fd_a6e3,
};

/// Drops the external's reference to a handle when the external is collected, and takes the
/// handle's native memory (carried in `hint`) off V8's account.
unsafe extern "C" fn finalize(env: sys::napi_env, data: *mut c_void, hint: *mut c_void) {
    // SAFETY: `data` is the pointer `wrap` made with Rc::into_raw, finalized exactly once.
    drop(unsafe { Rc::from_raw(data.cast::<Handle>().cast_const()) });
    let bytes = hint as usize as i64;
    if bytes != 0 {
        let mut total = 0;
        // SAFETY: finalizers run on the environment's thread with a usable `env`.
        unsafe { sys::napi_adjust_external_memory(env, -bytes, &mut total) };
    }
}

/// A new external owning a reference to `handle`; `native_bytes` of memory outside the
/// JavaScript heap are reported to V8 while it lives.
///
/// # Safety
/// `env` is the environment of the current call, on its JavaScript thread.
pub(crate) unsafe fn wrap(
    env: sys::napi_env,
    handle: Rc<Handle>,
    native_bytes: usize,
) -> Result<sys::napi_value> {
    let data = Rc::into_raw(handle).cast_mut();
    let mut value = ptr::null_mut();
    // SAFETY: `finalize` frees `data` (and takes `native_bytes` back) when the external is
    // collected.
    let status = unsafe {
        sys::napi_create_external(
            env,
            data.cast(),
            Some(finalize),
            native_bytes as *mut c_void,
            &mut value,
        )
    };
    if status != sys::Status::napi_ok {
        // SAFETY: not adopted by an external; still ours.
        drop(unsafe { Rc::from_raw(data.cast_const()) });
        return Err(Error::new(Status::from(status), "creating a lock handle"));
    }
    if native_bytes != 0 {
        let mut total = 0;
        // SAFETY: a plain accounting call in the current environment.
        unsafe { sys::napi_adjust_external_memory(env, native_bytes as i64, &mut total) };
    }
    // SAFETY: `value` is the external just created in `env`.
    let status = unsafe { sys::napi_type_tag_object(env, value, &TAG) };
    if status != sys::Status::napi_ok {
        return Err(Error::new(Status::from(status), "tagging a lock handle"));
    }
    Ok(value)
}

/// The handle behind `value`, or `None` if `value` is not a keylock handle.
///
/// # Safety
/// `env` is the environment of the current call and `value` a value of it that stays alive
/// for `'a` (an argument of the current call).
pub(crate) unsafe fn unwrap<'a>(env: sys::napi_env, value: sys::napi_value) -> Option<&'a Handle> {
    let mut ours = false;
    // SAFETY: a plain query; it fails (and we return None) for a non-object.
    let status = unsafe { sys::napi_check_object_type_tag(env, value, &TAG, &mut ours) };
    if status != sys::Status::napi_ok || !ours {
        return None;
    }
    let mut data = ptr::null_mut();
    // SAFETY: only externals made by `wrap` carry TAG.
    let status = unsafe { sys::napi_get_value_external(env, value, &mut data) };
    if status != sys::Status::napi_ok || data.is_null() {
        return None;
    }
    // SAFETY: `data` points to the handle of the Rc the external owns, alive while `value` is
    // (an argument of the current call); handles are only read through `&`.
    Some(unsafe { &*data.cast::<Handle>() })
}

//! The per-operation entry points, written against Node-API directly.
//!
//! napi-rs's generated wrappers cost about 150 ns per call with arguments on the machine this
//! was measured on, several times the lock operation itself (a bare Node-API function with
//! one argument: about 35 ns). The calls made once per lock acquisition or release therefore
//! skip them: each function below reads its arguments with `napi_get_cb_info`, encodes the key
//! (`crate::keys`), makes one call into the core and returns a boolean or a number. Construction, statistics and the event-loop plumbing stay on napi-rs (see
//! `lib.rs`). Every entry point catches panics and turns them into JavaScript exceptions.

use std::ffi::{CStr, CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Arc;

use napi::sys;

use crate::handle;
use crate::keys::{Key, KeyFail};
use keylock_core::RwLock;

use crate::locks::{Handle, Held, Keyed};
use crate::status;

/// What an entry point returns to JavaScript.
enum Ret {
    Bool(bool),
    /// A status ([`status`]), with [`status::LOCAL_WAKE`] added by releases that woke a waiter of
    /// this thread.
    Status(u32),
    /// A waiter id (0: acquired at once).
    Id(u32),
}

/// Why an entry point throws.
enum Fail {
    /// A `TypeError` with code `KEYLOCK_INVALID_ARGUMENT`.
    Type(&'static str),
    /// A key that is not one: a `TypeError` or `RangeError` with code `KEYLOCK_INVALID_ARGUMENT`.
    Key(KeyFail),
    /// An `Error` (a napi-rs error from a helper, or a panic).
    Error(String),
}

impl From<napi::Error> for Fail {
    fn from(e: napi::Error) -> Self {
        Fail::Error(e.reason.clone())
    }
}

impl From<KeyFail> for Fail {
    fn from(e: KeyFail) -> Self {
        Fail::Key(e)
    }
}

type Outcome = Result<Ret, Fail>;

/// The current call: its lock and its arguments. Only [`entry`] makes one, from what Node-API
/// gave it, so the lock and every argument are alive (and belong to `env`) for as long as the
/// `Call` is.
struct Call<'a, const N: usize> {
    env: sys::napi_env,
    lock: &'a Handle,
    args: &'a [sys::napi_value; N],
}

impl<const N: usize> Call<'_, N> {
    /// The lock, which must be a `KeyPool` or a `StripedLock`.
    fn keyed(&self) -> Result<&dyn Keyed, Fail> {
        match self.lock {
            Handle::Pool(p) => Ok(p),
            Handle::Striped(s) => Ok(s),
            Handle::Rw(_) => Err(Fail::Type("not a KeyPool or StripedLock")),
        }
    }

    /// The lock, which must be an `RwLock`.
    fn rw(&self) -> Result<&Held<RwLock>, Fail> {
        match self.lock {
            Handle::Rw(r) => Ok(r),
            _ => Err(Fail::Type("not an RwLock")),
        }
    }

    /// Argument `i` as a key, read into `key` (in place: see [`Key::new`]).
    #[inline]
    fn key<'k>(&self, i: usize, key: &'k mut Key) -> Result<&'k [u8], Fail> {
        // SAFETY: a live argument of the current call (see `Call`).
        unsafe { key.read(self.env, self.args[i]) }?;
        Ok(key.as_bytes())
    }

    /// Argument `i` as an array of keys.
    fn keys(&self, i: usize) -> Result<Vec<Key>, Fail> {
        let (env, v) = (self.env, self.args[i]);
        let mut is_array = false;
        let mut len = 0u32;
        // SAFETY: plain queries on a live argument (see `Call`).
        unsafe {
            sys::napi_is_array(env, v, &mut is_array);
            if !is_array {
                return Err(Fail::Type("keys must be an array"));
            }
            sys::napi_get_array_length(env, v, &mut len);
        }
        let mut keys = Vec::with_capacity(len as usize);
        for i in 0..len {
            let mut item = ptr::null_mut();
            // SAFETY: an element read of a live array; the element is kept alive by the handle
            // scope of this call.
            unsafe {
                if sys::napi_get_element(env, v, i, &mut item) != sys::Status::napi_ok {
                    return Err(Fail::Error("reading a key of the array failed".into()));
                }
                let mut key = Key::new();
                key.read(env, item)?;
                keys.push(key);
            }
        }
        Ok(keys)
    }

    /// Argument `i` as a timeout in milliseconds: a finite number >= 0, or anything else for none.
    fn timeout(&self, i: usize) -> Option<std::time::Duration> {
        let mut ms = f64::NAN;
        // SAFETY: a plain read of a live argument; it fails (leaving NaN) for a non-number.
        unsafe { sys::napi_get_value_double(self.env, self.args[i], &mut ms) };
        status::timeout(Some(ms))
    }
}

/// Runs `body` with the call's first `N` arguments (missing ones read as `undefined`) and
/// converts its outcome, catching panics.
///
/// # Safety
/// `env` and `info` are those Node-API passed to the calling entry point.
unsafe fn entry<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&Call<'_, N>) -> Outcome,
) -> sys::napi_value {
    let mut argc = N;
    let mut argv = [ptr::null_mut(); N];
    let mut data = ptr::null_mut();
    // SAFETY: `argv` has room for `argc` values; Node-API fills the missing ones with undefined.
    let status = unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            &mut data,
        )
    };
    let outcome = if status != sys::Status::napi_ok || data.is_null() {
        Err(Fail::Error("reading the arguments failed".into()))
    } else {
        // SAFETY: every entry point is created by `bind` with `data` pointing to the handle of an
        // `Arc<Handle>` that the function itself owns (released by its finalizer), so it is alive
        // while the function runs.
        let lock = unsafe { &*data.cast::<Handle>() };
        let call = Call {
            env,
            lock,
            args: &argv,
        };
        match catch_unwind(AssertUnwindSafe(|| body(&call))) {
            Ok(outcome) => outcome,
            Err(panic) => Err(Fail::Error(panic_message(panic.as_ref()))),
        }
    };
    // A wake-up of this thread that the result does not report goes by the event loop.
    if !matches!(outcome, Ok(Ret::Status(code)) if code & status::LOCAL_WAKE != 0) {
        crate::reactor::flush_local();
    }
    let mut result = ptr::null_mut();
    // SAFETY: plain value creation and exception throwing in the current environment.
    unsafe {
        match outcome {
            Ok(Ret::Bool(b)) => {
                sys::napi_get_boolean(env, b, &mut result);
            }
            Ok(Ret::Status(n) | Ret::Id(n)) => {
                sys::napi_create_uint32(env, n, &mut result);
            }
            Err(Fail::Type(msg)) => throw(env, true, msg),
            Err(Fail::Key(fail)) => fail.throw(env),
            Err(Fail::Error(msg)) => throw(env, false, &msg),
        }
    }
    result
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let what = if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_owned()
    };
    format!("keylock: panic in the native addon: {what}")
}

/// Throws a `TypeError` (with code KEYLOCK_INVALID_ARGUMENT) or an `Error` (KEYLOCK_INTERNAL).
///
/// # Safety
/// `env` is the current environment.
unsafe fn throw(env: sys::napi_env, type_error: bool, msg: &str) {
    let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: both strings are NUL-terminated and live across the call.
    unsafe {
        if type_error {
            sys::napi_throw_type_error(env, c"KEYLOCK_INVALID_ARGUMENT".as_ptr(), msg.as_ptr());
        } else {
            sys::napi_throw_error(env, c"KEYLOCK_INTERNAL".as_ptr(), msg.as_ptr());
        }
    }
}

fn slices(keys: &[Key]) -> Vec<&[u8]> {
    keys.iter().map(Key::as_bytes).collect()
}

/// Declares entry points: `fn name[N](call) { body }` with `N` arguments.
macro_rules! entry_points {
    ($( $(#[$doc:meta])* fn $name:ident[$n:literal]($c:ident) $body:block )*) => {
        $(
            $(#[$doc])*
            unsafe extern "C" fn $name(
                env: sys::napi_env,
                info: sys::napi_callback_info,
            ) -> sys::napi_value {
                // SAFETY: Node-API calls this with a valid environment and callback info.
                unsafe { entry::<$n>(env, info, |$c| -> Outcome { $body }) }
            }
        )*
    };
}

entry_points! {
    /// `tryLock(key)`: whether the key (or its stripe) was taken.
    fn try_lock[1](c) {
        let mut key = Key::new();
        Ok(Ret::Bool(c.keyed()?.try_lock(c.key(0, &mut key)?)))
    }
    /// `unlock(key)`: a status.
    fn unlock[1](c) {
        let mut key = Key::new();
        Ok(Ret::Status(c.keyed()?.unlock(c.key(0, &mut key)?)))
    }
    /// `isLocked(key)`.
    fn is_locked[1](c) {
        let mut key = Key::new();
        Ok(Ret::Bool(c.keyed()?.is_locked(c.key(0, &mut key)?)))
    }
    /// `lockAsync(key)`: 0 when taken at once, else the waiter id.
    fn lock_async[1](c) {
        let mut key = Key::new();
        Ok(Ret::Id(c.keyed()?.lock_async(c.key(0, &mut key)?)?))
    }
    /// `lockSync(key, timeoutMs)`: a status.
    fn lock_sync[2](c) {
        let mut key = Key::new();
        Ok(Ret::Status(c.keyed()?.lock_sync(c.key(0, &mut key)?, c.timeout(1))))
    }
    /// `tryLockMany(keys)`: whether all were taken (else none is).
    fn try_lock_many[1](c) {
        Ok(Ret::Bool(c.keyed()?.try_lock_many(&slices(&c.keys(0)?))))
    }
    /// `unlockMany(keys)`: a status.
    fn unlock_many[1](c) {
        Ok(Ret::Status(c.keyed()?.unlock_many(&slices(&c.keys(0)?))))
    }
    /// `lockManyAsync(keys)`: 0 when taken at once, else the waiter id.
    fn lock_many_async[1](c) {
        Ok(Ret::Id(c.keyed()?.lock_many_async(&slices(&c.keys(0)?))?))
    }
    /// `lockManySync(keys, timeoutMs)`: a status.
    fn lock_many_sync[2](c) {
        Ok(Ret::Status(c.keyed()?.lock_many_sync(&slices(&c.keys(0)?), c.timeout(1))))
    }
    /// `tryRead()`.
    fn try_read[0](c) {
        Ok(Ret::Bool(c.rw()?.try_read()))
    }
    /// `tryWrite()`.
    fn try_write[0](c) {
        Ok(Ret::Bool(c.rw()?.try_write()))
    }
    /// `readUnlock()`: a status.
    fn read_unlock[0](c) {
        Ok(Ret::Status(c.rw()?.read_unlock()))
    }
    /// `writeUnlock()`: a status.
    fn write_unlock[0](c) {
        Ok(Ret::Status(c.rw()?.write_unlock()))
    }
    /// `readAsync()`: 0 when taken at once, else the waiter id.
    fn read_async[0](c) {
        Ok(Ret::Id(c.rw()?.read_async()?))
    }
    /// `writeAsync()`: 0 when taken at once, else the waiter id.
    fn write_async[0](c) {
        Ok(Ret::Id(c.rw()?.write_async()?))
    }
    /// `readSync(timeoutMs)`: a status.
    fn read_sync[1](c) {
        Ok(Ret::Status(c.rw()?.read_sync(c.timeout(0))))
    }
    /// `writeSync(timeoutMs)`: a status.
    fn write_sync[1](c) {
        Ok(Ret::Status(c.rw()?.write_sync(c.timeout(0))))
    }
    /// `rwIsLocked()`.
    fn rw_is_locked[0](c) {
        Ok(Ret::Bool(c.rw()?.core.is_locked()))
    }
    /// `rwIsWriteLocked()`.
    fn rw_is_write_locked[0](c) {
        Ok(Ret::Bool(c.rw()?.core.is_write_locked()))
    }
}

type RawFn = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// The entry points of a `KeyPool` or `StripedLock`, with their JavaScript names.
const KEYED: &[(&CStr, RawFn)] = &[
    (c"tryLock", try_lock),
    (c"unlock", unlock),
    (c"isLocked", is_locked),
    (c"lockAsync", lock_async),
    (c"lockSync", lock_sync),
    (c"tryLockMany", try_lock_many),
    (c"unlockMany", unlock_many),
    (c"lockManyAsync", lock_many_async),
    (c"lockManySync", lock_many_sync),
];

/// The entry points of an `RwLock`.
const RW: &[(&CStr, RawFn)] = &[
    (c"tryRead", try_read),
    (c"tryWrite", try_write),
    (c"readUnlock", read_unlock),
    (c"writeUnlock", write_unlock),
    (c"readAsync", read_async),
    (c"writeAsync", write_async),
    (c"readSync", read_sync),
    (c"writeSync", write_sync),
    (c"isLocked", rw_is_locked),
    (c"isWriteLocked", rw_is_write_locked),
];

/// `runReady()`: polls this thread's woken waiters; returns the ids to dispatch: one number for
/// one (the common case, which saves making an array), else an array.
unsafe extern "C" fn run_ready(
    env: sys::napi_env,
    _info: sys::napi_callback_info,
) -> sys::napi_value {
    let ids = match catch_unwind(crate::reactor::run_ready) {
        Ok(ids) => ids,
        Err(panic) => {
            // SAFETY: throwing in the current environment.
            unsafe { throw(env, false, &panic_message(panic.as_ref())) };
            return ptr::null_mut();
        }
    };
    let mut result = ptr::null_mut();
    // SAFETY: array and number creation in the current environment.
    unsafe {
        if let [id] = ids[..] {
            sys::napi_create_uint32(env, id, &mut result);
            return result;
        }
        sys::napi_create_array_with_length(env, ids.len(), &mut result);
        for (i, id) in ids.iter().enumerate() {
            let mut n = ptr::null_mut();
            sys::napi_create_uint32(env, *id, &mut n);
            sys::napi_set_element(env, result, i as u32, n);
        }
    }
    result
}

/// The `runReady` function (see [`run_ready`]): one per thread, made by `index.js` at load.
///
/// # Safety
/// `env` is the environment of the current call, on its JavaScript thread.
pub(crate) unsafe fn run_ready_function(env: sys::napi_env) -> napi::Result<sys::napi_value> {
    let mut func = ptr::null_mut();
    // SAFETY: function creation in the current environment; the name is a NUL-terminated static.
    let status = unsafe {
        sys::napi_create_function(
            env,
            c"runReady".as_ptr(),
            8,
            Some(run_ready),
            ptr::null_mut(),
            &mut func,
        )
    };
    if status != sys::Status::napi_ok {
        return Err(napi::Error::new(
            napi::Status::from(status),
            "creating runReady",
        ));
    }
    Ok(func)
}

/// The object JavaScript holds for one lock: its entry points, plus the lock's handle as a
/// tagged external (`.handle`) for the napi-rs functions. Each entry point gets a pointer to the
/// handle as its Node-API `data`, and a read-only, non-configurable property that refers to the
/// external, so the handle (which the external owns) lives as long as any of its functions.
/// `native_bytes` is the lock's memory outside the JavaScript heap, reported to V8 so that
/// unused locks are collected in step with the memory they hold.
///
/// # Safety
/// `env` is the environment of the current call, on its JavaScript thread.
pub(crate) unsafe fn bind(
    env: sys::napi_env,
    handle: Handle,
    native_bytes: usize,
) -> napi::Result<sys::napi_value> {
    let check = |status: sys::napi_status| {
        if status == sys::Status::napi_ok {
            Ok(())
        } else {
            Err(napi::Error::new(
                napi::Status::from(status),
                "creating a lock's functions",
            ))
        }
    };
    let fns = match handle {
        Handle::Rw(_) => RW,
        _ => KEYED,
    };
    let handle = Arc::new(handle);
    let data = Arc::as_ptr(&handle).cast_mut().cast::<c_void>();
    let mut object = ptr::null_mut();
    // SAFETY: value creation in the current environment; the names are NUL-terminated statics.
    // `data` stays valid while any function is reachable: each function keeps the external,
    // which owns the Arc, through a property that cannot be removed or replaced.
    unsafe {
        let external = handle::wrap(env, handle, native_bytes)?;
        check(sys::napi_create_object(env, &mut object))?;
        check(sys::napi_set_named_property(
            env,
            object,
            c"handle".as_ptr(),
            external,
        ))?;
        for (name, f) in fns {
            let mut func = ptr::null_mut();
            check(sys::napi_create_function(
                env,
                name.as_ptr(),
                name.to_bytes().len() as isize,
                Some(*f),
                data,
                &mut func,
            ))?;
            let keep = sys::napi_property_descriptor {
                utf8name: c"lock".as_ptr(),
                name: ptr::null_mut(),
                method: None,
                getter: None,
                setter: None,
                value: external,
                attributes: sys::PropertyAttributes::default,
                data: ptr::null_mut(),
            };
            check(sys::napi_define_properties(env, func, 1, &keep))?;
            check(sys::napi_set_named_property(
                env,
                object,
                name.as_ptr(),
                func,
            ))?;
        }
    }
    Ok(object)
}

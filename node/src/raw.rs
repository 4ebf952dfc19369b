//! The per-operation entry points, written against Node-API directly.
//!
//! napi-rs's generated wrappers cost about 150 ns per call with arguments on the machine this
//! was measured on, several times the lock operation itself (a bare Node-API function with
//! one argument: about 35 ns). The calls made once per lock acquisition or release therefore
//! skip them: each function below reads its arguments with `napi_get_cb_info`, encodes the key
//! (`crate::keys`), makes one call into the core and returns a number or a boolean.
//! Construction, statistics and the event-loop plumbing stay on napi-rs (see `lib.rs`). Every
//! entry point catches panics and turns them into JavaScript exceptions.
//!
//! An acquire that succeeds writes the slot its acquisition is stored in (its guard's number),
//! the fence and the flags to the thread's output buffer (`crate::out`) and returns `undefined`,
//! so JavaScript reads them without another call (and Node-API makes no number: about 45
//! instructions of each uncontended acquire). Otherwise it returns a number `r`: `r < 0` is
//! minus the status of a failure (`-1`: the lock is taken), and `r == 0` (async starts only)
//! means the acquire waits, under the waiter id written to the output buffer.

use std::ffi::{CStr, CString, c_char, c_void};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use keylock_core::{Acquisition, KeySpace, LockKey, LockOptions, Mode, Owner, Wait};
use napi::sys;

use crate::handle;
use crate::keys::{Key, KeyFail, Name};
use crate::locks::{self, Handle, Holding, Keyed, Rw};
use crate::reactor::{self, Record, Started};
use crate::status;
use crate::weblocks::{self, Asking, Began};

/// What an entry point returns to JavaScript.
enum Ret {
    Bool(bool),
    /// A status ([`status`]), with [`status::LOCAL_WAKE`] added by releases that woke a waiter of
    /// this thread.
    Status(u32),
    /// A release's status, as [`Ret::Status`], except that the common outcome (released, no
    /// waiter of this thread woken: 0) returns `undefined`, which costs nothing to make.
    Released(u32),
    /// An acquire that finished now: `undefined`, its record in the output buffer (see the
    /// module docs).
    Taken,
    /// A number: an acquire's failure or wait (see the module docs), or a code.
    Int(i32),
    /// A number of milliseconds, or a negative code.
    Number(f64),
    /// A value made here.
    Value(sys::napi_value),
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
    /// How many arguments the caller passed (may exceed `N`); the others read as `undefined`.
    argc: usize,
}

/// The result of an acquire that finished now: taken (the record, slot included, goes to the
/// output buffer), or minus its status. Without an output buffer (never, once the module has
/// loaded on the thread), the slot itself, which JavaScript takes as such.
fn acquired(record: Record) -> Ret {
    if record[0] != 0 {
        if crate::out::put(&record) {
            Ret::Taken
        } else {
            Ret::Int(record[0] as i32)
        }
    } else {
        Ret::Int(-((record[3] >> locks::STATUS_SHIFT) as i32))
    }
}

impl<const N: usize> Call<'_, N> {
    /// The lock, which must be a `KeyPool` or a `StripedLock`.
    fn keyed(&self) -> Result<&Keyed, Fail> {
        match self.lock {
            Handle::Keyed(k) => Ok(k),
            Handle::Rw(_) => Err(Fail::Type("not a KeyPool or StripedLock")),
        }
    }

    /// The lock, which must be an `RwLock`.
    fn rw(&self) -> Result<&Rw, Fail> {
        match self.lock {
            Handle::Rw(r) => Ok(r),
            Handle::Keyed(_) => Err(Fail::Type("not an RwLock")),
        }
    }

    /// Another reference to the lock, for a waiter to keep.
    fn arc(&self) -> Rc<Handle> {
        let ptr: *const Handle = self.lock;
        // SAFETY: every entry point's data is the pointer of an `Rc<Handle>` that the lock's
        // external owns (see `bind`), alive while the function runs, on this thread; this adds
        // a reference.
        unsafe {
            Rc::increment_strong_count(ptr);
            Rc::from_raw(ptr)
        }
    }

    /// Argument `i` as a key, read into `key` (in place: see [`Key::new`]).
    #[inline]
    fn key<'k>(&self, i: usize, key: &'k mut Key) -> Result<&'k [u8], Fail> {
        // SAFETY: a live argument of the current call (see `Call`).
        unsafe { key.read(self.env, self.args[i]) }?;
        Ok(key.as_bytes())
    }

    /// Argument `i` as a Web Locks name.
    fn name(&self, i: usize) -> Result<Name, Fail> {
        // SAFETY: a live argument of the current call (see `Call`).
        Ok(unsafe { Name::from_value(self.env, self.args[i]) }?)
    }

    /// Argument `i` as an array of keys.
    fn keys(&self, i: usize) -> Result<Vec<Key>, Fail> {
        let (env, v) = (self.env, self.args[i]);
        let len = self
            .array_len(v)
            .ok_or(Fail::Type("keys must be an array"))?;
        let mut keys = Vec::with_capacity(len as usize);
        for i in 0..len {
            let item = self.element(v, i)?;
            let mut key = Key::new();
            // SAFETY: an element of a live array, kept alive by the handle scope of this call.
            unsafe { key.read(env, item) }?;
            keys.push(key);
        }
        Ok(keys)
    }

    /// The length of `v` if it is an array.
    fn array_len(&self, v: sys::napi_value) -> Option<u32> {
        let mut is_array = false;
        let mut len = 0u32;
        // SAFETY: plain queries on a live value.
        unsafe {
            sys::napi_is_array(self.env, v, &mut is_array);
            if !is_array {
                return None;
            }
            sys::napi_get_array_length(self.env, v, &mut len);
        }
        Some(len)
    }

    fn element(&self, v: sys::napi_value, i: u32) -> Result<sys::napi_value, Fail> {
        let mut item = ptr::null_mut();
        // SAFETY: an element read of a live array.
        if unsafe { sys::napi_get_element(self.env, v, i, &mut item) } != sys::Status::napi_ok {
            return Err(Fail::Error("reading an element of an array failed".into()));
        }
        Ok(item)
    }

    /// Argument `i` as a number, if it is one. An argument the caller left out is none,
    /// without asking Node-API (a plain `lock(key)` passes no timeout).
    #[inline]
    fn number(&self, i: usize) -> Option<f64> {
        if i < self.argc {
            number(self.env, self.args[i])
        } else {
            None
        }
    }

    /// Argument `i` as milliseconds: a finite number >= 0, or anything else for none.
    fn millis(&self, i: usize) -> Option<Duration> {
        status::timeout(self.number(i))
    }

    /// Argument `i` as how long an async acquire may wait: milliseconds (see [`Self::millis`]),
    /// or anything else for no limit. The core's future then ends the wait itself (`TimedOut`),
    /// so that the core sees a timeout as a timeout, not as a cancelled wait.
    fn deadline(&self, i: usize) -> Wait {
        self.millis(i).map_or(Wait::Forever, Wait::For)
    }

    /// Argument `i` as a slot number.
    fn slot(&self, i: usize) -> u32 {
        self.number(i)
            .filter(|n| (1.0..=f64::from(u32::MAX)).contains(n))
            .map_or(0, |n| n as u32)
    }

    /// Argument `i` as a mode: 1 for shared, anything else exclusive.
    fn mode(&self, i: usize) -> Mode {
        if self.number(i) == Some(1.0) {
            Mode::Shared
        } else {
            Mode::Exclusive
        }
    }

    /// Arguments `i..i + 3` as the mode, the lease (ms) and the owner (a safe integer >= 1;
    /// `lib/owners.js` maps owner values to these numbers).
    fn options(&self, i: usize) -> LockOptions {
        let mut opts = LockOptions::new().mode(self.mode(i));
        if let Some(lease) = self.millis(i + 1) {
            opts = opts.lease(lease);
        }
        if let Some(owner) = self
            .number(i + 2)
            .filter(|n| n.fract() == 0.0 && (1.0..=9_007_199_254_740_991.0).contains(n))
            .and_then(|n| Owner::new(n as u64))
        {
            opts = opts.owner(owner);
        }
        opts
    }

    /// Arguments `i..i + 2` as a weighted acquire's options: the weight (units to take; a
    /// number that is no whole `u32` reads as 0, which the core refuses) and the lease (ms).
    /// Only the semaphore's calls read a weight, so a lock's acquires keep their arguments.
    fn weighted(&self, i: usize) -> LockOptions {
        let weight = self
            .number(i)
            .filter(|n| n.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(n))
            .map_or(0, |n| n as u32);
        let opts = LockOptions::new().weight(weight);
        match self.millis(i + 1) {
            Some(lease) => opts.lease(lease),
            None => opts,
        }
    }

    /// Argument `i` as the modes of `n` keys: one number for all of them, an array of one per
    /// key, or anything else for all exclusive.
    fn modes(&self, i: usize, n: usize) -> Result<Vec<Mode>, Fail> {
        let v = self.args[i];
        if let Some(len) = self.array_len(v) {
            if len as usize != n {
                return Err(Fail::Type("modes must have one entry per key"));
            }
            return (0..len)
                .map(|j| {
                    let m = number(self.env, self.element(v, j)?);
                    Ok(if m == Some(1.0) {
                        Mode::Shared
                    } else {
                        Mode::Exclusive
                    })
                })
                .collect();
        }
        Ok(vec![self.mode(i); n])
    }
}

fn number(env: sys::napi_env, v: sys::napi_value) -> Option<f64> {
    let mut n = f64::NAN;
    // SAFETY: a plain read of a live value; it fails (and we return None) for a non-number.
    let status = unsafe { sys::napi_get_value_double(env, v, &mut n) };
    (status == sys::Status::napi_ok).then_some(n)
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
        // `Rc<Handle>` that the lock's external owns, and the function keeps the external alive,
        // so the handle is alive while the function runs.
        let lock = unsafe { &*data.cast::<Handle>() };
        let call = Call {
            env,
            lock,
            args: &argv,
            argc,
        };
        match catch_unwind(AssertUnwindSafe(|| body(&call))) {
            Ok(outcome) => outcome,
            Err(panic) => Err(Fail::Error(panic_message(panic.as_ref()))),
        }
    };
    // A wake-up of this thread that the result does not report goes by the event loop.
    if !matches!(outcome, Ok(Ret::Status(code) | Ret::Released(code)) if code & status::LOCAL_WAKE != 0)
    {
        crate::reactor::flush_local();
    }
    let mut result = ptr::null_mut();
    // SAFETY: plain value creation and exception throwing in the current environment.
    unsafe {
        match outcome {
            Ok(Ret::Bool(b)) => {
                sys::napi_get_boolean(env, b, &mut result);
            }
            Ok(Ret::Status(n)) => {
                sys::napi_create_uint32(env, n, &mut result);
            }
            Ok(Ret::Released(0) | Ret::Taken) => {}
            Ok(Ret::Released(n)) => {
                sys::napi_create_uint32(env, n, &mut result);
            }
            Ok(Ret::Int(n)) => {
                sys::napi_create_int32(env, n, &mut result);
            }
            Ok(Ret::Number(n)) => {
                sys::napi_create_double(env, n, &mut result);
            }
            Ok(Ret::Value(v)) => result = v,
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

fn check(status: sys::napi_status) -> Result<(), Fail> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Fail::Error(format!("a Node-API call failed ({status})")))
    }
}

/// Starts `fut` as a waiter (a future that stores what it acquires and reports its record):
/// the acquire's result (see the module docs). The caller counted it on `live` before it made
/// `fut` (see [`reactor::start`]).
fn start_waiter(live: reactor::Liveness, fut: impl Future<Output = Record> + 'static) -> Outcome {
    Ok(match reactor::start(Box::pin(fut), live)? {
        Started::Done(record) => acquired(record),
        Started::Waiting(id) => {
            crate::out::put_waiter(id);
            Ret::Int(0)
        }
    })
}

/// Stores a keyed acquire's outcome in `lock`'s slab.
fn stored_one(lock: &Handle, got: keylock_core::Result<Acquisition>) -> Record {
    match lock {
        Handle::Keyed(k) => k.stored(got),
        Handle::Rw(_) => locks::failure(&keylock_core::Error::InvalidArgument("not a keyed lock")),
    }
}

/// Stores a multi-key acquire's outcome in `lock`'s slab.
fn stored_many(lock: &Handle, got: keylock_core::Result<Vec<Acquisition>>) -> Record {
    match lock {
        Handle::Keyed(k) => k.stored_many(got),
        Handle::Rw(_) => locks::failure(&keylock_core::Error::InvalidArgument("not a keyed lock")),
    }
}

/// The keys and modes of a multi-key acquire: arguments 0 (keys) and 1 (modes).
fn keys_and_modes<const N: usize>(c: &Call<'_, N>) -> Result<(Vec<Key>, Vec<Mode>), Fail> {
    let keys = c.keys(0)?;
    let modes = c.modes(1, keys.len())?;
    Ok((keys, modes))
}

fn pairs<'k>(keys: &'k [Key], modes: &[Mode]) -> Vec<(LockKey<'k>, Mode)> {
    keys.iter()
        .zip(modes)
        .map(|(k, &m)| (LockKey::new(k.as_bytes()), m))
        .collect()
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
                let body = |$c: &Call<'_, $n>| -> Outcome { $body };
                // SAFETY: Node-API calls this with a valid environment and callback info.
                unsafe { entry::<$n>(env, info, body) }
            }
        )*
    };
}

entry_points! {
    /// `tryLock(key)`: an exclusive plain acquire if the key is free now.
    fn try_lock[1](c) {
        let opts = LockOptions::new().wait(Wait::No);
        let mut key = Key::new();
        Ok(acquired(c.keyed()?.acquire(c.key(0, &mut key)?, &opts)))
    }
    /// `tryLockWith(key, mode, leaseMs, owner)`.
    fn try_lock_with[4](c) {
        let opts = c.options(1).wait(Wait::No);
        let mut key = Key::new();
        Ok(acquired(c.keyed()?.acquire(c.key(0, &mut key)?, &opts)))
    }
    /// `lockSync(key, mode, leaseMs, owner, timeoutMs)`: blocks this thread.
    fn lock_sync[5](c) {
        let wait = c.millis(4).map_or(Wait::Forever, Wait::For);
        let opts = c.options(1).wait(wait);
        let mut key = Key::new();
        Ok(acquired(c.keyed()?.acquire(c.key(0, &mut key)?, &opts)))
    }
    /// `lock(key, timeoutMs)`: an exclusive plain acquire (no lease, no owner) that waits at
    /// most `timeoutMs` (none: no limit). The slot if the key's lock word alone grants it now
    /// (the core's `try_acquire_fast`: no future is made); otherwise a waiter, whose first poll
    /// takes the core's full path once (which still grants at once a free key that has no lock
    /// word yet). So a free key costs this one call, and a held one no second attempt. A lock
    /// object with metrics has no fast path: every acquire takes the full path, which counts it.
    fn lock[2](c) {
        let k = c.keyed()?;
        let mut key = Key::new();
        let key = LockKey::new(c.key(0, &mut key)?);
        // Counted once, before the fast attempt, and still counted as the waiter if it fails.
        k.live.enter();
        if let Some(acq) = k.core.try_acquire_fast(key, Mode::Exclusive) {
            return Ok(acquired(k.live.settle(k.stored(Ok(acq)))));
        }
        // The time limit is read only for a wait (reading it has no effect to keep in order).
        let opts = LockOptions::new().wait(c.deadline(1));
        let fut = Arc::clone(&k.core).acquire_async(key, &opts);
        let lock = c.arc();
        start_waiter(k.live.clone(), async move { stored_one(&lock, fut.await) })
    }
    /// `lockAsync(key, mode, leaseMs, owner, timeoutMs)`: the core ends the wait after
    /// `timeoutMs` (none: no limit).
    fn lock_async[5](c) {
        let k = c.keyed()?;
        let mut key = Key::new();
        let key = c.key(0, &mut key)?;
        let opts = c.options(1).wait(c.deadline(4));
        k.live.enter();
        let fut = Arc::clone(&k.core).acquire_async(LockKey::new(key), &opts);
        let lock = c.arc();
        start_waiter(k.live.clone(), async move { stored_one(&lock, fut.await) })
    }
    /// `tryAcquire(key, weight, leaseMs)`: `weight` units of `key` if they can be taken now
    /// (a semaphore's; a lock refuses every weight but 1).
    fn try_acquire[3](c) {
        let opts = c.weighted(1).wait(Wait::No);
        let mut key = Key::new();
        Ok(acquired(c.keyed()?.acquire(c.key(0, &mut key)?, &opts)))
    }
    /// `acquireAsync(key, weight, leaseMs, timeoutMs)`: waits for `weight` units of `key`, at
    /// most `timeoutMs` (none: no limit).
    fn acquire_async[4](c) {
        let k = c.keyed()?;
        let mut key = Key::new();
        let key = c.key(0, &mut key)?;
        let opts = c.weighted(1).wait(c.deadline(3));
        k.live.enter();
        let fut = Arc::clone(&k.core).acquire_async(LockKey::new(key), &opts);
        let lock = c.arc();
        start_waiter(k.live.clone(), async move { stored_one(&lock, fut.await) })
    }
    /// `tryLockMany(keys, modes, leaseMs, owner)`: all now or none.
    fn try_lock_many[4](c) {
        let (keys, modes) = keys_and_modes(c)?;
        let opts = c.options(1).wait(Wait::No);
        let k = c.keyed()?;
        Ok(acquired(k.acquire_many(&pairs(&keys, &modes), &opts)))
    }
    /// `lockManySync(keys, modes, leaseMs, owner, timeoutMs)`.
    fn lock_many_sync[5](c) {
        let (keys, modes) = keys_and_modes(c)?;
        let wait = c.millis(4).map_or(Wait::Forever, Wait::For);
        let opts = c.options(1).wait(wait);
        let k = c.keyed()?;
        Ok(acquired(k.acquire_many(&pairs(&keys, &modes), &opts)))
    }
    /// `lockManyAsync(keys, modes, leaseMs, owner, timeoutMs)`.
    fn lock_many_async[5](c) {
        let (keys, modes) = keys_and_modes(c)?;
        let k = c.keyed()?;
        let opts = c.options(1).wait(c.deadline(4));
        k.live.enter();
        let fut = Arc::clone(&k.core).acquire_many_async(&pairs(&keys, &modes), &opts);
        let lock = c.arc();
        start_waiter(k.live.clone(), async move { stored_many(&lock, fut.await) })
    }
    /// `release(slot)`: a status, `undefined` for 0 (see [`Ret::Released`]).
    fn release[1](c) {
        let slot = c.slot(0);
        Ok(Ret::Released(match c.lock {
            Handle::Keyed(k) => k.release(slot),
            Handle::Rw(r) => r.release(slot),
        }))
    }
    /// `isCurrent(slot)`.
    fn is_current[1](c) {
        let k = c.keyed()?;
        match k.is_current(c.slot(0)) {
            Ok(b) => Ok(Ret::Bool(b)),
            Err(e) => Ok(Ret::Status(status::code(&e))),
        }
    }
    /// `leaseRemaining(slot)`: milliseconds, -1 without a lease, -2 for a slot that holds
    /// nothing.
    fn lease_remaining[1](c) {
        let k = c.keyed()?;
        let left = k.with_acquisition(c.slot(0), |a| {
            a.lease_deadline().map_or(-1.0, |t| {
                t.saturating_duration_since(std::time::Instant::now()).as_secs_f64() * 1000.0
            })
        });
        Ok(Ret::Number(left.unwrap_or(-2.0)))
    }
    /// `extend(slot, leaseMs)`: a status.
    fn extend[2](c) {
        let lease = c.millis(1).ok_or(Fail::Type("a lease is a number of milliseconds >= 0"))?;
        Ok(Ret::Status(c.keyed()?.extend(c.slot(0), lease)))
    }
    /// `watchLost(slot, id)`: 0 if the slot's lock cannot be lost behind its holder's back (an
    /// in-process or shared-memory scope, or a slot that holds nothing), 2 if it is lost
    /// already, else 1: a lost notice for `id` comes to this thread if it is lost later.
    fn watch_lost[2](c) {
        let signals = c.keyed()?.lost_signals(c.slot(0));
        if signals.is_empty() {
            return Ok(Ret::Int(0));
        }
        if signals.iter().any(keylock_core::LostSignal::is_lost) {
            return Ok(Ret::Int(2));
        }
        let (id, mailbox) = (c.slot(1), reactor::mailbox()?);
        for signal in signals {
            let mailbox = mailbox.clone();
            signal.on_lost(move || mailbox.post_lost(id));
        }
        // A loss between the look above and the registration posted from this thread.
        reactor::flush_local();
        Ok(Ret::Int(1))
    }
    /// `fences(slot)`: the slot's fences as bigints, or `undefined` for a slot that holds
    /// nothing.
    fn fences[1](c) {
        let Some(fences) = c.keyed()?.fences(c.slot(0)) else {
            return Ok(Ret::Value(undefined(c.env)?));
        };
        let mut array = ptr::null_mut();
        // SAFETY: value creation in the current environment.
        unsafe {
            check(sys::napi_create_array_with_length(c.env, fences.len(), &mut array))?;
            for (i, f) in fences.iter().enumerate() {
                let mut n = ptr::null_mut();
                check(sys::napi_create_bigint_uint64(c.env, *f, &mut n))?;
                check(sys::napi_set_element(c.env, array, i as u32, n))?;
            }
        }
        Ok(Ret::Value(array))
    }
    /// `forceUnlock(key)`: 1 if the key was held, else 0, with [`status::LOCAL_WAKE`] added
    /// when that woke a waiter of this thread.
    fn force_unlock[1](c) {
        let k = c.keyed()?;
        let mut key = Key::new();
        let key = c.key(0, &mut key)?;
        match k.core.force_unlock(LockKey::new(key)) {
            Ok(held) => Ok(Ret::Status(status::with_local_wake(u32::from(held)))),
            Err(e) => Ok(Ret::Int(-(status::code(&e) as i32))),
        }
    }
    /// `isLocked(key)`: a boolean, or minus a status when the scope cannot tell.
    fn is_locked[1](c) {
        let k = c.keyed()?;
        let mut key = Key::new();
        let key = c.key(0, &mut key)?;
        match k.core.is_locked(LockKey::new(key)) {
            Ok(b) => Ok(Ret::Bool(b)),
            Err(e) => Ok(Ret::Int(-(status::code(&e) as i32))),
        }
    }
    /// `info(key)`: `null` when free, else the array `records::INFO` declares, or minus a
    /// status when the scope cannot tell.
    fn info[1](c) {
        let k = c.keyed()?;
        let mut key = Key::new();
        let key = c.key(0, &mut key)?;
        match k.core.info(LockKey::new(key)) {
            Ok(info) => Ok(Ret::Value(info_value(c.env, info.as_ref())?)),
            Err(e) => Ok(Ret::Int(-(status::code(&e) as i32))),
        }
    }
    /// `webRequest(name, mode, flags, request)`: a Web Locks request (`flags`: 1 ifAvailable,
    /// 2 steal) on this lock's names, recorded for `query()` as this thread's request number
    /// `request`. The result is an acquire's; `-1` (taken) for an `ifAvailable` request that
    /// cannot be granted now.
    fn web_request[4](c) {
        let k = c.keyed()?;
        let name = c.name(0)?;
        let mode = c.mode(1);
        let flags = c.number(2).unwrap_or(0.0) as u32;
        let (if_available, steal) = (flags & 1 != 0, flags & 2 != 0);
        let request = c.number(3).unwrap_or(0.0) as u32;
        let asking = Asking {
            core: &k.core,
            key: &name.bytes,
            name: name.units.clone(),
            mode,
            client: crate::out::client_id(),
            mailbox: reactor::mailbox()?,
            request,
        };
        let key = LockKey { space: KeySpace::Names, bytes: &name.bytes };
        let core = &k.core;
        // Counted before it can be granted or queued; uncounted below if it is neither.
        k.live.enter();
        let (ticket, began) = weblocks::enqueue(asking, steal, || {
            let now_opts = LockOptions::new().mode(mode).wait(Wait::No);
            // A steal goes ahead of every queued request (the core's steal); a scope without
            // that step frees the name and then asks for it like any request.
            let now = if steal {
                core.steal(key, &now_opts)
            } else if k.made.metrics && !if_available {
                // A lock object with metrics tries first in its own async acquire, below; a try
                // here would count a failed try that the request never made.
                Err(keylock_core::Error::WouldBlock)
            } else {
                core.acquire(key, &now_opts)
            };
            match now {
                Ok(acq) => Began::Held(WebStart::Now(acq)),
                Err(keylock_core::Error::WouldBlock) if if_available => {
                    Began::Declined(WebStart::Declined)
                }
                Err(keylock_core::Error::WouldBlock) => {
                    // Enqueued by the first poll, under the registry's mutex.
                    let mut fut = Arc::clone(core).acquire_async(key, &LockOptions::new().mode(mode));
                    match reactor::poll_once(fut.as_mut()) {
                        Some(Ok(acq)) => Began::Held(WebStart::Now(acq)),
                        Some(Err(e)) => Began::Declined(WebStart::Failed(e)),
                        None => Began::Waiting(WebStart::Wait(fut)),
                    }
                }
                Err(e) => Began::Declined(WebStart::Failed(e)),
            }
        });
        match (began, ticket) {
            (WebStart::Now(acq), Some(ticket)) => {
                Ok(acquired(k.live.settle(k.store(Holding::Web { acq, _ticket: ticket }))))
            }
            (WebStart::Wait(fut), Some(ticket)) => {
                let lock = c.arc();
                let core = Arc::clone(&k.core);
                start_waiter(k.live.clone(), async move {
                    match fut.await {
                        Ok(acq) => {
                            let stolen = weblocks::granted(&ticket, &core, &acq);
                            let mut record = match &*lock {
                                Handle::Keyed(k) => k.store(Holding::Web { acq, _ticket: ticket }),
                                Handle::Rw(_) => unreachable_record(),
                            };
                            if stolen {
                                record[3] |= reactor::STOLEN;
                            }
                            record
                        }
                        Err(e) => locks::failure(&e),
                    }
                })
            }
            // Neither held nor waiting: uncounted.
            (WebStart::Declined, _) => {
                k.live.leave();
                Ok(Ret::Int(-(status::WOULD_BLOCK as i32)))
            }
            (WebStart::Failed(e), _) => {
                k.live.leave();
                Ok(Ret::Int(-(status::code(&e) as i32)))
            }
            // `enqueue` gives a ticket exactly for held and waiting requests.
            (_, None) => {
                k.live.leave();
                Err(Fail::Error("keylock: a Web Locks request without a ticket".into()))
            }
        }
    }
    /// `webQuery()`: the requests on this lock, in request order, each an array laid out as
    /// `records::WEB_REQUEST` declares.
    fn web_query[0](c) {
        let k = c.keyed()?;
        use crate::records::web_request;
        let snapshot = weblocks::snapshot(&k.core);
        let env = c.env;
        let mut array = ptr::null_mut();
        // SAFETY: value creation in the current environment.
        unsafe {
            check(sys::napi_create_array_with_length(env, snapshot.len(), &mut array))?;
            for (i, r) in snapshot.iter().enumerate() {
                let mut entry = ptr::null_mut();
                check(sys::napi_create_array_with_length(env, web_request::LEN, &mut entry))?;
                let mut name = ptr::null_mut();
                check(sys::napi_create_string_utf16(env, r.name.as_ptr(), r.name.len() as isize, &mut name))?;
                let mut client = ptr::null_mut();
                check(sys::napi_create_string_utf8(env, r.client.as_ptr().cast(), r.client.len() as isize, &mut client))?;
                let mut shared = ptr::null_mut();
                check(sys::napi_get_boolean(env, r.mode == Mode::Shared, &mut shared))?;
                let mut held = ptr::null_mut();
                check(sys::napi_get_boolean(env, r.held, &mut held))?;
                let fields = [
                    (web_request::NAME, name),
                    (web_request::SHARED, shared),
                    (web_request::CLIENT_ID, client),
                    (web_request::HELD, held),
                ];
                for (j, v) in fields {
                    check(sys::napi_set_element(env, entry, j as u32, v))?;
                }
                check(sys::napi_set_element(env, array, i as u32, entry))?;
            }
        }
        Ok(Ret::Value(array))
    }
    /// `tryRead()`.
    fn try_read[0](c) {
        let r = c.rw()?;
        Ok(acquired(r.live.counted(|| r.stored_read(r.core.read_with_owned(Wait::No)))))
    }
    /// `tryWrite()`.
    fn try_write[0](c) {
        let r = c.rw()?;
        Ok(acquired(r.live.counted(|| r.stored_write(r.core.write_with_owned(Wait::No)))))
    }
    /// `readSync(timeoutMs)`.
    fn read_sync[1](c) {
        let r = c.rw()?;
        let wait = c.millis(0).map_or(Wait::Forever, Wait::For);
        Ok(acquired(r.live.counted(|| r.stored_read(r.core.read_with_owned(wait)))))
    }
    /// `writeSync(timeoutMs)`.
    fn write_sync[1](c) {
        let r = c.rw()?;
        let wait = c.millis(0).map_or(Wait::Forever, Wait::For);
        Ok(acquired(r.live.counted(|| r.stored_write(r.core.write_with_owned(wait)))))
    }
    /// `readAsync()`.
    fn read_async[0](c) {
        let r = c.rw()?;
        r.live.enter();
        let fut = r.core.read_async_owned();
        let lock = c.arc();
        start_waiter(r.live.clone(), async move {
            let guard = fut.await;
            match &*lock {
                Handle::Rw(r) => r.stored_read(Ok(guard)),
                Handle::Keyed(_) => unreachable_record(),
            }
        })
    }
    /// `writeAsync()`.
    fn write_async[0](c) {
        let r = c.rw()?;
        r.live.enter();
        let fut = r.core.write_async_owned();
        let lock = c.arc();
        start_waiter(r.live.clone(), async move {
            let guard = fut.await;
            match &*lock {
                Handle::Rw(r) => r.stored_write(Ok(guard)),
                Handle::Keyed(_) => unreachable_record(),
            }
        })
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

/// How a Web Locks request began, inside the registry's mutex.
enum WebStart {
    Now(Acquisition),
    Wait(keylock_core::scope::AcquireFuture),
    Declined,
    Failed(keylock_core::Error),
}

impl std::fmt::Debug for WebStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WebStart::Now(_) => "Now",
            WebStart::Wait(_) => "Wait",
            WebStart::Declined => "Declined",
            WebStart::Failed(_) => "Failed",
        })
    }
}

/// The record of a waiter whose handle is of the other kind (never made).
fn unreachable_record() -> Record {
    locks::failure(&keylock_core::Error::InvalidArgument(
        "a lock of another kind",
    ))
}

fn undefined(env: sys::napi_env) -> Result<sys::napi_value, Fail> {
    let mut v = ptr::null_mut();
    // SAFETY: value creation in the current environment.
    check(unsafe { sys::napi_get_undefined(env, &mut v) })?;
    Ok(v)
}

/// `info(key)`'s value (see [`info`]): `null`, or an array laid out as `records::INFO`.
fn info_value(
    env: sys::napi_env,
    info: Option<&keylock_core::LockInfo>,
) -> Result<sys::napi_value, Fail> {
    use crate::records::info as field;
    let mut v = ptr::null_mut();
    let Some(info) = info else {
        // SAFETY: value creation in the current environment.
        check(unsafe { sys::napi_get_null(env, &mut v) })?;
        return Ok(v);
    };
    let lease = info
        .lease_remaining
        .map_or(-1.0, |d| d.as_secs_f64() * 1000.0);
    let owner = info.owner.map_or(0.0, |o| o.get() as f64);
    let numbers = [
        (field::HOLDERS, f64::from(info.holders)),
        (field::HOLDS, f64::from(info.holds)),
        (field::OWNER, owner),
        (field::LEASE_REMAINING, lease),
        (field::WAITERS, info.waiters as f64),
        (field::UNITS, f64::from(info.units)),
    ];
    // SAFETY: value creation in the current environment.
    unsafe {
        check(sys::napi_create_array_with_length(env, field::LEN, &mut v))?;
        let mut fence = ptr::null_mut();
        check(sys::napi_create_bigint_uint64(env, info.fence, &mut fence))?;
        check(sys::napi_set_element(env, v, field::FENCE as u32, fence))?;
        let mut shared = ptr::null_mut();
        check(sys::napi_get_boolean(
            env,
            info.mode == Mode::Shared,
            &mut shared,
        ))?;
        check(sys::napi_set_element(env, v, field::SHARED as u32, shared))?;
        for (i, n) in numbers {
            let mut x = ptr::null_mut();
            check(sys::napi_create_double(env, n, &mut x))?;
            check(sys::napi_set_element(env, v, i as u32, x))?;
        }
    }
    Ok(v)
}

type RawFn = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// The entry points of a `KeyPool` or `StripedLock`, with their JavaScript names.
const KEYED: &[(&CStr, RawFn)] = &[
    (c"tryLock", try_lock),
    (c"tryLockWith", try_lock_with),
    (c"lockSync", lock_sync),
    (c"lock", lock),
    (c"lockAsync", lock_async),
    (c"tryAcquire", try_acquire),
    (c"acquireAsync", acquire_async),
    (c"tryLockMany", try_lock_many),
    (c"lockManySync", lock_many_sync),
    (c"lockManyAsync", lock_many_async),
    (c"release", release),
    (c"isCurrent", is_current),
    (c"watchLost", watch_lost),
    (c"leaseRemaining", lease_remaining),
    (c"extend", extend),
    (c"fences", fences),
    (c"forceUnlock", force_unlock),
    (c"isLocked", is_locked),
    (c"info", info),
    (c"webRequest", web_request),
    (c"webQuery", web_query),
];

/// The entry points of an `RwLock`.
const RW: &[(&CStr, RawFn)] = &[
    (c"tryRead", try_read),
    (c"tryWrite", try_write),
    (c"readSync", read_sync),
    (c"writeSync", write_sync),
    (c"readAsync", read_async),
    (c"writeAsync", write_async),
    (c"release", release),
    (c"isLocked", rw_is_locked),
    (c"isWriteLocked", rw_is_write_locked),
];

/// `runReady()`: polls this thread's woken waiters and writes the records to dispatch to the
/// thread's records buffer (`crate::out`); returns how many it wrote. A full buffer means more
/// may be waiting: call again.
unsafe extern "C" fn run_ready(
    env: sys::napi_env,
    _info: sys::napi_callback_info,
) -> sys::napi_value {
    let n = match catch_unwind(|| crate::reactor::run_ready(crate::out::deliver)) {
        Ok(n) => n,
        Err(panic) => {
            // SAFETY: throwing in the current environment.
            unsafe { throw(env, false, &panic_message(panic.as_ref())) };
            return ptr::null_mut();
        }
    };
    let mut result = ptr::null_mut();
    // SAFETY: number creation in the current environment.
    unsafe { sys::napi_create_uint32(env, n, &mut result) };
    result
}

/// The `runReady` function (see [`run_ready`]): one per thread, made by `lib/waiting.js` at load.
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
        Handle::Keyed(_) => KEYED,
    };
    let handle = Rc::new(handle);
    let data = Rc::as_ptr(&handle).cast_mut().cast::<c_void>();
    let mut object = ptr::null_mut();
    // The properties are defined with `napi_define_properties`, all in one call: V8 keeps the
    // object's properties fast then (an inline load in optimized code), where setting them one
    // `napi_set_named_property` at a time turned an object of more than a dozen into a
    // dictionary (a generic lookup, about 80 instructions, for each `h.lock` or `h.release`).
    // test/fast-objects.test.js checks each kind of lock.
    let data_property = |utf8name: *const c_char, value| sys::napi_property_descriptor {
        utf8name,
        name: ptr::null_mut(),
        method: None,
        getter: None,
        setter: None,
        value,
        attributes: sys::PropertyAttributes::writable
            | sys::PropertyAttributes::enumerable
            | sys::PropertyAttributes::configurable,
        data: ptr::null_mut(),
    };
    let mut properties = Vec::with_capacity(fns.len() + 1);
    // SAFETY: value creation in the current environment; the names are NUL-terminated statics.
    // `data` stays valid while any function is reachable: each function keeps the external,
    // which owns the Rc, through a property that cannot be removed or replaced.
    unsafe {
        let external = handle::wrap(env, handle, native_bytes)?;
        properties.push(data_property(c"handle".as_ptr(), external));
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
                value: external,
                attributes: sys::PropertyAttributes::default,
                ..data_property(c"lock".as_ptr(), ptr::null_mut())
            };
            check(sys::napi_define_properties(env, func, 1, &keep))?;
            properties.push(data_property(name.as_ptr(), func));
        }
        check(sys::napi_create_object(env, &mut object))?;
        check(sys::napi_define_properties(
            env,
            object,
            properties.len(),
            properties.as_ptr(),
        ))?;
    }
    Ok(object)
}

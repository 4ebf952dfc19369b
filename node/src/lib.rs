//! The native half of the `keylock` Node.js package.
//!
//! This crate translates; it decides nothing about locking. Keys become byte slices by the rules
//! every front end shares ([`keys`]), outcomes become the core's status numbers (`status.rs`)
//! that `index.js` turns into `Error`s with a `code`, and async acquisitions run the core's owned futures on this thread's
//! event loop (`reactor.rs`). Locks of the same name are shared by every worker of the process
//! (`shared.rs`).
//!
//! JavaScript holds each lock as an opaque handle (`handle.rs`). The operations made once per
//! acquisition or release are plain Node-API functions (`raw.rs`), the rest are napi-rs exports
//! below. The public API (classes, guards, `withLock`, options, `AbortSignal`, `using`) is in
//! `index.js`.

mod handle;
pub mod keys;
mod locks;
mod raw;
mod reactor;
mod shared;
mod status;
mod thread;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use keylock_core::{RwLock, StripedLock};
use napi::bindgen_prelude::{Buffer, FromNapiValue, Function, Unknown};
use napi::{Env, Error, JsValue, Result, Status};
use napi_derive::napi;

use crate::keys::Key;
use crate::locks::{Handle, Held, Pool, SHARED_POOLS, SHARED_RWLOCKS, SHARED_STRIPED};
use crate::shared::{Presence, Shared};

/// The largest stripe count a `StripedLock` accepts.
#[napi]
pub const MAX_STRIPES: u32 = StripedLock::MAX_STRIPES as u32;

/// Hands a lock to JavaScript: an object of its per-operation functions plus `.handle`.
fn give(env: &Env, handle: Handle) -> Result<Unknown<'_>> {
    let bytes = native_bytes(&handle);
    // SAFETY: `env` is the current call's environment.
    unsafe {
        let value = raw::bind(env.raw(), handle, bytes)?;
        Unknown::from_napi_value(env.raw(), value)
    }
}

/// Memory a lock of this thread's own holds outside the JavaScript heap, as a hint for V8's
/// collector (shared locks live for the process and are not counted).
///
/// The core reports none of these, so they are estimates: a stripe is one cache-padded mutex
/// (128 bytes on x86-64), and an empty `KeyPool` measured 64 KiB of resident memory with this
/// core (256 shards). A pool's per-key entries are not counted.
fn native_bytes(handle: &Handle) -> usize {
    const STRIPE: usize = 128;
    const EMPTY_POOL: usize = 64 * 1024;
    match handle {
        Handle::Pool(h) if h.presence.is_none() => EMPTY_POOL,
        Handle::Striped(h) if h.presence.is_none() => h.core.stripes() * STRIPE,
        _ => 0,
    }
}

/// The handle behind a JavaScript value.
fn take<'a>(env: &Env, value: &'a Unknown<'_>) -> Result<&'a Handle> {
    // SAFETY: `value` is an argument of the current call, alive for `'a`.
    unsafe { handle::unwrap(env.raw(), value.raw()) }
        .ok_or_else(|| Error::new(Status::InvalidArg, "not a keylock handle"))
}

fn held<T>(shared: std::sync::Arc<Shared<T>>) -> Held<T>
where
    T: Send + Sync + std::fmt::Debug + 'static,
{
    Held {
        core: shared.core.clone(),
        presence: Some(Presence::join(&shared)),
    }
}

fn invalid(e: keylock_core::Error) -> Error {
    Error::new(Status::InvalidArg, e.to_string())
}

/// A new `KeyPool`.
#[napi(catch_unwind)]
pub fn pool_new(env: &Env) -> Result<Unknown<'_>> {
    give(env, Handle::Pool(Held::new(Pool::new())))
}

/// The process-wide `KeyPool` called `name`.
#[napi(catch_unwind)]
pub fn pool_shared(env: &Env, name: String) -> Result<Unknown<'_>> {
    let shared = SHARED_POOLS.get_or_insert(&name, || Ok::<_, Error>(Pool::new()))?;
    give(env, Handle::Pool(held(shared)))
}

/// A new `StripedLock` of `stripes` stripes (rounded up to a power of two).
#[napi(catch_unwind)]
pub fn striped_new(env: &Env, stripes: u32) -> Result<Unknown<'_>> {
    let core = StripedLock::new(stripes as usize).map_err(invalid)?;
    give(env, Handle::Striped(Held::new(core)))
}

/// The process-wide `StripedLock` called `name`, created with `stripes` stripes if new (the
/// caller compares the stripes of an existing one with what it asked for).
#[napi(catch_unwind)]
pub fn striped_shared(env: &Env, name: String, stripes: u32) -> Result<Unknown<'_>> {
    let shared = SHARED_STRIPED.get_or_insert(&name, || {
        StripedLock::new(stripes as usize).map_err(invalid)
    })?;
    give(env, Handle::Striped(held(shared)))
}

/// A new `RwLock`.
#[napi(catch_unwind)]
pub fn rw_new(env: &Env) -> Result<Unknown<'_>> {
    give(env, Handle::Rw(Held::new(RwLock::new())))
}

/// The process-wide `RwLock` called `name`.
#[napi(catch_unwind)]
pub fn rw_shared(env: &Env, name: String) -> Result<Unknown<'_>> {
    let shared = SHARED_RWLOCKS.get_or_insert(&name, || Ok::<_, Error>(RwLock::new()))?;
    give(env, Handle::Rw(held(shared)))
}

/// `pool.stats()`: counters of the core's `PoolStats` (numbers, exact below 2^53).
#[napi(object)]
#[derive(Debug, Clone, Copy)]
pub struct PoolStats {
    /// Keys held now.
    pub held: f64,
    /// Waiters queued now.
    pub waiting: f64,
    /// Keys that have an entry now (held, or awaited by someone); 0 once everything is released.
    pub entries_in_use: f64,
    /// Entries allocated (in use or kept for reuse): the pool's memory, in keys.
    pub entries_allocated: f64,
    /// An upper bound on the most entries in use at once so far.
    pub peak_held: f64,
    /// Acquisitions so far.
    pub acquisitions: f64,
    /// Acquisitions that had to wait.
    pub contended: f64,
}

fn pool<'a>(env: &Env, handle: &'a Unknown<'_>) -> Result<&'a Held<Pool>> {
    match take(env, handle)? {
        Handle::Pool(p) => Ok(p),
        _ => Err(Error::new(Status::InvalidArg, "not a KeyPool handle")),
    }
}

fn striped<'a>(env: &Env, handle: &'a Unknown<'_>) -> Result<&'a Held<StripedLock>> {
    match take(env, handle)? {
        Handle::Striped(s) => Ok(s),
        _ => Err(Error::new(Status::InvalidArg, "not a StripedLock handle")),
    }
}

/// Keys a pool holds now.
#[napi(catch_unwind)]
pub fn pool_size(env: &Env, handle: Unknown<'_>) -> Result<u32> {
    Ok(pool(env, &handle)?.core.len() as u32)
}

/// A pool's counters.
#[napi(catch_unwind)]
pub fn pool_stats(env: &Env, handle: Unknown<'_>) -> Result<PoolStats> {
    let s = pool(env, &handle)?.core.stats();
    Ok(PoolStats {
        held: s.held as f64,
        waiting: s.waiting as f64,
        entries_in_use: s.entries_in_use as f64,
        entries_allocated: s.entries_allocated as f64,
        peak_held: s.peak_held as f64,
        acquisitions: s.acquisitions as f64,
        contended: s.contended as f64,
    })
}

/// `striped.stats()`: the core's `StripedStats`.
#[napi(object)]
#[derive(Debug, Clone, Copy)]
pub struct StripedStats {
    /// The number of stripes.
    pub stripes: u32,
    /// Stripes held now.
    pub held: u32,
    /// Stripes with waiters queued now.
    pub waiting: u32,
}

/// Stripes a striped lock holds now.
#[napi(catch_unwind)]
pub fn striped_size(env: &Env, handle: Unknown<'_>) -> Result<u32> {
    Ok(striped(env, &handle)?.core.stats().held as u32)
}

/// A striped lock's counters.
#[napi(catch_unwind)]
pub fn striped_stats(env: &Env, handle: Unknown<'_>) -> Result<StripedStats> {
    let s = striped(env, &handle)?.core.stats();
    Ok(StripedStats {
        stripes: s.stripes as u32,
        held: s.held as u32,
        waiting: s.queued as u32,
    })
}

/// A striped lock's number of stripes.
#[napi(catch_unwind)]
pub fn striped_stripes(env: &Env, handle: Unknown<'_>) -> Result<u32> {
    Ok(striped(env, &handle)?.core.stripes() as u32)
}

/// The stripe `key` maps to.
#[napi(catch_unwind)]
pub fn striped_stripe_of(env: &Env, handle: Unknown<'_>, key: Unknown<'_>) -> Result<u32> {
    let key = Key::from_arg(env, &key)?;
    Ok(striped(env, &handle)?.core.stripe_of(key.as_bytes()) as u32)
}

/// The bytes `key` stands for (`keyBytes(key)`): what every lock compares, the same in C,
/// Python and Rust.
#[napi(catch_unwind)]
pub fn key_bytes(env: &Env, key: Unknown<'_>) -> Result<Buffer> {
    Ok(Key::from_arg(env, &key)?.as_bytes().to_vec().into())
}

/// keylock-core's status table: `[{ code, name, description }]` in number order. `index.js`
/// takes its status numbers and error codes from it.
#[napi(catch_unwind)]
pub fn statuses() -> Vec<status::StatusInfo> {
    status::statuses()
}

/// Added to a release's status when it woke a waiter of the calling thread (see `index.js`).
#[napi]
pub const LOCAL_WAKE: u32 = status::LOCAL_WAKE;

/// Set in a waiter id handed to the dispatcher when that waiter failed (a panic while polling).
#[napi]
pub const FAILED_BIT: u32 = reactor::FAILED_BIT;

/// Installs this thread's dispatcher: `dispatch(ids)` receives the ids of waiters that acquired
/// their lock (ids with bit 31 set failed: a panic while polling them).
#[napi(catch_unwind)]
pub fn init(env: Env, dispatch: Function<'_, Vec<u32>, Unknown<'static>>) -> Result<()> {
    reactor::init(&env, dispatch)
}

/// The function that polls the waiters of this thread that were woken and returns the ids to
/// dispatch (called after a release that reported a wake-up of this same thread); a plain
/// Node-API function, like the per-lock operations.
#[napi(catch_unwind)]
pub fn run_ready_function(env: &Env) -> Result<Unknown<'_>> {
    // SAFETY: `env` is the current call's environment.
    unsafe {
        let f = raw::run_ready_function(env.raw())?;
        Unknown::from_napi_value(env.raw(), f)
    }
}

/// Cancels a pending waiter: `true` when it was still pending (it then holds nothing).
#[napi(catch_unwind)]
pub fn cancel(id: u32) -> Result<bool> {
    reactor::cancel(id)
}

/// This thread's waiters: `[pending, keeping the event loop alive]` (for tests).
#[napi(catch_unwind)]
pub fn waiter_counts() -> Result<Vec<u32>> {
    reactor::counts().map(Vec::from)
}

/// Panics inside a synchronous export (for tests: it must throw, not crash).
#[napi(catch_unwind)]
pub fn testing_panic() {
    panic!("keylock: deliberate panic for a test");
}

/// Starts a waiter whose future panics when it is polled the second time (for tests: its
/// promise must reject, and the process must go on).
#[napi(catch_unwind)]
pub fn testing_panic_waiter() -> Result<u32> {
    reactor::start(Box::pin(PanicOnSecondPoll { polled: false }), None)
}

struct PanicOnSecondPoll {
    polled: bool,
}

impl Future for PanicOnSecondPoll {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.polled {
            panic!("keylock: deliberate panic in a waiter for a test");
        }
        self.polled = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

//! The native half of the `keylock` Node.js package.
//!
//! This crate translates; it decides nothing about locking. Every keyed lock is an
//! `Arc<dyn KeyedLock>` from `keylock_core::open_with`, so a scope the core gains (shared
//! memory, Redis) works here by its name alone. Keys become byte slices by the rules every front
//! end shares ([`keys`]), outcomes become the core's status numbers (`status.rs`) that
//! `lib/errors.js` turns into `Error`s with a `code`, acquisitions are kept in their lock's slab
//! (`locks.rs`, `slab.rs`) so that a guard releases exactly its own, and async acquisitions run
//! the core's futures on this thread's event loop (`reactor.rs`). Locks of the same name are
//! shared by every worker of the process (`shared.rs`); Web Locks requests are recorded for
//! `query()` in `weblocks.rs`.
//!
//! JavaScript holds each lock as an object of plain Node-API functions (`raw.rs`), one per
//! operation made once per acquisition or release; the rest are napi-rs exports below. The
//! public API (classes, guards, `withLock`, options, `AbortSignal`, `using`, Web Locks) is in
//! `lib/` (gathered by `index.js`), which loads this addon through `binding.js`.

mod handle;
pub mod keys;
mod locks;
mod metrics;
mod out;
mod raw;
mod reactor;
mod records;
mod shared;
mod slab;
mod status;
mod thread;
mod weblocks;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use keylock_core::{KeyedLock, LockKey, OpenOptions, RwLock, StripedLock};
use napi::bindgen_prelude::{FromNapiValue, Function, Unknown};
use napi::{Env, Error, JsValue, Result, Status};
use napi_derive::napi;

use crate::keys::Key;
use crate::locks::{Core, Handle, Keyed, Made, Rw, SHARED_POOLS, SHARED_RWLOCKS, SHARED_STRIPED};
use crate::reactor::Liveness;
use crate::shared::Presence;

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
/// collector (locks shared with other threads or processes are not counted).
///
/// The core reports none of these, so they are estimates: a stripe is one cache-padded lock
/// (128 bytes on x86-64); a pool's shards are made as keys arrive, and its per-key entries are
/// not counted.
fn native_bytes(handle: &Handle) -> usize {
    const STRIPE: usize = 128;
    const EMPTY_POOL: usize = 4 * 1024;
    match handle {
        Handle::Keyed(k) if matches!(k.live, Liveness::Private) => match k.made.stripes {
            Some(n) => n * STRIPE,
            None => EMPTY_POOL,
        },
        _ => 0,
    }
}

/// The handle behind a JavaScript value.
fn take<'a>(env: &Env, value: &'a Unknown<'_>) -> Result<&'a Handle> {
    // SAFETY: `value` is an argument of the current call, alive for `'a`.
    unsafe { handle::unwrap(env.raw(), value.raw()) }
        .ok_or_else(|| Error::new(Status::InvalidArg, "not a keylock handle"))
}

fn keyed<'a>(env: &Env, value: &'a Unknown<'_>) -> Result<&'a Keyed> {
    match take(env, value)? {
        Handle::Keyed(k) => Ok(k),
        Handle::Rw(_) => Err(Error::new(Status::InvalidArg, "not a keyed lock handle")),
    }
}

/// A core error as a JavaScript error whose `code` is its status's name (`lib/errors.js` makes it a
/// `KeylockError`).
fn core_error(e: &keylock_core::Error) -> Error {
    Error::new(
        Status::GenericFailure,
        format!(
            "{}\u{0}{}",
            e.status().name(),
            keylock_core::redact_scope_name(&e.to_string())
        ),
    )
}

/// What the JavaScript constructors pass: the options of `new KeyPool({...})`,
/// `new StripedLock(n, {...})`, `new Semaphore(permits)` and their `open` and `shared` forms.
#[napi(object)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MakeOptions {
    /// A `StripedLock` of this many stripes (else a `KeyPool`).
    pub stripes: Option<u32>,
    /// Reentrant: owners raise a hold count.
    pub reentrant: Option<bool>,
    /// Strict FIFO hand-off per key.
    pub fifo: Option<bool>,
    /// Fixed-size scopes (shared memory): the most keys held or awaited at once.
    pub capacity: Option<u32>,
    /// A keyed semaphore with this many units per key (`new Semaphore(permits)`).
    pub permits: Option<u32>,
    /// The core's metrics on the lock object (`OpenOptions::metrics`; `metrics()` reads them).
    pub metrics: Option<bool>,
}

impl MakeOptions {
    fn made(&self) -> Made {
        Made {
            stripes: self.stripes.map(|n| n as usize),
            reentrant: self.reentrant.unwrap_or(false),
            fifo: self.fifo.unwrap_or(false),
            metrics: self.metrics.unwrap_or(false),
        }
    }

    fn open(&self, name: &str) -> Result<(Core, Made)> {
        let made = self.made();
        let mut opts = OpenOptions::default();
        opts.stripes = made.stripes;
        opts.reentrant = made.reentrant;
        opts.fifo = made.fifo;
        opts.capacity = self.capacity.map(|n| n as usize);
        opts.permits = self.permits;
        opts.metrics = made.metrics;
        let core = keylock_core::open_with(name, &opts).map_err(|e| core_error(&e))?;
        // A striped lock reports the stripe count it has (a power of two), through the trait:
        // a lock object with metrics is the core's layer over the striped one.
        let stripes = made
            .stripes
            .map(|asked| core.stripes().unwrap_or(asked.next_power_of_two()));
        Ok((core, Made { stripes, ..made }))
    }
}

/// Whether a lock name is an in-process one (`""` or `local:`), which only this thread uses.
fn is_local(name: &str) -> bool {
    name.is_empty() || name.starts_with("local:")
}

/// A new keyed lock from `keylock_core::open_with(name, ...)`: `""` or `"local:"` for one of
/// this thread's own, `"shm:NAME"` or `"redis://..."` for the scopes this build has.
#[napi(catch_unwind)]
pub fn keyed_open<'e>(env: &'e Env, name: String, options: MakeOptions) -> Result<Unknown<'e>> {
    let (core, made) = options.open(&name)?;
    let live = if is_local(&name) {
        Liveness::Private
    } else {
        Liveness::External
    };
    give(env, Handle::Keyed(Keyed::new(core, made, live)))
}

/// The process-wide keyed lock called `name` (a `KeyPool`, or a `StripedLock` when `stripes`
/// is given, each kind with its own names), made with `options` if it is new. Options that
/// are given must agree with those the existing lock was made with, else
/// `KEYLOCK_SHARED_MISMATCH` (the stripe count compared after rounding up).
#[napi(catch_unwind)]
pub fn keyed_shared<'e>(
    env: &'e Env,
    name: String,
    striped: bool,
    options: MakeOptions,
) -> Result<Unknown<'e>> {
    let registry = if striped {
        &SHARED_STRIPED
    } else {
        &SHARED_POOLS
    };
    let fresh = MakeOptions {
        stripes: striped.then(|| options.stripes.unwrap_or(1024)),
        // The shared registries hold locks only.
        permits: None,
        ..options
    };
    let shared = registry.get_or_insert(&name, || fresh.open("local:"))?;
    let have = shared.made;
    let want_stripes = options.stripes.map(|n| (n as usize).next_power_of_two());
    let mismatch = (striped && want_stripes.is_some_and(|n| Some(n) != have.stripes))
        || options.reentrant.is_some_and(|r| r != have.reentrant)
        || options.fifo.is_some_and(|f| f != have.fifo)
        || options.metrics.is_some_and(|m| m != have.metrics);
    if mismatch {
        return Err(Error::new(
            Status::GenericFailure,
            format!(
                "KEYLOCK_SHARED_MISMATCH\u{0}keylock: the shared {} {name:?} was made with {}",
                if striped { "StripedLock" } else { "KeyPool" },
                describe_made(&have)
            ),
        ));
    }
    let live = Liveness::Shared(Presence::join(&shared));
    give(
        env,
        Handle::Keyed(Keyed::new(shared.core.clone(), have, live)),
    )
}

fn describe_made(m: &Made) -> String {
    let mut parts = Vec::new();
    if let Some(n) = m.stripes {
        parts.push(format!("{n} stripes"));
    }
    parts.push(format!("reentrant: {}", m.reentrant));
    parts.push(format!("fifo: {}", m.fifo));
    parts.push(format!("metrics: {}", m.metrics));
    parts.join(", ")
}

/// The one strict-FIFO pool behind `keylock.locks`, shared by every thread of the process.
static WEB_LOCKS: OnceLock<Arc<shared::Shared<dyn KeyedLock, Made>>> = OnceLock::new();

/// `keylock.locks`'s pool, as this thread's handle.
#[napi(catch_unwind)]
pub fn web_locks_pool(env: &Env) -> Result<Unknown<'_>> {
    let shared = match WEB_LOCKS.get() {
        Some(s) => s.clone(),
        None => {
            let options = MakeOptions {
                fifo: Some(true),
                ..MakeOptions::default()
            };
            let (core, made) = options.open("local:")?;
            // Two threads may both get here; one pool wins, the other is dropped unused.
            WEB_LOCKS
                .get_or_init(|| Arc::new(shared::Shared::new(core, made)))
                .clone()
        }
    };
    let live = Liveness::Shared(Presence::join(&shared));
    give(
        env,
        Handle::Keyed(Keyed::new(shared.core.clone(), shared.made, live)),
    )
}

/// A new `RwLock`.
#[napi(catch_unwind)]
pub fn rw_new(env: &Env) -> Result<Unknown<'_>> {
    give(
        env,
        Handle::Rw(Rw::new(Arc::new(RwLock::new()), Liveness::Private)),
    )
}

/// The process-wide `RwLock` called `name`.
#[napi(catch_unwind)]
pub fn rw_shared(env: &Env, name: String) -> Result<Unknown<'_>> {
    let shared =
        SHARED_RWLOCKS.get_or_insert(&name, || Ok::<_, Error>((Arc::new(RwLock::new()), ())))?;
    let live = Liveness::Shared(Presence::join(&shared));
    give(env, Handle::Rw(Rw::new(shared.core.clone(), live)))
}

/// How a keyed lock was made: `{ stripes, reentrant, fifo, permits, metrics }` (`stripes`
/// undefined but for a striped lock, `permits` (the core's) but for a semaphore).
#[napi(catch_unwind)]
pub fn keyed_made(env: &Env, handle: Unknown<'_>) -> Result<MakeOptions> {
    let keyed = keyed(env, &handle)?;
    let m = keyed.made;
    Ok(MakeOptions {
        stripes: m.stripes.map(|n| n as u32),
        reentrant: Some(m.reentrant),
        fifo: Some(m.fifo),
        capacity: None,
        permits: keyed.core.permits(),
        metrics: Some(m.metrics),
    })
}

/// `pool.stats()`: the core's `ScopeStats`, the same fields on every scope (numbers, exact
/// below 2^53; `null` where the scope cannot tell).
#[napi(object, use_nullable = true)]
#[derive(Debug, Clone, Copy)]
pub struct ScopeStats {
    /// Keys held now, by anyone in the scope (`null`: Redis, which sees only this process).
    pub held: Option<f64>,
    /// Waiters queued for a key now, by anyone in the scope (`null`: Redis).
    pub waiting: Option<f64>,
    /// Shared holds now, each reader counted (`null`: Redis).
    pub shared_holds: Option<f64>,
    /// Keys held now by this lock object (this open of a region; this process, for Redis).
    pub held_here: f64,
    /// Waiters of this lock object queued now.
    pub waiting_here: f64,
    /// The most keys held or awaited at once (a region's entries); `null` where the pool grows.
    pub capacity: Option<f64>,
    /// Keys held or awaited now (`null`: Redis).
    pub entries_in_use: Option<f64>,
    /// An in-process pool's memory, in keys (`null` elsewhere).
    pub entries_allocated: Option<f64>,
    /// An in-process pool's most entries in use at once so far, summed over shards.
    pub peak_in_use: Option<f64>,
    /// An in-process pool's acquisitions that had to wait.
    pub contended: Option<f64>,
}

/// A keyed lock's counts, at any scope; throws (a `KeylockError`) only where counting needs
/// the scope itself and cannot have it.
#[napi(catch_unwind)]
pub fn keyed_stats(env: &Env, handle: Unknown<'_>) -> Result<ScopeStats> {
    let keyed = keyed(env, &handle)?;
    let s = keyed.core.stats().map_err(|e| core_error(&e))?;
    let num = |n: Option<usize>| n.map(|n| n as f64);
    Ok(ScopeStats {
        held: num(s.held),
        waiting: num(s.waiting),
        shared_holds: num(s.shared_holds),
        held_here: s.held_here as f64,
        waiting_here: s.waiting_here as f64,
        capacity: num(s.capacity),
        entries_in_use: num(s.entries_in_use),
        entries_allocated: num(s.entries_allocated),
        peak_in_use: num(s.peak_in_use),
        contended: s.contended.map(|n| n as f64),
    })
}

/// `pool.size`: the keys held now as far as the lock object can tell (the core's
/// `ScopeStats::keys_held`: by anyone in the scope, or by this process for Redis).
#[napi(catch_unwind)]
pub fn keyed_len(env: &Env, handle: Unknown<'_>) -> Result<f64> {
    let keyed = keyed(env, &handle)?;
    let s = keyed.core.stats().map_err(|e| core_error(&e))?;
    Ok(s.keys_held() as f64)
}

/// The stripe `key` maps to; `null` for a scope that does not say.
#[napi(catch_unwind)]
pub fn striped_stripe_of(env: &Env, handle: Unknown<'_>, key: Unknown<'_>) -> Result<Option<u32>> {
    let key = Key::from_arg(env, &key)?;
    let keyed = keyed(env, &handle)?;
    // Through the trait, so that a striped lock object with metrics (the core's layer over it)
    // says too.
    Ok(keyed
        .core
        .stripe_of(LockKey::new(key.as_bytes()))
        .map(|s| s as u32))
}

/// A keyed lock's metrics (`metrics()`), read from the core; `null` for one opened without
/// them.
#[napi(catch_unwind)]
pub fn keyed_metrics(env: &Env, handle: Unknown<'_>) -> Result<Option<metrics::MetricsReading>> {
    let keyed = keyed(env, &handle)?;
    Ok(keyed.core.metrics().map(metrics::MetricsReading::from))
}

/// Slots this thread's handle holds now (guards not yet released), for tests.
#[napi(catch_unwind)]
pub fn held_count(env: &Env, handle: Unknown<'_>) -> Result<u32> {
    Ok(match take(env, &handle)? {
        Handle::Keyed(k) => k.held.borrow().len() as u32,
        Handle::Rw(r) => r.held.borrow().len() as u32,
    })
}

/// Removes the shared-memory region that `name` (`'shm:NAME'`) names (`unlink(name)`);
/// whether it existed. Any other name is `KEYLOCK_INVALID_ARGUMENT` (see `keylock_core::unlink`).
#[napi(catch_unwind)]
pub fn unlink(name: String) -> Result<bool> {
    keylock_core::unlink(&name).map_err(|e| core_error(&e))
}

/// The bytes `key` stands for (`keyBytes(key)`): what every lock compares, the same in C,
/// Python and Rust.
#[napi(catch_unwind)]
pub fn key_bytes(env: &Env, key: Unknown<'_>) -> Result<napi::bindgen_prelude::Buffer> {
    Ok(Key::from_arg(env, &key)?.as_bytes().to_vec().into())
}

/// The key bytes of a Web Locks name (WTF-8), for tests.
#[napi(catch_unwind)]
pub fn name_bytes(env: &Env, name: Unknown<'_>) -> Result<napi::bindgen_prelude::Buffer> {
    // SAFETY: `name` is an argument of the current call.
    let name = unsafe { keys::Name::from_value(env.raw(), name.raw()) }
        .map_err(|_| Error::new(Status::InvalidArg, "a lock name must be a string"))?;
    Ok(name.bytes.into())
}

/// keylock-core's status table: `[{ code, name, description }]` in number order. `lib/errors.js`
/// takes its status numbers and error codes from it.
#[napi(catch_unwind)]
pub fn statuses() -> Vec<status::StatusInfo> {
    status::statuses()
}

/// The text of a failure that a native call reported as minus `code` (`id` 0), or that a
/// waiter's record names (`id`): the core's message, cause and all, with any password hidden;
/// `undefined` when there is none. Each text is taken once.
#[napi(catch_unwind)]
pub fn failure_text(code: u32, id: u32) -> Option<String> {
    status::take_text(code, id)
}

/// A lock name as keylock prints it: a URL's password replaced by `***` (the core's one rule).
#[napi(catch_unwind)]
pub fn redact_scope_name(name: String) -> String {
    keylock_core::redact_scope_name(&name)
}

/// Added to a release's status when it woke a waiter of the calling thread (see `lib/waiting.js`).
#[napi]
pub const LOCAL_WAKE: u32 = status::LOCAL_WAKE;

/// Flags of an acquisition's record: shared mode.
#[napi]
pub const FLAG_SHARED: u32 = locks::SHARED_FLAG;
/// Flags of an acquisition's record: the previous holder died holding the lock.
#[napi]
pub const FLAG_OWNER_DIED: u32 = locks::OWNER_DIED_FLAG;
/// Flags of a dispatched record: polling the waiter panicked.
#[napi]
pub const FLAG_FAILED: u32 = reactor::FAILED;
/// Flags of a dispatched record: a Web Locks request lost its lock to a steal.
#[napi]
pub const FLAG_STOLEN: u32 = reactor::STOLEN;
/// Flags of a dispatched record: a watched guard lost its lock (its `signal` aborts).
#[napi]
pub const FLAG_LOST: u32 = reactor::LOST;
/// A failed record's status sits above this shift in its flags.
#[napi]
pub const STATUS_SHIFT: u32 = locks::STATUS_SHIFT;

/// Installs this thread's `drain()` (called when another thread woke waiters of this one; it
/// calls `runReady`), its output buffer (an `ArrayBuffer` of `recordSchema()`'s `output`), its
/// records buffer (an `ArrayBuffer` of whole `completion` records) and its Web Locks
/// `clientId`.
#[napi(catch_unwind)]
pub fn init(
    env: Env,
    drain: Function<'_, (), Unknown<'static>>,
    out: Unknown<'_>,
    records: Unknown<'_>,
    client_id: String,
) -> Result<()> {
    // SAFETY: both buffers are arguments of the current call.
    unsafe { out::set(env.raw(), out.raw(), records.raw())? };
    out::set_client_id(&client_id);
    reactor::init(&env, drain)
}

/// Words of one completion in the records buffer (`recordSchema()`'s `completion`).
#[napi]
pub const RECORD_WORDS: u32 = out::RECORD_WORDS as u32;

/// The records that cross between this addon and JavaScript: `[{ name, fields: [{ name,
/// position, type }] }]`, from the one table the addon's writers use (`records.rs`).
/// JavaScript builds its readers from it.
#[napi(catch_unwind)]
pub fn record_schema() -> Vec<records::RecordSchema> {
    records::schema()
}

/// A number for a new owner value (`lib/owners.js` maps owner values to these): unique in the
/// process, from 1, and below 2^53 so that JavaScript holds it exactly.
#[napi(catch_unwind)]
pub fn next_owner_id() -> f64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed) as f64
}

/// The function that polls the waiters of this thread that were woken and returns the records
/// to dispatch (called after a release that reported a wake-up of this same thread); a plain
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
    match reactor::start(
        Box::pin(PanicOnSecondPoll { polled: false }),
        Liveness::Private,
    )? {
        reactor::Started::Waiting(id) => Ok(id),
        reactor::Started::Done(_) => Ok(0),
    }
}

struct PanicOnSecondPoll {
    polled: bool,
}

impl Future for PanicOnSecondPoll {
    type Output = reactor::Record;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<reactor::Record> {
        if self.polled {
            panic!("keylock: deliberate panic in a waiter for a test");
        }
        self.polled = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

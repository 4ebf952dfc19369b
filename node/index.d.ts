// Type declarations for keylock (hand-written and committed; the addon itself is a private
// native layer, lib/native.js, with no declarations of its own). They use Node's types
// (Buffer, Disposable, AbortSignal): install @types/node, an optional peer dependency.
/// <reference types="node" />

/**
 * A key, locked by the bytes it stands for (`keyBytes`), the same bytes every keylock front end
 * (C, Python, Rust) gives the same key:
 * - a string: its UTF-8 bytes; a lone surrogate throws `TypeError` (it is never replaced);
 * - a number that is a safe integer, or a bigint from -2^63 to 2^63 - 1: 8 bytes, big-endian
 *   two's complement (`1` and `1n` are one key); other numbers and bigints throw `RangeError`;
 * - a Buffer or Uint8Array: the bytes it views.
 */
export type Key = string | number | bigint | Uint8Array;

/** The bytes `key` stands for: what every lock compares (a copy; see `Key`). */
export function keyBytes(key: Key): Buffer;

/**
 * Removes the shared-memory region that `name` (`'shm:NAME'`) names; whether it existed.
 * Processes that have it open keep using it; the next open of the name makes a new, empty region.
 * Any other name throws a `KeylockError` with code `KEYLOCK_INVALID_ARGUMENT`.
 */
export function unlink(name: string): boolean;

/** How an acquisition holds its key: alone, or together with other shared holders. */
export type LockMode = 'exclusive' | 'shared';

/** Options of the acquires that do not wait (`tryLock`, `tryLockMany`). */
export interface TryAcquireOptions {
  /** `'exclusive'` (the default) or `'shared'`: many shared holders at once, or one exclusive. */
  mode?: LockMode;
  /**
   * A lease in milliseconds: the acquisition then ends by itself after this long, the key is
   * free for the next acquirer (whose fence is higher), and this guard's `release()` reports
   * `KEYLOCK_LEASE_EXPIRED`. Omitted, `null` or `Infinity`: no lease.
   */
  lease?: number | null;
  /**
   * Who acquires, for a lock made with `reentrant: true`: an acquire by the owner that holds
   * the key exclusively succeeds at once and raises a hold count (up to 2^16, then
   * `KEYLOCK_REENTRANCY_LIMIT`). Any value: owners are compared as a `Map` compares keys
   * (objects by identity), within one thread. Ignored by other locks.
   */
  owner?: unknown;
}

/** Options of the blocking acquires (`lockSync`, `lockManySync`, `readSync`, ...). */
export interface SyncAcquireOptions extends TryAcquireOptions {
  /** Milliseconds to block at most; then a `KeylockError` with code `'KEYLOCK_TIMEOUT'` is thrown. */
  timeout?: number | null;
}

/** Options of every asynchronous acquire. */
export interface AcquireOptions extends SyncAcquireOptions {
  /**
   * Milliseconds to wait at most; the promise then rejects with a `KeylockError` whose code is
   * `'KEYLOCK_TIMEOUT'`. `0` tries once without waiting. Omitted, `null` or `Infinity`: no limit.
   */
  timeout?: number | null;
  /** Cancels the wait; the promise rejects with `signal.reason`. */
  signal?: AbortSignal | null;
}

/** Options of the multi-key acquires: `mode` may give one mode per key. */
export type ManyOptions<O> = Omit<O, 'mode'> & { mode?: LockMode | readonly LockMode[] };

/** Options of the RwLock's acquires (its modes are its two sides). */
export type RwAcquireOptions = Pick<AcquireOptions, 'timeout' | 'signal'>;
export type RwSyncAcquireOptions = Pick<SyncAcquireOptions, 'timeout'>;

/** Error codes of `KeylockError`: the names of keylock-core's statuses, plus the Node-only ones. */
export type KeylockErrorCode =
  | 'KEYLOCK_WOULD_BLOCK'
  | 'KEYLOCK_TIMEOUT'
  | 'KEYLOCK_NOT_LOCKED'
  | 'KEYLOCK_INVALID_ARGUMENT'
  | 'KEYLOCK_NOT_OWNER'
  | 'KEYLOCK_LEASE_EXPIRED'
  | 'KEYLOCK_REENTRANCY_LIMIT'
  | 'KEYLOCK_CAPACITY_EXCEEDED'
  | 'KEYLOCK_INCOMPATIBLE'
  | 'KEYLOCK_PERMISSION_DENIED'
  | 'KEYLOCK_UNAVAILABLE'
  | 'KEYLOCK_SHARED_MISMATCH'
  | 'KEYLOCK_NOT_BUILT'
  | 'KEYLOCK_BINARY_MISMATCH'
  | 'KEYLOCK_INTERNAL';

/**
 * An error from keylock. Bad arguments throw a `TypeError` or `RangeError` instead, with
 * `code === 'KEYLOCK_INVALID_ARGUMENT'`; an aborted signal rejects with `signal.reason`.
 */
export class KeylockError extends Error {
  readonly code: KeylockErrorCode;
  readonly name: 'KeylockError';
}

/**
 * A held lock: the record of one acquisition. `release()` ends exactly that acquisition, never
 * anyone else's. Works with `using` (TypeScript 5.2+): the lock is released at the end of the
 * block.
 */
export class Guard implements Disposable {
  /** Guards are made by the locks (and `Permit`s by semaphores). */
  protected constructor();
  /**
   * Releases the acquisition. A second call does nothing. Throws a `KeylockError` if it is no
   * longer the lock's current one: `'KEYLOCK_NOT_OWNER'` after a `forceUnlock`,
   * `'KEYLOCK_LEASE_EXPIRED'` after its lease ran out (someone else may hold the key by then).
   */
  release(): void;
  /** Whether `release()` (or disposal) was called. */
  readonly released: boolean;
  /**
   * The fencing token: greater than the fence of every earlier exclusive acquisition of the same
   * key (or stripe) in this lock, even after its entry was recycled; a force-unlock and the end of
   * an exclusive lease advance it too. Shared holders read the current one; a reentrant
   * acquisition keeps its holder's. Pass it to the resource the lock protects, which refuses
   * anything older (`UPDATE ... SET fence = $f WHERE id = $id AND fence < $f`). RwLock read
   * guards have `0n` (the RwLock fences its writers only).
   */
  readonly fence: bigint;
  /** How it holds the key. */
  readonly mode: LockMode;
  /** Whether the previous holder died holding the lock (cross-process scopes only). */
  readonly ownerDied: boolean;
  /**
   * Aborts if the lock is lost behind the holder's back (a Redis lease that could not be renewed
   * in time, or a force-unlock the renewal found), with a `KeylockError` of code
   * `KEYLOCK_NOT_OWNER` as its reason. Never aborts for scopes whose holders cannot lose a lock
   * that way (in-process, shared memory), for RwLock guards, or once released. The same signal
   * every time. Like `AbortSignal.timeout`'s, a pending signal does not keep the event loop alive
   * by itself.
   */
  readonly signal: AbortSignal;
  /** Whether the acquisition is still the lock's current one (false once released). */
  isCurrent(): boolean;
  /** Milliseconds left on its lease; `null` without a lease, or once released. */
  leaseRemaining(): number | null;
  /** Moves the end of its lease to `ms` from now; throws if it is no longer current or has no lease. */
  extend(ms: number): void;
  /** Releases like `release()`, but does nothing for an acquisition that is no longer current. */
  [Symbol.dispose](): void;
}

/** A guard of one key. */
export interface KeyGuard extends Guard {
  /** The key as it was given. */
  readonly key: Key;
}

/** A guard of several keys, taken at once. */
export interface KeysGuard extends Guard {
  /** The keys as they were given. */
  readonly keys: readonly Key[];
  /** The fence of each acquisition, in the lock's canonical order (not the order of `keys`). */
  readonly fences: bigint[];
}

/** Who holds a key and how: a snapshot (`info(key)`). */
export interface KeyInfo {
  /** The current fence: the exclusive holder's, or the one the shared holders read. */
  fence: bigint;
  mode: LockMode;
  /** Holders now (1 for an exclusive holder). */
  holders: number;
  /** The exclusive holder's hold count (above 1 only for reentrant acquisitions). */
  holds: number;
  /** The exclusive holder's owner, if this thread gave it; `null` otherwise. */
  owner: unknown;
  /** Milliseconds left on the earliest lease among the holders; `null` without one. */
  leaseRemaining: number | null;
  /** Waiters queued for the key. */
  waiters: number;
  /** Units held: for a lock, the same as `holders` (see `PermitInfo.units` for semaphores). */
  units: number;
}

/**
 * The counts of a `KeyPool`, the same fields on every scope; `null` for a figure the scope cannot
 * tell (a Redis pool sees only this process, so `held`, `waiting` and `sharedHolds` are `null`
 * there, and `heldHere` / `waitingHere` say what this process does).
 */
export interface PoolStats {
  /** Keys held now, by anyone in the scope (`null`: Redis). */
  held: number | null;
  /** Waiters queued for a key now, by anyone in the scope (`null`: Redis). */
  waiting: number | null;
  /** Shared holds now, each reader counted (`null`: Redis). */
  sharedHolds: number | null;
  /** Keys held now by this pool object: this open of a `shm:` region; this process, for Redis. */
  heldHere: number;
  /** Waiters of this pool object queued now. */
  waitingHere: number;
  /** The most keys held or awaited at once (a `shm:` region's entries); `null` where the pool grows. */
  capacity: number | null;
  /** Keys held or awaited now; 0 once everything is released (`null`: Redis). */
  entriesInUse: number | null;
  /** An in-process pool's entries allocated (in use or kept for reuse), in keys; `null` elsewhere. */
  entriesAllocated: number | null;
  /** An in-process pool's most entries in use at once so far, summed over shards; `null` elsewhere. */
  peakInUse: number | null;
  /** An in-process pool's acquisitions that had to wait; `null` elsewhere. */
  contended: number | null;
}

/** The counts of a `StripedLock`: `PoolStats` with stripes for keys, and the number of stripes. */
export interface StripedStats extends PoolStats {
  /** The number of stripes. */
  stripes: number;
  /** Stripes held now (keys that share a stripe count once). */
  held: number;
  /** Waiters queued now. */
  waiting: number;
}

/** How a lock object serves its keys. */
export interface MakeOptions {
  /** Owners reenter (see `TryAcquireOptions.owner`). Default false. */
  reentrant?: boolean;
  /**
   * Strict FIFO per key: every release hands the key to the next waiter, and nobody takes a key
   * others wait for (the Web Locks order). Default false: eventual fairness (a running caller
   * may take a just-released key; a waiter older than 0.5 ms is handed it, at most once per
   * 0.5 ms per key).
   */
  fifo?: boolean;
  /**
   * Fixed-size scopes (`open('shm:NAME')`): the most keys held or awaited at once in a region
   * this open creates. Other scopes refuse it (`KEYLOCK_INVALID_ARGUMENT`). Default: the core's.
   */
  capacity?: number;
  /**
   * Metrics on the lock object, counted by the core: `metrics()` reads them (see `LockMetrics`).
   * Default false: nothing is counted, and no path does anything more. A shared lock's must
   * agree with the existing lock's, if given (else `KEYLOCK_SHARED_MISMATCH`).
   */
  metrics?: boolean;
}

/**
 * A histogram of durations from `metrics()`, in milliseconds (fractions kept, as `perf_hooks`
 * gives them). The core records each duration in a power-of-two bucket of nanoseconds.
 */
export interface HistogramMetrics {
  /** Durations recorded. */
  readonly count: number;
  /** Their sum, in ms. */
  readonly sumMs: number;
  /** The longest, in ms. */
  readonly maxMs: number;
  /**
   * The non-empty buckets in order, each `[upperBoundMs, count]`: the bucket counts durations up
   * to `upperBoundMs` and above the previous bucket's bound (the first bucket, bound 0, counts
   * durations of 0 ns; the last one has the bound `Infinity`).
   */
  readonly buckets: ReadonlyArray<readonly [upperBoundMs: number, count: number]>;
  /**
   * The `q` quantile (0 to 1) in ms, by the core's rule: the upper bound of the bucket that
   * holds it, capped at `maxMs` (an overestimate by less than a factor of two). `null` when
   * nothing was recorded. A `q` outside 0..1 throws a `RangeError`.
   */
  quantile(q: number): number | null;
}

/**
 * A lock object's metrics (`metrics()`), counted by the core: totals since it was opened, the
 * same names in every keylock front end. A frozen snapshot; counts are safe integers.
 */
export interface LockMetrics {
  /** Acquisitions granted (a multi-key acquire counts each lock it returns). */
  readonly acquired: number;
  /** Calls that could not be granted at once: they waited, timed out or were cancelled. */
  readonly contended: number;
  /** Calls that waited as long as their `timeout` allowed and failed with `KEYLOCK_TIMEOUT`. */
  readonly timedOut: number;
  /** Tries that failed because the key was taken (`tryLock`, `timeout: 0`, `ifAvailable`). */
  readonly wouldBlock: number;
  /** Async acquires given up before they finished (an `AbortSignal`, a worker that ended). */
  readonly cancelled: number;
  /** Releases refused because the acquisition's lease had ended (`KEYLOCK_LEASE_EXPIRED`). */
  readonly leaseExpired: number;
  /** Acquisitions whose previous holder died holding the key (`ownerDied`). */
  readonly ownerDied: number;
  /**
   * Releases refused with `KEYLOCK_NOT_OWNER` because the hold ended behind its holder's back:
   * force-unlocked, stolen, or lost by a remote scope.
   */
  readonly lost: number;
  /** Force-unlocks (`forceUnlock`, `forceRelease`) through this lock object that freed a held key. */
  readonly forceUnlocked: number;
  /** How long each granted call waited (0 when granted at once). */
  readonly wait: HistogramMetrics;
  /** How long each released acquisition was held, from its grant to its release. */
  readonly hold: HistogramMetrics;
}

/** The keyed API shared by `KeyPool` and `StripedLock`. */
declare abstract class KeyedLock {
  /**
   * The name it was opened with (`'local:'` for one made in this process; the name given to
   * `shared`), a URL's password replaced by `***`. `util.inspect` shows it too.
   */
  readonly name: string;
  /**
   * Waits for `key` without blocking the event loop or any thread; resolves to its guard.
   * Rejects with `KEYLOCK_TIMEOUT` after `timeout` ms, or with `signal.reason` when aborted;
   * a rejected waiter holds nothing.
   */
  lock(key: Key, options?: AcquireOptions): Promise<KeyGuard>;
  /** Takes `key` now if it can be, synchronously: its guard, or `null`. */
  tryLock(key: Key, options?: TryAcquireOptions): KeyGuard | null;
  /**
   * Blocks the calling thread until `key` is held (or `timeout` ms passed). Meant for worker
   * threads: on the main thread it stops the event loop while it waits, and it never returns if
   * the same thread holds the key.
   */
  lockSync(key: Key, options?: SyncAcquireOptions): KeyGuard;
  /**
   * Holds `key` while `fn(guard)` runs and returns (or rethrows) its result. The lock is released
   * when `fn` returns, throws or rejects; if `fn` succeeded but its acquisition was lost meanwhile
   * (force-unlocked, or its lease ran out), the promise rejects with that error.
   */
  withLock<T>(key: Key, fn: (guard: KeyGuard) => T | PromiseLike<T>, options?: AcquireOptions): Promise<Awaited<T>>;
  /** Waits for all `keys` at once, deadlock-free (one global order, duplicates collapse); one guard for all. */
  lockMany(keys: readonly Key[], options?: ManyOptions<AcquireOptions>): Promise<KeysGuard>;
  /** Takes all `keys` if all can be taken now (a guard), or none (`null`). */
  tryLockMany(keys: readonly Key[], options?: ManyOptions<TryAcquireOptions>): KeysGuard | null;
  /** Blocks the calling thread until all `keys` are held (see `lockSync`). */
  lockManySync(keys: readonly Key[], options?: ManyOptions<SyncAcquireOptions>): KeysGuard;
  /** Holds all `keys` while `fn(guard)` runs (see `withLock` and `lockMany`). */
  withLockMany<T>(
    keys: readonly Key[],
    fn: (guard: KeysGuard) => T | PromiseLike<T>,
    options?: ManyOptions<AcquireOptions>,
  ): Promise<Awaited<T>>;
  /**
   * Frees `key` whoever holds it, in either mode, and advances its fence: the holders' guards
   * then release nothing (their `release()` throws `KEYLOCK_NOT_OWNER`). For a lock left behind.
   * Returns whether the key was held.
   */
  forceUnlock(key: Key): boolean;
  /** Whether `key` is held now (a snapshot). */
  isLocked(key: Key): boolean;
  /** Who holds `key` and how (a snapshot); `null` when it is free. */
  info(key: Key): KeyInfo | null;
  /**
   * An async function that runs `fn(...args)` (with the same `this`) holding key
   * `keyOf(...args)`, as `withLock` does, and resolves or rejects as `fn` does. `options` are
   * `lock()`'s, checked now and used for every call. It has `fn`'s `name` and `length`.
   */
  wrap<A extends unknown[], R>(
    fn: (...args: A) => R | PromiseLike<R>,
    keyOf: (...args: A) => Key,
    options?: AcquireOptions,
  ): (...args: A) => Promise<Awaited<R>>;
  /** Whether it was made with `reentrant: true`. */
  readonly reentrant: boolean;
  /** Whether it was made with `fifo: true`. */
  readonly fifo: boolean;
  /** Its metrics, counted by the core; `null` unless it was opened with `metrics: true`. */
  metrics(): LockMetrics | null;
}

/**
 * Exact per-key locks: an entry per key held or awaited, freed when its last user leaves.
 * Two different keys never block each other.
 */
export class KeyPool extends KeyedLock {
  constructor(options?: MakeOptions);
  /**
   * The pool called `name`, the same lock in every worker thread of this process: a key taken
   * in one worker excludes all the others, and a release in one wakes waiters in the others.
   * Options given must agree with the existing pool's (else `KEYLOCK_SHARED_MISMATCH`). A shared
   * lock lives until the process exits.
   */
  static shared(name: string, options?: MakeOptions): KeyPool;
  /**
   * The pool that the lock name `name` names: `'local:'` (or `''`) for a new in-process pool,
   * `'shm:NAME'` for one in shared memory, `'redis://HOST:PORT/DB'` for one in Redis,
   * `'postgres://USER:PASSWORD@HOST:PORT/DB'` for one in PostgreSQL, where this build of keylock
   * has the scope (otherwise a `TypeError` says so).
   */
  static open(name: string, options?: MakeOptions): KeyPool;
  /** Keys held now: by anyone in the scope, or by this process where the scope cannot tell (Redis). */
  readonly size: number;
  /** The pool's counts, on every scope (see `PoolStats`). */
  stats(): PoolStats;
}

/**
 * A fixed array of locks (stripes); each key maps to one by hash. Fixed memory and one hash per
 * operation, but keys on the same stripe exclude each other.
 */
export class StripedLock extends KeyedLock {
  /** The largest stripe count accepted. */
  static readonly MAX_STRIPES: number;
  /** `stripes` locks, rounded up to a power of two (default 1024). */
  constructor(stripes?: number, options?: MakeOptions);
  /**
   * The striped lock called `name`, the same in every worker thread of this process. If it
   * exists with another stripe count (after rounding) or other options, this throws
   * `KEYLOCK_SHARED_MISMATCH`; `stripes` omitted takes the existing count, or 1024 for a new lock.
   */
  static shared(name: string, stripes?: number, options?: MakeOptions): StripedLock;
  /** The striped lock that `name` names (see `KeyPool.open`). */
  static open(name: string, options?: MakeOptions & { stripes?: number }): StripedLock;
  /** The number of stripes (a power of two). */
  readonly stripes: number;
  /** The stripe `key` maps to, from 0 to `stripes - 1` (`null` if the scope does not say). */
  stripeOf(key: Key): number | null;
  /** Stripes held now (keys that share a stripe count once). */
  readonly size: number;
  /** The counts of the stripes, on every scope (see `StripedStats`). */
  stats(): StripedStats;
}

/** Options of `Semaphore.tryAcquire`. */
export interface PermitOptions {
  /**
   * Units of the key to take (default 1): a whole number from 1 to the semaphore's `permits`;
   * anything else throws (or rejects with) a `RangeError` (`TypeError` for a non-number) whose
   * code is `'KEYLOCK_INVALID_ARGUMENT'`.
   */
  weight?: number | null;
  /** A lease in milliseconds, as for locks (see `TryAcquireOptions.lease`). */
  lease?: number | null;
}

/** Options of `Semaphore.acquire`, `withPermit` and `wrap`. */
export interface PermitAcquireOptions extends PermitOptions {
  /**
   * Milliseconds to wait at most; the promise then rejects with a `KeylockError` whose code is
   * `'KEYLOCK_TIMEOUT'`. `0` tries once without waiting. Omitted, `null` or `Infinity`: no limit.
   */
  timeout?: number | null;
  /** Cancels the wait; the promise rejects with `signal.reason`. */
  signal?: AbortSignal | null;
}

/**
 * A semaphore's acquisition of `weight` units of one key. Works with `using` and `await using`.
 * Its `fence` is its own: greater than that of every earlier acquisition of the key.
 */
export class Permit extends Guard implements AsyncDisposable {
  protected constructor();
  /** The key as it was given. */
  readonly key: Key;
  /** The units it holds. */
  readonly weight: number;
  /** Releases like `[Symbol.dispose]()`. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Who holds units of a key: a snapshot (`Semaphore.info(key)`). */
export interface PermitInfo {
  /** The fence of the newest acquisition of the key. */
  fence: bigint;
  /** Holders now. */
  holders: number;
  /** Units held now: the holders' weights summed (at most `permits`). */
  units: number;
  /** Milliseconds left on the earliest lease among the holders; `null` without one. */
  leaseRemaining: number | null;
  /** Waiters queued for the key. */
  waiters: number;
}

/** How a semaphore is made (`new Semaphore(permits, options)`). */
export interface SemaphoreMakeOptions {
  /** Metrics on the semaphore, counted by the core (see `MakeOptions.metrics`). */
  metrics?: boolean;
}

/** How a semaphore is opened: its units per key. */
export interface SemaphoreOptions extends SemaphoreMakeOptions {
  /** Units of each key that may be held at once: a whole number from 1 to 32767. */
  permits: number;
}

/**
 * A keyed semaphore: at most `permits` units of each key held at once. An acquire takes
 * `weight` units (default 1) and waits in strict FIFO order per key: a heavy request at the head
 * of a key's queue is never passed by lighter ones that came later. Keys never block each other.
 */
export class Semaphore {
  /** An in-process semaphore with `permits` units per key (1 to 32767). */
  constructor(permits: number, options?: SemaphoreMakeOptions);
  /**
   * The semaphore that the lock name `name` names: `'local:'` (or `''`) for a new in-process
   * one, `'shm:NAME'` for one shared by the processes of this machine, `'redis://...'` or
   * `'postgres://...'` for one shared by every process that opens the same prefix. Every open of a shared one must give the
   * same permits (`KEYLOCK_INCOMPATIBLE` otherwise).
   */
  static open(name: string, options: SemaphoreOptions): Semaphore;
  /** The name it was opened with, a URL's password replaced by `***`. */
  readonly name: string;
  /** The units of each key that may be held at once. */
  readonly permits: number;
  /**
   * Waits for `weight` units of `key`; resolves to its permit. Rejects with `KEYLOCK_TIMEOUT`
   * after `timeout` ms, or with `signal.reason` when aborted; a rejected acquire holds nothing.
   */
  acquire(key: Key, options?: PermitAcquireOptions): Promise<Permit>;
  /** Takes `weight` units of `key` now if it can (no one waits ahead): its permit, or `null`. */
  tryAcquire(key: Key, options?: PermitOptions): Permit | null;
  /**
   * Holds `weight` units of `key` while `fn(permit)` runs and returns (or rethrows) its result;
   * the units are released when `fn` returns, throws or rejects.
   */
  withPermit<T>(
    key: Key,
    fn: (permit: Permit) => T | PromiseLike<T>,
    options?: PermitAcquireOptions,
  ): Promise<Awaited<T>>;
  /**
   * An async function that runs `fn(...args)` (with the same `this`) holding units of key
   * `keyOf(...args)`, as `withPermit` does. `options` (`weight` too) are checked now and used for
   * every call. It has `fn`'s `name` and `length`.
   */
  wrap<A extends unknown[], R>(
    fn: (...args: A) => R | PromiseLike<R>,
    keyOf: (...args: A) => Key,
    options?: PermitAcquireOptions,
  ): (...args: A) => Promise<Awaited<R>>;
  /** Who holds units of `key` (a snapshot); `null` when none is held. */
  info(key: Key): PermitInfo | null;
  /**
   * Ends every hold of `key` and advances its fence: the holders' permits then release nothing
   * (their `release()` throws `KEYLOCK_NOT_OWNER`). Returns whether any unit was held.
   */
  forceRelease(key: Key): boolean;
  /** Counts, as `KeyPool.stats()`: `held` is keys with units held, `waiting` waiters queued. */
  stats(): PoolStats;
  /** Its metrics, counted by the core; `null` unless it was made with `metrics: true`. */
  metrics(): LockMetrics | null;
}

// ---------------------------------------------------------------------------------------------
// diagnostics_channel: the messages of the channels `keylock:wait`, `keylock:acquire` and
// `keylock:release`, published by KeyPool, StripedLock and Semaphore (not by RwLock or the Web
// Locks API), only while a channel has subscribers.

/** What every message says about the acquire. */
export interface DiagnosticsMessage {
  /** The lock object's name (`lock.name`: a URL's password replaced by `***`). */
  name: string;
  /** The key, for an acquire of one key; else `undefined`. */
  key: Key | undefined;
  /** The keys, for a multi-key acquire; else `undefined`. */
  keys: readonly Key[] | undefined;
  /** The units, for a semaphore's acquire; else `undefined`. */
  weight: number | undefined;
}

/** `keylock:wait`: an async acquire could not be granted at once, and waits. */
export interface WaitMessage extends DiagnosticsMessage {
  /** The mode asked for (one per key where `lockMany` was given one per key). */
  mode: LockMode | LockMode[];
  /** The acquire's `timeout` in ms; `null` for none. */
  timeout: number | null;
}

/** `keylock:acquire`: an acquisition was granted. */
export interface AcquireMessage extends DiagnosticsMessage {
  mode: LockMode;
  /** The guard's fence (for several keys, that of the first in the lock's order). */
  fence: bigint;
  /** The guard (or permit) the acquire returns. */
  guard: Guard;
  /**
   * Milliseconds from the call to the grant: 0 for a call granted without waiting, the time in
   * the call for a blocking one (`lockSync`), `null` when not known (the wait began before
   * anyone subscribed to `keylock:acquire`).
   */
  waitedMs: number | null;
}

/** `keylock:release`: a guard was released, or its release refused (`error`). */
export interface ReleaseMessage extends DiagnosticsMessage {
  mode: LockMode;
  fence: bigint;
  guard: Guard;
  /**
   * Milliseconds from the grant to this release; `null` when not known (granted while neither
   * `keylock:acquire` nor `keylock:release` had subscribers).
   */
  heldMs: number | null;
  /**
   * The error the release throws (`KEYLOCK_NOT_OWNER`, `KEYLOCK_LEASE_EXPIRED`; a disposal
   * ignores those), or `undefined` when it released the acquisition.
   */
  error: KeylockError | undefined;
}

/** A reader-writer lock: many readers or one writer. */
export class RwLock {
  constructor();
  /** The lock called `name`, the same in every worker thread of this process. */
  static shared(name: string): RwLock;
  /** Waits for a read lock; resolves to its guard. */
  read(options?: RwAcquireOptions): Promise<Guard>;
  /** Waits for the write lock; resolves to its guard (its `fence` rises with every writer). */
  write(options?: RwAcquireOptions): Promise<Guard>;
  /** A read guard if no writer holds the lock, else `null`. */
  tryRead(): Guard | null;
  /** The write guard if the lock is free, else `null`. */
  tryWrite(): Guard | null;
  /** Blocks the calling thread for a read lock (for worker threads, like `lockSync`). */
  readSync(options?: RwSyncAcquireOptions): Guard;
  /** Blocks the calling thread for the write lock (for worker threads, like `lockSync`). */
  writeSync(options?: RwSyncAcquireOptions): Guard;
  /** Holds a read lock while `fn(guard)` runs; returns (or rethrows) its result. */
  withRead<T>(fn: (guard: Guard) => T | PromiseLike<T>, options?: RwAcquireOptions): Promise<Awaited<T>>;
  /** Holds the write lock while `fn(guard)` runs; returns (or rethrows) its result. */
  withWrite<T>(fn: (guard: Guard) => T | PromiseLike<T>, options?: RwAcquireOptions): Promise<Awaited<T>>;
  /** Whether a reader or a writer holds the lock. */
  isLocked(): boolean;
  /** Whether a writer holds the lock. */
  isWriteLocked(): boolean;
}

// ---------------------------------------------------------------------------------------------
// The Web Locks API, typed as TypeScript's lib.dom types it (same names and shapes), so that code
// written for `navigator.locks` type-checks against `keylock.locks`.

/** A granted lock, as a `request()` callback receives it. */
export class Lock {
  private constructor();
  readonly mode: LockMode;
  readonly name: string;
}

/** What `request()` calls when the lock is granted (`null` for `ifAvailable` without it). */
export interface LockGrantedCallback<T> {
  (lock: Lock | null): T;
}

/** The options of `request()`. */
export interface LockOptions {
  /** Grant only if it can be granted now; otherwise the callback gets `null`. */
  ifAvailable?: boolean;
  /** `'exclusive'` (default) or `'shared'`. */
  mode?: LockMode;
  /** Aborts a pending request: it rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Frees the name's current holders (their requests reject with an `AbortError`) and takes it. */
  steal?: boolean;
}

/** One request, as `query()` reports it (lib.dom's fields, always present here). */
export interface LockInfo {
  clientId: string;
  mode: LockMode;
  name: string;
}

/** What `query()` resolves to: every request of the process, in the order they were made. */
export interface LockManagerSnapshot {
  held: LockInfo[];
  pending: LockInfo[];
}

/**
 * The Web Locks API's LockManager over a keylock lock. `keylock.locks` is the process-wide one
 * (every worker thread); `new LockManager(pool)` puts the same API over any KeyPool or
 * StripedLock, so over any scope.
 */
export class LockManager {
  constructor(pool: KeyPool | StripedLock);
  /**
   * Calls `callback(lock)` once the lock is granted, holds it until the promise the callback
   * returns settles, and resolves with the callback's result.
   */
  request<T>(name: string, callback: LockGrantedCallback<T>): Promise<T>;
  request<T>(name: string, options: LockOptions, callback: LockGrantedCallback<T>): Promise<T>;
  /** A snapshot: the held and pending requests, with name, mode and clientId. */
  query(): Promise<LockManagerSnapshot>;
}

/** The process-wide LockManager: one strict-FIFO lock table for every worker thread. */
export const locks: LockManager;

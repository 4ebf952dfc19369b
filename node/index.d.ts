// Type declarations for keylock (hand-written and committed; the addon's own generated
// declarations in native.d.ts describe the private native layer only).

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

/** Options of every asynchronous acquire. */
export interface LockOptions {
  /**
   * Milliseconds to wait at most; the promise then rejects with a `KeylockError` whose code is
   * `'KEYLOCK_TIMEOUT'`. `0` tries once without waiting. Omitted, `null` or `Infinity`: no limit.
   */
  timeout?: number | null;
  /** Cancels the wait; the promise rejects with `signal.reason`. */
  signal?: AbortSignal | null;
}

/** Options of the blocking acquires (`lockSync`, `readSync`, ...). */
export interface SyncLockOptions {
  /** Milliseconds to block at most; then a `KeylockError` with code `'KEYLOCK_TIMEOUT'` is thrown. */
  timeout?: number | null;
}

/** Error codes of `KeylockError` (the names of keylock-core's statuses, plus the Node-only ones). */
export type KeylockErrorCode =
  | 'KEYLOCK_TIMEOUT'
  | 'KEYLOCK_NOT_LOCKED'
  | 'KEYLOCK_WOULD_BLOCK'
  | 'KEYLOCK_INVALID_ARGUMENT'
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

/** A held lock. Works with `using` (TypeScript 5.2+): the lock is released at the end of the block. */
export class Guard implements Disposable {
  /**
   * Releases the lock. A second call does nothing. Throws a `KeylockError` with code
   * `'KEYLOCK_NOT_LOCKED'` if the lock was released behind this guard's back (by `unlock`).
   */
  release(): void;
  /** Whether `release()` was called. */
  readonly released: boolean;
  [Symbol.dispose](): void;
}

/** Counters of a `KeyPool`. */
export interface StripedStats {
  /** The number of stripes. */
  stripes: number;
  /** Stripes held now. */
  held: number;
  /** Stripes with waiters queued now. */
  waiting: number;
}

export interface PoolStats {
  /** Keys held now. */
  held: number;
  /** Waiters queued now. */
  waiting: number;
  /** Keys that have an entry now (held, or awaited by someone); 0 once everything is released. */
  entriesInUse: number;
  /** Entries allocated (in use or kept for reuse): the pool's memory, in keys. */
  entriesAllocated: number;
  /** An upper bound on the most entries in use at once so far. */
  peakHeld: number;
  /** Acquisitions so far. */
  acquisitions: number;
  /** Acquisitions that had to wait. */
  contended: number;
}

/** The keyed API shared by `KeyPool` and `StripedLock`. */
declare abstract class KeyedLock {
  /**
   * Waits for `key` without blocking the event loop or any thread; resolves to its guard.
   * Rejects with `KEYLOCK_TIMEOUT` after `timeout` ms, or with `signal.reason` when aborted;
   * a rejected waiter holds nothing.
   */
  lock(key: Key, options?: LockOptions): Promise<Guard>;
  /** Takes `key` if it is free, synchronously: its guard, or `null`. */
  tryLock(key: Key): Guard | null;
  /**
   * Blocks the calling thread until `key` is held (or `timeout` ms passed). Meant for worker
   * threads: on the main thread it stops the event loop while it waits, and it never returns if
   * the same thread holds the key.
   */
  lockSync(key: Key, options?: SyncLockOptions): Guard;
  /** Releases `key` without its guard. Throws `KEYLOCK_NOT_LOCKED` if it is not locked. */
  unlock(key: Key): void;
  /**
   * Holds `key` while `fn` runs and returns (or rethrows) its result. The lock is released in a
   * `finally`, whether `fn` returns, throws or rejects.
   */
  withLock<T>(key: Key, fn: () => T | PromiseLike<T>, options?: LockOptions): Promise<Awaited<T>>;
  /** Waits for all `keys` at once, deadlock-free (one global order, duplicates collapse); one guard for all. */
  lockMany(keys: readonly Key[], options?: LockOptions): Promise<Guard>;
  /** Takes all `keys` if all are free (a guard), or none (`null`). */
  tryLockMany(keys: readonly Key[]): Guard | null;
  /** Blocks the calling thread until all `keys` are held (see `lockSync`). */
  lockManySync(keys: readonly Key[], options?: SyncLockOptions): Guard;
  /** Releases all `keys` without their guard. Throws `KEYLOCK_NOT_LOCKED`, releasing none, if one is free. */
  unlockMany(keys: readonly Key[]): void;
  /** Holds all `keys` while `fn` runs (see `withLock` and `lockMany`). */
  withLockMany<T>(keys: readonly Key[], fn: () => T | PromiseLike<T>, options?: LockOptions): Promise<Awaited<T>>;
  /** Whether `key` is held now. */
  isLocked(key: Key): boolean;
}

/**
 * Exact per-key locks: an entry per key held or awaited, freed when its last user leaves.
 * Two different keys never block each other.
 */
export class KeyPool extends KeyedLock {
  constructor();
  /**
   * The pool called `name`, the same lock in every worker thread of this process: a key taken
   * in one worker excludes all the others, and a release in one wakes waiters in the others.
   * A shared lock lives until the process exits.
   */
  static shared(name: string): KeyPool;
  /** Keys held now. */
  readonly size: number;
  /** The pool's counters. */
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
  constructor(stripes?: number);
  /**
   * The striped lock called `name`, the same in every worker thread of this process. If it
   * exists with another stripe count (after rounding) this throws `KEYLOCK_SHARED_MISMATCH`;
   * `stripes` omitted takes the existing count, or 1024 for a new lock.
   */
  static shared(name: string, stripes?: number): StripedLock;
  /** The number of stripes (a power of two). */
  readonly stripes: number;
  /** The stripe `key` maps to, from 0 to `stripes - 1`. */
  stripeOf(key: Key): number;
  /** Stripes held now (keys that share a stripe count once). */
  readonly size: number;
  /** Counters of the stripes. */
  stats(): StripedStats;
}

/** A reader-writer lock: many readers or one writer. */
export class RwLock {
  constructor();
  /** The lock called `name`, the same in every worker thread of this process. */
  static shared(name: string): RwLock;
  /** Waits for a read lock; resolves to its guard. */
  read(options?: LockOptions): Promise<Guard>;
  /** Waits for the write lock; resolves to its guard. */
  write(options?: LockOptions): Promise<Guard>;
  /** A read guard if no writer holds the lock, else `null`. */
  tryRead(): Guard | null;
  /** The write guard if the lock is free, else `null`. */
  tryWrite(): Guard | null;
  /** Blocks the calling thread for a read lock (for worker threads, like `lockSync`). */
  readSync(options?: SyncLockOptions): Guard;
  /** Blocks the calling thread for the write lock (for worker threads, like `lockSync`). */
  writeSync(options?: SyncLockOptions): Guard;
  /** Holds a read lock while `fn` runs; returns (or rethrows) its result. */
  withRead<T>(fn: () => T | PromiseLike<T>, options?: LockOptions): Promise<Awaited<T>>;
  /** Holds the write lock while `fn` runs; returns (or rethrows) its result. */
  withWrite<T>(fn: () => T | PromiseLike<T>, options?: LockOptions): Promise<Awaited<T>>;
  /** Releases one read lock without its guard; throws `KEYLOCK_NOT_LOCKED` if none is held. */
  readUnlock(): void;
  /** Releases the write lock without its guard; throws `KEYLOCK_NOT_LOCKED` if it is free. */
  writeUnlock(): void;
  /** Whether a reader or a writer holds the lock. */
  isLocked(): boolean;
  /** Whether a writer holds the lock. */
  isWriteLocked(): boolean;
}

// Compiled with `tsc -p test` (make test): index.d.ts must type every export and every use below.
import { KeyPool, StripedLock, RwLock, KeylockError, Guard, keyBytes, type Key, type PoolStats } from 'keylock';
import keylock from 'keylock';

async function usage(): Promise<number> {
  const pool = new KeyPool();
  const shared: KeyPool = KeyPool.shared('name');
  const striped = new StripedLock(1024);
  const stripedShared: StripedLock = StripedLock.shared('name', 64);
  const rw: RwLock = RwLock.shared('rw');
  const keys: Key[] = ['a', Buffer.from('b'), new Uint8Array([1, 2]), 42, 42n];
  const bytes: Buffer = keyBytes(keys[3]);
  void bytes;

  const g: Guard = await pool.lock('a', { timeout: 100, signal: AbortSignal.timeout(1000) });
  g.release();
  {
    using held = await striped.lock(keys[1]);
    void held.released;
  }
  const maybe: Guard | null = shared.tryLock('k');
  maybe?.[Symbol.dispose]();
  pool.lockSync('k', { timeout: 5 }).release();
  pool.unlock('k');
  const n: number = await pool.withLock('k', async () => 1);
  const s: string = await striped.withLockMany(keys, () => 'x', { timeout: null });
  (await pool.lockMany(keys)).release();
  pool.tryLockMany(keys)?.release();
  pool.lockManySync(keys).release();
  pool.unlockMany(keys);
  const locked: boolean = pool.isLocked('k') && rw.isLocked() && rw.isWriteLocked();
  const stats: PoolStats = pool.stats();
  const size: number = pool.size + stats.entriesInUse + stripedShared.stripes + striped.stripeOf('k');
  (await rw.read()).release();
  (await rw.write({ timeout: 0 })).release();
  rw.tryRead()?.release();
  rw.tryWrite()?.release();
  rw.readSync().release();
  rw.writeSync({ timeout: 1 }).release();
  const r: Date = await rw.withRead(() => new Date());
  await rw.withWrite(async () => undefined);
  rw.readUnlock();
  rw.writeUnlock();
  try {
    await pool.lock('k', { timeout: 0 });
  } catch (e) {
    if (e instanceof KeylockError && e.code === 'KEYLOCK_TIMEOUT') return -1;
  }
  void [n, s, locked, size, r, StripedLock.MAX_STRIPES, keylock.KeyPool];
  return 0;
}

// Misuse that must not type-check.
function misuse(pool: KeyPool): void {
  // @ts-expect-error booleans are not keys
  pool.tryLock(true);
  // @ts-expect-error timeout is a number
  void pool.lock('k', { timeout: '5' });
  // @ts-expect-error lockSync takes no signal
  pool.lockSync('k', { signal: new AbortController().signal });
  // @ts-expect-error size is read-only
  pool.size = 3;
}

void usage;
void misuse;

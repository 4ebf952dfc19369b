// Compiled with `tsc -p test` (make test): index.d.ts must type every export and every use below.
import {
  KeyPool,
  StripedLock,
  Semaphore,
  Permit,
  RwLock,
  KeylockError,
  Guard,
  LockManager,
  Lock,
  keyBytes,
  locks,
  type Key,
  type KeyGuard,
  type KeysGuard,
  type KeyInfo,
  type PoolStats,
  type StripedStats,
  type LockManagerSnapshot,
  type PermitInfo,
  type PermitAcquireOptions,
  type LockMetrics,
  type HistogramMetrics,
  type WaitMessage,
  type AcquireMessage,
  type ReleaseMessage,
} from 'keylock';
import keylock from 'keylock';
import { subscribe } from 'node:diagnostics_channel';

async function usage(): Promise<number> {
  const pool = new KeyPool({ reentrant: true, fifo: false });
  const shared: KeyPool = KeyPool.shared('name', { fifo: true });
  const opened: KeyPool = KeyPool.open('local:', { capacity: 64 });
  const openedName: string = opened.name;
  void openedName;
  const striped = new StripedLock(1024, { reentrant: true });
  const stripedShared: StripedLock = StripedLock.shared('name', 64);
  const stripedOpened: StripedLock = StripedLock.open('local:', { stripes: 64, fifo: true });
  const rw: RwLock = RwLock.shared('rw');
  const keys: Key[] = ['a', Buffer.from('b'), new Uint8Array([1, 2]), 42, 42n];
  const bytes: Buffer = keyBytes(keys[3]);
  void bytes;

  const g: KeyGuard = await pool.lock('a', { timeout: 100, signal: AbortSignal.timeout(1000), mode: 'shared' });
  const fence: bigint = g.fence;
  const current: boolean = g.isCurrent();
  const left: number | null = g.leaseRemaining();
  g.extend(500);
  const mode: 'shared' | 'exclusive' = g.mode;
  void [fence, current, left, mode, g.ownerDied, g.key];
  g.release();
  {
    using held = await striped.lock(keys[1], { lease: 30_000, owner: { request: 7 } });
    void held.released;
  }
  const maybe: Guard | null = shared.tryLock('k', { mode: 'exclusive', owner: 'me' });
  maybe?.[Symbol.dispose]();
  pool.lockSync('k', { timeout: 5, lease: 10 }).release();
  const freed: boolean = pool.forceUnlock('k');
  const info: KeyInfo | null = pool.info('k');
  const n: number = await pool.withLock('k', async (guard) => Number(guard.fence), { owner: 1 });
  const s: string = await striped.withLockMany(keys, (guard: KeysGuard) => String(guard.fences[0]), {
    timeout: null,
    mode: ['shared', 'exclusive', 'shared', 'shared', 'exclusive'],
  });
  (await pool.lockMany(keys, { mode: 'shared' })).release();
  pool.tryLockMany(keys)?.release();
  pool.lockManySync(keys).release();
  const locked: boolean = pool.isLocked('k') && rw.isLocked() && rw.isWriteLocked() && pool.reentrant && pool.fifo;
  const stats: PoolStats = pool.stats();
  const stripedStats: StripedStats = striped.stats();
  const here: number = stats.heldHere + stats.waitingHere + stripedStats.stripes + striped.size;
  const size: number =
    pool.size + here + (stats.entriesInUse ?? 0) + stripedShared.stripes + (striped.stripeOf('k') ?? 0);
  (await rw.read()).release();
  const w = await rw.write({ timeout: 0 });
  const wf: bigint = w.fence;
  w.release();
  rw.tryRead()?.release();
  rw.tryWrite()?.release();
  rw.readSync().release();
  rw.writeSync({ timeout: 1 }).release();
  const r: Date = await rw.withRead(() => new Date());
  await rw.withWrite(async (guard) => guard.fence);
  try {
    await pool.lock('k', { timeout: 0 });
  } catch (e) {
    if (e instanceof KeylockError && (e.code === 'KEYLOCK_TIMEOUT' || e.code === 'KEYLOCK_NOT_OWNER')) return -1;
  }

  // Semaphores.
  const sem = new Semaphore(4);
  const semOpened: Semaphore = Semaphore.open('local:', { permits: 2 });
  const permits: number = sem.permits + semOpened.permits;
  const p: Permit = await sem.acquire('k', { weight: 2, timeout: 100, signal: AbortSignal.timeout(1000), lease: 50 });
  const pf: bigint = p.fence;
  const pw: number = p.weight;
  const pk: Key = p.key;
  p.extend(100);
  p.release();
  {
    await using held = await sem.acquire(1n);
    using tried = sem.tryAcquire('t', { weight: 1, lease: null });
    void [held.weight, tried?.weight];
  }
  const asGuard: Guard | null = sem.tryAcquire('k');
  asGuard?.release();
  const len: number = await sem.withPermit('k', async (permit) => permit.weight, { weight: 3 });
  const semInfo: PermitInfo | null = sem.info('k');
  const units: number = (semInfo?.units ?? 0) + (info?.units ?? 0);
  const forced: boolean = sem.forceRelease('k');
  const semStats: PoolStats = sem.stats();
  const semOpts: PermitAcquireOptions = { weight: 1 };

  // wrap: the wrapped function keeps fn's parameters and resolves to its result.
  const transfer = async (from: string, amount: number): Promise<number> => amount + from.length;
  const lockedTransfer: (from: string, amount: number) => Promise<number> = pool.wrap(transfer, (from) => from, {
    timeout: 10,
  });
  const stripedTransfer = striped.wrap(transfer, (from, amount) => `${from}:${amount}`);
  const limitedTransfer = sem.wrap(transfer, (from) => from, semOpts);
  const total: number =
    (await lockedTransfer('a', 1)) + (await stripedTransfer('b', 2)) + (await limitedTransfer('c', 3));
  const syncWrapped: (n: number) => Promise<string> = sem.wrap(
    (n: number) => String(n),
    (n) => n,
  );
  void [permits, pf, pw, pk, len, units, forced, semStats, total, syncWrapped];

  // Web Locks, as browser code writes it.
  const result: number = await locks.request('resource', async (lock) => {
    if (lock) void [lock.name, lock.mode];
    return 1;
  });
  await locks.request('resource', { mode: 'shared', signal: new AbortController().signal }, (lock) => lock?.name);
  await locks.request('resource', { ifAvailable: true }, (lock: Lock | null) => lock === null);
  await locks.request('resource', { steal: true }, async () => undefined);
  const snap: LockManagerSnapshot = await locks.query();
  const firstName: string | undefined = snap.held[0]?.name;
  const manager = new LockManager(new KeyPool({ fifo: true }));
  await manager.request('x', () => 'x');

  // Metrics, and the diagnostics_channel messages.
  const metered = new KeyPool({ metrics: true });
  const m: LockMetrics | null = metered.metrics();
  const semMetrics: LockMetrics | null = new Semaphore(2, { metrics: true }).metrics();
  void Semaphore.open('local:', { permits: 2, metrics: false });
  void StripedLock.open('local:', { stripes: 8, metrics: true }).metrics()?.wait.count;
  if (m !== null) {
    const waits: HistogramMetrics = m.wait;
    const p99: number | null = waits.quantile(0.99);
    const le: number = waits.buckets[0]?.[0] ?? 0;
    const counted: number =
      m.acquired + m.contended + m.timedOut + m.wouldBlock + m.cancelled + m.leaseExpired + m.ownerDied + m.lost;
    void [p99, le, counted + m.forceUnlocked + m.hold.sumMs + m.hold.maxMs, semMetrics];
  }
  subscribe('keylock:wait', (message) => {
    const w = message as WaitMessage;
    void [w.name, w.key, w.keys, w.mode, w.weight, w.timeout];
  });
  subscribe('keylock:acquire', (message) => {
    const a = message as AcquireMessage;
    const held: Guard = a.guard;
    void [held, a.fence, a.mode, a.waitedMs];
  });
  subscribe('keylock:release', (message) => {
    const rel = message as ReleaseMessage;
    void [rel.heldMs, rel.error?.code, rel.guard.released];
  });
  void [
    n,
    s,
    locked,
    size,
    r,
    wf,
    freed,
    info,
    opened,
    stripedOpened,
    result,
    firstName,
    StripedLock.MAX_STRIPES,
    keylock.KeyPool,
    keylock.locks,
  ];
  return 0;
}

// Misuse that must not type-check.
function misuse(pool: KeyPool, guard: KeyGuard): void {
  // @ts-expect-error booleans are not keys
  pool.tryLock(true);
  // @ts-expect-error timeout is a number
  void pool.lock('k', { timeout: '5' });
  // @ts-expect-error lockSync takes no signal
  pool.lockSync('k', { signal: new AbortController().signal });
  // @ts-expect-error tryLock takes no timeout
  pool.tryLock('k', { timeout: 5 });
  // @ts-expect-error modes are 'shared' or 'exclusive'
  void pool.lock('k', { mode: 'read' });
  // @ts-expect-error one mode for one key
  void pool.lock('k', { mode: ['shared'] });
  // @ts-expect-error size is read-only
  pool.size = 3;
  // @ts-expect-error the fence is read-only
  guard.fence = 1n;
  // @ts-expect-error there is no by-key release
  pool.unlock('k');
  // @ts-expect-error Web Locks names are strings
  void locks.request(5, () => 1);
  // @ts-expect-error a callback is required
  void locks.request('x', { mode: 'shared' });
  // @ts-expect-error guards are made by locks
  new Guard();
  // @ts-expect-error metrics is a boolean
  new KeyPool({ metrics: 1 });
  // @ts-expect-error a reading is read-only
  pool.metrics()!.acquired = 3;
}

// Semaphore misuse that must not type-check.
function semaphoreMisuse(sem: Semaphore, pool: KeyPool): void {
  // @ts-expect-error permits is required
  Semaphore.open('local:', {});
  // @ts-expect-error weight is a number
  void sem.acquire('k', { weight: '2' });
  // @ts-expect-error tryAcquire takes no timeout
  sem.tryAcquire('k', { timeout: 5 });
  // @ts-expect-error permits is read-only
  sem.permits = 3;
  const byString = (a: string) => a;
  // @ts-expect-error keyOf takes fn's parameters
  sem.wrap(byString, (a: number) => a);
  // @ts-expect-error keyOf returns a key
  pool.wrap(byString, (a) => ({ a }));
  // @ts-expect-error permits are made by semaphores
  new Permit();
}

void usage;
void misuse;
void semaphoreMisuse;

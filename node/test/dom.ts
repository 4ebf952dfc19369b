// Compiled with `tsc -p test/tsconfig.dom.json` (make test), with TypeScript's lib.dom: code
// written against the browser's Web Locks types (globals: LockManager, Lock, LockOptions, ...)
// takes keylock's objects, and keylock's methods take the browser's types.
import * as keylock from 'keylock';

// A browser library's function, typed with lib.dom's globals only.
async function withResource(manager: LockManager, name: string, options: LockOptions): Promise<string> {
  const snapshot: LockManagerSnapshot = await manager.query();
  const pending: LockInfo[] | undefined = snapshot.pending;
  void pending;
  return manager.request(name, options, async (lock: Lock | null) => (lock ? `${lock.name}:${lock.mode}` : 'none'));
}

async function main(): Promise<void> {
  // keylock.locks where a browser LockManager is expected (navigator.locks' type).
  const asBrowser: LockManager = keylock.locks;
  const fromNavigator: typeof navigator.locks = keylock.locks;
  await withResource(keylock.locks, 'r', { mode: 'shared' });
  await withResource(new keylock.LockManager(new keylock.KeyPool({ fifo: true })), 'r', { ifAvailable: true });
  // Browser option objects and callbacks typed with lib.dom go to keylock's methods.
  const options: LockOptions = { mode: 'exclusive', signal: new AbortController().signal };
  const callback: LockGrantedCallback<Promise<number>> = async (lock) => (lock ? 1 : 0);
  const n: number = await keylock.locks.request('r', options, callback);
  // keylock's Lock and snapshot where lib.dom's are expected.
  await keylock.locks.request('r', (lock) => {
    const browserLock: Lock | null = lock;
    return browserLock;
  });
  const snap: LockManagerSnapshot = await keylock.locks.query();
  void [asBrowser, fromNavigator, n, snap];
}

void main;

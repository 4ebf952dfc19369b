// ESM entry: the same objects as the CommonJS entry (one addon, one set of shared locks).
import keylock from './index.js';

export const {
  KeyPool,
  StripedLock,
  Semaphore,
  RwLock,
  KeylockError,
  Guard,
  Permit,
  LockManager,
  Lock,
  keyBytes,
  unlink,
  locks,
} = keylock;
export default keylock;

//! `stats` on a Redis scope: this process's counts, and `None` for what only the server knows.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use keylock_core::{KeyedLock, LockOptions};

use crate::{Server, key, open, wait_until};

#[test]
fn stats_count_this_process_and_leave_the_scope_wide_figures_unknown() {
    let server = Server::start();
    let a = open(&server, "prefix=st");
    let b = open(&server, "prefix=st");
    let s = b.stats().unwrap();
    assert_eq!((s.held, s.waiting, s.shared_holds), (None, None, None));
    assert_eq!(
        (s.capacity, s.entries_in_use, s.entries_allocated),
        (None, None, None)
    );
    assert_eq!((s.held_here, s.waiting_here), (0, 0));
    let held = a.acquire(key("k"), &LockOptions::new()).unwrap();
    let r = a.acquire(key("r"), &LockOptions::new().shared()).unwrap();
    // Two waiters in the other process: one queued in Redis, one behind it in the process.
    let (tx, rx) = mpsc::channel();
    for _ in 0..2 {
        let (b, tx): (Arc<dyn KeyedLock>, _) = (Arc::clone(&b), tx.clone());
        std::thread::spawn(move || tx.send(b.acquire(key("k"), &LockOptions::new())));
    }
    wait_until(|| b.stats().unwrap().waiting_here == 2);
    assert_eq!(b.stats().unwrap().held_here, 0);
    let sa = a.stats().unwrap();
    assert_eq!((sa.held_here, sa.waiting_here, sa.held), (2, 0, None));
    assert_eq!(sa.keys_held(), 2);
    a.release(held).unwrap();
    a.release(r).unwrap();
    assert_eq!(a.stats().unwrap().held_here, 0);
    // One waiter gets the key; the other stays queued in its process.
    let limit = Duration::from_secs(20);
    let first = rx.recv_timeout(limit).unwrap().unwrap();
    let s = b.stats().unwrap();
    assert_eq!((s.held_here, s.waiting_here), (1, 1));
    b.release(first).unwrap();
    let second = rx.recv_timeout(limit).unwrap().unwrap();
    assert_eq!(b.stats().unwrap().waiting_here, 0);
    b.release(second).unwrap();
    wait_until(|| b.stats().unwrap().held_here == 0);
}

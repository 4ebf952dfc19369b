//! A reproduction, found by the Node front end's stress tests, of acquisitions that end
//! without their release: 8 threads, each running its own single-threaded executor with 4
//! tasks (as 8 Node workers do), take 8 keys of one lock object (`acquire_async` through the
//! `KeyedLock` trait), hold each across a yield and release it. Sometimes a release is refused
//! with `NotOwner` although nothing force-unlocked the key and nothing has a lease: the
//! acquisition had already been ended, and another holder took the key meanwhile. It happens
//! with the default policy (a release notifies the head waiter, which competes) and never with
//! `fifo(true)` (every release grants), in exclusive-only and in mixed-mode runs, on a
//! StripedLock and on a KeyPool; a mixed-mode KeyPool run has also hung.
//!
//! The cause: `Entry::dispatch_locked` checks `compatible(word)` and then grants the head
//! waiter with `update_advancing(|w| Some(w | EXCL | REF))` (or `update(|w| Some(w +
//! READER_ONE ...))`), closures that never decline. With `fifo` off, `try_fast` ignores
//! `QUEUED`, so a fast-path acquirer can take the entry between the check and the
//! compare-and-swap; the CAS loop then retries on the new word and succeeds, advancing the
//! fence over the barger's hold: two holders, and the barger's release is refused. Checking
//! `compatible(w, mode)` inside both closures (and notifying the head when they decline) makes
//! every run here pass.
//!
//! The core now checks compatibility inside those closures; these tests keep it so:
//! `cargo test --release -p keylock-core --test notify_race`. Knobs:
//! `REPRO_MODES=exclusive|shared|mixed` (default mixed), `REPRO_FIFO=1` (strict FIFO: passes).
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use keylock_core::{Error, KeyedLock, LockKey, LockOptions, Mode, StripedLock};

fn run(lock: Arc<dyn KeyedLock>, rounds: usize) -> usize {
    let bad = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8u64)
        .map(|w| {
            let lock = lock.clone();
            let bad = bad.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    let mut tasks = Vec::new();
                    for t in 0..4u64 {
                        let lock = lock.clone();
                        let bad = bad.clone();
                        tasks.push(tokio::task::spawn_local(async move {
                            let mut x = w * 100 + t + 1;
                            for _ in 0..rounds {
                                x = x
                                    .wrapping_mul(6364136223846793005)
                                    .wrapping_add(1442695040888963407);
                                let key = [b'k', b'0' + ((x >> 33) % 8) as u8];
                                let mode = match std::env::var("REPRO_MODES").as_deref() {
                                    Ok("exclusive") => Mode::Exclusive,
                                    Ok("shared") => Mode::Shared,
                                    _ if (x >> 40) & 1 == 0 => Mode::Shared,
                                    _ => Mode::Exclusive,
                                };
                                let acq = lock
                                    .clone()
                                    .acquire_async(
                                        LockKey::new(&key),
                                        &LockOptions::new().mode(mode),
                                    )
                                    .await
                                    .unwrap();
                                tokio::task::yield_now().await;
                                match lock.release(acq) {
                                    Ok(()) => {}
                                    Err(Error::NotOwner) => {
                                        bad.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(e) => panic!("{e}"),
                                }
                            }
                        }));
                    }
                    for t in tasks {
                        t.await.unwrap();
                    }
                });
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    bad.load(Ordering::Relaxed)
}

#[test]
fn striped_mixed_modes_release_their_own() {
    let mut total = 0;
    for _ in 0..20 {
        let fifo = std::env::var("REPRO_FIFO").is_ok();
        total += run(
            Arc::new(
                StripedLock::builder()
                    .stripes(8)
                    .fifo(fifo)
                    .build()
                    .unwrap(),
            ),
            400,
        );
    }
    assert_eq!(total, 0, "releases refused");
}

#[test]
fn pool_mixed_modes_release_their_own() {
    let mut total = 0;
    for _ in 0..20 {
        let fifo = std::env::var("REPRO_FIFO").is_ok();
        total += run(
            Arc::new(
                keylock_core::KeyPool::builder()
                    .fifo(fifo)
                    .build::<Vec<u8>>(),
            ),
            400,
        );
    }
    assert_eq!(total, 0, "releases refused");
}

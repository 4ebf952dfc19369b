//! Bad URLs, a Redis that goes away, and restarts.

use std::time::{Duration, Instant};

use std::sync::Arc;

use keylock_core::{Error, KeyedLock, LockOptions, Wait};

use crate::{Server, key, open, server::free_port, wait_until, within};

#[test]
fn each_bad_url_gets_its_clear_error() {
    for (url, want) in [
        ("http://127.0.0.1:6379", "unknown lock scheme"),
        ("redis+tls://127.0.0.1", "unknown lock scheme"),
        ("redis:/127.0.0.1", "redis:// or rediss://"),
        ("redis://127.0.0.1:99999/0", "port"),
        ("redis://127.0.0.1:0/0", "port"),
        ("redis://127.0.0.1:http/0", "port"),
        ("redis://127.0.0.1:6379/zero", "database"),
        ("redis://127.0.0.1:6379/0?lease=soon", "duration"),
        (
            "redis://127.0.0.1:6379/0?colour=blue",
            "unknown Redis URL option",
        ),
    ] {
        match keylock_core::open(url) {
            Err(Error::InvalidArgument(text)) => {
                assert!(
                    text.contains(want),
                    "{url}: {text:?} should mention {want:?}"
                )
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    // Unreachable: nothing listens there. The connect timeout bounds the attempt.
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}/0?connect_timeout=500ms");
    match keylock_core::open(&url) {
        Err(Error::Unavailable(text)) => {
            assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}")
        }
        other => panic!("unreachable: {other:?}"),
    }
    // TLS to a server that speaks none.
    let plain = Server::start();
    let url = format!(
        "rediss://127.0.0.1:{}/0?connect_timeout=1s&timeout=1s",
        plain.port
    );
    assert!(matches!(
        keylock_core::open(&url),
        Err(Error::Unavailable(_))
    ));
}

#[test]
fn a_password_is_checked_and_never_shown() {
    let secret = "s3cret-Passw0rd";
    let server = Server::with(false, Some(secret));
    let wrong = "wr0ng-Passw0rd";
    let url = format!("redis://:{wrong}@127.0.0.1:{}/0", server.port);
    match keylock_core::open(&url) {
        Err(e @ Error::PermissionDenied(_)) => {
            let text = format!("{e} {e:?}");
            assert!(!text.contains(wrong), "{text}");
            assert!(text.contains("***"), "{text}");
        }
        other => panic!("wrong password: {other:?}"),
    }
    let url = format!("redis://127.0.0.1:{}/0", server.port);
    assert!(
        matches!(keylock_core::open(&url), Err(Error::PermissionDenied(_))),
        "no password"
    );
    let url = format!(
        "redis://default:{secret}@127.0.0.1:{}/0?prefix=pw",
        server.port
    );
    let locks = keylock_core::open(&url).unwrap();
    assert!(!format!("{locks:?}").contains(secret), "{locks:?}");
    let acq = locks.acquire(key("k"), &LockOptions::new()).unwrap();
    assert!(!format!("{acq:?}").contains(secret));
    locks.release(acq).unwrap();
}

#[test]
fn redis_killed_mid_hold_gives_clear_errors_and_the_lost_signal() {
    let mut server = Server::with(true, None);
    let a = open(
        &server,
        "prefix=d&lease=1s&connect_timeout=300ms&timeout=300ms",
    );
    let b = open(
        &server,
        "prefix=d&lease=1s&connect_timeout=300ms&timeout=300ms",
    );
    let held = a.acquire(key("k"), &LockOptions::new()).unwrap();
    let fence = held.fence();
    let lost = a.lost_signal(&held).unwrap();
    assert_eq!(
        b.acquire(key("k"), &LockOptions::new().wait(Wait::No))
            .unwrap_err(),
        Error::WouldBlock
    );
    server.kill9();
    assert!(
        lost.wait_timeout(Duration::from_secs(10)),
        "renewal fails; the holder learns it lost the lock"
    );
    assert!(!a.is_current(&held).unwrap());
    match b.acquire(
        key("k"),
        &LockOptions::new().wait(Wait::For(Duration::from_millis(500))),
    ) {
        Err(Error::Unavailable(text)) => assert!(text.contains("127.0.0.1"), "{text}"),
        other => panic!("acquire with Redis down: {other:?}"),
    }
    assert!(matches!(a.release(held), Err(Error::Unavailable(_))));
    // Back, with its data: the next holder's fence is above the lost holder's.
    server.relaunch();
    let next = eventually(|| {
        b.acquire(
            key("k"),
            &LockOptions::new().wait(Wait::For(Duration::from_secs(3))),
        )
    });
    assert!(next.fence() > fence, "{} > {fence}", next.fence());
    b.release(next).unwrap();
}

#[test]
fn a_restart_with_appendonly_keeps_fences_rising() {
    let mut server = Server::with(true, None);
    let locks = open(&server, "prefix=aof&timeout=500ms");
    let mut last = 0;
    for _ in 0..3 {
        let acq = locks.acquire(key("k"), &LockOptions::new()).unwrap();
        assert!(acq.fence() > last);
        last = acq.fence();
        locks.release(acq).unwrap();
    }
    // A waited acquire leaves an idle blocking connection in the pool...
    let other = open(&server, "prefix=aof&timeout=500ms");
    waited_acquire(&locks, &other);
    server.restart();
    let acq = eventually(|| locks.acquire(key("k"), &LockOptions::new()));
    assert!(
        acq.fence() > last,
        "{} > {last} after the restart",
        acq.fence()
    );
    locks.release(acq).unwrap();
    // ...which the restart tore: a wait after it still works.
    let _ = eventually(|| other.is_locked(key("w")));
    waited_acquire(&locks, &other);
}

/// `other` holds `w`, `locks` waits for it (blocking on its own list) until `other` lets go.
fn waited_acquire(locks: &Arc<dyn KeyedLock>, other: &Arc<dyn KeyedLock>) {
    let held = other.acquire(key("w"), &LockOptions::new()).unwrap();
    let l = Arc::clone(locks);
    let waiter = std::thread::spawn(move || {
        l.acquire(
            key("w"),
            &LockOptions::new().wait(Wait::For(Duration::from_secs(20))),
        )
        .map(|acq| l.release(acq))
    });
    wait_until(|| other.info(key("w")).unwrap().is_some_and(|i| i.waiters > 0));
    other.release(held).unwrap();
    let got = within(Duration::from_secs(30), move || waiter.join().unwrap());
    got.expect("the waiter got the key").unwrap();
}

/// The first success of `f` within 10 s; a connection torn by a restart fails a call or two
/// (with `Unavailable`) before the client has reconnected.
fn eventually<T>(mut f: impl FnMut() -> keylock_core::Result<T>) -> T {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match f() {
            Ok(v) => return v,
            Err(Error::Unavailable(_)) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("{e}"),
        }
    }
}

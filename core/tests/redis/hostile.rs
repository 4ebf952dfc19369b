//! The scope against a misbehaving server (a proxy in front of a real one, see `proxy.rs`): an
//! extra reply, a trickled reply, a torn reply, wrong types, silence. Never a false grant,
//! never a hang past the deadline, never a crash.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use keylock_core::{Error, KeyedLock, LockOptions, Wait};

use crate::proxy::{Fault, Proxy, is_acquire, is_leave_or_release};
use crate::{Server, key, open, wait_until, within};

const NO: LockOptions = LockOptions::new().wait(Wait::No);

fn open_via(proxy: &Proxy, query: &str) -> Arc<dyn KeyedLock> {
    keylock_core::open(&proxy.url(query)).expect("open the Redis scope through the proxy")
}

/// A try of `k` by `locks`, which must end within 20 s, whatever the network does: what the
/// acquire gave (a grant is released again, and a failure of that release is not its result).
fn try_key(locks: &Arc<dyn KeyedLock>, k: &'static str) -> keylock_core::Result<()> {
    let l = Arc::clone(locks);
    within(Duration::from_secs(20), move || {
        l.acquire(key(k), &NO).map(|acq| {
            let _ = l.release(acq);
        })
    })
}

/// A try of a key another client holds: refused, or Redis unavailable; never granted.
fn assert_refused(r: keylock_core::Result<()>, what: &str) {
    assert!(
        matches!(r, Err(Error::WouldBlock) | Err(Error::Unavailable(_))),
        "{what}: a key another client holds was granted or failed oddly: {r:?}"
    );
}

#[test]
fn an_extra_reply_never_grants_a_held_key() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let other = open(&server, "prefix=extra");
    let held = other.acquire(key("held"), &LockOptions::new()).unwrap();
    let locks = open_via(&proxy, "prefix=extra&timeout=2s");
    // One reply too many, read as the answer to an acquire of a free key: a release's reply,
    // and a stale grant. The real answer (a grant of "free") comes after it.
    for extra in [&b":1\r\n"[..], b"*3\r\n:1\r\n:7\r\n:0\r\n"] {
        proxy.once(is_acquire, Fault::Extra(extra.to_vec()));
        let first = try_key(&locks, "free");
        assert!(
            matches!(first, Ok(()) | Err(Error::Unavailable(_))),
            "{first:?}"
        );
        assert!(proxy.used());
        for _ in 0..3 {
            assert_refused(try_key(&locks, "held"), "after an extra reply");
        }
        // Whatever that acquire took on the server was given back: nobody holds "free".
        wait_until(|| other.info(key("free")).unwrap().is_none());
    }
    other.release(held).unwrap();
    try_key(&locks, "held").unwrap();
}

#[test]
fn a_trickled_reply_is_bounded_by_the_acquires_timeout() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    // Each command may take 10 s; the acquire asks for 1.5 s, and must return by then (the
    // test allows 6 s). The reply comes one byte every 0.5 s: many seconds in all.
    let locks = open_via(&proxy, "prefix=trickle&timeout=10s");
    let timed = LockOptions::new().wait(Wait::For(Duration::from_millis(1500)));
    proxy.once(is_acquire, Fault::Trickle(Duration::from_millis(500)));
    let l = Arc::clone(&locks);
    let blocking = within(Duration::from_secs(6), move || l.acquire(key("a"), &timed));
    assert!(
        matches!(blocking, Err(Error::TimedOut)),
        "blocking: {blocking:?}"
    );
    proxy.once(is_acquire, Fault::Trickle(Duration::from_millis(500)));
    let l = Arc::clone(&locks);
    let nonblocking = within(Duration::from_secs(6), move || {
        futures::executor::block_on(l.acquire_async(key("b"), &timed))
    });
    assert!(
        matches!(nonblocking, Err(Error::TimedOut)),
        "async: {nonblocking:?}"
    );
    assert!(proxy.used());
    // The abandoned acquires hold nothing, and the scope works on.
    let other = open(&server, "prefix=trickle");
    wait_until(|| {
        other.info(key("a")).unwrap().is_none() && other.info(key("b")).unwrap().is_none()
    });
    try_key(&locks, "a").unwrap();
}

#[test]
fn a_missing_reply_says_it_timed_out() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let locks = open_via(&proxy, "prefix=silent&timeout=1s");
    proxy.once(is_acquire, Fault::Silence);
    match try_key(&locks, "k") {
        Err(Error::Unavailable(text)) => {
            assert!(
                text.contains("timed out waiting for Redis (after "),
                "{text}"
            );
            assert!(
                text.contains(&format!("127.0.0.1:{}", proxy.port)),
                "{text}"
            );
        }
        other => panic!("no reply: {other:?}"),
    }
    // A fresh connection answers, and the silenced acquire left nothing held.
    wait_until(|| try_key(&locks, "k").is_ok());
}

#[test]
fn a_timed_out_wait_whose_leave_gets_no_reply_returns_near_its_deadline() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let other = open(&server, "prefix=leave");
    let held = other.acquire(key("k"), &LockOptions::new()).unwrap();
    // Each command may take 10 s. The wait asks for 300 ms, queues, and runs out of time; the
    // leave it sends then (this client's only leave or release: it holds nothing) runs
    // on the server, and its reply never comes. The acquire still returns within 6 s.
    let locks = open_via(&proxy, "prefix=leave&timeout=10s");
    proxy.once(is_leave_or_release, Fault::Silence);
    let timed = LockOptions::new().wait(Wait::For(Duration::from_millis(300)));
    let l = Arc::clone(&locks);
    let r = within(Duration::from_secs(6), move || l.acquire(key("k"), &timed));
    assert!(matches!(r, Err(Error::TimedOut)), "{r:?}");
    assert!(proxy.used());
    // The leave ran: no waiter is left, and the key goes to the next try once released.
    assert_eq!(other.info(key("k")).unwrap().map(|i| i.waiters), Some(0));
    other.release(held).unwrap();
    try_key(&locks, "k").unwrap();
}

#[test]
fn open_against_a_silent_server_is_bounded_by_connect_timeout() {
    // Accepts TCP connections (the kernel does, into the backlog) and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let url = format!("redis://127.0.0.1:{port}/0?connect_timeout=1s&timeout=20s");
    let opened = within(Duration::from_secs(10), move || {
        keylock_core::open(&url).map(drop)
    });
    match opened {
        Err(Error::Unavailable(text)) => {
            assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
            assert!(text.contains("timed out waiting for Redis"), "{text}");
        }
        other => panic!("open against a silent server: {other:?}"),
    }
    drop(silent);
}

#[test]
fn a_torn_reply_leaves_no_orphaned_hold() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let locks = open_via(&proxy, "prefix=torn");
    let other = open(&server, "prefix=torn");
    // The server runs the acquire; its reply is lost with the connection. The scope sends it
    // once more, with the same token, on a fresh connection: the same grant, held once.
    proxy.once(is_acquire, Fault::Cut);
    let l = Arc::clone(&locks);
    let got = within(Duration::from_secs(20), move || l.acquire(key("k"), &NO));
    assert!(proxy.used());
    match got {
        Ok(acq) => {
            assert!(locks.is_current(&acq).unwrap());
            assert_eq!(other.acquire(key("k"), &NO).unwrap_err(), Error::WouldBlock);
            let info = other.info(key("k")).unwrap().unwrap();
            assert_eq!((info.fence, info.holders), (acq.fence(), 1));
            locks.release(acq).unwrap();
        }
        Err(e) => panic!("torn reply: {e:?}"),
    }
    // Free now, not when the abandoned token's 30 s lease ends.
    wait_until(|| other.info(key("k")).unwrap().is_none());
    let acq = other.acquire(key("k"), &NO).unwrap();
    other.release(acq).unwrap();
}

#[test]
fn wrong_types_never_grant_and_never_crash() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let other = open(&server, "prefix=types");
    let held = other.acquire(key("held"), &LockOptions::new()).unwrap();
    let locks = open_via(&proxy, "prefix=types&timeout=2s");
    for reply in [
        &b"+OK\r\n"[..],
        b"-ERR injected\r\n",
        b":1\r\n",
        b"$5\r\nhello\r\n",
        b"$-1\r\n",
        b"*0\r\n",
        b"*1\r\n:1\r\n",
        // Grant-shaped, for a key that is not free: with no request id, or a wrong one.
        b"*3\r\n:1\r\n:9\r\n:0\r\n",
        b"*2\r\n$5\r\nhello\r\n*3\r\n:1\r\n:9\r\n:0\r\n",
        b"*2\r\n:1\r\n*3\r\n:1\r\n:9\r\n:0\r\n",
    ] {
        proxy.once(is_acquire, Fault::Replace(reply.to_vec()));
        let what = String::from_utf8_lossy(reply).into_owned();
        assert_refused(try_key(&locks, "held"), &what);
        assert!(proxy.used(), "{what}");
    }
    // Nothing the replaced acquires did is left behind, and the scope works on.
    other.release(held).unwrap();
    wait_until(|| try_key(&locks, "held").is_ok());
    assert_eq!(other.info(key("held")).unwrap(), None);
}

/// A fence floor holding something else than a number (written there by someone else) makes no
/// fence: a grant that would start a key's counter from it fails with an error that names it,
/// nothing is left held, and once the floor is a number again the key's fences start above it.
#[test]
fn a_corrupted_fence_floor_makes_no_fence() {
    let server = Server::start();
    let locks = open(&server, "prefix=floor");
    let mut raw = server.client();
    let () = redis::cmd("SET")
        .arg("{floor}:fence")
        .arg("not a number")
        .query(&mut raw)
        .unwrap();
    match locks.acquire(key("k"), &LockOptions::new()) {
        Err(Error::Unavailable(text)) => assert!(text.contains("fence floor"), "{text}"),
        other => panic!("a grant from a corrupted fence floor: {other:?}"),
    }
    wait_until(|| locks.info(key("k")).unwrap().is_none());
    let () = redis::cmd("SET")
        .arg("{floor}:fence")
        .arg(1000)
        .query(&mut raw)
        .unwrap();
    let acq = locks.acquire(key("k"), &NO).unwrap();
    assert!(acq.fence() > 1000, "{}", acq.fence());
    locks.release(acq).unwrap();
}

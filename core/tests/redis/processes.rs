//! Threads and child processes contending on one key through one Redis.

use std::time::{Duration, Instant};

use keylock_core::{KeyedLock, LockOptions, Mode, Wait};
use redis::Commands;

use crate::children::{read_tagged, spawn, spawn_command};
use crate::{Server, key, open, wait_until, within};

/// One critical section on `counter`: counts who is inside at once (`seen`), and for exclusive
/// holders increments `count` with a GET then a SET and logs the fence in acquisition order;
/// shared holders wait inside until all `parties` are in at once.
pub(crate) fn critical_section(
    locks: &dyn KeyedLock,
    con: &mut redis::Connection,
    mode: Mode,
    parties: i64,
) {
    let acq = locks
        .acquire(key("counter"), &LockOptions::new().mode(mode))
        .unwrap();
    let inside: i64 = con.incr("inside", 1).unwrap();
    let _: () = con.rpush("seen", inside).unwrap();
    match mode {
        Mode::Exclusive => {
            let n: Option<i64> = con.get("count").unwrap();
            let _: () = con.set("count", n.unwrap_or(0) + 1).unwrap();
            let _: () = con.rpush("fences", acq.fence()).unwrap();
        }
        _ => {
            let until = Instant::now() + Duration::from_secs(30);
            loop {
                let now: i64 = con.get("inside").unwrap();
                let met: Option<i64> = con.get("met").unwrap();
                if now >= parties || met.is_some() {
                    let _: () = con.set("met", 1).unwrap();
                    break;
                }
                assert!(
                    Instant::now() < until,
                    "the shared holders were never all inside"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    let _: i64 = con.decr("inside", 1).unwrap();
    locks.release(acq).unwrap();
}

/// Workers in other languages that join the counting tests: `KEYLOCK_REDIS_WORKERS`, commands
/// separated by `;` (e.g. the Python and Node bindings' `redis_worker` scripts, once those
/// bindings open the Redis scope). Each gets the same environment as a Rust child and follows
/// [`critical_section`]'s protocol, then prints `@done`.
fn other_workers() -> Vec<String> {
    std::env::var("KEYLOCK_REDIS_WORKERS")
        .unwrap_or_default()
        .split(';')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs `children` child processes (and the other workers) (on `scopes` scope objects, so that
/// threads of one scope coalesce locally) through `ops` critical sections each.
fn contend(
    server: &Server,
    mode: Mode,
    children: usize,
    threads: usize,
    scopes: usize,
    ops: usize,
) {
    let others = other_workers();
    let parties = (children + threads + others.len()) as i64;
    let url = server.url("prefix=t&lease=5s");
    let data = format!("redis://127.0.0.1:{}/0", server.port);
    let env = [
        ("KEYLOCK_REDIS_URL", url.clone()),
        ("KEYLOCK_DATA_URL", data.clone()),
        ("KEYLOCK_OPS", ops.to_string()),
        ("KEYLOCK_PARTIES", parties.to_string()),
        (
            "KEYLOCK_MODE",
            if mode == Mode::Shared {
                "shared"
            } else {
                "exclusive"
            }
            .to_owned(),
        ),
    ];
    let mut kids: Vec<_> = (0..children).map(|_| spawn("count", &env)).collect();
    kids.extend(others.iter().map(|cmd| spawn_command(cmd, &env)));
    let locks: Vec<_> = (0..scopes)
        .map(|_| open(server, "prefix=t&lease=5s"))
        .collect();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let locks = std::sync::Arc::clone(&locks[t % scopes]);
            let data = data.clone();
            std::thread::spawn(move || {
                let mut con = redis::Client::open(data.as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap();
                for _ in 0..ops {
                    critical_section(&*locks, &mut con, mode, parties);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for k in &mut kids {
        assert_eq!(read_tagged(k, "@done"), "");
        assert!(k.wait().unwrap().success());
    }
}

#[test]
fn exclusive_processes_and_threads_count_exactly_with_rising_fences() {
    let server = std::sync::Arc::new(Server::start());
    let (children, threads, ops) = (2, 3, 60);
    let srv = std::sync::Arc::clone(&server);
    within(Duration::from_secs(120), move || {
        contend(&srv, Mode::Exclusive, children, threads, 2, ops)
    });
    let mut con = server.client();
    let total = ((children + threads + other_workers().len()) * ops) as i64;
    let count: i64 = con.get("count").unwrap();
    assert_eq!(count, total, "every increment under the lock counted");
    let seen: Vec<i64> = con.lrange("seen", 0, -1).unwrap();
    assert_eq!(seen.len() as i64, total);
    assert_eq!(
        seen.iter().max(),
        Some(&1),
        "never two exclusive holders inside"
    );
    let fences: Vec<u64> = con.lrange("fences", 0, -1).unwrap();
    assert_eq!(fences.len() as i64, total);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences rise strictly in acquisition order: {fences:?}"
    );
}

#[test]
fn shared_holders_in_processes_and_threads_overlap() {
    let server = std::sync::Arc::new(Server::start());
    let srv = std::sync::Arc::clone(&server);
    within(Duration::from_secs(60), move || {
        contend(&srv, Mode::Shared, 2, 2, 1, 1)
    });
    let mut con = server.client();
    let seen: Vec<i64> = con.lrange("seen", 0, -1).unwrap();
    let parties = 4 + other_workers().len();
    assert_eq!(seen.len(), parties);
    assert_eq!(
        seen.iter().max().map(|&n| n as usize),
        Some(parties),
        "every shared holder inside at once"
    );
    let inside: i64 = con.get("inside").unwrap();
    assert_eq!(inside, 0);
}

#[test]
fn a_killed_holder_is_replaced_within_its_lease_with_a_higher_fence() {
    let server = Server::start();
    let lease = Duration::from_secs(2);
    let url = server.url("prefix=k&lease=2s");
    let mut child = spawn("hold", &[("KEYLOCK_REDIS_URL", url)]);
    let fence: u64 = read_tagged(&mut child, "@fence").parse().unwrap();
    let locks = open(&server, "prefix=k&lease=2s");
    assert_eq!(
        locks
            .acquire(key("job"), &LockOptions::new().wait(Wait::No))
            .unwrap_err(),
        keylock_core::Error::WouldBlock
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let next = within(Duration::from_secs(30), move || {
        let acq = locks.acquire(
            key("job"),
            &LockOptions::new().wait(Wait::For(lease + Duration::from_secs(1))),
        );
        (acq, locks)
    });
    let (acq, locks) = next;
    let acq = acq.expect("the next acquirer gets the key within the lease + 1 s");
    assert!(acq.fence() > fence, "{} > {fence}", acq.fence());
    assert!(
        acq.owner_died(),
        "the previous holder's lease ran out unreleased"
    );
    locks.release(acq).unwrap();
}

#[test]
fn a_waiter_killed_at_the_head_of_the_queue_holds_nobody_up() {
    let server = Server::start();
    let locks = open(&server, "prefix=q");
    let held = locks.acquire(key("queue"), &LockOptions::new()).unwrap();
    let mut child = spawn("wait", &[("KEYLOCK_REDIS_URL", server.url("prefix=q"))]);
    wait_until(|| locks.info(key("queue")).unwrap().unwrap().waiters == 1);
    // A second waiter (another scope: another process's queue place) behind the child.
    let other = open(&server, "prefix=q");
    let o = std::sync::Arc::clone(&other);
    let second = std::thread::spawn(move || {
        o.acquire(key("queue"), &LockOptions::new()).map(|a| {
            let f = a.fence();
            o.release(a).map(|()| f)
        })
    });
    wait_until(|| locks.info(key("queue")).unwrap().unwrap().waiters == 2);
    child.kill().unwrap(); // SIGKILL, at the head of the queue
    child.wait().unwrap();
    let fence = held.fence();
    locks.release(held).unwrap();
    // The release woke the dead head; its registration lapses and the next waiter takes over.
    let got = within(Duration::from_secs(20), move || second.join().unwrap());
    assert!(got.unwrap().unwrap() > fence);
}

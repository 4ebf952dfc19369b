//! The `keylock` command against real scopes: shared-memory regions, a real redis-server and a
//! real PostgreSQL, with keys held and awaited by this test process (the command is another
//! process, as an operator's would be), and `watch` driven under tmux as a person would.
//!
//! Every wait has a deadline, so that a hang fails the test instead of stalling it.

#[allow(dead_code)]
#[path = "../../tests/postgres/server.rs"]
mod pg_server;
#[allow(dead_code)]
#[path = "../../tests/redis/server.rs"]
mod redis_server;

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use keylock_core::{KeyedLock, LockKey, LockOptions, OpenOptions, Wait};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_keylock");

/// Runs the command with `args` (stdin empty), within a minute.
fn keylock(args: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("keylock {args:?} did not finish within a minute");
        }
        thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited by a signal")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn json(o: &Output) -> Value {
    assert_eq!(code(o), 0, "stderr: {}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A region name of this test run.
fn region(tag: &str) -> String {
    format!("shm:cli-{tag}-{}", std::process::id())
}

fn key(bytes: &[u8]) -> LockKey<'_> {
    LockKey::new(bytes)
}

/// Polls `f` until it is true, for at most 20 s.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A thread of this process waiting for `k` (until it gets it, then it lets it go at once).
fn waiter(lock: &Arc<dyn KeyedLock>, k: &'static [u8]) -> thread::JoinHandle<()> {
    let lock = Arc::clone(lock);
    thread::spawn(move || {
        let opts = LockOptions::new().wait(Wait::For(Duration::from_secs(60)));
        let acq = lock.acquire(key(k), &opts).unwrap();
        lock.release(acq).unwrap();
    })
}

fn by_key<'a>(list: &'a Value, k: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == k)
        .unwrap_or_else(|| panic!("{k} not in {list}"))
}

#[test]
fn shm_list_info_unlock_and_unlink() {
    let name = region("pool");
    let lock = keylock_core::open_with(&name, &OpenOptions::new().capacity(64)).unwrap();
    let me = std::process::id();
    let held = lock.acquire(key(b"acct:1"), &LockOptions::new()).unwrap();
    let shared_opts = LockOptions::new().shared();
    let r1 = lock.acquire(key(&[0, 1]), &shared_opts).unwrap();
    let r2 = lock.acquire(key(&[0, 1]), &shared_opts).unwrap();
    let w = waiter(&lock, b"acct:1");
    eventually("the waiter to queue", || {
        lock.info(key(b"acct:1")).unwrap().unwrap().waiters == 1
    });

    let list = json(&keylock(&["list", &name, "--json"]));
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");
    let a = by_key(&list, "acct:1");
    assert_eq!(a["mode"], "exclusive");
    assert_eq!(a["fence"], held.fence());
    assert_eq!(a["holders"], 1);
    assert_eq!(a["holder_records"][0]["pid"], me);
    assert_eq!(a["waiters"], 1);
    assert_eq!(a["waiter_records"][0]["pid"], me);
    assert!(a["waiter_records"][0]["waited_ms"].as_u64().is_some());
    let s = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key_hex"] == "0001")
        .unwrap();
    assert_eq!(s["key"], Value::Null, "unprintable bytes have no text");
    assert_eq!(s["mode"], "shared");
    assert_eq!(s["holders"], 2);
    assert_eq!(s["holder_records"].as_array().unwrap().len(), 2);

    // The table says the same.
    let table = stdout(&keylock(&["list", &name]));
    assert!(table.starts_with("KEY"), "{table}");
    assert!(
        table.contains("acct:1") && table.contains("0x0001"),
        "{table}"
    );

    // One key in full; a free key is exit 1; keys by hex and integer.
    let info = keylock(&["info", &name, "acct:1"]);
    assert_eq!(code(&info), 0);
    assert!(stdout(&info).contains(&format!("fence:    {}", held.fence())));
    assert!(stdout(&info).contains(&format!("waiter  pid {me} exclusive waiting")));
    let free = keylock(&["info", &name, "nobody"]);
    assert_eq!(
        (code(&free), stdout(&free)),
        (1, "nobody: free\n".to_owned())
    );
    assert_eq!(
        json(&keylock(&["info", &name, "--hex", "0001", "--json"]))["holders"],
        2
    );
    let int_key = keylock_core::keys::encode_i64(7);
    let i = lock.acquire(key(&int_key), &LockOptions::new()).unwrap();
    assert_eq!(
        json(&keylock(&["info", &name, "--int", "7", "--json"]))["fence"],
        i.fence()
    );
    lock.release(i).unwrap();
    let freed = keylock(&["info", &name, "--int", "7", "--json"]);
    assert_eq!((code(&freed), stdout(&freed)), (1, "null\n".to_owned()));

    // unlock asks first; with no terminal to ask on it refuses and frees nothing.
    let refused = keylock(&["unlock", &name, "acct:1"]);
    assert_eq!(code(&refused), 6, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--yes"));
    assert_eq!(
        lock.info(key(b"acct:1")).unwrap().unwrap().fence,
        held.fence()
    );
    let unlocked = keylock(&["unlock", &name, "acct:1", "--yes"]);
    assert_eq!(code(&unlocked), 0, "{}", stderr(&unlocked));
    assert_eq!(
        stdout(&unlocked),
        format!("acct:1: unlocked, ended fence {}\n", held.fence())
    );
    // The waiter got it and let it go; the old holder's release is refused.
    w.join().unwrap();
    assert_eq!(lock.release(held), Err(keylock_core::Error::NotOwner));
    let again = keylock(&["unlock", &name, "acct:1", "--yes"]);
    assert_eq!(code(&again), 1);

    lock.release(r1).unwrap();
    lock.release(r2).unwrap();
    assert_eq!(
        json(&keylock(&["list", &name, "--json"])),
        Value::Array(vec![])
    );
    drop(lock);
    let gone = keylock(&["unlink", &name]);
    assert_eq!(
        (code(&gone), stdout(&gone)),
        (0, format!("{name}: removed\n"))
    );
    assert_eq!(code(&keylock(&["unlink", &name])), 1);
}

#[test]
fn shm_striped_region_lists_its_stripes() {
    let name = region("striped");
    let lock = keylock_core::open_with(&name, &OpenOptions::new().stripes(8)).unwrap();
    let acq = lock.acquire(key(b"k"), &LockOptions::new()).unwrap();
    let stripe = lock.stripe_of(key(b"k")).unwrap();
    let list = json(&keylock(&["list", &name, "--json"]));
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["stripe"], stripe);
    assert_eq!(list[0]["fence"], acq.fence());
    // info by key finds the key's stripe.
    assert_eq!(
        json(&keylock(&["info", &name, "k", "--json"]))["stripe"],
        stripe
    );
    lock.release(acq).unwrap();
    drop(lock);
    keylock_core::unlink(&name).unwrap();
}

#[test]
fn bad_input_gets_a_clear_message_and_its_exit_code() {
    let check = |args: &[&str], want: i32, says: &str| {
        let o = keylock(args);
        assert_eq!(code(&o), want, "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(says),
            "{args:?}: {:?} lacks {says:?}",
            stderr(&o)
        );
        assert!(o.stdout.is_empty(), "{args:?} printed {:?}", stdout(&o));
    };
    let missing = region("missing");
    check(&["list", &missing], 3, "no region");
    check(&["info", &missing, "k"], 3, "no region");
    check(&["list", "nonsense"], 2, "scheme");
    check(&["list", "ftp://x"], 2, "unknown lock scheme");
    check(&["list", "local:"], 2, "lives in one process");
    check(&["list", "shm:bad/name"], 2, "shm region name");
    check(&["info", &missing, "--hex", "zz"], 2, "not hex");
    check(&["info", &missing, "--hex", "abc"], 2, "even number");
    check(&["info", &missing, "--int", "x"], 2, "not an integer");
    check(&["unlink", "redis://127.0.0.1:1/0"], 2, "only shm:");
    check(&["lisst", &missing], 2, "unrecognized subcommand");
    check(&["watch", &missing, "--interval", "0"], 2, "at least 0.05");

    // A region of another layout: a file that is not a keylock region.
    let junk = region("junk");
    let path = format!("/dev/shm/keylock.{}", &junk[4..]);
    std::fs::write(&path, vec![0x5au8; 8192]).unwrap();
    check(&["list", &junk], 4, "incompatible");
    std::fs::remove_file(&path).unwrap();

    // An unreachable server, with a password that must not show.
    let port = redis_server::free_port();
    let url = format!("redis://user:sekrit-pw@127.0.0.1:{port}/0?connect_timeout=2s");
    let o = keylock(&["list", &url]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("127.0.0.1"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("sekrit-pw"), "{}", stderr(&o));
}

/// The server scopes: keys held and awaited by this process, seen by the command.
fn server_scope(url: &str, shown: &str) {
    let lock = keylock_core::open(url).unwrap();
    let held = lock.acquire(key(b"job:9"), &LockOptions::new()).unwrap();
    // The waiter on a lock object of its own, so that it waits on the server (a lock object
    // queues its own acquirers of a key it holds in the process, where no other process sees
    // them).
    let other = keylock_core::open(url).unwrap();
    let w = waiter(&other, b"job:9");
    eventually("the waiter to queue", || {
        lock.info(key(b"job:9")).unwrap().unwrap().waiters == 1
    });
    let list = json(&keylock(&["list", url, "--json"]));
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let j = by_key(&list, "job:9");
    assert_eq!(
        (j["mode"].clone(), j["fence"].clone()),
        ("exclusive".into(), held.fence().into())
    );
    assert_eq!(j["waiters"], 1);
    let table = keylock(&["list", url]);
    assert!(stdout(&table).contains("job:9"), "{}", stdout(&table));
    let unlocked = keylock(&["unlock", url, "job:9", "--yes"]);
    assert_eq!(
        (code(&unlocked), stdout(&unlocked)),
        (
            0,
            format!("job:9: unlocked, ended fence {}\n", held.fence())
        ),
        "{}",
        stderr(&unlocked)
    );
    w.join().unwrap();
    assert!(lock.release(held).is_err());
    eventually("the key to be free", || {
        json(&keylock(&["list", url, "--json"])) == Value::Array(vec![])
    });
    // Nothing the command printed or said shows the password.
    for args in [
        vec!["list", url],
        vec!["info", url, "job:9"],
        vec!["list", url, "--json"],
    ] {
        let o = keylock(&args);
        let all = format!("{}{}", stdout(&o), stderr(&o));
        assert!(!all.contains(shown), "{args:?} printed the password: {all}");
    }
}

/// A keyed semaphore's keys seen with `--semaphore` (`-s`): units held by this process and a
/// request of another scope object queued behind them, then a force-release that lets it in.
/// `no_semaphore` is a scope of the same kind with locks only, which `-s` refuses (exit 4).
/// `apart`: the scope keeps its semaphore apart from its locks (a server prefix), so the lock
/// view shows none of the semaphore's keys.
fn semaphore_scope(url: &str, no_semaphore: &str, apart: bool) {
    let opts = OpenOptions::new().permits(3);
    let sem = keylock_core::open_with(url, &opts).unwrap();
    let held = sem
        .acquire(key(b"slot:1"), &LockOptions::new().weight(2))
        .unwrap();
    let other = keylock_core::open_with(url, &opts).unwrap();
    let w = thread::spawn(move || {
        let o = LockOptions::new()
            .weight(2)
            .wait(Wait::For(Duration::from_secs(60)));
        let acq = other.acquire(key(b"slot:1"), &o).unwrap();
        other.release(acq).unwrap();
    });
    eventually("the request to queue", || {
        sem.info(key(b"slot:1")).unwrap().unwrap().waiters == 1
    });
    let list = json(&keylock(&["list", "--semaphore", url, "--json"]));
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let j = by_key(&list, "slot:1");
    assert_eq!(
        (j["units"].clone(), j["waiters"].clone(), j["fence"].clone()),
        (2.into(), 1.into(), held.fence().into()),
        "{j}"
    );
    assert_eq!(j["permits"], 3, "{j}");
    // The table shows units held of the permits where a lock's shows its mode.
    let table = stdout(&keylock(&["list", "-s", url]));
    let words = |l: &str| l.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        (words(lines[0]), words(lines[1])),
        ("KEY UNITS".to_owned(), "slot:1 2/3".to_owned()),
        "{table}"
    );
    // The flag goes anywhere on the line.
    let info = json(&keylock(&["info", url, "slot:1", "-s", "--json"]));
    assert_eq!(
        (info["units"].clone(), info["permits"].clone()),
        (2.into(), 3.into()),
        "{info}"
    );
    let detail = stdout(&keylock(&["info", "-s", url, "slot:1"]));
    assert!(detail.contains("units:    2 of 3\n"), "{detail}");
    if apart {
        assert_eq!(
            json(&keylock(&["list", url, "--json"])),
            Value::Array(vec![]),
            "the lock view shows no semaphore key"
        );
    }
    let unlocked = keylock(&["unlock", "-s", url, "slot:1", "--yes"]);
    assert_eq!(
        (code(&unlocked), stdout(&unlocked)),
        (
            0,
            format!(
                "slot:1: released 1 holder(s) holding 2 of 3 units, newest fence {}\n",
                held.fence()
            )
        ),
        "{}",
        stderr(&unlocked)
    );
    w.join().unwrap();
    assert!(sem.release(held).is_err());
    eventually("the key to be free", || {
        json(&keylock(&["list", "-s", url, "--json"])) == Value::Array(vec![])
    });
    let refused = keylock(&["list", "-s", no_semaphore]);
    assert_eq!(code(&refused), 4, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("semaphore"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn shm_semaphore_region() {
    let (sem_name, lock_name) = (region("sem"), region("locks"));
    let _locks = keylock_core::open_with(&lock_name, &OpenOptions::new().capacity(8)).unwrap();
    semaphore_scope(&sem_name, &lock_name, false);
    // unlink removes only a region of the kind asked for (exit 4 for the other kind).
    assert_eq!(code(&keylock(&["unlink", &sem_name])), 4);
    assert_eq!(code(&keylock(&["-s", "unlink", &lock_name])), 4);
    assert_eq!(code(&keylock(&["-s", "unlink", &sem_name])), 0);
    assert_eq!(code(&keylock(&["unlink", &lock_name])), 0);
    assert_eq!(code(&keylock(&["-s", "unlink", &sem_name])), 1);
    // A region that cannot be read as either kind is removed all the same: unlink is how a
    // corrupt region goes.
    let corrupt = region("corrupt");
    let path = format!("/dev/shm/keylock.{}", &corrupt["shm:".len()..]);
    std::fs::write(&path, vec![0xa5u8; 8192]).unwrap();
    assert_eq!(code(&keylock(&["list", &corrupt])), 4);
    let gone = keylock(&["-s", "unlink", &corrupt]);
    assert_eq!(code(&gone), 0, "{}", stderr(&gone));
    assert!(!std::path::Path::new(&path).exists());
}

#[test]
fn redis_scope() {
    let server = redis_server::Server::with(false, Some("redis-pw-xyz"));
    let url = format!(
        "redis://:redis-pw-xyz@127.0.0.1:{}/0?prefix=cli",
        server.port
    );
    server_scope(&url, "redis-pw-xyz");
    let sem_url = url.replace("prefix=cli", "prefix=clisem");
    semaphore_scope(&sem_url, &url, true);
}

#[test]
fn postgres_scope() {
    let server = pg_server::Server::start();
    let url = server.url("cli");
    server_scope(&url, server.password());
    semaphore_scope(&server.url("clisem"), &url, true);
}

/// `watch` in a real terminal (tmux): it draws the keys, the awaited one first, and `q` and
/// Ctrl-C each end it with exit 0 and the terminal given back.
#[test]
fn watch_under_tmux() {
    let name = region("watch");
    let lock = keylock_core::open(&name).unwrap();
    let quiet = lock.acquire(key(b"quiet"), &LockOptions::new()).unwrap();
    let busy = lock.acquire(key(b"busy"), &LockOptions::new()).unwrap();
    let w = waiter(&lock, b"busy");
    eventually("the waiter to queue", || {
        lock.info(key(b"busy")).unwrap().unwrap().waiters == 1
    });
    let socket = format!("keylock-cli-{}", std::process::id());
    // The test's own tmux server, ended however the test ends (a failed assertion too).
    struct Server<'a>(&'a str);
    impl Drop for Server<'_> {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["-L", self.0, "kill-server"])
                .output();
        }
    }
    let _server = Server(&socket);
    let tmux = |args: &[&str]| {
        let o = Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .expect("tmux (make test installs it)");
        assert!(
            o.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for (stop_with, session) in [("q", "watch-q"), ("C-c", "watch-int")] {
        let shell = format!("{BIN} watch {name} --interval 0.2; echo watch-exit=$?; sleep 60");
        tmux(&[
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "120",
            "-y",
            "30",
            &shell,
        ]);
        let screen = || tmux(&["capture-pane", "-p", "-t", session]);
        let mut last = String::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(last.contains("busy") && last.contains("quiet")) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for watch ({stop_with}) to draw both keys; the screen:\n{last}"
            );
            thread::sleep(Duration::from_millis(20));
            last = screen();
        }
        let s = screen();
        assert!(
            s.contains(&format!(
                "keylock watch {name}: 2 key(s) held or awaited, 1 waiting"
            )),
            "{s}"
        );
        let lines: Vec<&str> = s.lines().collect();
        let row = |k: &str| lines.iter().position(|l| l.starts_with(k)).unwrap();
        assert!(
            row("busy") < row("quiet"),
            "the awaited key is not on top:\n{s}"
        );
        assert!(lines[row("busy")].contains(" 1 "), "{s}");
        tmux(&["send-keys", "-t", session, stop_with]);
        eventually("watch to end", || screen().contains("watch-exit="));
        let s = screen();
        assert!(s.contains("watch-exit=0"), "{s}");
        // Back on the normal screen: the view is gone with the alternate screen.
        assert!(!s.contains("KEY  "), "{s}");
        // Each session stays until the server is killed: killing the last one makes the
        // server exit, and the next new-session could reach it while it was going (tmux then
        // answers "server exited unexpectedly", and the pane is never drawn).
    }
    lock.release(busy).unwrap();
    w.join().unwrap();
    lock.release(quiet).unwrap();
    drop(lock);
    keylock_core::unlink(&name).unwrap();
}

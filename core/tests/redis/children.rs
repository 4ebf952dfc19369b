//! What a child process does, by role. The parent passes the URL and the counts in the
//! environment and reads the child's stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::key;
use keylock_core::{LockOptions, Mode};

/// Starts this test binary as a child in `role`.
pub(crate) fn spawn(role: &str, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_process_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("KEYLOCK_REDIS_CHILD", role)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Starts `command` (a shell command line) as a worker with `env`.
pub(crate) fn spawn_command(command: &str, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// The first line of the child's output that starts with `tag`, and what follows it.
pub(crate) fn read_tagged(child: &mut Child, tag: &str) -> String {
    let out = child.stdout.as_mut().unwrap();
    let mut lines = BufReader::new(out).lines();
    loop {
        let line = lines.next().expect("child ended early").unwrap();
        // libtest may have written "test child_process_entry ... " before it on the line.
        if let Some(at) = line.find(tag) {
            return line[at + tag.len()..].trim().to_owned();
        }
    }
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

pub(crate) fn run(role: &str) {
    let url = var("KEYLOCK_REDIS_URL");
    let locks = keylock_core::open(&url).unwrap();
    match role {
        // Increment the counter under the lock OPS times (see processes.rs).
        "count" => {
            let ops: usize = var("KEYLOCK_OPS").parse().unwrap();
            let mode = if var("KEYLOCK_MODE") == "shared" {
                Mode::Shared
            } else {
                Mode::Exclusive
            };
            let parties: i64 = var("KEYLOCK_PARTIES").parse().unwrap();
            let mut con = redis::Client::open(var("KEYLOCK_DATA_URL").as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            for _ in 0..ops {
                crate::processes::critical_section(&*locks, &mut con, mode, parties);
            }
            println!("@done");
        }
        // Hold a key and never let go (the parent kills this process).
        "hold" => {
            let acq = locks.acquire(key("job"), &LockOptions::new()).unwrap();
            println!("@fence {}", acq.fence());
            std::io::stdout().flush().unwrap();
            std::thread::sleep(Duration::from_secs(120));
            locks.release(acq).unwrap();
        }
        // Hold 2 of a semaphore's 3 units and never let go (the parent kills this process).
        "hold-units" => {
            let sem = keylock_core::open_with(&url, &keylock_core::OpenOptions::new().permits(3))
                .unwrap();
            let acq = sem
                .acquire(key("gpu"), &LockOptions::new().weight(2))
                .unwrap();
            println!("@fence {}", acq.fence());
            std::io::stdout().flush().unwrap();
            std::thread::sleep(Duration::from_secs(120));
            sem.release(acq).unwrap();
        }
        // Wait for a key the parent holds (the parent kills this process while it waits).
        "wait" => {
            let acq = locks.acquire(key("queue"), &LockOptions::new()).unwrap();
            println!("@got {}", acq.fence());
            locks.release(acq).unwrap();
        }
        // Lock and release once (over TLS, in tls.rs).
        "tls" => {
            let acq = locks.acquire(key("secure"), &LockOptions::new()).unwrap();
            println!("@tls-fence {}", acq.fence());
            locks.release(acq).unwrap();
        }
        _ => panic!("unknown child role {role}"),
    }
}

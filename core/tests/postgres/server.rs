//! A real PostgreSQL 15 server per test (Debian's postgresql-15), and pgbouncer in front of one
//! when a test wants a pool: a fresh cluster in a temporary directory, a free loopback port,
//! stopped by its PID. Never a mock.
//!
//! The tests run as root, and initdb, postgres and pgbouncer refuse to. They run as the
//! `postgres` system user through `setpriv`, which execs the program, so the PID of the child we
//! spawn is the postmaster's (or pgbouncer's) own and we can signal and wait for it directly.

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The superuser initdb creates, and the database the tests use (both named after us).
const USER: &str = "keylock";
const DB: &str = "keylock";

/// How long a server or pgbouncer may take to start accepting connections, or to exit.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

/// A port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Where Debian puts PostgreSQL 15's programs; elsewhere, wherever `pg_config` says.
fn bindir() -> PathBuf {
    let debian = Path::new("/usr/lib/postgresql/15/bin");
    if debian.join("initdb").exists() {
        return debian.to_path_buf();
    }
    let out = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .expect(
            "PostgreSQL is not installed: `make postgres-server` installs Debian's postgresql-15",
        );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `program` run as the `postgres` system user when we are root (setpriv execs it, keeping the
/// PID), or as ourselves otherwise.
fn as_postgres(program: impl AsRef<std::ffi::OsStr>) -> Command {
    if is_root() {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

/// A new empty directory under the system's temporary directory, owned by `postgres` when we are
/// root (so the server can write in it).
fn fresh_dir(kind: &str) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "keylock-{kind}-{}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        free_port()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    chown_postgres(&dir);
    dir
}

pub(crate) fn chown_postgres(path: &Path) {
    if is_root() {
        run_ok(
            Command::new("chown")
                .arg("-R")
                .arg("postgres:postgres")
                .arg(path),
        );
    }
}

/// Runs `cmd` to completion and returns its stdout; panics with its stderr if it fails.
fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A password of 32 hex digits: new for each cluster, and nothing in it needs escaping in a URL
/// or a config file.
fn random_password() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Sends `signal` to `pid`; a process already gone is not an error.
fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill has no memory preconditions; the PID is our own child's, not yet reaped (we
    // hold its Child), so it cannot name another process.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Waits up to `timeout` for `child` to exit; whether it did.
fn wait_exit(child: &mut Child, timeout: Duration) -> bool {
    let until = Instant::now() + timeout;
    loop {
        // An error here (never seen) counts as gone: this runs in Drop, where a panic would
        // abort the test binary.
        if !matches!(child.try_wait(), Ok(None)) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stops `child` with `sig`; if it has not exited within `timeout`, SIGKILLs it (and says so).
fn stop_child(mut child: Child, sig: libc::c_int, timeout: Duration, what: &str) {
    signal(child.id(), sig);
    if !wait_exit(&mut child, timeout) {
        eprintln!(
            "{what} (PID {}) did not exit in {timeout:?}: SIGKILL",
            child.id()
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// `psql` against 127.0.0.1:`port` as the test user: one command string (it may hold several
/// statements), unaligned tuples-only output, no psqlrc, stopping at the first error.
fn psql_at(port: u16, password: &str, sql: &str) -> String {
    run_ok(
        Command::new(bindir().join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                USER,
                "-d",
                DB,
            ])
            .args(["-At", "-X", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10"),
    )
}

/// Whether something answers the PostgreSQL protocol on 127.0.0.1:`port` and accepts
/// connections (pg_isready: no password needed, it only asks).
fn is_ready(port: u16) -> bool {
    Command::new(bindir().join("pg_isready"))
        .args([
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            USER,
            "-d",
            DB,
        ])
        .args(["-t", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Waits until `port` accepts connections and returns `child`. If `child` exits first or time
/// runs out, stops it with `stop_signal` (so a failed start leaves no process behind) and panics
/// with `log`.
fn wait_ready(
    mut child: Child,
    stop_signal: libc::c_int,
    port: u16,
    log: &Path,
    what: &str,
) -> Child {
    let until = Instant::now() + READY_TIMEOUT;
    let failure = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break format!("{what} exited ({status}) before accepting connections on {port}");
        }
        if is_ready(port) {
            return child;
        }
        if Instant::now() >= until {
            break format!("{what} did not accept connections on {port} in {READY_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    stop_child(child, stop_signal, EXIT_TIMEOUT, what);
    panic!("{failure}; its log:\n{}", read_log(log));
}

fn read_log(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_else(|e| format!("({}: {e})", log.display()))
}

/// A log file the child writes its stdout and stderr to, appended to across restarts.
fn log_file(path: &Path) -> (File, File) {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    (f.try_clone().unwrap(), f)
}

/// A PostgreSQL 15 cluster of our own, running (or stopped by `stop`/`kill`, until `restart`).
///
/// Its directory holds `data/` (the cluster), `sock/` (the Unix socket, which the tests do not
/// use: they all connect over TCP, with a password) and `postgres.log`.
#[derive(Debug)]
pub(crate) struct Server {
    port: u16,
    password: String,
    dir: PathBuf,
    /// `-c name=value` settings beyond the ones `launch` always passes.
    settings: Vec<(String, String)>,
    /// The postmaster, while it runs.
    child: Option<Child>,
}

impl Server {
    pub(crate) fn start() -> Server {
        Self::with_settings(&[])
    }

    /// A server started with more `-c name=value` settings (e.g. `tcp_keepalives_idle`); they
    /// come after ours, so they can also override them.
    pub(crate) fn with_settings(settings: &[(&str, &str)]) -> Server {
        // Made first, so that its Drop removes the directory if initdb or the start fails.
        let mut s = Server {
            port: free_port(),
            password: random_password(),
            dir: fresh_dir("pg"),
            settings: settings
                .iter()
                .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            child: None,
        };
        let dir = &s.dir;
        // initdb reads the superuser's password from a file, never from its command line.
        let pwfile = dir.join("pwfile");
        std::fs::write(&pwfile, format!("{}\n", s.password)).unwrap();
        chown_postgres(&pwfile);
        // scram-sha-256 for every connection, local or TCP. No locale: the tests compare
        // strings and nothing else, and the image need not have any locale generated.
        // --no-sync: initdb's own final fsync only matters if the machine itself goes down,
        // which no test does; the server runs with fsync=on.
        let log = dir.join("initdb.log");
        let (out, err) = log_file(&log);
        let status = as_postgres(bindir().join("initdb"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["--auth=scram-sha-256", "--username", USER])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args(["--encoding=UTF8", "--no-locale", "--no-sync"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .expect("cannot run initdb");
        assert!(
            status.success(),
            "initdb failed ({status}):\n{}",
            read_log(&log)
        );
        std::fs::create_dir(dir.join("sock")).unwrap();
        chown_postgres(&dir.join("sock"));
        s.launch();
        // initdb makes only postgres, template0 and template1.
        psql_as_bootstrap(s.port, &s.password, &format!("create database {DB}"));
        s
    }

    /// Starts the postmaster on `self.port` and waits until it accepts connections.
    fn launch(&mut self) {
        assert!(self.child.is_none(), "the server is already running");
        let (out, err) = log_file(&self.log());
        let mut cmd = as_postgres(bindir().join("postgres"));
        cmd.arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(self.dir.join("sock"))
            .args(["-c", "listen_addresses=127.0.0.1"])
            // Durable commits, as in production: the tests kill servers and count on what
            // committed being there after the restart.
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
            // Several tests' servers run at once: keep each one small.
            .args(["-c", "shared_buffers=16MB", "-c", "max_connections=200"])
            // Sessions that hold locks are the point; log their comings and goings.
            .args(["-c", "log_connections=on", "-c", "log_disconnections=on"])
            .args(["-c", "logging_collector=off"]);
        for (k, v) in &self.settings {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("cannot run postgres (setpriv)");
        let child = wait_ready(child, libc::SIGQUIT, self.port, &self.log(), "postgres");
        self.child = Some(child);
    }

    fn log(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn password(&self) -> &str {
        &self.password
    }

    /// The scope's URL for this server: `postgres://keylock:PASSWORD@127.0.0.1:PORT/keylock?prefix=PREFIX`.
    pub(crate) fn url(&self, prefix: &str) -> String {
        format!(
            "postgres://{USER}:{}@127.0.0.1:{}/{DB}?prefix={prefix}",
            self.password, self.port
        )
    }

    /// The same URL without the password (which the server then refuses).
    #[allow(dead_code)] // used by the tests of authentication failures
    pub(crate) fn url_without_password(&self, prefix: &str) -> String {
        format!(
            "postgres://{USER}@127.0.0.1:{}/{DB}?prefix={prefix}",
            self.port
        )
    }

    /// The postmaster's PID (the server must be running).
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server is not running").id()
    }

    /// Runs `sql` with psql as the test user; returns its output (`-At`: one line per row, `|`
    /// between columns). Panics with psql's stderr if it fails.
    pub(crate) fn psql(&self, sql: &str) -> String {
        psql_at(self.port, &self.password, sql)
    }

    /// The version of keylock's functions installed here (the first open installs them).
    pub(crate) fn schema_version(&self) -> i32 {
        let v = self.psql("SELECT max(version) FROM keylock_schema");
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("no version: {v:?}"))
    }

    /// Records `version` as installed, as a build of that version's install would.
    pub(crate) fn set_schema_version(&self, version: i32) {
        self.psql(&format!("UPDATE keylock_schema SET version = {version}"));
    }

    /// Fast shutdown (SIGINT): the server rolls back open transactions, closes every
    /// connection, writes a checkpoint and exits.
    pub(crate) fn stop(&mut self) {
        let child = self.child.take().expect("the server is not running");
        stop_child(child, libc::SIGINT, EXIT_TIMEOUT, "postgres");
    }

    /// Immediate shutdown (SIGQUIT), the closest to a crash that leaves the directory usable:
    /// every backend is killed at once, nothing is flushed or checkpointed, and the next start
    /// runs crash recovery from the WAL, as after a power cut. SIGKILL of the postmaster alone
    /// would leave its backends running, attached to its shared memory, and the next start
    /// refuses the data directory until they have all gone.
    #[allow(dead_code)] // used by the tests of server crashes
    pub(crate) fn kill(&mut self) {
        let child = self.child.take().expect("the server is not running");
        stop_child(child, libc::SIGQUIT, EXIT_TIMEOUT, "postgres");
    }

    /// Starts the server again, on the same port and data directory, and waits until it accepts
    /// connections; stops it first (fast shutdown) if it is running.
    pub(crate) fn restart(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        self.launch();
    }
}

/// psql against the `postgres` database, for what has to run before the test database exists.
fn psql_as_bootstrap(port: u16, password: &str, sql: &str) -> String {
    run_ok(
        Command::new(bindir().join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                USER,
                "-d",
                "postgres",
            ])
            .args(["-At", "-X", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGPASSWORD", password),
    )
}

impl Drop for Server {
    fn drop(&mut self) {
        // Immediate shutdown: the directory goes next, so there is nothing worth a checkpoint.
        if let Some(child) = self.child.take() {
            stop_child(child, libc::SIGQUIT, EXIT_TIMEOUT, "postgres");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// pgbouncer's pooling: a server connection per client connection for the client's whole
/// session, or only for the length of each transaction (so session state, such as advisory
/// locks taken outside a transaction, does not survive from one transaction to the next).
#[derive(Debug, Clone, Copy)]
pub(crate) enum PoolMode {
    Session,
    Transaction,
}

/// pgbouncer of our own in front of a `Server`: same user, password and database, its own
/// loopback port. It copies what it needs from the server, so the server may be stopped and
/// restarted under it.
#[derive(Debug)]
pub(crate) struct Bouncer {
    port: u16,
    password: String,
    dir: PathBuf,
    child: Option<Child>,
}

impl Bouncer {
    pub(crate) fn start(server: &Server, mode: PoolMode) -> Bouncer {
        Self::with_pool(server, mode, 20)
    }

    /// A pgbouncer with at most `pool_size` server connections (1: every client shares one
    /// server session in transaction mode).
    pub(crate) fn with_pool(server: &Server, mode: PoolMode, pool_size: usize) -> Bouncer {
        // Made first, so that its Drop removes the directory if pgbouncer does not start.
        let mut b = Bouncer {
            port: free_port(),
            password: server.password.clone(),
            dir: fresh_dir("pgbouncer"),
            child: None,
        };
        let (dir, port) = (&b.dir, b.port);
        // The auth file holds the password in plain text: pgbouncer then runs SCRAM with the
        // client itself and, since it knows the password, SCRAM with the server on the client's
        // behalf (with only a SCRAM secret it could not log in to the server).
        let userlist = dir.join("userlist.txt");
        std::fs::write(&userlist, format!("\"{USER}\" \"{}\"\n", server.password)).unwrap();
        let mode = match mode {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        };
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 {DB} = host=127.0.0.1 port={server_port} dbname={DB}\n\
                 \n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = scram-sha-256\n\
                 auth_file = {userlist}\n\
                 pool_mode = {mode}\n\
                 max_client_conn = 500\n\
                 default_pool_size = {pool_size}\n\
                 ignore_startup_parameters = extra_float_digits\n",
                server_port = server.port,
                userlist = userlist.display(),
            ),
        )
        .unwrap();
        chown_postgres(dir);
        // In the foreground (no -d) pgbouncer logs to stderr.
        let log = dir.join("pgbouncer.log");
        let (out, err) = log_file(&log);
        let child = as_postgres("pgbouncer")
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("pgbouncer is not installed: `make postgres-server` installs Debian's");
        b.child = Some(wait_ready(child, libc::SIGTERM, port, &log, "pgbouncer"));
        b
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The scope's URL through pgbouncer: the server's, with pgbouncer's port.
    pub(crate) fn url(&self, prefix: &str) -> String {
        format!(
            "postgres://{USER}:{}@127.0.0.1:{}/{DB}?prefix={prefix}",
            self.password, self.port
        )
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// `Server::psql`, through pgbouncer.
    pub(crate) fn psql(&self, sql: &str) -> String {
        psql_at(self.port, &self.password, sql)
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        // SIGTERM is pgbouncer's immediate shutdown (SIGINT would wait for its clients).
        if let Some(child) = self.child.take() {
            stop_child(child, libc::SIGTERM, EXIT_TIMEOUT, "pgbouncer");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

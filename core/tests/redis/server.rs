//! A real `redis-server` per test: a free loopback port, a temporary directory, stopped by its
//! PID. Never a mock.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) port: u16,
    pub(crate) dir: PathBuf,
    child: Option<Child>,
    appendonly: bool,
    password: Option<String>,
    /// More arguments for redis-server (TLS).
    extra: Vec<String>,
}

/// A port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    pub(crate) fn start() -> Server {
        Self::with(false, None)
    }

    /// `appendonly`: AOF with `appendfsync always`, so a kill -9 loses nothing.
    pub(crate) fn with(appendonly: bool, password: Option<&str>) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "keylock-redis-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Server {
            port: free_port(),
            dir,
            child: None,
            appendonly,
            password: password.map(str::to_owned),
            extra: Vec::new(),
        };
        s.launch();
        s
    }

    /// A server that also listens with TLS on `tls_port`, with the given certificate files.
    pub(crate) fn with_tls(tls_port: u16, cert: &Path, key: &Path, ca: &Path) -> Server {
        let mut s = Server {
            port: free_port(),
            dir: std::env::temp_dir().join(format!(
                "keylock-redis-tls-{}-{tls_port}",
                std::process::id()
            )),
            child: None,
            appendonly: false,
            password: None,
            extra: vec![
                "--tls-port".into(),
                tls_port.to_string(),
                "--tls-cert-file".into(),
                cert.display().to_string(),
                "--tls-key-file".into(),
                key.display().to_string(),
                "--tls-ca-cert-file".into(),
                ca.display().to_string(),
                "--tls-auth-clients".into(),
                "no".into(),
            ],
        };
        std::fs::create_dir_all(&s.dir).unwrap();
        s.launch();
        s
    }

    fn launch(&mut self) {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--daemonize", "no", "--protected-mode", "no"])
            .args(["--logfile", "redis.log"])
            .args(["--appendonly", if self.appendonly { "yes" } else { "no" }])
            .args(["--appendfsync", "always"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(p) = &self.password {
            cmd.args(["--requirepass", p]);
        }
        cmd.args(&self.extra);
        let child = cmd.spawn().expect(
            "redis-server is not installed: `make test` installs it (apt-get install redis-server)",
        );
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(20);
        while !self.ping() {
            assert!(
                Instant::now() < until,
                "redis-server did not start on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server answers (PING, authenticating if needed).
    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let cmd = match &self.password {
            Some(p) => format!("AUTH {p}\r\nPING\r\n"),
            None => "PING\r\n".to_owned(),
        };
        if s.write_all(cmd.as_bytes()).is_err() {
            return false;
        }
        let mut buf = [0u8; 64];
        let mut got = String::new();
        while !got.contains("PONG") && !got.contains("LOADING") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return false,
                Ok(n) => got.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
        got.contains("PONG")
    }

    pub(crate) fn url(&self, query: &str) -> String {
        format!("redis://127.0.0.1:{}/0?{query}", self.port)
    }

    /// kill -9 (nothing is flushed beyond what appendfsync already wrote).
    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM: a clean shutdown.
    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status()
                .unwrap();
            c.wait().unwrap();
        }
    }

    /// Starts again on the same port and directory (so an AOF is read back).
    pub(crate) fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// Starts again after `kill9`.
    pub(crate) fn relaunch(&mut self) {
        assert!(self.child.is_none());
        self.launch();
    }

    /// A plain connection for the tests' own data (the counter under the lock).
    pub(crate) fn client(&self) -> redis::Connection {
        let url = match &self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}/0", self.port),
            None => format!("redis://127.0.0.1:{}/0", self.port),
        };
        redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

//! `rediss://`: TLS through rustls, verifying the server's certificate against the platform's
//! roots (here a test CA given by `SSL_CERT_FILE`, which only the child process sees).

use keylock_core::Error;

use crate::Server;
use crate::certs::certificates;
use crate::children::{read_tagged, spawn};
use crate::server::free_port;

#[test]
fn rediss_verifies_the_server_and_locks_over_tls() {
    let dir = std::env::temp_dir().join(format!("keylock-tls-certs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    certificates(&dir, "DNS:localhost,IP:127.0.0.1");
    let tls_port = free_port();
    let _server = Server::with_tls(
        tls_port,
        &dir.join("server.crt"),
        &dir.join("server.key"),
        &dir.join("ca.crt"),
    );
    let url = format!("rediss://localhost:{tls_port}/0?prefix=tls&connect_timeout=3s");
    // Not trusted here (the test CA is not among this process's roots): refused.
    assert!(matches!(
        keylock_core::open(&url),
        Err(Error::Unavailable(_))
    ));
    // Trusted in a child that has the CA as its root store: locks over TLS.
    let ca = dir.join("ca.crt").display().to_string();
    let mut child = spawn("tls", &[("KEYLOCK_REDIS_URL", url), ("SSL_CERT_FILE", ca)]);
    let fence: u64 = read_tagged(&mut child, "@tls-fence").parse().unwrap();
    assert!(fence >= 1);
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

//! Certificates for the TLS tests, made with the openssl CLI: certificate authorities, and a
//! server certificate that one of them signs.

use std::path::Path;
use std::process::Command;

fn openssl(dir: &Path, args: &[&str]) {
    let ok = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is not installed (make test-redis and make postgres-server install it)");
    assert!(
        ok.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

/// A self-signed certificate authority in `dir`: `NAME.key` and `NAME.crt`.
pub(crate) fn authority(dir: &Path, name: &str) {
    let key = format!("{name}.key");
    let crt = format!("{name}.crt");
    let subject = format!("/CN=keylock test {name}");
    openssl(
        dir,
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &crt,
            "-subj", &subject, "-days", "2",
        ],
    );
}

/// A CA (`ca.key`, `ca.crt`) and a server certificate it signs (`server.key`, `server.crt`),
/// valid for the names in `san` (openssl's subjectAltName syntax, e.g. `DNS:localhost`).
pub(crate) fn certificates(dir: &Path, san: &str) {
    authority(dir, "ca");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(dir.join("san.ext"), format!("subjectAltName={san}\n")).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
}

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

/// A certificate that the authority `ca` (made by [`authority`] in `dir`) signs: `NAME.key` and
/// `NAME.crt`, for the subject's common name `cn`, with the X.509 v3 extension `extension`
/// (openssl's syntax: `subjectAltName=DNS:localhost`, `extendedKeyUsage=clientAuth`).
pub(crate) fn signed(dir: &Path, ca: &str, name: &str, cn: &str, extension: &str) {
    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    let subject = format!("/CN={cn}");
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj",
            &subject,
        ],
    );
    let ext = format!("{name}.ext");
    std::fs::write(dir.join(&ext), format!("{extension}\n")).unwrap();
    let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
}

/// A CA (`ca.key`, `ca.crt`) and a server certificate it signs (`server.key`, `server.crt`),
/// valid for the names in `san` (e.g. `DNS:localhost,IP:127.0.0.1`).
pub(crate) fn certificates(dir: &Path, san: &str) {
    authority(dir, "ca");
    signed(
        dir,
        "ca",
        "server",
        "localhost",
        &format!("subjectAltName={san}"),
    );
}

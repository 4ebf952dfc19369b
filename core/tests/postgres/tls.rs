//! TLS to PostgreSQL: `sslmode` and `sslrootcert` with libpq's meanings, against a server with
//! `ssl=on` and a certificate that a test CA signs for `localhost` only, so that a connection to
//! 127.0.0.1 tells a check of the name from a check of the chain. Every session the scope opens
//! (the main one, and one for a wait) is encrypted, as the server's `pg_stat_ssl` shows.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use keylock_core::{Error, LockOptions, Wait};

use crate::certs::{authority, certificates, signed};
use crate::server::{Server, chown_postgres};
use crate::{key, within};

/// A server with TLS on (and plain connections still allowed), its certificate for
/// `localhost`, signed by `ca.crt` in `dir`; `other.crt` is a CA that signed nothing of it.
/// `settings` go after those.
fn tls_server(dir: &Path, settings: &[(&str, &str)]) -> Server {
    std::fs::create_dir_all(dir).unwrap();
    certificates(dir, "DNS:localhost");
    authority(dir, "other");
    // The server reads its key only if nobody else may.
    std::fs::set_permissions(
        dir.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    chown_postgres(dir);
    let file = |name: &str| dir.join(name).display().to_string();
    let mut all = vec![
        ("ssl", "on".to_owned()),
        ("ssl_cert_file", file("server.crt")),
        ("ssl_key_file", file("server.key")),
    ];
    all.extend(settings.iter().map(|&(k, v)| (k, v.to_owned())));
    let all: Vec<(&str, &str)> = all.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::with_settings(&all)
}

/// The scope's URL on `host`, with `options` after the prefix.
fn url(server: &Server, host: &str, prefix: &str, options: &str) -> String {
    format!(
        "postgres://keylock:{}@{host}:{}/keylock?prefix={prefix}&connect_timeout=3s{options}",
        server.password(),
        server.port()
    )
}

/// keylock's sessions on `server` now, and how many of them are encrypted.
fn sessions(server: &Server) -> (usize, usize) {
    let out = server.psql(
        "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
         JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'keylock'",
    );
    let (all, ssl) = out.trim().split_once('|').expect("two columns");
    (all.parse().unwrap(), ssl.parse().unwrap())
}

/// Opens `url`, takes and releases a key; the fence.
fn lock_once(url: &str) -> Result<u64, Error> {
    let locks = keylock_core::open(url)?;
    let a = locks.acquire(key("k"), &LockOptions::new())?;
    let fence = a.fence();
    locks.release(a)?;
    Ok(fence)
}

fn unavailable_naming(r: Result<u64, Error>, what: &str) {
    match r {
        Err(Error::Unavailable(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("expected Unavailable naming {what:?}, got {other:?}"),
    }
}

fn cert_dir(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("keylock-pg-{test}-{}", std::process::id()))
}

#[test]
fn every_sslmode_checks_what_libpq_checks() {
    let dir = cert_dir("tls");
    let server = tls_server(&dir, &[]);
    let ca = format!("&sslrootcert={}", dir.join("ca.crt").display());
    let other = format!("&sslrootcert={}", dir.join("other.crt").display());

    // verify-full: the chain and the name. The certificate names localhost, not 127.0.0.1.
    let full = url(
        &server,
        "localhost",
        "a",
        &format!("&sslmode=verify-full{ca}"),
    );
    let locks = keylock_core::open(&full).unwrap();
    let held = locks.acquire(key("k"), &LockOptions::new()).unwrap();
    // A second scope object waits for the key on a session of its own, encrypted too.
    let waiter = keylock_core::open(&full).unwrap();
    let w = Arc::clone(&waiter);
    let wait = thread::spawn(move || {
        let opts = LockOptions::new().wait(Wait::For(Duration::from_secs(20)));
        let a = w.acquire(key("k"), &opts).unwrap();
        let fence = a.fence();
        w.release(a).unwrap();
        fence
    });
    crate::wait_until(|| {
        locks
            .info(key("k"))
            .unwrap()
            .is_some_and(|i| i.waiters >= 1)
    });
    let (all, ssl) = sessions(&server);
    assert!(all >= 3, "two main sessions and a waiting one: {all}");
    assert_eq!(ssl, all, "every keylock session is encrypted");
    let first = held.fence();
    locks.release(held).unwrap();
    assert!(within(Duration::from_secs(20), move || wait.join().unwrap()) > first);
    drop((locks, waiter));

    unavailable_naming(
        lock_once(&url(
            &server,
            "127.0.0.1",
            "a",
            &format!("&sslmode=verify-full{ca}"),
        )),
        "certificate",
    );
    // verify-ca: the chain only, so 127.0.0.1 is accepted; a CA that signed nothing is not.
    lock_once(&url(
        &server,
        "127.0.0.1",
        "a",
        &format!("&sslmode=verify-ca{ca}"),
    ))
    .unwrap();
    unavailable_naming(
        lock_once(&url(
            &server,
            "localhost",
            "a",
            &format!("&sslmode=verify-ca{other}"),
        )),
        "certificate",
    );
    // require: encrypted; the certificate is checked only against roots it is given.
    lock_once(&url(&server, "127.0.0.1", "a", "&sslmode=require")).unwrap();
    unavailable_naming(
        lock_once(&url(
            &server,
            "127.0.0.1",
            "a",
            &format!("&sslmode=require{other}"),
        )),
        "certificate",
    );
    lock_once(&url(
        &server,
        "127.0.0.1",
        "a",
        &format!("&sslmode=require{ca}"),
    ))
    .unwrap();

    // What each mode left connected: prefer (the default) encrypts, disable does not.
    for (options, encrypted) in [
        ("", true),
        ("&sslmode=prefer", true),
        ("&sslmode=disable", false),
    ] {
        let locks = keylock_core::open(&url(&server, "127.0.0.1", "b", options)).unwrap();
        let a = locks.acquire(key("k"), &LockOptions::new()).unwrap();
        let (all, ssl) = sessions(&server);
        assert_eq!(
            (all, ssl),
            (1, if encrypted { 1 } else { 0 }),
            "{options:?}"
        );
        locks.release(a).unwrap();
        drop(locks);
        crate::wait_until(|| sessions(&server).0 == 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_without_tls_is_refused_only_where_tls_is_required() {
    let server = Server::start();
    let plain = |options: &str| lock_once(&url(&server, "127.0.0.1", "p", options));
    plain("").unwrap();
    plain("&sslmode=prefer").unwrap();
    for mode in ["require", "verify-ca", "verify-full"] {
        let options = format!("&sslmode={mode}&sslrootcert=system");
        match plain(&options) {
            // Refused before any root is read where none is needed; with roots, refused by
            // the server, which offers no TLS.
            Err(Error::Unavailable(m)) => assert!(m.contains("TLS"), "{mode}: {m}"),
            Err(Error::InvalidArgument(m)) => assert!(m.contains("root"), "{mode}: {m}"),
            other => panic!("{mode}: {other:?}"),
        }
    }
    assert_eq!(sessions(&server).1, 0);
}

#[test]
fn a_client_certificate_is_presented_where_the_server_asks_for_one() {
    let dir = cert_dir("client-cert");
    std::fs::create_dir_all(&dir).unwrap();
    // The harness's own user keeps its password; `certuser` logs in with a certificate alone.
    std::fs::write(
        dir.join("hba.conf"),
        "hostssl all certuser 127.0.0.1/32 cert\nhost all all 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    let file = |name: &str| dir.join(name).display().to_string();
    let server = tls_server(
        &dir,
        &[
            ("ssl_ca_file", &file("ca.crt")),
            ("hba_file", &file("hba.conf")),
        ],
    );
    server.psql("CREATE ROLE certuser LOGIN SUPERUSER");
    signed(
        &dir,
        "ca",
        "client",
        "certuser",
        "extendedKeyUsage=clientAuth",
    );
    signed(
        &dir,
        "other",
        "stranger",
        "certuser",
        "extendedKeyUsage=clientAuth",
    );
    let url = |client: Option<&str>| {
        let mut u = format!(
            "postgres://certuser@localhost:{}/keylock?prefix=c&connect_timeout=3s\
             &sslmode=verify-full&sslrootcert={}",
            server.port(),
            file("ca.crt")
        );
        if let Some(c) = client {
            u.push_str(&format!(
                "&sslcert={}&sslkey={}",
                file(&format!("{c}.crt")),
                file(&format!("{c}.key"))
            ));
        }
        u
    };
    assert!(lock_once(&url(Some("client"))).unwrap() >= 1);
    // Without one, the server refuses the user; with one that its CA did not sign, the
    // handshake fails.
    match lock_once(&url(None)) {
        Err(Error::PermissionDenied(m)) => assert!(m.contains("certificate"), "{m}"),
        other => panic!("without a client certificate: {other:?}"),
    }
    assert!(matches!(
        lock_once(&url(Some("stranger"))),
        Err(Error::Unavailable(_))
    ));
    // A key that is not the certificate's, and half a pair, are refused at open.
    let mismatched = url(None)
        + &format!(
            "&sslcert={}&sslkey={}",
            file("client.crt"),
            file("stranger.key")
        );
    assert!(
        matches!(lock_once(&mismatched), Err(Error::InvalidArgument(m)) if m.starts_with("sslkey"))
    );
    let half = url(None) + &format!("&sslcert={}", file("client.crt"));
    assert!(matches!(lock_once(&half), Err(Error::InvalidArgument(m)) if m.contains("together")));
    let _ = std::fs::remove_dir_all(&dir);
}

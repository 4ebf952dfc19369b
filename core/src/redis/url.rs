//! The Redis scope's URL: `redis://[USER[:PASSWORD]@]HOST[:PORT][/DB][?OPTIONS]`, or
//! `rediss://` for TLS.
//!
//! Options (all optional):
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `prefix` | `keylock` | the namespace of every Redis key this scope uses (and their hash tag); no `{`, `}` |
//! | `lease` | `30s` | every remote acquisition's lease, renewed while the acquisition lives |
//! | `connect_timeout` | `5s` | the most opening the scope (connecting, the handshake, loading the scripts), or one reconnection, may take |
//! | `timeout` | `5s` | the most one command may take, its whole reply included, before the scope reports `Unavailable` |
//!
//! Durations are a number with a unit (`ms`, `s`), e.g. `lease=2s`, `timeout=500ms`.
//!
//! The password is kept only inside the client's connection settings: [`RedisUrl`]'s `Debug`
//! and its redacted name show `***` in its place, and every error of this scope names the
//! redacted URL.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::remote::url::{UrlName, UrlParts, duration};

/// A parsed Redis scope URL. See the [module docs](self).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RedisUrl {
    pub(crate) tls: bool,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) db: i64,
    pub(crate) username: Option<String>,
    pub(crate) prefix: String,
    pub(crate) lease: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) timeout: Duration,
    /// The URL as given, shown with its password as `***`.
    pub(crate) name: UrlName,
}

/// The lease every remote acquisition gets unless the URL says otherwise.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

impl RedisUrl {
    /// Parses `url`, refusing anything it does not understand (a caller's typo must never pick
    /// a default silently).
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("rediss://") {
            (true, rest)
        } else {
            return Err(Error::InvalidArgument(
                "a Redis URL starts with redis:// or rediss://",
            ));
        };
        let parts = UrlParts::split(rest, 6379)?;
        let (host, port, username, password, path) = (
            parts.host,
            parts.port,
            parts.username,
            parts.password,
            parts.path,
        );
        let db = match path {
            "" => 0,
            p => p
                .parse::<i64>()
                .ok()
                .filter(|db| *db >= 0)
                .ok_or(Error::InvalidArgument(
                    "the database in a Redis URL is a number (redis://HOST:PORT/DB)",
                ))?,
        };
        let mut out = RedisUrl {
            tls,
            host,
            port,
            db,
            username,
            name: UrlName::new(url, password),
            prefix: "keylock".to_owned(),
            lease: DEFAULT_LEASE,
            connect_timeout: DEFAULT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
        };
        for (name, value) in parts.options {
            match name {
                "prefix" => {
                    if value.is_empty() || value.contains(['{', '}']) {
                        return Err(Error::InvalidArgument(
                            "the Redis prefix must be non-empty and contain no { or }",
                        ));
                    }
                    out.prefix = value;
                }
                "lease" => out.lease = duration(&value)?,
                "connect_timeout" => out.connect_timeout = duration(&value)?,
                "timeout" => out.timeout = duration(&value)?,
                _ => {
                    return Err(Error::InvalidArgument(
                        "unknown Redis URL option (known: prefix, lease, connect_timeout, timeout)",
                    ));
                }
            }
        }
        if out.lease < Duration::from_millis(100) {
            return Err(Error::InvalidArgument(
                "the Redis lease must be at least 100ms",
            ));
        }
        Ok(out)
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisUrl")
            .field("url", &self.name.redacted())
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_part() {
        let u = RedisUrl::parse(
            "rediss://bob:s%40cret@db.example:6380/3?prefix=app&lease=2s&timeout=250ms",
        )
        .unwrap();
        assert!(u.tls);
        assert_eq!((u.host.as_str(), u.port, u.db), ("db.example", 6380, 3));
        assert_eq!(u.username.as_deref(), Some("bob"));
        assert_eq!(u.name.password(), Some("s@cret"));
        assert_eq!(u.prefix, "app");
        assert_eq!(u.lease, Duration::from_secs(2));
        assert_eq!(u.timeout, Duration::from_millis(250));
        assert_eq!(
            u.name.redacted(),
            "rediss://bob:***@db.example:6380/3?prefix=app&lease=2s&timeout=250ms"
        );
        assert!(!format!("{u:?}").contains("cret"));
        assert_eq!(u.name.scrub("auth s@cret failed"), "auth *** failed");
        let d = RedisUrl::parse("redis://[::1]").unwrap();
        assert_eq!(
            (d.host.as_str(), d.port, d.db, d.lease),
            ("::1", 6379, 0, DEFAULT_LEASE)
        );
        assert_eq!(
            RedisUrl::parse("redis://:pw@h").unwrap().name.redacted(),
            "redis://:***@h"
        );
    }

    #[test]
    fn refuses_what_it_does_not_understand() {
        for bad in [
            "http://h",
            "redis:/h",
            "redis://",
            "redis://h:0",
            "redis://h:99999",
            "redis://h:port",
            "redis://h/x",
            "redis://h/-1",
            "redis://h?prefix={a}",
            "redis://h?lease=5",
            "redis://h?lease=10ms",
            "redis://h?colour=blue",
            "redis://h?prefix",
            "redis://h#frag",
            "redis://u:%zz@h",
        ] {
            assert!(
                matches!(RedisUrl::parse(bad), Err(Error::InvalidArgument(_))),
                "{bad} should be refused"
            );
        }
    }
}

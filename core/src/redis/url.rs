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
use crate::remote::url::{OptionRules, ServerOptions, UrlName, UrlParts};

/// A parsed Redis scope URL. See the [module docs](self).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RedisUrl {
    pub(crate) tls: bool,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) db: i64,
    pub(crate) username: Option<String>,
    /// `prefix`, `lease`, `connect_timeout`, `timeout`.
    pub(crate) options: ServerOptions,
    /// The URL as given, shown with its password as `***`.
    pub(crate) name: UrlName,
}

/// What the Redis scope asks of the shared options: a prefix without braces (it is the hash tag
/// of every key), and a lease long enough to renew.
const RULES: OptionRules = OptionRules {
    prefix_ok: |p| !p.contains(['{', '}']),
    bad_prefix: "the Redis prefix must be non-empty and contain no { or }",
    min_lease: Duration::from_millis(100),
    short_lease: "the Redis lease must be at least 100ms",
    unknown: "unknown Redis URL option (known: prefix, lease, connect_timeout, timeout)",
};

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
        let db = match parts.path {
            "" => 0,
            p => p
                .parse::<i64>()
                .ok()
                .filter(|db| *db >= 0)
                .ok_or(Error::InvalidArgument(
                    "the database in a Redis URL is a number (redis://HOST:PORT/DB)",
                ))?,
        };
        Ok(RedisUrl {
            tls,
            host: parts.host,
            port: parts.port,
            db,
            username: parts.username,
            name: UrlName::new(url, parts.password),
            options: ServerOptions::parse(parts.options, &RULES, |_, _| Ok(false))?,
        })
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisUrl")
            .field("url", &self.name.redacted())
            .field("options", &self.options)
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
        assert_eq!(u.options.prefix, "app");
        assert_eq!(u.options.lease, Duration::from_secs(2));
        assert_eq!(u.options.timeout, Duration::from_millis(250));
        assert_eq!(u.options.connect_timeout, Duration::from_secs(5));
        assert_eq!(
            u.name.redacted(),
            "rediss://bob:***@db.example:6380/3?prefix=app&lease=2s&timeout=250ms"
        );
        assert!(!format!("{u:?}").contains("cret"));
        assert_eq!(u.name.scrub("auth s@cret failed"), "auth *** failed");
        let d = RedisUrl::parse("redis://[::1]").unwrap();
        assert_eq!(
            (d.host.as_str(), d.port, d.db, &d.options),
            ("::1", 6379, 0, &ServerOptions::default())
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
            "redis://h?prefix=",
            "redis://h#frag",
            "redis://u:%zz@h",
        ] {
            assert!(
                matches!(RedisUrl::parse(bad), Err(Error::InvalidArgument(_))),
                "{bad} should be refused"
            );
        }
        for (bad, why) in [
            ("redis://h?prefix={a}", RULES.bad_prefix),
            ("redis://h?prefix=", RULES.bad_prefix),
            ("redis://h?lease=99ms", RULES.short_lease),
            ("redis://h?sslmode=disable", RULES.unknown),
        ] {
            assert_eq!(
                RedisUrl::parse(bad),
                Err(Error::InvalidArgument(why)),
                "{bad}"
            );
        }
        assert!(RedisUrl::parse("redis://h?lease=100ms").is_ok());
    }
}

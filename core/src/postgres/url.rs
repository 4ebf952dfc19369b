//! The PostgreSQL scope's URL: `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?OPTIONS]` (or
//! `postgresql://`).
//!
//! Options (all optional):
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `prefix` | `keylock` | the namespace of this scope's keys in the database's keylock tables |
//! | `lease` | `30s` | how long a hold lasts unconfirmed: its process checks its session every third of this, and the server's keepalives end a silent session within about 5/12 of it |
//! | `connect_timeout` | `5s` | the most opening the scope (connecting, the handshake, the tables) or one more connection may take |
//! | `timeout` | `5s` | the most one call may take before the scope reports `Unavailable` (a wait is bounded by the acquire's own timeout instead) |
//! | `sslmode` | `prefer` | `disable`, `prefer`, `require`, `verify-ca` or `verify-full`, as libpq means them (`tls.rs`) |
//! | `sslrootcert` | the platform's roots | a PEM file of the roots that `verify-ca` and `verify-full` (and `require`, when given) trust; `system` for the platform's |
//! | `sslcert`, `sslkey` | none | PEM files of a client certificate and its key, for a server that asks for one |
//! | `sweep` | `60s` | how often the scope object drops the rows of its prefix's idle keys (when it took or released anything since its last sweep); `off` never |
//!
//! The password is kept only inside the client's settings: `Debug` shows the URL with `***` in
//! its place, and every error of this scope names the redacted URL.

use std::fmt;
use std::time::Duration;

use super::tls::TlsOptions;
use crate::error::{Error, Result};
use crate::remote::url::{OptionRules, ServerOptions, UrlName, UrlParts, decode, duration};

/// A parsed PostgreSQL scope URL. See the [module docs](self).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PostgresUrl {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) database: String,
    /// `prefix`, `lease`, `connect_timeout`, `timeout`.
    pub(crate) options: ServerOptions,
    /// How often the rows of idle keys are dropped (`None`: never).
    pub(crate) sweep: Option<Duration>,
    /// `sslmode` and `sslrootcert`.
    pub(crate) tls: TlsOptions,
    /// The URL as given, shown with its password as `***`.
    pub(crate) name: UrlName,
}

/// What the PostgreSQL scope asks of the shared options: a lease of at least a second (its
/// holders confirm their sessions every third of it).
const RULES: OptionRules = OptionRules {
    prefix_ok: |_| true,
    bad_prefix: "the PostgreSQL prefix must be non-empty",
    min_lease: Duration::from_secs(1),
    short_lease: "the PostgreSQL lease must be at least 1s",
    unknown: "unknown PostgreSQL URL option (known: prefix, lease, connect_timeout, timeout, sslmode, sslrootcert, sslcert, sslkey, sweep)",
};

/// How often, unless the URL says otherwise, a scope object that took or released anything
/// since its last sweep drops the rows of its prefix's idle keys.
const DEFAULT_SWEEP: Duration = Duration::from_secs(60);

impl PostgresUrl {
    /// Parses `url`, refusing anything it does not understand.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or(Error::InvalidArgument(
                "a PostgreSQL URL starts with postgres:// or postgresql://",
            ))?;
        let parts = UrlParts::split(rest, 5432)?;
        let user = parts.username.ok_or(Error::InvalidArgument(
            "a PostgreSQL URL names its user (postgres://USER@HOST/DB)",
        ))?;
        let database = decode(parts.path)?;
        if database.is_empty() || database.contains('/') {
            return Err(Error::InvalidArgument(
                "a PostgreSQL URL names one database (postgres://USER@HOST/DB)",
            ));
        }
        // The scope's own options: TLS's, and `sweep`.
        let mut sweep = Some(DEFAULT_SWEEP);
        let mut tls = TlsOptions::default();
        let own = |name: &str, value: &str| match (name, value) {
            ("sslmode" | "sslrootcert" | "sslcert" | "sslkey", _) => tls.take(name, value),
            ("sweep", "off") => {
                sweep = None;
                Ok(true)
            }
            ("sweep", _) => {
                sweep = Some(duration(value)?);
                Ok(true)
            }
            _ => Ok(false),
        };
        let options = ServerOptions::parse(parts.options, &RULES, own)?;
        tls.check()?;
        Ok(PostgresUrl {
            host: parts.host,
            port: parts.port,
            user,
            name: UrlName::new(url, parts.password),
            database,
            options,
            sweep,
            tls,
        })
    }

    /// The client's settings (the password only here).
    pub(crate) fn config(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.database)
            .application_name("keylock")
            .connect_timeout(self.options.connect_timeout)
            .keepalives(true)
            .keepalives_idle(self.keepalive_idle())
            .ssl_mode(self.tls.ssl_mode());
        if let Some(p) = self.name.password() {
            c.password(p.as_bytes());
        }
        c
    }

    /// The server's keepalive for a session: first probe after a sixth of the lease of
    /// silence, then one every twelfth, three unanswered ones end the session.
    pub(crate) fn keepalive_idle(&self) -> Duration {
        (self.options.lease / 6).max(Duration::from_secs(1))
    }

    /// The session settings that make the server notice a silent holder within about 5/12 of
    /// the lease (keepalives, and the most unacknowledged data may wait).
    pub(crate) fn session_settings(&self) -> String {
        let idle = self.keepalive_idle().as_secs().max(1);
        let interval = (self.options.lease / 12).as_secs().max(1);
        let user_timeout = (self.options.lease * 5 / 12).as_millis().max(1000);
        format!(
            "SET tcp_keepalives_idle = {idle}; SET tcp_keepalives_interval = {interval}; \
             SET tcp_keepalives_count = 3; SET tcp_user_timeout = {user_timeout}; \
             SET lock_timeout = 0; SET statement_timeout = 0; \
             SET idle_in_transaction_session_timeout = 0"
        )
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresUrl")
            .field("url", &self.name.redacted())
            .field("options", &self.options)
            .field("sweep", &self.sweep)
            .field("tls", &self.tls)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_part() {
        let u = PostgresUrl::parse(
            "postgresql://app:s%40cret@db.example:6543/orders?prefix=p&lease=3s&timeout=500ms&sslmode=prefer",
        )
        .unwrap();
        assert_eq!(
            (
                u.host.as_str(),
                u.port,
                u.user.as_str(),
                u.database.as_str()
            ),
            ("db.example", 6543, "app", "orders")
        );
        assert_eq!(u.name.password(), Some("s@cret"));
        assert_eq!(
            (u.options.prefix.as_str(), u.options.lease),
            ("p", Duration::from_secs(3))
        );
        assert_eq!(u.options.timeout, Duration::from_millis(500));
        let shown = format!("{u:?}");
        assert!(
            !shown.contains("s%40cret") && shown.contains("app:***@"),
            "{shown}"
        );
        let d = PostgresUrl::parse("postgres://u@h/d").unwrap();
        assert_eq!((d.port, &d.options), (5432, &ServerOptions::default()));
    }

    #[test]
    fn refuses_what_it_does_not_understand() {
        for bad in [
            "mysql://u@h/d",
            "postgres://h/d",
            "postgres://u@h",
            "postgres://u@h/",
            "postgres://u@h:0/d",
            "postgres://u@h:99999/d",
            "postgres://u@h:x/d",
            "postgres://u@h/d?bogus=1",
            "postgres://u@h/d?sslmode=allow",
            "postgres://u@h/d?sslrootcert=",
            "postgres://u@h/d?lease=10ms",
            "postgres://u@h/d?prefix=",
            "postgres://u@/d",
        ] {
            assert!(
                matches!(PostgresUrl::parse(bad), Err(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
        for (bad, why) in [
            ("postgres://u@h/d?prefix=", RULES.bad_prefix),
            ("postgres://u@h/d?lease=999ms", RULES.short_lease),
            ("postgres://u@h/d?bogus=1", RULES.unknown),
        ] {
            assert_eq!(
                PostgresUrl::parse(bad),
                Err(Error::InvalidArgument(why)),
                "{bad}"
            );
        }
        assert!(PostgresUrl::parse("postgres://u@h/d?lease=1s&sslmode=disable").is_ok());
    }

    #[test]
    fn sweep_is_a_duration_or_off() {
        let sweep = |url: &str| PostgresUrl::parse(url).map(|u| u.sweep);
        assert_eq!(sweep("postgres://u@h/d"), Ok(Some(DEFAULT_SWEEP)));
        assert_eq!(
            sweep("postgres://u@h/d?sweep=250ms"),
            Ok(Some(Duration::from_millis(250)))
        );
        assert_eq!(sweep("postgres://u@h/d?sweep=off"), Ok(None));
        for bad in ["0s", "never", "", "-1s"] {
            assert!(
                matches!(
                    sweep(&format!("postgres://u@h/d?sweep={bad}")),
                    Err(Error::InvalidArgument(_))
                ),
                "{bad}"
            );
        }
    }
}

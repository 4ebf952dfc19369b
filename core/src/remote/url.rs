//! The parts every server scope's URL shares (`SCHEME://[USER[:PASSWORD]@]HOST[:PORT][/PATH][?OPTIONS]`):
//! the authority, percent-decoding, durations written with a unit (`500ms`, `30s`), and the
//! options every such scope takes ([`ServerOptions`]). Each scope reads its own path and its
//! own options from [`UrlParts`].

use std::time::Duration;

use crate::error::{Error, Result};
use crate::redact::redact_scope_name;

/// A server URL as it may be shown, and the one secret it must never show: `Debug`, errors and
/// log lines take [`redacted`](Self::redacted) (the core's one rule, [`redact_scope_name`]),
/// and any text a client library wrote goes through [`scrub`](Self::scrub) first.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct UrlName {
    redacted: String,
    password: Option<String>,
}

impl UrlName {
    pub(crate) fn new(url: &str, password: Option<String>) -> Self {
        Self {
            redacted: redact_scope_name(url),
            password,
        }
    }

    /// The password, for the client's connection settings only.
    pub(crate) fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The URL with its password as `***`.
    pub(crate) fn redacted(&self) -> &str {
        &self.redacted
    }

    /// `text` with the password replaced by `***`, in case a client error quoted it.
    pub(crate) fn scrub(&self, text: &str) -> String {
        match &self.password {
            Some(p) if !p.is_empty() => text.replace(p.as_str(), "***"),
            _ => text.to_owned(),
        }
    }
}

/// A server URL after its scheme, split into its parts (user, password and option values
/// percent-decoded).
pub(crate) struct UrlParts<'a> {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    /// After the first `/` of the authority, undecoded.
    pub(crate) path: &'a str,
    /// `NAME=VALUE` pairs in order, values decoded.
    pub(crate) options: Vec<(&'a str, String)>,
}

impl<'a> UrlParts<'a> {
    /// Splits `rest` (the URL after `SCHEME://`); a URL without a port gets `default_port`.
    pub(crate) fn split(rest: &'a str, default_port: u16) -> Result<Self> {
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        if rest.contains('#') || query.is_some_and(|q| q.contains('#')) {
            return Err(Error::InvalidArgument(
                "a server URL has no fragment (#...)",
            ));
        }
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) => (a, p),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (user, pass) = match u.split_once(':') {
                    Some((user, pass)) => (user, Some(pass)),
                    None => (u, None),
                };
                let user = decode(user)?;
                let pass = pass.map(decode).transpose()?;
                (
                    (!user.is_empty()).then_some(user),
                    pass.filter(|p| !p.is_empty()),
                )
            }
        };
        let (host, port) = split_host_port(hostport, default_port)?;
        let mut options = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').ok_or(Error::InvalidArgument(
                "server URL options are NAME=VALUE pairs",
            ))?;
            options.push((name, decode(value)?));
        }
        Ok(Self {
            host,
            port,
            username,
            password,
            path,
            options,
        })
    }
}

pub(crate) fn split_host_port(hostport: &str, default_port: u16) -> Result<(String, u16)> {
    const BAD_PORT: Error =
        Error::InvalidArgument("the port in a server URL is a number from 1 to 65535");
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or(Error::InvalidArgument(
            "an IPv6 host in a server URL is written [ADDRESS]",
        ))?;
        match after {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':').ok_or(BAD_PORT)?)),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(Error::InvalidArgument("a server URL names a host"));
    }
    let port = match port {
        None => default_port,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or(BAD_PORT)?,
    };
    Ok((host.to_owned(), port))
}

pub(crate) fn duration(text: &str) -> Result<Duration> {
    const BAD: Error =
        Error::InvalidArgument("a duration in a server URL is a number and a unit: 500ms, 30s");
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(BAD);
    };
    let secs = number.parse::<f64>().map_err(|_| BAD)? * scale;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero() && *d <= Duration::from_secs(86_400 * 365))
        .ok_or(BAD)
}

/// Percent-decoding of a URL part (user, password, option value).
pub(crate) fn decode(text: &str) -> Result<String> {
    const BAD: Error = Error::InvalidArgument("a server URL has a malformed %-escape");
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).ok_or(BAD)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| BAD)?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::InvalidArgument("a server URL part is not UTF-8"))
}

/// The options every server scope's URL takes, with their defaults:
///
/// | option | default | meaning |
/// |---|---|---|
/// | `prefix` | `keylock` | the namespace of everything the scope keeps on the server |
/// | `lease` | `30s` | every remote acquisition's lease, renewed while the acquisition lives |
/// | `connect_timeout` | `5s` | the most opening the scope, or one reconnection, may take |
/// | `timeout` | `5s` | the most one command may take before the scope reports `Unavailable` |
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServerOptions {
    pub(crate) prefix: String,
    pub(crate) lease: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) timeout: Duration,
}

/// The lease every remote acquisition gets unless the URL says otherwise.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            prefix: "keylock".to_owned(),
            lease: DEFAULT_LEASE,
            connect_timeout: DEFAULT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// What one scope asks more of [`ServerOptions`], in its own words.
pub(crate) struct OptionRules {
    /// Whether a non-empty prefix suits the scope.
    pub(crate) prefix_ok: fn(&str) -> bool,
    /// The error for an empty prefix or one `prefix_ok` refuses.
    pub(crate) bad_prefix: &'static str,
    /// The shortest lease the scope can renew in time.
    pub(crate) min_lease: Duration,
    /// The error for a shorter lease.
    pub(crate) short_lease: &'static str,
    /// The error for an option neither these nor the scope's own take.
    pub(crate) unknown: &'static str,
}

impl ServerOptions {
    /// Reads a URL's `options` (from [`UrlParts`], in order): the shared ones here, any other
    /// through `own`, which answers whether it took it. One that neither takes is refused: a
    /// caller's typo must never pick a default silently.
    pub(crate) fn parse(
        options: Vec<(&str, String)>,
        rules: &OptionRules,
        mut own: impl FnMut(&str, &str) -> Result<bool>,
    ) -> Result<Self> {
        let mut out = Self::default();
        for (name, value) in options {
            match name {
                "prefix" => {
                    if value.is_empty() || !(rules.prefix_ok)(&value) {
                        return Err(Error::InvalidArgument(rules.bad_prefix));
                    }
                    out.prefix = value;
                }
                "lease" => out.lease = duration(&value)?,
                "connect_timeout" => out.connect_timeout = duration(&value)?,
                "timeout" => out.timeout = duration(&value)?,
                _ => {
                    if !own(name, &value)? {
                        return Err(Error::InvalidArgument(rules.unknown));
                    }
                }
            }
        }
        if out.lease < rules.min_lease {
            return Err(Error::InvalidArgument(rules.short_lease));
        }
        Ok(out)
    }
}

//! [`redact_scope_name`]: the one rule that keeps a password out of everything keylock prints.
//! Every front end's names, reprs, `Debug` output and errors show a scope's name through it, so
//! a URL's password reads `***` everywhere. It sits below every scope and calls none of them.

/// The scope name `name` with any password in it replaced by `***`: what every front end prints
/// in a name, repr, `Debug`, error or log line. A URL's password is the text between the first
/// `:` of its user-info and the last `@` before the host (`redis://user:PASSWORD@host/0`,
/// `postgres://user:PASSWORD@host/db`); a name without user-info comes back unchanged. This is
/// the one place that rule is written.
pub fn redact_scope_name(name: &str) -> String {
    let Some(scheme_end) = name.find("://") else {
        return name.to_owned();
    };
    let authority_start = scheme_end + 3;
    let rest = &name[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let Some(at) = authority.rfind('@') else {
        return name.to_owned();
    };
    let userinfo = &authority[..at];
    let Some(colon) = userinfo.find(':') else {
        return name.to_owned();
    };
    let mut out = String::with_capacity(name.len());
    out.push_str(&name[..authority_start + colon + 1]);
    out.push_str("***");
    out.push_str(&name[authority_start + at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_scope_name_hides_only_the_password() {
        let cases = [
            (
                "redis://:s3cret@127.0.0.1:6379/0",
                "redis://:***@127.0.0.1:6379/0",
            ),
            (
                "rediss://bob:s3cret@h/1?lease=5s",
                "rediss://bob:***@h/1?lease=5s",
            ),
            (
                "postgres://u:p@ss:w@db:5432/x",
                "postgres://u:***@db:5432/x",
            ),
            ("redis://bob@h/0", "redis://bob@h/0"),
            ("redis://h:6379/0?prefix=a@b", "redis://h:6379/0?prefix=a@b"),
            ("shm:name", "shm:name"),
            ("local:", "local:"),
            ("", ""),
        ];
        for (name, want) in cases {
            assert_eq!(redact_scope_name(name), want, "{name}");
        }
    }
}

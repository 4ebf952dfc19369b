//! Checks that tie the C header to this crate. The C API itself is exercised from C by
//! `examples/c/test_keylock.c` (under AddressSanitizer) in `make test`.

use crate::pool::keylock_pool;
use crate::result::*;
use crate::rwlock::keylock_rwlock;
use crate::striped::*;

const HEADER: &str = include_str!("../../include/keylock.h");

/// The value of `#define NAME value` in the committed header.
fn define(name: &str) -> &'static str {
    HEADER
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix("#define ")?.strip_prefix(name)?;
            rest.starts_with(' ').then(|| rest.trim())
        })
        .unwrap_or_else(|| panic!("include/keylock.h has no #define {name}"))
}

#[test]
fn header_version_macros_match_cargo_toml() {
    assert_eq!(
        define("KEYLOCK_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MAJOR")
    );
    assert_eq!(
        define("KEYLOCK_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    assert_eq!(
        define("KEYLOCK_VERSION_PATCH"),
        env!("CARGO_PKG_VERSION_PATCH")
    );
    assert_eq!(
        define("KEYLOCK_VERSION"),
        format!("\"{}\"", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn max_stripes_is_the_core_maximum() {
    assert_eq!(KEYLOCK_MAX_STRIPES, keylock_core::StripedLock::MAX_STRIPES);
    assert!(keylock_striped_new(0).is_null());
    assert!(keylock_striped_new(KEYLOCK_MAX_STRIPES + 1).is_null());
}

#[test]
fn result_codes_in_header_match() {
    for (name, code) in [
        ("KEYLOCK_OK", KEYLOCK_OK),
        ("KEYLOCK_WOULD_BLOCK", KEYLOCK_WOULD_BLOCK),
        ("KEYLOCK_TIMEOUT", KEYLOCK_TIMEOUT),
        ("KEYLOCK_NOT_LOCKED", KEYLOCK_NOT_LOCKED),
        ("KEYLOCK_NULL_ARGUMENT", KEYLOCK_NULL_ARGUMENT),
        ("KEYLOCK_INVALID_ARGUMENT", KEYLOCK_INVALID_ARGUMENT),
        ("KEYLOCK_PANIC", KEYLOCK_PANIC),
    ] {
        assert_eq!(define(name), code.to_string(), "{name}");
    }
}

/// The header promises that every handle may be used from many threads at once.
#[test]
fn handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<keylock_pool>();
    assert_send_sync::<keylock_striped>();
    assert_send_sync::<keylock_rwlock>();
}

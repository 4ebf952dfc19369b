//! Checks that tie the C header to this crate, and to keylock-core's shared contracts. The C
//! API itself is exercised from C by `ffi-c/tests/c/test_keylock.c` (under AddressSanitizer) in
//! `make test`.

use std::fmt::Write;

use keylock_core::{Mode, Status};

use crate::acquisition::keylock_acquisition;
use crate::contract::*;
use crate::options::*;
use crate::pool::keylock_pool;
use crate::rwlock::keylock_rwlock;
use crate::semaphore::*;
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
fn result_codes_in_header_are_the_core_statuses() {
    for status in Status::ALL {
        assert_eq!(
            define(status.name()),
            status.code().to_string(),
            "{status:?}"
        );
    }
    assert_eq!(
        define("KEYLOCK_EXCLUSIVE"),
        (Mode::Exclusive as u8).to_string()
    );
    assert_eq!(define("KEYLOCK_SHARED"), (Mode::Shared as u8).to_string());
    assert_eq!(
        define("KEYLOCK_INT_KEY_LEN"),
        keylock_core::keys::INT_KEY_LEN.to_string()
    );
}

/// `contract.rs` as keylock-core's tables give it: the two integer types the numbers are, a
/// constant and a `keylock_result_str` string per status, and the key sizes. cbindgen turns the
/// constants into the header's macros. The file imports nothing of this crate: it is the bottom
/// layer, which `result` and `options` build on.
fn contract_rs() -> String {
    let mut s = String::new();
    let n = Status::ALL.len();
    s.push_str(
        "//! The numbers the C ABI shares with every keylock front end, generated from keylock-core\n\
         //! (its `Status` table and `keys` rules) by `make header`, which also regenerates\n\
         //! include/keylock.h from them. Do not edit: add a status in core/src/status.rs, then run\n\
         //! `make header`. (`contract_rs` in ffi-c/src/tests.rs writes this file, and a test fails\n\
         //! while it differs from what the core gives.)\n\
         \n\
         use std::ffi::CStr;\n\
         \n\
         /// The result of every keylock call that can fail: `KEYLOCK_OK` (0) or one of the\n\
         /// `KEYLOCK_*` codes below. A fixed-width integer whose numbers never change and are never\n\
         /// reused, so a program may store them or switch on them. `keylock_result_str` describes any\n\
         /// value, including ones this version does not know.\n\
         #[allow(non_camel_case_types)] // C naming: this is the name C programs see.\n\
         pub type keylock_result = u32;\n\
         \n\
         /// How an acquisition holds its key: `KEYLOCK_EXCLUSIVE` (one holder) or `KEYLOCK_SHARED` (any\n\
         /// number of shared holders, and no exclusive one). A fixed-width integer, like\n\
         /// `keylock_result`; any other value is refused with `KEYLOCK_INVALID_ARGUMENT`.\n\
         #[allow(non_camel_case_types)] // C naming: this is the name C programs see.\n\
         pub type keylock_mode = u32;\n",
    );
    for status in Status::ALL {
        s.push('\n');
        match c_doc(*status) {
            Some(lines) => lines.iter().for_each(|l| _ = writeln!(s, "/// {l}")),
            None => {
                let mut doc = status.description().to_owned();
                doc[..1].make_ascii_uppercase();
                let _ = writeln!(s, "/// {doc}.");
            }
        }
        let _ = writeln!(
            s,
            "pub const {}: keylock_result = {};",
            status.name(),
            status.code()
        );
    }
    for (mode, doc) in [
        (Mode::Exclusive, "one holder at a time"),
        (
            Mode::Shared,
            "any number of holders together, and no exclusive one",
        ),
    ] {
        let _ = write!(
            s,
            "\n/// `keylock_mode`: {doc}.\n\
             pub const KEYLOCK_{}: keylock_mode = {};\n",
            mode.as_str().to_ascii_uppercase(),
            mode as u8
        );
    }
    let _ = write!(
        s,
        "\n/// The length of an integer key (`keylock_key_from_i64`), in bytes.\n\
         pub const KEYLOCK_INT_KEY_LEN: usize = {};\n\
         \n\
         /// What `keylock_result_str` returns for each code, by number.\n\
         pub(crate) const RESULT_STRINGS: [&CStr; {n}] = [\n",
        keylock_core::keys::INT_KEY_LEN
    );
    for status in Status::ALL {
        let _ = writeln!(s, "    c\"{status}\",");
    }
    s.push_str("];\n");
    s
}

/// What a status means at the C ABI, for the header's documentation of its constant (lines of
/// at most 96 characters); the core's description serves for a status without one.
fn c_doc(status: Status) -> Option<&'static [&'static str]> {
    Some(match status {
        Status::Ok => &["Success."],
        Status::WouldBlock => &[
            "A `_try_` call (or a timeout of 0) found the lock held, by another holder or by the",
            "caller itself.",
        ],
        Status::TimedOut => {
            &["A `_timeout` call (or `timeout_ns`) waited the whole timeout without the lock."]
        }
        Status::NotLocked => &[
            "A release (or extend) of an empty acquisition record: never filled, or the output of a",
            "failed acquire.",
        ],
        Status::NullArgument => &[
            "A required pointer argument was NULL: a handle, an output pointer, a `_many` array, or a key",
            "pointer whose length is not 0.",
        ],
        Status::InvalidArgument => &[
            "An argument was out of range or malformed: `n == 0` in a `_many` call, a length over",
            "`PTRDIFF_MAX`, an unknown mode or lock name, an acquisition record of another lock",
            "object, text that is not a key (`keylock_key_from_utf16`), or a `_metrics` call on a lock",
            "object opened without metrics.",
        ],
        Status::Panic => &[
            "The library hit an internal error (a Rust panic), caught before it reached the caller. The",
            "call did nothing that the caller must undo; please report it as a bug.",
        ],
        Status::NotOwner => &[
            "A release, extend or check of an acquisition that is no longer the lock's current one",
            "(force-unlocked), or a second release of the same record. Nothing changed.",
        ],
        Status::LeaseExpired => &[
            "A release or extend of an acquisition whose lease ran out: the lock freed itself, and",
            "may have had other holders since. Nothing changed.",
        ],
        Status::ReentrancyLimit => &[
            "A reentrant acquire by an owner that already holds the key the most times allowed",
            "(65536).",
        ],
        _ => return None,
    })
}

/// Run with `KEYLOCK_BLESS=1` (as `make header` does) to write `contract.rs`.
#[test]
fn contract_rs_is_generated_from_the_core() {
    let generated = contract_rs();
    if std::env::var_os("KEYLOCK_BLESS").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/contract.rs");
        std::fs::write(path, &generated).unwrap();
        return;
    }
    assert!(
        include_str!("contract.rs") == generated,
        "ffi-c/src/contract.rs differs from what keylock-core's Status table gives: run `make \
         header`"
    );
    for (i, status) in Status::ALL.iter().enumerate() {
        assert_eq!(RESULT_STRINGS[i].to_str().unwrap(), status.to_string());
    }
}

/// The header promises that every handle may be used from many threads at once.
#[test]
fn handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<keylock_pool>();
    assert_send_sync::<keylock_striped>();
    assert_send_sync::<keylock_rwlock>();
    assert_send_sync::<keylock_semaphore>();
}

#[test]
fn max_permits_is_the_core_maximum() {
    assert_eq!(
        KEYLOCK_MAX_PERMITS,
        keylock_core::KeyedSemaphore::<Vec<u8>>::MAX_PERMITS
    );
    let sem = keylock_semaphore_new(KEYLOCK_MAX_PERMITS);
    assert!(!sem.is_null());
    // SAFETY: a live handle, freed once.
    unsafe {
        assert_eq!(keylock_semaphore_permits(sem), KEYLOCK_MAX_PERMITS);
        keylock_semaphore_free(sem);
        assert_eq!(keylock_semaphore_permits(std::ptr::null()), 0);
    }
}

/// The header's initialisers are the library's: `KEYLOCK_LOCK_OPTIONS_INIT` is exclusive, no
/// lease, no owner, wait forever; `KEYLOCK_ACQUISITION_INIT` is all zeros, an empty record.
#[test]
fn header_initialisers_match_the_library() {
    let opts = define("KEYLOCK_LOCK_OPTIONS_INIT");
    assert_eq!(
        opts, "{ KEYLOCK_EXCLUSIVE, 0, 0, KEYLOCK_WAIT_FOREVER }",
        "the field order of keylock_lock_options"
    );
    let o = keylock_lock_options::INIT;
    assert_eq!(
        (o.mode, o.lease_ns, o.owner, o.timeout_ns),
        (KEYLOCK_EXCLUSIVE, 0, 0, KEYLOCK_WAIT_FOREVER)
    );
    assert_eq!(define("KEYLOCK_ACQUISITION_INIT"), "{ 0 }");
    let empty = keylock_acquisition::EMPTY;
    assert_eq!(
        (
            empty.fence,
            empty.mode,
            empty.owner_died,
            empty.weight,
            empty._private_state
        ),
        (0, 0, false, 0, 0)
    );
    assert_eq!(std::mem::size_of::<keylock_acquisition>(), 128);
}

#[test]
fn an_uncontended_plain_lock_keeps_the_cores_fast_record() {
    use crate::acquisition::state;
    use crate::pool::*;
    let key = b"k".as_ptr();
    let (striped, pool) = (keylock_striped_new(8), keylock_pool_new());
    let (mut a, mut b) = (keylock_acquisition::EMPTY, keylock_acquisition::EMPTY);
    // SAFETY: live handles and records; `key` points to 1 byte.
    unsafe {
        assert_eq!(keylock_striped_lock(striped, key, 1, &mut a), KEYLOCK_OK);
        assert_eq!(a._private_state, state::KEYED);
        // The stripe is held: the next acquire goes the full way and is refused there.
        let r = keylock_striped_try_lock(striped, key, 1, &mut b);
        assert_eq!((r, b._private_state), (KEYLOCK_WOULD_BLOCK, state::EMPTY));
        assert_eq!(keylock_striped_release(striped, &mut a), KEYLOCK_OK);
        assert_eq!(keylock_striped_release(striped, &mut a), KEYLOCK_NOT_OWNER);

        // A pool's first lock of a key makes its slot on the full path (a guard); once the
        // slot is indexed the fast path takes it.
        assert_eq!(keylock_pool_lock(pool, key, 1, &mut a), KEYLOCK_OK);
        assert_eq!(a._private_state, state::POOL);
        assert_eq!(keylock_pool_release(pool, &mut a), KEYLOCK_OK);
        assert_eq!(keylock_pool_lock(pool, key, 1, &mut a), KEYLOCK_OK);
        assert_eq!(a._private_state, state::KEYED);
        // Another object's record is refused by both, and stays held.
        assert_eq!(
            keylock_striped_release(striped, &mut a),
            KEYLOCK_INVALID_ARGUMENT
        );
        assert_eq!(keylock_pool_release(pool, &mut a), KEYLOCK_OK);
        assert_eq!(keylock_pool_release(pool, &mut a), KEYLOCK_NOT_OWNER);
        keylock_striped_free(striped);
        keylock_pool_free(pool);
    }
}

/// A pool opened with metrics through the C ABI: every call goes through the core's `Metered`
/// layer (no in-process fast path keeps a guard), and `keylock_pool_metrics` reports exactly
/// what the calls did; one opened without metrics reports `KEYLOCK_INVALID_ARGUMENT`.
#[test]
fn metrics_count_what_the_c_calls_did() {
    use std::time::Duration;

    use crate::acquisition::state;
    use crate::metrics::keylock_metrics;
    use crate::pool::*;

    struct Pool(*mut keylock_pool);
    // SAFETY: a pool handle may be used from any thread (see handles_are_send_and_sync).
    unsafe impl Send for Pool {}
    // SAFETY: as above.
    unsafe impl Sync for Pool {}

    let key = b"k".as_ptr();
    let opts = keylock_open_options {
        metrics: true,
        ..Default::default()
    };
    let (mut pool, mut plain) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: live handles and records, freed once; every key points to 1 byte.
    unsafe {
        assert_eq!(
            keylock_pool_open(c"local:".as_ptr(), &opts, &mut pool),
            KEYLOCK_OK
        );
        assert_eq!(
            keylock_pool_open(c"local:".as_ptr(), std::ptr::null(), &mut plain),
            KEYLOCK_OK
        );
        let mut m: keylock_metrics = std::mem::zeroed();
        assert_eq!(
            keylock_pool_metrics(plain, &mut m),
            KEYLOCK_INVALID_ARGUMENT
        );
        assert_eq!(
            keylock_pool_metrics(std::ptr::null(), &mut m),
            KEYLOCK_NULL_ARGUMENT
        );
        assert_eq!(
            keylock_pool_metrics(pool, std::ptr::null_mut()),
            KEYLOCK_NULL_ARGUMENT
        );
        assert_eq!(keylock_pool_metrics(pool, &mut m), KEYLOCK_OK);
        assert_eq!((m.acquired, m.wait.count, m.hold.count), (0, 0, 0));

        // Without metrics, a pool's first plain lock of a key keeps the core's guard; with
        // them, the trait's Acquisition (the layer's record, which it counts).
        let (mut a, mut b) = (keylock_acquisition::EMPTY, keylock_acquisition::EMPTY);
        assert_eq!(keylock_pool_lock(plain, key, 1, &mut a), KEYLOCK_OK);
        assert_eq!(a._private_state, state::POOL);
        assert_eq!(keylock_pool_release(plain, &mut a), KEYLOCK_OK);
        assert_eq!(keylock_pool_lock(pool, key, 1, &mut a), KEYLOCK_OK);
        assert_eq!(a._private_state, state::KEYED);
        assert_eq!(
            keylock_pool_try_lock(pool, key, 1, &mut b),
            KEYLOCK_WOULD_BLOCK
        );

        // A waiter on another thread, granted when the key is released.
        let shared = Pool(pool);
        let waiter = std::thread::spawn(move || {
            let shared = &shared;
            let mut w = keylock_acquisition::EMPTY;
            // (Inside the test's unsafe block: the pool outlives the thread, joined before the
            // pool is freed.)
            let r = keylock_pool_lock_timeout(shared.0, b"k".as_ptr(), 1, 10_000_000_000, &mut w);
            assert_eq!(r, KEYLOCK_OK);
            assert_eq!(keylock_pool_release(shared.0, &mut w), KEYLOCK_OK);
        });
        let mut info = keylock_lock_info::FREE;
        let start = std::time::Instant::now();
        while info.waiters == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the waiter never queued"
            );
            std::thread::sleep(Duration::from_millis(1));
            assert_eq!(keylock_pool_info(pool, key, 1, &mut info), KEYLOCK_OK);
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(keylock_pool_release(pool, &mut a), KEYLOCK_OK);
        waiter.join().unwrap();

        // A force-unlock, and the old holder's release refused.
        assert_eq!(keylock_pool_lock(pool, key, 1, &mut a), KEYLOCK_OK);
        let mut was_held = false;
        assert_eq!(
            keylock_pool_force_unlock(pool, key, 1, &mut was_held),
            KEYLOCK_OK
        );
        assert!(was_held);
        assert_eq!(keylock_pool_release(pool, &mut a), KEYLOCK_NOT_OWNER);
        // A second release of the same record is the record's refusal: not counted.
        assert_eq!(keylock_pool_release(pool, &mut a), KEYLOCK_NOT_OWNER);

        assert_eq!(keylock_pool_metrics(pool, &mut m), KEYLOCK_OK);
        let counts = (
            m.acquired,
            m.contended,
            m.timed_out,
            m.would_block,
            m.cancelled,
            m.lease_expired,
            m.owner_died,
            m.lost,
            m.force_unlocked,
        );
        assert_eq!(counts, (3, 1, 0, 1, 0, 0, 0, 1, 1));
        assert_eq!((m.wait.count, m.wait.buckets[0]), (3, 2));
        assert!(m.wait.max_ns >= 20_000_000, "{}", m.wait.max_ns);
        assert_eq!(m.hold.count, 2);
        assert!(m.hold.max_ns >= 20_000_000, "{}", m.hold.max_ns);
        assert_eq!(m.wait.count, m.wait.buckets.iter().sum::<u64>());

        keylock_pool_free(pool);
        keylock_pool_free(plain);
    }
}

/// `metrics` joined `keylock_open_options` in its padding: the open calls of every handle take
/// it to the core, and a zeroed struct leaves it off.
#[test]
fn open_options_carry_metrics() {
    let off = keylock_open_options::default();
    assert!(!off.to_core(None).metrics);
    let on = keylock_open_options {
        metrics: true,
        ..off
    };
    assert!(on.to_core(None).metrics);
    let mut striped = std::ptr::null_mut();
    let mut sem = std::ptr::null_mut();
    let mut m = std::mem::MaybeUninit::<crate::metrics::keylock_metrics>::zeroed();
    // SAFETY: live handles, freed once; `m` is writable.
    unsafe {
        assert_eq!(
            keylock_striped_open(c"local:".as_ptr(), &on, &mut striped),
            KEYLOCK_OK
        );
        assert_eq!(keylock_striped_metrics(striped, m.as_mut_ptr()), KEYLOCK_OK);
        assert_eq!(
            keylock_semaphore_open(c"local:".as_ptr(), 2, &on, &mut sem),
            KEYLOCK_OK
        );
        assert_eq!(keylock_semaphore_metrics(sem, m.as_mut_ptr()), KEYLOCK_OK);
        keylock_striped_free(striped);
        keylock_semaphore_free(sem);
        let (striped, sem) = (keylock_striped_new(8), keylock_semaphore_new(2));
        assert_eq!(
            keylock_striped_metrics(striped, m.as_mut_ptr()),
            KEYLOCK_INVALID_ARGUMENT
        );
        assert_eq!(
            keylock_semaphore_metrics(sem, m.as_mut_ptr()),
            KEYLOCK_INVALID_ARGUMENT
        );
        keylock_striped_free(striped);
        keylock_semaphore_free(sem);
    }
}

//! The key fixture (`tests/keys.json`), which the C, Python and Node test suites check too: the
//! core's encoders give every entry's bytes, or its rejection.

use keylock_core::keys::{self, KeyError};
use keylock_core::{Error, KeyPool};
use serde_json::Value;

const FIXTURE: &str = include_str!("keys.json");

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// An entry's expected outcome: the key's bytes, or the name of its rejection.
fn expected(entry: &Value, repeat: usize) -> Result<Vec<u8>, String> {
    match (entry.get("hex"), entry.get("error")) {
        (Some(h), None) => Ok(hex(h.as_str().unwrap()).repeat(repeat)),
        (None, Some(e)) => Err(e.as_str().unwrap().to_owned()),
        _ => panic!("an entry has hex or error: {entry}"),
    }
}

fn units(v: &Value) -> Vec<u16> {
    let units = v.as_array().map(Vec::as_slice).unwrap_or_default();
    units
        .iter()
        .map(|u| u16::try_from(u.as_u64().unwrap()).unwrap())
        .collect()
}

/// The fixture's name for a rejection.
fn name(e: KeyError) -> &'static str {
    match e {
        KeyError::LoneSurrogate => "lone_surrogate",
        KeyError::IntegerOutOfRange => "integer_out_of_range",
        other => panic!("not a rejection of the fixture: {other:?}"),
    }
}

#[test]
fn every_entry_encodes_as_the_fixture_says() {
    let doc: Value = serde_json::from_str(FIXTURE).unwrap();
    let errors = &doc["errors"];
    let entries = doc["keys"].as_array().unwrap();
    let (mut texts, mut ints, mut bytes) = (0, 0, 0);
    for entry in entries {
        let what = entry["name"].as_str().unwrap();
        let repeat = entry
            .get("repeat")
            .map_or(1, |r| r.as_u64().unwrap() as usize);
        let want = expected(entry, repeat);
        let got: Result<Vec<u8>, KeyError> = if let Some(text) = entry.get("text") {
            texts += 1;
            let mut all = units(text).repeat(repeat);
            all.extend(units(entry.get("tail").unwrap_or(&Value::Null)));
            let mut buf = vec![0; keys::utf16_max_len(all.len())];
            let into = keys::encode_utf16_into(&all, &mut buf).map(|n| buf[..n].to_vec());
            assert_eq!(
                into,
                keys::encode_utf16(&all),
                "{what}: the two encoders agree"
            );
            assert_eq!(
                keys::utf16_len(&all),
                into.as_ref().map(Vec::len).map_err(|e| *e)
            );
            into
        } else if let Some(int) = entry.get("int") {
            ints += 1;
            // Out of i128 too (10^40) is as far out of range as it gets.
            int.as_str()
                .unwrap()
                .parse::<i128>()
                .map_or(Err(KeyError::IntegerOutOfRange), keys::encode_int)
                .map(|k| k.to_vec())
        } else {
            bytes += 1;
            // Bytes are themselves: check that the pool takes them as one key.
            let key = hex(entry["bytes"].as_str().unwrap()).repeat(repeat);
            let pool: KeyPool = KeyPool::new();
            let held = pool.lock(key.as_slice());
            assert!(pool.is_locked(key.as_slice()));
            drop(held);
            Ok(key)
        };
        match (&got, &want) {
            (Ok(g), Ok(w)) => assert!(g == w, "{what}: {} bytes, expected {}", g.len(), w.len()),
            (Err(e), Err(w)) => {
                assert_eq!(name(*e), w, "{what}");
                let phrase = errors[w.as_str()].as_str().unwrap();
                assert!(e.message().contains(phrase), "{what}: {:?}", e.message());
                assert_eq!(Error::from(*e), Error::InvalidArgument(e.message()));
            }
            _ => panic!("{what}: got {got:?}, expected {want:?}"),
        }
    }
    assert!(
        texts > 20 && ints > 10 && bytes > 3,
        "{texts} {ints} {bytes}"
    );
}

//! The records that cross between this addon and JavaScript, declared once.
//!
//! Each record is a positional array (or a buffer of 32-bit words) whose fields are listed
//! here in order, with their JavaScript types. The Rust writers take their positions from these
//! tables (the constants below are looked up by name at compile time, so a field renamed or
//! moved here moves every writer with it), and `recordSchema()` hands the same tables to
//! JavaScript, which builds its readers from them when it loads (`lib/records.js`). Neither side
//! writes a position of its own.

use napi_derive::napi;

/// The JavaScript type of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    /// A word of a `Uint32Array` (a buffer record).
    U32,
    /// A `number`.
    Number,
    /// A `bigint`.
    BigInt,
    /// A `boolean`.
    Boolean,
    /// A `string`.
    String,
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::U32 => "u32",
            Type::Number => "number",
            Type::BigInt => "bigint",
            Type::Boolean => "boolean",
            Type::String => "string",
        }
    }
}

/// One field: its name (as JavaScript reads it) and type; its position is its index in the
/// record's table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    name: &'static str,
    ty: Type,
}

const fn field(name: &'static str, ty: Type) -> Field {
    Field { name, ty }
}

/// The position of field `name` in `fields`; a name that is not there fails the build.
const fn position(fields: &[Field], name: &str) -> usize {
    let mut i = 0;
    while i < fields.len() {
        if eq(fields[i].name.as_bytes(), name.as_bytes()) {
            return i;
        }
        i += 1;
    }
    panic!("a record field that its table does not declare");
}

const fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The output buffer (a `Uint32Array` of this thread) that an acquire that finished at once
/// writes its slot, fence and flags to, and an async start the id of its waiter.
pub(crate) const OUTPUT: &[Field] = &[
    field("fenceLow", Type::U32),
    field("fenceHigh", Type::U32),
    field("flags", Type::U32),
    field("waiter", Type::U32),
    field("slot", Type::U32),
];
/// The output buffer's fields.
pub(crate) mod output {
    use super::{OUTPUT, position};
    /// The fence's low 32 bits.
    pub(crate) const FENCE_LOW: usize = position(OUTPUT, "fenceLow");
    /// The fence's high 32 bits.
    pub(crate) const FENCE_HIGH: usize = position(OUTPUT, "fenceHigh");
    /// The acquisition's flags (shared mode, owner died).
    pub(crate) const FLAGS: usize = position(OUTPUT, "flags");
    /// The id of the waiter an async start began (its result was 0).
    pub(crate) const WAITER: usize = position(OUTPUT, "waiter");
    /// The slot an acquire that finished at once stored its acquisition in (its result was
    /// `undefined`).
    pub(crate) const SLOT: usize = position(OUTPUT, "slot");
    /// Words of the buffer.
    pub(crate) const WORDS: usize = OUTPUT.len();
}

/// A completion, as `runReady` writes it to the records buffer: a waiter that finished (granted,
/// or failed: slot 0 and its status in the flags above `STATUS_SHIFT`, the id of its kept text
/// in `fenceLow`), or a notice (slot 0, flag STOLEN or LOST, `id` the request or watch).
pub(crate) const COMPLETION: &[Field] = &[
    field("id", Type::U32),
    field("slot", Type::U32),
    field("fenceLow", Type::U32),
    field("fenceHigh", Type::U32),
    field("flags", Type::U32),
];
/// A completion's fields.
pub(crate) mod completion {
    use super::{COMPLETION, position};
    /// The waiter's id, or the Web Locks request's or watched guard's for a notice.
    pub(crate) const ID: usize = position(COMPLETION, "id");
    /// The acquisition's slot in its lock's slab (0: failed, or a notice).
    pub(crate) const SLOT: usize = position(COMPLETION, "slot");
    /// The fence's low 32 bits; for a failure, the id of its kept text.
    pub(crate) const FENCE_LOW: usize = position(COMPLETION, "fenceLow");
    /// The fence's high 32 bits.
    pub(crate) const FENCE_HIGH: usize = position(COMPLETION, "fenceHigh");
    /// Flags: shared, owner died, failed, stolen, lost, and a failure's status.
    pub(crate) const FLAGS: usize = position(COMPLETION, "flags");
    /// Words of one completion.
    pub(crate) const WORDS: usize = COMPLETION.len();
}

/// A completion of waiter `id` from its acquisition's record, `[slot, fence low 32 bits, fence
/// high 32 bits, flags]` (the reactor's `Record`).
pub(crate) fn completion_of(id: u32, record: &[u32; 4]) -> [u32; completion::WORDS] {
    let mut c = [0; completion::WORDS];
    c[completion::ID] = id;
    c[completion::SLOT] = record[0];
    c[completion::FENCE_LOW] = record[1];
    c[completion::FENCE_HIGH] = record[2];
    c[completion::FLAGS] = record[3];
    c
}

/// A completion that carries only flags: a notice to `id`, or a waiter that failed.
pub(crate) fn notice(id: u32, flags: u32) -> [u32; completion::WORDS] {
    completion_of(id, &[0, 0, 0, flags])
}

/// `info(key)`'s array, for a key that is held.
pub(crate) const INFO: &[Field] = &[
    field("fence", Type::BigInt),
    field("shared", Type::Boolean),
    field("holders", Type::Number),
    field("holds", Type::Number),
    field("owner", Type::Number),
    field("leaseRemaining", Type::Number),
    field("waiters", Type::Number),
    field("units", Type::Number),
];
/// `info(key)`'s fields.
pub(crate) mod info {
    use super::{INFO, position};
    /// The current fence.
    pub(crate) const FENCE: usize = position(INFO, "fence");
    /// Whether it is held shared.
    pub(crate) const SHARED: usize = position(INFO, "shared");
    /// Holders now.
    pub(crate) const HOLDERS: usize = position(INFO, "holders");
    /// The hold count (reentrant locks).
    pub(crate) const HOLDS: usize = position(INFO, "holds");
    /// The owner's number (0: none).
    pub(crate) const OWNER: usize = position(INFO, "owner");
    /// Milliseconds left on the lease (-1: none).
    pub(crate) const LEASE_REMAINING: usize = position(INFO, "leaseRemaining");
    /// Waiters queued.
    pub(crate) const WAITERS: usize = position(INFO, "waiters");
    /// Units held now: a semaphore's holders' weights summed; a lock's holders.
    pub(crate) const UNITS: usize = position(INFO, "units");
    /// Fields of the array.
    pub(crate) const LEN: usize = INFO.len();
}

/// One request of `webQuery()`'s list.
pub(crate) const WEB_REQUEST: &[Field] = &[
    field("name", Type::String),
    field("shared", Type::Boolean),
    field("clientId", Type::String),
    field("held", Type::Boolean),
];
/// A Web Locks request's fields.
pub(crate) mod web_request {
    use super::{WEB_REQUEST, position};
    /// The name it asked for.
    pub(crate) const NAME: usize = position(WEB_REQUEST, "name");
    /// Whether it asked for shared mode.
    pub(crate) const SHARED: usize = position(WEB_REQUEST, "shared");
    /// The `clientId` of the thread that made it.
    pub(crate) const CLIENT_ID: usize = position(WEB_REQUEST, "clientId");
    /// Whether it holds the name (else it waits).
    pub(crate) const HELD: usize = position(WEB_REQUEST, "held");
    /// Fields of the array.
    pub(crate) const LEN: usize = WEB_REQUEST.len();
}

/// Every record, by the name JavaScript knows it by.
const RECORDS: &[(&str, &[Field])] = &[
    ("output", OUTPUT),
    ("completion", COMPLETION),
    ("info", INFO),
    ("webRequest", WEB_REQUEST),
];

/// A field as `recordSchema()` describes it.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct FieldSchema {
    /// The name JavaScript reads it by.
    pub name: String,
    /// Its index in the record.
    pub position: u32,
    /// Its JavaScript type: `u32` (a word of a buffer), `number`, `bigint`, `boolean`, `string`.
    #[napi(js_name = "type")]
    pub ty: String,
}

/// A record as `recordSchema()` describes it.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct RecordSchema {
    /// `output`, `completion`, `info` or `webRequest`.
    pub name: String,
    /// Its fields in position order.
    pub fields: Vec<FieldSchema>,
}

/// Every record's schema, as `recordSchema()` returns it.
pub(crate) fn schema() -> Vec<RecordSchema> {
    RECORDS
        .iter()
        .map(|(name, fields)| RecordSchema {
            name: (*name).to_owned(),
            fields: fields
                .iter()
                .enumerate()
                .map(|(i, f)| FieldSchema {
                    name: f.name.to_owned(),
                    position: i as u32,
                    ty: f.ty.name().to_owned(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_names_each_field_once() {
        for (record, fields) in RECORDS {
            for (i, f) in fields.iter().enumerate() {
                assert_eq!(
                    position(fields, f.name),
                    i,
                    "{record}.{} is declared twice",
                    f.name
                );
            }
        }
    }

    #[test]
    fn a_completion_puts_each_word_where_the_schema_says() {
        let c = completion_of(7, &[1, 2, 3, 4]);
        let by_name = |n: &str| c[position(COMPLETION, n)];
        assert_eq!(
            [
                by_name("id"),
                by_name("slot"),
                by_name("fenceLow"),
                by_name("fenceHigh"),
                by_name("flags")
            ],
            [7, 1, 2, 3, 4]
        );
    }
}

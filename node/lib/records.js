'use strict';
// The records that cross between the addon and JavaScript, read by the addon's one declaration
// of them: `recordSchema()` (src/records.rs) lists each record's fields by name, position and
// type, and the addon's writers take their positions from the same table. Each layout below
// asks for its record's fields by name when the package loads, so a field the addon does not
// declare fails the load instead of being misread, and the positions the readers use are
// constants from then on (no lookup per call).

const native = require('./native.js');

const SCHEMA = new Map(native.recordSchema().map((r) => [r.name, r]));

// The fields each layout below reads, by record (for the schema test).
const READ = new Map();

// `{ field: position }` of record `record` for the fields `names`, each of which the addon must
// declare.
function layout(record, names) {
  const declared = SCHEMA.get(record);
  if (declared === undefined) throw new Error(`keylock: the addon declares no record '${record}'`);
  const positions = {};
  for (const name of names) {
    const field = declared.fields.find((f) => f.name === name);
    if (field === undefined) throw new Error(`keylock: the addon's record '${record}' has no field '${name}'`);
    positions[name] = field.position;
  }
  READ.set(record, names.slice());
  return Object.freeze(positions);
}

// Words of a buffer record.
function words(record) {
  return SCHEMA.get(record).fields.length;
}

/**
 * The output buffer: an acquisition's slot, fence and flags (the acquire returned undefined), or
 * the id of the waiter just started (it returned 0).
 */
const OUTPUT = layout('output', ['fenceLow', 'fenceHigh', 'flags', 'waiter', 'slot']);
const OUTPUT_WORDS = words('output');

/**
 * A completion in the records buffer: a waiter that finished (granted, or failed with its
 * status in the flags and the id of its kept text in `fenceLow`), or a notice to a Web Locks
 * request (stolen) or a watched guard (lost).
 */
const COMPLETION = layout('completion', ['id', 'slot', 'fenceLow', 'fenceHigh', 'flags']);
const COMPLETION_WORDS = words('completion');

/** A held key's `info()` (a lock's or a semaphore's). */
const INFO = layout('info', ['fence', 'shared', 'holders', 'holds', 'owner', 'leaseRemaining', 'waiters', 'units']);

/** One request of a Web Locks `query()`. */
const WEB_REQUEST = layout('webRequest', ['name', 'shared', 'clientId', 'held']);

/** The addon's schema, and the fields the layouts above read, by record (for tests). */
function schemaAndReaders() {
  return { schema: [...SCHEMA.values()], read: new Map(READ) };
}

module.exports = { OUTPUT, OUTPUT_WORDS, COMPLETION, COMPLETION_WORDS, INFO, WEB_REQUEST, schemaAndReaders };

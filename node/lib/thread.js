'use strict';
// This thread's state, shared by every copy of the package loaded in the thread (a cleared
// require cache loads a second one; the addon keeps the first dispatcher it was given).
//
// - waiters: pending acquisitions by native waiter id (waiting.js);
// - requests: this thread's Web Locks requests by id, for stolen notices (web-locks.js);
// - owners, ownersById: owner values in use, with their numbers (owners.js);
// - watched: guards whose `signal` watches for a lost lock, by watch id (guard.js);
// - out: the buffer the addon writes an acquisition's fence and flags into, records: the one
//   runReady writes completions into (their layouts: records.js);
// - drain: the function the addon calls when waiters of this thread were woken (waiting.js).

const { randomUUID } = require('node:crypto');
const native = require('./native.js');
const { OUTPUT_WORDS, COMPLETION_WORDS } = require('./records.js');

const STATE = Symbol.for('keylock.thread.v2');
// Completions the records buffer holds (more wait for the next runReady).
const RECORDS_HELD = 256;

// Pending waiters by native waiter id. The addon's ids are small integers that it reuses (the
// index, plus one, of a slot in its table of pending waiters), so an array indexed by id serves
// them: a Map, whose entries were added and deleted for every wait, grew, compacted and shrank
// its table as it went (about 240 instructions a wait).
class ById {
  #items = [];

  get(id) {
    return this.#items[id];
  }

  set(id, value) {
    const items = this.#items;
    while (items.length < id) items.push(undefined);
    items[id] = value;
  }

  delete(id) {
    if (id < this.#items.length) this.#items[id] = undefined;
  }
}

let state = globalThis[STATE];
if (state === undefined) {
  state = {
    waiters: new ById(),
    requests: new Map(),
    nextRequest: 1,
    owners: new Map(),
    ownersById: new Map(),
    out: new Uint32Array(new ArrayBuffer(4 * OUTPUT_WORDS)),
    records: new Uint32Array(new ArrayBuffer(4 * COMPLETION_WORDS * RECORDS_HELD)),
    clientId: randomUUID(),
    drain: null,
  };
  Object.defineProperty(globalThis, STATE, { value: state });
  native.init(() => state.drain(), state.out.buffer, state.records.buffer, state.clientId);
}
// Added here so that a state made by an older copy of the package gets them too.
state.watched ??= new Map();
state.nextWatch ??= 1;

module.exports = { state, RECORDS_HELD };

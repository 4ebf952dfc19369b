'use strict';
// Owners: the core's owner is a number; a caller's owner is any value (an object, a string, a
// number...). Each value in use gets a number of its own, unique in the process, for as long as
// an acquisition or a pending acquire uses it, so different values never share a number and the
// table holds only the owners in use. Values are compared as a Map compares keys (objects by
// identity, strings by content), within this thread: the same string in two worker threads is
// two owners, since no two threads share an execution context.

const native = require('./native.js');
const { state } = require('./thread.js');

// The number of owner value `value`, held once more.
function holdOwner(value) {
  let e = state.owners.get(value);
  if (e === undefined) {
    e = { id: native.nextOwnerId(), n: 0, value };
    state.owners.set(value, e);
    state.ownersById.set(e.id, e);
  }
  e.n++;
  return e.id;
}

// Drops one hold of owner number `id` (0: no owner); the last frees the number.
function dropOwner(id) {
  if (id === 0) return;
  const e = state.ownersById.get(id);
  if (e !== undefined && --e.n === 0) {
    state.owners.delete(e.value);
    state.ownersById.delete(id);
  }
}

// The owner value behind a number, if this thread uses it (null otherwise).
function ownerValue(id) {
  if (id === 0) return null;
  const e = state.ownersById.get(id);
  return e === undefined ? null : e.value;
}

module.exports = { holdOwner, dropOwner, ownerValue };

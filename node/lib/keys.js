'use strict';
// Keys: the bytes a key stands for (the addon encodes them by the rules every front end shares,
// src/keys.rs) and how a key is named in messages.

const native = require('./native.js');

/**
 * The bytes `key` stands for: what every lock compares, and the same bytes the C, Python and Rust
 * front ends give the same key (a string's UTF-8, an integer's 8 bytes big-endian, a
 * Uint8Array's contents).
 */
function keyBytes(key) {
  return native.keyBytes(key);
}

// A key as messages name it.
function keyWhat(key) {
  switch (typeof key) {
    case 'string':
      return `key ${JSON.stringify(key)}`;
    case 'number':
    case 'bigint':
      return `key ${key}`;
    default:
      return key && typeof key.length === 'number' ? `a ${key.length}-byte key` : 'the key';
  }
}

module.exports = { keyBytes, keyWhat };

'use strict';
// The native addon, loaded once for every module of the package (binding.js finds it: a
// prebuilt binary, or one built from src/).

const addon = require('../binding.js').load();

module.exports = addon;

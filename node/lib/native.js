'use strict';
// The native addon, loaded once for every module of the package (binding.js finds it: a
// prebuilt binary, or one built from src/).

module.exports = require('../binding.js').load();

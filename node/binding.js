'use strict';
// Finds the native addon for this platform, in napi-rs's layout.
//
// The main package (`@keylock/keylock`) carries JavaScript only. Each platform with a prebuilt
// binary has its own package, `@keylock/keylock-<platform>` (for example
// `@keylock/keylock-linux-x64-gnu`), listed in the main package's optionalDependencies and
// marked with `os`, `cpu` and `libc`, so npm installs only the one that fits. The addon is
// looked for, in order:
//
//   1. ./keylock_node.node, built from source by build.js (a development checkout, or the
//      install script's fallback on a platform without a prebuilt binary);
//   2. ./keylock_node.<platform>.node, what `napi build --platform` writes in this folder;
//   3. the per-platform package.
//
// KEYLOCK_NODE_ADDON=PATH (a .node file) comes before all three: make test-node-scopes runs the
// tests on a build with the shm and Redis scopes that way, leaving ./keylock_node.node alone.
//
// load() returns the addon; loadPrebuilt() looks at 3 only (install.js asks it whether a
// build from source is needed).

const fs = require('node:fs');
const path = require('node:path');

const pkg = require('./package.json');

const BINARY_NAME = 'keylock_node';

// The platform part of napi-rs's names: linux-x64-gnu, linux-arm64-musl, darwin-arm64,
// win32-x64-msvc, ...
function platformId() {
  const { platform, arch } = process;
  switch (platform) {
    case 'linux': {
      const libc = isMusl() ? 'musl' : 'gnu';
      return arch === 'arm' ? `linux-arm-${libc}eabihf` : `linux-${arch}-${libc}`;
    }
    case 'win32':
      return `win32-${arch}-msvc`;
    case 'android':
      return arch === 'arm' ? 'android-arm-eabi' : `android-${arch}`;
    default:
      return `${platform}-${arch}`;
  }
}

// glibc or musl: the loader's own file names it on every distribution that has one; otherwise
// Node's report says which glibc it runs on, and has no such field under musl.
function isMusl() {
  try {
    return fs.readFileSync('/usr/bin/ldd', 'latin1').includes('musl');
  } catch {
    // no /usr/bin/ldd: ask Node
  }
  try {
    if (process.report) {
      process.report.excludeNetwork = true;
      return !process.report.getReport().header.glibcVersionRuntime;
    }
  } catch {
    // no report: assume glibc, the common case
  }
  return false;
}

// The name the package is published under: napi.packageName (`@keylock/keylock`; in this
// repository the package is `keylock`, the name its tests import it by).
const PUBLISHED = (pkg.napi && pkg.napi.packageName) || pkg.name;

function packageOf(platform) {
  return `${PUBLISHED}-${platform}`;
}

// The platforms that have a prebuilt binary: the main package's optionalDependencies (set by
// `make dist`; empty in a development checkout).
function prebuiltPlatforms() {
  const prefix = `${PUBLISHED}-`;
  return Object.keys(pkg.optionalDependencies || {})
    .filter((name) => name.startsWith(prefix))
    .map((name) => name.slice(prefix.length));
}

function requireFile(file, errors) {
  if (!fs.existsSync(file)) return null;
  try {
    return require(file);
  } catch (err) {
    errors.push(err);
    return null;
  }
}

// The addon from the per-platform package, or null. A binary of another version is refused:
// the JavaScript and the addon are one program, with no stable interface between them.
function loadPrebuilt(errors = []) {
  const name = packageOf(platformId());
  let manifest;
  try {
    manifest = require.resolve(`${name}/package.json`, { paths: [__dirname] });
  } catch {
    return null;
  }
  const { version } = require(manifest);
  if (version !== pkg.version) {
    const e = new Error(
      `keylock: ${name} is version ${version} but ${PUBLISHED} is ${pkg.version}; install the ` +
        'same version of both (remove node_modules and the lock file, then install again)',
    );
    e.code = 'KEYLOCK_BINARY_MISMATCH';
    throw e;
  }
  try {
    return require(name);
  } catch (err) {
    errors.push(err);
    return null;
  }
}

function load() {
  const errors = [];
  const platform = platformId();
  const chosen = process.env.KEYLOCK_NODE_ADDON;
  if (chosen) return require(path.resolve(chosen));
  const native =
    requireFile(path.join(__dirname, `${BINARY_NAME}.node`), errors) ||
    requireFile(path.join(__dirname, `${BINARY_NAME}.${platform}.node`), errors) ||
    loadPrebuilt(errors);
  if (native) return native;

  const prebuilt = prebuiltPlatforms();
  const why = prebuilt.includes(platform)
    ? `its package ${packageOf(platform)} is not installed or does not load. npm can skip ` +
      'optional dependencies (npm/cli#4828, or --omit=optional): remove node_modules and the ' +
      'lock file, then install again'
    : `no prebuilt binary exists for ${platform} (prebuilt: ${prebuilt.join(', ') || 'none'}), ` +
      "and the package's install script, which builds one from source, failed or did not run " +
      '(npm skips it with --ignore-scripts, or when install scripts are not allowed). With Rust ' +
      `installed (https://rustup.rs), run: node ${path.join(__dirname, 'install.js')}`;
  const e = new Error(`keylock: no native addon for ${platform}: ${why}`);
  e.code = 'KEYLOCK_NOT_BUILT';
  if (errors.length > 0) e.cause = errors.length === 1 ? errors[0] : new AggregateError(errors);
  throw e;
}

module.exports = { load, loadPrebuilt, platformId, prebuiltPlatforms, packageOf };

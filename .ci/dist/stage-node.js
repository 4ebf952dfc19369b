'use strict';
// Stages and packs the npm packages of `make dist` (mk/dist.mk), in napi-rs's layout:
//
//   @keylock/keylock                 index.js & co., binding.js (finds the binary), install.js
//                                    (builds from source when no prebuilt binary fits), and the
//                                    sources for that build: the keylock-node crate (Cargo.toml,
//                                    Cargo.lock, build.rs, src/) with keylock-core in
//                                    vendor/keylock-core, both as `cargo package` made them;
//                                    optionalDependencies name one package per platform.
//   @keylock/keylock-<platform>      one per entry of package.json's napi.targets, from
//                                    node/npm/<platform>/, with the binary for that platform.
//
// The published name is napi.packageName; in the repository the package is `keylock`, the name
// its tests import it by.
//
//   node stage-node.js --version V --crates DIR --notices FILE --stage DIR --out DIR \
//     --binary PLATFORM=FILE... --program PLATFORM=FILE...
//
// --binary is a platform's addon, --program its keylock command (core/cli), which the platform
// package carries beside the addon and the main package's bin/keylock.js runs.
//
// --crates holds keylock-core-V.crate and keylock-node-V.crate. Every package gets version V
// (the workspace version): a package.json under node/ that says otherwise is an error. Every
// package carries the repository's LICENSE-MIT and LICENSE-APACHE, and --notices (cargo-about's
// THIRD-PARTY-NOTICES for the keylock-node crate) as THIRD-PARTY-NOTICES: each must be in its
// package.json's "files".

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..', '..');
const NODE_DIR = path.join(ROOT, 'node');
// The files every package carries beside its own, and where each comes from (--notices is read
// in main()).
const LICENSE_FILES = ['LICENSE-MIT', 'LICENSE-APACHE'];
const NOTICES_FILE = 'THIRD-PARTY-NOTICES';

// napi-rs's platform names for the Rust targets one would ship.
const PLATFORMS = {
  'x86_64-unknown-linux-gnu': 'linux-x64-gnu',
  'x86_64-unknown-linux-musl': 'linux-x64-musl',
  'aarch64-unknown-linux-gnu': 'linux-arm64-gnu',
  'aarch64-unknown-linux-musl': 'linux-arm64-musl',
  'armv7-unknown-linux-gnueabihf': 'linux-arm-gnueabihf',
  'x86_64-apple-darwin': 'darwin-x64',
  'aarch64-apple-darwin': 'darwin-arm64',
  'x86_64-pc-windows-msvc': 'win32-x64-msvc',
  'aarch64-pc-windows-msvc': 'win32-arm64-msvc',
  'x86_64-unknown-freebsd': 'freebsd-x64',
};

function fail(message) {
  console.error(`stage-node: ${message}`);
  process.exit(1);
}

function parseArgs(argv) {
  const args = { binary: {}, program: {} };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) fail(`${flag} needs a value`);
    if (flag === '--binary' || flag === '--program') {
      const eq = value.indexOf('=');
      if (eq < 0) fail(`${flag} takes PLATFORM=FILE, not ${value}`);
      args[flag.slice(2)][value.slice(0, eq)] = path.resolve(value.slice(eq + 1));
    } else if (['--version', '--crates', '--notices', '--stage', '--out'].includes(flag)) {
      args[flag.slice(2)] = flag === '--version' ? value : path.resolve(value);
    } else {
      fail(`unknown option ${flag}`);
    }
  }
  for (const need of ['version', 'crates', 'notices', 'stage', 'out']) if (!args[need]) fail(`--${need} is required`);
  return args;
}

function run(cmd, argv, opts = {}) {
  const r = spawnSync(cmd, argv, { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8', ...opts });
  if (r.error) throw r.error;
  if (r.status !== 0) fail(`${cmd} ${argv.join(' ')} exited with ${r.status}`);
  return r.stdout;
}

function readJson(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

function writeJson(file, value) {
  fs.writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`);
}

function copy(from, to) {
  fs.cpSync(from, to, { recursive: true });
}

// Unpacks DIR.crate (a .tar.gz whose entries start with NAME-VERSION/) and returns the folder.
function unpackCrate(crates, name, version, into) {
  const file = path.join(crates, `${name}-${version}.crate`);
  if (!fs.existsSync(file)) fail(`${file} is missing (cargo package makes it)`);
  fs.mkdirSync(into, { recursive: true });
  run('tar', ['-xzf', file, '-C', into]);
  return path.join(into, `${name}-${version}`);
}

// Copies the license texts and the third-party notices into a staged package, and fails unless
// its package.json's "files" lists them (npm packs only what "files" names).
function addLicenses(dir, notices, files, where) {
  for (const name of LICENSE_FILES) fs.copyFileSync(path.join(ROOT, name), path.join(dir, name));
  fs.copyFileSync(notices, path.join(dir, NOTICES_FILE));
  for (const name of [...LICENSE_FILES, NOTICES_FILE]) {
    if (!files.includes(name)) fail(`${where} does not list ${name} in "files"`);
  }
}

// npm pack DIR into OUT; returns the tarball's name and its file list.
function pack(dir, out) {
  const json = run('npm', ['pack', '--json', '--pack-destination', out], { cwd: dir });
  const [info] = JSON.parse(json);
  return { file: info.filename, files: info.files.map((f) => f.path) };
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const { version } = args;
  const manifest = readJson(path.join(NODE_DIR, 'package.json'));
  if (manifest.version !== version) {
    fail(`node/package.json has version ${manifest.version}, the workspace ${version}: make them agree`);
  }
  if (!fs.existsSync(args.notices)) fail(`${args.notices} is missing (cargo-about makes it)`);
  const napi = manifest.napi || {};
  const targets = napi.targets || [];
  if (targets.length === 0) fail('node/package.json lists no napi.targets');
  // Published as napi.packageName; the repository's name stays what its tests import.
  const published = napi.packageName || manifest.name;

  fs.rmSync(args.stage, { recursive: true, force: true });
  fs.mkdirSync(args.stage, { recursive: true });
  fs.mkdirSync(args.out, { recursive: true });

  // One package per platform.
  const optional = {};
  for (const target of targets) {
    const platform = PLATFORMS[target];
    if (!platform) fail(`no napi-rs platform name known for ${target}: add it to PLATFORMS`);
    const src = path.join(NODE_DIR, 'npm', platform);
    if (!fs.existsSync(path.join(src, 'package.json'))) fail(`node/npm/${platform}/package.json is missing`);
    const binary = args.binary[platform];
    if (!binary || !fs.existsSync(binary)) fail(`no binary for ${platform}: pass --binary ${platform}=FILE`);
    const pkg = readJson(path.join(src, 'package.json'));
    const name = `${published}-${platform}`;
    const file = `${napi.binaryName}.${platform}.node`;
    if (pkg.name !== name) fail(`node/npm/${platform}/package.json is named ${pkg.name}, not ${name}`);
    if (pkg.version !== version) fail(`node/npm/${platform}/package.json has version ${pkg.version}, not ${version}`);
    if (pkg.main !== file) fail(`node/npm/${platform}/package.json: main must be ${file}`);

    const dir = path.join(args.stage, platform);
    copy(src, dir);
    fs.copyFileSync(binary, path.join(dir, file));
    fs.chmodSync(path.join(dir, file), 0o755);
    // The keylock command, which the main package's bin/keylock.js runs.
    const program = args.program[platform];
    if (!program || !fs.existsSync(program)) fail(`no keylock program for ${platform}: pass --program ${platform}=FILE`);
    fs.copyFileSync(program, path.join(dir, 'keylock'));
    fs.chmodSync(path.join(dir, 'keylock'), 0o755);
    addLicenses(dir, args.notices, pkg.files, `node/npm/${platform}/package.json`);
    const packed = pack(dir, args.out);
    for (const need of [file, 'keylock', ...LICENSE_FILES, NOTICES_FILE]) {
      if (!packed.files.includes(need)) fail(`${packed.file} lacks ${need}`);
    }
    optional[name] = version;
    console.log(`stage-node: ${packed.file} (${target})`);
  }
  for (const extra of Object.keys(args.binary)) {
    if (!(`${published}-${extra}` in optional)) {
      fail(`a binary for ${extra} was given, but napi.targets does not list its target`);
    }
  }

  // The main package: the JavaScript, and the sources for a build on other platforms.
  const dir = path.join(args.stage, 'main');
  fs.mkdirSync(dir);
  const fromCrates = new Set(['Cargo.toml', 'Cargo.lock', 'build.rs', 'src/', 'vendor/']);
  const fromRoot = new Set([...LICENSE_FILES, NOTICES_FILE]);
  for (const entry of [...manifest.files, 'README.md']) {
    if (!fromCrates.has(entry) && !fromRoot.has(entry)) copy(path.join(NODE_DIR, entry), path.join(dir, entry));
  }
  addLicenses(dir, args.notices, manifest.files, 'node/package.json');
  const unpacked = path.join(args.stage, 'crates');
  const nodeCrate = unpackCrate(args.crates, 'keylock-node', version, unpacked);
  const coreCrate = unpackCrate(args.crates, 'keylock-core', version, unpacked);
  for (const entry of ['Cargo.lock', 'build.rs', 'src']) copy(path.join(nodeCrate, entry), path.join(dir, entry));
  const vendored = path.join(dir, 'vendor', 'keylock-core');
  fs.mkdirSync(vendored, { recursive: true });
  for (const entry of fs.readdirSync(coreCrate)) {
    if (!['Cargo.toml.orig', '.cargo_vcs_info.json', 'Cargo.lock'].includes(entry)) {
      copy(path.join(coreCrate, entry), path.join(vendored, entry));
    }
  }
  // cargo package points keylock-core at the registry; the package builds the copy it carries,
  // as a workspace of its own (so a cargo workspace around node_modules is not mistaken for it).
  const cargoToml = fs.readFileSync(path.join(nodeCrate, 'Cargo.toml'), 'utf8');
  fs.writeFileSync(
    path.join(dir, 'Cargo.toml'),
    `${cargoToml}\n# Added by make dist: this package is its own workspace, and builds the keylock-core it\n` +
      '# carries in vendor/.\n[workspace]\n\n[patch.crates-io]\nkeylock-core = { path = "vendor/keylock-core" }\n',
  );
  // The lock file cargo package wrote pins every dependency; this turns its keylock-core entry
  // into the vendored path and leaves the rest as it was. Then it must hold as it is.
  const cargo = process.env.CARGO || 'cargo';
  const manifestPath = path.join(dir, 'Cargo.toml');
  run(cargo, ['metadata', '--quiet', '--format-version', '1', '--manifest-path', manifestPath]);
  run(cargo, ['metadata', '--quiet', '--locked', '--format-version', '1', '--manifest-path', manifestPath]);
  fs.rmSync(path.join(dir, 'target'), { recursive: true, force: true });

  const pkg = { ...manifest, name: published, optionalDependencies: optional };
  delete pkg.private;
  writeJson(path.join(dir, 'package.json'), pkg);
  const packed = pack(dir, args.out);
  for (const need of [
    'package.json',
    'index.js',
    'lib/pools.js',
    'lib/web-locks.js',
    'binding.js',
    'bin/keylock.js',
    'install.js',
    'Cargo.toml',
    'vendor/keylock-core/src/lib.rs',
    ...LICENSE_FILES,
    NOTICES_FILE,
  ]) {
    if (!packed.files.includes(need)) fail(`${packed.file} lacks ${need}`);
  }
  if (packed.files.some((f) => f.endsWith('.node'))) fail(`${packed.file} carries a binary`);
  console.log(`stage-node: ${packed.file} (optionalDependencies: ${Object.keys(optional).join(', ')})`);
}

main();

#!/usr/bin/env python3
"""Checks that every crate builds with the Rust it declares (its `rust-version`).

Reads the workspace's crates from `cargo metadata`, groups them by rust-version, installs each
of those toolchains with rustup (minimal profile; a no-op once installed; a warning, not a
failure, where none can be downloaded) and runs
`cargo +VERSION check --locked --lib --bins` on the crates that declare it, in a target
directory of its own. A crate that uses something newer than it declares fails here. The
rust-version is what a user's build of the crate needs, so the check covers what a user builds
(libraries and programs); the tests and benchmarks, and their dev-dependencies, are built with
the current toolchain by every other suite.

Usage: msrv.py CARGO TARGET_DIR
"""

import collections
import json
import subprocess
import sys


def main() -> int:
    cargo, target_dir = sys.argv[1], sys.argv[2]
    meta = json.loads(
        subprocess.run(
            [cargo, "metadata", "--locked", "--no-deps", "--format-version", "1"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    by_version = collections.defaultdict(list)
    for package in meta["packages"]:
        version = package.get("rust_version")
        if not version:
            print(f"msrv: {package['name']} declares no rust-version", file=sys.stderr)
            return 1
        by_version[version].append(package["name"])
    for version, crates in sorted(by_version.items()):
        print(f"msrv: Rust {version}: {', '.join(sorted(crates))}", flush=True)
        installed = subprocess.run(
            ["rustup", "toolchain", "install", "--profile", "minimal", "--no-self-update", version],
        )
        if installed.returncode != 0:
            # A machine that cannot download toolchains (offline CI) cannot run this check; say
            # so loudly rather than fail every build for a missing download.
            print(
                f"msrv: WARNING: Rust {version} could not be installed, so "
                f"{', '.join(sorted(crates))} were NOT checked against it",
                file=sys.stderr,
            )
            continue
        packages = [arg for name in sorted(crates) for arg in ("-p", name)]
        subprocess.run(
            [
                cargo,
                f"+{version}",
                "check",
                "--locked",
                "--lib",
                "--bins",
                "--quiet",
                "--target-dir",
                f"{target_dir}/msrv-{version}",
                *packages,
            ],
            check=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

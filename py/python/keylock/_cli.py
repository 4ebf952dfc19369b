"""The `keylock` command for operators: who holds and who waits on the keys of a shm:,
redis:// or postgres:// scope, and force-unlock (`keylock --help`).

The wheel carries the program itself (keylock/_bin/keylock, the same one the C tarball and the
npm package ship); this console script replaces itself with it, so that it owns the terminal and
its signals as it would if run directly. An install built from the sdist has no program.
"""

import os
import sys

_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "keylock")


def main() -> None:
    """Run the keylock command with this process's arguments; never returns."""
    if not os.access(_PROGRAM, os.X_OK):
        sys.stderr.write(
            "keylock: this install of keylock-py has no keylock command (it was built from "
            "source, and only the prebuilt wheels carry it); the C release tarball has it in "
            "bin/, or build it with `cargo build --release -p keylock-cli`\n"
        )
        sys.exit(7)
    os.execv(_PROGRAM, [_PROGRAM, *sys.argv[1:]])

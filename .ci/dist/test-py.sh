# The Python wheel and sdist in dist/: the wheel meets manylinux_2_17 (auditwheel), installs
# into a fresh venv with no Rust on PATH and no index (so nothing can be built), imports, locks
# and runs both bank demos; the sdist builds a working wheel from source, as pip does it. The
# wheel (in .dist-info/licenses/), the sdist and the wheel built from it carry the license texts
# and the third-party notices.
source "$(dirname "$0")/common.sh"

wheel=$(dist_file "keylock_py-$KEYLOCK_VERSION-cp310-abi3-manylinux*_x86_64.whl")
sdist=$(dist_file "keylock_py-$KEYLOCK_VERSION.tar.gz")
[[ $wheel == *manylinux_2_17_x86_64* ]] || fail "$(basename "$wheel") is not tagged manylinux_2_17"

# auditwheel, the tool PyPI's manylinux rules are written for, must agree with the tag.
report=$("$VENV/bin/auditwheel" show "$wheel" | tr -s ' \n' ' ')
say "auditwheel: $report"
grep -q 'is consistent with the following platform tag: "manylinux_2_17_x86_64"' <<<"$report" ||
	fail "auditwheel does not find $(basename "$wheel") consistent with manylinux_2_17_x86_64"
mkdir "$WORK/unzipped"
python3 -m zipfile -e "$wheel" "$WORK/unzipped"
check_glibc "$WORK/unzipped/keylock/_keylock.abi3.so"
check_glibc "$WORK/unzipped/keylock/_bin/keylock"
LINKED=(parking_lot lock_api pyo3 redis ring)
check_licenses "$WORK/unzipped/keylock_py-$KEYLOCK_VERSION.dist-info/licenses" "$(basename "$wheel")" "${LINKED[@]}"
mkdir "$WORK/sdist-unpacked"
tar -xzf "$sdist" -C "$WORK/sdist-unpacked"
# Beside the sdist's PKG-INFO, where its License-File fields point.
check_licenses "$WORK/sdist-unpacked/keylock_py-$KEYLOCK_VERSION" "$(basename "$sdist")" "${LINKED[@]}"

# The smoke test, run from a folder outside the repository so that only the installed package
# can be imported.
cat >"$WORK/smoke.py" <<'PY'
import asyncio, os, sys, threading
import keylock

want, site = sys.argv[1], sys.argv[2]
assert keylock.__version__ == want, (keylock.__version__, want)
assert os.path.realpath(keylock.__file__).startswith(os.path.realpath(site)), keylock.__file__
pool = keylock.KeyPool()
with pool.lock("user:42") as held:
    assert held and not pool.lock("user:42").acquire(blocking=False)
    other = pool.lock("user:7")
    assert other.acquire(timeout=1) and other.fence is not None
    other.release()
with pool.lock_many(["acct:1", "acct:2"]):
    pass
striped = keylock.StripedLock(64)
rw = keylock.RwLock()
with rw.read(), striped.lock(b"k"):
    pass

async def main():
    async with pool.lock("user:42", timeout=1.0):
        t = threading.Thread(target=lambda: pool.lock("user:42").acquire(timeout=0.01))
        t.start()
        t.join()

asyncio.run(main())
print(f"keylock {keylock.__version__} from {keylock.__file__}: locked")
PY

install_and_run() { # venv-folder label
	local venv=$1 site
	site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	(cd "$WORK" && "$venv/bin/python" smoke.py "$KEYLOCK_VERSION" "$site")
	(cd "$WORK" && "$venv/bin/python" "$ROOT/examples/python/bank.py" --seconds 0.3)
	(cd "$WORK" && "$venv/bin/python" "$ROOT/examples/python/bank_async.py" --seconds 0.3)
}

# The sdist first, while cargo is on PATH: pip builds it in an isolated environment with the
# maturin that pyproject.toml asks for, as a user without a wheel for their platform would.
# Its cargo build goes to the workspace's target folder, where `make` has already built the same
# dependencies in release mode (build-py, build-ffi), so only what differs is compiled: the sdist's
# own crates (keylock-py and the keylock-core it carries are other packages to cargo, from their
# unpacked folder, so they are always built from the sdist's sources) and the rest of what
# fingerprints show changed (pyo3's crates, for this venv's interpreter). Like build-py, it leaves
# its library in target/release/; build-py rebuilds over it whenever py/ changes.
say "building $(basename "$sdist") from source"
python3 -m venv "$WORK/sdist-venv"
CARGO_TARGET_DIR="$TARGET_DIR" "$WORK/sdist-venv/bin/pip" wheel --quiet --no-deps \
	-w "$WORK/sdist-wheel" "$sdist"
"$WORK/sdist-venv/bin/pip" install --quiet --no-index "$WORK"/sdist-wheel/*.whl
mkdir "$WORK/sdist-wheel-unzipped"
python3 -m zipfile -e "$WORK"/sdist-wheel/*.whl "$WORK/sdist-wheel-unzipped"
check_licenses "$WORK/sdist-wheel-unzipped/keylock_py-$KEYLOCK_VERSION.dist-info/licenses" \
	"the wheel built from $(basename "$sdist")" "${LINKED[@]}"
install_and_run "$WORK/sdist-venv"
# Built from source, the package has no program to run, and its `keylock` says so.
rc=0
out=$("$WORK/sdist-venv/bin/keylock" --version 2>&1) || rc=$?
[[ $rc == 7 && $out == *"has no keylock command"* ]] ||
	fail "keylock from the sdist's install: exit $rc, $out"

no_rust
python3 -m venv "$WORK/venv"
# --no-index: nothing but dist/; --only-binary: a wheel or nothing, never a build.
"$WORK/venv/bin/pip" install --quiet --no-index --only-binary=:all: --find-links "$DIST_DIR" \
	"keylock-py==$KEYLOCK_VERSION"
install_and_run "$WORK/venv"

# The keylock command the wheel installs on PATH, looking at a region this Python holds a key in.
region="keylock-dist-py-$$"
check_command_on_holder "$WORK/venv/bin/keylock" "$region" Python "$WORK/venv/bin/python" -c '
import sys, keylock
pool = keylock.KeyPool.open("shm:" + sys.argv[1])
with pool.lock("dist:1"):
    print("held", flush=True)
    sys.stdin.read()
' "$region"
say "ok: $(basename "$wheel") installs and runs without Rust, with its keylock command; the sdist builds"

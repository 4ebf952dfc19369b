# The C tarball in dist/: its layout (versioned .so with SONAME, SONAME and dev links, .a,
# headers, keylock.pc, the license texts and the third-party notices), then, unpacked and moved elsewhere (keylock.pc must follow), with no Rust
# on PATH: C and C++ programs built with pkg-config's flags only, run, shared and static.
source "$(dirname "$0")/common.sh"

name="keylock-$KEYLOCK_VERSION-linux-x86_64"
tarball=$(dist_file "$name.tar.gz")
so="libkeylock.so.$KEYLOCK_VERSION"

listing=$(tar -tvzf "$tarball")
for want in "$name/bin/keylock" "$name/lib/$so" "$name/lib/libkeylock.so.$KEYLOCK_MAJOR -> $so" \
	"$name/lib/libkeylock.so -> libkeylock.so.$KEYLOCK_MAJOR" "$name/lib/libkeylock.a" \
	"$name/include/keylock.h" "$name/include/keylock.hpp" "$name/lib/pkgconfig/keylock.pc" \
	"$name/README.md" "$name/LICENSE-MIT" "$name/LICENSE-APACHE" "$name/THIRD-PARTY-NOTICES"; do
	grep -qF -- " $want" <<<"$listing" || fail "$(basename "$tarball") lacks $want"
done
if grep -v " $name/" <<<"$listing"; then fail "entries outside $name/"; fi

mkdir "$WORK/unpacked" "$WORK/elsewhere"
tar -xzf "$tarball" -C "$WORK/unpacked"
mv "$WORK/unpacked/$name" "$WORK/elsewhere/"
prefix="$WORK/elsewhere/$name"
lib="$prefix/lib"
check_licenses "$prefix" "$(basename "$tarball")" parking_lot lock_api redis ring

readelf -d "$lib/$so" | grep -q "SONAME.*\[libkeylock\.so\.$KEYLOCK_MAJOR\]" || fail "$so has no SONAME libkeylock.so.$KEYLOCK_MAJOR"
check_glibc "$lib/$so"
check_glibc "$prefix/bin/keylock"

no_rust

export PKG_CONFIG_PATH="$lib/pkgconfig"
[[ $(pkg-config --modversion keylock) == "$KEYLOCK_VERSION" ]] || fail "keylock.pc's version is not $KEYLOCK_VERSION"
[[ $(realpath "$(pkg-config --variable=prefix keylock)") == "$(realpath "$prefix")" ]] ||
	fail "keylock.pc's prefix $(pkg-config --variable=prefix keylock) is not where it was moved to"
libdir=$(pkg-config --variable=libdir keylock)

cat >"$WORK/version.c" <<'C'
#include <keylock.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    if (strcmp(keylock_version(), KEYLOCK_VERSION) != 0) {
        fprintf(stderr, "library %s, header %s\n", keylock_version(), KEYLOCK_VERSION);
        return 1;
    }
    keylock_pool *pool = keylock_pool_new();
    keylock_acquisition acq;
    if (pool == NULL || keylock_pool_lock(pool, (const uint8_t *)"user:42", 7, &acq) != KEYLOCK_OK) return 1;
    if (keylock_pool_release(pool, &acq) != KEYLOCK_OK) return 1;
    keylock_pool_free(pool);
    printf("keylock %s: locked\n", keylock_version());
    return 0;
}
C

flags=$(pkg-config --cflags --libs keylock)
cc -std=c99 -Wall -Wextra -Werror "$WORK/version.c" -o "$WORK/version" $flags
cc -std=c11 -O2 "$ROOT/examples/c/bank.c" -o "$WORK/bank" $flags -pthread
c++ -std=c++17 -O2 "$ROOT/examples/cpp/bank.cpp" -o "$WORK/bank_cpp" $flags -pthread
readelf -d "$WORK/version" | grep -q "NEEDED.*\[libkeylock\.so\.$KEYLOCK_MAJOR\]" || fail "version does not load libkeylock.so.$KEYLOCK_MAJOR"
LD_LIBRARY_PATH="$libdir" "$WORK/version"
LD_LIBRARY_PATH="$libdir" timeout 60 "$WORK/bank" 4 64 100
LD_LIBRARY_PATH="$libdir" timeout 60 "$WORK/bank_cpp" 4 64 100

static="$(pkg-config --cflags keylock) $(pkg-config --static --libs keylock | sed 's/-lkeylock/-l:libkeylock.a/')"
cc -std=c11 -O2 "$ROOT/examples/c/bank.c" -o "$WORK/bank_static" $static -pthread
if readelf -d "$WORK/bank_static" | grep -q 'NEEDED.*libkeylock'; then fail "the static build loads libkeylock"; fi
timeout 60 "$WORK/bank_static" 4 64 100
# bin/keylock, looking at a region a C program holds a key in (until its stdin closes).
cat >"$WORK/holder.c" <<'C'
#include <keylock.h>
#include <stdio.h>

int main(int argc, char **argv) {
    keylock_pool *pool;
    keylock_acquisition acq;
    if (argc != 2 || keylock_pool_open(argv[1], NULL, &pool) != KEYLOCK_OK) return 1;
    if (keylock_pool_lock(pool, (const uint8_t *)"dist:1", 6, &acq) != KEYLOCK_OK) return 1;
    printf("held\n");
    fflush(stdout);
    while (getchar() != EOF) {}
    return keylock_pool_release(pool, &acq) == KEYLOCK_OK ? 0 : 1;
}
C
cc -std=c99 -Wall -Wextra -Werror "$WORK/holder.c" -o "$WORK/holder" $flags
region="keylock-dist-c-$$"
check_command_on_holder "$prefix/bin/keylock" "$region" C \
	env LD_LIBRARY_PATH="$libdir" "$WORK/holder" "shm:$region"
say "ok: $(basename "$tarball") builds C and C++ programs with pkg-config alone, wherever it is unpacked, and its bin/keylock works"

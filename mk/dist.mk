# Release artifacts: what a user installs without a Rust toolchain, all under dist/.
#
#   make dist        everything below
#   make dist-py     keylock_py-V-cp310-abi3-manylinux_2_17_x86_64.whl (maturin, zig) and the sdist
#   make dist-node   npm pack tarballs, napi-rs layout: @keylock/keylock (JavaScript, plus the
#                    sources for a build on platforms without a binary) and
#                    @keylock/keylock-linux-x64-gnu (the binary)
#   make dist-c      keylock-V-linux-x86_64.tar.gz: bin/keylock (the command), lib/
#                    (libkeylock.so.V, its SONAME and dev links, libkeylock.a), include/,
#                    lib/pkgconfig/keylock.pc (relocatable), README.md and the license files
#   make dist-rust   keylock-core-V.crate (cargo package --locked, which builds it)
#   make test-dist   installs each from dist/ into a fresh venv, npm project and C build, with
#                    no cargo or rustc on PATH (part of make test)
#
# Every artifact carries LICENSE-MIT, LICENSE-APACHE and THIRD-PARTY-NOTICES: the licenses of the
# third-party crates it builds from, which its binaries link statically. A pinned cargo-about
# writes the notices on each make dist (dist-notices), one per artifact's crate, from the crates'
# own license files in cargo's registry (.ci/dist/about.toml, .ci/dist/notices.hbs).
#
# Every binary is linked by zig against glibc 2.17's symbols (cargo-zigbuild; maturin --zig), so
# it loads on any x86-64 Linux with glibc 2.17 or later (manylinux2014), whatever glibc the
# building machine has. V is the workspace version, [workspace.package] in Cargo.toml: the
# wheel, the crate, the .so and keylock_version() take it from cargo, and stage-node.js and the
# tests fail when a package.json under node/ says otherwise.

.PHONY: dist dist-py dist-node dist-c dist-rust dist-cli dist-tools dist-notices test-dist

TEST_TARGETS += test-dist

DIST_DIR := $(ROOT)/dist
DIST_STAGE := $(ROOT)/build/dist
DIST_VERSION := $(KEYLOCK_VERSION)
DIST_MAJOR := $(KEYLOCK_MAJOR)
$(if $(DIST_VERSION),,$(error mk/dist.mk: no workspace version (KEYLOCK_VERSION, from mk/c.mk)))

# The prebuilt platform, and the oldest glibc its binaries need.
DIST_TRIPLE := x86_64-unknown-linux-gnu
DIST_GLIBC := 2.17
DIST_BIN := $(TARGET_DIR)/$(DIST_TRIPLE)/dist
# zig (the ziglang wheel) and cargo-zigbuild come from the venv, pinned in requirements-dist.txt.
# --cfg keylock_glibc_compat: the core defines what Rust's standard library needs from a newer
# glibc than 2.17 (core/src/glibc_compat.rs).
DIST_ENV := PATH="$(VENV)/bin:$$PATH" RUSTFLAGS="--cfg keylock_glibc_compat"
ZIGBUILD := $(DIST_ENV) $(CARGO) zigbuild --locked --profile dist --target $(DIST_TRIPLE).$(DIST_GLIBC)

C_DIST_NAME := keylock-$(DIST_VERSION)-linux-x86_64
C_DIST_STAGE := $(DIST_STAGE)/c/$(C_DIST_NAME)
# Tarball entries get the last commit's time, so the same commit packs the same bytes.
DIST_EPOCH := $(shell git -C $(ROOT) log -1 --format=%ct 2>/dev/null || echo 0)

DIST_TOOLS_STAMP := $(VENV)/.dist-stamp
dist-tools: $(DIST_TOOLS_STAMP)
$(DIST_TOOLS_STAMP): requirements-dist.txt $(VENV)/.stamp
	$(PY) -m pip install --quiet -r requirements-dist.txt
	touch $@

dist: dist-py dist-node dist-c dist-rust
	@echo "dist: $(DIST_DIR)"; ls -1 $(DIST_DIR)

# ---- third-party notices -----------------------------------------------------------------------

# cargo-about, pinned and built as cbindgen is (TOOL_INSTALL in rust.mk), into the same folder.
CARGO_ABOUT_VERSION := 0.8.4
CARGO_ABOUT_ROOT := $(ROOT)/build/tools
CARGO_ABOUT := $(CARGO_ABOUT_ROOT)/bin/cargo-about
CARGO_ABOUT_STAMP := $(CARGO_ABOUT_ROOT)/.cargo-about-$(CARGO_ABOUT_VERSION)
$(CARGO_ABOUT_STAMP):
	$(TOOL_INSTALL) --version $(CARGO_ABOUT_VERSION) --root $(CARGO_ABOUT_ROOT) cargo-about
	touch $@

# Where each artifact's notices go: the crate's and the wheel's into their crate folders (cargo
# package and maturin take only files from there; both are ignored by git), the npm packages' and
# the C tarball's under build/dist/.
NOTICES := THIRD-PARTY-NOTICES
CORE_NOTICES := $(ROOT)/core/$(NOTICES)
PY_NOTICES := $(ROOT)/py/$(NOTICES)
NODE_NOTICES := $(DIST_STAGE)/notices/node/$(NOTICES)
C_NOTICES := $(DIST_STAGE)/notices/c/$(NOTICES)
# The keylock command's (core/cli), which every package carries beside its library: its notices
# follow the library's in the wheel's, the npm packages' and the C tarball's.
CLI_NOTICES := $(DIST_STAGE)/notices/cli/$(NOTICES)

# $(call third_party_notices,Cargo.toml,output[,cargo-about options]): the notices for the crates
# that one package builds from, with the features its artifact is built with. --frozen: from
# Cargo.lock as it is, and from local files only (the crates' sources, which dist-notices fetches
# first), so that the same tree makes the same notices. --fail: a crate whose license cannot be
# determined, or is not accepted, fails the build. The output is written whole or not at all.
define third_party_notices
	@mkdir -p $(dir $(2))
	$(CARGO_ABOUT) generate --frozen --fail -c .ci/dist/about.toml -m $(1) $(3) -o $(2).tmp \
		.ci/dist/notices.hbs
	mv $(2).tmp $(2)
endef

# The fetch is for every platform, not only DIST_TRIPLE: cargo-about reads `cargo metadata`, which
# needs the sources of every package in Cargo.lock (tokio-postgres, under keylock-core's postgres
# feature, brings in crates only wasm targets build, such as bumpalo) and cannot download them
# itself under --frozen.
dist-notices: $(CARGO_ABOUT_STAMP)
	$(CARGO) fetch --locked --quiet
	$(call third_party_notices,core/Cargo.toml,$(CORE_NOTICES),--all-features)
	$(call third_party_notices,py/Cargo.toml,$(PY_NOTICES))
	$(call third_party_notices,node/Cargo.toml,$(NODE_NOTICES))
	$(call third_party_notices,ffi-c/Cargo.toml,$(C_NOTICES))
	$(call third_party_notices,core/cli/Cargo.toml,$(CLI_NOTICES))
	for n in $(PY_NOTICES) $(NODE_NOTICES) $(C_NOTICES); do \
		printf '\n\n%s\n\n' "The keylock command (the program this package carries) is built from these:" >>"$$n"; \
		cat $(CLI_NOTICES) >>"$$n"; \
	done

# The keylock command, for every package to carry (a static Rust program, glibc 2.17 as the rest).
dist-cli: $(DIST_TOOLS_STAMP)
	$(ZIGBUILD) -p keylock-cli

# ---- Python ------------------------------------------------------------------------------------

# --auditwheel check: the build fails unless the wheel meets the policy it is tagged with. The
# wheel builds in a target folder of its own: maturin's zig build configures cargo differently
# from cargo-zigbuild's (cargo reports "config settings changed"), so in one folder each would
# rebuild every dependency the other built, on every make dist.
#
# The wheel carries the keylock command as keylock/_bin/keylock, which its console script
# `keylock` (keylock._cli) runs; it is put there for the wheel's build only, so the sdist and a
# development install have none (their `keylock` says so).
PY_CLI := py/python/keylock/_bin/keylock
dist-py: $(DIST_TOOLS_STAMP) dist-notices dist-cli
	@mkdir -p $(DIST_DIR)
	rm -f $(DIST_DIR)/keylock_py-*
	install -D -m 0755 $(DIST_BIN)/keylock $(PY_CLI)
	$(DIST_ENV) $(VENV)/bin/maturin build --locked --quiet --profile dist --target $(DIST_TRIPLE) \
		--zig --compatibility manylinux2014 --auditwheel check -m py/Cargo.toml -o $(DIST_DIR) \
		--target-dir $(TARGET_DIR)/dist-wheel || { rm -rf $(dir $(PY_CLI)); exit 1; }
	rm -rf $(dir $(PY_CLI))
	$(DIST_ENV) $(VENV)/bin/maturin sdist -m py/Cargo.toml -o $(DIST_DIR)

# ---- Node.js -----------------------------------------------------------------------------------

# cargo package makes the sources the main package carries for its build from source (the
# keylock-node crate, and keylock-core for vendor/); it builds nothing, and packs into a folder of
# its own so that it never races dist-rust.
dist-node: $(DIST_TOOLS_STAMP) dist-notices dist-cli
	@mkdir -p $(DIST_DIR)
	$(ZIGBUILD) -p keylock-node
	$(CARGO) package --locked --allow-dirty --no-verify --quiet -p keylock-core -p keylock-node \
		--target-dir $(DIST_STAGE)/cargo
	rm -f $(DIST_DIR)/keylock-keylock-*.tgz
	node .ci/dist/stage-node.js --version $(DIST_VERSION) --crates $(DIST_STAGE)/cargo/package \
		--notices $(NODE_NOTICES) --stage $(DIST_STAGE)/node --out $(DIST_DIR) \
		--binary linux-x64-gnu=$(DIST_BIN)/libkeylock_node.so --program linux-x64-gnu=$(DIST_BIN)/keylock

# ---- C -----------------------------------------------------------------------------------------

# The layout of `make install` (c_install in mk/c.mk), from the dist build; then a keylock.pc that
# finds its prefix from where it lies (${pcfiledir}, which pkg-config and pkgconf both know), and
# debug sections stripped from the archive (the .so is stripped by the dist profile).
dist-c: FFI_LIB := $(DIST_BIN)/libkeylock
dist-c: DESTDIR :=
dist-c: $(DIST_TOOLS_STAMP) dist-notices dist-cli
	@mkdir -p $(DIST_DIR)
	$(ZIGBUILD) -p keylock-ffi
	rm -rf $(DIST_STAGE)/c && mkdir -p $(C_DIST_STAGE)
	install -D -m 0755 $(DIST_BIN)/keylock $(C_DIST_STAGE)/bin/keylock
	$(call c_install,$(C_DIST_STAGE),$(C_DIST_STAGE)/lib,$(C_DIST_STAGE)/include,$(C_DIST_STAGE)/lib/pkgconfig)
	sed -e 's|@PREFIX@|$${pcfiledir}/../..|' -e 's|@LIBDIR@|$${prefix}/lib|' \
		-e 's|@INCLUDEDIR@|$${prefix}/include|' -e 's|@VERSION@|$(DIST_VERSION)|' \
		ffi-c/keylock.pc.in > $(C_DIST_STAGE)/lib/pkgconfig/keylock.pc
	strip --strip-debug $(C_DIST_STAGE)/lib/libkeylock.a
	install -m 0644 ffi-c/README.dist.md $(C_DIST_STAGE)/README.md
	install -m 0644 LICENSE-MIT LICENSE-APACHE $(C_NOTICES) $(C_DIST_STAGE)/
	rm -f $(DIST_DIR)/keylock-*-linux-x86_64.tar.gz
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(DIST_EPOCH) \
		-C $(DIST_STAGE)/c -cf - $(C_DIST_NAME) | gzip -9n > $(DIST_DIR)/$(C_DIST_NAME).tar.gz

# ---- Rust --------------------------------------------------------------------------------------

# --allow-dirty: make dist and make test run in a working tree with edits; `cargo publish`
# checks for a clean tree itself. cargo package verifies the crate: a `cargo build` of it,
# unpacked, with its own lock file. make test-dist skips that (DIST_PACKAGE_VERIFY, set below),
# because test-rust.sh builds the same unpacked crate from dist/ on its own, with its Cargo.lock,
# and runs its doc tests: the verification would be that build done twice.
DIST_PACKAGE_VERIFY ?=
dist-rust: dist-notices
	@mkdir -p $(DIST_DIR)
	$(CARGO) package --locked --allow-dirty $(DIST_PACKAGE_VERIFY) -p keylock-core
	rm -f $(DIST_DIR)/keylock-core-*.crate
	cp $(TARGET_DIR)/package/keylock-core-$(DIST_VERSION).crate $(DIST_DIR)/

# ---- tests -------------------------------------------------------------------------------------

# Each install runs in a fresh temporary venv / npm project / prefix with every folder that
# holds cargo or rustc taken off PATH (and fails if either is still found), so an install that
# needs a compiler fails. The from-source paths are built separately, with cargo, into target/
# itself, so that the dependencies `make` and test-rust already built there are not compiled
# again: the sdist and the npm fallback in release mode (the npm package's manifest has no
# [profile] section, so the workspace's is given through the environment), the crate's doc tests
# in the test build. keylock's own crates are other packages to cargo there, from their unpacked
# folders, and are always compiled from their sources.
DIST_TEST_ENV := KEYLOCK_VERSION=$(DIST_VERSION) KEYLOCK_MAJOR=$(DIST_MAJOR) DIST_DIR=$(DIST_DIR) \
	DIST_GLIBC=$(DIST_GLIBC) ROOT=$(ROOT) VENV=$(VENV) TARGET_DIR=$(TARGET_DIR)
# (A target-specific variable: it holds for dist-rust when test-dist makes it, not for make dist.)
# PREBUILT=1: make test has built dist/ already (prebuild-dist, in the background).
test-dist: DIST_PACKAGE_VERIFY := --no-verify
test-dist: $(if $(PREBUILT),,dist)
	$(DIST_TEST_ENV) bash .ci/dist/test-py.sh
	$(DIST_TEST_ENV) bash .ci/dist/test-node.sh
	$(DIST_TEST_ENV) bash .ci/dist/test-c.sh
	$(DIST_TEST_ENV) bash .ci/dist/test-rust.sh

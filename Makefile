# keylock: the one entry point for people and CI.
#
#   make            build everything in release mode and run every demo
#   make test       make lint, then every test suite (what CI runs)
#   make bench      run every benchmark and regenerate BENCHMARKS.md
#   make fmt / lint formatting (and its check), clippy (-D warnings), declared rust-versions,
#                   no import cycles between modules, the core's API docs (every scope, no
#                   warning)
#   make loom       exhaustive loom models; make tsan: tests under ThreadSanitizer
#   make dist       the release packages under dist/: wheel and sdist, npm tarballs, C tarball, crate
#
# Each front end adds its own targets from mk/<name>.mk by appending to the
# *_TARGETS lists below, so this file stays small.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := all
MAKEFLAGS += --no-print-directory

CARGO ?= cargo
ROOT := $(CURDIR)
# A project-local virtual environment for every Python tool (maturin, pytest, matplotlib).
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
# Release build of the whole workspace, shared by every front end.
TARGET_DIR := $(ROOT)/target

BUILD_TARGETS := build-rust
DEMO_TARGETS := demo-rust
TEST_TARGETS := test-rust
BENCH_TARGETS := bench-rust
LINT_TARGETS := lint-rust
FMT_TARGETS := fmt-rust
TSAN_TARGETS := tsan-rust

include mk/rust.mk
include mk/c.mk
include mk/py.mk
include mk/node.mk
include mk/shm.mk
include mk/redis.mk
# Debian's postgresql-15 and pgbouncer for the PostgreSQL scope's tests.
include mk/postgres.mk
# The keylock command for operators (core/cli) and its tests' terminal (tmux).
include mk/cli.mk
# Cross-language process tests of the shm and Redis scopes (after redis.mk: it needs redis-server).
include mk/xlang.mk
include mk/bench.mk
# Release artifacts under dist/ (make dist) and their install tests; it needs mk/c.mk's names.
include mk/dist.mk

# The sanitizer runs fit in the test budget, so `make test` includes them (last).
TEST_TARGETS += tsan

.PHONY: all build demo test bench fmt lint venv tsan
all: build demo
build: $(BUILD_TARGETS)
demo: $(DEMO_TARGETS)
# Formatting and lints first: they fail in seconds, before any long suite runs. Each suite runs
# in turn through .ci/suites.sh, which prints its duration as it ends and a table of them all at
# the end, so the cost of every suite can be seen. Meanwhile, at the lowest priority, the tools
# that test-c and test-dist run, the release packages and the ThreadSanitizer builds compile in
# the background (PREBUILD below; .ci/suites.sh says how), each waited for by the suite that uses
# it: the middle suites leave the two cores idle much of the time.
TEST_PREBUILD := tools:test-c dist:test-dist tsan:tsan
# make test builds what it tests from nothing on CI, and the machine's two cores stay busy from
# its start to its end, so what it saves on compiling is what it saves. No incremental
# compilation: its caches pay off only on a rebuild after an edit. Debug builds keep line tables
# only (backtraces, ThreadSanitizer and valgrind still name each frame's file and line). The
# two cut test-rust's build from scratch (cargo test --no-run) from 124 s to 91 s here.
test: export CARGO_INCREMENTAL := 0
test: export CARGO_PROFILE_DEV_DEBUG := line-tables-only
test:
	@MAKE="$(MAKE)" PREBUILD="$(TEST_PREBUILD)" bash .ci/suites.sh lint $(TEST_TARGETS)
bench: $(BENCH_TARGETS)
lint: $(LINT_TARGETS)
# Under `make lint`, lint-rust's workspace clippy (every crate, every target, default features)
# has already checked the bindings and the PostgreSQL benchmark (all features), so lint-c,
# lint-py, lint-node and lint-postgres's benchmark run skip their own clippy run, which they do
# when made alone; the runs on a subset of the core's features (redis alone, postgres alone) stay.
lint: LINT_CLIPPY_ALONE := @: skipped under make lint, done by lint-rust: \#
fmt: $(FMT_TARGETS)
# The core's and the C ABI's test suites under ThreadSanitizer (nightly toolchain).
tsan: $(TSAN_TARGETS)

# make test's background phases (TEST_PREBUILD). prebuild-tools runs alongside lint, so it needs
# nothing lint sets up; the others start once lint has passed.
.PHONY: prebuild-tools prebuild-dist prebuild-tsan
prebuild-tools: $(CBINDGEN_STAMP) $(CARGO_ABOUT_STAMP)
prebuild-dist: DIST_PACKAGE_VERIFY := --no-verify
prebuild-dist: dist
prebuild-tsan: tsan-build

# The virtual environment; front ends add their packages to requirements-dev.txt.
venv: $(VENV)/.stamp
$(VENV)/.stamp: requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

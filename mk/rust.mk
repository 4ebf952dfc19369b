# Rust: the core crate and the Rust bank demo.

.PHONY: build-rust demo-rust test-rust bench-rust lint-rust fmt-rust msrv cycles loom loom-swap loom-mutants tsan-rust

# How the pinned cargo tools (cbindgen in c.mk, cargo-about in dist.mk) are built: once per clone,
# and for a short build rather than a fast tool, since each runs for seconds: no LTO, no debug
# info, opt-level 1. cargo-about so built took 2.5 min here, against about 6 min as it ships.
TOOL_INSTALL := CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
	CARGO_PROFILE_RELEASE_DEBUG=false $(CARGO) install --locked --force

build-rust:
	$(CARGO) build --locked --release -p keylock-core -p keylock-bank -p keylock-cli

demo-rust: build-rust
	$(TARGET_DIR)/release/keylock-bank

# One build of the core's tests with every scope (features shm, redis and postgres) runs them all:
# the in-process suites, the host scope's, the Redis scope's and the PostgreSQL scope's (which
# start their own redis-server and PostgreSQL clusters), and the doc tests. `make test-shm` and
# `make test-redis` run their parts of the same build. The keylock command's tests (core/cli,
# mk/cli.mk) are in it too: the command builds the core with the same features.
CORE_TEST_FEATURES := --features keylock-core/shm,keylock-core/redis,keylock-core/postgres,keylock-core/metrics
test-rust: redis-server postgres-server tmux
	$(CARGO) test --locked -p keylock-core -p keylock-bank -p keylock-cli $(CORE_TEST_FEATURES)
	$(CARGO) run --locked -q -p keylock-bank -- 8 64 200
	$(MAKE) loom LOOM_MAX_PREEMPTIONS=3
	$(MAKE) loom-swap
	$(MAKE) loom-mutants

# Exhaustive loom models of every algorithm, bounded by preemptions. One test thread: the
# models share a process-wide switch (hand-off or notify), and loom needs determinism.
LOOM_MAX_PREEMPTIONS ?= 4
loom:
	RUSTFLAGS="--cfg keylock_loom" LOOM_MAX_PREEMPTIONS=$(LOOM_MAX_PREEMPTIONS) \
		$(CARGO) test --locked --release -p keylock-core --test loom --target-dir $(TARGET_DIR)/loom \
		-- --test-threads=1

# The RwLock's writer must read egress before ingress. Built with the two reads swapped, the
# model must find a reader inside with the writer: this target fails if it does not. The broken
# variants are named by KEYLOCK_LOOM_VARIANT (core/build.rs), which rebuilds keylock-core alone,
# so they share the loom target directory and its dependencies with `make loom`.
LOOM_CARGO := RUSTFLAGS="--cfg keylock_loom" LOOM_MAX_PREEMPTIONS=3 \
	$(CARGO) test --locked --release -p keylock-core --test loom --target-dir $(TARGET_DIR)/loom
loom-swap:
	@if KEYLOCK_LOOM_VARIANT=keylock_swap_rw_order $(LOOM_CARGO) \
		-- --test-threads=1 rw_writer_excludes_readers >$(TARGET_DIR)/loom-swap.log 2>&1; then \
		echo "loom-swap: the swapped RwLock passed its model; the model cannot see the bug" >&2; exit 1; \
	elif grep -q "a reader is inside with the writer" $(TARGET_DIR)/loom-swap.log; then \
		echo "loom-swap: ok, the model catches the swapped egress/ingress order"; \
	else cat $(TARGET_DIR)/loom-swap.log >&2; exit 1; fi

# Two checks must sit in the same compare-and-swap as the change they guard: a release checks
# its acquisition's fence (as the old stripe release did not), and a hand-over to a waiter checks
# that the lock is still free. A semaphore must count a request's units against its permits
# exactly. Each is built broken on purpose (a mutant cfg) and must be caught by its loom models
# ("two holders at once" / "beside" / "more units"): this target fails if any is not.
LOOM_MUTANTS := keylock_mutant_unfenced:stale_release:two.holders.at.once "keylock_mutant_unchecked_grant:hand_over:beside|is_locked" \
	keylock_mutant_overfull:semaphore_units:more.units.inside.than.permits
loom-mutants:
	@for m in $(LOOM_MUTANTS); do \
		cfg=$${m%%:*}; rest=$${m#*:}; filter=$${rest%%:*}; want=$${rest#*:}; \
		log=$(TARGET_DIR)/loom-$$cfg.log; \
		if KEYLOCK_LOOM_VARIANT=$$cfg $(LOOM_CARGO) -- --test-threads=1 $$filter >$$log 2>&1; then \
			echo "loom-mutants: $$cfg passed its models ($$filter); they cannot see the bug" >&2; exit 1; \
		elif grep -Eq "$$want" $$log; then \
			echo "loom-mutants: ok, the $$filter models catch $$cfg"; \
		else cat $$log >&2; exit 1; fi; \
	done

bench-rust:
	$(CARGO) bench --locked -p keylock-core

lint-rust: msrv cycles
	$(CARGO) fmt --all --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --no-deps -p keylock-core --all-features
	for f in $(LONE_FEATURES); do \
		$(CARGO) check --locked -q -p keylock-core --no-default-features --features $$f || exit 1; \
	done

# Each server scope's feature builds on its own, as a dependent that asks for only that one gets
# it: the workspace's builds unify features (its dev-dependencies too), which hides a dependency
# feature that only another scope turns on (postgres alone once lacked futures-util's alloc).
# shm and metrics bring dependencies of their own only.
LONE_FEATURES := redis postgres

# A module imports only from the ones below it, never in a circle: fails on any import cycle
# between the modules (or folders of modules) of each crate, and prints the lines that make it.
CYCLES_DIRS := core/src core/cli/src py/src ffi-c/src node/src
cycles:
	python3 .ci/cycles.py $(CYCLES_DIRS)

# Every crate builds with the rust-version it declares (toolchains installed by rustup).
msrv:
	python3 .ci/msrv.py "$(CARGO)" $(TARGET_DIR)

fmt-rust:
	$(CARGO) fmt --all

# ThreadSanitizer needs the nightly toolchain. Its standard library is not instrumented, so the
# suppressions in .ci/tsan.supp cover exactly the false races that causes (Arc's reference
# counts, deallocation, libtest's result channel) and nothing of keylock's own code. One test
# thread: libtest's own thread hand-off is invisible to TSan otherwise.
TSAN_RUSTFLAGS := -Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer
TSAN_ENV := TSAN_OPTIONS="suppressions=$(ROOT)/.ci/tsan.supp halt_on_error=1" RUSTFLAGS="$(TSAN_RUSTFLAGS)"
TSAN_CARGO := $(TSAN_ENV) $(CARGO) +nightly
TSAN_TARGET := x86_64-unknown-linux-gnu
# The host scope's repair tests stand in for a dead process with a thread that ends while it holds
# a robust mutex; the next locker gets EOWNERDEAD and then owns it. TSan does not model that
# hand-over and reports the new owner's unlock as "unlock of an unlocked mutex". They run
# natively in test-rust; the real deaths are in shm_procs (other processes, also not under TSan).
TSAN_SKIP_DEATHS := --skip shm::repair::tests
# The tests that run on tokio's multi-thread runtime are named tokio_* and skipped here: tokio
# parks its workers and hands its scheduler state between them through std's futex-based Mutex
# and Condvar, which the uninstrumented std hides from TSan, so TSan reports false races inside
# tokio itself (seen: tokio::util::rand::FastRand). The same async paths run under TSan through
# the tests on futures' executor and plain threads; the tokio_* tests run natively in test-rust.
TSAN_SKIP := --skip tokio_ $(TSAN_SKIP_DEATHS)
# One build with the host scope (feature shm) runs the in-process suites and the host scope's
# one-process suite (tsan-shm's, which then reuses it). Not shm_procs: TSan cannot see into
# other processes. Not loom: it is a model, not threads.
TSAN_CORE_TESTS := $(patsubst %,--test %,$(filter-out shm_procs shm_hostile loom,$(basename $(notdir $(wildcard core/tests/*.rs)))))
TSAN_CORE_BUILD := --locked -p keylock-core --features shm --target $(TSAN_TARGET) \
	--target-dir $(TARGET_DIR)/tsan --lib $(TSAN_CORE_TESTS)
tsan-rust:
	KEYLOCK_TSAN=1 $(TSAN_CARGO) test $(TSAN_CORE_BUILD) -- --test-threads=1 $(TSAN_SKIP)

# Everything make tsan compiles, without running it (make test builds it early, in the background).
.PHONY: tsan-build
tsan-build:
	$(TSAN_CARGO) test --no-run $(TSAN_CORE_BUILD)
	$(MAKE) tsan-c-build

# Soak: every language's bank stress at once for SOAK_SECONDS (default 10 minutes), reporting
# transfers, errors and peak memory, and failing if memory grows after warm-up.
SOAK_SECONDS ?= 600
.PHONY: soak
soak: build
	python3 .ci/soak.py $(SOAK_SECONDS) $(ROOT)

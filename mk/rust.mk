# Rust: the core crate and the Rust bank demo.

.PHONY: build-rust demo-rust test-rust bench-rust lint-rust fmt-rust loom

build-rust:
	$(CARGO) build --locked --release -p keylock-core -p keylock-bank

demo-rust: build-rust
	$(TARGET_DIR)/release/keylock-bank

test-rust:
	$(CARGO) test --locked -p keylock-core -p keylock-bank
	$(MAKE) loom LOOM_MAX_PREEMPTIONS=2

# Exhaustive loom models of every algorithm, bounded by preemptions.
LOOM_MAX_PREEMPTIONS ?= 3
loom:
	RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=$(LOOM_MAX_PREEMPTIONS) \
		$(CARGO) test --locked --release -p keylock-core --test loom --target-dir $(TARGET_DIR)/loom

bench-rust:
	$(CARGO) bench --locked -p keylock-core

lint-rust:
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

fmt-rust:
	$(CARGO) fmt --all

# Benchmarks of the core against the alternatives, and the report (BENCHMARKS.md, docs/*.png).
#
#   make bench         every benchmark (this file's targets run last, after the C, Python and
#                      Node ones), then BENCHMARKS.md and the plots from bench/results/*.json
#   make bench-quick   a short run of the core's benchmarks (under 2 minutes), into
#                      build/bench-quick/, to check that nothing regressed; commits nothing
#   make bench-uncontended  only the uncontended criterion suite (bench/results/rust.json)
#   make bench-report  only regenerate BENCHMARKS.md and the plots from the JSON
#   make bench-before-after-bindings  C, Python and Node uncontended lock+release, built from
#                      an earlier revision and from a tree, side by side (not part of make bench)
#   make bench-semaphore  the keyed semaphore against its peers in Rust (a map of tokio
#                      Semaphores, callgrind instructions beside the times), Python (a defaultdict
#                      of BoundedSemaphores) and Node (a Map of async-mutex Semaphores)
#   make bench-metrics  what metrics cost: the uncontended acquire+release before metrics, and
#                      with them off and on (bench/metrics.py, callgrind beside the times)
#   make bench-async-contended  contended async on a current-thread runtime against a map of
#                      tokio mutexes (bench/async_contended.py, callgrind beside the times)

.PHONY: bench-core bench-uncontended bench-report bench-quick bench-before-after-bindings \
	bench-semaphore bench-metrics bench-async-contended

BENCH_RESULTS := $(ROOT)/bench/results
# Thread counts for the scaling runs; a bigger machine can pass more: make bench BENCH_THREADS="1 2 4 8 16 32 64"
BENCH_THREADS ?= 1 2 4 8 16
BENCH_CARGO := $(CARGO) bench --locked -p keylock-core

# bench-core writes the same figures bench-rust would, plus the JSON; running both would
# measure everything twice, so make bench runs only this one.
BENCH_TARGETS := $(filter-out bench-rust,$(BENCH_TARGETS)) bench-core bench-semaphore bench-metrics \
	bench-async-contended bench-report

bench-metrics:
	python3 bench/metrics.py --out $(BENCH_RESULTS)/rust-metrics.json

bench-async-contended:
	python3 bench/async_contended.py --out $(BENCH_RESULTS)/rust-async-contended-1thread.json

bench-semaphore: build-py build-node
	python3 bench/semaphore.py --out $(BENCH_RESULTS)/rust-semaphore.json
	$(PY) py/bench/bench_semaphore.py --out $(BENCH_RESULTS)/python-semaphore.json
	cd $(NODE_DIR) && node bench/semaphore.js --out $(BENCH_RESULTS)/node-semaphore.json

bench-core: bench-uncontended
	KEYLOCK_BENCH_DIR=$(BENCH_RESULTS) $(BENCH_CARGO) --bench throughput -- $(BENCH_THREADS)
	KEYLOCK_BENCH_DIR=$(BENCH_RESULTS) $(BENCH_CARGO) --bench memory

# The uncontended criterion suite alone (bench/results/rust.json), run BENCH_UNCONTENDED_RUNS
# times with the samples of every run pooled; make bench-report then renders BENCHMARKS.md with
# it and the other suites' JSON as they are.
BENCH_UNCONTENDED_RUNS ?= 3
UNCONTENDED_DIR := $(ROOT)/build/bench-uncontended
bench-uncontended:
	@mkdir -p $(BENCH_RESULTS)
	rm -rf $(UNCONTENDED_DIR)
	for run in $$(seq $(BENCH_UNCONTENDED_RUNS)); do \
		rm -rf $(TARGET_DIR)/criterion/uncontended_u64 $(TARGET_DIR)/criterion/uncontended_bytes16 \
			$(TARGET_DIR)/criterion/uncontended_async; \
		$(BENCH_CARGO) --bench uncontended; \
		mkdir -p $(UNCONTENDED_DIR)/$$run; \
		cp -rp $(TARGET_DIR)/criterion $(UNCONTENDED_DIR)/$$run/; \
	done
	python3 bench/report.py criterion $(BENCH_RESULTS)/rust.json $(UNCONTENDED_DIR)/*

bench-report: $(VENV)/.stamp
	$(PY) bench/report.py render $(BENCH_RESULTS) BENCHMARKS.md docs

# Before and after for the bindings (bench/before_after_bindings.py): the uncontended
# lock+release loops of C (libkeylock), Python (the wheel) and Node (the addon), each built from
# revision BEFORE_AFTER_REV and from the tree BEFORE_AFTER_TREE in a temporary directory of its
# own (a git worktree for the revision, its own CARGO_TARGET_DIR per tree; nothing is built into
# either tree), in instructions per operation (callgrind) and ns, into
# bench/results/bindings-before-after-front.json; make bench-report then renders it. About 10-15
# minutes of building on 2 cores, then about 10 of measuring. Against another tree:
#   make bench-before-after-bindings BEFORE_AFTER_TREE=/path/to/checkout
BEFORE_AFTER_REV ?= 360914d
BEFORE_AFTER_TREE ?= $(ROOT)
bench-before-after-bindings: $(VENV)/.stamp $(NODE_MODULES_STAMP)
	python3 bench/before_after_bindings.py --rev $(BEFORE_AFTER_REV) --tree $(BEFORE_AFTER_TREE) \
		--maturin $(VENV)/bin/maturin

QUICK_DIR := $(ROOT)/build/bench-quick
bench-quick: $(VENV)/.stamp
	@mkdir -p $(QUICK_DIR)/results
	rm -rf $(TARGET_DIR)/criterion/uncontended_u64 $(TARGET_DIR)/criterion/uncontended_bytes16 \
		$(TARGET_DIR)/criterion/uncontended_async
	KEYLOCK_BENCH_QUICK=1 $(BENCH_CARGO) --bench uncontended
	$(PY) bench/report.py criterion $(QUICK_DIR)/results/rust.json $(TARGET_DIR)
	KEYLOCK_BENCH_QUICK=1 KEYLOCK_BENCH_DIR=$(QUICK_DIR)/results $(BENCH_CARGO) --bench throughput -- 1 2 8
	KEYLOCK_BENCH_QUICK=1 KEYLOCK_BENCH_DIR=$(QUICK_DIR)/results $(BENCH_CARGO) --bench memory
	$(PY) bench/report.py render $(QUICK_DIR)/results $(QUICK_DIR)/BENCHMARKS.md $(QUICK_DIR)/docs
	@echo "bench-quick: report in $(QUICK_DIR)/BENCHMARKS.md"

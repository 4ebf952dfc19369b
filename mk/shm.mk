# The host scope (cargo feature "shm", Linux): KeyPool and StripedLock in a /dev/shm region.
#
#   make test-shm    its tests: semantics across two opens of one region, and real processes
#                    (exact counts, shared overlap, kill -9 of holders and waiters, permissions)
#                    and hostile regions (bad mutex kinds, a table mutex never freed, and a
#                    seeded fuzz test of a few hundred corrupted regions, each in a child
#                    process with a time limit)
#   make fuzz-shm    the same fuzz test, longer: FUZZ_SHM_TRIALS (5000) trials; replay a
#                    failure with KEYLOCK_FUZZ_SEED=SEED (and KEYLOCK_FUZZ_ONLY=TRIAL)
#   make tsan-shm    the one-process tests under ThreadSanitizer (make tsan runs them in tsan-rust)
#   make bench-shm   against flock, OFD fcntl and robust pthread mutexes, into bench/results

.PHONY: test-shm fuzz-shm tsan-shm bench-shm

# The same features as test-rust (which runs these tests as part of its one build of the core's
# tests), so that running this alone reuses that build.
SHM_CARGO_TEST := $(CARGO) test --locked -p keylock-core $(CORE_TEST_FEATURES)

test-shm:
	$(SHM_CARGO_TEST) --lib shm::
	$(SHM_CARGO_TEST) --test shm --test shm_procs --test shm_hostile --test shm_semaphore --test scope
	$(SHM_CARGO_TEST) --doc shm

FUZZ_SHM_TRIALS ?= 5000
fuzz-shm:
	KEYLOCK_FUZZ_TRIALS=$(FUZZ_SHM_TRIALS) $(SHM_CARGO_TEST) --test shm_hostile \
		fuzzed_regions_neither_crash_nor_hang -- --nocapture

# tsan-rust runs this suite in its build (the same features), so `make tsan` does not list it
# again. The tokio test is skipped under TSan for the reason given at TSAN_SKIP in rust.mk; the
# same async path runs here through the futures-executor test. The multi-process tests are not
# run under TSan: it cannot see into other processes.
tsan-shm:
	KEYLOCK_TSAN=1 $(TSAN_CARGO) test --locked -p keylock-core --features shm --target $(TSAN_TARGET) \
		--target-dir $(TARGET_DIR)/tsan --test shm -- --test-threads=1 --skip tokio_

bench-shm:
	@mkdir -p $(BENCH_RESULTS)
	KEYLOCK_BENCH_DIR=$(BENCH_RESULTS) $(CARGO) bench --locked -p keylock-core --features shm --bench shm

BENCH_TARGETS += bench-shm

# Instructions per uncontended lock+unlock pair, counted by callgrind (stable on a loaded
# machine, unlike wall-clock times): each implementation runs 0 and 100,000 pairs, and the
# difference is divided by 100,000. (Not flock or fcntl: their cost is in the kernel, which
# callgrind does not count.)
SHM_BENCH_BIN = $(shell $(CARGO) bench --locked -p keylock-core --features shm --bench shm --no-run --message-format=json 2>/dev/null | python3 -c 'import json,sys; print([j["executable"] for j in map(json.loads, sys.stdin) if j.get("reason") == "compiler-artifact" and j.get("executable") and j["target"]["name"] == "shm"][0])')
.PHONY: bench-shm-callgrind
bench-shm-callgrind:
	@bin="$(SHM_BENCH_BIN)"; for impl in "robust pthread mutex" "keylock shm StripedLock" "keylock shm KeyPool"; do \
		for n in 0 100000; do \
			KEYLOCK_BENCH_COUNT="$$impl:$$n" valgrind --tool=callgrind --callgrind-out-file=/dev/null "$$bin" 2>&1 \
				| sed -n 's/.*refs: *//p' | tr -d , > $(TARGET_DIR)/callgrind-$$n.txt; \
		done; \
		echo "$$impl: $$(( ($$(cat $(TARGET_DIR)/callgrind-100000.txt) - $$(cat $(TARGET_DIR)/callgrind-0.txt)) / 100000 )) instructions per lock+unlock"; \
	done

# The host scope (cargo feature "shm", Linux): KeyPool and StripedLock in a /dev/shm region.
#
#   make test-shm    its tests: semantics across two opens of one region, and real processes
#                    (exact counts, shared overlap, kill -9 of holders and waiters, permissions)
#   make tsan-shm    the one-process tests under ThreadSanitizer (part of make tsan)
#   make bench-shm   against flock, OFD fcntl and robust pthread mutexes, into bench/results

.PHONY: test-shm tsan-shm bench-shm

SHM_CARGO_TEST := $(CARGO) test --locked -p keylock-core --features shm

test-shm:
	$(SHM_CARGO_TEST) --lib --test shm --test shm_procs --test scope
	$(SHM_CARGO_TEST) --doc shm

# The tokio test is skipped under TSan for the reason given at TSAN_SKIP in rust.mk; the same
# async path runs here through the futures-executor test. The multi-process tests are not run
# under TSan: it cannot see into other processes.
tsan-shm:
	$(TSAN_CARGO) test --locked -p keylock-core --features shm --target $(TSAN_TARGET) \
		--target-dir $(TARGET_DIR)/tsan --test shm -- --test-threads=1 --skip tokio_

bench-shm:
	@mkdir -p $(BENCH_RESULTS)
	KEYLOCK_BENCH_DIR=$(BENCH_RESULTS) $(CARGO) bench --locked -p keylock-core --features shm --bench shm

TEST_TARGETS += test-shm
TSAN_TARGETS += tsan-shm
BENCH_TARGETS += bench-shm

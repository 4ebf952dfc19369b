# Cross-language process tests of the scopes beyond one process: C, Python (and Node) processes
# on the same keys of a shm:NAME region, of a redis-server of our own and of a PostgreSQL cluster
# of our own (.ci/pg-server) (.ci/xlang/).
#
#   make test-xlang    exact counts in exclusive and shared mode with holders inside counted,
#                      fences rising per key across processes, 100 kill -9s of holders (C,
#                      Python, Node in turn) with the recovery time measured, killed waiters
#                      leaving no reservation, and the same counts and a kill -9 loop on Redis,
#                      and a Redis semaphore's weighted units (never over its permits), and
#                      the same counts, stale records and 30 kill -9s on PostgreSQL
#
# The children use the default builds (whose cargo features include shm, redis and postgres):
# the venv's keylock package, node/keylock_node.node, and libkeylock from the release target
# directory. The Node children need no npm packages beyond what build-node installs.

.PHONY: build-xlang test-xlang

TEST_TARGETS += test-xlang

XLANG_BUILD := $(ROOT)/build/xlang

build-xlang: build-ffi build-py build-node
	rm -rf $(XLANG_BUILD)/lib
	mkdir -p $(XLANG_BUILD)/lib
	install -m 0755 $(TARGET_DIR)/release/libkeylock.so $(XLANG_BUILD)/lib/libkeylock.so.$(KEYLOCK_MAJOR)
	ln -s libkeylock.so.$(KEYLOCK_MAJOR) $(XLANG_BUILD)/lib/libkeylock.so
	$(CC) -std=c11 -O2 $(C_WARN) .ci/xlang/child.c -Iinclude -o $(XLANG_BUILD)/child \
		-L$(XLANG_BUILD)/lib -lkeylock -pthread -Wl,-rpath,$(XLANG_BUILD)/lib

# timeout: the driver has its own global deadline (run.py GLOBAL_S); this one is the backstop.
test-xlang: redis-server postgres-server build-xlang
	timeout -s KILL 390 $(PY) .ci/xlang/run.py --c-child $(XLANG_BUILD)/child \
		--node-module $(NODE_DIR) --json $(XLANG_BUILD)/figures.json

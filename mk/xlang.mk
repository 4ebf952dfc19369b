# Cross-language process tests of the scopes beyond one process: C, Python (and Node) processes
# on the same keys of a shm:NAME region and of a redis-server of our own (.ci/xlang/).
#
#   make test-xlang    exact counts in exclusive and shared mode with holders inside counted,
#                      fences rising per key across processes, 100 kill -9s of holders (C,
#                      Python, Node in turn) with the recovery time measured, killed waiters
#                      leaving no reservation, and the same counts and a kill -9 loop on Redis
#
# The default builds (build-c, build-py, build-node) leave the shm and redis features out, so
# this target builds libkeylock, the Python extension and the Node addon with them, in the target
# directory that test-c-scopes uses (target/c-scopes: one build of the core with those features
# for all three). Nothing here replaces the default builds: the extension goes to
# build/xlang/py (PYTHONPATH), the addon to build/xlang/keylock_node.node (KEYLOCK_NODE_ADDON,
# which node/binding.js loads before ./keylock_node.node); only the children see them. The
# Node children need no npm packages, so neither does this target.

.PHONY: build-xlang test-xlang

TEST_TARGETS += test-xlang

XLANG_BUILD := $(ROOT)/build/xlang
XLANG_TARGET := $(TARGET_DIR)/c-scopes

build-xlang: $(VENV)/.stamp
	$(CARGO) build --locked --release -p keylock-ffi --features shm,redis --target-dir $(XLANG_TARGET)
	rm -rf $(XLANG_BUILD)/lib $(XLANG_BUILD)/wheel
	mkdir -p $(XLANG_BUILD)/lib
	install -m 0755 $(XLANG_TARGET)/release/libkeylock.so $(XLANG_BUILD)/lib/libkeylock.so.$(KEYLOCK_MAJOR)
	ln -s libkeylock.so.$(KEYLOCK_MAJOR) $(XLANG_BUILD)/lib/libkeylock.so
	$(CARGO) build --locked --release -p keylock-node --features shm,redis --target-dir $(XLANG_TARGET)
	install -m 0755 $(XLANG_TARGET)/release/libkeylock_node.so $(XLANG_BUILD)/keylock_node.node
	$(CC) -std=c11 -O2 $(C_WARN) .ci/xlang/child.c -Iinclude -o $(XLANG_BUILD)/child \
		-L$(XLANG_BUILD)/lib -lkeylock -pthread -Wl,-rpath,$(XLANG_BUILD)/lib
	VIRTUAL_ENV=$(VENV) $(VENV)/bin/maturin build --release --locked --quiet --features shm,redis \
		--manifest-path py/Cargo.toml --target-dir $(XLANG_TARGET) --out $(XLANG_BUILD)/wheel
	rm -rf $(XLANG_BUILD)/py
	$(PY) -m pip install --quiet --no-deps --no-index --target $(XLANG_BUILD)/py $(XLANG_BUILD)/wheel/*.whl

# timeout: the driver has its own global deadline (run.py GLOBAL_S); this one is the backstop.
test-xlang: redis-server build-xlang
	PYTHONPATH=$(XLANG_BUILD)/py KEYLOCK_NODE_ADDON=$(XLANG_BUILD)/keylock_node.node \
		timeout -s KILL 330 $(PY) .ci/xlang/run.py --c-child $(XLANG_BUILD)/child \
		--node-module $(NODE_DIR) --json $(XLANG_BUILD)/figures.json

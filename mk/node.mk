# Node.js: the keylock package (node/, `require('keylock')`), its bank demo, tests and benchmark.
#
#   make build-node        npm ci in node/ (its install script builds the addon, release mode)
#   make demo-node         run examples/node/bank.js (one thread, then 4 worker_threads)
#   make test-node         node --test node/test/*.test.js (each test within 120 s; redis.test.js
#                          starts a redis-server of its own), the TypeScript checks of index.d.ts
#                          (alone, and against lib.dom's Web Locks types), the demo
#   make bench-node        withLock vs async-lock vs async-mutex, locks.request vs async-lock
#                          -> bench/results/node.json
#                          (bench-node-quick: fewer runs)
#   make bench-node-callgrind  the withLock workload's instructions per operation under
#                          callgrind (stable on a loaded machine) -> bench/results/node-callgrind.json
#   make test-node-scopes  test/scopes.test.js on shm:NAME, on a redis-server of our own and on a
#                          PostgreSQL cluster of our own (.ci/pg-server; the addon's default
#                          features include shm, redis and postgres)
#   make lint-node         clippy for the addon (-D warnings), the TypeScript check, prettier --check
#   make fmt-node          rustfmt for the addon, prettier for the JavaScript and TypeScript

.PHONY: build-node demo-node test-node test-node-scopes bench-node bench-node-quick bench-node-callgrind bench-node-shm lint-node fmt-node

BUILD_TARGETS += build-node
DEMO_TARGETS += demo-node
TEST_TARGETS += test-node test-node-scopes
BENCH_TARGETS += bench-node bench-node-shm
LINT_TARGETS += lint-node
FMT_TARGETS += fmt-node

NODE_DIR := $(ROOT)/node
NODE_MODULES_STAMP := $(NODE_DIR)/node_modules/.keylock-stamp
NPM_FLAGS := --no-audit --no-fund --loglevel=error
# A hang fails its test within this bound (ms) instead of holding CI until its job times out.
# Generous: no test comes near it (each sets its own, mostly 60 s, for what it awaits).
NODE_TEST_FLAGS := --test-timeout=120000
# The JavaScript and TypeScript that prettier formats (pinned in package.json, configured by the
# repository's .prettierrc.json), relative to node/.
NODE_FORMATTED := bin index.js index.mjs index.d.ts binding.js lib build.js test bench ../examples/node

# npm ci installs the pinned devDependencies (typescript, prettier, the benchmark's
# competitors) and runs the package's install script, which builds the addon. It runs again
# only when package.json or package-lock.json change.
$(NODE_MODULES_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci $(NPM_FLAGS)
	touch $@

# Rebuild on every run (cargo makes it a no-op when nothing changed), so an edit to the core or
# the addon is always picked up.
build-node: $(NODE_MODULES_STAMP)
	cd $(NODE_DIR) && node build.js

demo-node: build-node
	node examples/node/bank.js

test-node: build-node redis-server
	cd $(NODE_DIR) && KEYLOCK_REQUIRE_REDIS=1 node --test $(NODE_TEST_FLAGS) test/*.test.js
	cd $(NODE_DIR) && npx --no-install tsc -p test
	cd $(NODE_DIR) && npx --no-install tsc -p test/tsconfig.dom.json
	node examples/node/bank.js

# The same scope tests on the scopes beyond this process (the addon's default features are shm,
# redis and postgres): on a fresh shm:NAME region (its file removed afterwards), on a
# redis-server of our own (a free loopback port, a temporary directory, stopped by its PID) and
# on a PostgreSQL cluster of our own (.ci/pg-server in a temporary directory, stopped and removed
# afterwards, even on failure).
test-node-scopes: build-node redis-server postgres-server
	set -e; tmp=$$(mktemp -d); pgdir=$$(mktemp -d); pid=; region=keylock-node-test-$$$$; pgserver=$(ROOT)/.ci/pg-server; \
	trap 'test -n "$$pid" && { kill $$pid; wait $$pid; }; "$$pgserver" stop "$$pgdir"; rm -rf "$$tmp"; rm -f /dev/shm/keylock.'"$$region"'-*' EXIT; \
	cd $(NODE_DIR); \
	KEYLOCK_TEST_SCOPE="shm:$$region" node --test $(NODE_TEST_FLAGS) test/scopes.test.js; \
	port=$$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'); \
	redis-server --port $$port --bind 127.0.0.1 --save '' --appendonly no --dir "$$tmp" \
		>"$$tmp/redis.log" 2>&1 & pid=$$!; \
	for i in $$(seq 100); do redis-cli -p $$port ping >/dev/null 2>&1 && break; sleep 0.1; done; \
	KEYLOCK_TEST_SCOPE="redis://127.0.0.1:$$port/0" node --test $(NODE_TEST_FLAGS) test/scopes.test.js; \
	url=$$("$$pgserver" start "$$pgdir"); \
	KEYLOCK_TEST_SCOPE="$$url" node --test $(NODE_TEST_FLAGS) test/scopes.test.js

bench-node: build-node
	node $(NODE_DIR)/bench/bench.js --out bench/results/node.json

# The host scope against proper-lockfile; it removes the /dev/shm regions and lock files it creates.
bench-node-shm: build-node
	node $(NODE_DIR)/bench/shm.js --out bench/results/node-shm.json

bench-node-quick: build-node
	node $(NODE_DIR)/bench/bench.js --quick --out bench/results/node.json

bench-node-callgrind: build-node
	node $(NODE_DIR)/bench/callgrind.js --out bench/results/node-callgrind.json

lint-node: $(NODE_MODULES_STAMP)
	$(LINT_CLIPPY_ALONE)$(CARGO) clippy --locked -p keylock-node --all-targets -- -D warnings
	cd $(NODE_DIR) && npx --no-install tsc -p test
	cd $(NODE_DIR) && npx --no-install tsc -p test/tsconfig.dom.json
	cd $(NODE_DIR) && npx --no-install prettier --check $(NODE_FORMATTED)

fmt-node: $(NODE_MODULES_STAMP)
	$(CARGO) fmt -p keylock-node
	cd $(NODE_DIR) && npx --no-install prettier --write --log-level warn $(NODE_FORMATTED)

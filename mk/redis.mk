# The Redis scope (keylock-core's cargo feature "redis"): its tests against a real
# redis-server, its lints, and its benchmark against the peers.
#
#   make test-redis    installs Debian's redis-server (and openssl) if missing, then runs
#                      core/tests/redis (each test starts its own server on a free loopback
#                      port with a temporary directory, and stops it by its PID)
#   make bench-redis   core/benches/redis.rs into bench/results/redis.json; the peers run from
#                      .venv (redis-py's Lock, python-redis-lock) and bench/redis-peers-node
#                      (node-redlock, installed with npm ci)
#   make bench-redis-semaphore
#                      core/benches/redis_semaphore.rs into bench/results/redis-semaphore.json:
#                      the keyed semaphore against the npm package redis-semaphore (from
#                      bench/redis-peers-node, installed with npm ci)

.PHONY: redis-server test-redis lint-redis bench-redis bench-redis-semaphore

LINT_TARGETS += lint-redis
BENCH_TARGETS += bench-redis bench-redis-semaphore

REDIS_CARGO_FLAGS := --locked -p keylock-core --features redis

# The TLS test makes its certificates with the openssl CLI.
redis-server:
	@if ! command -v redis-server >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then \
		echo "installing Debian's redis-server and openssl"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server openssl; \
	fi

# test-rust runs these too, in its one build of the core's tests (the same features).
test-redis: redis-server
	$(CARGO) test --locked -p keylock-core $(CORE_TEST_FEATURES) --lib redis::
	$(CARGO) test --locked -p keylock-core $(CORE_TEST_FEATURES) --test redis

lint-redis:
	$(CARGO) clippy $(REDIS_CARGO_FLAGS) --lib --test redis --bench redis --bench redis_semaphore -- -D warnings

REDIS_NODE_PEERS := $(ROOT)/bench/redis-peers-node
$(REDIS_NODE_PEERS)/node_modules/.stamp: $(REDIS_NODE_PEERS)/package-lock.json
	cd $(REDIS_NODE_PEERS) && npm ci $(NPM_FLAGS)
	touch $@

bench-redis: redis-server $(VENV)/.stamp $(REDIS_NODE_PEERS)/node_modules/.stamp
	KEYLOCK_BENCH_DIR=$(ROOT)/bench/results KEYLOCK_BENCH_PY=$(PY) \
		$(CARGO) bench $(REDIS_CARGO_FLAGS) --bench redis

bench-redis-semaphore: redis-server $(REDIS_NODE_PEERS)/node_modules/.stamp
	KEYLOCK_BENCH_DIR=$(ROOT)/bench/results \
		$(CARGO) bench $(REDIS_CARGO_FLAGS) --bench redis_semaphore

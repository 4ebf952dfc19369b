# The PostgreSQL scope's real servers: Debian's postgresql-15 and pgbouncer, for the tests that
# start their own clusters (core/tests/postgres, and .ci/pg-server for the C, Python, Node and
# cross-language tests).
#
#   make test-postgres     core/tests/postgres (each test starts its own cluster), and the URL tests
#   make lint-postgres     clippy on the scope, its tests and its benchmark
#   make bench-postgres    core/benches/postgres.rs into bench/results/postgres.json: round trips,
#                          uncontended latency, hand-off and throughput against the bare
#                          pg_advisory_lock pair (psycopg, bench/postgres_peers.py) and the Redis scope
#   make postgres-server   installs Debian's postgresql-15 and pgbouncer (and openssl, which the
#                          TLS test makes its certificates with) if missing, and leaves
#                          neither Debian's own cluster nor its pgbouncer service running (each
#                          test runs initdb in a temporary directory and starts its own postgres
#                          and pgbouncer on free loopback ports, stopped by their PIDs)

.PHONY: postgres-server

PG_BINDIR := /usr/lib/postgresql/15/bin

# The packages' scripts create and start a "main" cluster on port 5432 and start pgbouncer on
# 6432 where the system allows services to start; nothing of ours uses them, and a server
# left running would hold those ports and memory, so both are stopped again straight away.
postgres-server:
	@if [ ! -x $(PG_BINDIR)/initdb ] || ! command -v pgbouncer >/dev/null 2>&1 || \
		! command -v openssl >/dev/null 2>&1; then \
		echo "installing Debian's postgresql-15, pgbouncer and openssl"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql-15 pgbouncer openssl; \
		if pg_lsclusters -h 2>/dev/null | grep -q '^15 main .* online '; then \
			pg_ctlcluster 15 main stop; \
		fi; \
		if [ -x /etc/init.d/pgbouncer ]; then service pgbouncer stop >/dev/null 2>&1 || true; fi; \
	fi

# The scope's own suite (part of test-rust's one build), and its lints with the test crate.
.PHONY: test-postgres lint-postgres
LINT_TARGETS += lint-postgres

test-postgres: postgres-server
	$(CARGO) test --locked -p keylock-core $(CORE_TEST_FEATURES) --lib postgres::
	$(CARGO) test --locked -p keylock-core $(CORE_TEST_FEATURES) --test postgres

lint-postgres:
	$(CARGO) clippy --locked -p keylock-core --features postgres --lib --test postgres -- -D warnings
	$(LINT_CLIPPY_ALONE)$(CARGO) clippy --locked -p keylock-core --features postgres,redis --bench postgres -- -D warnings

# The scope against the bare pg_advisory_lock / pg_advisory_unlock pair (psycopg, from .venv)
# and against keylock's Redis scope, on one server each, in one run: core/benches/postgres.rs
# into bench/results/postgres.json (and a table on stdout). The Python worker is
# bench/postgres_peers.py; the keylock wheel comes from build-py.
.PHONY: bench-postgres
BENCH_TARGETS += bench-postgres

bench-postgres: postgres-server redis-server $(VENV)/.stamp build-py
	KEYLOCK_BENCH_DIR=$(ROOT)/bench/results KEYLOCK_BENCH_PY=$(PY) \
		$(CARGO) bench --locked -p keylock-core --features postgres,redis --bench postgres

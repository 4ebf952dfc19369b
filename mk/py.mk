# Python: the keylock package (py/, `import keylock`), its demos, tests and benchmark.
#
#   make build-py        build the abi3 extension with maturin (release) and install it into .venv
#   make demo-py         run the bank demos of examples/python (threads, then asyncio)
#   make test-py         pytest py/tests (per-test timeout; includes the demos; the server scopes
#                        on a redis-server and a PostgreSQL cluster of their own)
#   make bench-py        benchmarks -> bench/results/python.json (bench-py-quick: fewer runs)
#   make bench-py-callgrind  instructions per operation under callgrind (stable on a loaded
#                        machine) -> bench/results/python-callgrind.json
#   make bench-py-shm    the host scope (shm:NAME) against fcntl.flock, OFD fcntl, filelock and
#                        portalocker, uncontended and 4 processes -> bench/results/python-shm.json
#   make lint-py         clippy for the binding, ruff, and stubtest (the .pyi against the module)
#   make fmt-py          rustfmt for the binding, ruff format for the Python files

.PHONY: build-py demo-py test-py bench-py bench-py-quick bench-py-callgrind bench-py-shm lint-py fmt-py

BUILD_TARGETS += build-py
DEMO_TARGETS += demo-py
TEST_TARGETS += test-py
BENCH_TARGETS += bench-py bench-py-shm
LINT_TARGETS += lint-py
FMT_TARGETS += fmt-py

PY_EXAMPLES := examples/python/bank.py examples/python/bank_async.py
PY_LINTED := py/python py/tests py/bench examples/python bench ffi-c/bench .ci
RUFF := $(VENV)/bin/ruff

# maturin develop builds the release cdylib (into $(TARGET_DIR) like every crate), copies it
# next to py/python/keylock/__init__.py and installs the package into .venv in editable form.
build-py: $(VENV)/.stamp
	VIRTUAL_ENV=$(VENV) $(VENV)/bin/maturin develop --release --locked --quiet \
		--manifest-path py/Cargo.toml

demo-py: build-py
	@for ex in $(PY_EXAMPLES); do echo "== $$ex"; $(PY) $$ex; done

# redis-server and PostgreSQL: the server scopes' tests start a server of their own of each
# (the conftest fixtures redis_url and postgres_url).
test-py: build-py redis-server postgres-server
	$(PY) -m pytest py/tests -q

# The benchmark measures every alternative in one run, interleaved; the machine's load average
# before and after is in the JSON (re-measure when the machine is quiet).
bench-py: build-py
	$(PY) py/bench/bench_python.py --out bench/results/python.json

bench-py-callgrind: build-py
	$(PY) py/bench/callgrind_python.py --out bench/results/python-callgrind.json

# The host scope against file locks; it removes the /dev/shm regions and lock files it creates.
bench-py-shm: build-py
	$(PY) py/bench/bench_shm.py --out bench/results/python-shm.json

bench-py-quick: build-py
	$(PY) py/bench/bench_python.py --quick --out $(TARGET_DIR)/bench-python-quick.json

lint-py: build-py
	$(LINT_CLIPPY_ALONE)$(CARGO) clippy --locked -p keylock-py --all-targets --no-deps -- -D warnings
	$(RUFF) check --config py/pyproject.toml $(PY_LINTED)
	$(RUFF) format --check --config py/pyproject.toml $(PY_LINTED)
	$(PY) -m mypy.stubtest keylock --allowlist py/stubtest-allowlist.txt

fmt-py: $(VENV)/.stamp
	$(CARGO) fmt -p keylock-py
	$(RUFF) format --config py/pyproject.toml $(PY_LINTED)

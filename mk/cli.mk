# The keylock command (core/cli): `keylock list|info|unlock|watch|unlink SCOPE`, built by `make`
# into target/release/keylock. Its tests run in test-rust's build of the core's tests (the
# same features); they start their own redis-server and PostgreSQL cluster, and drive
# `keylock watch` in a terminal through tmux.

.PHONY: tmux test-cli

# Debian's tmux, for the test of `keylock watch`.
tmux:
	@if ! command -v tmux >/dev/null 2>&1; then \
		echo "installing Debian's tmux"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y tmux; \
	fi

test-cli: tmux redis-server postgres-server
	$(CARGO) test --locked -p keylock-cli

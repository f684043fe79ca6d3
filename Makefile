# Two entry points: `make run` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run control-plane demo image test system-deps console-audit clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@ $(STAMP)

# What the tests need from the system: bash, git, Chromium for the browser tool, ripgrep for
# grep, bubblewrap for isolated process sandboxes, iproute2, nftables and nsenter for their
# network boundary, dnsmasq for the tests' internet, npm for the console's audit
# (command:package pairs), and PostgreSQL for the control plane's store tests (its binaries
# live outside PATH, under /usr/lib/postgresql).
system-deps:
	@missing=""; \
	for pair in bash:bash git:git chromium:chromium rg:ripgrep bwrap:bubblewrap ip:iproute2 \
			nft:nftables nsenter:util-linux dnsmasq:dnsmasq-base npm:npm; do \
		command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; \
	done; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

run: $(STAMP)
	# Host and port come from AGENT_SERVER_HOST and AGENT_SERVER_PORT (127.0.0.1:8000 by default).
	AGENT_SERVER_STATE_DIR=$${AGENT_SERVER_STATE_DIR:-./.agent-server} $(BIN)/agent-server

# The whole service: the control plane on 127.0.0.1:3000; it starts agent-server sandboxes itself.
control-plane: $(STAMP)
	CONTROL_PLANE_STATE_DIR=$${CONTROL_PLANE_STATE_DIR:-./.control-plane} $(BIN)/control-plane serve

# The whole service without an LLM key: the control plane on 127.0.0.1:3000 with a `demo` user
# whose model is the tests' scripted one (tests/support/demo.py); it prints the key to sign in.
demo: $(TEST_STAMP)
	CONTROL_PLANE_STATE_DIR=$${CONTROL_PLANE_STATE_DIR:-./.control-plane-demo} $(BIN)/python -m tests.support.demo

# The sandbox image of the Docker provider (CONTROL_PLANE_SANDBOX_PROVIDER=docker). Any
# Debian-based Python image is a base: `make image BASE_IMAGE=debian-python:bookworm`.
IMAGE ?= agent-server
BASE_IMAGE ?=
image:
	docker build -f sandbox.Dockerfile -t $(IMAGE) $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) .

# The console's accessibility audit runs axe-core (npm, tests only: injected by the tests into
# the pages, never served), installed from its lock file into tests/console-audit/node_modules.
AUDIT := tests/console-audit
console-audit: $(AUDIT)/node_modules/.package-lock.json
$(AUDIT)/node_modules/.package-lock.json: $(AUDIT)/package.json $(AUDIT)/package-lock.json | system-deps
	cd $(AUDIT) && npm ci --no-audit --no-fund --loglevel=error

# Most tests wait on servers, browsers and containers rather than compute, so two workers
# finish well ahead of one even on two cores.
TEST_WORKERS ?= 2
test: system-deps $(TEST_STAMP) console-audit
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=15

clean:
	rm -rf $(VENV) .pytest_cache .agent-server .control-plane .control-plane-demo $(AUDIT)/node_modules

# Two entry points: `make run` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@ $(STAMP)

# What the tests need from the system: bash, git, Chromium for the browser tool and ripgrep
# for grep (command:package pairs).
system-deps:
	@missing=""; \
	for pair in bash:bash git:git chromium:chromium rg:ripgrep; do \
		command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

run: $(STAMP)
	# Host and port come from AGENT_SERVER_HOST and AGENT_SERVER_PORT (127.0.0.1:8000 by default).
	AGENT_SERVER_STATE_DIR=$${AGENT_SERVER_STATE_DIR:-./.agent-server} $(BIN)/agent-server

test: system-deps $(TEST_STAMP)
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .agent-server

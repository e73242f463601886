# python-runner-mcp: every task a developer or CI needs, from a fresh clone.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Stamps record which lock the venv was last installed from, so a lock change reinstalls.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
PYTEST_ARGS ?=

.PHONY: help run test lint typecheck unit lock inspect clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(RUN_STAMP): requirements.lock | $(PY)
	$(PIP) install --quiet --require-hashes -r requirements.lock
	@touch $@

$(DEV_STAMP): requirements-dev.lock | $(PY)
	$(PIP) install --quiet --require-hashes -r requirements-dev.lock
	@touch $@ $(RUN_STAMP)

run: $(RUN_STAMP) ## Serve MCP on stdio (installs from requirements.lock into .venv first)
	@exec $(PY) -m runner

lint: $(DEV_STAMP) ## ruff lint and format check
	$(VENV)/bin/ruff check runner tests
	$(VENV)/bin/ruff format --check runner tests

typecheck: $(DEV_STAMP) ## mypy --strict on runner/
	$(VENV)/bin/mypy runner

unit: $(DEV_STAMP) ## Only the pytest suite
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test: lint typecheck unit ## Install dev tools, then lint, type check and run the whole suite

lock: | $(PY) ## Regenerate requirements.lock and requirements-dev.lock from their .in files
	$(PIP) install --quiet pip-tools
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links -o requirements.lock requirements.in
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links -o requirements-dev.lock requirements-dev.in

inspect: $(RUN_STAMP) ## Open the MCP Inspector (npx) against this server
	npx --yes @modelcontextprotocol/inspector@2.12.0 $(abspath $(PY)) -m runner

clean: ## Remove the venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

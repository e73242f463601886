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

.PHONY: help run test lint typecheck unit lock inspect clean bench bench-profile bench-timeline soak

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

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

test: container-tools lint typecheck unit ## Install dev tools, then lint, type check and run the whole suite

lock: | $(PY) ## Regenerate requirements.lock and requirements-dev.lock from their .in files
	$(PIP) install --quiet pip-tools
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links -o requirements.lock requirements.in
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links -o requirements-dev.lock requirements-dev.in

inspect: $(RUN_STAMP) ## Open the MCP Inspector (npx) against this server
	npx --yes @modelcontextprotocol/inspector@2.12.0 $(abspath $(PY)) -m runner

clean: ## Remove the venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# --- Docker and the Inspector CLI ---------------------------------------------------------------------
IMAGE ?= turhal-ai/python-runner-mcp:latest
DOCKER ?= docker
# The seed's hardened line (README.md, "Docker"); the *-docker entries of mcp-config-examples/ use the same.
DOCKER_RUN_FLAGS := -i --rm --network=none --read-only --tmpfs /tmp:size=64m,mode=1777 \
	--security-opt no-new-privileges:true --cap-drop=ALL --memory=512m --cpus=1.0 --pids-limit=64
INSPECTOR := @modelcontextprotocol/inspector@2.12.0

.PHONY: docker-build docker-run docker-test inspect-cli hadolint container-tools

docker-build: ## Build the image turhal-ai/python-runner-mcp:latest (IMAGE=...; needs a Docker engine)
	$(DOCKER) build -t $(IMAGE) .

docker-run: ## Serve MCP on stdio from the image with the hardened docker run -i line
	@exec $(DOCKER) run $(DOCKER_RUN_FLAGS) $(IMAGE)

docker-test: docker-build $(RUN_STAMP) ## Build, then one MCP session through the container (Python client)
	$(PY) scripts/docker_session.py --container -- $(DOCKER) run $(DOCKER_RUN_FLAGS) $(IMAGE)

inspect-cli: $(RUN_STAMP) ## MCP Inspector CLI against the server: make inspect-cli ARGS='--method tools/list'
	npx --yes $(INSPECTOR) --cli $(abspath $(PY)) -m runner $(ARGS)

hadolint: $(DEV_STAMP) ## Lint the Dockerfile (make test runs the same check in tests/test_packaging.py)
	$(VENV)/bin/hadolint Dockerfile

# tests/test_packaging.py runs the image's ENTRYPOINT outside Docker, tini included: as root with apt-get,
# install Debian's tini (the image's package); elsewhere those tests say why they are skipped.
container-tools: ## Install Debian's tini for the container stand-in tests (root with apt-get only)
	@if [ -x /usr/bin/tini ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing tini from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tini >/dev/null; \
	else echo "no /usr/bin/tini: the container stand-in tests will be skipped"; fi

BENCH_ARGS ?=
PROFILE_ARGS ?=
PROFILE_VENV ?= /tmp/python-runner-profile

bench: $(RUN_STAMP) ## Benchmark vs the naive baseline and the ping floor (BENCH_ARGS='--quick' or '--variant L:K=V,...')
	$(PY) bench/run_bench.py $(BENCH_ARGS)

bench-profile: $(RUN_STAMP) ## py-spy profile of trivial calls (py-spy goes into a throwaway venv under /tmp)
	@test -x $(PROFILE_VENV)/bin/py-spy || { $(PYTHON) -m venv $(PROFILE_VENV) && $(PROFILE_VENV)/bin/pip install --quiet py-spy; }
	$(PY) bench/profile_calls.py --py-spy $(PROFILE_VENV)/bin/py-spy $(PROFILE_ARGS)

bench-timeline: $(RUN_STAMP) ## Per-stage timeline of sequential trivial calls (TIMELINE_ARGS='--server-env RUNNER_SPAWN_MODE=posix-spawn')
	$(PY) bench/timeline.py $(TIMELINE_ARGS)

SOAK_RUNS ?= 2000

soak: $(DEV_STAMP) ## Long soak (bench/soak.py, both spawn modes) and protocol fuzzing at 10x; not in make test
	$(PY) bench/soak.py --runs $(SOAK_RUNS) --spawn-mode fork-server
	$(PY) bench/soak.py --runs $(SOAK_RUNS) --spawn-mode posix-spawn
	FUZZ_SCALE=10 $(VENV)/bin/pytest -q tests/test_fuzz.py

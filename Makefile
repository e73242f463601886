# python-runner-mcp: every task a developer or CI needs, from a fresh clone.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The interpreter that made the venv, named by a file in it: PYTHON's when given (another one's venv is
# made again), else the one that made the venv there is, else python3's.
PYTHON_ID = $(shell $(PYTHON) -c 'import os, sys; print("%d.%d-%s" % (*sys.version_info[:2], os.path.realpath(sys.executable).replace("/", "_")))' 2>/dev/null || echo missing)
ifeq ($(origin PYTHON),file)
VENV_ID := $(firstword $(wildcard $(VENV)/.python-*))
endif
ifeq ($(VENV_ID),)
VENV_ID := $(VENV)/.python-$(PYTHON_ID)
endif
PIP := $(PY) -m pip
# Stamps record which lock the venv was last installed from, so a lock change reinstalls.
BUILD_STAMP := $(VENV)/.installed-build
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
# What runs may import (RUNNER_PACKAGES): numpy, pandas, matplotlib, scipy from requirements-sandbox.lock,
# in an environment of its own, never the server's venv.
SANDBOX_ENV ?= .sandbox-env
SANDBOX_STAMP := $(SANDBOX_ENV)/.built
# The vetted wheelhouse (requirements-wheelhouse.lock, beyond what the package environment has), downloaded
# once, hash-checked, for the server to install from offline on a run's behalf.
WHEELHOUSE ?= .wheelhouse
WHEELHOUSE_STAMP := $(WHEELHOUSE)/.manifest
# The downstream MCP servers code mode's tests start (requirements-downstream.lock): a venv of their own.
DOWNSTREAM_ENV ?= .downstream-env
DOWNSTREAM_STAMP := $(DOWNSTREAM_ENV)/.installed
PYTEST_ARGS ?=
, := ,

.PHONY: help setup run serve test test-fast lint typecheck unit lock inspect clean bench bench-profile bench-timeline soak sandbox-env check-sandbox-env wheelhouse check-wheelhouse tool-doc

# The README's commands first, then the rest in the file's order; one column, as wide as the longest name.
FIRST_TARGETS := run serve test setup
help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' -v first="$(FIRST_TARGETS)" ' \
		BEGIN { n = split(first, order, " "); for (i = 1; i <= n; i++) rank[order[i]] = i } \
		{ name[NR] = $$1; text[NR] = $$2; if (length($$1) > width) width = length($$1) } \
		END { for (i = 1; i <= n; i++) for (j = 1; j <= NR; j++) if (name[j] == order[i]) \
			printf "  make %-*s  %s\n", width, name[j], text[j]; \
			for (j = 1; j <= NR; j++) if (!(name[j] in rank)) printf "  make %-*s  %s\n", width, name[j], text[j] }'

# Checked before anything is made: the lock's packages need 3.11 (pip would fail deep inside, on one of them).
$(VENV_ID):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "make: python-runner-mcp needs Python 3.11 or newer, and PYTHON=$(PYTHON) is" \
			"$$($(PYTHON) --version 2>/dev/null || echo 'not found'): try make $(or $(ASKED_AS),$(MAKECMDGOALS),run) PYTHON=python3.11" >&2; \
		exit 1; }
	@if ls $(VENV)/.python-* >/dev/null 2>&1; then echo "make: $(VENV) was made by another interpreter; making it again with $(PYTHON)"; \
	elif [ -e $(VENV) ]; then echo "make: $(VENV) does not say which interpreter made it; making it again with $(PYTHON)"; fi
	@rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	@touch $@

# What makes the venv (pip, setuptools, wheel) from its own hashed lock, before anything else: nothing is
# installed unpinned, and a stock 3.11 venv's setuptools 65 cannot install this project.
$(BUILD_STAMP): requirements-build.lock $(VENV_ID)
	$(PIP) install --quiet --disable-pip-version-check --require-hashes -r requirements-build.lock
	@touch $@

$(PY): $(VENV_ID)
	@test -x $@

# The project itself goes in editable, without dependencies (the lock has them) and built by the
# setuptools of requirements-build.lock: the console script python-runner-mcp, which finds this
# checkout's $(SANDBOX_ENV) (runner/__main__.py).
INSTALL_PROJECT := $(PIP) install --quiet --no-deps --no-build-isolation --editable .

$(RUN_STAMP): requirements.lock pyproject.toml $(BUILD_STAMP)
	$(PIP) install --quiet --require-hashes -r requirements.lock
	@$(INSTALL_PROJECT)
	@touch $@

$(DEV_STAMP): requirements-dev.lock pyproject.toml $(BUILD_STAMP)
	$(PIP) install --quiet --require-hashes -r requirements-dev.lock
	@$(INSTALL_PROJECT)
	@touch $@ $(RUN_STAMP)

# Made again with the venv: its compiled packages are the interpreter's (cp311, cp312, ...).
$(SANDBOX_STAMP): requirements-sandbox.lock scripts/sandbox_env.py $(BUILD_STAMP)
	$(PY) scripts/sandbox_env.py build $(SANDBOX_ENV)
	@touch $@

sandbox-env: $(SANDBOX_STAMP) ## Build the package environment runs import from (requirements-sandbox.lock into .sandbox-env)

check-sandbox-env: $(SANDBOX_STAMP) ## Fail if the package environment is not exactly what requirements-sandbox.lock says
	@$(PY) scripts/sandbox_env.py check $(SANDBOX_ENV)

$(WHEELHOUSE_STAMP): requirements-wheelhouse.lock requirements-sandbox.lock scripts/wheelhouse.py $(BUILD_STAMP)
	$(PY) scripts/wheelhouse.py download $(WHEELHOUSE)

wheelhouse: $(WHEELHOUSE_STAMP) ## Download the vetted wheelhouse (requirements-wheelhouse.lock) into .wheelhouse, hash-checked

check-wheelhouse: $(WHEELHOUSE_STAMP) ## Fail if .wheelhouse is not exactly the wheels and hashes requirements-wheelhouse.lock says
	@$(PY) scripts/wheelhouse.py check $(WHEELHOUSE)

tool-doc: $(RUN_STAMP) check-sandbox-env check-wheelhouse ## Write run_python's description, as the model reads it, into docs/tool.md
	$(PY) scripts/tool_doc.py write

# RUNNER_PACKAGES set in the environment (even empty: standard library only) wins over the built one.
setup: $(RUN_STAMP) check-sandbox-env check-wheelhouse ## Install from the locks (.venv, .sandbox-env, .wheelhouse: network, about 560 MB), then stop

# stdout is the wire: what installing says goes to stderr (found by a first hour: a client started with
# `make run` read ".wheelhouse: 22 wheels, ..." as a message and logged parse errors).
run: ## Serve MCP on stdio (installs from the locks into .venv, .sandbox-env and .wheelhouse first)
	@$(MAKE) --no-print-directory setup ASKED_AS=run >&2
	@RUNNER_PACKAGES="$${RUNNER_PACKAGES-$(abspath $(SANDBOX_ENV))}" RUNNER_WHEELHOUSE="$${RUNNER_WHEELHOUSE-$(abspath $(WHEELHOUSE))}" \
		exec $(VENV)/bin/python-runner-mcp

# Streamable HTTP on 127.0.0.1:8000/mcp by default; RUNNER_HTTP_*, RUNNER_AUTH_TOKENS_FILE and ARGS
# (e.g. ARGS=--insecure-no-auth) as docs/http.md says.
serve: $(RUN_STAMP) check-sandbox-env check-wheelhouse ## Serve MCP over Streamable HTTP (docs/http.md), installing first as `make run` does
	@RUNNER_PACKAGES="$${RUNNER_PACKAGES-$(abspath $(SANDBOX_ENV))}" RUNNER_WHEELHOUSE="$${RUNNER_WHEELHOUSE-$(abspath $(WHEELHOUSE))}" \
		exec $(VENV)/bin/python-runner-mcp --transport http $(ARGS)

lint: $(DEV_STAMP) ## ruff lint and format check
	$(VENV)/bin/ruff check runner tests
	$(VENV)/bin/ruff format --check runner tests

typecheck: $(DEV_STAMP) ## mypy --strict on runner/
	$(VENV)/bin/mypy runner

unit: $(DEV_STAMP) $(DOWNSTREAM_STAMP) check-sandbox-env check-wheelhouse ## Only the pytest suite
	RUNNER_TEST_PACKAGES=$(abspath $(SANDBOX_ENV)) RUNNER_TEST_WHEELHOUSE=$(abspath $(WHEELHOUSE)) \
		RUNNER_TEST_DOWNSTREAM=$(abspath $(DOWNSTREAM_ENV)) $(VENV)/bin/pytest $(PYTEST_ARGS)

$(DOWNSTREAM_STAMP): requirements-downstream.lock
	rm -rf $(DOWNSTREAM_ENV)
	$(PYTHON) -m venv $(DOWNSTREAM_ENV)
	$(DOWNSTREAM_ENV)/bin/pip install --quiet --require-hashes --no-deps -r requirements-downstream.lock
	@touch $@

test: container-tools lint typecheck unit ## Install dev tools, then lint, type check and run the whole suite

# The pure tests (tests/unit: no process, no server, no network) and the checks of the whole tree: seconds,
# and no package environment.
test-fast: lint ## Lint, then the fast part of the suite: tests/unit, tests/test_layout.py, tests/test_docs.py
	$(VENV)/bin/pytest $(PYTEST_ARGS) -m "not slow" tests/unit tests/test_layout.py tests/test_docs.py

lock: $(DEV_STAMP) ## Regenerate requirements.lock, -dev, -build, -sandbox and -wheelhouse.lock from their .in files (pip-tools from the dev lock)
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links -o requirements.lock requirements.in
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links -o requirements-dev.lock requirements-dev.in
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links -o requirements-build.lock requirements-build.in
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links -o requirements-sandbox.lock requirements-sandbox.in
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links -o requirements-wheelhouse.lock requirements-wheelhouse.in
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links -o requirements-downstream.lock requirements-downstream.in

inspect: $(RUN_STAMP) ## Open the MCP Inspector (npx) against this server
	npx --yes @modelcontextprotocol/inspector@2.12.0 $(abspath $(VENV))/bin/python-runner-mcp

# The packages the server installed from the wheelhouse: RUNNER_WHEELHOUSE_CACHE, or its default in /var/tmp,
# and the default in RUNNER_WORK_DIR (the temp directory unless set), taken where /var/tmp will not do and
# where earlier servers kept it (runner/config/disk.py).
PACKAGES_CACHE = $${RUNNER_WHEELHOUSE_CACHE:-/var/tmp/python-runner-environments-$$(id -u)}
PACKAGES_CACHE_IN_WORK_DIR = $${RUNNER_WORK_DIR:-$${TMPDIR:-/tmp}}/python-runner-environments-$$(id -u)

clean: ## Remove the venv, the package environment, the wheelhouse, the packages installed from it and caches
	rm -rf $(VENV) $(SANDBOX_ENV) $(WHEELHOUSE) .pytest_cache .mypy_cache .ruff_cache "$(PACKAGES_CACHE)" \
		"$(PACKAGES_CACHE_IN_WORK_DIR)"

# --- Docker and the Inspector CLI ---------------------------------------------------------------------
IMAGE ?= turhal-ai/python-runner-mcp:latest
# docker or podman (both tested with podman 4.3 here; docs/docker.md).
DOCKER ?= docker
# More flags for the build, e.g. --pull=never, --no-cache, --network=host, --secret id=...,src=...
DOCKER_BUILD_FLAGS ?=
# Where HTTPS is intercepted by a proxy: the CA bundle pip in the build must trust (a build secret, in no layer).
DOCKER_CA_BUNDLE ?=
# Another base than python:3.11-slim-bookworm (make docker-base makes a stand-in with debootstrap).
BASE_IMAGE ?=
# What make docker-base makes (scripts/standin_base.py): Debian bookworm with Debian's Python 3.11, for
# where python:3.11-slim-bookworm cannot be pulled; docs/docker.md says how it differs.
STANDIN_BASE_IMAGE ?= localhost/python-runner-base:bookworm
# The product description's hardened line with every tmpfs option spelled out: Docker adds
# noexec,nosuid,nodev to a --tmpfs by itself, podman does not. The *-docker entries of
# mcp-config-examples/ and docker-compose.yml carry the same flags.
DOCKER_RUN_PLAIN_FLAGS := -i --rm --network=none --read-only --tmpfs /tmp:rw,noexec,nosuid,nodev,size=64m,mode=1777 \
	--security-opt no-new-privileges:true --cap-drop=ALL --memory=512m --cpus=1.0 --pids-limit=64
# podman's --read-only also mounts writable, unbounded tmpfs at /var/tmp and /run unless told not to.
ifeq ($(notdir $(firstword $(DOCKER))),podman)
DOCKER_RUN_PLAIN_FLAGS += --read-only-tmpfs=false
endif
# The recommended line: the same, plus what the image's bubblewrap needs to give every run its own
# namespaces (deploy/seccomp/README.md says what each of the two opens, and why).
SECCOMP_PROFILE := $(abspath deploy/seccomp/runner-sandbox.json)
DOCKER_RUN_FLAGS := $(DOCKER_RUN_PLAIN_FLAGS) --security-opt seccomp=$(SECCOMP_PROFILE) \
	--security-opt systempaths=unconfined
INSPECTOR := @modelcontextprotocol/inspector@2.12.0

.PHONY: docker-base docker-build docker-run docker-run-plain docker-test inspect-cli hadolint container-tools container-engine test-container

# Root only (debootstrap); nothing is done if the engine has the image already.
docker-base: $(PY) ## Make a stand-in base where python:3.11-slim-bookworm cannot be pulled (debootstrap, root; about 90 s, 230 MB)
	$(PY) scripts/standin_base.py --engine $(DOCKER) --image $(STANDIN_BASE_IMAGE)

docker-build: ## Build the image (IMAGE=, DOCKER=podman, DOCKER_BUILD_FLAGS=, DOCKER_CA_BUNDLE=, BASE_IMAGE=)
	$(DOCKER) build $(if $(DOCKER_CA_BUNDLE),--secret id=ca-bundle$(,)src=$(DOCKER_CA_BUNDLE)) \
		$(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) $(DOCKER_BUILD_FLAGS) -t $(IMAGE) .

docker-run: ## Serve MCP on stdio from the image: the hardened line, every run in its own sandbox
	@exec $(DOCKER) run $(DOCKER_RUN_FLAGS) $(IMAGE)

docker-run-plain: ## The same without the per-run sandbox, for hosts that refuse its seccomp profile
	@exec $(DOCKER) run $(DOCKER_RUN_PLAIN_FLAGS) $(IMAGE)

docker-test: docker-build $(RUN_STAMP) ## Build, then one MCP session through the container with each line
	$(PY) scripts/docker_session.py --container --sandbox namespaces -- $(DOCKER) run $(DOCKER_RUN_FLAGS) $(IMAGE)
	$(PY) scripts/docker_session.py --container --sandbox none -- $(DOCKER) run $(DOCKER_RUN_PLAIN_FLAGS) $(IMAGE)

inspect-cli: $(RUN_STAMP) ## MCP Inspector CLI against the server: make inspect-cli ARGS='--method tools/list'
	npx --yes $(INSPECTOR) --cli $(abspath $(VENV))/bin/python-runner-mcp $(ARGS)

hadolint: $(DEV_STAMP) ## Lint the Dockerfile (make test runs the same check in tests/deploy/test_packaging.py)
	$(VENV)/bin/hadolint Dockerfile

# tests/deploy/test_packaging.py runs the image's ENTRYPOINT outside Docker, tini included, and
# tests/deploy/test_proxy_routing.py puts Debian's nginx in front of two servers: as root with apt-get,
# install both (Debian's packages; RUNLEVEL=1: nginx's own service is not started); elsewhere those tests
# say why they are skipped.
container-tools: ## Install Debian's tini and nginx for the container stand-in and routing tests (root with apt-get only)
	@if [ -x /usr/bin/tini ] && [ -x /usr/sbin/nginx ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing tini and nginx from Debian's packages"; \
		apt-get update -qq && RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			tini nginx-light >/dev/null; \
	else echo "no /usr/bin/tini or /usr/sbin/nginx: the container stand-in or routing tests will be skipped"; fi

# make test-container: the image built for real with podman (Debian's, one package away) from a local
# base, and the container tests run against it with both lines. The machines here reach no image
# registry: the base is made with debootstrap (make docker-base; docs/docker.md lists how it differs
# from the official image). tests/container/containers.conf holds this machine's podman quirks.
CONTAINER_ENGINE ?= podman
# One tag per checkout, so that two checkouts testing at once do not take each other's image.
CONTAINER_TEST_IMAGE ?= localhost/python-runner-mcp:test-$(shell printf %s '$(CURDIR)' | cksum | cut -d' ' -f1)
CONTAINER_BASE_IMAGE ?= $(STANDIN_BASE_IMAGE)
CONTAINER_CA_BUNDLE ?= $(firstword $(wildcard $(PIP_CERT) /etc/ssl/certs/ca-certificates.crt))
CONTAINER_CONF := $(abspath tests/container/containers.conf)
# Rootless podman's default build network does not work on these machines; the host's does.
ROOTLESS_BUILD_FLAGS := $(if $(filter-out 0,$(shell id -u)),--network=host)

container-engine: ## Install podman, runc and debootstrap for make test-container (root with apt-get only)
	@if command -v $(CONTAINER_ENGINE) >/dev/null && command -v debootstrap >/dev/null && command -v runc >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing podman, runc and debootstrap from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			podman runc debootstrap uidmap fuse-overlayfs slirp4netns ca-certificates >/dev/null; \
	else echo "no $(CONTAINER_ENGINE): make test-container will skip the container tests"; fi

test-container: $(DEV_STAMP) container-engine ## Build the image with podman from a local base, then the container tests
	@export CONTAINERS_CONF=$(CONTAINER_CONF); \
	if command -v $(CONTAINER_ENGINE) >/dev/null; then \
		$(MAKE) --no-print-directory docker-base DOCKER=$(CONTAINER_ENGINE) STANDIN_BASE_IMAGE=$(CONTAINER_BASE_IMAGE) && \
		$(MAKE) --no-print-directory docker-build DOCKER=$(CONTAINER_ENGINE) IMAGE=$(CONTAINER_TEST_IMAGE) \
			BASE_IMAGE=$(CONTAINER_BASE_IMAGE) DOCKER_CA_BUNDLE=$(CONTAINER_CA_BUNDLE) \
			DOCKER_BUILD_FLAGS='--pull=never --no-cache $(ROOTLESS_BUILD_FLAGS) $(DOCKER_BUILD_FLAGS)' && \
		CONTAINER_ENGINE=$(CONTAINER_ENGINE) CONTAINER_TEST_IMAGE=$(CONTAINER_TEST_IMAGE) \
			$(VENV)/bin/pytest $(PYTEST_ARGS) tests/deploy/test_container.py; \
		status=$$?; $(CONTAINER_ENGINE) rmi --force $(CONTAINER_TEST_IMAGE) >/dev/null 2>&1; exit $$status; \
	else $(VENV)/bin/pytest $(PYTEST_ARGS) tests/deploy/test_container.py; fi

# The server as configured by default (on a machine with namespaces: every run in its own) against the
# plain fork server and the naive baseline: the ratios of issues 5 and 11 in one run.
BENCH_ARGS ?= --variant runner: --variant plain-fork:RUNNER_SANDBOX=none
PROFILE_ARGS ?=
PROFILE_VENV ?= /tmp/python-runner-profile

bench: $(RUN_STAMP) ## Benchmark vs the naive baseline and the ping floor (BENCH_ARGS='--quick' or '--variant L:K=V,...')
	$(PY) bench/run_bench.py $(BENCH_ARGS)

bench-profile: $(RUN_STAMP) ## py-spy profile of trivial calls (py-spy goes into a throwaway venv under /tmp)
	@test -x $(PROFILE_VENV)/bin/py-spy || { $(PYTHON) -m venv $(PROFILE_VENV) && $(PROFILE_VENV)/bin/pip install --quiet py-spy; }
	$(PY) bench/profile_calls.py --py-spy $(PROFILE_VENV)/bin/py-spy $(PROFILE_ARGS)

bench-timeline: $(RUN_STAMP) ## Per-stage timeline of sequential trivial calls (TIMELINE_ARGS='--server-env RUNNER_SANDBOX=none-posix-spawn')
	$(PY) bench/timeline.py $(TIMELINE_ARGS)

SOAK_RUNS ?= 2000

# Every RUNNER_SANDBOX value, the default first.
SOAK_MODES ?= auto namespaces bwrap none none-posix-spawn

soak: $(DEV_STAMP) ## Long soak (bench/soak.py) in every RUNNER_SANDBOX mode, the default first, and protocol fuzzing at 10x; not in make test
	@for mode in $(SOAK_MODES); do \
		echo "== soak: $(SOAK_RUNS) runs, RUNNER_SANDBOX=$$mode"; \
		$(PY) bench/soak.py --runs $(SOAK_RUNS) --sandbox $$mode || exit 1; \
	done
	FUZZ_SCALE=10 $(VENV)/bin/pytest -q tests/e2e/test_fuzz.py

# python-runner-mcp: an MCP server on stdio. Build and run it with make (docs/docker.md has the lines):
#   make docker-build      build turhal-ai/python-runner-mcp:latest (DOCKER=podman, DOCKER_BUILD_FLAGS=...,
#                          DOCKER_CA_BUNDLE=... for an HTTPS-intercepting proxy, BASE_IMAGE=...)
#   make docker-run        the recommended line: hardened, with the seccomp profile that lets the fork
#                          server give every run its own namespaces (deploy/seccomp/README.md says what
#                          it opens)
#   make docker-run-plain  the hardened line of the product description alone (no per-run sandbox)
#   make test-container    build from a local base and run the container tests with both lines
#
# Both stages use the same base: requirements.lock is compiled for CPython 3.11, and the venv's
# interpreter link (/usr/local/bin/python3.11) must exist in the final stage too. bookworm is the Debian
# release of the machines that test this file (same tini and bubblewrap packages, same Python minor).
# BASE_IMAGE stands in for the official image where it cannot be pulled (make test-container builds one
# with debootstrap; docs/docker.md lists how it differs).
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
COPY requirements.lock /tmp/requirements.lock
# Dependencies only (a layer that changes when the lock does, not when the code does). Hash-checked and
# without the resolver: exactly what the lock lists. pip and setuptools are removed from the venv: the
# server never installs anything. Bytecode is compiled once here, hash-checked so that it stays valid
# whatever the copied files' mtimes are; nothing can write bytecode at run time on a read-only root.
# Where HTTPS is intercepted (a corporate proxy), pip needs that CA: `make docker-build` passes the host's
# bundle as the build secret `ca-bundle` (DOCKER_CA_BUNDLE=...); it is mounted for this step only and is
# not in any layer. Without the secret, pip uses the base image's CAs.
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && python -m venv /app/.venv \
    && /app/.venv/bin/pip install --no-cache-dir --no-compile --require-hashes --no-deps -r /tmp/requirements.lock \
    && /app/.venv/bin/pip uninstall --yes --quiet pip setuptools \
    && /app/.venv/bin/python -m compileall -q --invalidation-mode checked-hash /app/.venv/lib
# What runs may import (RUNNER_PACKAGES): numpy, pandas, matplotlib and scipy from their own hashed lock,
# in an environment of their own (never the server's venv: no run can import mcp, pydantic or runner),
# with matplotlib's font cache built here once. Built by the same script as `make sandbox-env`, which
# also checks the result against the lock (pip from a throwaway venv, which stays in this stage); its
# bytecode is hash-checked like the venv's.
# The scripts read their locks with the server's own reader (runner/config/locks.py), copied in beside them.
COPY requirements-sandbox.lock scripts/sandbox_env.py scripts/lockfiles.py runner/config/locks.py /tmp/sandbox/
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && python -m venv /tmp/sandbox/pip \
    && /tmp/sandbox/pip/bin/python /tmp/sandbox/sandbox_env.py build /opt/sandbox-env --lock /tmp/sandbox/requirements-sandbox.lock \
    && python -m compileall -q -f --invalidation-mode checked-hash /opt/sandbox-env/site-packages
# The vetted wheelhouse (requirements-wheelhouse.lock, beyond the package environment): wheels only,
# hash-checked by the same script as `make wheelhouse`, for the server to install from offline.
COPY requirements-wheelhouse.lock scripts/wheelhouse.py scripts/lockfiles.py runner/config/locks.py /tmp/wheelhouse/
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && /tmp/sandbox/pip/bin/python /tmp/wheelhouse/wheelhouse.py download /opt/wheelhouse \
       --lock /tmp/wheelhouse/requirements-wheelhouse.lock --base /tmp/sandbox/requirements-sandbox.lock

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="python-runner-mcp" \
      org.opencontainers.image.description="MCP server (stdio or Streamable HTTP) that runs Python code in one-shot, resource-limited processes" \
      org.opencontainers.image.licenses="MIT"
# - tini: see ENTRYPOINT. Execute-only (0711): PID 1 runs as uid 10001 like the runs, and a process
#   that execs a file it cannot read is made non-dumpable by the kernel, so no run can read PID 1's
#   /proc/1/environ (the container's whole environment, -e settings included) or ptrace it (a traced
#   tini stays stopped, the server is left an unreaped zombie and the container never ends).
# - bubblewrap: each run in its own namespaces where the fork server's zygote cannot make them but
#   bubblewrap can (or with RUNNER_SANDBOX=bwrap). With the recommended line
#   RUNNER_SANDBOX=auto picks the zygote's namespaces; it falls back to plain rlimits, saying why,
#   where neither works (make docker-run-plain).
# - uid/gid 10001, no home directory (HOME=/nonexistent), no login shell; owns no file in the image.
# - The base image ships the standard library without bytecode. Every run is a fresh interpreter in
#   isolated mode (-I), which ignores PYTHONDONTWRITEBYTECODE: without this step each run compiled
#   every module it imported from source (json, re, datetime, ...: about 0.1 s of CPU per run,
#   measured) and tried to write __pycache__ into the read-only root.
RUN apt-get update \
    && apt-get install -y --no-install-recommends 'tini=0.19.*' 'bubblewrap=0.8.*' \
    && rm -rf /var/lib/apt/lists/* \
    && chmod 0711 /usr/bin/tini \
    && groupadd --gid 10001 runner \
    && useradd --uid 10001 --gid 10001 --no-log-init --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin runner \
    && python -m compileall -q --invalidation-mode checked-hash -x '/site-packages/' /usr/local/lib/python3.11
# Defaults sized for the hardened line's container limits (all overridable with -e):
# - RUNNER_MAX_CONCURRENT=2 and RUNNER_MAX_MEMORY_MB=128: --memory=512m is shared by tini and the
#   server (about 72 MiB resident), its fork server and 2 pooled interpreters (about 12 MiB each), the
#   /tmp and /dev/shm tmpfs mounts (up to 64 MiB each: tmpfs pages are charged to the container's
#   memory) and the runs: 72 + 36 + 64 + 64 + 2 x 128 = 492 MiB < 512 MiB (resident sizes measured
#   with this layout outside Docker). A run's 128 MiB of address space leaves it about 90 MiB of
#   data. RLIMIT_AS bounds each process of a run, not a run's children together: --memory stays the
#   backstop (the kernel then kills the largest process in the container).
# - RUNNER_MAX_PROCESSES=16: --pids-limit=64 counts every task in the container (tini, the server,
#   the fork server, the pool: 5 at rest, 7 with the recommended line, where each pooled or running
#   interpreter has its namespace's init beside it; every run's processes and threads):
#   7 + 2 runs x (16 + 1) = 41.
#   The server sizes RLIMIT_NPROC with a fixed margin of 48 on top (84 for uid 10001 with these
#   values), so in the container a fork loop gets EAGAIN from the pids limit first.
# - Runs and the server work in /tmp (TMPDIR unset: tempfile's default), the 64 MiB tmpfs; the code
#   under /app is root-owned and read-only; bytecode is never written (PYTHONDONTWRITEBYTECODE and
#   the compile steps above).
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONPATH=/app \
    RUNNER_PACKAGES=/opt/sandbox-env \
    RUNNER_WHEELHOUSE=/opt/wheelhouse \
    RUNNER_WHEELHOUSE_CACHE=/opt/environments \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RUNNER_MAX_CONCURRENT=2 \
    RUNNER_MAX_MEMORY_MB=128 \
    RUNNER_MAX_PROCESSES=16 \
    RUNNER_SANDBOX_TMP_MB=32
WORKDIR /app
COPY --from=builder /app/.venv /app/.venv
COPY --from=builder /opt/sandbox-env /opt/sandbox-env
COPY --from=builder /opt/wheelhouse /opt/wheelhouse
COPY runner/ /app/runner/
# Then the wheelhouse's packages are installed here, by the server's own installer (hash-checked,
# compiled), into a cache that is root's and read-only to the server and its runs: no run's import
# installs anything, and /tmp (a noexec tmpfs of 64 MiB) never holds a package.
RUN python -m compileall -q --invalidation-mode checked-hash /app/runner \
    && python -m runner --install-packages
USER 10001:10001
# Streamable HTTP, when asked for (RUNNER_TRANSPORT=http or `--transport http`, with RUNNER_HTTP_HOST=0.0.0.0,
# RUNNER_HTTP_ALLOWED_HOSTS and RUNNER_AUTH_TOKENS_FILE: docs/http.md); stdio, the default, needs no port.
EXPOSE 8000
# tini is PID 1 (or, with `docker run --init`, the child of Docker's init), with the server as its child:
# - Signals: PID 1 gets no default signal actions. With the server itself as PID 1, a SIGTERM that
#   arrived before its handler was installed (its first second: SDK import, pool start) was lost:
#   the server kept serving and `docker stop` would wait 10 s, then SIGKILL (seen in a PID namespace
#   without Docker). tini forwards SIGTERM/SIGINT to the server, which kills every run,
#   removes their directories and exits 0; tini exits with that status. -e 143 maps "killed by
#   SIGTERM before its handler existed" to 0 too, so a stop exits 0 whenever it comes.
# - Orphans: the server is a child subreaper and reaps what its runs leave behind; anything else that
#   ends up re-parented to PID 1 is reaped by tini instead of staying a zombie that counts against
#   --pids-limit.
# - -s (child subreaper) keeps both true under `docker run --init`: Docker's init is then PID 1 and
#   forwards signals to this tini, which still reaps what the server leaves instead of leaving it to
#   PID 1, and does not print tini's "not running as PID 1" warning. Either way works.
ENTRYPOINT ["/usr/bin/tini", "-s", "-e", "143", "--", "/app/.venv/bin/python", "-m", "runner"]

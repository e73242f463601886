# python-runner-mcp: MCP server on stdio. Run it with the hardened flags from README.md:
#   docker run -i --rm --network=none --read-only --tmpfs /tmp:size=64m,mode=1777 \
#     --security-opt no-new-privileges:true --cap-drop=ALL --memory=512m --cpus=1.0 --pids-limit=64 IMAGE
# The lock is compiled for Python 3.11: keep both stages on the same 3.11 image so the venv's
# interpreter link (/usr/local/bin/python3.11) exists in the final stage too.

FROM python:3.11-slim AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY requirements.lock .
# Hash-checked, no resolver: exactly what the lock lists, nothing pulled in besides.
RUN python -m venv /app/.venv \
    && /app/.venv/bin/pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock

FROM python:3.11-slim
# tini as PID 1: run code can leave orphans (killed grandchildren, daemons); without an init they
# become zombies of the server that nothing reaps and that count against --pids-limit.
RUN apt-get update \
    && apt-get install -y --no-install-recommends 'tini=0.19.*' \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 runner \
    && useradd --uid 10001 --gid 10001 --no-log-init --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin runner
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PYTHONPATH=/app PATH=/app/.venv/bin:$PATH
WORKDIR /app
COPY --from=builder /app/.venv /app/.venv
COPY runner/ /app/runner/
# Compiled at build time: with --read-only nothing can write bytecode at run time.
RUN python -m compileall -q /app/runner
# Files stay root-owned and read-only to the server; runs work under $TMPDIR (default /tmp, a tmpfs).
USER 10001:10001
ENTRYPOINT ["/usr/bin/tini", "--", "/app/.venv/bin/python", "-m", "runner"]

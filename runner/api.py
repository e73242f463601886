"""A one-call Python API for scripts and tests: run code without an MCP client."""

from __future__ import annotations

import dataclasses
import os
import secrets

from runner.config import Config, load
from runner.config.disk import open_environment
from runner.egress.proxy import EgressProxy
from runner.errors import ArgumentError
from runner.execution.pool import Pool
from runner.logs import get_logger
from runner.outcome import RunRequest, RunResult, Status
from runner.protocol.arguments import ArgumentParser


async def run_code(
    code: str,
    timeout: float | None = None,  # noqa: ASYNC109  (the run's limit, handed to the pool, not a wait)
    request_id: str | None = None,
    stdin: str = "",
    config: Config | None = None,
) -> RunResult:
    """Run `code` once under the server's limits and return the result (see `RunResult.to_text()`).

    The configuration comes from the RUNNER_* environment unless given, as the server's does
    (`runner.config.load`: from a checkout, its `.sandbox-env` and `.wheelhouse`). For example,
    ``(await run_code("print(1+1)", timeout=5)).to_text()`` is the same text block a tool call returns.
    """
    # `load` opens what it reads; a configuration the caller built (or opened already) is checked the same way.
    opened = load(os.environ).config if config is None else open_environment(config)
    config = dataclasses.replace(opened, pool_size=0)
    request_id = request_id or secrets.token_hex(4)
    arguments: dict[str, object] = {"code": code, "stdin": stdin}
    if timeout is not None:
        arguments["timeout"] = timeout
    try:
        args = ArgumentParser(config).parse(arguments)
    except ArgumentError as exc:
        return RunResult(request_id, Status.INVALID_ARGUMENTS, str(exc))
    # With RUNNER_EGRESS_ALLOW, the run's listener is served by a proxy of this call's own.
    egress = EgressProxy(config.egress, get_logger()) if config.egress_allow else None
    async with Pool.open(config, egress=egress) as pool:
        return await pool.run(RunRequest(request_id, args.code, args.timeout, args.stdin, args.files))

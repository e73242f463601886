"""`load`: the one way every entry point (`python -m runner`, the `python-runner-mcp` command, `run_code`)
gets its configuration, so that they are the same tool: the checkout's defaults, the command line's
choices, the variables read and checked, what they name opened on disk, and the rules between them
(a tokens file or `--insecure-no-auth` to serve HTTP beyond loopback) decided here, once. Every refusal
is a `ConfigError` naming the variable (or the flag); the entry point prints it as one line, exit 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runner.config.disk import open_environment, with_checkout_defaults
from runner.config.tokens import BearerTokens
from runner.config.tools import ToolServers
from runner.config.values import Config, Transport
from runner.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Cli:
    """What the command line decides beside the variables."""

    transport: Transport | None = None  # --transport: over RUNNER_TRANSPORT
    insecure_no_auth: bool = False  # --insecure-no-auth: HTTP beyond loopback without tokens, on purpose


@dataclass(frozen=True, slots=True)
class Deployment:
    """The configuration, read and opened, and what it names read in: each side takes its part."""

    config: Config
    tokens: BearerTokens | None = None  # RUNNER_AUTH_TOKENS_FILE's, when serving HTTP with one
    tools: ToolServers | None = None  # RUNNER_TOOLS_CONFIG's downstream servers, when it names a file


def load(environ: Mapping[str, str], cli: Cli = Cli()) -> Deployment:
    """The deployment `environ` (RUNNER_* variables; the checkout's package environment and wheelhouse
    where those are not set) and `cli` describe, opened; `ConfigError` for anything that must stop it."""
    variables = with_checkout_defaults(environ)
    if cli.transport:
        variables["RUNNER_TRANSPORT"] = cli.transport
    config = open_environment(Config.from_env(variables))
    tools = ToolServers.read(config.tools_config) if config.tools_config else None
    if config.transport != "http":
        if cli.insecure_no_auth:
            raise ConfigError("--insecure-no-auth", "applies to --transport http only")
        return Deployment(config, tools=tools)
    http = config.http
    tokens = BearerTokens.read(http.tokens_file) if http.tokens_file else None
    if tokens is None and not http.loopback and not cli.insecure_no_auth:
        raise ConfigError(
            "RUNNER_AUTH_TOKENS_FILE",
            f"required to serve HTTP on {http.host}, which is not a loopback address: without tokens anyone who "
            "reaches the port runs code here. Give a tokens file, or --insecure-no-auth if something in front "
            "of the server authenticates every request",
        )
    return Deployment(config, tokens, tools)

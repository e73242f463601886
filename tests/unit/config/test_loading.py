"""`load`: every entry point's configuration, with the command line's choices and the rules between
variables decided in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.config import Cli, load
from runner.errors import ConfigError

BARE = {"RUNNER_PACKAGES": "", "RUNNER_WHEELHOUSE": ""}


def test_the_command_line_s_transport_wins_over_the_variable_and_stdio_needs_no_tokens() -> None:
    assert load({**BARE, "RUNNER_TRANSPORT": "http"}, Cli("stdio")).config.transport == "stdio"
    deployment = load({**BARE, "RUNNER_TRANSPORT": "stdio"}, Cli("http"))
    assert (deployment.config.transport, deployment.tokens) == ("http", None)


def test_http_beyond_loopback_needs_tokens_or_insecure_no_auth_which_stdio_refuses(tmp_path: Path) -> None:
    public = {**BARE, "RUNNER_HTTP_HOST": "0.0.0.0", "RUNNER_HTTP_ALLOWED_HOSTS": "runner.example:*"}
    with pytest.raises(ConfigError, match=r"^RUNNER_AUTH_TOKENS_FILE: required to serve HTTP on 0\.0\.0\.0"):
        load(public, Cli("http"))
    assert load(public, Cli("http", insecure_no_auth=True)).tokens is None
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:" + "a" * 20 + "\n")
    tokens.chmod(0o600)
    assert load({**public, "RUNNER_AUTH_TOKENS_FILE": str(tokens)}, Cli("http")).tokens is not None
    with pytest.raises(ConfigError, match=r"^--insecure-no-auth: applies to --transport http only"):
        load(BARE, Cli(insecure_no_auth=True))


def test_the_checkout_s_environments_are_taken_where_the_variables_are_not_set_at_all() -> None:
    # Set, even empty, a variable is kept; unset, a checkout's built .sandbox-env is taken (when built).
    assert load(BARE).config.packages == ""
    checkout = Path(__file__).resolve().parents[3]
    if not (checkout / ".sandbox-env" / ".built").is_file():
        pytest.skip("no .sandbox-env in this checkout: make run builds it")
    assert load({"RUNNER_WHEELHOUSE": ""}).config.packages == str(checkout / ".sandbox-env")

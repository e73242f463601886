"""The HTTP transport's settings and tokens, without a server: parsing, refusals, and a
comparison of tokens that does not stop at the first difference."""

from __future__ import annotations

import asyncio
import hmac
import os
import re
import socket
import statistics
import time
from pathlib import Path

import pytest

from runner.config import Config
from runner.errors import ConfigError
from runner.transports.auth import BearerTokens
from runner.transports.http import listening

HTTP = {"RUNNER_TRANSPORT": "http"}


def test_http_defaults_are_loopback_with_localhost_hosts_and_origins() -> None:
    http = Config.from_env(HTTP).http
    assert (http.host, http.port, http.path) == ("127.0.0.1", 8000, "/mcp")
    assert http.allowed_hosts == ("127.0.0.1:*", "localhost:*", "[::1]:*")
    assert http.allowed_origins == ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")
    assert http.loopback
    assert http.max_body_bytes == Config.from_env({}).max_message_bytes, "the stdio line bound by default"
    assert http.shutdown_grace == 10


def test_a_stdio_server_ignores_the_http_settings() -> None:
    config = Config.from_env({"RUNNER_HTTP_PORT": "not a port", "RUNNER_HTTP_HOST": "0.0.0.0"})
    assert config.transport == "stdio"


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("RUNNER_TRANSPORT", "websocket", "expected one of stdio|http"),
        ("RUNNER_HTTP_PORT", "70000", "expected an integer from 0 to 65535"),
        ("RUNNER_HTTP_PATH", "mcp", "expected a path such as /mcp"),
        ("RUNNER_HTTP_PATH", "/metrics", "not one of /healthz, /readyz, /metrics"),
        ("RUNNER_HTTP_ALLOWED_HOSTS", "good:80,bad/path", "expected comma-separated host[:port] values"),
        ("RUNNER_HTTP_ALLOWED_ORIGINS", "localhost:3000", "scheme://host[:port] origins"),
        ("RUNNER_AUTH_TOKENS_FILE", "relative/tokens", "expected an absolute path to a file"),
        ("RUNNER_SHUTDOWN_GRACE", "-1", "expected an integer from 0 to 3600"),
        ("RUNNER_HTTP_MAX_CONCURRENT_PER_TOKEN", "x", "expected an integer"),
    ],
)
def test_a_bad_http_setting_is_refused_naming_the_variable(variable: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)) as raised:
        Config.from_env({**HTTP, variable: value})
    assert raised.value.variable == variable


def test_a_public_address_needs_the_host_names_clients_use() -> None:
    with pytest.raises(ConfigError, match="required when RUNNER_HTTP_HOST") as raised:
        Config.from_env({**HTTP, "RUNNER_HTTP_HOST": "0.0.0.0"})
    assert raised.value.variable == "RUNNER_HTTP_ALLOWED_HOSTS"
    http = Config.from_env({**HTTP, "RUNNER_HTTP_HOST": "0.0.0.0", "RUNNER_HTTP_ALLOWED_HOSTS": "runner:8000"}).http
    assert http.allowed_hosts == ("runner:8000",)
    assert http.allowed_origins == (), "no browser origin unless configured"
    assert not http.loopback


def test_tokens_are_named_by_their_line_or_their_prefix_and_never_kept() -> None:
    text = "# comment\n\nalice:aaaaaaaaaaaaaaaaaaaaaa\nbbbbbbbbbbbbbbbbbbbbbbbb\n"
    tokens = BearerTokens.parse(text)
    assert tokens.names == ("alice", "token-4")
    assert tokens.name_of(b"aaaaaaaaaaaaaaaaaaaaaa") == "alice"
    assert tokens.name_of(b"bbbbbbbbbbbbbbbbbbbbbbbb") == "token-4"
    assert tokens.name_of(b"aaaaaaaaaaaaaaaaaaaaaX") is None
    assert "aaaaaaaaaaaaaaaaaaaaaa" not in repr(tokens), "only digests are kept"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no token in the file"),
        ("alice:short\n", "line 1: a token is at least 16"),
        ("alice:has a space in it somewhere\n", "line 1: a token is at least 16"),
        ("bad name:aaaaaaaaaaaaaaaaaaaa\n", "line 1: a name is"),
        ("a:aaaaaaaaaaaaaaaaaaaa\nb:aaaaaaaaaaaaaaaaaaaa\n", "line 2: the same token"),
        ("a:aaaaaaaaaaaaaaaaaaaa\na:bbbbbbbbbbbbbbbbbbbb\n", "line 2: the name 'a' is used twice"),
    ],
)
def test_a_bad_tokens_file_is_refused_naming_the_line_but_not_the_token(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        BearerTokens.parse(text)
    assert raised.value.variable == "RUNNER_AUTH_TOKENS_FILE"
    assert "aaaaaaaaaaaaaaaaaaaa" not in str(raised.value)
    assert "short" not in str(raised.value)


def test_an_unreadable_tokens_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        BearerTokens.read(str(tmp_path / "missing"))


def test_a_token_is_compared_with_every_known_token_whatever_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """No early exit: the work done does not tell which token, or how much of one, a guess matched."""
    tokens = BearerTokens.parse("".join(f"t{i}:{chr(97 + i) * 20}\n" for i in range(5)))
    compared: list[int] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(1)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for guess in (b"a" * 20, b"e" * 20, b"a" * 19 + b"b", b"nothing like it at all"):
        compared.clear()
        tokens.name_of(guess)
        assert len(compared) == 5, guess


def test_checking_a_token_takes_as_long_whatever_prefix_a_guess_shares_within_noise() -> None:
    secret = "s3cr3t-" + "x" * 40
    tokens = BearerTokens.parse(f"team:{secret}\n")
    near = (secret[:-1] + "y").encode()  # all but the last character right
    far = ("z" + secret[1:]).encode()  # the first character wrong
    rounds: dict[bytes, list[float]] = {near: [], far: []}
    for _ in range(15):
        for guess in (near, far):
            start = time.perf_counter_ns()
            for _ in range(500):
                tokens.name_of(guess)
            rounds[guess].append((time.perf_counter_ns() - start) / 500)
    ratio = statistics.median(rounds[near]) / statistics.median(rounds[far])
    assert 0.7 < ratio < 1.4, f"near/far time ratio {ratio:.2f}"


@pytest.mark.anyio
@pytest.mark.parametrize("shared", [False, True], ids=["own socket", "a worker's inherited socket"])
async def test_connections_on_the_listening_socket_send_without_delay(shared: bool) -> None:
    """TCP_NODELAY on every accepted connection (asyncio sets it only for a socket that says IPPROTO_TCP):
    without it each answer on a kept-alive connection waited ~40 ms for the client's delayed ACK."""
    own = listening("127.0.0.1", 0)
    sock = socket.socket(fileno=os.dup(own.fileno())) if shared else own
    seen: list[int] = []

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    with own, sock:
        server = await asyncio.start_server(accepted, sock=sock)
        async with server:
            reader, writer = await asyncio.open_connection(*own.getsockname()[:2])
            await reader.read()
            writer.close()
    [nodelay] = seen
    assert nodelay != 0


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("127.example.com", False),
        ("10.0.0.1", False),
    ],
)
def test_only_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    """A name that merely starts like one (127.example.com) could resolve anywhere."""
    env = {**HTTP, "RUNNER_HTTP_HOST": host, "RUNNER_HTTP_ALLOWED_HOSTS": "runner:*"}
    assert Config.from_env(env).http.loopback is loopback

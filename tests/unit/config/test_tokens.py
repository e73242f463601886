"""The HTTP transport's bearer tokens, without a server: the tokens file parsed and refused, and a
comparison of tokens that does not stop at the first difference."""

from __future__ import annotations

import hmac
import time
from pathlib import Path

import pytest

from runner.config.tokens import BearerTokens
from runner.errors import ConfigError


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
    for _ in range(40):
        for guess in (near, far):
            start = time.perf_counter_ns()
            for _ in range(200):
                tokens.name_of(guess)
            rounds[guess].append((time.perf_counter_ns() - start) / 200)
    # The fastest round of each: a shared machine's noise only ever adds time, so the least time is each
    # guess's own (the median of 15 rounds once said 1.4x on a busy machine, nothing changed).
    ratio = min(rounds[near]) / min(rounds[far])
    assert 0.7 < ratio < 1.4, f"near/far time ratio {ratio:.2f}"


def test_a_tokens_file_that_begins_with_a_byte_order_mark_is_read_as_without_it(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_bytes(b"\xef\xbb\xbfalice:" + b"a" * 32 + b"\r\n")
    assert BearerTokens.read(str(path)).names == ("alice",)

"""What a tools file entry gives its server to hold, looked for without a server: in errors and lines
every value, in a tool's results those named or sent as credentials."""

from __future__ import annotations

import json

import pytest

from runner.config.tools import Downstream
from runner.tools.credentials import Credentials

KEY = "sk-live-0123456789abcdef"
TOKEN = "tok-0123456789abcdef"


def _http_server(*headers: tuple[str, str]) -> Downstream:
    """An HTTP server's entry with `headers`, every tool."""
    return Downstream("s", "s", ("*",), None, url="http://h/mcp", headers=headers)


def test_a_result_has_header_values_their_tokens_and_env_values_named_as_credentials_masked_in_its_strings() -> None:
    # Found by a review: "Bearer <token>" was masked only whole, so the token alone passed.
    server = _http_server(("Authorization", f"Bearer {TOKEN}"))
    told = Credentials(server)
    value = {"auth": f"Bearer {TOKEN}", "token": TOKEN, "nested": [{TOKEN: "as a key"}], "n": 12345678}
    assert told.in_result(json.dumps(value))
    assert told.masked_result(value) == {"auth": "***", "token": "***", "nested": [{"***": "as a key"}], "n": 12345678}


def test_an_env_value_is_looked_for_in_results_where_its_name_says_it_is_a_credential() -> None:
    server = Downstream(
        "s", "s", ("*",), None, command="x", env=(("API_KEY", KEY), ("ZONE", "Europe/Istanbul"), ("PIN_KEY", "1234"))
    )
    told = Credentials(server)
    masked = told.masked_result([f"the key {KEY}", "Europe/Istanbul", "1234"])
    assert masked == ["the key ***", "Europe/Istanbul", "1234"]
    assert not told.in_result(json.dumps(["Europe/Istanbul", "1234"]))  # not named so, or too short to be one
    assert told.scrubbed("Europe/Istanbul and 1234 in an error") == "*** and *** in an error"  # errors: every value


def test_a_headers_token_after_its_scheme_is_masked_in_errors_and_lines_too() -> None:
    # Found by a review of the claims: the token alone was masked in results, not in errors (an HTTP
    # server's "invalid token tok-…" reached the run's ToolError and the log).
    server = _http_server(("Authorization", f"Bearer {TOKEN}"))
    told = Credentials(server)
    assert told.scrubbed(f"401: invalid token {TOKEN}") == "401: invalid token ***"
    assert told.scrubbed(f"the header was Bearer {TOKEN}") == "the header was ***"


@pytest.mark.parametrize(
    "name",
    [
        "API_KEY",
        "GH_TOKEN",
        "CLIENT_SECRET",
        "DB_PASSWORD",
        "PWD_HASH",
        "AUTH",
        "AWS_CREDENTIALS",
        "PRIVATE_PEM",
        "COOKIE",
        "SESSION_ID",
        "api_key",
    ],
)
def test_each_name_the_docs_give_marks_an_env_value_as_a_credential_in_results(name: str) -> None:
    server = Downstream("s", "s", ("*",), None, command="x", env=((name, KEY),))
    told = Credentials(server)
    assert told.in_result(json.dumps({"v": KEY}))
    assert told.masked_result({"v": f"is {KEY}"}) == {"v": "is ***"}


def test_only_a_credential_headers_value_after_its_scheme_is_looked_for_on_its_own() -> None:
    # Found by a review: the last word of every header was, so "X-Title: Acme Internal Server" masked
    # "Internal *** Error"; and a parameter's value ("token=...") was not.
    server = _http_server(("X-Title", "Acme Internal Server"), ("Authorization", f'Custom token="{TOKEN}", realm=prod'))
    told = Credentials(server)
    assert told.scrubbed("500 Internal Server Error") == "500 Internal Server Error"
    assert told.scrubbed(f"bad token {TOKEN}") == "bad token ***"


@pytest.mark.parametrize("secret", ['pa"ss\\word-0123456789', "tab\there-0123456789", "p\u00e4ssw\u00f6rd-0123456789"])
def test_a_credential_a_tool_tells_escaped_as_json_text_is_masked_in_its_result(secret: str) -> None:
    # Found by a review: server-everything's get_env answers its environment as JSON text; a credential
    # with a character JSON escapes reached the run escaped, unmasked (then unescaped by a json.loads).
    told = Credentials(Downstream("s", "s", ("*",), None, command="x", env=(("MY_TOKEN", secret),)))
    for text in (json.dumps({"MY_TOKEN": secret}), json.dumps({"MY_TOKEN": secret}, ensure_ascii=False), repr(secret)):
        assert told.in_result(json.dumps([text])), text
        [masked] = told.masked_result([text])
        assert "***" in masked, masked
        spelt = (secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1])
        assert not any(spelling in masked for spelling in spelt), masked


@pytest.mark.parametrize(
    ("secret", "text"),
    [
        # Go's encoding/json, HTML-safe by default: & < > in hex.
        ("s3cr&t<key>-0123456789", '{"MY_TOKEN":"s3cr\\u0026t\\u003ckey\\u003e-0123456789"}'),
        # PHP's json_encode: / escaped (base64 and AWS's secret keys have it).
        ("wJalrXUtnFEMI/K7MDENG/bPxRfiCY", '{"MY_TOKEN":"wJalrXUtnFEMI\\/K7MDENG\\/bPxRfiCY"}'),
        ("a/b&c-0123456789", '{"MY_TOKEN":"a\\/b\\u0026c-0123456789"}'),
        # Found by a second look: .NET's System.Text.Json (`+`), Gson (`=`, `'`), PHP's JSON_HEX_TAG (upper
        # case), and non-ASCII escaped in upper case.
        ("dGVzdA+key+0123456789", '{"MY_TOKEN":"dGVzdA\\u002Bkey\\u002B0123456789"}'),
        ("c2VjcmV0LXRva2Vu'==", '{"MY_TOKEN":"c2VjcmV0LXRva2Vu\\u0027\\u003d\\u003d"}'),
        ("p\u00e4ss<0123456789>", '{"MY_TOKEN":"p\\u00E4ss\\u003C0123456789\\u003E"}'),
        # By another: .NET's quote, an upper-case surrogate pair, a control in hex.
        ('pa"ss+word12', '{"MY_TOKEN":"pa\\u0022ss\\u002Bword12"}'),
        ("key\U0001f600-0123456789", '{"MY_TOKEN":"key\\uD83D\\uDE00-0123456789"}'),
        ("tab\there-0123456789", '{"MY_TOKEN":"tab\\u0009here-0123456789"}'),
    ],
    ids=["go", "php", "both", "dotnet", "gson", "upper-case", "dotnet-quote", "surrogates", "control"],
)
def test_a_credential_another_languages_json_encoder_escaped_in_a_result_is_masked(secret: str, text: str) -> None:
    # Found by a review, left for a turn: only Python's own escapes were recognised; a Go or PHP tool
    # server's JSON text of its environment passed a credential with `&` or `/` unmasked. What the text
    # escapes otherwise, and what JSON needs escaped, stays as it was.
    told = Credentials(Downstream("s", "s", ("*",), None, command="x", env=(("MY_TOKEN", secret),)))
    assert told.in_result(json.dumps([text]))
    assert told.masked_result([text]) == ['{"MY_TOKEN":"***"}']
    other = r'{"PATH":"C:\\u0041\/bin \u0022q\u0022 \u00E4 \\/"}'
    [masked] = told.masked_result([text[:-1] + ", " + other[1:]])
    assert masked == '{"MY_TOKEN":"***", ' + other[1:], "the rest as it was"

"""What the tools file gives a downstream server to hold, its `env` and `headers` (credentials), kept
out of what runs and the log see: every value masked in an error, a stderr line or the SDK's warnings;
and, in a tool's results, every header's and every `env` value whose variable's name says it is one."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from runner.config import Downstream

MIN_SAID = 4  # the fewest characters of a value looked for in errors and lines: shorter ones are no secret
# An `env` variable whose value a tool's result may not pass on to a run, by its name; and the fewest
# characters such a value (or a header's) must have to be looked for there.
CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|PWD|AUTH|CREDENTIAL|PRIVATE|COOKIE|SESSION", re.IGNORECASE)
MIN_IN_RESULTS = 8
_CREDENTIAL_HEADER = re.compile(r"^(?:PROXY-)?AUTHORIZATION$|" + CREDENTIAL_NAME.pattern, re.IGNORECASE)


class Credentials:
    """One server entry's credentials, as they are looked for."""

    __slots__ = ("_in_listing", "_in_listing_dumped", "_in_results", "_in_results_dumped", "secrets")

    def __init__(self, server: Downstream) -> None:
        # A credential header's value after its scheme too ("Bearer <token>": the token alone, which a
        # server's error may echo without its scheme; found by reviews, in results and then in errors),
        # and each of its parameters' values ('Digest username="u", response="..."'). Only a credential
        # header's: the last word of any header (X-Title: Acme Internal Server) masked words of errors.
        schemed = {
            part for name, value in server.headers if _CREDENTIAL_HEADER.search(name) for part in _after_scheme(value)
        }
        # Never in a reason it is down, an error or the log.
        every = {value for _, value in (*server.env, *server.headers)} | schemed
        self.secrets = _spellings(value for value in every if len(value) >= MIN_SAID)
        # Nor in a tool's result (`masked_result`): a header's, and an `env` value named as a credential.
        # Not the rest: a result may well hold what else the file gives its server (a filesystem
        # server's directory, a time zone), and a run would get it garbled.
        told = {value for name, value in server.env if CREDENTIAL_NAME.search(name)} | {v for _, v in server.headers}
        told |= schemed
        # As they are and escaped: a tool that tells its environment as JSON text escapes them (found by
        # a review: `pa"ss\\word` and a tab reached the run as `pa\\"ss\\\\word`, to be unescaped).
        self._in_results = _spellings(value for value in told if len(value) >= MIN_IN_RESULTS)
        self._in_results_dumped = [json.dumps(value)[1:-1] for value in self._in_results]  # as a result's JSON has them
        # Nor in its tools' descriptions and schemas (`masked_listing`), where only those named as
        # credentials are looked for: a credential header's, an `env` value named so.
        named = {value for name, value in server.env if CREDENTIAL_NAME.search(name)} | schemed
        named |= {value for name, value in server.headers if _CREDENTIAL_HEADER.search(name)}
        self._in_listing = _spellings(value for value in named if len(value) >= MIN_IN_RESULTS)
        self._in_listing_dumped = [json.dumps(value)[1:-1] for value in self._in_listing]

    def scrubbed(self, text: str, whole: bool = True) -> str:
        """`text` with every credential replaced by ``***``; if it is the head of a longer text (not
        `whole`), less its end, which could be the start of one (the longest first)."""
        text = masked(text, self.secrets)
        return text if whole or not self.secrets else text[: max(0, len(text) - len(self.secrets[0]) + 1)]

    def in_result(self, dumped: str) -> bool:
        """Whether a result dumped to JSON (`dumped`) may hold a credential its results may not pass on:
        looked for in the dump, at C's pace (a walk of a result of records would be Python's)."""
        return any(spelt in dumped for spelt in self._in_results_dumped)

    def masked_result(self, value: Any) -> Any:
        """`value` (a tool's result as a run gets it) with each credential its results may not pass on
        replaced by ``***`` in its strings, its keys too; anything else as it is. Its strings, not its
        JSON: a credential of digits could be a number there, which would then not parse.
        RecursionError past Python's depth."""
        return _masked_value(value, self._in_results)

    def masked_listing(self, value: Any) -> Any:
        """`value` (a listed tool's description and schemas) with each credential named as one masked
        (found by a review: an API key in a description and in a schema's `default` reached
        `help(mcp_tools)` and every client's tool list). Not every header's value, as in results: a
        schema's `enum` of `production` and `staging` beside an `X-Environment: production` header would
        refuse every call naming it (found by a second look)."""
        if not self._in_listing or not any(s in json.dumps(value, default=str) for s in self._in_listing_dumped):
            return value
        return _masked_value(value, self._in_listing)


def masked(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets` replaced by ``***``, in their order (the longest first, as
    `Credentials.secrets` has them: a credential inside a longer one is not masked first)."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _masked_value(value: Any, secrets: Sequence[str]) -> Any:
    if isinstance(value, str):
        return masked(value, secrets)
    if isinstance(value, list | tuple):
        return [_masked_value(item, secrets) for item in value]
    if isinstance(value, dict):
        return {_masked_value(key, secrets): _masked_value(item, secrets) for key, item in value.items()}
    return value


def _spellings(secrets: Iterable[str]) -> list[str]:
    """Each of `secrets` as it is and as JSON and Python's repr escape it (an error that is no text is
    dumped to JSON before it is masked, a log line may repr it: found by a review, `pa"ss\\word` and
    `pässwörd` passed unmasked, escaped), and as other languages' encoders write it (`_ENCODERS`), the
    longest first."""
    spelt = set()
    for secret in secrets:
        spelt |= {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1]}
        spelt |= {
            _encoded(secret, escaped, ascii_past, upper, slash)
            for escaped, ascii_past, slash in _ENCODERS
            for upper in (False, True)
        }
    return sorted(spelt, key=len, reverse=True)


# How other languages' JSON encoders write a string by default, as (the characters they escape as
# `\uXXXX` besides what JSON must, whether all past ASCII too, `/` as `\/`), each spelt in either case of
# hex (PHP writes `\u003C` and `\u00e4`). Found by reviews: Go's `\u0026`, PHP's `\/`, .NET's `\u002B`
# and `\u0022`, Gson's `\u003d`, upper-case surrogates spelt a credential past Python's spellings. Looked
# for at C's pace, a spelling each (undoing in Python every escape an encoder might choose cost a result
# 4-10 times its dump, found by a second look, and changed text that was no JSON).
_ENCODERS: tuple[tuple[str, bool, bool], ...] = (
    ("&<>\u2028\u2029", False, False),  # Go's encoding/json
    ("", True, True),  # PHP's json_encode
    ("<>&'\"", True, True),  # PHP's, with JSON_HEX_TAG, _AMP, _APOS, _QUOT
    ("\"&'+<>`", True, False),  # .NET's System.Text.Json
    ("<>&='", False, False),  # Gson
    ("\b\f\n\r\t", True, False),  # others: all past ASCII and every control in hex
)


def _encoded(secret: str, escaped: str, past_ascii: bool, upper: bool, slash: bool) -> str:
    """`secret` as a JSON encoder that escapes `escaped` (and what JSON must), and every character past
    ASCII if `past_ascii`, in upper-case hex if `upper`, and `/` if `slash`, writes it."""
    spelt: list[str] = []
    for char in secret:
        code = ord(char)
        if char in escaped or (code < 0x20 and char not in "\b\f\n\r\t") or (past_ascii and code > 0x7E):
            units = [code] if code <= 0xFFFF else [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + (code & 0x3FF)]
            spelt.extend(f"\\u{unit:04X}" if upper else f"\\u{unit:04x}" for unit in units)
        elif char in '"\\\b\f\n\r\t':
            spelt.append(json.dumps(char)[1:-1])
        elif char == "/" and slash:
            spelt.append("\\/")
        else:
            spelt.append(char)
    return "".join(spelt)


def _after_scheme(value: str) -> set[str]:
    """What a credential header's `value` holds after its scheme: all of it, and each parameter's value."""
    _, _, rest = value.strip().partition(" ")
    rest = rest.strip()
    if not rest:
        return set()
    found = {rest}
    for parameter in rest.split(","):
        _, equals, said = parameter.partition("=")
        if equals:
            found.add(said.strip().strip('"'))
    return found

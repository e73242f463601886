"""The tokens file of the HTTP transport (RUNNER_AUTH_TOKENS_FILE), read at start into the names and
SHA-256 digests of its tokens: the tokens themselves are not kept, and a refusal names a line, never a
token. Checking a request's token against them is the transport's (`runner.transports.auth`).

A token is compared in time that does not depend on how much of it a guess got right: every
candidate is hashed, and the digest is compared with every known token's digest, all of them,
with `hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from runner.errors import ConfigError

MIN_TOKEN_CHARS = 16
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_TOKEN = re.compile(r"[\x21-\x7e]+")  # RFC 6750's b64token is narrower; any visible ASCII is accepted


@dataclass(frozen=True, slots=True)
class BearerTokens:
    """The known tokens, as (name, SHA-256 digest) pairs; the tokens themselves are not kept."""

    digests: tuple[tuple[str, bytes], ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The tokens' names, in the file's order."""
        return tuple(name for name, _ in self.digests)

    @classmethod
    def parse(cls, text: str, source: str = "RUNNER_AUTH_TOKENS_FILE") -> BearerTokens:
        """One token per line, ``name:token`` or ``token`` (named token-N by its line); blank lines and
        lines starting with # are skipped. Raises `ConfigError` naming the line, never echoing a token."""
        digests: list[tuple[str, bytes]] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            name, colon, token = line.partition(":")
            if not colon:
                name, token = f"token-{number}", line
            if not _NAME.fullmatch(name):
                raise ConfigError(source, f"line {number}: a name is 1-64 letters, digits, '_', '.' or '-'")
            if not _TOKEN.fullmatch(token) or len(token) < MIN_TOKEN_CHARS:
                raise ConfigError(
                    source, f"line {number}: a token is at least {MIN_TOKEN_CHARS} visible ASCII characters, no spaces"
                )
            digest = _digest(token.encode())
            if any(hmac.compare_digest(digest, known) for _, known in digests):
                raise ConfigError(source, f"line {number}: the same token as an earlier line")
            if name in (known for known, _ in digests):
                raise ConfigError(source, f"line {number}: the name {name!r} is used twice")
            digests.append((name, digest))
        if not digests:
            raise ConfigError(source, "no token in the file")
        return cls(tuple(digests))

    @classmethod
    def read(cls, path: str) -> BearerTokens:
        """Parse the file at `path` (RUNNER_AUTH_TOKENS_FILE)."""
        try:
            # utf-8-sig: a byte-order mark (Notepad's) is not part of the first name (found by a first hour:
            # "line 1: a name is 1-64 letters ..." for a file that began "alice:").
            with open(path, encoding="utf-8-sig") as file:
                return cls.parse(file.read())
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError("RUNNER_AUTH_TOKENS_FILE", f"cannot read {path!r}: {exc}") from None

    def name_of(self, token: bytes) -> str | None:
        """The name of `token`, or None. Compares with every known token, whatever matches."""
        digest = _digest(token)
        found = None
        for name, known in self.digests:
            if hmac.compare_digest(digest, known):
                found = name
        return found


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()

"""What a run's request through the proxy asks for, taken from its head without I/O: the host and port a
``CONNECT`` names, or the host, port and origin-form target of a plain-HTTP request in absolute form,
whose ``Host`` must name the same host (`target_of`); the head sent on for the latter
(`upstream_headers`); and which of a target's addresses may be reached (`own_address`, `reachable`).
Every byte of it is the run's: anything malformed is a `Refusal` with the status to answer, never an
exception.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from runner.config.egress import EgressAllow, host_form

# Headers that belong to one hop (RFC 9110 7.6.1) and the proxy's own: not sent on. `Connection: close`
# is sent instead, so that each request the run makes is checked on its own.
HOP_BY_HOP = frozenset(
    (
        b"connection",
        b"proxy-connection",
        b"keep-alive",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    )
)


# What `Connection` may not name away: the host, and the body's framing.
FRAMING = frozenset((b"host", b"content-length", b"transfer-encoding"))


@dataclass(frozen=True, slots=True)
class Target:
    """Where a request goes: `host` in `host_form`, its port, and for plain HTTP the origin-form target."""

    host: str
    port: int
    tunnel: bool  # CONNECT: bytes both ways once answered, TLS not terminated
    path: bytes = b""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request the proxy answers itself: the status and one line saying why."""

    status: int
    reason: str
    host: str = ""  # what it named, when it named something (for the log and the result)
    port: int = 0


def target_of(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> Target | Refusal:
    """The `Target` of a request head (h11's lower-cased header names), or why it has none."""
    if method == b"CONNECT":
        return _authority(target)
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError:
        return Refusal(400, "the request target is not ASCII")
    if not text.lower().startswith("http://"):
        if text.lower().startswith("https://"):
            return Refusal(400, "an https:// URL goes through CONNECT (HTTPS_PROXY), not as a plain request")
        return Refusal(400, "a request to a proxy names its URL in full (http://host/path)")
    try:
        url = urlsplit(text)
        port = 80 if url.port is None else url.port  # not `or`: port 0 was taken as 80 (found by a review)
    except ValueError:
        return Refusal(400, "the request's URL has no valid host and port")
    if not port:
        return Refusal(400, "the request's URL has port 0")
    if url.username is not None or url.password is not None:
        return Refusal(400, "a URL with credentials in it is not sent on")
    host = host_form(url.hostname or "")
    if host is None:
        return Refusal(400, "the request's URL has no valid host")
    hosts = [value for name, value in headers if name == b"host"]
    named = _host_of(hosts[0]) if len(hosts) == 1 else None
    if named is None or (named[0], named[1] or 80) != (host, port):
        return Refusal(400, "the Host header does not name the URL's host and port", host, port)
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    return Target(host, port, tunnel=False, path=path.encode("ascii"))


def upstream_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A plain request's headers as sent on: hop-by-hop ones and those `Connection` names left out (but
    the host and the framing), `Expect` too (the proxy answers 100-continue itself), `Connection: close`
    added. The body keeps its framing: `Content-Length` as it was, a chunked body chunked again (h11 decodes
    it from the run and encodes it to the upstream; a `Content-Length` beside it is dropped, RFC 9112 6.3)."""
    named = {token.strip().lower() for name, value in headers if name == b"connection" for token in value.split(b",")}
    chunked = any(name == b"transfer-encoding" for name, _ in headers)
    dropped = HOP_BY_HOP | (named - FRAMING) | {b"expect"} | ({b"content-length"} if chunked else set())
    kept = [(name, value) for name, value in headers if name not in dropped]
    if chunked:
        kept.append((b"transfer-encoding", b"chunked"))
    kept.append((b"connection", b"close"))
    return kept


def own_address(allow: EgressAllow, host: str, port: int) -> list[str] | Refusal | None:
    """For a host that is an IP address, itself, if the list names it (and not one off the public
    internet unless listed from within its block), else why not; None for a name."""
    with contextlib.suppress(ValueError):
        why = allow.refusal_of(ipaddress.ip_address(host), port)
        if why:
            return Refusal(403, f"{host} is {why}, which RUNNER_EGRESS_ALLOW does not list on its own", host, port)
        return [host]
    return None


def reachable(allow: EgressAllow, host: str, port: int, found: Sequence[tuple[Any, ...]]) -> list[str] | Refusal:
    """The addresses a name resolved to (`found`: getaddrinfo's socket addresses) that may be reached,
    each once, in order: less what is off the public internet and not listed from within its block (DNS
    rebinding); none left, why."""
    addresses: list[str] = []
    why = ""
    for sockaddr in found:
        try:
            address = ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])
        except ValueError:
            continue
        refused = allow.refusal_of(address, port)
        if not refused:
            if str(address) not in addresses:
                addresses.append(str(address))
        else:
            why = why or f"{refused} ({address})"
    if addresses:
        return addresses
    return Refusal(
        403, f"{host} resolves to {why or 'no address'}, which RUNNER_EGRESS_ALLOW does not list", host, port
    )


def _authority(target: bytes) -> Target | Refusal:
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError:
        return Refusal(400, "CONNECT's target is not ASCII")
    parsed = _host_of(target)
    if parsed is None or parsed[1] is None:
        return Refusal(400, f"CONNECT names host:port, not {text[:100]!r}")
    return Target(parsed[0], parsed[1], tunnel=True)


def _host_of(value: bytes) -> tuple[str, int | None] | None:
    """A `host[:port]` (a bracketed IPv6 address included) as (host in `host_form`, port or None)."""
    try:
        text = value.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        return None  # an IPv6 address without brackets: its port cannot be told apart
    else:
        host, port_text = text, ""
    if port_text and (not port_text.isdigit() or len(port_text) > 5 or not 1 <= int(port_text) <= 65535):
        return None
    name = host_form(host)
    if name is None:
        return None
    return name, int(port_text) if port_text else None

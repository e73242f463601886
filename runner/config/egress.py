"""RUNNER_EGRESS_ALLOW: the hosts a sandboxed run may reach through the server's proxy, read once at start
into a frozen `EgressAllow` that the proxy asks (`allows`, `lists_address`).

Each entry is ``HOST[:PORT]``: an exact name (``pypi.org``), a subdomain wildcard (``*.example.com``,
which does not match ``example.com`` itself), an IP address or a CIDR (``127.0.0.2``, ``10.1.0.0/16``,
``[2001:db8::1]:443``); ``:PORT`` or ``:*``, and without one, 80 and 443. Names are compared in their
IDNA (ASCII) form, lower case, so ``Bücher.example`` and ``xn--bcher-kva.example`` are one entry.

A name on the list allows the name, not what it resolves to: the proxy connects only to public addresses
of it (`refused_address`), unless that address itself is listed (`lists_address`). An address on the list
is reached as asked, loopback or private included: the operator named it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

import idna

from runner.errors import ConfigError

VARIABLE = "RUNNER_EGRESS_ALLOW"
# Where a run finds the proxy: 127.0.0.1 of its own network namespace, this port (HTTP_PROXY says so).
# Taken by the run's set-up before its code, while it still has its privileges (in bubblewrap, a root
# server's), so its code cannot take it first.
PROXY_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
DEFAULT_PORTS = frozenset((80, 443))
MAX_NAME = 253
_NAME = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)(\.(?!-)[a-z0-9_-]{1,63}(?<!-))*")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class EgressEntry:
    """One entry of the list: what it matches and on which ports (None: any)."""

    text: str  # as the operator wrote it, for the log and the docs
    kind: Literal["name", "wildcard", "network"]
    name: str  # a name's IDNA form; for a wildcard, the suffix after "*."
    network: Network | None
    ports: frozenset[int] | None

    def allows_port(self, port: int) -> bool:
        return self.ports is None or port in self.ports

    def matches_name(self, name: str) -> bool:
        """Whether this entry names `name` (in `host_form`): itself, or a subdomain for a wildcard."""
        if self.kind == "name":
            return name == self.name
        return self.kind == "wildcard" and name.endswith("." + self.name)


@dataclass(frozen=True, slots=True)
class EgressAllow:
    """The parsed list; empty: runs have no network at all."""

    entries: tuple[EgressEntry, ...] = ()

    @classmethod
    def parse(cls, items: tuple[str, ...]) -> EgressAllow:
        """The entries of RUNNER_EGRESS_ALLOW (split at commas); `ConfigError` naming the first bad one."""
        return cls(tuple(_entry(item) for item in items))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def allows(self, host: str, port: int) -> bool:
        """Whether a run may ask for `host` (a name in `host_form`, or an IP address) on `port`."""
        address = _address(host)
        for entry in self.entries:
            if not entry.allows_port(port):
                continue
            if address is not None:
                if entry.network is not None and address in entry.network:
                    return True
            elif (entry.kind == "name" and host == entry.name) or (
                entry.kind == "wildcard" and host.endswith("." + entry.name)
            ):
                return True
        return False

    def lists_address(self, address: Address, port: int) -> bool:
        """Whether `address` (one a name resolved to) is itself on the list for `port`."""
        return any(
            entry.network is not None and entry.allows_port(port) and _unmapped(address) in entry.network
            for entry in self.entries
        )


def host_form(host: str) -> str | None:
    """`host` as entries are compared: an IP address in its canonical text, or a name in IDNA form, lower
    case, without a trailing dot; None if it is neither."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    address = _address(text)
    if address is not None:
        return str(address)
    text = text.rstrip(".").lower()
    if text.isascii():
        # DNS names as they are used, underscores included (IDNA 2008 refuses `_dmarc.example`).
        name = text
    else:
        try:
            name = idna.encode(text, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            return None
    if len(name) > MAX_NAME or not _NAME.fullmatch(name):
        return None
    return name


def refused_address(address: Address) -> str:
    """Why a name's address is not reached unless listed ("" if it may be): not on the public internet
    (loopback, private, shared, link-local with the cloud metadata address, reserved, unspecified) or
    multicast."""
    address = _unmapped(address)
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (cloud metadata lives there)"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "the unspecified address"
    if not address.is_global:
        return "a private or reserved address"
    return ""


def _unmapped(address: Address) -> Address:
    # ::ffff:127.0.0.1 is 127.0.0.1 to the kernel: judged as such.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _address(text: str) -> Address | None:
    try:
        return _unmapped(ipaddress.ip_address(text))
    except ValueError:
        return None


def _entry(item: str) -> EgressEntry:
    host, ports = _split(item)
    if host.startswith("*."):
        name = host_form(host[2:])
        if name is None or _address(name) is not None or "*" in name:
            raise _bad(item, "a wildcard is *. followed by a domain name")
        return EgressEntry(item, "wildcard", name, None, ports)
    if "*" in host:
        raise _bad(item, "a wildcard stands only at the start, as *.example.com")
    if "/" in host:
        try:
            network = ipaddress.ip_network(host, strict=True)
        except ValueError as exc:
            raise _bad(item, f"not a network in CIDR form ({exc})") from None
        return EgressEntry(item, "network", str(network), network, ports)
    address = _address(host)
    if address is not None:
        return EgressEntry(item, "network", str(address), ipaddress.ip_network(address), ports)
    name = host_form(host)
    if name is None:
        raise _bad(item, "not a host name, an IP address or a CIDR")
    return EgressEntry(item, "name", name, None, ports)


def _split(item: str) -> tuple[str, frozenset[int] | None]:
    """An entry's host and its ports."""
    text = item.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise _bad(item, "an IPv6 address opened with [ is closed with ]")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise _bad(item, "expected :PORT after the ]")
        port = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, None  # a name, an IPv4 address, or an IPv6 one (or CIDR) without a port
    if not host:
        raise _bad(item, "no host")
    if port is None:
        return host, DEFAULT_PORTS
    if port == "*":
        return host, None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _bad(item, "the port is 1-65535 or *")
    return host, frozenset((int(port),))


def _bad(item: str, why: str) -> ConfigError:
    return ConfigError(VARIABLE, f"entry {item!r}: {why}")


def proxy_environment() -> dict[str, str]:
    """What a run with egress finds in its environment: the proxy, named in both spellings that clients
    read (urllib, requests, httpx and pip read either), and nothing exempt from it."""
    return {name: PROXY_URL for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}

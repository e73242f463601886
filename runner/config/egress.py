"""RUNNER_EGRESS_ALLOW: the hosts a sandboxed run may reach through the server's proxy, read once at start
into a frozen `EgressAllow` that the proxy asks (`allows`, `refusal_of`).

Each entry is ``HOST[:PORT]``: an exact name (``pypi.org``), a subdomain wildcard (``*.example.com``,
which does not match ``example.com`` itself), an IP address or a CIDR (``127.0.0.2``, ``10.1.0.0/16``,
``[2001:db8::1]:443``); ``:PORT`` or ``:*``, and without one, 80 and 443. Names are compared in their
IDNA (ASCII) form, lower case, so ``Bücher.example`` and ``xn--bcher-kva.example`` are one entry.

A name on the list allows the name, not what it resolves to: the proxy connects only to its public
addresses, or to one off the public internet (`special_block`: loopback, private, link-local, ...) that an
entry lists from within that address's own block (`refusal_of`): ``127.0.0.2`` or ``10.1.0.0/16`` name such
addresses on purpose; ``0.0.0.0/0`` names everything, so none of them. The unspecified address, which
reaches the server's own loopback, is never reached.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
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
            elif entry.matches_name(host):
                return True
        return False

    def refusal_of(self, address: Address, port: int) -> str:
        """Why the proxy may not connect to `address` on `port` ("" if it may): an address a listed name
        resolved to, or one a run named that `allows` let through. A public address may be reached; one
        off the public internet (`special_block`) only where an entry lists it from within its own block
        (``127.0.0.2``, ``10.1.0.0/16``: not ``0.0.0.0/0``, which names everything and so nothing on
        purpose); the unspecified address, which reaches the server's own loopback, never."""
        address = _unmapped(address)
        why, block = special_block(address)
        if not why:
            return ""
        if block is None:
            return why
        for entry in self.entries:
            network = entry.network
            if (
                network is not None
                and entry.allows_port(port)
                and network.version == block.version
                and address in network
                and network.subnet_of(block)  # type: ignore[arg-type]
            ):
                return ""
        return why


# A host whose last label is a number, as WHATWG's URL standard judges it ("ends in a number").
_NUMBERED = re.compile(r"(?:^|\.)(?:[0-9]+|0x[0-9a-f]*)$")


def host_form(host: str) -> str | None:
    """`host` as entries are compared: an IP address in its canonical text, or a name in IDNA form, lower
    case, without a trailing dot; None if it is neither."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    address = _address(text.removesuffix("."))  # `127.0.0.2.` is that address (found by a review)
    if address is not None:
        return str(address)
    text = text.rstrip(".").lower()
    if _NUMBERED.search(text):
        # Not a name: what a resolver takes as an IPv4 address in another spelling (`010.1.0.1` was
        # 8.1.0.1 to glibc where an operator meant 10.1.0.1; `127.1`, `2130706433`, `0x7f.1`).
        return None
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


# The blocks off the public internet, each with why (RFC 6890 and its successors); an address in one is
# reached only where an entry lists it from within its block (`EgressAllow.refusal_of`).
_SPECIAL = tuple(
    (ipaddress.ip_network(block), why)
    for block, why in (
        ("10.0.0.0/8", "a private address"),
        ("100.64.0.0/10", "a shared (carrier NAT) address"),
        ("127.0.0.0/8", "a loopback address"),
        ("169.254.0.0/16", "a link-local address (cloud metadata lives there)"),
        ("168.63.129.16/32", "Azure's platform address (WireServer)"),
        ("172.16.0.0/12", "a private address"),
        ("192.0.0.0/24", "a reserved address"),
        ("192.0.2.0/24", "a documentation address"),
        ("192.88.99.0/24", "a reserved address"),
        ("192.168.0.0/16", "a private address"),
        ("198.18.0.0/15", "a benchmarking address"),
        ("198.51.100.0/24", "a documentation address"),
        ("203.0.113.0/24", "a documentation address"),
        ("224.0.0.0/4", "a multicast address"),
        ("240.0.0.0/4", "a reserved address"),
        ("::1/128", "a loopback address"),
        ("64:ff9b:1::/48", "a translated (NAT64) address"),
        ("100::/64", "a discard address"),
        ("2001::/23", "a reserved address"),
        ("fc00::/7", "a private address"),
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a site-local address"),
        ("ff00::/8", "a multicast address"),
    )
)
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
# IPv6 forms that carry an IPv4 address the packet ends up at: judged as that address.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_LOOPBACK = ipaddress.IPv6Address("::1")
_UNSPECIFIED = (ipaddress.ip_network("0.0.0.0/8"), ipaddress.ip_network("::/128"))


def special_block(address: Address) -> tuple[str, Network | None]:
    """Why `address` is off the public internet and the block it is in ("", None if it is public); the
    unspecified address with no block at all (it is never reached)."""
    address = _unmapped(address)
    if any(address.version == block.version and address in block for block in _UNSPECIFIED):
        return "the unspecified address (this host)", None
    if isinstance(address, ipaddress.IPv6Address):
        carried = None
        # ::1 is in ::/96 too, but it is IPv6's loopback, not 0.0.0.1 carried: judged as itself below
        # (found by a review of the claims: a listed [::1] was refused as the unspecified address).
        if address in _NAT64 or (address in _COMPATIBLE and address != _LOOPBACK):
            carried = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        elif address.sixtofour is not None:
            carried = address.sixtofour
        if carried is not None:
            why, _ = special_block(carried)
            return (f"{why}, carried in an IPv6 one", _NAT64 if address in _NAT64 else None) if why else ("", None)
    for block, why in _SPECIAL:
        if address.version == block.version and address in block:
            return why, block
    if not address.is_global:  # one Python knows of and the table does not: only itself, listed, reaches it
        return "a reserved address", ipaddress.ip_network(address)
    return "", None


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
    # A URL or a path is what an operator copies from a browser: say what to write instead, not that
    # "//pypi.org" is no port.
    if "://" in item:
        netloc = urllib.parse.urlsplit(item.strip()).netloc.rpartition("@")[2]
        raise _bad(item, "an entry is HOST[:PORT], not a URL" + (f": write {netloc!r}" if netloc else ""))
    host, ports = _split(item)
    before_path = host.partition("/")[0]
    if "/" in host and _address(before_path) is None:
        raise _bad(
            item, f"an entry is HOST[:PORT] or a CIDR, without a path (no rule is per path): write {before_path!r}"
        )
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
        if network.version == 6 and network.subnet_of(_MAPPED):  # type: ignore[arg-type]
            # Found by a review: it never matched, since a request's mapped address is judged unmapped.
            raise _bad(item, "an IPv4 network is written as IPv4 (::ffff:10.0.0.0/104 is 10.0.0.0/8)")
        return EgressEntry(item, "network", str(network), network, ports)
    address = _address(host.removesuffix("."))
    if address is not None and address.is_unspecified:
        raise _bad(item, "the unspecified address is never reached (it would be this host)")
    if address is not None:
        return EgressEntry(item, "network", str(address), ipaddress.ip_network(address), ports)
    name = host_form(host)
    if name is None and _NUMBERED.search(host.rstrip(".").lower()):
        raise _bad(item, "an IPv4 address is four numbers from 0 to 255, in decimal without leading zeros")
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

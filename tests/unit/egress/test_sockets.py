"""Which addresses are this host's own, as the proxy judges them for the server's own port."""

from __future__ import annotations

import socket

import pytest

from runner.egress import sockets
from runner.egress.sockets import this_host


def test_loopback_the_unspecified_address_and_the_hosts_local_routes_are_this_host_and_others_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found by a second look: decided by whether a bind worked, which with ip_nonlocal_bind every bind
    # does (8.8.8.8 was this host's). Now no socket is made to decide.
    def no_socket(*args: object, **kwargs: object) -> None:
        raise AssertionError("a socket was made")

    monkeypatch.setattr(socket, "socket", no_socket)
    for address in ("127.0.0.1", "127.0.0.2", "::1", "0.0.0.0", "::", "::ffff:127.0.0.3"):
        assert this_host(address), address
    for address in ("203.0.113.77", "2001:db8::77", "8.8.8.8", "not an address"):
        assert not this_host(address), address


def test_without_a_routing_table_to_read_a_bind_tells(monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by a second look: where /proc/net/fib_trie cannot be read (a sandboxed kernel's procfs), an
    # interface's address was not this host's, and reached the server's own port.
    monkeypatch.setattr(sockets, "_local_networks", lambda: None)
    bound: list[object] = []
    real = socket.socket

    class Recording(real):  # type: ignore[misc, valid-type]
        def bind(self, address: object) -> None:
            bound.append(address)
            super().bind(address)

    monkeypatch.setattr(socket, "socket", Recording)
    assert not this_host("203.0.113.77")
    assert bound == [("203.0.113.77", 0)]

"""Which addresses are this host's own, as the proxy judges them for the server's own port."""

from __future__ import annotations

import socket

import pytest

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

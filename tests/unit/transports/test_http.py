"""What the HTTP transport says of where it serves (`runner.transports.http`): no process."""

from __future__ import annotations

import socket

from runner.transports.http import reached_as, url_of


def test_a_server_bound_to_every_address_names_the_hosts_clients_use_and_one_address_needs_none() -> None:
    # Found by a first hour: http://0.0.0.0:8000/mcp was logged, which no client can use (its Host: 421).
    with socket.socket() as every, socket.socket() as one:
        every.bind(("0.0.0.0", 0))
        one.bind(("127.0.0.1", 0))
        assert reached_as(every, ("mcp.example.com", "10.0.0.5:8000")) == {
            "clients_use_hosts": "mcp.example.com,10.0.0.5:8000"
        }
        assert reached_as(one, ("localhost",)) == {}
        assert url_of(one, "/mcp").startswith("http://127.0.0.1:")

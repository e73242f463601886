"""What of a network namespace's /proc/net files a later run must find as it was made (runner/inrun/networks.py)."""

from __future__ import annotations

import os
from pathlib import Path

from runner.inrun import networks

SOCKSTAT = (
    b"sockets: used 3\n"
    b"TCP: inuse 1 orphan 4 tw 2 alloc 9 mem 113\n"
    b"UDP: inuse 0 mem 7\n"
    b"UDPLITE: inuse 0\n"
    b"RAW: inuse 0\n"
    b"FRAG: inuse 0 memory 0\n"
)


def test_sockstat_is_compared_without_the_counts_that_are_the_host_s() -> None:
    kept = networks.comparable("sockstat", SOCKSTAT)
    assert kept == (
        b"sockets: used 3\nTCP: inuse 1 tw 2\nUDP: inuse 0\nUDPLITE: inuse 0\nRAW: inuse 0\nFRAG: inuse 0 memory 0\n"
    )
    # The host's TCP memory, orphans and allocations move with other namespaces' traffic: no difference.
    busier_host = SOCKSTAT.replace(b"orphan 4", b"orphan 40").replace(b"mem 113", b"mem 9000")
    assert networks.comparable("sockstat", busier_host) == kept


def test_a_socket_or_a_time_wait_in_the_namespace_is_a_difference() -> None:
    kept = networks.comparable("sockstat", SOCKSTAT)
    assert networks.comparable("sockstat", SOCKSTAT.replace(b"used 3", b"used 4")) != kept
    assert networks.comparable("sockstat", SOCKSTAT.replace(b"tw 2", b"tw 3")) != kept


def test_every_other_file_is_compared_whole() -> None:
    snmp = b"Ip: Forwarding OutNoRoutes\nIp: 1 0\n"
    assert networks.comparable("snmp", snmp) == snmp
    assert networks.comparable("sockstat6", b"TCP6: inuse 0\n") == b"TCP6: inuse 0\n"


def test_a_file_is_read_whole_from_its_start_each_time_and_not_past_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"x" * 200_000)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert networks.read_whole(fd) == b"x" * 200_000
        assert networks.read_whole(fd) == b"x" * 200_000  # again from the start
        assert networks.read_whole(fd, limit=100_000) is None
    finally:
        os.close(fd)


def test_the_caller_s_namespace_as_watched_is_as_made_until_something_in_it_changes() -> None:
    watch = networks.Watch()
    try:
        assert [name for name, _ in watch.files][:1] == ["sockstat"]  # the sockets first: the likeliest trace
        assert {name for name, _ in watch.files} >= {"snmp", "netstat", "dev", "route"}
        watch.made[0] = b"not what the file says"
        assert not watch.as_made()
    finally:
        for _, fd in watch.files:
            os.close(fd)

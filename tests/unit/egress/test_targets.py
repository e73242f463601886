"""A run's request head taken apart without I/O: where CONNECT and absolute-form requests go, what is
refused as malformed, and the head sent on."""

from __future__ import annotations

import pytest

from runner.egress.targets import Refusal, Target, target_of, upstream_headers


def test_connect_names_a_host_and_port_in_host_form() -> None:
    assert target_of(b"CONNECT", b"PyPI.org:443", [(b"host", b"pypi.org:443")]) == Target("pypi.org", 443, True)
    assert target_of(b"CONNECT", b"[::1]:8443", []) == Target("::1", 8443, True)


@pytest.mark.parametrize("target", [b"pypi.org", b"pypi.org:", b"pypi.org:99999", b"::1:443", b"\xff:443", b"a b:1"])
def test_a_connect_without_a_valid_host_and_port_is_a_400(target: bytes) -> None:
    refused = target_of(b"CONNECT", target, [])
    assert isinstance(refused, Refusal)
    assert refused.status == 400


def test_a_plain_request_in_absolute_form_goes_to_its_urls_host_in_origin_form() -> None:
    got = target_of(b"GET", b"http://Example.com:8080/a/b?q=1", [(b"host", b"example.com:8080")])
    assert got == Target("example.com", 8080, False, b"/a/b?q=1")
    assert target_of(b"GET", b"http://example.com", [(b"host", b"example.com")]) == Target(
        "example.com", 80, False, b"/"
    )


@pytest.mark.parametrize(
    ("target", "hosts", "said"),
    [
        (b"/a", [(b"host", b"example.com")], "names its URL in full"),
        (b"https://example.com/", [(b"host", b"example.com")], "through CONNECT"),
        (b"http://example.com/", [(b"host", b"other.com")], "Host header does not name"),
        (b"http://example.com/", [(b"host", b"example.com:81")], "Host header does not name"),
        (b"http://example.com/", [], "Host header does not name"),
        (b"http://example.com/", [(b"host", b"example.com"), (b"host", b"example.com")], "Host header"),
        (b"http://user:pw@example.com/", [(b"host", b"example.com")], "credentials"),
        (b"http://exa mple.com/", [(b"host", b"exa mple.com")], "no valid host"),
        # Found by a review: port 0 was taken as 80.
        (b"http://example.com:0/", [(b"host", b"example.com:0")], "port 0"),
    ],
)
def test_a_plain_request_whose_host_is_in_doubt_is_a_400(
    target: bytes, hosts: list[tuple[bytes, bytes]], said: str
) -> None:
    refused = target_of(b"GET", target, hosts)
    assert isinstance(refused, Refusal)
    assert refused.status == 400
    assert said in refused.reason


def test_the_head_sent_on_drops_hop_by_hop_headers_and_what_connection_names() -> None:
    headers = [
        (b"host", b"example.com"),
        (b"proxy-authorization", b"Basic x"),
        (b"proxy-connection", b"keep-alive"),
        (b"connection", b"keep-alive, x-private"),
        (b"x-private", b"1"),
        (b"content-length", b"5"),
        (b"accept", b"*/*"),
    ]
    assert upstream_headers(headers) == [
        (b"host", b"example.com"),
        (b"content-length", b"5"),
        (b"accept", b"*/*"),
        (b"connection", b"close"),
    ]


def test_a_chunked_body_is_sent_on_chunked() -> None:
    sent = upstream_headers([(b"host", b"a"), (b"transfer-encoding", b"chunked")])
    assert sent == [(b"host", b"a"), (b"transfer-encoding", b"chunked"), (b"connection", b"close")]

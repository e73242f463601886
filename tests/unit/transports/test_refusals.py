"""The answers that replace the SDK's 421, 403 and 413 bodies (runner/transports/refusals.py)."""

from __future__ import annotations

from runner.config import HttpConfig
from runner.transports.refusals import explained


def test_a_refused_host_or_origin_of_64_kib_is_said_back_cut_saying_so() -> None:
    # Found by a review: whatever Host or Origin a client sent was said back whole in the answer.
    http = HttpConfig(allowed_hosts=("runner.example:8000",), allowed_origins=("https://app.example",))
    huge = b"h" * 65536
    host, _ = explained(421, {b"host": huge}, http)
    origin, _ = explained(403, {b"origin": huge}, http)
    for why in (host, origin):
        assert len(why) < 500, len(why)
        assert "hhh... (cut: 65,536 characters)" in why

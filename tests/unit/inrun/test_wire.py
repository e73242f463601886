"""The in-run wire on its own: the frames between the server and a run interpreter, without processes."""

from __future__ import annotations

import json

from runner.inrun.wire import report_length


def report(head: dict[str, object], blobs: bytes = b"") -> bytes:
    encoded = json.dumps(head).encode()
    return b"report %d %d\n" % (len(encoded), len(blobs)) + encoded + blobs


def test_a_report_is_whole_when_its_first_line_says_so() -> None:
    data = report({"result": "1"}, b"xy")
    assert report_length(data[:5]) is None
    assert report_length(data) == len(data)
    assert report_length(b"hello world\n") == -1
    assert report_length(b"x" * 100) == -1

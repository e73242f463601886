"""The SDK client's warnings of what a downstream sent (`runner.tools.sdk_log`): without their traceback,
masked, cut and throttled while a broker is open; its errors as they are."""

from __future__ import annotations

import logging

import pytest

from runner.config import ToolsConfig, ToolServers
from runner.config.tools import Downstream
from runner.tools.broker import Broker
from runner.tools.sdk_log import DownstreamWarnings

pytestmark = pytest.mark.anyio

SECRET = "sk-live-SECRET-0123456789"


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def said(records: list[logging.LogRecord]) -> list[str]:
    return [logging.Formatter().format(record) for record in records]


def test_a_flood_of_invalid_notifications_is_one_line_without_traceback_or_credential() -> None:
    # Found by a review: a server sending notifications that do not validate, quoting its own API key,
    # had 2,120 warnings with tracebacks in 5.6 s, the key unmasked in each.
    import mcp.client.session

    sdk = mcp.client.session.logger  # the SDK's own (named "client")
    kept = Kept()
    sdk.addHandler(kept)
    try:
        with DownstreamWarnings([SECRET]).installed():
            for _ in range(500):
                try:
                    raise ValueError(f"input_value='not a number {SECRET}'")
                except ValueError:
                    sdk.warning("Failed to validate notification: %s", f"notifications/{SECRET}", exc_info=True)
            try:
                raise RuntimeError("ours")
            except RuntimeError:
                sdk.exception("notification callback for %r raised", "x")
        sdk.warning("after: %s", SECRET)
    finally:
        sdk.removeHandler(kept)
    lines = said(kept.records)
    assert lines[0] == "Failed to validate notification: notifications/***", lines[0]
    assert "Traceback" in lines[1], "its errors pass as they are"
    assert "RuntimeError: ours" in lines[1]
    assert lines[2] == f"after: {SECRET}", "and the filter goes with the broker"
    assert len(lines) == 3


async def test_an_open_broker_has_the_filter_on_the_sdk_client_s_loggers_and_takes_it_away() -> None:
    server = Downstream("s", "s", ("*",), None, command="true", env=(("KEY", SECRET),))
    config = ToolsConfig("tools.json", tools_max_calls=10, tools_max_mb=1, tools_max_concurrent=1, tools_spin_us=0)

    def filters() -> list[logging.Filter]:
        return [f for f in logging.getLogger("client").filters if isinstance(f, DownstreamWarnings)]

    async with Broker.opened(ToolServers("tools.json", (server,)), config, logging.getLogger("t")):
        [installed] = filters()
        record = logging.LogRecord("client", logging.WARNING, "", 0, "x %s", (SECRET,), None)
        assert installed.filter(record)
        assert record.getMessage() == "x ***"
    assert filters() == []


async def test_the_sdk_s_http_transport_s_errors_of_what_a_server_sent_are_one_masked_line_too() -> None:
    # Found by a second look: an event that does not parse is an ERROR with pydantic's traceback quoting
    # its values, up to 10,000 a second within the line pace, a credential in each.
    import mcp.client.streamable_http

    server = Downstream("s", "s", ("*",), None, url="http://127.0.0.1:1/mcp", headers=(("Authorization", SECRET),))
    config = ToolsConfig("tools.json", tools_max_calls=10, tools_max_mb=1, tools_max_concurrent=1, tools_spin_us=0)
    http = mcp.client.streamable_http.logger
    kept = Kept()
    http.addHandler(kept)
    try:
        async with Broker.opened(ToolServers("tools.json", (server,)), config, logging.getLogger("t")):
            kept.records.clear()  # what connecting to no server said
            for _ in range(300):
                try:
                    raise ValueError(f"input_value='{SECRET}'")
                except ValueError:
                    http.exception("Error parsing SSE message")
    finally:
        http.removeHandler(kept)
    lines = said(kept.records)
    assert lines == ["Error parsing SSE message"], lines

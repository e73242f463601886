"""Log lines: one per event, request_id on each, text or JSON."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.logs import (
    LogBudget,
    LogFormat,
    LogLevel,
    RefusalLog,
    configure_logging,
    cut_error,
    get_logger,
    log_event,
)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, get_logger().level)
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    get_logger().setLevel(saved[2])


def test_text_lines_carry_the_request_id_and_fields(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream)
    log_event(get_logger(), logging.INFO, "run finished", "a1b2c3d4", status="ok", duration=0.0412, note="two words")
    log_event(get_logger(), logging.DEBUG, "not shown")
    [line] = stream.getvalue().splitlines()
    assert re.fullmatch(
        r"\S+Z INFO    request_id=a1b2c3d4 run finished status=ok duration=0.0412 note=\"two words\"", line
    )


def test_json_lines_are_one_object_per_event_and_a_traceback_stays_on_its_line(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("debug", "json", stream)
    log_event(get_logger(), logging.DEBUG, "call received", "a1b2c3d4", tool="run_python")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        get_logger().error("internal error", exc_info=True, extra={"request_id": "a1b2c3d4", "fields": {}})
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["event"] == "call received"
    assert (first["request_id"], first["level"], first["tool"]) == ("a1b2c3d4", "debug", "run_python")
    assert second["request_id"] == "a1b2c3d4"
    assert "RuntimeError: boom" in second["traceback"]


def test_lines_from_other_loggers_get_a_placeholder_request_id(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream)
    logging.getLogger("mcp.server").warning("something odd")
    assert " request_id=- something odd" in stream.getvalue()


def test_a_log_budget_logs_its_first_lines_then_says_once_that_the_rest_are_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("runner.test-budget")
    caplog.set_level(logging.INFO, logger="runner.test-budget")
    budget = LogBudget(2, "no more logged")
    assert [budget.allows(logger, logging.INFO, "abc") for _ in range(5)] == [True, True, False, False, False]
    assert [record.getMessage() for record in caplog.records] == ["no more logged"]


# A tool name a review sent: no space, quote, "=" or "\n" (which were quoted), but line breaks for
# other splitters (CR, U+2028, NEL), a tab, a terminal's escape, and text made to look like a line.
HOSTILE = "x\r2026-01-01T00:00:00.000Z\tINFO\u2028FORGED\x1b[2K\x85forged"


def one_printable_line(text: str) -> str:
    """The one line `text` is, for any splitter, made of printable ASCII alone (a trailing newline aside)."""
    [line] = text.splitlines()
    assert text == line + "\n"
    assert line.isascii(), line
    assert line.isprintable(), line
    return line


def test_a_hostile_value_stays_in_its_field_of_one_printable_line_with_its_escapes_visible(
    restore_logging: None,
) -> None:
    # Found by a review: a tool name with \r, U+2028, NEL or ESC was written as is (splitlines saw three
    # forged lines without a request_id, a terminal obeyed the escape).
    stream = io.StringIO()
    configure_logging("info", "text", stream)
    log_event(get_logger(), logging.INFO, "call received", "a1b2c3d4", tool=HOSTILE, code_chars=1)
    line = one_printable_line(stream.getvalue())
    assert line.endswith(" tool=" + json.dumps(HOSTILE) + " code_chars=1")
    assert all(escape in line for escape in ("\\r", "\\u2028", "\\u001b[2K", "\\u0085"))


@pytest.mark.parametrize("value", ["caf\u00e9", "\U0001f600", "\u00a0", "tab\there", "bell\x07"])
def test_a_value_that_is_not_printable_ascii_is_quoted_whatever_it_is(value: str, restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream)
    log_event(get_logger(), logging.INFO, "event", value=value)
    assert one_printable_line(stream.getvalue()).endswith(" value=" + json.dumps(value))


def test_an_event_text_from_another_logger_is_escaped_not_split(restore_logging: None) -> None:
    # The SDK's and uvicorn's lines may carry what a client sent, in their text rather than a field.
    stream = io.StringIO()
    configure_logging("info", "text", stream)
    logging.getLogger("mcp.server").warning("unknown method %s", HOSTILE)
    line = one_printable_line(stream.getvalue())
    assert line.endswith(
        " request_id=- unknown method x\\r2026-01-01T00:00:00.000Z\\tINFO\\u2028FORGED\\x1b[2K\\x85forged"
    )


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_long_value_or_event_is_cut_and_says_so_in_both_formats(fmt: LogFormat, restore_logging: None) -> None:
    # Found by a review: a 5 MiB tool name of emoji grew the log by 15 MiB (each escaped to 12 bytes).
    stream = io.StringIO()
    configure_logging("info", fmt, stream)
    name = "\U0001f600" * (5 * 2**20 // 4)
    log_event(get_logger(), logging.INFO, "call received", "a1b2c3d4", tool=name, code_chars=1)
    logging.getLogger("mcp.server").warning("unknown method %s", name)
    try:
        raise ValueError(name)
    except ValueError:
        get_logger().error("internal error", exc_info=True, extra={"request_id": "a1b2c3d4", "fields": {}})
    text = stream.getvalue()
    assert len(text) < 300_000  # of 15 MiB escaped, 5 MiB as written
    lines = [one_printable_line(line + "\n") for line in text.splitlines()]
    assert len(lines) == 3
    assert "(cut: 1,310,720 characters)" in lines[0]
    assert "(cut: 1,310,735 characters)" in lines[1]
    assert "Traceback" in lines[2]
    assert "(cut: " in lines[2]
    if fmt == "json":
        call, other, error = map(json.loads, lines)
        assert call["tool"].startswith("\U0001f600" * 2000 + "... (cut:")
        assert call["code_chars"] == 1
        assert other["event"].startswith("unknown method \U0001f600")
        assert error["traceback"].startswith("Traceback")
        assert error["traceback"].endswith("\U0001f600" * 1000)  # its tail: the exception's end


def test_a_json_line_is_one_line_of_printable_ascii_that_gives_back_the_hostile_value(
    restore_logging: None,
) -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    log_event(get_logger(), logging.INFO, "call received", HOSTILE, tool=HOSTILE, path=Path("/tmp/x"), ok=True)
    record = json.loads(one_printable_line(stream.getvalue()))
    assert (record["request_id"], record["tool"], record["path"], record["ok"]) == (HOSTILE, HOSTILE, "/tmp/x", True)


def test_refusals_are_logged_first_then_at_most_once_an_interval_counting_those_held() -> None:
    now = [100.0]
    log = RefusalLog(interval=10.0, clock=lambda: now[0])
    assert log.note() == 1, "the first refusal is logged at once"
    assert [log.note() for _ in range(5)] == [0] * 5, "a burst is held"
    now[0] += 10.0
    assert log.note() == 6, "the next line stands for the five held and itself"
    now[0] += 9.9
    assert log.note() == 0
    now[0] += 0.1
    assert log.note() == 2


def test_uvicorn_s_warnings_are_logged_first_then_held_each_kind_apart_and_its_errors_all(
    restore_logging: None,
) -> None:
    # Found by a review: one line per request uvicorn refused (500 malformed requests, no token: 500
    # lines in 0.4 s). Held as our refusals are: the first of each kind, then one an interval.
    stream = io.StringIO()
    configure_logging("info", "text", stream)
    uvicorn = logging.getLogger("uvicorn.error")
    for _ in range(500):
        uvicorn.warning("Invalid HTTP request received.")
        uvicorn.warning("Unsupported upgrade request.")
    for _ in range(3):
        uvicorn.error("Exception in ASGI application")
    lines = stream.getvalue().splitlines()
    # 10 s between lines of a kind: a pause that long in this loop would add one.
    assert 1 <= sum("Invalid HTTP request received." in line for line in lines) <= 2, lines
    assert 1 <= sum("Unsupported upgrade request." in line for line in lines) <= 2, lines
    assert sum("Exception in ASGI application" in line for line in lines) == 3
    configure_logging("info", "text", stream)  # configured again: its filters once each, not twice
    assert len(uvicorn.filters) == 2


def test_what_a_stop_past_its_grace_cancels_is_one_warning_and_no_traceback() -> None:
    # Found by a review: uvicorn's error, then a traceback for each call still running, and one of the
    # app's lifespan at a second signal, on a documented, normal stop.
    stream = io.StringIO()
    configure_logging("info", "text", stream)
    uvicorn = logging.getLogger("uvicorn.error")
    uvicorn.error("Cancel %s running task(s), timeout graceful shutdown exceeded", 2)
    try:
        raise asyncio.CancelledError("Task cancelled, timeout graceful shutdown exceeded")
    except asyncio.CancelledError:
        uvicorn.exception("Exception in ASGI application\n")
    uvicorn.error("Traceback (most recent call last):\n  ...\nasyncio.exceptions.CancelledError\n")
    try:
        raise ValueError("a fault of ours")
    except ValueError:
        uvicorn.exception("Exception in ASGI application\n")
    lines = stream.getvalue().splitlines()
    assert "WARNING request_id=- the stop's grace is over: calls in flight are cancelled count=2" in lines[0]
    assert sum("ERROR" in line for line in lines) == 1
    assert "ValueError: a fault of ours" in stream.getvalue()
    assert "CancelledError" not in stream.getvalue()
    # Not the stop's: a cancellation a fault let out still shows (found by a second look).
    try:
        raise asyncio.CancelledError()
    except asyncio.CancelledError:
        uvicorn.exception("Exception in ASGI application\n")
    assert "CancelledError" in stream.getvalue()


def test_an_error_is_cut_once_a_message_and_each_text_of_its_data_and_cut_again_it_is_the_same() -> None:
    message, data = cut_error("m" * 2001, {"requested": "x" * 5000, "supported": ["2026-07-28"], "n": 1})
    assert message == "m" * 2000 + "... (cut: 2,001 characters)"
    assert data == {"requested": "x" * 2000 + "... (cut: 5,000 characters)", "supported": ["2026-07-28"], "n": 1}
    assert cut_error(message, data) == (message, data), "an error cut by the middleware, looked at as it leaves"
    assert cut_error("short", "t" * 2000) == ("short", "t" * 2000)


@pytest.mark.parametrize("level", ["info", "error"])
def test_a_client_gone_mid_body_is_one_info_line_shown_only_at_info_whatever_the_sdk_said(
    restore_logging: None, level: LogLevel
) -> None:
    """The SDK logs starlette's ClientDisconnect as an error with its traceback, which any client with a token
    can cause without end: one line at INFO, throttled; at RUNNER_LOG_LEVEL=error none (found by a review:
    it was rewritten to INFO after the logger's level check, so shown at every level)."""
    from starlette.requests import ClientDisconnect

    stream = io.StringIO()
    configure_logging(level, "text", stream)
    sdk = logging.getLogger("mcp.server.streamable_http")
    for _ in range(3):
        try:
            raise ClientDisconnect
        except ClientDisconnect:
            sdk.exception("Error handling POST request")
    lines = stream.getvalue().splitlines()
    if level == "error":
        assert lines == []
    else:
        [line] = lines
        assert " INFO    request_id=- HTTP request ended: its client left before its body was all in" in line
        assert "Traceback" not in line

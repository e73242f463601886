"""Log lines: one per event, request_id on each, text or JSON."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from runner.logs import LogBudget, configure_logging, get_logger, log_event


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

"""Logging to stderr only (stdout is the MCP wire), one line per event, each with a request_id.

Whatever a line carries, it stays one line of printable ASCII, and bounded: the formatters, not the
callers, escape and cut, since some values are a client's own (a tool's name, a URI, a Host) and a
caller that forgot would let a client forge lines (a carriage return, U+2028 or NEL is a line break
to some readers; ESC drives a terminal) or grow the log by megabytes a request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
from collections.abc import Callable
from typing import Any, Literal, TextIO

# The logging's own choices (RUNNER_LOG_LEVEL, RUNNER_LOG_FORMAT declare them as their kinds).
LogFormat = Literal["text", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]

LOGGER_NAME = "runner"
NO_REQUEST = "-"
# A field's value shown as is: printable ASCII but the space, '"' and '=' that delimit fields.
# Anything else is quoted as JSON, which escapes every other character (ensure_ascii).
_bare = re.compile(r"[!#-<>-~]+").fullmatch
# The characters a field's value (and a line's event text) keeps; the rest is cut, and said to be.
# Bounded before escaping: an escape is at most 12 characters (an astral one as two \u escapes).
MAX_VALUE_CHARS = 2000  # as a downstream server's stderr line and a tool's description are cut
MAX_EVENT_CHARS = 2000
MAX_TRACEBACK_CHARS = 20_000
# The characters of a client's value an answer says back (a tool's, an argument's or a resource's name):
# cut by `cut`, as the log cuts its values, so an answer is never the size of what was sent.
SHOWN_CHARS = 200
# How `cut` ends what it cuts, and that end's length at most (a count of up to 20 digits and its commas).
_cut_end = re.compile(r"\.\.\. \(cut: [0-9,]+ characters\)\Z").match
_CUT_END_CHARS = 64
# ASCII control characters in an event's text, escaped as Python writes them.
_CONTROLS = {code: f"\\x{code:02x}" for code in [*range(32), 127]} | {9: "\\t", 10: "\\n", 13: "\\r"}


def get_logger() -> logging.Logger:
    """The project's logger; handlers are set once by `configure_logging`."""
    return logging.getLogger(LOGGER_NAME)


def log_event(logger: logging.Logger, level: int, event: str, request_id: str = NO_REQUEST, **fields: Any) -> None:
    """Log one event with its request_id and key=value fields."""
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={"request_id": request_id, "fields": fields})


class LogBudget:
    """Lines of one kind a run may cause, which it could cause again and again (a refused call): the
    first `limit` are logged, then one line saying the rest are not (they are still counted elsewhere)."""

    __slots__ = ("_last", "_limit", "_used")

    def __init__(self, limit: int, last: str) -> None:
        self._limit = limit
        self._last = last
        self._used = 0

    def allows(self, logger: logging.Logger, level: int, request_id: str) -> bool:
        """Whether one more line may be logged; past the limit, the first refusal says so once."""
        self._used += 1
        if self._used <= self._limit:
            return True
        if self._used == self._limit + 1:
            log_event(logger, level, self._last, request_id)
        return False


class RefusalLog:
    """Decides which refusals get a log line: the first, then at most one per `interval` seconds.
    A client may cause them without end, and with no token (a 401, a Host not allowed, a request
    that is not HTTP).

    Sans-IO: `clock` is injected, and `note` returns how many refusals the line stands for (0: none
    is written). One counter for every client, not one per address: a map of addresses would grow
    with whatever a scanner sends.
    """

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last: float | None = None
        self._held = 0

    def note(self) -> int:
        """Count one refusal; the number of refusals to log now (this one and those held), or 0."""
        self._held += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval:
            return 0
        self._last, held, self._held = now, self._held, 0
        return held


class _ThrottledWarnings(logging.Filter):
    """uvicorn's warnings, each said of a request a client may send without end, token or no token
    ("Invalid HTTP request received.", "Unsupported upgrade request."): each kind logged as a
    `RefusalLog` allows, the line saying how many it stands for. Its errors all pass."""

    # Kinds are uvicorn's format strings, a few constants; past this many (never) they share one.
    MAX_KINDS = 64

    def __init__(self) -> None:
        super().__init__()
        self._kinds: dict[str, RefusalLog] = {}
        self._others = RefusalLog()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            return True
        kind = str(record.msg)
        throttle = self._kinds.get(kind)
        if throttle is None:
            throttle = (
                self._others if len(self._kinds) >= self.MAX_KINDS else self._kinds.setdefault(kind, RefusalLog())
            )
        count = throttle.note()
        if count > 1:
            record.fields = {**getattr(record, "fields", {}), "seen_since_last_line": count}
        return count > 0


class _StopCut(logging.Filter):
    """uvicorn's lines where the stop's grace ran out (`RUNNER_SHUTDOWN_GRACE`) or a second signal cut it
    short: errors with tracebacks of a documented, normal stop (found by a review: one "Exception in
    ASGI application" traceback for each call still running, and one of the app's lifespan). Said as one
    warning, and the cancellations themselves not at all; any other error passes as it is."""

    GRACE_OVER = "Cancel %s running task(s), timeout graceful shutdown exceeded"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == self.GRACE_OVER:
            record.msg, record.levelno, record.levelname = (
                "the stop's grace is over: calls in flight are cancelled",
                logging.WARNING,
                "WARNING",
            )
            record.fields = {"count": record.args[0] if isinstance(record.args, tuple) and record.args else 0}
            record.args = ()
            return True
        # The stop's own cancellation only, by its message (a CancelledError a fault let out still shows).
        error = record.exc_info[1] if record.exc_info is not None else None
        cancelled = isinstance(error, asyncio.CancelledError) and "graceful shutdown" in str(error)
        # The app's lifespan cut at a forced stop: uvicorn logs the traceback starlette sent as text.
        cut_lifespan = (
            isinstance(record.msg, str)
            and record.msg.startswith("Traceback")
            and record.msg.rstrip().endswith("CancelledError")
        )
        return not (cancelled or cut_lifespan)


class _ClientLeft(logging.Filter):
    """The SDK's HTTP transport logs a client that left before its request's body was all in (starlette's
    `ClientDisconnect`: the client hung up, or the server closed a body that paused too long,
    `runner.transports.connections`) as an error with its traceback, which any client with a token could
    cause without end. Not the server's fault, and nothing is left to answer: one line at INFO, without
    the traceback, throttled as refusals are (`RefusalLog`)."""

    def __init__(self) -> None:
        super().__init__()
        self._throttle = RefusalLog()

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not (type(exc).__name__ == "ClientDisconnect" and type(exc).__module__ == "starlette.requests"):
            return True
        if not get_logger().isEnabledFor(logging.INFO):
            return False  # the SDK's logger let an ERROR through; as INFO it is below the server's level
        count = self._throttle.note()
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.msg, record.args = "HTTP request ended: its client left before its body was all in", ()
        record.exc_info = record.exc_text = None
        if count > 1:
            record.fields = {**getattr(record, "fields", {}), "seen_since_last_line": count}
        return count > 0


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        # The stamp's second, made once a second: a brokered tool call logs a line, hundreds a second.
        self._second, self._stamp = -1, ""

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "fields", {})
        second = int(record.created)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        stamp = f"{self._stamp}.{int(record.msecs):03d}Z"
        request_id = getattr(record, "request_id", NO_REQUEST)
        if type(request_id) is not str or not _bare(request_id):  # ours are; another logger's may not be
            request_id = _text_value(request_id)
        event = record.getMessage()
        if not (event.isascii() and event.isprintable() and len(event) <= MAX_EVENT_CHARS):
            event = _escaped_event(event)
        line = f"{stamp} {record.levelname:<7} request_id={request_id} {event}"
        if fields:
            line += " " + " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        if record.exc_info:
            # Keep one event per line: the traceback is folded into the same line.
            line += " traceback=" + json.dumps(_cut_middle(self.formatException(record.exc_info)))
        return line


def _text_value(value: Any) -> str:
    if type(value) is str:  # the most of them: no str() to call
        text = value
    elif isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") if value else "0"
    elif isinstance(value, int):
        return str(value)  # never quoted
    else:
        text = str(value)
    if len(text) > MAX_VALUE_CHARS:
        text = cut(text, MAX_VALUE_CHARS)
    return text if _bare(text) else json.dumps(text)


def _escaped_event(text: str) -> str:
    """An event's text (not quoted: it has spaces), cut and with what is not printable ASCII escaped.
    Ours always is; another logger's (the SDK's, uvicorn's) may carry what a client sent."""
    return cut(text, MAX_EVENT_CHARS).translate(_CONTROLS).encode("ascii", "backslashreplace").decode("ascii")


def cut(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and how many it had: how the log and every answer show a
    value a client sent."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... (cut: {len(text):,} characters)"


def cut_error(message: str, data: object) -> tuple[str, object]:
    """An error answer's message and data as said back: at most MAX_VALUE_CHARS of its message and of
    its data's text, or of each text of its data's object, whatever a client sent. Used wherever an
    answer leaves the server: the SDK says some values back (a method, a protocol version) whole."""
    if isinstance(data, str):
        data = _cut_once(data)
    elif isinstance(data, dict):
        data = {key: _cut_once(value) if isinstance(value, str) else value for key, value in data.items()}
    return _cut_once(message), data


def _cut_once(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """`cut`, but a text it has cut is left as it is: an error cut by the server's middleware is looked at
    again as it leaves, and must not be said cut from 2,030 characters."""
    if len(text) > limit and (len(text) > limit + _CUT_END_CHARS or not _cut_end(text, limit)):
        return cut(text, limit)
    return text


def _cut_middle(text: str, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """A traceback keeps its head (where it began) and its tail (the exception), cut between."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... (cut: {len(text):,} characters) ...\n{text[-half:]}"


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, int | float):  # bool is an int
        return value
    return cut(value if isinstance(value, str) else str(value), MAX_VALUE_CHARS)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "request_id": _json_value(getattr(record, "request_id", NO_REQUEST)),
            "event": cut(record.getMessage(), MAX_EVENT_CHARS),
        }
        for key, value in getattr(record, "fields", {}).items():
            payload[key] = _json_value(value)
        if record.exc_info:
            payload["traceback"] = _cut_middle(self.formatException(record.exc_info))
        # ensure_ascii (the default): every character past ASCII, U+2028 and NEL included, is escaped.
        return json.dumps(payload)


def configure_logging(level: LogLevel, fmt: LogFormat, stream: TextIO | None = None) -> None:
    """Send every logger (ours and the SDK's) to stderr in the chosen format."""
    # Several lines per call: skip what no line shows, the caller's frame (logging's documented
    # _srcfile switch) and the thread and process names.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # The SDK's own loggers stay at warning: their debug chatter carries message bodies (user code).
    root.setLevel(logging.WARNING)
    # Its refusals (a Host, an Origin) are logged by ours with the variable to change, once; its own
    # lines said the same twice more, with no request_id.
    logging.getLogger("mcp.server.transport_security").setLevel(logging.ERROR)
    # Its HTTP client warns of each event of a type it does not know on a downstream server's stream,
    # which that server may send without end (406,857 lines, 63 MB, in 5 s; the event loop 99% busy).
    # Its other warnings go with it: a redirect it did not follow (the call's error says so too; the
    # GET of the server's own messages then stays closed, unsaid) and a DELETE of the session at the
    # end that failed. Its errors stay: an answer or event that does not parse, an unexpected type.
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.ERROR)
    # uvicorn warns once per request it refuses before the app sees it (500 malformed requests, no
    # token needed: 500 lines in 0.4 s): throttled as our own refusals are.
    transport = logging.getLogger("mcp.server.streamable_http")
    transport.filters[:] = [f for f in transport.filters if not isinstance(f, _ClientLeft)]
    transport.addFilter(_ClientLeft())
    uvicorn = logging.getLogger("uvicorn.error")
    uvicorn.filters[:] = [f for f in uvicorn.filters if not isinstance(f, _ThrottledWarnings | _StopCut)]
    uvicorn.addFilter(_StopCut())
    uvicorn.addFilter(_ThrottledWarnings())
    get_logger().setLevel(level.upper())

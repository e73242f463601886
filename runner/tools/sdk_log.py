"""The SDK client's own warnings of what a downstream server sent: bounded and masked.

The official client logs, at WARNING, a notification that does not validate (with its traceback, whose
pydantic text quotes what the server sent) and each tool a listing drops for an invalid
``x-mcp-header``; a server may send either without end, and quote its own credentials in them (found by
a review: 2,120 warnings with tracebacks in 5.6 s, the server's API key in each, unmasked). While the
broker is open, those lines go without their traceback, their values cut and every credential of the
file masked (`Credentials.secrets`), each kind at most once per `RefusalLog` interval, the line saying how
many it stands for. The session's errors (a callback of ours that raised) pass as they are; its HTTP
transport's are filtered too (`SDK_HTTP_LOGGER`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

import mcp.client.client as sdk_client
import mcp.client.session as sdk_session
import mcp.client.streamable_http as sdk_http

from runner.logs import RefusalLog, cut
from runner.tools.credentials import masked

# The SDK's own logger objects, not names: its session's is named "client" (found by running a review's
# case against the first version, which filtered "mcp.client.session", a logger nothing logs to).
SDK_CLIENT_LOGGERS = (sdk_session.logger, sdk_client.logger)
# Its HTTP transport's, whose every line is of what the server sent, errors too: an event that does not
# parse is an ERROR with pydantic's traceback quoting its values (found by a second look: 10,000 a second
# within the line pace, a credential in each).
SDK_HTTP_LOGGER = sdk_http.logger
MAX_VALUE_CHARS = 200  # of each value a line quotes
MAX_KINDS = 64  # kinds are the SDK's format strings, a few; past this many they share one throttle


class DownstreamWarnings(logging.Filter):
    """The filter on the SDK client's loggers (the module's docstring)."""

    def __init__(self, secrets: Sequence[str], most: int = logging.WARNING) -> None:
        """`most`: the highest level filtered (above it, records pass as they are: a callback of ours)."""
        super().__init__()
        self._most = most
        self._secrets = sorted(set(secrets), key=len, reverse=True)
        self._kinds: dict[str, RefusalLog] = {}
        self._others = RefusalLog()

    @contextlib.contextmanager
    def installed(self, loggers: Sequence[logging.Logger] = SDK_CLIENT_LOGGERS) -> Iterator[None]:
        """On `loggers` while in it."""
        for logger in loggers:
            logger.addFilter(self)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeFilter(self)

    def _masked(self, value: object) -> str:
        return cut(masked(str(value), self._secrets), MAX_VALUE_CHARS)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > self._most:
            return True
        kind = str(record.msg)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        record.msg = self._masked(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(self._masked(arg) for arg in record.args)
        elif record.args:
            record.args = ()
            record.msg = self._masked(record.getMessage())
        throttle = self._kinds.get(kind)
        if throttle is None:
            throttle = self._others if len(self._kinds) >= MAX_KINDS else self._kinds.setdefault(kind, RefusalLog())
        count = throttle.note()
        if count > 1:
            record.fields = {**getattr(record, "fields", {}), "seen_since_last_line": count}
        return count > 0

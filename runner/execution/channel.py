"""What a run sends on its job socket, taken apart without I/O: the tool calls it makes through
`mcp_tools` (where it may), then its one report.

Every byte of it is the run's, so hostile: a frame is accepted only whole and within its bound, and
anything else (a frame over its bound, bytes that start like neither, a tool call from a run that may
call none) breaks the channel. The reader (`RunOutput`) then closes the
socket: the run gets EPIPE rather than a server that waits for it, and nothing else is touched.
"""

from __future__ import annotations

from runner.inrun.wire import TOOL_HEAD, frame_line, report_length


class RunChannel:
    """The frames of one run's job socket, as they arrive (`feed`)."""

    __slots__ = ("_buffer", "_report_limit", "_tool_limit", "broken", "report_whole")

    def __init__(self, report_limit: int, tool_limit: int = 0) -> None:
        """`report_limit`: the largest report taken; `tool_limit`: the largest tool call's body (0: the
        run may call no tool)."""
        self._buffer = bytearray()
        self._report_limit = report_limit
        self._tool_limit = tool_limit
        self.broken = False
        self.report_whole = False

    @property
    def report(self) -> bytearray:
        """The report, once whole (`report_whole`); else what came of it so far."""
        return self._buffer

    def feed(self, chunk: bytes | bytearray) -> list[tuple[bytes, bytes]]:
        """Take `chunk`; the tool calls it completed, in order, as (call id, body). Sets `broken` when the
        run sent what no frame is, and `report_whole` once its report has come."""
        if self.broken or self.report_whole:
            return []  # the reader stops reading at either
        buffer = self._buffer
        buffer += chunk
        calls: list[tuple[bytes, bytes]] = []
        while buffer:
            if self._tool_limit and buffer[:1] == TOOL_HEAD[:1]:
                try:
                    line = frame_line(buffer, TOOL_HEAD)
                except ValueError:
                    self._break()
                    break
                if line is None:
                    break
                line_bytes, size, call_id = line
                if size > self._tool_limit:
                    self._break()
                    break
                if len(buffer) < line_bytes + size:
                    break
                calls.append((call_id, bytes(buffer[line_bytes : line_bytes + size])))
                del buffer[: line_bytes + size]
                continue
            length = report_length(buffer)
            if length is None:
                break
            if length < 0 or length > self._report_limit:
                self._break()
            elif len(buffer) >= length:
                del buffer[length:]  # what follows is not the report's (a process the run left writing)
                self.report_whole = True
            break
        return calls

    def _break(self) -> None:
        self.broken = True
        self.report_whole = False
        self._buffer.clear()

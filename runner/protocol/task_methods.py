"""The tasks extension's methods: tasks/get, tasks/update and tasks/cancel (SEP-2663), registered on the
low-level server with `add_request_handler`, and whether a request negotiated the extension.

Only a request that declares the extension in its own client capabilities (2026-07-28 carries them in
every request's `_meta`) gets a task or may use these methods; one that does not gets `-32021` with
the capability it lacks. Over HTTP, `Mcp-Name` must carry the task id (SEP-2663's routing header; the
SDK checks it for its own methods only), else `-32020`. A task id never made, expired or another
caller's is `-32602` alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from runner.logs import SHOWN_CHARS, cut, log_event
from runner.protocol.reads import AfterAnswer, Reads
from runner.protocol.tasks import EXTENSION, Task, Tasks, detailed_task

# How long tasks/cancel waits for the run to be killed before it answers anyway.
CANCEL_WAIT_SECONDS = 5.0

# The caller (a token's name) and the Mcp-Name header of the request a handler serves (None: the
# transport has no headers, as stdio).
CallerOf = Callable[[object], "str | None"]
NameHeaderOf = Callable[[object], "str | None"]


class TaskParams(types.RequestParams):
    task_id: str = Field(alias="taskId", min_length=1, max_length=200)


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] | None = Field(alias="inputResponses", default=None)


def negotiated(ctx: ServerRequestContext[Any]) -> bool:
    """Whether this request's client capabilities declare the tasks extension (a 2026-07-28 request:
    older protocol versions have no per-request capabilities, and their results cannot carry a task)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and EXTENSION in (capabilities.extensions or {})


class TaskMethods:
    """tasks/get, tasks/update and tasks/cancel over one `Tasks`."""

    def __init__(
        self,
        tasks: Tasks,
        logger: logging.Logger,
        caller_of: CallerOf | None = None,
        name_header_of: NameHeaderOf | None = None,
        reads: Reads | None = None,
        after_answer: AfterAnswer | None = None,
    ) -> None:
        self._tasks = tasks
        self._log = logger
        self._caller_of = caller_of
        self._name_header_of = name_header_of
        self._reads = reads  # a result inlined is read as kept output is: the same budget (`Reads`)
        self._after_answer = after_answer

    def register(self, server: Server[Any]) -> None:
        """Advertise the extension (server/discover, initialize) and serve its methods."""
        server.extensions[EXTENSION] = {}
        server.add_request_handler("tasks/get", TaskParams, self.get)
        server.add_request_handler("tasks/update", UpdateTaskParams, self.update)
        server.add_request_handler("tasks/cancel", TaskParams, self.cancel)

    async def get(self, ctx: ServerRequestContext[Any], params: TaskParams) -> dict[str, Any]:
        """tasks/get: the task as it is now; its result inlined once it has one, as a read of kept output
        is: admitted against the same budget, and held until its answer has left (`Reads`)."""
        task = self._task(ctx, params)
        if self._reads is None or task.result is None or task.status != "completed":
            return detailed_task(task)
        reads = self._reads
        try:
            held = reads.admit_json(task.caller, task.result_bytes)
        except MCPError as busy:
            log_event(self._log, logging.INFO, "read refused", task.request_id, reason="busy", error=busy.message)
            raise
        with reads.answering(held, ctx.request, self._after_answer):
            return detailed_task(task)

    async def update(self, ctx: ServerRequestContext[Any], params: UpdateTaskParams) -> dict[str, Any]:
        """tasks/update: an empty acknowledgement. A run never asks its client for input, so no
        response is outstanding and every one is ignored, as the extension asks for unknown keys."""
        self._task(ctx, params)
        return {}

    async def cancel(self, ctx: ServerRequestContext[Any], params: TaskParams) -> dict[str, Any]:
        """tasks/cancel: kill the run, as notifications/cancelled does for a call; the task then ends
        `cancelled`. An ended task is left as it is: the same empty ack."""
        task = self._task(ctx, params)
        if task.working:
            log_event(self._log, logging.INFO, "task cancelled", task.request_id)
            task.cancel("cancelled with tasks/cancel: the run was killed")
            # Killing and reaping takes milliseconds: wait for it (boundedly) before the ack, so that
            # the next tasks/get says `cancelled` (the extension does not ask for it; a client expects it).
            with anyio.move_on_after(CANCEL_WAIT_SECONDS):
                await task.ended.wait()
        return {}

    def _task(self, ctx: ServerRequestContext[Any], params: TaskParams) -> Task:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(types.METHOD_NOT_FOUND, f"{ctx.method}: tasks need protocol version 2026-07-28")
        if not negotiated(ctx):  # first: a client without the extension learns what it lacks
            raise MCPError(
                types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"{ctx.method} needs the {EXTENSION} extension in the request's client capabilities",
                {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
            )
        name_of = self._name_header_of
        if name_of is not None and ctx.request is not None and name_of(ctx.request) != params.task_id:
            raise MCPError(
                types.HEADER_MISMATCH, f"{ctx.method} needs an Mcp-Name header that is its taskId (SEP-2663)"
            )
        caller = self._caller_of(ctx.request) if self._caller_of is not None and ctx.request is not None else None
        task = self._tasks.store.find(params.task_id, caller)
        if task is None:
            shown = cut(params.task_id, SHOWN_CHARS)
            raise MCPError(types.INVALID_PARAMS, f"task not found: {shown}", {"taskId": shown})
        return task

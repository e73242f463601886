"""The tasks extension (SEP-2663) on the client side, for the official Python client, which has none of
its own (python-sdk#2806): built on the SDK's `ClientExtension`, as a client would. Passed in
`Client(extensions=[TasksExtension()])`, it declares the extension in every request's capabilities and
finishes a `CreateTaskResult` by polling `tasks/get` until the task ends, so `client.call_tool` returns
the run's result either way. `get_task` and `cancel_task` send the extension's methods (with `Mcp-Name`
set to the task id, as SEP-2663 asks over HTTP)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, Field, TypeAdapter

EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = {"completed", "cancelled", "failed"}
ANY_RESULT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


class CreateTaskResult(types.Result):
    """`resultType: "task"`: a tools/call that became a task."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None
    status_message: str | None = None


class TaskParams(types.RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] = Field(alias="inputResponses", default_factory=dict)


class GetTaskRequest(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param: ClassVar[str | None] = "taskId"


class CancelTaskRequest(types.Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param: ClassVar[str | None] = "taskId"


class UpdateTaskRequest(types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param: ClassVar[str | None] = "taskId"


async def get_task(session: ClientSession, task_id: str) -> dict[str, Any]:
    return await session.send_request(GetTaskRequest(params=TaskParams(task_id=task_id)), ANY_RESULT)


async def cancel_task(session: ClientSession, task_id: str) -> dict[str, Any]:
    return await session.send_request(CancelTaskRequest(params=TaskParams(task_id=task_id)), ANY_RESULT)


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
    params = UpdateTaskParams(task_id=task_id, input_responses=responses)
    return await session.send_request(UpdateTaskRequest(params=params), ANY_RESULT)


async def wait_for_task(session: ClientSession, task_id: str, poll: float = 0.2) -> dict[str, Any]:
    """tasks/get until the task has ended; its last answer."""
    while True:
        task = await get_task(session, task_id)
        if task["status"] in TERMINAL:
            return task
        await anyio.sleep(poll)


class TasksExtension(ClientExtension):
    identifier = EXTENSION

    def __init__(self) -> None:
        self.created: list[CreateTaskResult] = []  # every task a call of this client became
        self.polls = 0

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    async def _resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created)
        interval = (created.poll_interval_ms or 1000) / 1000
        while True:
            task = await get_task(ctx.session, created.task_id)
            self.polls += 1
            if task["status"] == "completed":
                return types.CallToolResult.model_validate(task["result"])
            if task["status"] == "failed":
                raise MCPError(task["error"]["code"], task["error"]["message"])
            if task["status"] == "cancelled":
                raise MCPError(types.INTERNAL_ERROR, f"task cancelled: {task.get('statusMessage')}")
            await anyio.sleep(min(interval, 0.5))

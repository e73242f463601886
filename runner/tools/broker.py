"""The broker of code mode: what a run's ``mcp_tools`` asks for, checked and answered.

Each run that may call tools gets its own `RunCalls` (`Broker.for_run`), which counts what the run
does against its limits (calls, bytes, calls at once) and answers each frame the run sends on its job
socket: the module itself with the caller's catalog (``{"op": "module"}``), or one tool call
(``{"op": "call", ...}``), which is checked (the server exists and serves this caller, the tool is
allowed and listed, the arguments validate against its input schema, the run is within its limits)
before it is forwarded (`Connection.call`) within the run's remaining time. Whatever goes wrong is an
answer that the run raises as `mcp_tools.ToolError`; nothing a run sends can raise here.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from typing import Any

import anyio

from runner.config import ToolsConfig, ToolServers
from runner.config.settings import MARK_VARIABLE
from runner.config.tools import python_name
from runner.errors import Unavailable
from runner.logs import SHOWN_CHARS, LogBudget, cut, log_event
from runner.outcome import ToolCall
from runner.tools import frames
from runner.tools.catalog import describe, dumped_within, message_of_error, value_of_result
from runner.tools.downstream import CONNECT_SECONDS, Connection, Down, TooSlow, loop_time
from runner.tools.schemas import SchemaCheck
from runner.tools.sdk_log import SDK_HTTP_LOGGER, DownstreamWarnings

# What the broker's callers count a brokered call as (metrics): ok, tool_error (the tool's isError),
# refused (not allowed, bad arguments, a limit), unavailable (down), timeout (no answer within the run's
# time left: cancelled there; or still waited for when the run's timeout killed it), cancelled (the run
# ended first), failed (anything else).
Observe = Callable[[str, str, str, float], None]
# Makes, holds while in it, and removes a directory: its path (`opened`).
Holding = Callable[[], AbstractContextManager[str]]
MAX_SCHEMA_CHECKS = 256  # validators kept, one per (server, tool)
MAX_REFUSALS_LOGGED = 20  # a run's refused calls logged, one line each; the rest counted (metrics) only
MAX_SAID_CHARS = 2000  # of a tool's or the SDK's error, what the run's ToolError says
# Of a tool's error that is no text, what is dumped at least (credentials masked in it before it is cut).
SAID_DUMPED = 16 * MAX_SAID_CHARS
_OK_HEAD = '{"ok": true, "value": '  # a result's answer, as json.dumps writes {"ok": True, "value": ...}
# A frame the run may send for each call it may make, and some for imports and refusals: past them
# it is flooding its channel, and each frame costs the event loop all the same.
FRAMES_PER_CALL = 10
FRAMES_BESIDES = 1_000


class Broker:
    """The downstream servers' connections, and what runs may do with them."""

    def __init__(
        self,
        servers: ToolServers,
        config: ToolsConfig,
        logger: logging.Logger,
        observe: Observe | None = None,
        held: str = "",
        callers: bool = True,
    ) -> None:
        """`callers`: whether requests come with callers (HTTP with tokens): where not, a server the file
        gives `callers` serves no run, and the tool description does not speak of it."""
        self.servers = servers
        self.callers = callers
        self.config = config
        self.log = logger
        self.observe = observe  # set once the metrics exist (HTTP), or never
        self.connections = {
            server.name: Connection(server, logger, config.max_bytes, held) for server in servers.servers
        }
        self.on_listed: Callable[[], None] = lambda: None  # after any server's listing (`ToolChanges.poke`)
        self._serving = False  # past the check of every server listed at start
        self.by_python_name = {server.python_name: server.name for server in servers.servers}
        for connection in self.connections.values():
            connection.on_listed = functools.partial(self._listed, connection)
        self._module_source = importlib.resources.files("runner.inrun").joinpath("mcp_tools.py").read_text()
        self._checks: dict[tuple[str, str], tuple[Any, SchemaCheck | None]] = {}

    @classmethod
    @contextlib.asynccontextmanager
    async def opened(
        cls,
        servers: ToolServers,
        config: ToolsConfig,
        logger: logging.Logger,
        observe: Observe | None = None,
        held: Holding | None = None,
        callers: bool = True,
    ) -> AsyncIterator[Broker]:
        """Start every server and list its tools; stop them all on exit. A server that cannot start is
        a warning (its calls fail until it comes); one that lists no tool the file allows of it,
        `Unavailable` naming the file and the entry (the server does not start). `held` makes the
        directory that our stdio servers' environments name (the server's, `leftovers.held_directory`):
        what they left if this server was killed, its next start kills."""
        with held() if held is not None else contextlib.nullcontext("") as directory:
            async with cls._started(servers, config, logger, observe, directory, callers) as broker:
                yield broker

    @classmethod
    @contextlib.asynccontextmanager
    async def _started(
        cls,
        servers: ToolServers,
        config: ToolsConfig,
        logger: logging.Logger,
        observe: Observe | None,
        held: str,
        callers: bool,
    ) -> AsyncIterator[Broker]:
        broker = cls(servers, config, logger, observe, held, callers)
        secrets = [secret for connection in broker.connections.values() for secret in connection.credentials.secrets]
        said_of_servers = DownstreamWarnings(secrets).installed()
        said_over_http = DownstreamWarnings(secrets, most=logging.CRITICAL).installed([SDK_HTTP_LOGGER])
        with said_of_servers, said_over_http:
            async with anyio.create_task_group() as tg:
                for connection in broker.connections.values():
                    tg.start_soon(connection.hold)
                with anyio.move_on_after(CONNECT_SECONDS + 5):
                    for connection in broker.connections.values():
                        await connection.listed.wait()
                try:
                    broker.check_listed()
                    broker._serving = True
                    if not callers:
                        for server in servers.servers:
                            if server.callers is not None:
                                # Found by a first hour: the description spoke of it to a stdio client.
                                log_event(
                                    logger,
                                    logging.WARNING,
                                    "tool server serves no run here: its callers are tokens' names, and no "
                                    "request here comes with a token",
                                    server=server.name,
                                )
                    yield broker
                finally:
                    tg.cancel_scope.cancel()

    @classmethod
    @contextlib.asynccontextmanager
    async def maybe_opened(
        cls,
        servers: ToolServers | None,
        config: ToolsConfig,
        logger: logging.Logger,
        held: Holding | None = None,
        callers: bool = True,
    ) -> AsyncIterator[Broker | None]:
        """`opened`, where the deployment names tool servers; else None."""
        if servers is None:
            yield None
            return
        async with cls.opened(servers, config, logger, held=held, callers=callers) as broker:
            yield broker

    def _listed(self, connection: Connection) -> None:
        """`connection`'s server listed its tools: a tool the file names that it lacks, once serving, is
        a warning (at start it stops the server: found by a first hour, a server that listed only after
        the start had its misspelt tool said nowhere but in each call's refusal)."""
        server = connection.server
        missing = [tool for tool in server.tools if not server.every_tool and tool not in connection.tools]
        if self._serving and missing:
            log_event(
                self.log,
                logging.WARNING,
                "tool server lists no tool the file allows",
                server=server.name,
                tools=",".join(missing)[:300],
                file=self.servers.path,
            )
        self.on_listed()

    def check_listed(self) -> None:
        """`Unavailable` for a tool the file names that its server, up and listed, does not have."""
        for connection in self.connections.values():
            server = connection.server
            if connection.down:
                log_event(
                    self.log,
                    logging.WARNING,
                    "tool server not started",
                    server=server.name,
                    error=connection.down[:300],
                )
                continue
            missing = [tool for tool in server.tools if not server.every_tool and tool not in connection.tools]
            if missing:
                raise Unavailable(
                    "RUNNER_TOOLS_CONFIG",
                    f"{self.servers.path}: mcpServers.{server.name}: the server lists no tool {missing[0]!r} "
                    f"(it lists {', '.join(sorted(connection.tools)[:20]) or 'none'})",
                )

    def for_run(self, request_id: str, caller: str | None, deadline: float) -> RunCalls | None:
        """A run's calls (`ToolGateway.for_run`); None if `caller` may use no server."""
        if not any(server.serves(caller) for server in self.servers.servers):
            return None
        return RunCalls(self, request_id, caller, deadline)

    def helper_marks(self) -> frozenset[bytes] | None:
        """`ToolGateway.helper_marks`: the environment entry that marks each stdio server's process."""
        if any(connection.starting for connection in self.connections.values()):
            return None
        return frozenset(
            f"{MARK_VARIABLE}={connection.mark}".encode() for connection in self.connections.values() if connection.mark
        )

    def description(self) -> str:
        """What run_python's description says of the tools (every caller's servers only)."""
        return describe(
            [
                (connection.server, connection.allowed(), connection.python_names())
                for connection in self.connections.values()
                if connection.server.callers is None
            ],
            others=sum(1 for server in self.servers.servers if server.callers is not None) if self.callers else 0,
        )

    def catalog(self, caller: str | None) -> dict[str, Any]:
        """What `caller`'s run's ``mcp_tools`` is made of: each server it may use, its allowed tools."""
        servers = []
        for connection in self.connections.values():
            server = connection.server
            if not server.serves(caller):
                continue
            named = connection.python_names()
            tools = [
                {
                    "name": name,
                    "python_name": named[name],
                    "description": tool.description or "",
                    "schema": tool.input_schema,
                }
                for name, tool in sorted(connection.allowed().items())
                if name in named
            ]
            # The file's names of its tools, for a server down now: a run may call them, and is told
            # it is down (or, if it has come meanwhile, is answered), not that they do not exist.
            configured = {} if server.every_tool else {python_name(tool): tool for tool in server.tools}
            servers.append(
                {
                    "name": server.name,
                    "python_name": server.python_name,
                    "tools": tools,
                    "down": connection.down,
                    "configured": configured if connection.down else {},
                }
            )
        config = self.config
        return {"servers": servers, "limit_bytes": config.max_bytes, "most_in_flight": config.tools_max_concurrent}

    def module(self, caller: str | None) -> bytes:
        return json.dumps({"source": self._module_source, "catalog": self.catalog(caller)}).encode()

    def check_arguments(self, server: str, tool: str, schema: Any, arguments: Any) -> str:
        """Why `arguments` do not match the tool's input schema ("" if they do, or if that is the
        downstream server's to tell: `SchemaCheck`)."""
        key = (server, tool)
        kept = self._checks.get(key)
        # One check per listed schema: a listing made again makes new schema objects.
        if kept is None or kept[0] is not schema:
            if len(self._checks) >= MAX_SCHEMA_CHECKS:
                self._checks.clear()
            kept = self._checks[key] = (schema, SchemaCheck.of(schema))
        check = kept[1]
        return check.mismatch(arguments) if check is not None else ""

    def observed(self, server: str, tool: str, status: str, seconds: float) -> None:
        if self.observe is not None:
            self.observe(server, tool, status, seconds)


class RunCalls:
    """One run's tool calls, counted against its limits (`RunTools`)."""

    def __init__(self, broker: Broker, request_id: str, caller: str | None, deadline: float) -> None:
        self._broker = broker
        self._request_id = request_id
        self._caller = caller
        self._deadline = deadline
        self._calls = 0
        self._bytes = 0
        self._in_flight: list[ToolCall] = []  # taken (`take`), not answered yet
        self._untold: list[tuple[str, str, str, float, int, int]] = []  # answered, not logged yet (`tell`)
        # Refused calls told: past MAX_REFUSALS_LOGGED, counted but not logged.
        self._refused = LogBudget(MAX_REFUSALS_LOGGED, "tool calls refused: no more logged")

    @property
    def limit_bytes(self) -> int:
        return self._broker.config.max_bytes

    @property
    def most_frames(self) -> int:
        return FRAMES_PER_CALL * self._broker.config.tools_max_calls + FRAMES_BESIDES

    @property
    def most_in_flight(self) -> int:
        return self._broker.config.tools_max_concurrent

    @property
    def calling(self) -> str:
        return f"{self._in_flight[-1].server}.{self._in_flight[-1].tool}" if self._in_flight else ""

    def take(self, body: bytes) -> bytes | ToolCall:
        """`RunTools.take`: the answer now (the module, a refusal, an error), or the call to forward."""
        try:
            return self._take(body)
        except Exception as exc:
            return self._fault(exc)

    async def forward(self, call: ToolCall) -> bytes:
        """`RunTools.forward`: the answer to a call `take` let through, made downstream."""
        try:
            return await self._forward(call)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            return self._fault(exc)

    def _fault(self, exc: Exception) -> bytes:
        """A fault of ours on a call: logged with its traceback (a review of the house: without it, one
        could not be found), and said to the run as its answer."""
        fields = {"request_id": self._request_id, "fields": {"error": repr(exc)[:300]}}
        self._broker.log.error("tool call failed", exc_info=exc, extra=fields)
        return _error(f"the server could not answer this call ({type(exc).__name__})")

    def _take(self, body: bytes) -> bytes | ToolCall:
        # Every frame counts against the run's bytes, whatever it asks: a flood of frames ends in refusals.
        self._bytes += len(body)
        if self._bytes > self._broker.config.max_bytes:
            # Logged (rate-limited) and counted as every refusal is, the frame unread (found by a first hour:
            # calls past the budget were in neither); its server and tool are "(unknown)".
            return self._finish("(unknown)", "(unknown)", "refused", loop_time(), len(body), 0, self._over_budget())
        try:
            # UTF-8 strictly: json.loads would take bytes as UTF-16 too, and UTF-8 with surrogates. And
            # no NaN nor Infinity, Python's, not JSON's: a downstream server would get null for them.
            if many := frames.too_many(body):
                return self._finish("(unknown)", "(unknown)", "refused", loop_time(), len(body), 0, _error(many))
            request = frames.decode(body)
        except UnicodeDecodeError:
            return _error("the run sent a call that is not JSON")
        except frames.NotJson as exc:
            return _error(f"the run sent a call that is not JSON: {exc}")
        if not isinstance(request, dict):
            return _error("the run sent a call that is not an object")
        if request.get("op") == "module":
            module = self._broker.module(self._caller)
            self._bytes += len(module)
            if self._bytes <= self._broker.config.max_bytes:
                return module
            # Said as what it is (found by a review: "this run has passed 2,097,152 bytes" of a run
            # that had made no call, its catalog alone larger than its budget).
            limit, before = self._broker.config.max_bytes, self._bytes - len(module)
            if before >= limit:
                return self._over_budget()
            size, left = f"{len(module):,} bytes", f"{limit - before:,} of {limit:,}"
            return _error(f"the tools' catalog of {size} is more than this run may pass, {left} (RUNNER_TOOLS_MAX_MB)")
        server, tool, arguments = request.get("server"), request.get("tool"), request.get("arguments")
        if request.get("op") != "call" or not isinstance(server, str) or not isinstance(tool, str):
            return _error("the run sent a call without a server and a tool")
        if not isinstance(arguments, dict):
            return _error(f"{cut(server, SHOWN_CHARS)}.{cut(tool, SHOWN_CHARS)}: arguments must be an object")
        # Said back and looked up cut: a cut name names no server nor tool (its first 200 characters could).
        server, tool = cut(server, SHOWN_CHARS), cut(tool, SHOWN_CHARS)
        started = loop_time()
        refused = self._refusal(server, tool, started)
        if not refused:
            # One of the run's calls from here, forwarded or not: its arguments' check is the costly
            # part (found by a review: 1,999 refused by the schema, 25 s of the event loop's CPU, where
            # 100 forwarded were 2.6 s).
            self._calls += 1
            refused = self._mismatch(server, tool, arguments, body)
        if refused:
            answer = _error(f"{server}.{tool}: {refused}")
            return self._finish(server, tool, "refused", started, len(body), 0, answer)
        # In flight from here: a call taken in the same read as this one counts it.
        call = ToolCall(server, tool, arguments, len(body), started)
        self._in_flight.append(call)
        return call

    async def _forward(self, call: ToolCall) -> bytes:
        server, tool, size, started = call.server, call.tool, call.sent, call.started
        broker, config = self._broker, self._broker.config
        name = f"{server}.{tool}"
        connection = broker.connections[server]
        try:
            result = await connection.call(tool, call.arguments, self._deadline - loop_time())
        except Down as exc:
            status = "timeout" if isinstance(exc, TooSlow) else "unavailable"
            return self._finish(server, tool, status, started, size, 0, _error(f"{name}: {exc}"))
        except anyio.get_cancelled_exc_class():
            self._finished(server, tool, "cancelled", started, size, 0)  # told at the run's end
            raise
        except Exception as exc:
            said = connection.credentials.scrubbed(str(exc))[:MAX_SAID_CHARS]
            return self._finish(server, tool, "failed", started, size, 0, _error(f"{name}: the call failed: {said}"))
        finally:
            self._landed(call)
        value = message_of_error(result) if result.is_error else value_of_result(result)
        left = config.max_bytes - self._bytes
        if result.is_error:
            if isinstance(value, str):
                said, whole = value, True
            else:
                # Dumped no further than the run may take, or than its first characters say.
                said, whole = dumped_within(value, max(left, SAID_DUMPED))
            self._bytes += len(said)  # received all the same, however little of it is passed on
            said = connection.credentials.scrubbed(said, whole)
            answer = _error(f"{name}: the tool failed: {said[:MAX_SAID_CHARS]}")
            return self._finish(server, tool, "tool_error", started, size, len(answer), answer)
        # Dumped no further than the run may take: a result it is refused costs no dump of the rest.
        dumped, whole = dumped_within(value, left - len(_OK_HEAD) - 1)
        if whole and connection.credentials.in_result(dumped):
            # A credential of its entry's that the tool told (its own environment, say): masked, dumped again.
            dumped, whole = dumped_within(connection.credentials.masked_result(value), left - len(_OK_HEAD) - 1)
        if not whole:
            got = len(_OK_HEAD) + len(dumped)
            self._bytes += got  # received all the same: a call repeated does not get it again
            refused = (
                f"{name}: its result (more than {got:,} bytes) would pass what this run "
                f"may pass through tools ({config.max_bytes:,} bytes; RUNNER_TOOLS_MAX_MB)"
            )
            return self._finish(server, tool, "refused", started, size, got, _error(refused))
        answer = f"{_OK_HEAD}{dumped}}}".encode()
        self._bytes += len(answer)
        return self._finish(server, tool, "ok", started, size, len(answer), answer)

    def _refusal(self, server: str, tool: str, now: float) -> str:
        """Why the run may not call `server`'s `tool` now ('' if it may)."""
        config = self._broker.config
        connection = self._broker.connections.get(server)
        if connection is None or not connection.server.serves(self._caller):
            # Its Python name, given to mcp_tools.call (found by a first hour: 'my_time' for 'my-time',
            # as mcp_tools.servers names it): the name to give, where the caller may use it.
            named = self._broker.by_python_name.get(server)
            if named and named != server and self._broker.connections[named].server.serves(self._caller):
                return f"the server's name is {named!r}: mcp_tools.call takes the server's own names"
            return "no such server here"
        # Its Python name, given to mcp_tools.call (found by a first hour: 'get_sum' for 'get-sum' was
        # "no such tool", or "not allowed"): the name to give it.
        named = connection.named_in_python(tool) if tool not in connection.tools else ""
        if named:
            return (
                f"the server calls this tool {named!r}: mcp_tools.call takes the server's own names "
                f"(mcp_tools.{connection.server.python_name}.{tool} is its function)"
            )
        if not connection.server.allows(tool):
            return "this tool is not allowed here (RUNNER_TOOLS_CONFIG's tools)"
        listed = connection.tools.get(tool)
        if listed is None:
            return f"the server is down: {connection.down}" if connection.down else "the server lists no such tool"
        if self._calls >= config.tools_max_calls:
            return f"this run has made its {config.tools_max_calls} tool calls (RUNNER_TOOLS_MAX_CALLS)"
        if len(self._in_flight) >= config.tools_max_concurrent:
            return f"this run has {config.tools_max_concurrent} tool calls in flight (RUNNER_TOOLS_MAX_CONCURRENT)"
        if now >= self._deadline:
            return "the run's time is up"
        return ""

    def _mismatch(self, server: str, tool: str, arguments: dict[str, Any], body: bytes) -> str:
        """Why `arguments` may not go to `server`'s `tool` (a tool `_refusal` let through), '' if they may."""
        if unsendable := frames.unsendable(body, arguments):
            return unsendable
        schema = self._broker.connections[server].tools[tool].input_schema
        mismatch = self._broker.check_arguments(server, tool, schema, arguments)
        if not mismatch:
            return ""
        return f"the arguments do not match the tool's input schema: {mismatch}{_unknown(schema, arguments)}"

    def _over_budget(self) -> bytes:
        limit = self._broker.config.max_bytes
        return _error(f"this run has passed {limit:,} bytes through tools (RUNNER_TOOLS_MAX_MB)")

    def _finish(self, server: str, tool: str, status: str, started: float, sent: int, got: int, answer: bytes) -> bytes:
        self._finished(server, tool, status, started, sent, got)
        return answer

    def _finished(self, server: str, tool: str, status: str, started: float, sent: int, got: int) -> None:
        self._untold.append((server, tool, status, loop_time() - started, sent, got))

    def _landed(self, call: ToolCall) -> None:
        """`call` is no longer in flight (the same call twice is two entries: the one itself goes)."""
        for n, taken in enumerate(self._in_flight):
            if taken is call:
                del self._in_flight[n]
                return

    def end(self, timed_out: bool = False) -> None:
        """`RunTools.end`: what is still in flight was never forwarded (the run's end came first)."""
        for call in self._in_flight:
            self._finished(call.server, call.tool, "cancelled", call.started, call.sent, 0)
        self._in_flight.clear()
        if timed_out:  # the run's time ran out on them: its timeout is what cancelled them
            self._untold = [
                (server, tool, "timeout" if status == "cancelled" else status, seconds, sent, got)
                for server, tool, status, seconds, sent, got in self._untold
            ]
        self.tell()

    def tell(self) -> None:
        """`RunTools.tell`: log and count each call answered since the last time."""
        broker = self._broker
        untold, self._untold = self._untold, []
        for server, tool, status, seconds, sent, got in untold:
            connection = broker.connections.get(server)
            # A run may name anything: only names the file and the listing hold become metric labels.
            known = connection is not None and tool in connection.tools
            broker.observed(server if known else "(unknown)", tool if known else "(unknown)", status, seconds)
            if status == "refused" and not self._refused.allows(broker.log, logging.INFO, self._request_id):
                continue
            log_event(
                broker.log,
                logging.INFO,
                "tool call",
                self._request_id,
                server=server if known else server[:100],
                tool=tool if known else tool[:100],
                status=status,
                duration=round(seconds, 4),
                sent_bytes=sent,
                received_bytes=got,
            )


def _unknown(schema: Any, arguments: dict[str, Any]) -> str:
    """What a mismatch says more of the arguments the schema names none of: a misspelt keyword (`tz` for
    `timezone`) was told only that `timezone` is required (found by a first hour)."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or not properties:
        return ""
    unknown = [name for name in arguments if name not in properties]
    if not unknown:
        return ""
    shown = ", ".join(repr(cut(name, 100)) for name in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
    takes = ", ".join(cut(str(name), 100) for name in list(properties)[:20]) + (" ..." if len(properties) > 20 else "")
    return f" ({shown}: no such argument; it takes {takes})"


def _error(message: str) -> bytes:
    return json.dumps({"ok": False, "error": message}).encode()

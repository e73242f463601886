"""Tools of other MCP servers, called from this run as Python functions (code mode).

Each call goes to the server that runs this code, over this run's own channel to it: the server checks
it (the tool is allowed, the arguments match its input schema, the run is within its limits), makes
it with the official MCP client, and answers. This run never reaches the tools' servers, nor their
credentials.

    import mcp_tools
    mcp_tools.<server>.<tool>(**arguments)      # one function per allowed tool
    mcp_tools.call("server", "tool", {...})       # the same, by names given as strings

A call returns the tool result's ``structuredContent`` when it has one; else, when every content block
is text, the text (blocks joined by a newline); else the list of content blocks as JSON objects. A
result with ``isError``, a tool that is not allowed, a server that is unknown or down, arguments that
do not match the input schema, or a call over a limit raises ``ToolError``. A call still waiting when
the run's time is up ends with the run (status ``timeout``, its message naming the call).

Threads may call tools at once (a ``concurrent.futures.ThreadPoolExecutor``, say), as may forked
processes, up to the run's limit of calls in flight (below); a call past it raises ``ToolError``.
"""

# This docstring is what help(mcp_tools) shows a run, so how the module is made is said here instead:
# the server never imports this file; it sends its source to a run that imports ``mcp_tools``
# (`toolchannel._ToolsFinder`), with the caller's catalog, and the run makes the module from both.
# Standard library only.

from __future__ import annotations

import itertools as _mcp_itertools
import json as _mcp_json
import keyword as _mcp_keyword
import os as _mcp_os
import types as _mcp_types
import typing as _mcp_typing

if _mcp_typing.TYPE_CHECKING:  # annotations are text here, never evaluated: no name for dir() to show
    from collections.abc import Callable
    from typing import Any

# Every name of this module but `call`, `ToolError` and `servers` starts with `_mcp` (`annotations`, the
# future import's, is deleted at its end): a server's Python name cannot be one of them
# (`runner.config.tools.RESERVED`).
_mcp_exchange: Callable[[bytes, bytes], bytes] | None = None
_mcp_counts = _mcp_itertools.count(1)
_mcp_limit_bytes = 0
servers: dict[str, Any] = {}
# What help(mcp_tools) documents (and `from mcp_tools import *` takes): these, and each server.
__all__ = ["ToolError", "call", "servers"]


class ToolError(Exception):
    """A tool call that returned no value: the message says why, and names the server and the tool."""


def call(server: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """Call `tool` of `server` (their names as the server lists them) with `arguments`; its value, or
    `ToolError`."""
    if arguments is None:
        arguments = {}
    if not isinstance(server, str) or not isinstance(tool, str):
        raise TypeError("mcp_tools.call takes the server's and the tool's names as strings")
    if not isinstance(arguments, dict):
        raise TypeError(f"{server}.{tool}: arguments must be a dict, not {type(arguments).__name__}")
    try:
        # No NaN or Infinity: JSON has neither, and a downstream server would get null for them.
        request = {"op": "call", "server": server, "tool": tool, "arguments": arguments}
        body = _mcp_json.dumps(request, allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise ToolError(f"{server}.{tool}: the arguments are not JSON: {exc}") from None
    if len(body) > _mcp_limit_bytes:
        raise ToolError(
            f"{server}.{tool}: {len(body):,} bytes of arguments, more than this run may send "
            f"({_mcp_limit_bytes:,}; RUNNER_TOOLS_MAX_MB)"
        )
    exchange = _mcp_exchange
    if exchange is None:
        raise ToolError(f"{server}.{tool}: this run has no channel to the server")
    # Threads and processes may call at once (up to RUNNER_TOOLS_MAX_CONCURRENT): each call's id is its
    # own, and its answer comes to its caller alone.
    try:
        raw = exchange(body, b"%d.%d" % (_mcp_os.getpid(), next(_mcp_counts)))
    except (OSError, ValueError) as exc:
        raise ToolError(f"{server}.{tool}: this run's channel to the server failed: {exc}") from None
    try:
        answer = _mcp_json.loads(raw)
    except (ValueError, RecursionError):
        raise ToolError(f"{server}.{tool}: the server's answer is not JSON") from None
    if not isinstance(answer, dict):
        raise ToolError(f"{server}.{tool}: the server's answer is not an object")
    if answer.get("ok") is True:
        return answer.get("value")
    said = str(answer.get("error") or "the call failed")
    # What the server refuses before it reads the call (the run's bytes) names no server nor tool.
    raise ToolError(said if said.startswith(f"{server}.{tool}: ") else f"{server}.{tool}: {said}")


class _mcp_NoSuchName(ToolError, AttributeError):
    """A server or tool not here: a `ToolError`, and an AttributeError for ``hasattr``."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (a worker process's error sent back, say) as the ToolError its name says it is: pickle
        # finds classes by name, and mcp_tools.ToolError is not this one (found by a review).
        return (ToolError, self.args)


# A run's traceback names the class: ToolError, as the module says a failed call raises.
_mcp_NoSuchName.__name__ = _mcp_NoSuchName.__qualname__ = "ToolError"


class _mcp_Server(_mcp_types.ModuleType):
    """One downstream server's allowed tools, as functions: a module of its own, so that help() of it
    lists them, each with its description and input schema."""

    def __init__(self, name: str, python_name: str, down: str = "", configured: dict[str, str] | None = None) -> None:
        super().__init__(f"mcp_tools.{python_name}", f"The tools of the MCP server {name!r} this run may call.")
        self._mcp_server_name = name
        self._mcp_down = down
        self._mcp_configured = configured or {}
        self.__all__: list[str] = []

    def __getattr__(self, python_name: str) -> Any:
        # Only for a name the server has no function of: its tools are attributes of their own.
        if python_name.startswith("_"):
            raise AttributeError(python_name)
        server = self._mcp_server_name
        if self._mcp_down:
            # Down when this process imported the module (no tool listed): its calls go on, and the
            # server says whether it is still down (a review: an AttributeError, not a ToolError).
            tool = self._mcp_configured.get(python_name, python_name)
            described = f"A tool of {server!r}, down when imported."
            return _mcp_function(server, self.__name__, tool, python_name, described, {})
        raise _mcp_NoSuchName(
            f"{server}.{python_name}: no such tool here, or not one this run may call "
            f"(help(mcp_tools.{self.__name__.removeprefix('mcp_tools.')}) lists those it may)"
        )

    def __repr__(self) -> str:
        return f"<mcp_tools server {self._mcp_server_name!r}: {', '.join(self.__all__)}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled, or copied, as the server of that name in mcp_tools (a module is neither).
        return (_mcp_server_named, (self.__name__.removeprefix("mcp_tools."),))


def _mcp_server_named(python_name: str) -> _mcp_Server:
    server: _mcp_Server = servers[python_name]
    return server


def __getattr__(name: str) -> Any:
    """A server this run has not: a ``ToolError`` (and an AttributeError, for ``hasattr``)."""
    # Found by a first hour: it was an AttributeError alone, not the ToolError said.
    if name.startswith("_"):
        raise AttributeError(name)
    raise _mcp_NoSuchName(f"{name}: no such server here (help(mcp_tools) lists them)")


def _mcp_function(
    server: str, module: str, tool: str, python_name: str, description: str, schema: Any
) -> Callable[..., Any]:
    takes = _mcp_arguments(schema)

    def tool_function(*positional: Any, **arguments: Any) -> Any:
        if positional:  # said with the names it takes (found by a first hour: "takes 0 positional arguments")
            raise TypeError(f"{python_name}() takes keyword arguments only: {python_name}({takes})")
        return call(server, tool, arguments)

    tool_function.__name__ = python_name
    # Where it is found from mcp_tools (pickle finds a function by it: a worker process's, say).
    tool_function.__qualname__ = f"{module.removeprefix('mcp_tools.')}.{python_name}"
    shown = _mcp_json.dumps(schema, indent=2, sort_keys=True)
    tool_function.__doc__ = (
        f"{python_name}({takes})\n\n{description}\n\nThe tool {tool!r} of {server!r}. Input schema:\n{shown}"
    )
    tool_function.schema = schema  # type: ignore[attr-defined]
    return tool_function


def _mcp_arguments(schema: Any) -> str:
    """The keyword arguments `schema` names, as a call writes them: the required first, then the others
    with `=...`; a name no keyword can be, quoted (`mcp_tools.call` takes it); cut past 200 characters."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return "**arguments"
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    names = [name for name in properties if name in required] + [name for name in properties if name not in required]
    said = [
        (name if name.isidentifier() and not _mcp_keyword.iskeyword(name) else repr(name))
        + ("" if name in required else "=...")
        for name in names
    ]
    shown = ", ".join(said)
    return shown if len(shown) <= 200 else shown[:200].rsplit(", ", 1)[0] + ", ..."


def _mcp_start(catalog: dict[str, Any], exchange: Callable[[bytes, bytes], bytes]) -> None:
    """Make this module's servers and functions from the server's `catalog` (whose Python names the
    server made unique and safe); calls go through `exchange`."""
    global _mcp_exchange, _mcp_limit_bytes
    _mcp_exchange = exchange
    _mcp_limit_bytes = int(catalog.get("limit_bytes", 0))
    lines = [__doc__ or ""]
    if "most_in_flight" in catalog:
        lines.append(f"Calls in flight at once, at most: {int(catalog['most_in_flight'])}.\n")
    lines.append("Servers and their tools here:")
    for entry in catalog.get("servers", []):
        server = _mcp_Server(entry["name"], entry["python_name"], entry.get("down", ""), entry.get("configured"))
        lines.append(f"  {entry['python_name']}  ({entry['name']})")
        for tool in entry.get("tools", []):
            made = _mcp_function(
                entry["name"], server.__name__, tool["name"], tool["python_name"], tool["description"], tool["schema"]
            )
            setattr(server, tool["python_name"], made)
            server.__all__.append(tool["python_name"])
            first = (tool["description"].strip().splitlines() or [""])[0][:100]
            lines.append(f"    .{tool['python_name']}({_mcp_arguments(tool['schema'])[:80]})  {first}")
        if entry.get("down"):
            lines.append(f"    (down now: {entry['down']})")
        servers[entry["python_name"]] = server
        globals()[entry["python_name"]] = server
        __all__.append(entry["python_name"])
    globals()["__doc__"] = "\n".join(lines)


# What help(mcp_tools) and dir(mcp_tools) need not show a run (found by a first hour): the future import's
# name, and the module's own annotations.
del annotations, __annotations__

"""The downstream MCP servers runs may call (RUNNER_TOOLS_CONFIG), read at start into frozen records.

The file has the ``mcpServers`` shape that Claude Desktop's users already write, one entry per server,
stdio (``command``, ``args``, ``env``) or Streamable HTTP (``url``, ``headers``), and two keys of ours:
``tools``, required, the tools runs may call (``["*"]``: every one the server lists), and ``callers``,
the token names that may use it (absent: every caller). A refusal names the file and the entry, and
never echoes a value of ``env`` or ``headers``: those hold credentials, which stay in the server.

Whether the named tools exist is known only once each server has listed them: the broker checks that
at start (`runner.tools`), and stops the server the same way.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from runner.errors import ConfigError

VARIABLE = "RUNNER_TOOLS_CONFIG"
ALL_TOOLS = "*"
MAX_FILE_BYTES = 1024 * 1024
MAX_SERVERS = 64
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_]")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*")
_STDIO_KEYS = frozenset({"command", "args", "env", "cwd"})
_HTTP_KEYS = frozenset({"url", "headers"})
_OURS = frozenset({"tools", "callers"})
# What `mcp_tools` itself defines (runner/inrun/mcp_tools.py: its other names start with `_mcp`): no
# server may take these names there.
RESERVED = frozenset({"call", "ToolError", "servers"})
# Keys other clients write that mean nothing here (Claude Desktop's `type`...); `disabled` does (`parse`).
_IGNORED = frozenset({"type", "transport", "disabled", "description", "timeout"})


def python_name(name: str) -> str:
    """The name a server or a tool has in `mcp_tools`: each character that is not a letter, digit or
    ``_`` made ``_``; one that starts with a digit, or is a Python keyword, gets a ``_`` before it."""
    import keyword

    made = _NOT_IN_A_NAME.sub("_", name)
    if not made or made[0].isdigit() or keyword.iskeyword(made):
        made = "_" + made
    return made


@dataclass(frozen=True, slots=True)
class Downstream:
    """One downstream server: how it is reached, and what of it runs may call, and who."""

    name: str
    python_name: str
    tools: tuple[str, ...]  # ("*",): every tool it lists
    callers: tuple[str, ...] | None  # None: every caller
    command: str = ""  # stdio
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    url: str = ""  # Streamable HTTP
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def every_tool(self) -> bool:
        return self.tools == (ALL_TOOLS,)

    def allows(self, tool: str) -> bool:
        """Whether runs may call `tool` of this server (that it exists is the broker's to know)."""
        return self.every_tool or tool in self.tools

    def serves(self, caller: str | None) -> bool:
        """Whether `caller` (a token's name; None: a stdio client, or HTTP without tokens) may use it."""
        return self.callers is None or (caller is not None and caller in self.callers)

    def __repr__(self) -> str:  # never the credentials
        where = self.url or self.command
        return f"Downstream({self.name!r}, {where!r}, tools={self.tools!r}, callers={self.callers!r})"


@dataclass(frozen=True, slots=True)
class ToolServers:
    """RUNNER_TOOLS_CONFIG, read: its path (the sandbox hides it from runs) and its servers, in the file's order."""

    path: str
    servers: tuple[Downstream, ...]

    def named(self, name: str) -> Downstream | None:
        """The server called `name` in the file, or None."""
        return next((server for server in self.servers if server.name == name), None)

    @classmethod
    def read(cls, path: str) -> ToolServers:
        """Parse the file at `path`; `ConfigError` naming it for any fault."""
        try:
            with open(path, "rb") as file:
                data = file.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise ConfigError(VARIABLE, f"cannot read {path!r}: {exc.strerror or exc}") from None
        if len(data) > MAX_FILE_BYTES:
            raise ConfigError(VARIABLE, f"{path}: more than {MAX_FILE_BYTES:,} bytes")
        return cls.parse(data, path)

    @classmethod
    def parse(cls, data: bytes | str, path: str) -> ToolServers:
        """The servers `data` (the file's bytes) describes; `ConfigError` naming `path` and the entry."""
        try:
            document = json.loads(data, object_pairs_hook=_unique_keys)
        except _TwiceGiven as twice:
            # Found by a first hour: JSON keeps the last of two, so a second "time" entry silently
            # replaced the first, its `callers` with it.
            raise ConfigError(VARIABLE, f"{path}: {twice.key!r} is given twice in one object") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(VARIABLE, f"{path}: not JSON ({exc})") from None
        servers = document.get("mcpServers") if isinstance(document, dict) else None
        if not isinstance(servers, dict):
            raise ConfigError(VARIABLE, f'{path}: expected an object with "mcpServers", an object of servers')
        if not servers:
            raise ConfigError(VARIABLE, f"{path}: mcpServers names no server")
        if len(servers) > MAX_SERVERS:
            raise ConfigError(VARIABLE, f"{path}: mcpServers names {len(servers)} servers, more than {MAX_SERVERS}")
        made: list[Downstream] = []
        by_python: dict[str, str] = {}
        for name, entry in servers.items():
            if isinstance(entry, dict) and "disabled" in entry:
                if not isinstance(entry["disabled"], bool):
                    raise ConfigError(VARIABLE, f'{path}: mcpServers.{name}: "disabled" is true or false')
                if entry["disabled"]:
                    continue  # kept in the file, not started (Cline's and Roo Code's key; found by a first hour)
            server = _server(path, name, entry)
            if server.python_name in RESERVED or server.python_name.startswith(("__", "_mcp")):
                raise ConfigError(
                    VARIABLE, f"{path}: mcpServers.{name}: {server.python_name!r} is mcp_tools' own name; rename it"
                )
            other = by_python.get(server.python_name)
            if other is not None:
                raise ConfigError(
                    VARIABLE,
                    f"{path}: mcpServers.{name}: its Python name {server.python_name!r} is also {other!r}'s; "
                    "rename one",
                )
            by_python[server.python_name] = name
            made.append(server)
        if not made:
            raise ConfigError(VARIABLE, f"{path}: every server of mcpServers is disabled")
        return cls(path, tuple(made))


def _server(path: str, name: str, entry: Any) -> Downstream:
    where = f"{path}: mcpServers.{name}"

    def refuse(message: str) -> ConfigError:
        return ConfigError(VARIABLE, f"{where}: {message}")

    if not _NAME.fullmatch(name):
        raise ConfigError(VARIABLE, f"{path}: mcpServers: a server's name is 1-64 letters, digits, '_', '.' or '-'")
    if not isinstance(entry, dict):
        raise refuse("expected an object")
    unknown = sorted(set(entry) - _STDIO_KEYS - _HTTP_KEYS - _OURS - _IGNORED)
    if unknown:
        import difflib

        known = sorted(_STDIO_KEYS | _HTTP_KEYS | _OURS)
        close = difflib.get_close_matches(unknown[0], known, n=1)  # found by a first hour: "comand", no guess
        raise refuse(f"unknown key {unknown[0]!r}" + (f"; did you mean {close[0]!r}?" if close else ""))
    if entry.get("type") == "sse" or entry.get("transport") == "sse":  # found by a first hour: taken silently
        raise refuse('an SSE server is not served here: give its Streamable HTTP "url", or a "command"')
    if "tools" not in entry:
        raise refuse('"tools" is required: the tools runs may call, or ["*"] for every one')
    tools = _strings(entry["tools"], "tools", refuse)
    if not tools:
        raise refuse('"tools" names no tool: give at least one, or ["*"]')
    if ALL_TOOLS in tools and len(tools) > 1:
        raise refuse('"tools": "*" stands alone')
    if len(set(tools)) != len(tools):
        raise refuse('"tools" names a tool twice')
    callers = None
    if "callers" in entry:
        callers = _strings(entry["callers"], "callers", refuse)
        if not callers:
            raise refuse('"callers" names no caller: leave it out for every caller')
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise refuse('give "command" (a stdio server) or "url" (Streamable HTTP), one of them')
    if has_command:
        if set(entry) & _HTTP_KEYS:
            raise refuse('"headers" is for a "url" server')
        command = entry["command"]
        if not isinstance(command, str) or not command.strip():
            raise refuse('"command" must be a non-empty string')
        if _words_in_one(command):  # found by a first hour: "No such file or directory", no more
            raise refuse(f'"command" is one program ({command.split()[0]!r}): its words after it go in "args"')
        cwd = entry.get("cwd", "")
        if not isinstance(cwd, str):
            raise refuse('"cwd" must be a string')
        return Downstream(
            name,
            python_name(name),
            tools,
            callers,
            command=command,
            args=_strings(entry.get("args", []), "args", refuse),
            env=_pairs(entry.get("env", {}), "env", refuse),
            cwd=cwd,
        )
    if set(entry) & (_STDIO_KEYS - {"command"}):
        raise refuse('"args", "env" and "cwd" are for a "command" server')
    url = entry["url"]
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise refuse('"url" must be an http:// or https:// URL')
    return Downstream(
        name, python_name(name), tools, callers, url=url, headers=_pairs(entry.get("headers", {}), "headers", refuse)
    )


def _words_in_one(command: str) -> bool:
    """Whether `command` is a program and its arguments written as one string: no program of its name
    (none on PATH, no file there), but one of its first word's."""
    import shutil

    first = command.split()[0]
    return first != command and shutil.which(command) is None and shutil.which(first) is not None


def _strings(value: Any, key: str, refuse: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise refuse(f'"{key}" must be a list of non-empty strings')
    return tuple(value)


def _pairs(value: Any, key: str, refuse: Any) -> tuple[tuple[str, str], ...]:
    # The values are credentials: the message names the key only. A header's value with a newline (a
    # token read with `$(cat file)`, say) would be echoed in the HTTP library's error: refused here.
    if not isinstance(value, dict):
        raise refuse(f'"{key}" must be an object of strings')
    for name, item in value.items():
        if not isinstance(item, str) or not name or "\x00" in name or "\x00" in item:
            raise refuse(f'"{key}": {name[:64]!r} must be a non-empty name with a string value')
        if key == "headers" and not (_HEADER_NAME.fullmatch(name) and _HEADER_VALUE.fullmatch(item)):
            raise refuse(
                f'"headers": {name[:64]!r}: a header name is letters, digits and !#$%&\'*+-.^_`|~, its value '
                "visible ASCII, spaces and tabs (no line break)"
            )
    return tuple(value.items())


class _TwiceGiven(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key[:100]


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the file, refused where it gives a key twice."""
    made: dict[str, Any] = {}
    for key, value in pairs:
        if key in made:
            raise _TwiceGiven(key)
        made[key] = value
    return made

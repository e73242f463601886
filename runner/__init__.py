"""python-runner-mcp: an MCP server that runs Python code in one-shot, resource-limited processes.

The package is layered; each sub-package's docstring says what it owns and what it must not import
(`tests/test_layout.py` enforces it):

- `runner.protocol`: the MCP side (the tool, its schemas, argument checks, the handlers).
- `runner.transports`: moving JSON-RPC messages (stdio, and Streamable HTTP with its auth).
- `runner.execution`: running a request to its result (admission, interpreter supply, driving a run,
  its teardown).
- `runner.processes`: the isolation plan, and the server's handles on an interpreter process (spawn,
  fork server, limits).
- `runner.inrun`: what runs inside those processes, standard library only (the bootstrap, the zygote,
  namespaces, seccomp, the wire between the server and a run).
- Shared by all: `config` (with `variables`, every variable's declaration, `settings`, how one is
  declared and read, `removed`, the
  names no longer read, and `environment`, where the paths it names are opened), `errors`, `logs`,
  `fdio`, and `outcome`, the
  frozen dataclasses where the protocol and execution sides meet.
- Composition roots, the only modules that import both sides: `__main__` (arguments and dispatch),
  `serving` (the server over stdio or HTTP, its workers and signals) and `api` (`run_code`, one call
  without a client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from runner.api import run_code

__all__ = ["__version__", "run_code"]


def __getattr__(name: str) -> Any:
    # Lazy: importing any part of the package (say, the protocol side) must not import the
    # execution side through this file.
    if name == "run_code":
        from runner.api import run_code

        return run_code
    raise AttributeError(f"module 'runner' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "run_code"])

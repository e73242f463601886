"""python-runner-mcp: an MCP server that runs Python code in one-shot, resource-limited processes."""

from __future__ import annotations

__version__ = "0.1.0"

from runner.api import run_code

__all__ = ["__version__", "run_code"]

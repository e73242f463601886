"""runner/inrun/mcp_tools.py as a run's help(mcp_tools) shows it."""

from __future__ import annotations

import ast

from tests.conftest import REPO


def test_the_module_help_a_run_reads_says_how_to_call_tools_and_nothing_of_how_the_server_makes_it() -> None:
    # Found in a first hour: help(mcp_tools) told the model "This file is not imported by the server ...
    # (`bootstrap._ToolsFinder`)", a note for this project's developers.
    doc = ast.get_docstring(ast.parse((REPO / "runner" / "inrun" / "mcp_tools.py").read_text())) or ""
    assert "mcp_tools.<server>.<tool>(**arguments)" in doc
    assert "ToolError" in doc
    assert "Threads may call tools at once" in doc
    for internal in ("bootstrap", "_ToolsFinder", "not imported by the server", "Standard library only"):
        assert internal not in doc

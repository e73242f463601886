"""runner/inrun/mcp_tools.py as a run's help(mcp_tools) shows it."""

from __future__ import annotations

import ast
import pydoc
import types

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


def test_what_help_and_dir_show_a_run_are_the_modules_own_names_and_no_note_of_ours() -> None:
    # Found by a first hour: dir() listed the imports' names (Any, Callable, annotations), help() printed
    # the module's __annotations__ and a note for this project's developers.
    module = types.ModuleType("mcp_tools")
    exec(compile((REPO / "runner" / "inrun" / "mcp_tools.py").read_text(), "mcp_tools.py", "exec"), vars(module))
    public = {name for name in dir(module) if not name.startswith("_")}
    assert public == {"ToolError", "call", "servers"}
    assert "__annotations__" not in vars(module)
    shown = pydoc.render_doc(module, renderer=pydoc.plaintext)
    assert "found by" not in shown.lower()
    assert "_mcp_exchange" not in shown

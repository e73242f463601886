"""What code mode shows of tools, without servers: a result's value, and run_python's lines."""

from __future__ import annotations

from typing import Any

from mcp import types

from runner.config.tools import Downstream
from runner.tools.catalog import MAX_DESCRIBED, describe, value_of_result


def test_a_result_is_its_structured_content_else_its_text_else_its_blocks() -> None:
    def of(**result: Any) -> Any:
        return value_of_result(types.CallToolResult.model_validate(result))

    assert of(structuredContent={"a": 1}, content=[{"type": "text", "text": "x"}]) == {"a": 1}
    assert of(content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "a\nb"
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    assert of(content=[{"type": "text", "text": "a"}, image]) == [{"type": "text", "text": "a"}, image]
    assert of(content=[]) == ""


def test_the_description_lists_each_allowed_tool_in_one_bounded_line_and_says_where_the_rest_are() -> None:
    server = Downstream("my-server", "my_server", ("*",), None, command="x")
    tools = {
        f"tool-{n:03d}": types.Tool(name=f"tool-{n:03d}", description="Does a thing.\nMore.", input_schema={})
        for n in range(MAX_DESCRIBED + 5)
    }
    named = {name: name.replace("-", "_") for name in tools}
    text = describe([(server, tools, named)])
    assert "- mcp_tools.my_server.tool_000: Does a thing." in text
    assert "More." not in text
    assert text.count("\n- ") == MAX_DESCRIBED
    assert text.endswith("help(mcp_tools) lists the rest.")
    assert "lists the rest" not in describe([(server, dict(list(tools.items())[:2]), named)])


def test_the_description_names_the_tools_as_mcp_tools_has_them_and_leaves_out_those_it_leaves_out() -> None:
    # Found by a review: the description named `__class__`, `_mcp_x` and each of three tools whose
    # Python name is `a_b`, which mcp_tools leaves out or keeps one of.
    server = Downstream("s", "s", ("*",), None, command="x")
    tools = {
        name: types.Tool(name=name, description=name, input_schema={}) for name in ("a-b", "a.b", "__class__", "_mcp_x")
    }
    text = describe([(server, tools, {"a-b": "a_b"})])
    assert text.splitlines()[1:] == ["- mcp_tools.s.a_b: a-b"]

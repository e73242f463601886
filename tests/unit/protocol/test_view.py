"""The MCP App view's resource and declarations (runner/protocol/view.py), and which clients it is for.
The view in a real browser: tests/e2e/protocol/test_view.py."""

from __future__ import annotations

import re

import mcp_types as types
import pytest

from runner.config import Config
from runner.protocol.tool import tool_definition
from runner.protocol.view import CSP, VIEW_URI, AppView, client_shows_views

UI = "io.modelcontextprotocol/ui"
MIME = "text/html;profile=mcp-app"


def test_run_python_names_the_view_unless_the_view_is_off() -> None:
    on = tool_definition(Config.from_env({}))
    assert on.meta == {"ui": {"resourceUri": VIEW_URI}, "ui/resourceUri": VIEW_URI}
    assert on.model_dump(by_alias=True)["_meta"]["ui"]["resourceUri"] == VIEW_URI
    off = tool_definition(Config.from_env({"RUNNER_APP_VIEW": "off"}))
    assert off.meta is None
    assert off.model_dump(by_alias=True, exclude_none=True).keys() == on.model_dump(
        by_alias=True, exclude_none=True
    ).keys() - {"_meta"}


def test_the_table_s_rows_are_none_where_the_view_is_off_or_a_call_returns_no_bytes() -> None:
    assert Config.from_env({}).returns.table_rows == 1000
    assert Config.from_env({"RUNNER_MAX_TABLE_ROWS": "50"}).returns.table_rows == 50
    assert Config.from_env({"RUNNER_APP_VIEW": "off"}).returns.table_rows == 0
    assert Config.from_env({"RUNNER_MAX_RETURNED_MB": "0"}).returns.table_rows == 0


def test_the_view_is_one_document_under_300_kib_that_fetches_nothing_and_asks_for_no_domain() -> None:
    view = AppView.load()
    html = view.html
    assert len(html.encode("utf-8")) < 300 * 1024
    assert html.lstrip().lower().startswith("<!doctype html>")
    # Inline only: no element that loads a URL, no URL of any scheme but data: made from a run's own bytes.
    assert re.search(r"<(link|iframe|object|embed|base)\b", html, re.IGNORECASE) is None
    assert re.search(r"<script\b[^>]*\bsrc=", html, re.IGNORECASE) is None
    assert re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", html, re.IGNORECASE) is None
    assert re.search(r"\b(fetch|XMLHttpRequest|WebSocket|EventSource|importScripts|sendBeacon)\b", html) is None
    assert "innerHTML" not in html, "what a run wrote is put in the page as text, never as markup"
    assert CSP == {"connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": []}
    contents = view.contents().model_dump(by_alias=True)
    assert (contents["uri"], contents["mimeType"]) == (VIEW_URI, MIME)
    assert contents["_meta"] == {"ui": {"csp": CSP, "prefersBorder": True}}
    listed = view.resource().model_dump(by_alias=True)
    assert (listed["uri"], listed["mimeType"], listed["size"]) == (VIEW_URI, MIME, len(html.encode("utf-8")))


@pytest.mark.parametrize(
    ("capabilities", "shows"),
    [
        (None, False),
        (types.ClientCapabilities(), False),
        (types.ClientCapabilities(extensions={UI: {"mimeTypes": [MIME]}}), True),
        (types.ClientCapabilities(experimental={UI: {"mimeTypes": [MIME]}}), True),
        (types.ClientCapabilities(extensions={UI: {}}), False),
        (types.ClientCapabilities(extensions={UI: {"mimeTypes": ["text/html"]}}), False),
        (types.ClientCapabilities(extensions={UI: {"mimeTypes": MIME}}), False),
        (types.ClientCapabilities(extensions={"io.modelcontextprotocol/tasks": {}}), False),
    ],
)
def test_a_client_shows_views_only_when_it_declares_the_extension_with_its_mime_type(
    capabilities: types.ClientCapabilities | None, shows: bool
) -> None:
    assert client_shows_views(capabilities) is shows

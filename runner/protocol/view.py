"""The MCP App view of a run (the `io.modelcontextprotocol/ui` extension, "MCP Apps"): the `ui://`
resource `run_python` names, what its tool and resource say of it, and which clients show it.

The view is one hand-written HTML document beside this module (`run.html`): its script speaks the
extension's postMessage JSON-RPC itself. ext-apps' own client library, bundled with what it needs, is
541,828 bytes, more than the whole view should weigh; what the view uses of it (initialize, the
tool's input and result, host context, tools/call, resources/read, size changes) is some 150 lines.
Read once at start; a host fetches it with resources/read and renders it in a sandboxed iframe.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import mcp_types as types
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID

VIEW_URI = "ui://python-runner/run.html"
# Nothing external: no connect, resource, frame or base-URI domain. The view's scripts and styles are
# inline, its images data: URLs (which the extension's default policy allows), its reads through the host.
CSP: dict[str, list[str]] = {"connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": []}


@dataclass(frozen=True, slots=True)
class AppView:
    """The view's document, read once, and what the tool and resources/list say of it."""

    html: str

    @classmethod
    def load(cls) -> AppView:
        return cls(resources.files(__package__).joinpath("run.html").read_text(encoding="utf-8"))

    @staticmethod
    def tool_meta() -> dict[str, Any]:
        """run_python's `_meta`: the view's URI, also under the flat key hosts of the extension's first
        release read."""
        return {"ui": {"resourceUri": VIEW_URI}, "ui/resourceUri": VIEW_URI}

    def resource(self) -> types.Resource:
        """The view as resources/list lists it."""
        return types.Resource(
            uri=VIEW_URI,
            name="run.html",
            title="Python run",
            description="The MCP App view of a run_python result: status, output, tables, figures, files",
            mime_type=APP_MIME_TYPE,
            size=len(self.html.encode("utf-8")),
            _meta={"ui": {"csp": CSP, "prefersBorder": True}},
        )

    def contents(self) -> types.TextResourceContents:
        """The view as resources/read returns it."""
        return types.TextResourceContents(
            uri=VIEW_URI,
            mime_type=APP_MIME_TYPE,
            text=self.html,
            _meta={"ui": {"csp": CSP, "prefersBorder": True}},
        )


def client_shows_views(capabilities: types.ClientCapabilities | None) -> bool:
    """Whether a client's capabilities say it renders MCP App views: the extension, with its MIME type,
    under `extensions` (SEP-2133) or, as hosts of its first release wrote it, `experimental`."""
    if capabilities is None:
        return False
    for declared in (capabilities.extensions, capabilities.experimental):
        settings = declared.get(EXTENSION_ID) if isinstance(declared, dict) else None
        if isinstance(settings, dict):
            mime_types = settings.get("mimeTypes")
            if isinstance(mime_types, list) and APP_MIME_TYPE in mime_types:
                return True
    return False

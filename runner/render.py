"""The text block a call returns, in the product description's format. Pure formatting."""

from __future__ import annotations

from runner.capture import StreamText
from runner.outcome import RunResult, Status


def _section(name: str, stream: StreamText) -> str:
    body = stream.text
    if body and not body.endswith("\n"):
        body += "\n"
    return f"--- {name} ---\n{body}\n"


def render_text(result: RunResult) -> str:
    """Render a result, e.g.::

        [request_id=a1b2c3d4]
        --- stdout ---
        45

        --- exit_code: 0 | duration: 0.041s ---

    A stderr section follows stdout when there is stderr; lines for truncation and for the reason
    a run did not end normally come before the closing line.
    """
    parts = [f"[request_id={result.request_id}]\n"]
    ran = result.exit_code is not None
    if ran or result.stdout.total_bytes:
        parts.append(_section("stdout", result.stdout))
    if result.stderr.total_bytes:
        parts.append(_section("stderr", result.stderr))
    for name, stream in (("stdout", result.stdout), ("stderr", result.stderr)):
        if stream.truncated:
            parts.append(
                f"--- {name} truncated: {stream.dropped_bytes:,} of {stream.total_bytes:,} bytes dropped ---\n"
            )
    if result.status not in (Status.OK, Status.ERROR) and result.message:
        parts.append(f"--- {result.status}: {result.message} ---\n")
    exit_code = "none"
    if ran:
        exit_code = f"{result.exit_code}" + (f" ({result.signal})" if result.signal else "")
    parts.append(f"--- exit_code: {exit_code} | duration: {result.duration:.3f}s ---")
    return "".join(parts)

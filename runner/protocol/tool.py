"""The tools this server offers, `run_python` and `close_session`: names, descriptions, schemas and
annotations."""

from __future__ import annotations

import mcp_types as types

from runner.config import KIB, Config
from runner.protocol.schemas import (
    CLOSE_TOOL,
    RUN_TOOL,
    close_input_schema,
    close_output_schema,
    input_schema,
    output_schema,
)

DESCRIPTION = (
    "Run a Python 3 program in its own fresh, isolated interpreter process and return its stdout, "
    "stderr and exit code. Each call is a one-shot process (no state is kept between calls unless "
    "you pass 'session') with {importable}, an empty private working directory that is deleted "
    "afterwards, and hard limits: {cpu}s CPU, {mem} MiB memory{preloaded}, {procs} processes, {fsize} MiB per "
    "written file, wall-clock timeout {timeout:g}s by default (at most {max_timeout:g}s), output "
    "capped at {chars:,} characters per stream. The status field says why a run ended (ok, error, "
    "timeout, cpu_limit, memory_limit, file_size_limit, output_limit, signal, ...).{returns}{sessions}"
)
RETURNS = (
    " If the code ends with an expression, its repr() comes back as the result (a DataFrame as its "
    "table). Pass input files with 'files'; files the code writes in its directory come back (at "
    "most {files_kb} KiB of non-image files per call), and matplotlib figures (shown or left open) "
    "come back as PNG images (at most {images} per call, {image_kb} KiB each); there is no display."
)
SESSIONS = (
    ' To keep state between calls, pass session "new" and then the handle the result returns: '
    "variables, imports, loaded data and files carry over, each call is still its own process, and "
    "a call that does not end ok is rolled back (the session stays as it was). A session ends "
    "{idle:,} s after its last call, {life:,} s after it began, or with close_session; at most "
    "{mine} open per client."
)
# Where runs have no sandbox (`auto` found none: macOS, Windows, a Linux host without user namespaces or
# bubblewrap), the model must know that its code reaches the user's files.
UNSANDBOXED = (
    " WARNING: this server runs code WITHOUT a sandbox: the code runs as the user who started the server and "
    "can read, change and delete that user's files and reach the network; only the limits above hold. Do not "
    "run code you would not run on this machine yourself."
)
CLOSE_DESCRIPTION = (
    'End a session started by run_python with session "new": its processes, memory and files are '
    "freed at once, and its handle is unknown from then on."
)


def tool_definitions(config: Config, *, sandboxed: bool = True) -> list[types.Tool]:
    """Every tool this server offers, with their hand-written schemas: `close_session` only where
    sessions may be had; `sandboxed`: whether runs are (the description warns where they are not)."""
    if config.sessions_refused:
        return [tool_definition(config, sandboxed=sandboxed)]
    return [tool_definition(config, sandboxed=sandboxed), close_definition()]


def close_definition() -> types.Tool:
    """`close_session`."""
    return types.Tool(
        name=CLOSE_TOOL,
        title="Close a Python session",
        description=CLOSE_DESCRIPTION,
        input_schema=close_input_schema(),
        output_schema=close_output_schema(),
        annotations=types.ToolAnnotations(
            title="Close a Python session",
            read_only_hint=False,
            destructive_hint=True,  # the session's state is gone
            idempotent_hint=True,  # closing it again changes nothing (the answer says it is unknown)
            open_world_hint=False,
        ),
    )


def tool_definition(config: Config, *, sandboxed: bool = True) -> types.Tool:
    """`run_python`, with its hand-written schemas."""
    return types.Tool(
        name=RUN_TOOL,
        title="Run Python",
        description=DESCRIPTION.format(
            importable=_importable(config),
            preloaded=f" (beyond what {', '.join(config.preload)} map, when imported)" if config.preload else "",
            returns=RETURNS.format(
                images=config.max_images, image_kb=config.max_image_bytes // KIB, files_kb=config.max_files_bytes // KIB
            )
            if config.max_returned_bytes
            else "",
            sessions=SESSIONS.format(
                idle=config.session_idle_seconds, life=config.session_max_seconds, mine=config.max_sessions_per_caller
            )
            if not config.sessions_refused
            else "",
            cpu=config.max_cpu_seconds,
            mem=config.max_memory_mb,
            procs=config.max_processes,
            fsize=config.max_file_size_mb,
            timeout=config.default_timeout,
            max_timeout=config.max_timeout,
            chars=config.max_output_chars,
        )
        + ("" if sandboxed else UNSANDBOXED),
        input_schema=input_schema(config),
        output_schema=output_schema(),
        annotations=types.ToolAnnotations(
            title="Run Python",
            # Each run starts in a throwaway directory, but code can do whatever the server's user
            # may do within its limits: write and delete files, and reach the network unless the
            # deployment (Docker --network=none --read-only) takes that away.
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    )


def _importable(config: Config) -> str:
    if not config.package_versions and not config.wheelhouse_versions:
        return "no site-packages (standard library only)"
    found = "the standard library"
    if config.package_versions:
        found += " and these packages importable: " + ", ".join(config.package_versions)
    if config.wheelhouse_versions:
        # Generated from the wheelhouse's lock (RUNNER_WHEELHOUSE): what the model may import beyond.
        found += (
            "; these too, installed on first import (offline, from a vetted wheelhouse; importlib by a "
            "computed name needs them in 'packages'): " + ", ".join(config.wheelhouse_versions)
        )
    return found

"""The RUNNER_* names the server no longer reads: each stops the start, naming what replaces it.

Sizes were once in bytes or KiB (now MiB, `runner.config`), and two names restated what others set.
"""

from __future__ import annotations

from collections.abc import Mapping

from runner.config.settings import KIB, mebibytes
from runner.errors import ConfigError

# Sizes were once in bytes or KiB: each such name, its replacement in MiB, and the bytes of its unit.
RENAMED = (
    ("RUNNER_MAX_CODE_BYTES", "RUNNER_MAX_CODE_MB", 1),
    ("RUNNER_MAX_STDIN_BYTES", "RUNNER_MAX_STDIN_MB", 1),
    ("RUNNER_MAX_OUTPUT_BYTES", "RUNNER_MAX_OUTPUT_MB", 1),
    ("RUNNER_MAX_IMAGE_KB", "RUNNER_MAX_IMAGE_MB", KIB),
    ("RUNNER_MAX_RETURNED_KB", "RUNNER_MAX_RETURNED_MB", KIB),
    ("RUNNER_MAX_FILES_KB", "RUNNER_MAX_FILES_MB", KIB),
)
# Names that restated what others set, and why they are gone.
DROPPED = (
    (
        "RUNNER_SPAWN_MODE",
        "RUNNER_SANDBOX says how runs start now: namespaces and none fork them from a zygote, bwrap and "
        "none-posix-spawn spawn one interpreter per run (fork-server is RUNNER_SANDBOX=none, posix-spawn is "
        "RUNNER_SANDBOX=none-posix-spawn)",
    ),
    (
        "RUNNER_HTTP_MAX_BODY_KB",
        "the largest request body is the largest legal call, which RUNNER_MAX_CODE_MB, RUNNER_MAX_STDIN_MB and "
        "RUNNER_MAX_INPUT_MB set",
    ),
)


# Every removed name: set, it is refused above; left empty, it is let be (not taken for a misspelling).
REMOVED = frozenset(name for name, *_ in (*RENAMED, *DROPPED))


def refuse_removed(env: Mapping[str, str]) -> None:
    """A removed name set stops the start, naming what replaces it (and, for a size, its value in MiB)."""
    for old, new, unit in RENAMED:
        raw = env.get(old, "").strip()
        if raw:
            try:
                said = f" ({old}={raw} is {new}={mebibytes(int(raw) * unit)})"
            except ValueError:
                said = ""
            raise ConfigError(old, f"removed: use {new}, a number of MiB{said}")
    for old, why in DROPPED:
        if env.get(old, "").strip():
            raise ConfigError(old, f"removed: {why}")

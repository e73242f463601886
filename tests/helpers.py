"""Shared test helpers: process inspection, overlap counting, and schema checks of every result."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator

from runner.outcome import RunResult
from runner.protocol.results import structured_result
from runner.protocol.schemas import output_schema

OUTPUT_VALIDATOR = Draft202012Validator(output_schema())
SEED_PLAIN = r"\[request_id=[0-9a-f]{8}\]\n--- stdout ---\n45\n\n--- exit_code: 0 \| duration: \d+\.\d{3}s ---"


def checked(result: RunResult) -> RunResult:
    """Every result a test sees must validate against the published output schema."""
    OUTPUT_VALIDATOR.validate(structured_result(result))
    return result


def check_structured(content: dict[str, Any] | None) -> dict[str, Any]:
    """Validate a tool result's structuredContent against the output schema and return it."""
    assert content is not None, "every run_python result carries structuredContent"
    OUTPUT_VALIDATOR.validate(content)
    return content


def alive(pid: int) -> bool:
    """True if `pid` is a live process (zombies count as dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in (b"Z", b"X")


def processes_mentioning(text: str) -> list[int]:
    """Live processes (not this one) with `text` in their command line or environment: a server has
    its RUNNER_WORK_DIR in its environment, run interpreters their directory in theirs."""
    needle = text.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{part}", "rb") as source:
                    data = source.read()
            except OSError:
                continue
            if needle in data and alive(int(entry)):
                found.append(int(entry))
                break
    return found


def children_of(pid: int) -> list[int]:
    """Direct children of `pid`, including zombies (a zombie is an unreaped leak too)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def max_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """The largest number of [start, end] intervals that are open at one instant."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    depth = best = 0
    for _, delta in events:
        depth += delta
        best = max(best, depth)
    return best


def pids_in(text: str) -> list[int]:
    """Integers printed one per line as `pid=N`."""
    return [int(line.split("=", 1)[1]) for line in text.splitlines() if line.startswith("pid=")]

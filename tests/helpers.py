"""Shared test helpers: process inspection, waiting out asynchronous ends, overlap counting, schema
checks of every result, and a fake package environment."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import json
import logging
import os
import resource
import shutil
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from jsonschema import Draft202012Validator

from runner.config import Config
from runner.errors import Unavailable
from runner.execution.pool import Pool
from runner.outcome import RunRequest, RunResult
from runner.processes.isolation import plan_isolation
from runner.protocol.results import structured_result
from runner.protocol.schemas import output_schema

T = TypeVar("T")

OUTPUT_VALIDATOR = Draft202012Validator(output_schema())
# How long an end that the kernel or another process brings about on its own may take to show on a busy
# machine: a SIGKILLed process dying, an orphan being reaped, an exiting server's last clean-up.
SETTLE_SECONDS = 2.0
POLL_SECONDS = 0.01
SEED_PLAIN = r"\[request_id=[0-9a-f]{8}\]\n--- stdout ---\n45\n\n--- exit_code: 0 \| duration: \d+\.\d{3}s ---"


# Every way runs can be isolated: plain rlimits in each spawn mode, each run in bubblewrap, and each
# forked run in namespaces the zygote makes; each test mode's RUNNER_SANDBOX.
MODES = ("posix-spawn", "fork-server", "bwrap", "namespaces")
SANDBOX_OF_MODE = {
    "posix-spawn": "none-posix-spawn",
    "fork-server": "none",
    "bwrap": "bwrap",
    "namespaces": "namespaces",
}


def in_mode(config: Config, mode: str, **changes: Any) -> Config:
    """`config` set up for `mode`; the test is skipped where the mode cannot work (failed in CI)."""
    if mode == "bwrap":
        if shutil.which("bwrap") is None:
            _unavailable("bubblewrap is not installed (.ci/run installs it)")
        return dataclasses.replace(config, sandbox="bwrap", **changes)
    if mode == "namespaces":
        problem = _namespaces_problem(config.python)
        if problem:
            _unavailable(f"the zygote cannot make namespaces here: {problem}")
        return dataclasses.replace(config, sandbox="namespaces", **changes)
    return dataclasses.replace(config, sandbox=SANDBOX_OF_MODE[mode], **changes)


def python_since(config: Config, python: str, since: tuple[int, int]) -> Config:
    """`config` running `python` ("default": its own), the test skipped where that Python is older than
    `since` (a test of what only newer Pythons have, sys.monitoring's 3.12)."""
    chosen = config if python == "default" else dataclasses.replace(config, python=python)
    asked = f"import sys; print(sys.version_info >= {since!r})"
    if subprocess.run([chosen.python, "-c", asked], capture_output=True, check=False).stdout != b"True\n":
        pytest.skip(f"Python {since[0]}.{since[1]} and later")
    return chosen


@functools.cache
def _namespaces_problem(python: str) -> str:
    try:
        plan_isolation(dataclasses.replace(Config(), python=python, sandbox="namespaces"))
    except Unavailable as exc:
        return str(exc)
    return ""


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must be able to run every mode: {why}")
    pytest.skip(why)


async def run_dedented(pool: Pool, code: str, timeout: float = 10) -> RunResult:
    """Run `code` (dedented) in `pool`, its result checked against the output schema."""
    return checked(await pool.run(RunRequest("5a4db0c5", textwrap.dedent(code), timeout)))


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


def living(pids: Iterable[int]) -> list[int]:
    """The pids among `pids` that are live processes, sorted."""
    return sorted(pid for pid in set(pids) if alive(pid))


def settled(probe: Callable[[], T], timeout: float = SETTLE_SECONDS, interval: float = POLL_SECONDS) -> T:
    """`probe()` as soon as it comes back empty (falsy), else its value at the deadline.

    For checks of an end that happens asynchronously: a process killed with SIGKILL still dies a moment
    after the signal, an orphan is reaped by someone else. `assert settled(lambda: living(pids)) == []`
    fails only if a pid is still alive `timeout` seconds on, and the message names those. What must
    *not* happen (a process must stay alive, a file must not appear) stays a single check.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if not value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


async def settled_async(probe: Callable[[], T], timeout: float = SETTLE_SECONDS, interval: float = POLL_SECONDS) -> T:
    """`settled` for async tests: the event loop (a pool's sweeps and refills) runs on while it waits."""
    deadline = anyio.current_time() + timeout
    while True:
        value = probe()
        if not value or anyio.current_time() >= deadline:
            return value
        await anyio.sleep(interval)


def processes_mentioning(text: str) -> list[int]:
    """Live processes (not this one) with `text` in their command line or environment: a server has
    its RUNNER_WORK_DIR in its environment, run interpreters their directory in theirs.

    Every process on the machine is looked at, other copies of this suite included: `text` must be
    unique to this test (a path under its tmp_path), never a fixed string."""
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


def tree_cpu(pid: int) -> float:
    """The CPU seconds `pid` and every process under it have used, each its own and what it reaped,
    zombies too: a lower bound (one reaped as the tree is walked, each read before its children, is
    missed), for checks that a tree ended before it used some CPU, whatever else the machine runs."""
    used, todo = 0, [pid]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        used += sum(int(field) for field in fields[11:15])  # utime, stime, cutime, cstime
        todo.extend(children_of(pid))
    return used / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def pipe_at(fd: int) -> Iterator[tuple[int, int]]:
    """A pipe whose read end is fd `fd` (past 1023: what select() cannot take): (read end, write end);
    the test is skipped where RLIMIT_NOFILE does not reach that far."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] <= fd:
        pytest.skip(f"RLIMIT_NOFILE is at most {fd}")
    r, w = os.pipe()
    os.dup2(r, fd)
    os.close(r)
    try:
        yield fd, w
    finally:
        os.close(fd)
        os.close(w)


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


# A call whose result holds every kind of content: an image (a PNG the standard library writes), a
# text resource and a blob resource (files the code made, one from a file handed in), and a result.
RETURNS_CODE = """
import struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
header = struct.pack(">IIBBBBB", 2, 1, 8, 0, 0, 0, 0)
pixels = zlib.compress(b"\\x00\\x00\\xff")
png = b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
open("dot.png", "wb").write(png)
open("table.csv", "w").write(open("in.csv").read().upper())
open("raw.bin", "wb").write(bytes(range(8)))
21 * 2
"""
RETURNS_ARGUMENTS = {"code": RETURNS_CODE, "files": [{"path": "in.csv", "content": "a,b\n1,2\n"}]}


def check_returns(result: dict[str, Any]) -> None:
    """What a client got for RETURNS_ARGUMENTS: text, image, then the two files as resources, in order."""
    kinds = [block["type"] for block in result["content"]]
    assert kinds == ["text", "image", "resource", "resource"], kinds
    text, image, raw, csv = result["content"]  # files in name order
    assert "--- result ---\n42\n" in text["text"]
    assert "--- images: dot.png (2x1, " in text["text"]
    assert image["mimeType"] == "image/png"
    assert base64.b64decode(image["data"]).startswith(b"\x89PNG")
    assert csv["resource"]["mimeType"] == "text/csv"
    assert csv["resource"]["text"] == "A,B\n1,2\n"
    assert raw["resource"]["uri"].endswith("/raw.bin")
    assert base64.b64decode(raw["resource"]["blob"]) == bytes(range(8))
    structured = check_structured(result["structuredContent"])
    assert structured["result"] == "42"
    assert [i["name"] for i in structured["images"]] == ["dot.png"]
    assert [f["path"] for f in structured["files"]] == ["raw.bin", "table.csv"]
    assert "data" not in json.dumps(structured["images"]), "no image bytes in structuredContent"


def fake_env(root: Path, installed: dict[str, str]) -> Path:
    """An environment whose site-packages holds only the metadata of `installed` (name -> version)."""
    site = root / "site-packages"
    site.mkdir(parents=True)
    for name, version in installed.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{name.replace('-', '_')}/__init__.py,,\n{info.name}/METADATA,,\n")
    return root


def check_ts_session(report: dict[str, Any]) -> None:
    """The TypeScript client's "session" check (tests/clients/ts_client.mjs): every result accepted,
    state kept, the failed call rolled back, the session closed and then unknown."""
    assert "error" not in report, report
    handle = report["handle"]
    assert handle.startswith("s-")
    assert check_structured(report["kept"]["structuredContent"])["stdout"] == "42\n"
    failed = check_structured(report["failed"]["structuredContent"])
    assert (failed["status"], failed["rolled_back"], report["failed"]["isError"]) == ("error", True, True)
    assert "rolled back" in report["failed"]["text"]
    assert check_structured(report["after"]["structuredContent"])["stdout"] == "42\n"
    assert report["closed"]["isError"] is False
    assert report["closed"]["structuredContent"]["closed"] is True
    unknown = check_structured(report["unknown"]["structuredContent"])
    assert unknown["message"].startswith("unknown session")


# 6,000,000 bytes of stdout, 100 a line: cut in any answer, kept whole on disk (`RUNNER_MAX_KEPT_OUTPUT_MB`).
SIX_MB_CODE = "import sys\nfor i in range(60_000):\n    sys.stdout.write(f'{i:08d} ' + 'x' * 90 + '\\n')"
SIX_MB_OUTPUT = "".join(f"{i:08d} " + "x" * 90 + "\n" for i in range(60_000)).encode()


@contextlib.contextmanager
def a_default_cache_removed_if_made() -> Iterator[None]:
    """The wheelhouse cache where it is by default, made by the test: removed again if nothing was
    installed into it (its locks and scratch are made empty when a pool opens it)."""
    default = os.path.join("/var/tmp", f"python-runner-environments-{os.geteuid()}")
    there = os.path.isdir(default)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if not there and not os.listdir(os.path.join(default, "packages")):
                shutil.rmtree(default)


@contextlib.contextmanager
def recording_logger(name: str) -> Iterator[tuple[logging.Logger, list[logging.LogRecord]]]:
    """A logger at INFO whose records are kept in the list beside it while the block runs."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        yield logger, records
    finally:
        logger.removeHandler(handler)

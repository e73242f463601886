"""Property-based fuzzing of raw frames against one real `python -m runner` process per test.

Each test starts one server (RUNNER_SANDBOX=none, a pool of 2, RUNNER_MAX_CODE_MB of 2000 bytes and
RUNNER_MAX_STDIN_MB=0, so a line longer than 6 x 2000 + 64 KiB = 77,536 bytes is over the limit),
opens a session with `initialize`, and lets hypothesis write frames into its stdin for many examples:
random bytes, truncated JSON, lines around and far over the size limit, wrong JSON-RPC shapes, and
tool arguments generated from the published input schema, inside it and outside it. After every
example a ping must still be answered.

Properties, checked after every example and again over the whole session once the server has exited:

- a request (an object with a "method" and no "result"/"error") whose id is usable (a JSON string or
  integer) gets exactly one response, addressed to that id;
- a blank line gets nothing; a line that is not JSON gets exactly one parse error (-32700) and a JSON
  value that is not an object exactly one invalid-request error (-32600), both with id null; any other
  frame without a
  usable id gets at most one error with id null; nothing is ever addressed to an id nobody sent;
- a line over the size limit gets exactly one -32600 error, addressed to its id when the id is in its
  first 4 KiB (as documented), else with id null; a line at the limit is served;
- every line on stdout is a JSON-RPC 2.0 message;
- calls whose arguments are inside the schema and the byte caps run, calls outside them get an
  `invalid_arguments` result (or -32602 when `arguments` is not an object at all);
- the server never dies, exits 0 on stdin EOF, and leaves no process and no file in its work dir.

Frames tried are counted per test, printed in pytest's terminal summary and written to
`fuzz-frames.json` in pytest's base temporary directory. `FUZZ_SCALE=N` multiplies every test's
number of examples (`make soak` runs them bigger).

Two server bugs this fuzzing found (a lone-surrogate id and JSON nested about 1000 deep each killed
the server) are fixed and checked by the tests at the end; the random strategies stay below those
depths to keep each example fast.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from runner.config import MIB, Config
from runner.protocol.schemas import input_schema
from tests.conftest import REPO
from tests.helpers import check_structured, processes_mentioning, settled

SCALE = float(os.environ.get("FUZZ_SCALE", "1"))
MAX_CODE_BYTES = 2000
MAX_STDIN_BYTES = 0
SERVER_ENV = {
    "RUNNER_SANDBOX": "none",
    "RUNNER_POOL_SIZE": "2",
    "RUNNER_MAX_CODE_MB": str(MAX_CODE_BYTES / MIB),  # 0.0019073486328125: exactly 2000 bytes
    "RUNNER_MAX_STDIN_MB": str(MAX_STDIN_BYTES / MIB),
    "RUNNER_MAX_TIMEOUT": "5",
    "RUNNER_DEFAULT_TIMEOUT": "2",
    "RUNNER_MAX_CPU_SECONDS": "5",
    "RUNNER_MAX_INPUT_MB": "0",
}
CONFIG = Config.from_env(SERVER_ENV)
LIMIT = CONFIG.max_message_bytes  # the longest line served, newline included
assert LIMIT == 6 * (MAX_CODE_BYTES + MAX_STDIN_BYTES) + 64 * 1024 == 77_536
SCHEMA = input_schema(CONFIG)
VALIDATOR = Draft202012Validator(SCHEMA)
ID_SEARCH_BYTES = 4096  # the server addresses a too-large line's error to an id seen in its first 4 KiB
ANSWER_TIMEOUT = 30.0
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}
HANDSHAKE_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
RUN_STATUSES = {"ok", "error", "timeout", "cpu_limit", "memory_limit", "file_size_limit", "output_limit", "signal"}
MAX_NESTING = 800  # see test_deeply_nested_json_is_answered_and_the_server_lives

pytestmark = pytest.mark.timeout(90 + int(60 * SCALE))


# --- what the server may say about a frame ----------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """What may come back for one frame: answers addressed to `id`, and errors with id null."""

    id: str | int | None = None
    answers: tuple[int, int] = (0, 0)  # least and most responses addressed to `id`
    nulls: tuple[int, int] = (0, 0)  # least and most errors with id null
    code: int | None = None  # the error code the answer (addressed or null) must carry
    check: Callable[[dict[str, Any]], None] | None = None  # more checks of the addressed response


@dataclass(frozen=True)
class Frame:
    """One line as written (newline included) and what may come back for it."""

    line: bytes
    expect: Expect

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        shown = self.line if len(self.line) <= 400 else self.line[:200] + b"..." + self.line[-100:]
        expect = self.expect
        return f"Frame({shown!r} ({len(self.line):,} bytes), id={expect.id!r}, {expect.answers}, nulls={expect.nulls})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis' pretty printer
        printer.text(repr(self))


def usable(request_id: Any) -> bool:
    """An id a response can be addressed to: a JSON string or integer (MCP allows nothing else)."""
    return isinstance(request_id, str | int) and not isinstance(request_id, bool)


def key(request_id: str | int) -> str:
    """Ids compared as JSON text, so that 1 and "1" stay apart."""
    return json.dumps(request_id)


def expect_for(line: bytes, check: Callable[[dict[str, Any]], None] | None = None) -> Expect:
    """The expectation for a line within the size limit, from what it is as JSON."""
    assert len(line) <= LIMIT
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    if not line.strip():  # a blank line between messages is skipped, as other servers do
        return Expect(nulls=(0, 0))
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):  # invalid UTF-8 is a ValueError too
        return Expect(nulls=(1, 1), code=PARSE_ERROR)
    if not isinstance(value, dict):
        return Expect(nulls=(1, 1), code=INVALID_REQUEST)
    request_id = value.get("id")
    if not usable(request_id):
        return Expect(nulls=(0, 1))
    if "method" in value and not {"result", "error"} & value.keys():
        return Expect(id=request_id, answers=(1, 1), check=check)
    # Shaped like a response (or like both): the server may ignore it or answer it with an error.
    return Expect(id=request_id, answers=(0, 1))


# --- the server and a thread reading everything it writes --------------------------------------------


def wire_problem(raw: bytes) -> str | None:
    """Why a line from the server's stdout is not a JSON-RPC 2.0 message, or None."""

    def no_constants(name: str) -> NoReturn:
        raise ValueError(f"{name} is not JSON")

    if not raw.endswith(b"\n"):
        return "no newline at the end"
    try:
        message = json.loads(raw, parse_constant=no_constants)
    except (ValueError, RecursionError) as exc:
        return f"not JSON: {exc}"
    if not isinstance(message, dict):
        return "not a JSON object"
    if message.get("jsonrpc") != "2.0":
        return 'no "jsonrpc": "2.0"'
    if "method" in message:
        if not isinstance(message["method"], str) or not isinstance(message.get("params", {}), dict):
            return "a malformed request or notification"
        return None
    if "id" not in message or not (message["id"] is None or usable(message["id"])):
        return "a response without a valid id"
    if ("result" in message) == ("error" in message):
        return "a response needs exactly one of result and error"
    if "error" in message:
        error = message["error"]
        if not (isinstance(error, dict) and usable(error.get("code")) and isinstance(error.get("code"), int)):
            return "an error without an integer code"
        if not isinstance(error.get("message"), str):
            return "an error without a message"
    elif not isinstance(message["result"], dict):
        return "a result that is not an object"
    return None


class Wire:
    """One `python -m runner` over pipes, a thread parsing every line it writes, and the bookkeeping
    of what every frame sent may and must get back."""

    def __init__(self, work_dir: Path, log_dir: Path) -> None:
        self.work_dir = work_dir
        self.stderr_path = log_dir / "server-stderr.log"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RUNNER_WORK_DIR": str(work_dir)}
        env.update({"RUNNER_PACKAGES": "", "RUNNER_WHEELHOUSE": "", **SERVER_ENV})
        with open(self.stderr_path, "wb") as errlog:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "runner"],
                cwd=REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errlog,
            )
        self.changed = threading.Condition()
        self.by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.nulls: list[dict[str, Any]] = []
        self.bad_lines: list[str] = []
        self.eof = False
        self.expected: dict[str, Expect] = {}
        self.null_bounds = [0, 0]
        self.frames = 0  # fuzz frames written (probes and set-up requests not counted)
        self.examples = 0
        self._probes = itertools.count(1)
        self._reader = threading.Thread(target=self._read, name="wire-reader", daemon=True)
        self._reader.start()

    # Session and teardown.

    def __enter__(self) -> Wire:
        try:
            result = self.request("initialize", INITIALIZE)["result"]
            assert result["protocolVersion"] == "2025-11-25"
            self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
            [tool, _] = self.request("tools/list")["result"]["tools"]
            assert tool["inputSchema"] == SCHEMA, "the fuzzed schema is the one the server publishes"
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.kill()
            return
        self.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._reader.join(10)
        if self.process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()

    def close(self) -> None:
        """A last call, then stdin EOF: exit 0, every frame answered as it should, nothing left behind."""
        self.check_a_call_runs()
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            code = self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()
            self.fail("the server did not exit within 20 s of stdin EOF")
        self._reader.join(10)
        if code != 0:
            self.fail(f"the server exited {code} on stdin EOF")
        with self.changed:
            assert not self.bad_lines, f"non-protocol lines on stdout: {self.bad_lines[:5]}"
            for request_id, expect in self.expected.items():
                count = len(self.by_id.get(request_id, []))
                low, high = expect.answers
                assert low <= count <= high, f"{count} responses to id {request_id} over the session, not {low}-{high}"
            strangers = set(self.by_id) - set(self.expected)
            assert not strangers, f"responses addressed to ids never sent: {sorted(strangers)[:5]}"
            low, high = self.null_bounds
            assert low <= len(self.nulls) <= high, f"{len(self.nulls)} errors with id null, not {low}-{high}"
        # What the server killed on its way out may take the kernel a moment longer to end.
        left = settled(lambda: processes_mentioning(str(self.work_dir)))
        assert left == [], f"processes left behind: {left}"
        assert settled(lambda: list(self.work_dir.iterdir())) == [], "files left in the work dir"

    # Reading.

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            problem = wire_problem(raw)
            with self.changed:
                if problem is not None:
                    self.bad_lines.append(f"{problem}: {raw[:300]!r}")
                else:
                    message = json.loads(raw)
                    if "method" not in message:
                        if message["id"] is None:
                            self.nulls.append(message)
                        else:
                            self.by_id[key(message["id"])].append(message)
                self.changed.notify_all()
        self.process.stdout.close()
        with self.changed:
            self.eof = True
            self.changed.notify_all()

    def stderr_tail(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no stderr log)"

    def fail(self, message: str) -> NoReturn:
        raise AssertionError(f"{message}\n--- server stderr, last 4000 characters ---\n{self.stderr_tail()}")

    def wait_until(self, ready: Callable[[], bool], what: str, timeout: float = ANSWER_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not ready():
                if self.bad_lines:
                    self.fail(f"non-protocol lines on stdout: {self.bad_lines[:5]}")
                if self.eof or self.process.poll() is not None:
                    self.fail(f"the server died (exit status {self.process.poll()}) waiting for {what}")
                left = deadline - time.monotonic()
                if left <= 0:
                    self.fail(f"no {what} within {timeout:g} s")
                self.changed.wait(min(left, 0.5))

    # Writing.

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except BrokenPipeError:
            self.fail(f"the server's stdin is closed (exit status {self.process.poll()})")

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A well-formed request with a fresh id; its one response."""
        request_id = f"probe-{next(self._probes)}"
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.expected[key(request_id)] = Expect(id=request_id, answers=(1, 1))
        self.send(json.dumps(message).encode() + b"\n")
        self.wait_until(lambda: key(request_id) in self.by_id, f"response to {method}")
        return self.by_id[key(request_id)][0]

    def check_a_call_runs(self) -> None:
        result = self.request("tools/call", {"name": "run_python", "arguments": {"code": "print('alive')"}})
        assert check_structured(result["result"]["structuredContent"])["stdout"] == "alive\n"

    def exchange(self, frames: list[Frame]) -> None:
        """Write the frames in one go, then a ping; check everything that came back for them."""
        with self.changed:
            nulls_before = len(self.nulls)
        for frame in frames:
            if frame.expect.id is not None:
                request_id = key(frame.expect.id)
                assert request_id not in self.expected, f"the strategy reused id {request_id}"
                self.expected[request_id] = frame.expect
            self.null_bounds[0] += frame.expect.nulls[0]
            self.null_bounds[1] += frame.expect.nulls[1]
        self.send(b"".join(frame.line for frame in frames))
        self.frames += len(frames)
        self.examples += 1
        # The ping shows the server is alive; and since invalid lines are answered as they are read,
        # every error with id null that these frames cause is on the wire before the ping's answer.
        assert self.request("ping")["result"] == {}
        owed = [key(f.expect.id) for f in frames if f.expect.id is not None and f.expect.answers[0] > 0]
        self.wait_until(lambda: all(request_id in self.by_id for request_id in owed), "responses to the frames")
        with self.changed:
            nulls = self.nulls[nulls_before:]
            low = sum(f.expect.nulls[0] for f in frames)
            high = sum(f.expect.nulls[1] for f in frames)
            assert low <= len(nulls) <= high, f"{len(nulls)} errors with id null, expected {low}-{high}"
            assert all("error" in message for message in nulls), "a result addressed to id null"
            wanted = Counter(f.expect.code for f in frames if f.expect.nulls[0] and f.expect.code is not None)
            got = Counter(message["error"]["code"] for message in nulls)
            assert not wanted - got, f"null-id error codes {dict(got)}, expected at least {dict(wanted)}"
            for frame in frames:
                if frame.expect.id is None:
                    continue
                answers = self.by_id.get(key(frame.expect.id), [])
                low, high = frame.expect.answers
                assert low <= len(answers) <= high, f"{len(answers)} responses to {frame.expect.id!r}"
                if answers and frame.expect.code is not None:
                    assert answers[0].get("error", {}).get("code") == frame.expect.code, answers[0]
                if answers and frame.expect.check is not None:
                    frame.expect.check(answers[0])
            strangers = set(self.by_id) - set(self.expected)
            assert not strangers, f"responses addressed to ids never sent: {sorted(strangers)[:5]}"


def fuzz(wire: Wire, frames: st.SearchStrategy[list[Frame]], examples: int) -> None:
    """Run hypothesis over one server: each example is a list of frames written together."""

    @settings(
        max_examples=max(1, round(examples * SCALE)),
        deadline=None,
        database=None,  # every test's inner function looks alike; failures print their frames instead
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(frames)
    def one_example(batch: list[Frame]) -> None:
        wire.exchange(batch)

    one_example()


# --- frames tried, for the closing note -------------------------------------------------------------

FRAMES_TRIED: dict[str, int] = {}


class _FrameReport:
    """A plugin registered at run time: prints the frame counts in pytest's terminal summary."""

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if FRAMES_TRIED:
            terminalreporter.section("protocol fuzzing")
            for name, count in FRAMES_TRIED.items():
                terminalreporter.write_line(f"{name}: {count:,} frames")
            total = sum(FRAMES_TRIED.values())
            terminalreporter.write_line(f"total: {total:,} frames tried against python -m runner (scale {SCALE:g})")


@pytest.fixture(scope="session")
def frames_report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    request.config.pluginmanager.register(_FrameReport(), "fuzz-frame-report")
    return tmp_path_factory.getbasetemp() / "fuzz-frames.json"


@pytest.fixture
def served(work_dir: Path, tmp_path: Path, frames_report: Path, request: pytest.FixtureRequest) -> Iterator[Wire]:
    """One server for the whole test; on leaving, the test's frames are recorded."""
    with Wire(work_dir, tmp_path) as wire:
        yield wire
    FRAMES_TRIED[request.node.name] = wire.frames
    frames_report.write_text(json.dumps({**FRAMES_TRIED, "total": sum(FRAMES_TRIED.values())}, indent=1) + "\n")


# --- strategies --------------------------------------------------------------------------------------

_ids = itertools.count(1)


def unique(base: str | int) -> str | int:
    """Make a drawn id unique in the session (sign, size and text kept), so answers can be counted."""
    n = next(_ids)
    if isinstance(base, str):
        return f"{base}~{n}"
    return (-1 if base < 0 else 1) * (abs(base) * 1_000_000 + n)


# Text without lone surrogates (hypothesis' default): see test_an_id_with_a_lone_surrogate_...
usable_ids = st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=24)).map(unique)
unusable_ids = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=10,
)
json_objects = st.dictionaries(st.text(max_size=10), json_values, max_size=5)
MISSING = object()
RPC_MEMBERS = {"jsonrpc", "id", "method", "params", "result", "error"}
KNOWN_METHODS = [
    "ping",
    "initialize",
    "tools/list",
    "tools/call",
    "server/discover",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "resources/list",
    "prompts/list",
    "logging/setLevel",
    "completion/complete",
    "",
    "rpc.discover",
]


@st.composite
def serialized(draw: st.DrawFn, value: Any) -> bytes:
    """JSON text of `value`, ASCII-escaped or raw UTF-8, compact or spaced; never a newline inside."""
    ascii_only = draw(st.booleans())
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")]))
    return json.dumps(value, ensure_ascii=ascii_only, separators=separators).encode()


def method_params(method: Any) -> st.SearchStrategy[Any]:
    """Params that look plausible for `method` (so that deeper code is reached), or anything at all."""
    plausible: dict[str, st.SearchStrategy[Any]] = {
        "tools/call": st.fixed_dictionaries(
            {"name": st.one_of(st.just("run_python"), st.text(max_size=12))},
            optional={"arguments": st.one_of(json_objects, json_values), "_meta": json_objects},
        ),
        "tools/list": st.fixed_dictionaries({}, optional={"cursor": json_values, "_meta": json_objects}),
        "notifications/cancelled": st.fixed_dictionaries(
            {"requestId": st.one_of(usable_ids, json_values)}, optional={"reason": json_values}
        ),
        "notifications/progress": st.fixed_dictionaries(
            {"progressToken": st.one_of(usable_ids, json_values), "progress": json_values}
        ),
        "initialize": st.fixed_dictionaries(
            {},
            optional={
                "protocolVersion": st.one_of(
                    st.sampled_from([*HANDSHAKE_VERSIONS, "2026-07-28", "1999-01-01"]), json_values
                ),
                "capabilities": st.one_of(st.just({}), json_values),
                "clientInfo": st.one_of(st.just({"name": "fuzz", "version": "2"}), json_values),
            },
        ),
        "server/discover": st.one_of(st.just({"_meta": MODERN_META}), json_objects),
        "ping": st.one_of(st.just({}), st.just({"_meta": MODERN_META}), json_objects),
    }
    anything = st.one_of(st.just(MISSING), st.none(), json_objects, json_values)
    if isinstance(method, str) and method in plausible:
        return st.one_of(plausible[method], plausible[method], anything)
    return anything


@st.composite
def shaped_messages(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON object that is, or nearly is, a JSON-RPC message: every member may be missing or wrong."""
    message: dict[str, Any] = {}
    extra = draw(st.dictionaries(st.text(max_size=8).filter(lambda k: k not in RPC_MEMBERS), json_values, max_size=2))
    members = {
        "jsonrpc": st.one_of(st.just("2.0"), st.just("2.0"), st.just(MISSING), st.sampled_from(["1.0", 2.0, ""])),
        "id": st.one_of(usable_ids, usable_ids, unusable_ids, st.just(MISSING)),
        "method": st.one_of(st.sampled_from(KNOWN_METHODS), st.text(max_size=20), json_values, st.just(MISSING)),
    }
    for name, strategy in members.items():
        value = draw(strategy)
        if value is not MISSING:
            message[name] = value
    params = draw(method_params(message.get("method")))
    if params is not MISSING:
        message["params"] = params
    if draw(st.integers(0, 9)) == 0:
        message["result"] = draw(json_values)
    if draw(st.integers(0, 9)) == 0:
        message["error"] = draw(
            st.one_of(json_values, st.fixed_dictionaries({"code": st.integers(), "message": st.text()}))
        )
    message.update(extra)
    order = draw(st.permutations(list(message)))
    return {name: message[name] for name in order}


@st.composite
def nested(draw: st.DrawFn) -> bytes:
    """JSON nested deep (within MAX_NESTING), complete or cut, bare or inside a request."""
    depth = draw(st.integers(1, MAX_NESTING - 10))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    inner = b"1" if opener == b"[" else b"null"
    body = opener * depth + inner + closer * draw(st.sampled_from([0, depth]))
    if draw(st.booleans()):
        request_id = draw(usable_ids)
        return b'{"jsonrpc":"2.0","id":%s,"method":"ping","params":{"x":%s}}' % (json.dumps(request_id).encode(), body)
    return body


def lines_of(data: bytes) -> list[Frame]:
    """Bytes cut at their newlines into frames, each with its expectation."""
    return [Frame(piece + b"\n", expect_for(piece + b"\n")) for piece in data.split(b"\n")]


@st.composite
def json_rpc_shapes(draw: st.DrawFn) -> list[Frame]:
    """1-3 frames: near-JSON-RPC objects, other JSON values, batches, deep nesting."""
    frames = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["object", "object", "object", "value", "batch", "nested"]))
        if kind == "object":
            data = draw(serialized(draw(shaped_messages())))
        elif kind == "value":
            data = draw(serialized(draw(json_values)))
        elif kind == "batch":
            data = draw(serialized(draw(st.lists(shaped_messages(), min_size=1, max_size=2))))
        else:
            data = draw(nested())
        frames.append(Frame(data + b"\n", expect_for(data + b"\n")))
    return frames


SPECIAL_LINES = [
    b"",
    b" ",
    b"\r",
    b"\t \t",
    b"\x00",
    b"\xef\xbb\xbf{}",
    b"null",
    b"{}",
    b"[]",
    b"1",
    b'"x"',
    b"\x1b[2J",
]


@st.composite
def random_lines(draw: st.DrawFn) -> list[Frame]:
    """Random bytes or text, cut into lines at whatever newlines they hold."""
    data = draw(
        st.one_of(
            st.binary(max_size=3000),
            st.text(max_size=1000).map(str.encode),
            st.lists(st.sampled_from(SPECIAL_LINES), min_size=1, max_size=4).map(b"\n".join),
        )
    )
    return lines_of(data)


def valid_requests(request_id: str | int) -> st.SearchStrategy[dict[str, Any]]:
    def request(method: str, params: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
        return params.map(lambda p: {"jsonrpc": "2.0", "id": request_id, "method": method, "params": p})

    return st.one_of(
        request("ping", st.just({})),
        request("tools/list", st.just({})),
        request("initialize", st.just(INITIALIZE)),
        request("tools/call", arguments_in_schema().map(lambda c: {"name": "run_python", "arguments": c[0]})),
    )


@st.composite
def truncated_json(draw: st.DrawFn) -> list[Frame]:
    """1-3 messages, each cut short somewhere (possibly mid-character), some with junk after the cut."""
    frames = []
    for _ in range(draw(st.integers(1, 3))):
        request_id = draw(usable_ids)
        message = draw(st.one_of(valid_requests(request_id), shaped_messages()))
        data = draw(serialized(message))
        # As a fraction: ids are made unique outside hypothesis, so lengths vary between replays.
        cut = draw(st.integers(0, 2**16 - 1)) * len(data) // 2**16
        junk = draw(st.one_of(st.just(b""), st.binary(max_size=12).map(lambda b: b.replace(b"\n", b""))))
        line = data[:cut] + junk + b"\n"
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            value = None
        # A cut can leave valid JSON with a shortened (so possibly reused) id: not worth tracking.
        assume(not (isinstance(value, dict) and "id" in value and value["id"] != message.get("id")))
        frames.append(Frame(line, expect_for(line)))
    return frames


def ping_result(response: dict[str, Any]) -> None:
    assert response.get("result") == {}, response


def invalid_arguments_result(response: dict[str, Any]) -> None:
    assert "result" in response, response
    structured = check_structured(response["result"]["structuredContent"])
    assert structured["status"] == "invalid_arguments", structured
    assert response["result"]["isError"] is True


@st.composite
def oversized_lines(draw: st.DrawFn) -> list[Frame]:
    """A line around the size limit (served up to it, answered -32600 past it) or far beyond it."""
    size = draw(
        st.one_of(
            st.sampled_from([LIMIT, LIMIT + 1]),
            st.integers(LIMIT - 40, LIMIT + 40),
            st.integers(LIMIT + 1, 4 * LIMIT),
        )
    )
    kind = draw(st.sampled_from(["padded ping", "call, id first", "call, id last", "junk"]))
    request_id = draw(usable_ids)
    over = size > LIMIT
    if kind == "padded ping":
        head = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}).encode()
        line = head + b" " * (size - 1 - len(head)) + b"\n"
        if over:
            expect = Expect(id=request_id, answers=(1, 1), code=INVALID_REQUEST)
        else:
            expect = Expect(id=request_id, answers=(1, 1), check=ping_result)
    elif kind.startswith("call"):
        params = {"name": "run_python", "arguments": {"code": ""}}
        members: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        if kind == "call, id last":
            members["id"] = members.pop("id")
        empty = json.dumps(members).encode()
        params["arguments"]["code"] = "#" * (size - 1 - len(empty))
        line = json.dumps(members).encode() + b"\n"
        id_seen = line.find(b'"id"') < ID_SEARCH_BYTES
        if not over:
            expect = Expect(id=request_id, answers=(1, 1), check=invalid_arguments_result)
        elif id_seen:
            expect = Expect(id=request_id, answers=(1, 1), code=INVALID_REQUEST)
        else:
            expect = Expect(nulls=(1, 1), code=INVALID_REQUEST)
    else:
        unit = draw(st.binary(min_size=1, max_size=64).map(lambda b: b.replace(b"\n", b"").replace(b'"', b"")))
        unit = unit or b"z"
        line = (unit * (size // len(unit) + 1))[: size - 1] + b"\n"
        expect = Expect(nulls=(1, 1), code=INVALID_REQUEST) if over else expect_for(line)
    assert len(line) == size
    return [Frame(line, expect)]


# --- tool arguments from the input schema -------------------------------------------------------------

KNOWN_KEYWORDS = {
    "type", "description", "default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "x-mcp-header",
}  # fmt: skip
# Not drawn: a session's calls share state, so one call's answer would depend on the others'; sessions
# and unknown handles have tests of their own (tests/e2e/execution/test_sessions.py, protocol/).
NOT_DRAWN = {"session"}
FILE_ENTRY_KEYWORDS = {"type", "properties", "required", "additionalProperties"}
# RUNNER_MAX_INPUT_MB=0 keeps the longest legal line small enough to fuzz around: files hold nothing.
FILE_NAMES = st.text(alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1)


def value_in(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid against one property's schema, from the keywords it uses (and no others)."""
    if schema.get("type") == "array" and schema["items"] == {"type": "string", "maxLength": 200}:
        # `packages`: every entry must name a distribution of the wheelhouse, and this server has none
        # (the entries a server refuses are tests/unit/protocol/test_packages.py's).
        assert set(schema) == {"type", "maxItems", "description", "items"}, schema
        return st.just([])
    if schema.get("type") == "array":
        entry = schema["items"]
        assert set(schema) == {"type", "maxItems", "description", "items"}, schema
        assert set(entry) == FILE_ENTRY_KEYWORDS
        assert set(entry["properties"]) == {"path", "content", "encoding"}
        names = FILE_NAMES.filter(lambda n: n not in (".", "..") and len(n.encode()) <= 255)
        files = st.lists(names, max_size=3, unique=True).map(
            lambda paths: [{"path": p, "content": "", "encoding": "utf-8"} for p in paths]
        )
        return files
    unknown = set(schema) - KNOWN_KEYWORDS
    assert not unknown, f"the input schema uses {unknown}: teach this fuzzer about them"
    if schema["type"] == "string":
        return st.text(max_size=300)
    assert schema["type"] == "number", schema
    low = schema.get("exclusiveMinimum", schema.get("minimum"))
    high = schema.get("exclusiveMaximum", schema.get("maximum"))
    validator = Draft202012Validator(schema)
    floats = st.floats(
        min_value=low,
        max_value=high,
        exclude_min="exclusiveMinimum" in schema,
        exclude_max="exclusiveMaximum" in schema,
        allow_nan=False,
    )
    integers = st.integers(min_value=None if low is None else int(low), max_value=None if high is None else int(high))
    return st.one_of(floats, integers.filter(validator.is_valid))


@st.composite
def programs(draw: st.DrawFn) -> tuple[str, str | None]:
    """Code that runs, and the stdout it must print given the time (None: not checked)."""
    text = draw(st.text(max_size=40))
    a, b = draw(st.integers(-(10**30), 10**30)), draw(st.integers(-(10**6), 10**6))
    return draw(
        st.sampled_from(
            [
                (f"print(ascii({text!r}))", ascii(text) + "\n"),
                (f"print({a} * {b})", f"{a * b}\n"),
                (f"import sys\nsys.stdout.write({text!r})", None),
                (f"raise SystemExit({b % 256})", ""),
                (f"raise ValueError({text!r})", ""),
                ("import time\ntime.sleep(0.05)\nprint('slept')", "slept\n"),
                ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", None),
                ("print('x' * 50_000)", None),
                ("import sys\nprint(repr(sys.stdin.read()))", "''\n"),
                ("", ""),
            ]
        )
    )


@st.composite
def arguments_in_schema(draw: st.DrawFn) -> tuple[dict[str, Any], str | None]:
    """Arguments valid against the schema (past the byte caps at times: code over 2000 bytes, any
    stdin), and the stdout the code must print when it is one of `programs`."""
    assert set(SCHEMA) <= {"$schema", "type", "properties", "required", "additionalProperties"}
    assert SCHEMA["type"] == "object"
    assert SCHEMA["additionalProperties"] is False
    properties = SCHEMA["properties"]
    required = {name: value_in(properties[name]) for name in SCHEMA["required"]}
    optional = {
        name: value_in(schema) for name, schema in properties.items() if name not in required and name not in NOT_DRAWN
    }
    arguments = draw(st.fixed_dictionaries(required, optional=optional))
    stdout = None
    choice = draw(st.integers(0, 9))
    if choice < 5:
        arguments["code"], stdout = draw(programs())
    elif choice == 5:
        arguments["code"] = draw(st.text(min_size=600, max_size=1100))  # around 2000 bytes of UTF-8
    if "stdin" in arguments and draw(st.booleans()):
        arguments["stdin"] = ""
    assert VALIDATOR.is_valid(arguments), arguments
    return arguments, stdout


@st.composite
def arguments_outside_schema(draw: st.DrawFn) -> Any:
    """Arguments the schema rejects: a member missing, unknown, of the wrong type or out of range, or
    not an object at all."""
    arguments: Any = dict(draw(arguments_in_schema())[0])
    how = draw(st.sampled_from(["drop", "unknown", "wrong type", "wrong type", "out of range", "not an object"]))
    if how == "drop":
        arguments.pop(draw(st.sampled_from(SCHEMA["required"])))
    elif how == "unknown":
        arguments[draw(st.text(max_size=10).filter(lambda n: n not in SCHEMA["properties"]))] = draw(json_values)
    elif how == "wrong type":
        arguments[draw(st.sampled_from(sorted(SCHEMA["properties"])))] = draw(json_values)
    elif how == "out of range":
        arguments["timeout"] = draw(
            st.one_of(
                st.sampled_from([0, -0.0, -1, CONFIG.max_timeout + 1e-9, 10**400, 1e308, -1e-308]),
                st.floats(max_value=0, allow_nan=False, allow_infinity=False),
                st.floats(min_value=CONFIG.max_timeout, exclude_min=True, allow_nan=False, allow_infinity=False),
            )
        )
    else:
        arguments = draw(st.one_of(st.lists(json_values, max_size=3), json_scalars.filter(lambda v: v is not None)))
    assume(not VALIDATOR.is_valid(arguments))
    return arguments


def byte_size(text: str) -> int:
    return len(text.encode("utf-8"))


def run_result(arguments: dict[str, Any], stdout: str | None) -> Callable[[dict[str, Any]], None]:
    """The check of a call whose arguments are inside the schema: it ran, unless over a byte cap."""
    over_caps = byte_size(arguments["code"]) > MAX_CODE_BYTES or byte_size(arguments.get("stdin", "")) > MAX_STDIN_BYTES

    def check(response: dict[str, Any]) -> None:
        assert "result" in response, response
        result = response["result"]
        structured = check_structured(result["structuredContent"])
        assert result["content"][0]["text"].startswith(f"[request_id={structured['request_id']}]\n")
        assert result["isError"] is (structured["status"] != "ok")
        if over_caps:
            assert structured["status"] == "invalid_arguments", structured
            assert "more than the limit" in structured["message"], structured
            return
        assert structured["status"] in RUN_STATUSES, structured
        if stdout is not None and arguments.get("timeout", CONFIG.default_timeout) >= 1:
            assert structured["stdout"] == stdout, structured
            if stdout:
                assert structured["status"] == "ok", structured

    return check


def rejected(arguments: Any) -> Callable[[dict[str, Any]], None]:
    """The check of a call whose arguments are outside the schema."""

    def check(response: dict[str, Any]) -> None:
        if "error" in response:
            # The SDK itself refuses params whose "arguments" is not an object (nor null).
            assert not isinstance(arguments, dict), response
            assert arguments is not None, response
            assert response["error"]["code"] == INVALID_PARAMS, response
            return
        invalid_arguments_result(response)

    return check


@st.composite
def tool_calls(draw: st.DrawFn) -> list[Frame]:
    """1-3 tools/call requests written together (so runs overlap), inside or outside the schema."""
    frames = []
    for _ in range(draw(st.integers(1, 3))):
        request_id = draw(usable_ids)
        if draw(st.booleans()):
            arguments, stdout = draw(arguments_in_schema())
            check = run_result(arguments, stdout)
        else:
            arguments = draw(arguments_outside_schema())
            check = rejected(arguments)
        params: dict[str, Any] = {"name": "run_python", "arguments": arguments}
        if draw(st.integers(0, 4)) == 0:
            params["_meta"] = {"progressToken": draw(usable_ids)}
        line = draw(serialized({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}))
        frames.append(Frame(line + b"\n", Expect(id=request_id, answers=(1, 1), check=check)))
    return frames


# --- the tests ------------------------------------------------------------------------------------------


def test_random_bytes_lines(served: Wire) -> None:
    fuzz(served, random_lines(), examples=300)
    assert served.frames >= 300 * SCALE


def test_truncated_json(served: Wire) -> None:
    fuzz(served, truncated_json(), examples=200)
    assert served.frames >= 200 * SCALE


def test_lines_around_and_over_the_size_limit(served: Wire) -> None:
    fuzz(served, oversized_lines(), examples=80)
    assert served.frames >= 80 * SCALE


def test_wrong_json_rpc_shapes(served: Wire) -> None:
    fuzz(served, json_rpc_shapes(), examples=300)
    assert served.frames >= 300 * SCALE


def test_tool_arguments_inside_and_outside_the_schema(served: Wire) -> None:
    fuzz(served, tool_calls(), examples=150)
    assert served.frames >= 150 * SCALE


# --- frames that once killed the server: a lone-surrogate id, deep nesting -------------------------------


def one_answer_and_alive(wire: Wire, line: bytes, request_id: str | int | None) -> None:
    """`line` gets exactly one answer (addressed to `request_id`, or an error with id null), every
    stdout line is JSON-RPC, and the server still serves a ping and a call."""
    with wire.changed:
        nulls_before = len(wire.nulls)
    wire.send(line)
    assert wire.request("ping")["result"] == {}
    with wire.changed:
        addressed = wire.by_id.get(key(request_id), []) if request_id is not None else []
        answers = len(addressed) + len(wire.nulls) - nulls_before
    assert answers == 1, f"{answers} answers to {line[:80]!r}"
    wire.check_a_call_runs()
    if request_id is not None:
        wire.expected[key(request_id)] = Expect(id=request_id, answers=(len(addressed), len(addressed)))
    wire.null_bounds = [len(wire.nulls)] * 2


@pytest.mark.parametrize("request_id", ["\ud800"])
def test_an_id_with_a_lone_surrogate_is_answered_and_the_server_lives(
    work_dir: Path, tmp_path: Path, request_id: str
) -> None:
    line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}).encode() + b"\n"
    assert b"\\ud800" in line, "the id goes out as an escape, as any JSON encoder writes it"
    with Wire(work_dir, tmp_path) as wire:
        one_answer_and_alive(wire, line, request_id)


@pytest.mark.parametrize(
    ("line", "request_id"),
    [
        (b"[" * 1000 + b"\n", None),
        (b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":' + b"[" * 5000 + b"]" * 5000 + b"}}\n", 5),
    ],
    ids=["1000 [ unclosed", "request with 5000-deep params"],
)
def test_deeply_nested_json_is_answered_and_the_server_lives(
    work_dir: Path, tmp_path: Path, line: bytes, request_id: int | None
) -> None:
    assert len(line) <= LIMIT
    with Wire(work_dir, tmp_path) as wire:
        one_answer_and_alive(wire, line, request_id)

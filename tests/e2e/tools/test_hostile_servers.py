"""What a downstream server may send that it should not, each found by a review and each once a way to
hurt more than its own calls: schemas whose checks never end, a protocol without ping, a flood of its
own requests, notifications or stderr lines, a byte that is not UTF-8, a line that never ends, a
listing too large to hand runs, errors too long, a credential cut across stderr lines, a server that
dies as soon as it starts; over HTTP, an answer or a redirect that never ends, a session lost, an
endpoint gone, and a stream of its own messages (GET) of comments or unknown events without end, or
that ends at once.
tests/downstream/hostile_server.py is made with the official SDK (2026-07-28); raw_server.py by hand."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError

from runner.config.tools import Downstream
from runner.logs import get_logger
from runner.tools.downstream import MAX_RELIST_PAGES, Connection
from runner.tools.messages import MAX_TOOLS
from tests.code_mode import (
    hostile,
    peak_memory,
    run,
    run_costing,
    run_measured,
    run_once,
    server_process,
    stdio_session,
    tools_file,
    waited_out,
)
from tests.conftest import REPO
from tests.helpers import living

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RAW_SERVER = REPO / "tests" / "downstream" / "raw_server.py"
SAID = (
    "import mcp_tools\n"
    "def said(call):\n"
    "    try:\n"
    "        return call()\n"
    "    except mcp_tools.ToolError as exc:\n"
    "        return str(exc)\n"
)

# A call that fails (the server is broken by it), then the same call until the server, started again,
# answers it: the first's error and the answer, a line each.
FAILED_THEN_AGAIN = (
    SAID + "import time\n"
    "print(said(lambda: mcp_tools.raw.echo(n=1)))\n"
    "for _ in range(200):\n"
    "    answer = said(lambda: mcp_tools.raw.echo(n=2))\n"
    "    if answer.startswith('echo'):\n"
    "        break\n"
    "    time.sleep(0.05)  # the server is being started again\n"
    "print(answer)\n"
)


def raw(*args: str) -> dict[str, Any]:
    """tests/downstream/raw_server.py in a mode, as a tools file entry."""
    return {"command": sys.executable, "args": [str(RAW_SERVER), *args], "tools": ["*"]}


@contextlib.asynccontextmanager
async def raw_http(directory: Path, mode: str = "http") -> AsyncIterator[str]:
    """raw_server.py's HTTP mode (or `mode`), started for the test: its URL."""
    port = directory / "port"
    downstream = await anyio.open_process([sys.executable, str(RAW_SERVER), mode, str(port)])
    try:
        with anyio.fail_after(20):
            while not port.exists():
                await anyio.sleep(0.05)
        yield f"http://127.0.0.1:{port.read_text()}/mcp"
    finally:
        downstream.kill()
        await downstream.wait()


@contextlib.asynccontextmanager
async def http_session(work_dir: Path, tmp_path: Path, mode: str) -> AsyncIterator[Client]:
    """A stdio server of ours whose one tool server, `http`, is raw_server.py's HTTP `mode` (`raw_http`),
    its log in tmp_path/stderr.log: its client."""
    async with raw_http(tmp_path, mode) as url:
        path = tools_file(tmp_path, http={"url": url, "tools": ["*"]})
        with (tmp_path / "stderr.log").open("w") as errlog:
            async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
                yield client


async def logged(log: Path, text: str, seconds: float = 20) -> bool:
    """Whether `text` is in the server's log within `seconds`."""
    with anyio.move_on_after(seconds):
        while text not in log.read_text():
            await anyio.sleep(0.05)
        return True
    return False


async def test_schemas_whose_checks_would_never_end_are_left_unchecked(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: an input schema whose $refs expand exponentially, or an output schema with a
    # pattern that backtracks (the SDK checked results itself, every keyword), held the event loop for
    # as long as the server made it: every run and every client with it.
    path = tools_file(tmp_path, hostile=hostile())
    code = SAID + "print(said(lambda: mcp_tools.hostile.expands(a=1)))\nprint(mcp_tools.hostile.shaped())\n"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    assert done["stdout"].splitlines() == ["expands ok", "{'s': '" + "a" * 40 + "!'}"]


async def test_a_call_longer_than_the_ping_to_a_2026_07_28_server_is_answered(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: 2026-07-28 has no ping; the quiet connection's ping every 10 s got "Method not
    # found" and took the connection down: every call longer than that failed, every SDK-made server
    # was restarted every 11 s.
    path = tools_file(tmp_path, hostile=hostile())
    code = "import mcp_tools\nprint(mcp_tools.hostile.slow(seconds=12))\n"
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            done = await run(client, code, timeout=30)
    assert done["stdout"] == "slow ok\n", done
    assert "tool server down" not in (tmp_path / "stderr.log").read_text()


@pytest.mark.parametrize("mode", ["requests", "bigids"])
async def test_a_flood_of_the_servers_own_requests_is_rationed(work_dir: Path, tmp_path: Path, mode: str) -> None:
    # Found by a review: the SDK starts a task to answer each request a server sends us; one that sent
    # pings without end and read no answer grew ours by 50 MB a second, to 2 GB. Found by a second:
    # each request let through was held, its id with it, until our answer could be written: ids of
    # 20 MiB took 4 GB in 30 s.
    path = tools_file(tmp_path, good=hostile(), flood=raw(mode))
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            server = server_process()
            assert await logged(log, "tool server requests dropped"), "the flood's requests are dropped"
            before = peak_memory(server)
            done = await run(client, "import mcp_tools\nprint(mcp_tools.good.backtracks(s='aa'))\n")
            peak = peak_memory(server)
    assert done["stdout"] == "backtracks ok\n", done
    assert peak - before < 50 << 20, f"{(peak - before) >> 20} MiB more while the flood went on"
    # Some 75 MiB at rest; the bigids flood's start alone took 600 before the listing was done.
    assert peak < 300 << 20, f"{peak >> 20} MiB at the most"


@pytest.mark.parametrize(("flood", "most"), [("notes", 20_000), ("answers", 20_000), ("bignotes", 100)])
async def test_a_flood_of_notifications_or_of_answers_no_one_asked_for_is_taken_at_a_rate(
    work_dir: Path, tmp_path: Path, flood: str, most: int
) -> None:
    # Found by a review: a server's notifications were taken as fast as it sent them, each parsed and
    # dispatched on the event loop: 85% of it for as long as the flood went on, and every brokered call
    # to any server 2-5x slower. Answers to requests we did not make, the same. Found by a second: 4 MiB
    # notifications at 200 a second, the same (their bytes are read at a rate now).
    count = tmp_path / "sent"
    path = tools_file(tmp_path, notes=raw(flood, str(count)), good=hostile())
    code = "import time, mcp_tools\ntime.sleep(3)  # the flood's time\nprint(mcp_tools.good.backtracks(s='a'))\n"
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            done, busy = await run_costing(client, code)
            sent = int(count.read_text())  # before the server stops (it drains their stdout then)
    assert done["stdout"] == "backtracks ok\n", done
    # Some 2.5 s of the server's CPU in the run's 3 s, unbounded.
    assert busy < 1.0, f"{busy:.2f} s of the server's CPU"
    # At most its burst, 200 a second (or 32 MiB), and what its pipe holds; else some 100,000 a second.
    assert sent < most, sent
    if flood != "bignotes":  # those are slowed by their bytes
        assert "tool server messages slowed server=notes" in (tmp_path / "stderr.log").read_text()


async def test_a_server_that_says_its_tools_changed_after_each_listing_is_listed_again_at_a_pace(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a second review: each notice was a listing at once, and a server that sent one after
    # each had us list it without end (2,607 listings in 8 s; with a listing of 4 MiB, 72% of the loop).
    count = tmp_path / "listed"
    path = tools_file(tmp_path, fickle=raw("relists", str(count)), good=hostile())
    code = "import time, mcp_tools\ntime.sleep(3)  # the notices' time\nprint(mcp_tools.fickle.echo(n=1))\n"
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            done = await run(client, code)
            listed = int(count.read_text())
    assert done["stdout"] == 'echo {"n": 1}\n', done
    assert listed < 10, f"listed {listed} times in some 3 s"


async def test_what_the_sdk_keeps_of_listings_stays_bounded_when_a_server_lists_new_names_each_time() -> None:
    # Found by a review: the SDK's session kept the output schema of every tool ever listed on a page
    # with a cursor (it prunes only on a listing of one page): a server naming 1,000 new tools at each
    # `list_changed` grew the server from 131 to 996 MiB in 58 s.
    server = Downstream("renames", "renames", ("*",), None, command=sys.executable, args=(str(RAW_SERVER), "renames"))
    connection = Connection(server, get_logger())
    kept: list[int] = []  # what the session holds, after each listing of new names
    listed: set[str] = set()
    async with anyio.create_task_group() as group:
        group.start_soon(connection.hold)
        with anyio.fail_after(30):
            while len(kept) < 4:
                await anyio.sleep(0.1)
                session = connection._client.session if connection._client is not None else None
                if session is not None and set(connection.tools) != listed:
                    listed = set(connection.tools)
                    kept.append(len(session._tool_output_schemas) + len(session._x_mcp_header_maps))
        group.cancel_scope.cancel()
    assert max(kept) <= 2 * 51, kept  # a listing's own, at most: before, 51 more at each


async def test_a_call_a_2026_07_28_server_says_does_not_match_re_lists_within_bounds(tmp_path: Path) -> None:
    # Found by a review: the SDK re-lists the tool of a call answered HEADER_MISMATCH (the spec's recovery),
    # up to 100 pages, outside our listing's bounds: a server answering every call so, each page of new
    # names with output schemas, grew the server 1 GiB a call.
    pages = tmp_path / "pages"
    script = str(REPO / "tests" / "downstream" / "relist_server.py")
    server = Downstream("relist", "relist", ("*",), None, command=sys.executable, args=(script, str(pages)))
    connection = Connection(server, get_logger())
    async with anyio.create_task_group() as group:
        group.start_soon(connection.hold)
        with anyio.fail_after(30):
            while "echo" not in connection.tools:
                await anyio.sleep(0.05)
        listed = int(pages.read_text())
        for _ in range(3):
            with pytest.raises(MCPError, match="header mismatch"):
                await connection.call("echo", {}, 20)
        assert connection._client is not None
        session = connection._client.session
        held = len(session._tool_output_schemas) + len(session._x_mcp_header_maps)
        group.cancel_scope.cancel()
    assert int(pages.read_text()) - listed <= 3 * MAX_RELIST_PAGES
    assert held <= MAX_TOOLS + 201, held  # the tools we keep, and the page read last


async def test_a_servers_stderr_flood_is_logged_at_a_rate_and_a_long_line_keeps_its_credential_masked(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: every stderr line was logged (238 MB in 17 s); a credential that a long line
    # had across the 2,000th character was cut before it was masked, and its start logged. Found by a
    # second: the lines not logged were read as fast as they came (99% of the event loop).
    secret = "sk-live-" + os.urandom(16).hex()
    path = tools_file(tmp_path, loud=raw("stderr"), leaky=hostile(HOSTILE_STDERR=secret, KEY=secret))
    log = tmp_path / "stderr.log"
    code = "import time, mcp_tools\ntime.sleep(3)  # the flood's time\nprint(mcp_tools.leaky.backtracks(s='a'))\n"
    with log.open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            assert await logged(log, "tool server stderr not logged"), "the rest of the flood is counted"
            done, busy = await run_costing(client, code)
    text = log.read_text()
    assert done["stdout"] == "backtracks ok\n", done
    assert busy < 1.0, f"{busy:.2f} s of the server's CPU in the run's 3 s"
    assert text.count("a line of a server that says too much") < 5_000
    assert secret[:10] not in text, "no part of the credential"
    assert "***" in text


@pytest.mark.parametrize("mode", ["trickle", "trickle-stderr"])
async def test_a_server_that_writes_a_byte_at_a_time_is_read_at_a_pace(
    work_dir: Path, tmp_path: Path, mode: str
) -> None:
    # Found by a review: each byte a server wrote on its own, on stdout (a line without end) or stderr,
    # was read on its own, a wakeup of the event loop each: 3.01 s and 2.42 s of the server's CPU in a
    # run's 3 s. (On stdout asyncio's pipe transport read whatever came, however the reader was paced.)
    path = tools_file(tmp_path, slow=raw(mode), good=hostile())
    code = "import time, mcp_tools\ntime.sleep(3)  # the trickle's time\nprint(mcp_tools.good.backtracks(s='a'))\n"
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            done, busy = await run_costing(client, code)
    assert done["stdout"] == "backtracks ok\n", done
    assert busy < 1.0, f"{busy:.2f} s of the server's CPU in the run's 3 s"


async def test_a_byte_that_is_not_utf8_fails_that_call_alone_and_the_connection_serves_on(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the SDK's stdout reader ended over it, the session did not notice, and every
    # call waited out its run's whole timeout until the ping timed out, 40 s later. Then it ended the
    # connection; the line ended where it should, so now its call alone fails.
    path = tools_file(tmp_path, raw=raw("badbyte", str(tmp_path / "once")))
    code = FAILED_THEN_AGAIN
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    first, then = done["stdout"].splitlines()
    assert first == (
        "raw.echo: the call failed: its answer is no MCP message (ValidationError: Input should be an object at"
        " JSONRPCResponse.result)"
    ), first
    assert then == 'echo {"n": 2}'
    assert "tool server down" not in (tmp_path / "stderr.log").read_text()


async def test_an_answer_nested_too_deep_to_parse_fails_its_call_alone_and_the_connection_serves_on(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: a run's arguments nested 220 deep, echoed back as structured content, were past
    # pydantic's depth; the connection ended, and another run's call in flight failed with it. (Such
    # arguments are refused now, `frames.MOST_DEPTH`: the server nests its answer itself.)
    path = tools_file(tmp_path, raw=raw("deep"))
    code = SAID + "print(said(lambda: mcp_tools.raw.echo(depth=220)))\nprint(mcp_tools.raw.echo(n=2))\n"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    first, then = done["stdout"].splitlines()
    assert first.startswith("raw.echo: the call failed: its answer is no MCP message (ValidationError: "), done
    assert then == "{'n': 2}"
    assert "tool server down" not in (tmp_path / "stderr.log").read_text()


async def test_a_call_to_a_server_that_reads_no_more_ends_with_its_runs_timeout(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: the SDK's courtesy cancel, sent as the run's time ran out, waited up to 5 s for
    # a stdin that was full, and the run's answer with it: 7.05 s for a run of 2.
    path = tools_file(tmp_path, raw=raw("noread"))
    code = "import mcp_tools\nmcp_tools.raw.echo(data='x' * 2_000_000)\n"
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            started = anyio.current_time()
            done = await run(client, code, timeout=2)
            took = anyio.current_time() - started
    assert done["status"] == "timeout", done
    assert took < 6, f"{took:.2f} s for a run of 2 (the courtesy cancel waits 5 s at most)"


async def test_servers_that_end_at_neither_eof_nor_sigterm_leave_the_server_time_to_stop_cleanly(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: each was given the SDK's 2 s after its stdin's end and 2 more after SIGTERM, and
    # the server's stop took 4.4 s: the official client, which gives it 2 s and then 2 after its own
    # SIGTERM, killed it mid-stop ("server stopped" never said, its directory left for the next start).
    servers = {f"s{n}": raw("stubborn") for n in range(3)}
    path = tools_file(tmp_path, **servers)
    code = "import mcp_tools\nprint(mcp_tools.s0.echo(n=1))\n"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["stdout"] == 'echo {"n": 1}\n', done
    assert "server stopped" in (tmp_path / "stderr.log").read_text()
    assert not [entry for entry in work_dir.iterdir() if entry.name.startswith("python-runner-")]


async def test_a_server_that_says_a_banner_on_its_stdout_first_is_served(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: "MCP server running on stdio" first, and the server was started again without
    # end; the SDK's own client skips such a line.
    path = tools_file(tmp_path, raw=raw("banner"))
    code = "import mcp_tools\nprint(mcp_tools.raw.echo(n=1))\n"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["stdout"] == 'echo {"n": 1}\n', done
    assert "a tool server's line that is no message was skipped command=python" in (tmp_path / "stderr.log").read_text()


async def test_an_answer_of_more_content_blocks_than_the_bound_fails_its_call(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: pydantic checked each block on the event loop, a million of them for 5.4 s.
    path = tools_file(tmp_path, raw=raw("manyblocks"))
    code = SAID + "print(said(lambda: mcp_tools.raw.echo(n=1)))\n"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["stdout"] == "raw.echo: the call failed: its answer has 2,001 content blocks, more than 1,000\n", done


async def test_what_a_tool_server_leaves_running_is_killed_when_the_server_stops(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: a daemon it left as it started (before the server was a child subreaper), or
    # one a call started in a session of its own, outlived a graceful stop, and nothing killed it later.
    pids = tmp_path / "pids"
    path = tools_file(tmp_path, raw=raw("daemons", str(pids)))
    code = "import mcp_tools\nprint(mcp_tools.raw.echo(n=1))\n"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["stdout"] == 'echo {"n": 1}\n', done
    left = [int(pid) for pid in pids.read_text().split()]
    assert len(left) == 2
    try:
        with anyio.fail_after(10):
            while living(left):
                await anyio.sleep(0.05)
    finally:
        for pid in living(left):
            os.kill(pid, 9)


@pytest.mark.parametrize("mode", ["toolong", "toolong-last"], ids=["id-first", "id-last"])
async def test_an_answer_too_long_fails_its_call_alone_and_the_connection_serves_on(
    work_dir: Path, tmp_path: Path, mode: str
) -> None:
    # Found by a review: a run made an SDK-made server write its 12 MiB of nested lists back as a line of
    # 68 MiB, which ended the connection: another run's call failed with it, and every caller's after.
    path = tools_file(tmp_path, raw=raw(mode, str(tmp_path / "once")))
    code = SAID + "print(said(lambda: mcp_tools.raw.echo(n=1)))\nprint(said(lambda: mcp_tools.raw.echo(n=2)))\n"
    done, grown = await run_measured(work_dir, tmp_path, path, code, 60)
    assert done["status"] == "ok", done
    first, then = done["stdout"].splitlines()
    assert first.startswith("raw.echo: the call failed: its answer was a line of "), first
    assert first.endswith(" bytes, more than 68,157,440: dropped"), first
    assert then == 'echo {"n": 2}', "at once, on the same connection"
    log = (tmp_path / "stderr.log").read_text()
    assert "tool server down" not in log
    assert "a tool server's line too long was dropped" in log
    assert grown < 100 << 20, f"{grown >> 20} MiB more for one line skipped"


async def test_a_line_that_never_ends_fails_that_call_within_bounds_and_the_server_is_started_again(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the SDK's stdout reader keeps a line until its newline, joining each chunk to
    # all it has (quadratic), with no bound: one server's endless line took the whole server's memory
    # and, ever slower, its event loop.
    path = tools_file(tmp_path, raw=raw("endless", str(tmp_path / "once")))
    done, grown = await run_measured(work_dir, tmp_path, path, FAILED_THEN_AGAIN, 30)
    assert done["status"] == "ok", done
    first, then = done["stdout"].splitlines()
    assert first == "raw.echo: the connection failed: LineTooLong: a line of more than 68,157,440 bytes", first
    assert then == 'echo {"n": 2}'
    assert grown < 150 << 20, f"{grown >> 20} MiB more for one line (64 MiB held)"


async def test_a_server_whose_listing_never_ends_is_down_saying_why_and_the_others_serve(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the line's fault was known, but the down reason was the SDK's error that
    # followed from it ("Connection closed").
    path = tools_file(tmp_path, endless=raw("endless-list"), good=hostile())
    code = "import mcp_tools\nprint(mcp_tools.good.backtracks(s='a'))\n"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["stdout"] == "backtracks ok\n", done
    log = (tmp_path / "stderr.log").read_text()
    assert 'tool server not started server=endless error="LineTooLong: a line of more than 68,157,440 bytes"' in log


async def test_a_listing_that_does_not_parse_makes_its_server_down_at_once_not_after_the_start_timeout(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the line that broke the connection was its answer, and the listing waited
    # for another until CONNECT_SECONDS (30 s): the whole server's start with it.
    path = tools_file(tmp_path, bad=raw("badlist"), good=hostile())
    code = "import mcp_tools\nprint(mcp_tools.good.backtracks(s='a'))\n"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["stdout"] == "backtracks ok\n", done
    log = tmp_path / "stderr.log"
    [down] = _stamps(log, "tool server not started server=bad error=")
    [listed] = _stamps(log, "tool server listed server=good")
    assert abs((down - listed).total_seconds()) < 15, "well before the start's 30 s"
    assert "ValidationError" in log.read_text()


@pytest.mark.timeout(150)
async def test_a_server_whose_listing_is_slower_than_the_first_try_allows_is_given_longer_and_comes_up(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the start's doubling did not reach the listing, whose every page had 30 s at
    # every try: a server quick to initialize and 31 s to list never came up.
    path = tools_file(tmp_path, slow=raw("slowlist", "31"))
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            assert await logged(log, "tool server listed server=slow", 100)
            done = await run(client, SAID + "print(said(lambda: mcp_tools.slow.echo(n=1)))\n")
    assert done["stdout"] == 'echo {"n": 1}\n', done
    assert "not started and listed within 30 s" in log.read_text()


async def test_a_listing_too_large_to_hand_runs_is_cut_and_the_other_servers_tools_still_import(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: 1,000 tools of 20,000-character descriptions made mcp_tools larger than a run
    # may take: `import mcp_tools` failed in every run, for every server ("could not be listed: 'source'").
    path = tools_file(tmp_path, big=raw("described"), good=hostile())
    code = (
        "import mcp_tools\n"
        "print(mcp_tools.good.backtracks(s='a'))\n"
        "tools = [name for name in vars(mcp_tools.big) if name.startswith('t')]\n"
        "print(0 < len(tools) < 1000, max(len(getattr(mcp_tools.big, name).__doc__) for name in tools) < 3000)\n"
    )
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    assert done["stdout"].splitlines() == ["backtracks ok", "True True"]


async def test_a_tools_long_error_is_cut_and_counted_against_the_runs_bytes(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: an isError result of any size was received and passed on cut to 2,000
    # characters, and nothing of it counted against RUNNER_TOOLS_MAX_MB (75 MB under a 1 MiB budget).
    path = tools_file(tmp_path, hostile=hostile())
    code = SAID + "for _ in range(3):\n    print(said(mcp_tools.hostile.verbose)[:100])\n"
    done = await run_once(
        work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path), RUNNER_TOOLS_MAX_MB="1"
    )
    first, second, third = done["stdout"].splitlines()
    assert first.startswith("hostile.verbose: the tool failed: why why")
    assert second.startswith("hostile.verbose: the tool failed: why why")
    assert third.startswith("hostile.verbose: this run has passed 1,048,576 bytes through tools"), third


def _stamps(log: Path, text: str) -> list[datetime]:
    return [
        datetime.fromisoformat(line.split(" ", 1)[0].rstrip("Z"))
        for line in log.read_text().splitlines()
        if text in line
    ]


async def test_a_server_that_dies_as_soon_as_it_starts_is_started_again_ever_later(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the backoff started over with each connection made, so one that died right
    # after it started was started again every 0.55 s, for ever.
    path = tools_file(tmp_path, dies=raw("exits"), good=hostile())
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)):
            with anyio.fail_after(40):
                while len(_stamps(log, "tool server down server=dies")) < 5:
                    await anyio.sleep(0.1)
    downs = _stamps(log, "tool server down server=dies")
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(downs)]
    assert gaps[-1] >= 4.5, f"the backoff grows: {gaps}"


async def test_an_http_servers_answer_that_never_ends_fails_that_call_within_the_runs_bytes(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the SDK reads a JSON answer whole, with no bound, and kept reading one that
    # never ended after its call was given up: 268 -> 1,100 MiB in 20 s, 2 GiB in 5 s unthrottled.
    async with raw_http(tmp_path) as url:
        path = tools_file(tmp_path, http={"url": url, "tools": ["*"]})
        with (tmp_path / "stderr.log").open("w") as errlog:
            async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
                server = server_process()
                before = peak_memory(server)
                done = await run(client, SAID + "print(said(lambda: mcp_tools.http.endless(a=1)))\n", timeout=10)
                grown = peak_memory(server) - before
    assert done["status"] == "ok", done
    assert done["stdout"].startswith("http.endless: the call failed: "), done["stdout"]
    assert grown < 150 << 20, f"{grown >> 20} MiB more for one answer"


async def test_an_http_servers_answer_of_more_than_1_mib_in_an_event_stream_reaches_the_run(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the SDK takes an event of at most 1 MiB, so a result larger than that from a
    # server that answers in an event stream (as the SDK's own servers do) failed, however large the
    # run's budget; in JSON, or from a stdio server, it passed.
    async with http_session(work_dir, tmp_path, "http") as client:
        done = await run(client, SAID + "print(len(said(mcp_tools.http.big)))\n")
    assert done["stdout"] == f"{2 << 20}\n", done


async def test_an_http_server_that_lost_our_session_is_connected_again_at_its_first_404(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: a 404 to a request of a session says the session is gone (the server was
    # started again, say), and the spec has the client start a new one; each call failed ("Session
    # terminated") until the next ping, up to 10 s later, found the connection down. Found by a second:
    # that was known by the SDK client's words for a 404 without a body, and the SDK's own server
    # answers with a JSON-RPC error, "Session not found", passed on as it is: 52 calls failed in 10.6 s.
    code = (
        SAID + "import time\n"
        "first = said(mcp_tools.http.echo)\n"
        "for _ in range(90):  # within RUNNER_TOOLS_MAX_CALLS\n"
        "    answer = said(mcp_tools.http.echo)\n"
        "    if answer == 'echo':\n"
        "        break\n"
        "    time.sleep(0.25)\n"
        "print(first)\n"
        "print(answer)\n"
    )
    async with http_session(work_dir, tmp_path, "sessions") as client:
        before = await run(client, "import mcp_tools\nprint(mcp_tools.http.echo())\n")
        (tmp_path / "port.forget").touch()  # as if it were started again
        done = await run(client, code)
    assert before["stdout"] == "echo\n", before
    first, then = done["stdout"].splitlines()
    assert first == "http.echo: the connection failed: the server no longer has our session (HTTP 404)", first
    assert then == "echo"
    # Down for the 404 itself, not for the next ping's (which a 404 too would find, 10 s later).
    gone = 'tool server down server=http error="the server no longer has our session (HTTP 404)"'
    assert gone in (tmp_path / "stderr.log").read_text()


@pytest.mark.parametrize("body", ["text", "json"])
async def test_an_http_server_whose_endpoint_answers_404_without_a_session_is_down_until_it_answers_again(
    work_dir: Path, tmp_path: Path, body: str
) -> None:
    # Found by a review: a 404 to a request without a session (the URL is wrong, or the endpoint gone)
    # was the SDK client's "Not Found" (METHOD_NOT_FOUND), which the ping takes for an answer: the
    # server was never down, never connected again, and every call failed "Not Found" for as long.
    code = SAID + "print(said(mcp_tools.http.echo))\n"
    async with http_session(work_dir, tmp_path, "gone") as client:
        before = await run(client, code)
        (tmp_path / "port.gone").write_text(body)
        during = await run(client, code)
        log = tmp_path / "stderr.log"
        assert await logged(log, "tool server down server=http"), log.read_text()
        (tmp_path / "port.gone").unlink()
        done = await run(client, FAILED_THEN_AGAIN.replace("raw.", "http."))
    assert before["stdout"] == "echo\n", before
    gone = "its endpoint answered 404 to a request without a session (a wrong URL, or gone)"
    assert during["stdout"] == f"http.echo: the connection failed: {gone}\n", during
    assert f'tool server down server=http error="{gone}"' in log.read_text()
    assert done["stdout"].splitlines()[-1] == "echo", done  # connected again once it answers


async def test_an_http_server_that_refuses_us_is_down_saying_its_status(work_dir: Path, tmp_path: Path) -> None:
    # Found by a first hour: a 401 was the SDK's "Server returned an error response", no status.
    async with http_session(work_dir, tmp_path, "refuses") as client:
        done = await run(client, SAID + "print(said(mcp_tools.http.echo))\n")
    said = "MCPError: Server returned an error response; it answered HTTP 401 Unauthorized"
    assert done["stdout"] == f"http.echo: the server is down: {said}\n", done
    assert f'tool server down server=http error="{said}"' in (tmp_path / "stderr.log").read_text()


def told(directory: Path) -> Counter[str]:
    """What raw_server.py's HTTP mode (`raw_http` in `directory`) wrote on the stream of its own messages
    (GET): how many it answered, the bytes, and how many of them we hung up; the same of calls' streams
    (`calls`, `call_bytes`, `calls_ended`), and the calls' streams it was asked to resume (`resumed`)."""
    told = directory / "port.gets"
    return Counter(json.loads(told.read_text()) if told.exists() else {})


async def test_an_http_servers_redirect_whose_body_never_ends_is_read_within_bounds(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the SDK reads the body of a redirect it follows (within the origin) whole, and
    # only answers to our messages (POST) were bounded: a 307 to the stream of the server's own messages
    # (GET) whose body never ended took the whole server from 73 to 3,964 MB in 10 s.
    async with http_session(work_dir, tmp_path, "redirect") as client:
        done = await run(client, "import mcp_tools\nprint(mcp_tools.http.echo())\n")
        server = server_process()
        before = peak_memory(server)
        (tmp_path / "port.go").touch()
        # Until the SDK has given up its stream (its two tries, both hung up), or has been sent
        # more than it could hold whole.
        with anyio.fail_after(30):
            while told(tmp_path)["ended"] < 2 and told(tmp_path)["bytes"] < 512 << 20:
                await anyio.sleep(0.05)
        grown = peak_memory(server) - before
    assert done["stdout"] == "echo\n", done
    assert grown < 150 << 20, f"{grown >> 20} MiB more for redirects"
    sent = told(tmp_path)["bytes"]
    assert sent < 100 << 20, f"{sent >> 20} MiB sent"


async def test_an_http_servers_flood_of_events_of_unknown_type_is_not_logged(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: the SDK logs a warning for each event of a type it does not know, on the
    # stream of the server's own messages (GET), which none of our bounds saw: 406,857 lines (63 MB) in
    # 5 s, the event loop 99% busy, every other server's calls 40x slower.
    log = tmp_path / "stderr.log"
    async with http_session(work_dir, tmp_path, "events") as client:
        (tmp_path / "port.go").touch()
        with anyio.fail_after(30):
            while told(tmp_path)["bytes"] < 8 << 20:  # some 350,000 events
                await anyio.sleep(0.05)
        done = await run(client, "import mcp_tools\nprint(mcp_tools.http.echo())\n")
    assert done["stdout"] == "echo\n", done
    logged = log.read_text().count("Unknown SSE event")
    assert logged < 100, f"{logged:,} lines of it"


async def test_an_http_servers_own_stream_is_read_at_a_rate(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: what the server sent on the stream of its own messages (GET) that is no
    # message (comment lines, here) was read and parsed as fast as it came, a whole core's worth.
    async with http_session(work_dir, tmp_path, "comments") as client:
        (tmp_path / "port.go").touch()
        await anyio.sleep(3)  # the flood's time
        sent = told(tmp_path)["bytes"]
        done = await run(client, "import mcp_tools\nprint(mcp_tools.http.echo())\n")
    assert done["stdout"] == "echo\n", done
    # Its burst (4 MiB), 1 MiB a second, and what the sockets hold between; else hundreds of MiB.
    assert sent < 24 << 20, f"{sent >> 20} MiB sent in 3 s"


async def test_an_http_servers_own_stream_that_ends_at_once_is_opened_again_at_most_once_a_second(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the SDK opens the stream of the server's own messages (GET) again after the
    # wait its last `retry:` said, with no least: `retry: 0` and an end, 1,687 GETs in 5 s.
    async with http_session(work_dir, tmp_path, "retry") as client:
        (tmp_path / "port.go").touch()
        await anyio.sleep(3)  # the flood's time
        opened = told(tmp_path)["gets"]
        done = await run(client, "import mcp_tools\nprint(mcp_tools.http.echo())\n")
    assert done["stdout"] == "echo\n", done
    assert opened < 10, f"{opened} GETs in 3 s"  # one a second; else some 400


async def test_an_http_call_whose_stream_ends_without_an_answer_fails_alone(work_dir: Path, tmp_path: Path) -> None:
    # Found by a third review: the SDK says "connection closed" for one HTTP call whose stream failed
    # or ended without an answer; that was taken for the connection's end, and every run's calls in
    # flight to the server failed with it while it was made again.
    async with raw_http(tmp_path) as url:
        path = tools_file(tmp_path, http={"url": url, "tools": ["*"]})
        code = SAID + "print(said(lambda: mcp_tools.http.cut()))\nprint(said(lambda: mcp_tools.http.echo()))\n"
        done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    cut, echo = done["stdout"].splitlines()
    assert cut.startswith("http.cut: "), cut
    assert echo == "echo"
    assert "tool server down" not in (tmp_path / "stderr.log").read_text()


async def test_an_http_calls_stream_of_comments_is_read_at_a_rate(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: a call's own stream (its POST's answer) was read as fast as it came, comment
    # lines parsed one by one on the event loop that every run shares: a whole core for as long as the
    # call waited.
    async with http_session(work_dir, tmp_path, "http") as client:
        done, busy = await run_costing(client, SAID + "print(said(mcp_tools.http.chatter))\n", timeout=4)
    assert waited_out(done, "http.chatter"), done
    assert busy < 1.0, f"{busy:.2f} s of the server's CPU in the run's 4 s"


async def test_an_http_call_given_up_hangs_up_its_stream(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: the SDK hangs up a call's stream when the call is given up only when the server
    # speaks 2026-07-28; with an earlier one, it read the stream on for as long as the server wrote it,
    # comment lines at wire speed, after the call and its run had ended.
    async with http_session(work_dir, tmp_path, "http") as client:
        done = await run(client, SAID + "print(said(mcp_tools.http.chatter))\n", timeout=2)
        with anyio.fail_after(10):
            while not told(tmp_path)["calls_ended"]:
                await anyio.sleep(0.05)
        again = await run(client, "import mcp_tools\nprint(mcp_tools.http.echo())\n")
    assert waited_out(done, "http.chatter"), done
    assert again["stdout"] == "echo\n", again


async def test_an_http_call_given_up_is_resumed_no_more(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: a call's stream that ended without an answer, after an event with an id, is
    # resumed (a GET with `Last-Event-ID`) each time it ends so, and was after the call had been given
    # up too: once a second for as long as the server lived.
    async with http_session(work_dir, tmp_path, "http") as client:
        done = await run(client, SAID + "print(said(mcp_tools.http.resumed))\n", timeout=3)
        resumed = told(tmp_path)["resumed"]
        await anyio.sleep(3)  # a resumption a second, were it still resumed
        later = told(tmp_path)["resumed"]
    assert waited_out(done, "http.resumed"), done
    assert resumed >= 1, "resumed while the call waited"
    assert later <= resumed + 1, f"{later - resumed} resumptions after the call was given up"


async def test_a_check_whose_errors_would_print_a_large_value_many_times_stays_small(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a third review: the step budget counted keywords, but jsonschema writes each error's
    # message with the value it is about: a 300 KB string against an anyOf of 9,000 branches took 27 s
    # and 6.6 GB. The validator now sees a copy that prints short, and an error counts for ten steps.
    path = tools_file(tmp_path, hostile=hostile())
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            server = server_process()
            before = peak_memory(server)
            done = await run(client, SAID + "print(str(said(lambda: mcp_tools.hostile.wide()))[:12])\n")
            grown = peak_memory(server) - before
    assert done["stdout"] == "{'s': 'aaaaa\n", "left unchecked: telling would take too long"
    assert grown < 100 << 20, f"{grown >> 20} MiB more to check one result"

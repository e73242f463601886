"""The notes of runner/execution/hints.py on what a real interpreter writes: a notebook's habits in a
one-shot run and in a session call."""

from __future__ import annotations

import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.outcome import NEW_SESSION, RunRequest, Status
from tests.helpers import checked, in_mode

pytestmark = pytest.mark.anyio

PLAIN = "this is plain Python, not IPython: "


async def test_a_notebook_s_shell_line_magic_display_and_top_level_await_each_end_with_a_note(
    config: Config, no_leaks: None
) -> None:
    # Found in a first hour: each ended on a bare SyntaxError or NameError, and a model tries it again.
    said = {
        "import os\n!ls -la\n": "neither a shell command nor a magic",
        "%pip install requests\n": "neither a shell command nor a magic",
        "import os\ndisplay(os.sep)\n": "display() is not defined",
        "import asyncio\nawait asyncio.sleep(0)\n": "asyncio.run(main())",
    }
    async with Pool.open(config) as pool:
        for code, note in said.items():
            result = checked(await pool.run(RunRequest("5e551075", code, 30)))
            assert (result.status, result.note.startswith(PLAIN), note in result.note) == (Status.ERROR, True, True), (
                code,
                result.stderr.text,
            )
        opened = checked(await pool.run(RunRequest("5e551076", "x = 1", 30, session=NEW_SESSION)))
        assert opened.session is not None
        in_session = checked(await pool.run(RunRequest("5e551077", "x\n!ls", 30, session=opened.session.handle)))
        assert "neither a shell command nor a magic" in in_session.note
        fine = checked(await pool.run(RunRequest("5e551078", "1/0", 30)))
        assert fine.note == ""


@pytest.mark.parametrize("mode", ["namespaces", "bwrap"])
async def test_a_sandboxed_run_that_tried_the_network_is_told_it_has_none(
    config: Config, mode: str, no_leaks: None
) -> None:
    # Found in a first hour: a URL ended on a bare "Temporary failure in name resolution", which a model
    # takes for a flaky network and tries again.
    code = "import urllib.request\nurllib.request.urlopen('http://example.com/', timeout=10)\n"
    async with Pool.open(in_mode(config, mode)) as pool:
        result = checked(await pool.run(RunRequest("5e551079", code, 30)))
    assert result.status is Status.ERROR, result
    assert result.note.startswith("runs have no network on this server"), (result.note, result.stderr.text[-300:])


@pytest.mark.parametrize("mode", ["namespaces", "bwrap"])
async def test_a_sandboxed_run_that_met_its_threads_or_its_tmp_is_told_which_limit(
    config: Config, mode: str, no_leaks: None
) -> None:
    # Found in a first hour: 40 threads ended on a bare "can't start new thread", a fork loop on EAGAIN,
    # five 15 MiB files on ENOSPC, none naming the limit or its variable.
    import dataclasses

    limited = dataclasses.replace(in_mode(config, mode), max_processes=16, sandbox_tmp_mb=8)
    said = {
        "import threading, time\nfor _ in range(40):\n    threading.Thread(target=time.sleep, args=(5,)).start()\n": (
            "the run reached its 16 processes and threads (RUNNER_MAX_PROCESSES)"
        ),
        "for n in range(4):\n    open(f'f{n}', 'wb').write(b'x' * (3 << 20))\n": (
            "the run's files filled its /tmp (8 MiB for all of them, RUNNER_SANDBOX_TMP_MB)"
        ),
    }
    async with Pool.open(limited) as pool:
        for code, note in said.items():
            result = checked(await pool.run(RunRequest("5e55107a", code, 30)))
            assert result.status is Status.ERROR, result
            assert result.note.startswith(note), (result.note, result.stderr.text[-300:])

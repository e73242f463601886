"""The tool's definition: its description tells clients what runs may import."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from runner.config import Config
from runner.config.disk import open_environment
from runner.protocol.tool import MAX_LISTENERS_PER_CALLER, ToolChanges, tool_definition
from tests.helpers import fake_env


def test_the_tool_description_names_what_runs_may_import(tmp_path: Path) -> None:
    env = fake_env(tmp_path / "env", {"numpy": "2.4.6", "pandas": "3.1.1"})
    packaged = open_environment(Config.from_env({"RUNNER_PACKAGES": str(env), "RUNNER_PRELOAD": "json"}))
    described = tool_definition(packaged).description or ""
    assert "Importable: the standard library, numpy, pandas." in described
    assert "256 MiB memory (beyond what json map, when imported) per process," in described
    plain = tool_definition(Config.from_env({})).description or ""
    assert "Standard library only." in plain


def test_the_tool_description_lists_what_the_lock_asked_for_without_versions(tmp_path: Path) -> None:
    # Found by a new user: the description listed 35 distributions with versions, cycler among them.
    env = fake_env(tmp_path / "env", {"numpy": "2.4.6", "pandas": "3.1.1", "cycler": "0.12.1", "scikit-learn": "1.9"})
    (env / "requirements.lock").write_text(
        "cycler==0.12.1\n    # via matplotlib\nnumpy==2.4.6\n    # via\n    #   -r requirements-sandbox.in\n"
        "    #   pandas\npandas==3.1.1\n    # via -r requirements-sandbox.in\n"
        "scikit-learn==1.9\n    # via -r requirements-sandbox.in\n"
    )
    described = tool_definition(open_environment(Config.from_env({"RUNNER_PACKAGES": str(env)}))).description or ""
    assert "Importable: the standard library, numpy, pandas, scikit_learn." in described
    assert "cycler" not in described
    assert "2.4.6" not in described


def test_the_tool_description_warns_the_model_where_runs_have_no_sandbox() -> None:
    # Found by a new user's first hour: on a host where `auto` finds no sandbox, runs read the user's
    # home and the tokens file, and nothing the model reads said so.
    bare = tool_definition(Config.from_env({}), sandboxed=False).description or ""
    assert "WITHOUT a sandbox" in bare
    assert "can read, change and delete that user's files and reach the network" in bare
    assert "WITHOUT a sandbox" not in (tool_definition(Config.from_env({})).description or "")


def test_the_tool_description_says_the_run_s_directory_is_empty_only_where_it_is() -> None:
    # Found by a review: a sandboxed run's directory (its /tmp) showed the wheelhouse cache, then in the
    # temp directory, beside the files it was given; what the server's own is bound back there is named.
    empty = tool_definition(Config.from_env({})).description or ""
    assert "starts clean in an empty working directory, deleted afterwards." in empty
    shows = tool_definition(Config.from_env({}), shows=("a-checkout",)).description or ""
    assert "empty working directory" not in shows
    assert "in a working directory empty but for the server's read-only a-checkout, deleted afterwards." in shows


class _Lister:
    """A handshake-era client's session as `ToolChanges` sees it: each notification sent is counted, or
    fails as one on a connection that is gone."""

    def __init__(self, gone: bool = False) -> None:
        self.told, self.gone = 0, gone
        self.sent = anyio.Event()

    async def send_tool_list_changed(self) -> None:
        self.sent.set()
        if self.gone:
            raise anyio.BrokenResourceError
        self.told += 1


def _listing(session: _Lister, version: str = "2025-11-25") -> Any:
    return SimpleNamespace(protocol_version=version, session=session)


@pytest.mark.anyio
async def test_a_client_is_told_of_a_change_once_and_one_whose_connection_is_gone_ends_no_telling() -> None:
    said = ["time"]
    changes = ToolChanges(lambda: said[0], logging.getLogger("test"), handshake=True)
    gone, later, modern = _Lister(gone=True), _Lister(), _Lister()
    async with anyio.create_task_group() as tg:
        tg.start_soon(changes.tell_forever)
        changes.listed(_listing(gone))
        said[0] = "time, late"
        changes.poke()
        with anyio.fail_after(5):
            await gone.sent.wait()
        changes.listed(_listing(modern, version="2026-07-28"))  # told on its listen streams, not here
        changes.listed(_listing(later))
        changes.poke()  # nothing changed since: nothing told
        said[0] = "time, late, other"
        changes.poke()
        with anyio.fail_after(5):
            await later.sent.wait()
        tg.cancel_scope.cancel()
    assert later.told == 1
    assert modern.told == 0


class _Stream:
    """A listen request's session as the SDK's handler sees it: what it sends is kept."""

    def __init__(self) -> None:
        self.sent: list[object] = []

    async def send_notification(self, notification: object, related_request_id: object = None) -> None:
        self.sent.append(notification)


@pytest.mark.anyio
async def test_one_caller_holds_at_most_16_listen_streams_and_the_stop_ends_them_all_with_their_result() -> None:
    changes = ToolChanges(lambda: "", logging.getLogger("test"), handshake=False, caller_of=lambda request: request)
    params = types.SubscriptionsListenRequestParams(notifications=types.SubscriptionFilter(tools_list_changed=True))
    ended: list[object] = []
    sessions = [_Stream() for _ in range(MAX_LISTENERS_PER_CALLER + 1)]

    async def listen(caller: str, index: int) -> None:
        ctx = SimpleNamespace(request=caller, request_id=f"{caller}-{index}", session=sessions[index])
        ended.append(await changes.listen(ctx, params))  # type: ignore[arg-type]

    async with anyio.create_task_group() as tg:
        for index in range(MAX_LISTENERS_PER_CALLER):
            tg.start_soon(listen, "alice", index)
        with anyio.fail_after(5):
            while not all(session.sent for session in sessions[:-1]):  # each acknowledged
                await anyio.sleep(0)
        with pytest.raises(MCPError, match="16 listen streams at once per caller"):
            await listen("alice", MAX_LISTENERS_PER_CALLER)
        tg.start_soon(listen, "bob", MAX_LISTENERS_PER_CALLER)  # another caller's own
        with anyio.fail_after(5):
            while not sessions[-1].sent:
                await anyio.sleep(0)
        changes.close()
    assert len(ended) == MAX_LISTENERS_PER_CALLER + 1


@pytest.mark.anyio
async def test_a_listen_after_the_stop_is_refused_and_over_http_a_quarter_of_the_connections_is_the_most() -> None:
    # Found by a review: a client that listened again once the stop had closed its stream held the whole
    # grace; 8 listens of one caller held all of RUNNER_HTTP_MAX_CONNECTIONS=8.
    changes = ToolChanges(lambda: "", logging.getLogger("test"), handshake=False, caller_of=lambda r: r, connections=8)
    assert (changes.most, changes.most_per_caller) == (2, 2)
    params = types.SubscriptionsListenRequestParams(notifications=types.SubscriptionFilter(tools_list_changed=True))
    changes.close()
    ctx = SimpleNamespace(request="alice", request_id="1", session=_Stream())
    with pytest.raises(MCPError, match="the server is stopping"):
        await changes.listen(ctx, params)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_fault_in_telling_a_change_ends_that_telling_alone(caplog: pytest.LogCaptureFixture) -> None:
    said = ["time"]

    def code_mode() -> str:
        if said[0] == "broken":
            raise RuntimeError("a fault of ours")
        return said[0]

    changes = ToolChanges(code_mode, logging.getLogger("test"), handshake=True)
    later = _Lister()
    async with anyio.create_task_group() as tg:
        tg.start_soon(changes.tell_forever)
        said[0] = "broken"
        changes.poke()
        with anyio.fail_after(5):
            while "telling clients failed" not in caplog.text:
                await anyio.sleep(0)
        changes.listed(_listing(later))
        said[0] = "time, late"
        changes.poke()
        with anyio.fail_after(5):
            await later.sent.wait()
        tg.cancel_scope.cancel()
    assert later.told == 1


def test_the_tool_description_names_the_paths_runs_may_read_and_a_session_s_whole_life() -> None:
    # Found by a first hour: RUNNER_SANDBOX_READ_PATHS worked but the model was never told those paths
    # were there, and the description left out RUNNER_SESSION_MAX_SECONDS.
    many = tuple(f"/data/set{i}" for i in range(7))
    said = tool_definition(dataclasses.replace(Config.from_env({}), sandbox_read_paths=many)).description or ""
    assert " Also readable, read-only: /data/set0, /data/set1, /data/set2, /data/set3, /data/set4 and 2 more." in said
    plain = tool_definition(Config.from_env({"RUNNER_SESSION_MAX_SECONDS": "3600"})).description or ""
    assert "readable" not in plain
    assert "Sessions end after 900s idle, 3,600s after they began, or with close_session." in plain

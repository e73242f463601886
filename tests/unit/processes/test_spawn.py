"""Spawning a run interpreter, refused where it must not happen: never for a sandbox whose runs are forked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.config import Config
from runner.processes.isolation import IsolationPlan


def test_an_interpreter_is_never_spawned_for_a_sandbox_whose_runs_are_forked(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bench script once did this: the bootstrap, spawned on the host with the sandbox's /tmp as
    # its directory, emptied the host's /tmp when its code came. The directory here stands in for it.
    from runner.inrun.wire import frame_job
    from runner.processes import spawn
    from runner.processes.limits import limits_for

    stand_in = tmp_path / "tmp"
    stand_in.mkdir()
    (stand_in / "someone-elses-file").write_text("keep me")
    monkeypatch.setattr(spawn, "SANDBOX_WORKDIR", str(stand_in))
    forked = IsolationPlan("namespaces", "forked by the zygote", zygote_args=("namespaces",))
    refused = ""
    try:
        child = spawn.spawn_child(
            config.python, str(tmp_path), limits_for(config.limits, config.pool, 0, forked), forked
        )
    except ValueError as exc:
        refused = str(exc)
    else:  # the code before the fix: let the run take its code, and see what is left
        os.set_blocking(child.code, True)
        os.write(child.code, frame_job(b"pass"))
        os.waitpid(child.pid, 0)
        child.reaped = True
        child.close_all()
    assert (stand_in / "someone-elses-file").read_text() == "keep me"
    assert "forks its runs from a zygote" in refused

"""The tool's definition: its description tells clients what runs may import."""

from __future__ import annotations

from pathlib import Path

from runner.config import Config
from runner.config.disk import open_environment
from runner.protocol.tool import tool_definition
from tests.helpers import fake_env


def test_the_tool_description_names_what_runs_may_import(tmp_path: Path) -> None:
    env = fake_env(tmp_path / "env", {"numpy": "2.4.6", "pandas": "3.1.1"})
    packaged = open_environment(Config.from_env({"RUNNER_PACKAGES": str(env), "RUNNER_PRELOAD": "json"}))
    described = tool_definition(packaged).description or ""
    assert "Importable: the standard library, numpy, pandas." in described
    assert "256 MiB memory (beyond what json map, when imported)," in described
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

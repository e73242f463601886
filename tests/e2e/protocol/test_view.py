"""The MCP App view in a real browser (issue 51): Debian's Chromium, driven by Playwright, hosts
ui://python-runner/run.html the way a host does, with ext-apps' own AppBridge on a test host page
(tests/apps), and hands it real results of a real server, which the official TypeScript client calls.

tests/apps/view_driver.mjs does the browsing and reports what it saw; the assertions are here. The
screenshots of each state are kept in RUNNER_TEST_ARTIFACTS (default: .test-artifacts/) under apps/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.e2e.test_real_clients import assert_left_nothing, client_env, required_tool
from tests.npm import npm_ci_once

APPS = REPO / "tests" / "apps"
PACKAGES = os.environ.get("RUNNER_TEST_PACKAGES") or str(REPO / ".sandbox-env")
ARTIFACTS = Path(os.environ.get("RUNNER_TEST_ARTIFACTS") or REPO / ".test-artifacts") / "apps"
SCREENSHOTS = (
    "table-light.png",
    "table-sorted.png",
    "table-filtered.png",
    "table-dark.png",
    "figure.png",
    "error.png",
    "linked.png",
    "session.png",
)

# npm ci, Chromium's start, and eight real calls (two of 2,000,000-row frames) on a busy machine.
pytestmark = pytest.mark.timeout(300)


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (.ci/run does): the app view's tests need it")
        pytest.skip("no chromium on PATH (Debian's package `chromium`): the app view's browser tests need it")
    return path


def run_driver(work_dir: Path, home: Path, **config: Any) -> dict[str, dict[str, Any]]:
    """One run of tests/apps/view_driver.mjs against a stdio server of ours: its reports by check."""
    if not os.path.isdir(os.path.join(PACKAGES, "site-packages")):
        if os.environ.get("CI"):
            pytest.fail(f"CI must build the package environment: no {PACKAGES} (make sandbox-env)")
        pytest.skip(f"no package environment at {PACKAGES}: make sandbox-env builds it")
    node = required_tool("node")
    npm_ci_once(required_tool("npm"), APPS, 200, skip_if_unreachable=False)
    server_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "RUNNER_WORK_DIR": str(work_dir),
        "RUNNER_PACKAGES": PACKAGES,
        "RUNNER_WHEELHOUSE": "",
        "RUNNER_LOG_LEVEL": "warning",
    }
    settings = {
        "command": sys.executable,
        "args": ["-m", "runner"],
        "env": server_env,
        "cwd": str(REPO),
        "chromium": chromium(),
        **config,
    }
    done = subprocess.run(
        [node, str(APPS / "view_driver.mjs"), json.dumps(settings)],
        cwd=APPS,
        env=client_env(home),
        capture_output=True,
        text=True,
        timeout=240,
    )
    reports = {}
    for line in done.stdout.splitlines():
        report = json.loads(line)
        reports[report.pop("check")] = report
    assert done.returncode == 0, f"the driver failed:\n{done.stderr[-4000:]}"
    return reports


class Seen:
    """What the driver saw, by check; a check that failed in the driver fails the tests that read it."""

    def __init__(self, reports: dict[str, dict[str, Any]]) -> None:
        self._reports = reports

    def __getitem__(self, check: str) -> dict[str, Any]:
        assert check in self._reports, f"the driver printed no {check!r} report"
        report = self._reports[check]
        assert "error" not in report, f"check {check!r} failed in the driver:\n{report['error']}"
        return report


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Seen:
    base = tmp_path_factory.mktemp("view")
    work_dir = base / "work"
    work_dir.mkdir()
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    reports = run_driver(work_dir, base / "home", shots=str(ARTIFACTS))
    assert_left_nothing(work_dir)
    return Seen(reports)


def test_the_tool_names_the_view_and_the_view_is_one_small_document_that_allows_nothing_external(
    seen: Seen,
) -> None:
    declared = seen["declared"]
    uri = "ui://python-runner/run.html"
    assert declared["meta"] == {"ui": {"resourceUri": uri}, "ui/resourceUri": uri}
    assert declared["mimeType"] == "text/html;profile=mcp-app"
    assert 0 < declared["bytes"] < 300 * 1024
    assert declared["csp"] == {"connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": []}
    assert declared["listed"] == [uri]


def test_a_dataframe_of_two_million_rows_shows_its_first_thousand_a_page_at_a_time(
    seen: Seen,
) -> None:
    table = seen["table"]
    assert table["isError"] is False
    assert table["status"] == "ok"
    assert table["tableRows"] == 1000
    assert table["caption"] == "first 1,000 of 2,000,000 rows, 4 columns"
    assert table["headers"] == ["city", "amount", "score", "when"]
    assert len(table["firstRows"]) == 50
    assert table["firstRows"][0] == ["Ankara", "0", "0", "2026-01-01T00:00:00"]
    assert table["firstRows"][2] == ["Cairo", "74", "0.5", "2026-01-01T00:02:00"]
    assert table["missing"] == "NaN", "a NaN comes as null and shows as pandas shows it"
    assert table["page"] == "rows 1\u201350, page 1 of 20"
    assert table["stdout"] == "rows: 2000000\n"


def test_the_table_sorts_by_a_column_both_ways_and_pages(seen: Seen) -> None:
    table = seen["table"]
    # amount is i * 37 % 1000 for the first 1,000 rows: each of 0..999 once.
    assert table["ascending"]["sort"] == "ascending"
    assert [row[1] for row in table["ascending"]["rows"][:3]] == ["0", "1", "2"]
    assert table["descending"]["sort"] == "descending"
    assert [row[1] for row in table["descending"]["rows"][:3]] == ["999", "998", "997"]
    assert table["nextPage"]["page"] == "rows 51\u2013100, page 2 of 20"
    assert table["nextPage"]["rows"][0][1] == "949"


def test_the_table_filters_by_text_in_any_column(seen: Seen) -> None:
    filtered = seen["table"]["filtered"]
    assert filtered["count"] == "200 rows matching, of 1,000"
    assert filtered["page"] == "rows 1\u201350, page 1 of 4"
    assert filtered["cities"] == ["Cairo"]


def test_the_view_follows_the_host_s_theme_both_ways(seen: Seen) -> None:
    assert seen["table"]["dark"] == "rgb(22, 24, 28)"
    assert seen["table"]["light"] == "rgb(255, 255, 255)"


def test_the_view_works_with_the_keyboard_alone(seen: Seen) -> None:
    keys = seen["keyboard"]
    assert keys["path"][-1] == "filter", "Tab from the host page reaches the filter"
    assert keys["header"].startswith("amount")
    assert keys["sort"] == "descending", "Enter twice on a header sorts by it, then the other way"
    assert keys["count"] == "200 rows matching, of 1,000"
    assert {row[0] for row in keys["rows"]} == {"Lima"}
    assert [row[1] for row in keys["rows"][:2]] == ["998", "993"]


def test_a_figure_is_drawn(seen: Seen) -> None:
    figure = seen["figure"]
    assert figure["status"] == "ok"
    assert figure["images"] == 1
    assert figure["drawn"] == {"complete": True, "width": 640, "height": 480, "src": "data:image/png;base64,"}
    assert figure["caption"] == "figure-1.png"
    assert figure["stdout"] == "drawn\n"


def test_a_failed_run_shows_its_status_message_and_stderr_and_marks_where_its_output_was_cut(
    seen: Seen,
) -> None:
    error = seen["error"]
    assert error["status"] == "error"
    assert "bad" in error["statusClass"]
    assert error["message"] == "exited with status 1"
    assert error["stderr"].startswith("a warning\nTraceback")
    assert error["stderr"].endswith("ValueError: bad value\n")
    assert error["stderrOpen"] is True
    assert error["stdoutTitle"] == "stdout (3 lines, cut: 60,001 bytes written)"
    assert error["cut"] == ["… 40,001 bytes cut here …"]


def test_a_cut_mark_the_run_printed_itself_is_shown_as_its_text_and_the_servers_is_marked(seen: Seen) -> None:
    # Found by a review: the view marked the first mark it saw, the run's, and left the server's as text.
    fake = seen["fakecut"]
    assert fake["cut"] == [f"… {fake['dropped']:,} bytes cut here …"]
    assert fake["fakeShownAsText"] is True


def test_a_linked_file_is_read_through_the_host(seen: Seen) -> None:
    linked = seen["linked"]
    [uri] = linked["links"]
    assert uri.startswith("runner://output/")
    assert linked["name"] == "report.txt, whole"
    assert linked["shown"].startswith("first line of the report\nyyy")
    # Its first 262,144 characters (found by a review: 9 MiB laid out whole froze the view 3-7 s).
    assert linked["shownChars"] == 262_144
    assert linked["note"] == "the first 262,144 of 400,025 characters shown"


def test_run_again_calls_run_python_through_the_host_and_shows_the_new_result(
    seen: Seen,
) -> None:
    again = seen["again"]
    assert again["callsThroughHost"] == 1
    assert again["status"] == "ok"
    assert again["before"] != again["after"], "a new request_id"
    assert again["stdout"].startswith("pid ")


def test_what_a_run_writes_is_shown_as_text_never_as_markup(seen: Seen) -> None:
    hostile = seen["hostile"]
    markup = '<img src="x" onerror="document.title=1"><script>document.title = "pwned"</script><b>bold</b>'
    assert hostile["printed"] == hostile["stdout"] == markup + "\n\n... [5 bytes dropped] ...\n"
    assert hostile["header"] == hostile["cell"] == markup
    assert hostile["file"].startswith("<img src=")
    assert hostile["elements"] == 0
    assert hostile["title"] == "Python run"
    assert hostile["cutMarks"] == 0, "a cut mark the run printed is its text, not the server's mark"


def test_a_session_s_handle_is_shown_and_run_again_runs_in_that_session(seen: Seen) -> None:
    session = seen["session"]
    assert session["handle"].startswith("s-")
    assert session["session"] == f"Session {session['handle']}"
    assert session["value"] == "42"
    assert session["again"] == {"session": session["session"], "value": "43"}


def test_infinities_sort_as_numbers_and_a_nullable_dtype_s_missing_value_shows_as_pandas_shows_it(
    seen: Seen,
) -> None:
    infinite = seen["infinite"]
    assert infinite["missing"] == "<NA>"
    assert infinite["ascending"] == ["-inf", "1", "2", "inf"]
    # Text sorts as text (found by a review: "inf" sorted as infinity, "constructor" as Object's own).
    assert infinite["text"] == ["apple", "constructor", "delta", "inf"]


def test_the_view_tells_the_host_its_height_and_a_shorter_result_makes_it_shorter(
    seen: Seen,
) -> None:
    size = seen["size"]
    assert size["tall"] > 300
    assert 0 < size["short"] < size["tall"] - 200


def test_no_request_leaves_the_host_page_and_nothing_is_refused(seen: Seen) -> None:
    requests = seen["requests"]
    assert requests["requests"], "the log saw the host page's own requests"
    assert requests["outside"] == []
    assert requests["consoleErrors"] == [], "no Content-Security-Policy refusal, no script error"


def test_each_state_is_kept_as_a_screenshot(seen: Seen) -> None:
    for name in SCREENSHOTS:
        shot = ARTIFACTS / name
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name

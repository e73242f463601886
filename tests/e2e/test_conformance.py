"""The official MCP conformance suite, @modelcontextprotocol/conformance, against `python -m runner --transport
http` (issue 13 item 4).

The suite and the Node.js 22 it needs (under Node 20 it fails on fs.globSync) come from npm, pinned in
tests/conformance/package-lock.json (Node as the npm package `node`, whose install script fetches the
binary for this platform) and installed once per session with `npm ci` into tests/conformance/node_modules.
Without npm on PATH, or with the npm registry out of reach, these tests are skipped; any other failure to
install fails them.

One server serves every run of the suite: once as the suite chooses (each scenario at the protocol version
it infers, extensions included) and once at each protocol version the suite knows. Every run gets
tests/conformance/expected-failures.yml, the checks this server fails on purpose: one that fails anyway
fails the run, and so does one that passes (its entry is stale).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.helpers import processes_mentioning, settled
from tests.http_server import http_server
from tests.npm import npm_ci_once

SUITE_DIR = REPO / "tests" / "conformance"
NODE_MODULES = SUITE_DIR / "node_modules"
EXPECTED_FAILURES = SUITE_DIR / "expected-failures.yml"
SUITE_PACKAGE = "@modelcontextprotocol/conformance"
SUITE_VERSION = "0.2.0-alpha.12"
NODE_VERSION = "22.23.3"

# The protocol versions the suite knows; the server speaks them all (2024-11-05 too, which the suite lacks).
WIRE_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
AS_THE_SUITE_CHOOSES = "as-the-suite-chooses"
RUNS = (AS_THE_SUITE_CHOOSES, *WIRE_VERSIONS)

# What issue 13 requires to pass: expected-failures.yml may excuse none of their checks but those below.
REQUIRED = (
    "server-initialize",
    "ping",
    "tools-list",
    "dns-rebinding-protection",
    "http-header-validation",
    "server-stateless",
)
# The only checks of a required scenario that may fail: they need a fixture tool this server does not have
# (test_missing_capability). The other 23 checks of server-stateless must pass.
FIXTURE_CHECKS_OF_REQUIRED = {
    "server-stateless": {
        "sep-2575-server-rejects-undeclared-capability",
        "sep-2575-missing-capability-http-400",
    },
}

FAILED = ("FAILURE", "WARNING")  # the suite's baseline counts a WARNING as a failure too
NPM_CI_TIMEOUT = 300
SUITE_RUN_TIMEOUT = 120
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RESULT_DIR = re.compile(r"server-(?P<scenario>.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z")
ENTRY = re.compile(r"(?P<scenario>[^:\s]+):(?P<check>[^:\s]+)")
LISTED = re.compile(r"  - (?P<name>\S+) \[(?P<tags>[^\]]*)\]")

# The first test pays for `npm ci` (about 15 s from an empty npm cache, the Node binary included) and the
# whole suite (about 20 s); every subprocess has its own, shorter, timeout.
pytestmark = pytest.mark.timeout(NPM_CI_TIMEOUT + len(RUNS) * SUITE_RUN_TIMEOUT)


# --- npm ci, once per session -------------------------------------------------------------------------


@dataclass(frozen=True)
class Suite:
    node: Path  # Node 22 from the npm package `node`
    cli: Path  # the suite's `conformance` script

    def run(self, *args: str, cwd: Path, timeout: float = SUITE_RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            # Only loopback is ever reached; a proxy from the environment must not get in the way.
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
        try:
            return subprocess.run(
                [str(self.node), str(self.cli), *args],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"conformance {' '.join(args)} took more than {timeout} s:\n{exc.stdout!r}", pytrace=False)


@pytest.fixture(scope="session")
def suite() -> Suite:
    """`npm ci` in tests/conformance unless node_modules was installed from the current lock."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(
            "npm not found on PATH: tests/e2e/test_conformance.py installs the MCP conformance suite and Node.js 22 "
            "from npm (tests/conformance/package-lock.json)"
        )
    npm_ci_once(npm, SUITE_DIR, NPM_CI_TIMEOUT, skip_if_unreachable=True)
    suite_package = json.loads((NODE_MODULES / SUITE_PACKAGE / "package.json").read_text())
    assert suite_package["version"] == SUITE_VERSION
    node_package = json.loads((NODE_MODULES / "node" / "package.json").read_text())
    node = NODE_MODULES / "node" / node_package["bin"]["node"]
    if not node.is_file():
        pytest.fail(
            f"{node} is missing: the preinstall script of the npm package `node` fetches it; were install "
            "scripts disabled (npm's ignore-scripts, or allowScripts in tests/conformance/package.json)?",
            pytrace=False,
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=True)
    assert version.stdout.strip() == f"v{NODE_VERSION}"
    return Suite(node=node, cli=NODE_MODULES / SUITE_PACKAGE / suite_package["bin"]["conformance"])


@pytest.fixture(scope="module")
def scenarios(suite: Suite, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """`conformance list --server`: every server scenario with the protocol versions (or `extension`) it
    applies to."""
    listing = suite.run("list", "--server", cwd=tmp_path_factory.mktemp("list"), timeout=60)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0] == "Server scenarios (test against a server):", listing.stdout
    found = {}
    for line in filter(None, lines[1:]):
        listed = LISTED.fullmatch(line)
        assert listed is not None, f"unexpected line in `conformance list --server`: {line!r}"
        found[listed["name"]] = listed["tags"].split(",")
    assert set(REQUIRED) <= set(found)
    return found


def expected_failures() -> list[tuple[str, str]]:
    """The entries of expected-failures.yml, each as (scenario, check id)."""
    document = yaml.safe_load(EXPECTED_FAILURES.read_text())
    assert set(document) == {"server"}, "only server scenarios are run"
    entries = []
    for entry in document["server"]:
        assert isinstance(entry, str), f"{entry!r}: an entry is `<scenario>:<check-id>`, without a space"
        named = ENTRY.fullmatch(entry)
        assert named is not None, f"{entry!r}: name a check as `<scenario>:<check-id>`, not a whole scenario"
        entries.append((named["scenario"], named["check"]))
    assert len(entries) == len(set(entries)), "an entry is listed twice"
    return entries


# --- The runs -----------------------------------------------------------------------------------------


@dataclass
class SuiteRun:
    returncode: int
    output: str
    checks: dict[str, list[dict[str, Any]]]  # scenario -> its checks, from the suite's checks.json files
    server_exit: int | None = None  # the server's exit status if it had ended by the end of the run

    def unexpected(self, expected: list[tuple[str, str]]) -> list[str]:
        """Failing checks expected-failures.yml does not list, with the suite's message for each."""
        return [
            f"{scenario}:{check['id']} {check['status']}: {check.get('errorMessage') or ''}"
            for scenario, checks in sorted(self.checks.items())
            for check in checks
            if check["status"] in FAILED and (scenario, check["id"]) not in expected
        ]

    def stale(self, expected: list[tuple[str, str]]) -> list[str]:
        """Entries of expected-failures.yml whose check passed in this run."""
        passed = {
            (scenario, check["id"])
            for scenario, checks in self.checks.items()
            for check in checks
            if check["status"] == "SUCCESS"
        }
        return [f"{scenario}:{check}" for scenario, check in expected if (scenario, check) in passed]

    def verdict(self) -> str:
        """The end of the suite's output (its totals and baseline verdict), without the expected failures."""
        output = ANSI.sub("", self.output)
        lines = output[output.rfind("Total:") :].splitlines()
        return "\n".join(line for line in lines if not line.startswith("  ~ "))[-6000:]


@dataclass
class ServedSuite:
    runs: dict[str, SuiteRun]
    server_status: int
    server_log: str
    processes_left: list[int] = field(default_factory=list)
    files_left: list[str] = field(default_factory=list)


def run_suite(suite: Suite, url: str, run: str, directory: Path) -> SuiteRun:
    version = [] if run == AS_THE_SUITE_CHOOSES else ["--spec-version", run]
    results = directory / "results"
    done = suite.run(
        "server",
        "--url",
        url,
        "--suite",
        "all",
        *version,
        "--expected-failures",
        str(EXPECTED_FAILURES),
        "--output-dir",
        str(results),
        cwd=directory,
    )
    checks = {}
    for checks_file in sorted(results.glob("*/checks.json")):
        named = RESULT_DIR.fullmatch(checks_file.parent.name)
        assert named is not None, f"unexpected result directory {checks_file.parent}"
        checks[named["scenario"]] = json.loads(checks_file.read_text())
    return SuiteRun(done.returncode, f"{done.stdout}\n{done.stderr}", checks)


@pytest.fixture(scope="module")
def served(suite: Suite, tmp_path_factory: pytest.TempPathFactory) -> ServedSuite:
    """Every run of RUNS against one server, then the server stopped with SIGTERM."""
    root = tmp_path_factory.mktemp("conformance")
    work_dir = root / "work"
    work_dir.mkdir()
    log = root / "server.log"
    runs = {}
    with http_server(work_dir, log) as server:
        for run in RUNS:
            (root / run).mkdir()
            runs[run] = run_suite(suite, server.url, run, root / run)
            runs[run].server_exit = server.process.poll()
        status = server.stop()
    return ServedSuite(
        runs,
        status,
        log.read_text(errors="replace"),
        settled(lambda: processes_mentioning(str(work_dir))),
        settled(lambda: [path.name for path in work_dir.iterdir()]),
    )


# --- Tests --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", RUNS)
def test_the_official_conformance_suite_passes_against_the_http_server(served: ServedSuite, run: str) -> None:
    result = served.runs[run]
    returncode = result.returncode
    assert result.checks, f"no scenario ran:\n{ANSI.sub('', result.output)[-4000:]}"
    expected = expected_failures()
    assert result.server_exit is None, f"the server ended ({result.server_exit}) during the run:\n{served.server_log}"
    assert returncode == 0, (
        f"conformance server --suite all ({run}) exited with {returncode}.\n"
        "Failing checks that tests/conformance/expected-failures.yml does not list:\n"
        + "\n".join(result.unexpected(expected))
        + "\nListed checks that passed (remove their entries):\n"
        + "\n".join(result.stale(expected))
        + f"\n\nThe suite's verdict:\n{result.verdict()}"
    )


def test_the_scenarios_the_issue_requires_run_and_pass_every_check(served: ServedSuite) -> None:
    ran = {scenario: [run for run, result in served.runs.items() if scenario in result.checks] for scenario in REQUIRED}
    assert [scenario for scenario, runs in ran.items() if not runs] == [], "never ran"
    failed = {
        f"{scenario}:{check['id']} ({run})": check.get("errorMessage")
        for scenario, runs in ran.items()
        for run in runs
        for check in served.runs[run].checks[scenario]
        if check["status"] in FAILED and check["id"] not in FIXTURE_CHECKS_OF_REQUIRED.get(scenario, set())
    }
    assert failed == {}
    vacuous = [
        f"{scenario} ({run})"
        for scenario, runs in ran.items()
        for run in runs
        if not any(check["status"] == "SUCCESS" for check in served.runs[run].checks[scenario])
    ]
    assert vacuous == [], "ran without a single passing check"


def test_every_server_scenario_runs_at_every_protocol_version_it_applies_to(
    served: ServedSuite, scenarios: dict[str, list[str]]
) -> None:
    for scenario, tags in scenarios.items():
        assert set(tags) <= {*WIRE_VERSIONS, "extension"}, f"{scenario}: a protocol version not in WIRE_VERSIONS"
        assert scenario in served.runs[AS_THE_SUITE_CHOOSES].checks, scenario
        for version in set(tags) & set(WIRE_VERSIONS):
            assert scenario in served.runs[version].checks, f"{scenario} did not run at {version}"


def test_the_expected_failures_name_real_scenarios_and_none_the_issue_requires(
    scenarios: dict[str, list[str]],
) -> None:
    entries = expected_failures()
    assert entries
    unknown = sorted({scenario for scenario, _ in entries} - set(scenarios))
    assert unknown == [], f"not server scenarios of the suite: {unknown}"
    excused = {
        f"{scenario}:{check}"
        for scenario, check in entries
        if scenario in REQUIRED and check not in FIXTURE_CHECKS_OF_REQUIRED.get(scenario, set())
    }
    assert sorted(excused) == [], f"checks of the scenarios issue 13 requires to pass: {sorted(excused)}"


def test_every_check_the_expected_failures_name_is_one_the_suite_reports_failing(served: ServedSuite) -> None:
    """The suite tolerates an entry whose check never shows up (a typo, a renamed check); this does not."""
    reported = {
        (scenario, check["id"])
        for result in served.runs.values()
        for scenario, checks in result.checks.items()
        for check in checks
        if check["status"] in FAILED
    }
    never = [f"{scenario}:{check}" for scenario, check in expected_failures() if (scenario, check) not in reported]
    assert never == [], f"listed in expected-failures.yml, but failed in no run: {never}"


def test_the_server_serves_the_whole_suite_and_stops_cleanly(served: ServedSuite) -> None:
    assert served.server_status == 0, served.server_log
    assert re.search(r"^\S+ (ERROR|CRITICAL) |Traceback", served.server_log, re.MULTILINE) is None, served.server_log
    assert served.processes_left == []
    assert served.files_left == []

"""The documentation keeps its promises: its links resolve, the make targets and files it names exist,
and the examples that need no network print what the pages say they print.

README.md and every docs/*.md page are read as GitHub renders them: fenced code blocks are code, not
links or headings, and an `#anchor` is the slug GitHub gives a heading.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
PAGE_IDS = [str(page.relative_to(REPO)) for page in PAGES]
README_MAX_LINES = 250
# Paths the pages name that running something creates; they are not in the repository.
GENERATED_PATHS = {"bench/results/"}
# What a path of ours looks like in code: under one of these directories, or one of these files.
OUR_PATH = re.compile(r"(?:runner|tests|bench|scripts|docs|mcp-config-examples|\.ci)/[\w./-]*")
OUR_FILES = {
    "Dockerfile",
    "Makefile",
    "docker-compose.yml",
    "pyproject.toml",
    "requirements.lock",
    "requirements-dev.lock",
    "requirements.in",
    "requirements-dev.in",
}
FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
MAKE = re.compile(r"(?:^|[\s;&|(])make\s+(?:[A-Z_]+=\S*\s+)*([a-z][\w.-]*)")
# What differs from run to run in a printed result: a random request id, the duration.
VARIABLE = re.compile(r"request_id=[0-9a-f]{8}\b|duration: \d+\.\d{3}s")


# --- Reading markdown as GitHub does ----------------------------------------------------------------


@dataclass
class Block:
    info: str
    text: str


@dataclass
class Page:
    path: Path
    prose: str  # the page with every fenced block blanked out, lines kept
    blocks: list[Block]


def read_page(path: Path) -> Page:
    prose: list[str] = []
    blocks: list[Block] = []
    fence: str | None = None
    body: list[str] = []
    info = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        opening = FENCE.match(line)
        if fence is None and opening:
            fence, info, body = opening.group(1), line[3:].strip(), []
            prose.append("")
        elif fence is not None and line.startswith(fence):
            blocks.append(Block(info, "\n".join(body) + "\n"))
            fence = None
            prose.append("")
        elif fence is not None:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    assert fence is None, f"{path.name}: a fenced block is never closed"
    return Page(path, "\n".join(prose), blocks)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation but - and _ removed, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Page) -> set[str]:
    """Every anchor GitHub makes for the page's headings (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    result: set[str] = set()
    for line in page.prose.splitlines():
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def links(page: Page) -> list[str]:
    """Every link target in the page's prose; code spans are not links, even when they look like one."""
    text = INLINE_CODE.sub(lambda match: "x" * len(match.group(0)), page.prose)
    return LINK.findall(text)


def code_texts(page: Page) -> list[str]:
    """The content of every inline code span and fenced block."""
    return INLINE_CODE.findall(page.prose) + [block.text for block in page.blocks]


def makefile_targets() -> set[str]:
    targets: set[str] = set()
    for line in (REPO / "Makefile").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([\w.$() /-]+?)\s*:(?!=)", line)
        if match and not line.startswith((".", "\t")):
            targets.update(match.group(1).split())
    return targets


def expected_pattern(printed: str) -> re.Pattern[str]:
    """A printed result as a pattern in which a random request id and the duration may differ."""
    parts: list[str] = []
    done = 0
    for match in VARIABLE.finditer(printed):
        parts.append(re.escape(printed[done : match.start()]))
        if match.group().startswith("request_id="):
            parts.append(r"request_id=[0-9a-f]{8}")
        else:
            parts.append(r"duration: \d+\.\d{3}s")
        done = match.end()
    parts.append(re.escape(printed[done:].rstrip("\n")))
    return re.compile("".join(parts))


def clean_environment(**extra: str) -> dict[str, str]:
    """The test's environment without RUNNER_* settings (the examples assume the defaults)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("RUNNER_")}
    # The standard library only: from this checkout, run_code would take its .sandbox-env and .wheelhouse.
    return {**env, "PYTHONPATH": str(REPO), "RUNNER_PACKAGES": "", "RUNNER_WHEELHOUSE": "", **extra}


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


# --- Links --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES, ids=PAGE_IDS)
def test_every_relative_link_in_the_readme_and_docs_resolves(path: Path) -> None:
    page = read_page(path)
    broken: list[str] = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:: not ours to check offline
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor and anchor not in anchors(read_page(resolved)):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {resolved.relative_to(REPO)}")
    assert broken == []


def test_the_readme_s_documentation_index_lists_every_docs_page() -> None:
    linked = {(REPO / target.partition("#")[0]).resolve() for target in links(read_page(README))}
    missing = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert missing == []


@pytest.mark.parametrize("path", PAGES[1:], ids=PAGE_IDS[1:])
def test_every_docs_page_opens_with_a_title_and_an_introduction(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ")
    assert lines[1] == ""
    assert lines[2]
    assert not lines[2].startswith(("#", "|", "-", "```"))


# --- Size, targets and paths --------------------------------------------------------------------------


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= README_MAX_LINES


@pytest.mark.parametrize("path", PAGES, ids=PAGE_IDS)
def test_every_make_target_named_in_the_docs_is_a_target_of_the_makefile(path: Path) -> None:
    targets = makefile_targets()
    named = {target for text in code_texts(read_page(path)) for target in MAKE.findall(text)}
    assert named - targets == set()


@pytest.mark.parametrize("path", PAGES, ids=PAGE_IDS)
def test_every_repository_path_named_in_code_exists(path: Path) -> None:
    missing: set[str] = set()
    for text in code_texts(read_page(path)):
        for token in text.split():
            token = token.strip("\"',;:()[]")
            if not (OUR_PATH.fullmatch(token) or token in OUR_FILES) or token in GENERATED_PATHS:
                continue
            if not (REPO / token).exists():
                missing.add(token)
    assert missing == set()


def test_the_checks_above_see_what_they_should() -> None:
    # Guards against a parser that silently finds nothing: the README names these for certain.
    page = read_page(README)
    assert "docs/tool.md" in links(page)
    assert {"run", "test", "help"} <= {target for text in code_texts(page) for target in MAKE.findall(text)}
    assert {"run", "test", "docker-run", "inspect-cli"} <= makefile_targets()
    assert "the-run_python-tool" in anchors(page)
    assert slug("What was tested without a Docker engine") == "what-was-tested-without-a-docker-engine"
    assert slug("RLIMIT_NPROC and running as root") == "rlimit_nproc-and-running-as-root"


# --- Examples that run --------------------------------------------------------------------------------


def python_api_examples(path: Path) -> list[tuple[str, str]]:
    """(code, printed output) for every `.venv/bin/python -c "..."` block followed by its output."""
    blocks = read_page(path).blocks
    examples = []
    for block, after in itertools.pairwise(blocks):
        command = block.text.strip()
        if command.startswith('.venv/bin/python -c "') and command.endswith('"'):
            examples.append((command[len('.venv/bin/python -c "') : -1], after.text))
    return examples


@pytest.mark.parametrize("path", [README, REPO / "docs" / "python-api.md"], ids=["README.md", "docs/python-api.md"])
def test_the_python_api_example_prints_the_text_block_shown_after_it(path: Path) -> None:
    examples = python_api_examples(path)
    assert len(examples) == 1
    code, printed = examples[0]
    assert "run_code('print(1+1)'" in code
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert expected_pattern(printed).fullmatch(done.stdout.rstrip("\n")), done.stdout


def test_the_readme_s_tool_example_returns_the_text_block_shown_after_it() -> None:
    blocks = read_page(README).blocks
    index = next(i for i, block in enumerate(blocks) if block.info == "json" and '"code"' in block.text)
    arguments = json.loads(blocks[index].text)
    printed = blocks[index + 1].text
    done = run_python(
        f"import asyncio\nfrom runner import run_code\nprint(asyncio.run(run_code(**{arguments!r})).to_text())\n"
    )
    assert done.returncode == 0, done.stderr
    assert expected_pattern(printed).fullmatch(done.stdout.rstrip("\n")), done.stdout


def test_the_invalid_configuration_example_exits_2_with_exactly_the_message_shown() -> None:
    blocks = read_page(REPO / "docs" / "configuration.md").blocks
    transcript = next(block.text for block in blocks if block.text.startswith("$ RUNNER_"))
    command, *rest = transcript.splitlines()
    status_at = rest.index("$ echo $?")
    message, status = rest[:status_at], int(rest[status_at + 1])
    words = shlex.split(command.removeprefix("$ "))
    settings = dict(word.split("=", 1) for word in words if "=" in word and word[0].isupper())
    argv = [word for word in words if not ("=" in word and word[0].isupper())]
    assert argv == [".venv/bin/python", "-m", "runner"]  # the clone's, as `make run` made it
    done = subprocess.run(
        [sys.executable, *argv[1:]],
        cwd=REPO,
        env=clean_environment(**settings),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (status, "", "\n".join(message) + "\n")


def test_docs_tool_md_shows_the_description_the_model_reads_which_is_under_1200_characters() -> None:
    # Found by a new user: the description was 2,148 characters, listing 35 distributions with their
    # versions (cycler, pyparsing, tzdata among them), and no page showed it.
    if not (REPO / ".sandbox-env" / ".built").is_file() or not (REPO / ".wheelhouse" / "requirements.lock").is_file():
        pytest.skip("needs the checkout's .sandbox-env and .wheelhouse (make setup; make test builds them)")
    env = {name: value for name, value in os.environ.items() if not name.startswith("RUNNER_")}
    done = subprocess.run(
        [sys.executable, "scripts/tool_doc.py", "check"],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    page = (REPO / "docs" / "tool.md").read_text()
    size = re.search(r"description \(([\d,]+) characters", page)
    assert size is not None
    assert int(size[1].replace(",", "")) < 1200
    shown = page.split("```text\n", 1)[1].split("```", 1)[0]
    assert "numpy, pandas, scipy" in shown
    assert "sklearn" in shown
    for noise in ("cycler", "pyparsing", "tzdata", "threadpoolctl"):
        assert noise not in shown, noise
    assert not re.search(r"\b\d+\.\d+\.\d+\b", shown), "no versions"


def test_the_architecture_page_s_modules_table_lists_every_module_and_no_other() -> None:
    # Issue 47: five modules were missing from the map (inrun/cgroups.py, processes/cgroups.py, ...).
    text = (REPO / "docs" / "architecture.md").read_text()
    table = text.split("## Modules", 1)[1].split("```", 2)[1]
    listed = set(re.findall(r"^(runner/\S+\.py)\s", table, re.MULTILINE))
    modules = {str(path.relative_to(REPO)) for path in (REPO / "runner").rglob("*.py")}
    assert (sorted(modules - listed), sorted(listed - modules)) == ([], [])


def test_the_tool_page_s_invalid_arguments_examples_are_what_the_server_says_of_them() -> None:
    # Found by a new user: the page said run_python takes 'code', 'timeout', 'stdin' and 'files', two
    # arguments after it took 'packages' and 'session' too.
    from runner.config import Config
    from runner.errors import ArgumentError
    from runner.protocol.arguments import ArgumentParser

    page = (REPO / "docs" / "tool.md").read_text().split("### `invalid_arguments`", 1)[1].split("### ", 1)[0]
    examples = re.search(r"Arguments (`\{.*?\}`), then (`\{.*?\}`):", page)
    assert examples is not None
    said = re.findall(r"--- invalid_arguments: (.*) ---", page)
    assert len(said) == 2
    parser = ArgumentParser(Config.from_env({}))
    for example, message in zip(examples.groups(), said, strict=True):
        with pytest.raises(ArgumentError) as raised:
            parser.parse(json.loads(example.strip("`")))
        assert str(raised.value) == message

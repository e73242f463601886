"""The package's layout holds: the protocol and execution sides never import each other, nothing
imports in a circle, every module and class can be read in one sitting, and tests/ mirrors the package.

The rules are the sub-packages' docstrings, checked on the source (every import, lazy ones
included) and once more on what a fresh interpreter really loads.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "runner"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 250
SDK = ("mcp", "mcp_types", "pydantic", "jsonschema", "starlette", "uvicorn", "httpx")
SIDES = (
    "runner.protocol",
    "runner.transports",
    "runner.execution",
    "runner.processes",
    "runner.tools",
    "runner.egress",
)
SHARED = (
    "runner.config",
    "runner.errors",
    "runner.eventloop",
    "runner.logs",
    "runner.fdio",
    "runner.jsonvalues",
    "runner.outcome",
    "runner.rates",
)
# The code that runs inside a run's interpreter: the standard library and its own modules only, and
# imported by the server side (the execution side and the process handles) for its wire and tables.
IN_RUN = "runner.inrun"
# Composition roots: the only modules that may put the two sides together. No side and no shared
# module imports one (the package's own `__version__` aside), or it would reach the other side through it.
ROOTS = ("runner", "runner.__main__", "runner.api", "runner.serving")


def is_root(name: str) -> bool:
    return name in ROOTS[:-1] or within(name, ROOTS[-1])


VERSION = "runner.__version__"
SERVER = (*SIDES, *SHARED)
FORBIDDEN = {
    "runner.protocol": ("runner.execution", "runner.processes", "runner.transports", IN_RUN),
    "runner.transports": ("runner.protocol", "runner.execution", "runner.processes", IN_RUN),
    "runner.execution": ("runner.protocol", "runner.transports", *SDK),
    "runner.processes": ("runner.protocol", "runner.transports", "runner.execution", *SDK),
    "runner.tools": ("runner.protocol", "runner.transports", "runner.execution", "runner.processes", IN_RUN),
    "runner.egress": (
        "runner.protocol",
        "runner.transports",
        "runner.execution",
        "runner.processes",
        "runner.tools",
        IN_RUN,
        *SDK,
    ),
    IN_RUN: (*SERVER, *SDK),
    **{shared: (*SIDES, IN_RUN, *SDK) for shared in SHARED},
}


@dataclass(frozen=True)
class Import:
    target: str
    line: int
    type_checking: bool  # under `if TYPE_CHECKING:`: never executed


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def imports_of(name: str) -> list[Import]:
    """Every import in the module, at any depth, relative ones resolved; `from runner.x import y` names
    runner.x.y when that is a module, and `from runner import __version__` names runner.__version__."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, type_checking: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_checking)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno, type_checking) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                target = submodule if submodule in MODULES or submodule == VERSION else base
                found.append(Import(target, node.lineno, type_checking))
        for child in ast.iter_child_nodes(node):
            visit(child, type_checking)

    visit(tree, False)
    return found


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def rule_for(name: str) -> str | None:
    return next((prefix for prefix in FORBIDDEN if within(name, prefix)), None)


def test_the_sides_and_the_shared_modules_import_only_what_their_docstrings_allow() -> None:
    breaches = []
    for name in MODULES:
        rule = rule_for(name)
        if rule is None:
            continue
        for imported in imports_of(name):
            if any(within(imported.target, forbidden) for forbidden in FORBIDDEN[rule]) or is_root(imported.target):
                breaches.append(f"{name}:{imported.line} imports {imported.target} ({rule} must not)")
    assert breaches == []


def test_every_module_belongs_to_a_side_is_shared_or_is_a_composition_root() -> None:
    # A new top-level module must be placed on purpose, and its rule written down here.
    unplaced = [name for name in MODULES if rule_for(name) is None and not is_root(name)]
    assert unplaced == []


def test_each_sub_package_says_what_it_owns_and_what_it_must_not_import() -> None:
    for side in (*SIDES, IN_RUN):
        docstring = ast.get_docstring(ast.parse(MODULES[side].read_text())) or ""
        assert "Must not import" in docstring, side
        for forbidden in FORBIDDEN[side]:
            if forbidden.startswith("runner."):
                assert f"`{forbidden}`" in docstring, f"{side}'s docstring does not name {forbidden}"


def test_the_in_run_code_imports_the_standard_library_and_its_own_modules_alone() -> None:
    own = {name.rpartition(".")[2] for name in MODULES if within(name, IN_RUN) and name != IN_RUN}
    for name in MODULES:
        if not within(name, IN_RUN):
            continue
        for imported in imports_of(name):
            top = imported.target.split(".")[0]
            if imported.type_checking:
                continue  # for mypy only: `TYPE_CHECKING = False` in these files
            # `from runner.inrun import x` is the server's spelling of `import x` (see runner.inrun).
            ours = imported.target in own or (within(imported.target, IN_RUN) and imported.target != IN_RUN)
            assert top in sys.stdlib_module_names or ours, f"{name}:{imported.line} {imported.target}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path, if any (depth-first search with colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def import_graph() -> dict[str, set[str]]:
    return {
        name: {i.target for i in imports_of(name) if not i.type_checking and i.target in MODULES and i.target != name}
        for name in MODULES
    }


def test_no_module_imports_itself_in_a_circle_not_even_lazily() -> None:
    assert find_cycle(import_graph()) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    # The check above is only as good as this.
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# Rooms are sized by concept, not by the caps: a class past MAX_CLASS_LINES that is still one concept is
# named here with what that concept is, and held to ONE_CONCEPT_CEILING (an alarm, not a split rule).
ONE_CONCEPT = {"runner.execution.pool.Pool": "the pool: its parts opened, and one call's way through them"}
ONE_CONCEPT_CEILING = 400


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_can_be_read_in_one_sitting(name: str) -> None:
    source = MODULES[name].read_text()
    assert source.count("\n") <= MAX_MODULE_LINES
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            cap = ONE_CONCEPT_CEILING if f"{name}.{node.name}" in ONE_CONCEPT else MAX_CLASS_LINES
            assert length <= cap, f"class {node.name} is {length} lines"


LOADED = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by(*modules: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *modules], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


@pytest.mark.parametrize(
    ("side", "must_not_load"),
    [
        (("runner.protocol.handlers", "runner.transports.stdio"), ("runner.execution", "runner.processes")),
        (("runner.execution.pool",), ("runner.protocol", "runner.transports", *SDK)),
        (("runner.inrun.wire", "runner.inrun.seccomp"), ("runner.protocol", "runner.execution", "runner.processes")),
    ],
)
def test_importing_one_side_does_not_load_the_other(side: tuple[str, ...], must_not_load: tuple[str, ...]) -> None:
    loaded = loaded_by(*side)
    assert set(side) <= set(loaded)
    assert [name for name in loaded if any(within(name, prefix) for prefix in must_not_load)] == []


# --- The tests mirror the package -------------------------------------------------------------------

TESTS = REPO / "tests"
# A module's pure tests are at tests/unit/<sub-package>/test_<module>.py; those with real processes,
# servers and clients under tests/e2e/, the image, Kubernetes and packaging under tests/deploy/. Only
# the tests of the whole tree sit at the top of tests/.
TOP_LEVEL_TESTS = {"test_docs.py", "test_layout.py"}
# Unit test files named after no module of runner/: each with its reason. None today.
UNMIRRORED: dict[str, str] = {}


def mirrored_module(unit_test: Path) -> Path:
    """The module a unit test file is named after: tests/unit/a/test_b.py tests runner/a/b.py."""
    relative = unit_test.relative_to(TESTS / "unit")
    return PACKAGE / relative.parent / relative.name.removeprefix("test_")


def test_every_unit_test_file_is_named_after_the_module_it_tests() -> None:
    unit_tests = sorted((TESTS / "unit").rglob("test_*.py"))
    assert mirrored_module(TESTS / "unit" / "execution" / "test_classify.py") == PACKAGE / "execution" / "classify.py"
    assert len(unit_tests) > 10
    unmirrored = [
        str(path.relative_to(TESTS / "unit"))
        for path in unit_tests
        if not mirrored_module(path).is_file() and str(path.relative_to(TESTS / "unit")) not in UNMIRRORED
    ]
    assert unmirrored == [], "no module of that name at the same sub-package path under runner/"
    assert sorted(set(UNMIRRORED) - {str(path.relative_to(TESTS / "unit")) for path in unit_tests}) == []


def test_every_test_file_is_in_unit_e2e_or_deploy_and_every_test_directory_is_a_package() -> None:
    test_files = [path for path in TESTS.rglob("test_*.py") if "node_modules" not in path.parts]
    top_level = {path.name for path in test_files if path.parent == TESTS}
    assert top_level == TOP_LEVEL_TESTS
    placed = {path.relative_to(TESTS).parts[0] for path in test_files if path.parent != TESTS}
    assert placed == {"unit", "e2e", "deploy"}
    directories = {path.parent for path in test_files}
    assert sorted(str(d.relative_to(REPO)) for d in directories if not (d / "__init__.py").is_file()) == []


def _calls_config_error(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ConfigError"


def _reads_a_runner_variable(node: ast.AST) -> bool:
    """`os.environ["RUNNER_..."]`, `os.environ.get("RUNNER_...")` (or pop, setdefault), `os.getenv("RUNNER_...")`."""

    def runner_name(arg: ast.AST) -> bool:
        return isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("RUNNER_")

    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) == "os.environ" and runner_name(node.slice)
    if isinstance(node, ast.Call) and node.args and runner_name(node.args[0]):
        called = ast.unparse(node.func)
        return called == "os.getenv" or called.startswith("os.environ.")
    return False


def test_only_the_configuration_package_reads_runner_variables_or_refuses_a_configuration() -> None:
    # Issue 47: refusals decided in eight modules came after log lines, or escaped as a traceback. The
    # in-run code is apart: RUNNER_ZYGOTE_PRELOAD is the server's word to its zygote, not a setting.
    found = []
    for name, path in MODULES.items():
        if within(name, "runner.config") or within(name, IN_RUN):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if _calls_config_error(node) or _reads_a_runner_variable(node):
                found.append(f"{name}:{getattr(node, 'lineno', 0)} {ast.unparse(node)[:60]}")
    assert found == []


def test_the_entry_point_is_arguments_and_dispatch_within_120_lines() -> None:
    lines = len(MODULES["runner.__main__"].read_text().splitlines())
    assert lines <= 120, f"runner/__main__.py is {lines} lines"


def test_every_call_one_shot_or_a_session_s_is_driven_by_the_one_driver_the_pool_makes() -> None:
    # Issue 47: the pool and the sessions each made a RunDriver of their own.
    sites = [
        f"{name}:{node.lineno}"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "RunDriver"
    ]
    assert len(sites) == 1, sites
    assert sites[0].startswith("runner.execution.pool:"), sites


def _call_sites(attribute: str) -> list[str]:
    return [
        f"{name}:{node.lineno}"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attribute
    ]


@pytest.mark.parametrize("step", ["drive", "provide", "held"])
def test_every_call_one_shot_or_a_session_s_takes_its_slot_packages_and_driver_at_one_place(step: str) -> None:
    # Issue 47: the pool and the sessions each did admission, package provision and driving, so a
    # bound or a message held for one kind of call and not the other (a session's wait no queue counted).
    sites = _call_sites(step)
    owner = "runner.execution.sessions" if step == "held" else "runner.execution.calls"
    assert sites
    assert all(site.startswith(("runner.execution.calls:", owner + ":")) for site in sites), sites
    if step != "held":
        assert len(sites) == 1, sites


CHILD_MAKERS = {
    "runner.processes.child",
    "runner.processes.spawn",
    "runner.processes.forkserver",
    "runner.processes.keeper",
}


def test_a_child_s_fields_are_written_only_by_its_own_methods_and_the_source_that_made_it() -> None:
    # Issue 47: teardown set a run's `workdir`, the sessions an anchor's `oom_noticed`, the supply its
    # `refused_limits`: a handle anyone writes has no owner to ask what it holds.
    fields = set()
    for node in ast.walk(ast.parse(MODULES["runner.processes.child"].read_text())):
        if isinstance(node, ast.ClassDef) and node.name == "Child":
            fields = {
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
    assert {"workdir", "oom_kills", "refused_limits", "reaped"} <= fields
    found = []
    for name, path in MODULES.items():
        if name in CHILD_MAKERS or name.startswith("runner.inrun."):  # inrun's are the run's own processes
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in fields and ast.unparse(target.value) != "self":
                    found.append(f"{name}:{node.lineno} {ast.unparse(target)}")
    assert found == []

"""The `packages` argument on its own (runner/protocol/packages.py): names of the wheelhouse in any
spelling are taken, the package environment's need nothing, and every other kind of entry is refused
naming it, saying what it is and listing what the wheelhouse has."""

from __future__ import annotations

import dataclasses

import pytest

from runner.config import Config
from runner.config.locks import Distribution
from runner.errors import ArgumentError
from runner.protocol.arguments import ArgumentParser
from runner.protocol.packages import check_packages
from runner.protocol.tool import tool_definition

CONFIG = dataclasses.replace(
    Config(),
    package_distributions=(Distribution("numpy", "2.4.6"), Distribution("pandas", "3.0.1")),
    wheelhouse_distributions=tuple(
        Distribution(name, version)
        for name, version in (
            ("beautifulsoup4", "4.15.0"),
            ("pyyaml", "6.0.4"),
            ("scikit-learn", "1.9.1"),
            ("sympy", "1.14.0"),
        )
    ),
    wheelhouse_modules=("bs4", "sklearn", "sympy", "yaml"),
)
AVAILABLE = "the wheelhouse has beautifulsoup4 4.15.0, pyyaml 6.0.4, scikit-learn 1.9.1, sympy 1.14.0"


def test_names_in_any_spelling_are_the_wheelhouse_s_and_the_package_environment_s_need_nothing() -> None:
    entries = ["sympy", "Scikit_Learn", "PyYAML", "numpy", "sympy", " beautifulsoup4 "]
    got = check_packages(entries, CONFIG.packages_section)
    assert got == ("beautifulsoup4", "pyyaml", "scikit-learn", "sympy")


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        ("networkx", "not in the wheelhouse"),
        ("sympy>=1.0", "a version specifier"),
        ("sympy==1.14.0", "a version specifier"),
        ("sympy 1.14", "a version specifier"),
        ("sympy[dev]", "a name with extras"),
        ("sympy; python_version > '3'", "an environment marker"),
        ("https://evil.example/sympy-1.0-py3-none-any.whl", "a URL or a path"),
        ("git+https://github.com/sympy/sympy", "a URL or a path"),
        ("/tmp/sympy", "a URL or a path"),
        ("./sympy", "a URL or a path"),
        ("sympy-1.14.0-py3-none-any.whl", "a file name"),
        ("--index-url=https://evil.example", "a pip option"),
        ("-e", "a pip option"),
        ("sympy @ file:///x", "a URL or a path"),
        ("", "empty"),
        ("sym$py", "not a distribution name"),
    ],
)
def test_each_kind_of_entry_that_is_not_a_name_of_the_wheelhouse_is_refused_naming_it(entry: str, kind: str) -> None:
    with pytest.raises(ArgumentError) as refused:
        check_packages(["sympy", entry], CONFIG.packages_section)
    message = str(refused.value)
    assert message.startswith(f"invalid argument 'packages[1]' ({entry!r}): {kind}")
    assert message.endswith(AVAILABLE)


def test_without_a_wheelhouse_any_entry_is_refused_saying_so() -> None:
    with pytest.raises(ArgumentError, match=r"this server has no wheelhouse \(RUNNER_WHEELHOUSE\)"):
        check_packages(["sympy"], Config().packages_section)
    assert check_packages([], Config().packages_section) == ()


def test_the_parser_takes_packages_and_refuses_what_the_schema_does_not_allow() -> None:
    parser = ArgumentParser(CONFIG)
    assert parser.parse({"code": "pass", "packages": ["sympy"]}).packages == ("sympy",)
    assert parser.parse({"code": "pass"}).packages == ()
    with pytest.raises(ArgumentError, match=r"invalid argument 'packages': .* is not of type 'array'"):
        parser.parse({"code": "pass", "packages": "sympy"})
    with pytest.raises(ArgumentError, match=r"invalid argument 'packages\[0\]': 3 is not of type 'string'"):
        parser.parse({"code": "pass", "packages": [3]})


def test_the_tool_description_and_the_schema_list_the_wheelhouse_from_its_lock() -> None:
    tool = tool_definition(CONFIG)
    assert tool.description is not None
    assert "installed on first import" in tool.description
    assert "wheelhouse: bs4, sklearn, sympy, yaml." in tool.description
    described = tool.input_schema["properties"]["packages"]["description"]
    assert "beautifulsoup4, pyyaml, scikit-learn, sympy" in described
    bare = tool_definition(Config())
    assert bare.description is not None
    assert "installed on first import" not in bare.description


def test_a_long_entry_is_said_back_cut_as_every_answer_cuts_a_clients_value() -> None:
    entry = "https://evil.example/" + "x" * (1 << 20)
    with pytest.raises(ArgumentError) as refused:
        check_packages([entry], CONFIG.packages_section)
    message = str(refused.value)
    assert message.startswith(f"invalid argument 'packages[0]' ('{entry[:200]}... (cut: 1,048,597 characters)'): ")
    assert len(message) < 2_000

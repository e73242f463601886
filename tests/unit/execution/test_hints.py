"""The note for a module a run could not import (runner/execution/hints.py): read from the end of
stderr only, and saying what the server has. Pure, no process."""

from __future__ import annotations

import pytest

from runner.execution.hints import (
    SHOWN,
    Hints,
    missing_module,
    missing_module_note,
    network_note,
    no_network_note,
    notebook_note,
)
from runner.outcome import RunResult, Status, StreamText

TRACEBACK = 'Traceback (most recent call last):\n  File "<run_python>", line 1, in <module>\n'
PARQUET = (
    TRACEBACK + "ImportError: Unable to find a usable engine; tried using: 'pyarrow', 'fastparquet'.\n"
    "A suitable version of pyarrow or fastparquet is required for parquet support.\n"
    "Trying to import the above resulted in these errors:\n"
    " - `Import pyarrow` failed. pyarrow is required for parquet support. Use pip, conda, or your preferred "
    "package management tool to install the pyarrow package.\n"
    " - `Import fastparquet` failed. fastparquet is required for parquet support. Use pip, conda, or your "
    "preferred package management tool to install the fastparquet package.\n"
)


@pytest.mark.parametrize(
    ("stderr", "module"),
    [
        (TRACEBACK + "ModuleNotFoundError: No module named 'requests'\n", "requests"),
        ("ModuleNotFoundError: No module named 'google.cloud.storage'", "google"),
        (TRACEBACK + "ModuleNotFoundError: No module named 'requests'\nthen more\n", None),
        ("ImportError: cannot import name 'x' from 'y'\n", None),
        ("xModuleNotFoundError: No module named 'requests'\n", None),
        ("ModuleNotFoundError: No module named 'a b'\n", None),
        ("ModuleNotFoundError: No module named '" + "a" * 5000 + "'\n", None),
        ("", None),
        # pandas, for an optional dependency (found by a first hour: no note where `to_excel` had one)
        (TRACEBACK + "ImportError: `Import tabulate` failed.  Use pip, conda, or your preferred package\n", "tabulate"),
        (TRACEBACK + "ImportError: Missing optional dependency 'tabulate'.  Use pip or conda.", "tabulate"),
        (TRACEBACK + "ImportError: `Import tabulate` failed.\nthen more\n", None),
        (PARQUET, "pyarrow"),
        (
            PARQUET.replace(" - `Import pyarrow` failed.", " - libssl.so.3: failed to map segment from shared object."),
            None,
        ),
        (PARQUET.replace("ImportError: Unable", "RuntimeError: Unable"), None),
    ],
)
def test_the_module_is_read_from_the_last_line_of_stderr_alone(stderr: str, module: str | None) -> None:
    assert missing_module(stderr) == module


def test_the_note_says_what_the_server_has_and_lists_a_bounded_offer() -> None:
    assert missing_module_note("numpy", lambda name: name == "numpy", {}, ()) == ""
    computed = missing_module_note("sklearn", lambda name: False, {"sklearn": "scikit-learn"}, ("sklearn",))
    assert "in the wheelhouse (scikit-learn)" in computed
    assert "name 'scikit-learn' in 'packages'" in computed
    offered = tuple(f"m{n:02d}" for n in range(SHOWN + 5))
    nowhere = missing_module_note("requests", lambda name: False, {}, offered)
    assert nowhere.startswith(
        "no module 'requests' here: it is neither in the package environment nor in the wheelhouse"
    )
    assert nowhere.endswith(f"m{SHOWN - 1:02d} and 5 more")
    assert "this server has no wheelhouse" in missing_module_note("requests", lambda name: False, {}, ())


def test_only_an_error_s_result_is_noted_and_a_standard_module_never_is() -> None:
    stderr = StreamText(TRACEBACK + "ModuleNotFoundError: No module named 'requests'\n", 0, 0)
    notes = Hints("", {}, ("sympy",))
    noted = notes.noted(RunResult("0" * 8, Status.ERROR, exit_code=1, stderr=stderr))
    assert noted.note.endswith("the wheelhouse offers sympy")
    timed_out = RunResult("0" * 8, Status.TIMEOUT, stderr=stderr)
    assert notes.noted(timed_out) is timed_out
    inner = StreamText("ModuleNotFoundError: No module named 'json.nope'\n", 0, 0)
    assert notes.noted(RunResult("0" * 8, Status.ERROR, exit_code=1, stderr=inner)).note == ""


SYNTAX = '  File "<run_python>", line 2\n'


@pytest.mark.parametrize(
    ("stderr", "said"),
    [
        (SYNTAX + "    !ls -la\n    ^\nSyntaxError: invalid syntax\n", "neither a shell command nor a magic"),
        (SYNTAX + "    %pip install requests\n    ^\nSyntaxError: invalid syntax\n", "for a package just import it"),
        (SYNTAX + "SyntaxError: 'await' outside function\n", "asyncio.run(main())"),
        (TRACEBACK + "NameError: name 'display' is not defined\n", "display() is not defined"),
        (TRACEBACK + "NameError: name 'display' is not defined. Did you mean: 'displayed'?\n", "end the code with"),
        (SYNTAX + "    x = !ls\n    ^\nSyntaxError: invalid syntax\n", ""),
        (SYNTAX + "    !ls\n    ^\nSyntaxError: invalid syntax\nthen more\n", ""),
        (TRACEBACK + "NameError: name 'displays' is not defined\n", ""),
        (SYNTAX + "    !" + "x" * 5000 + "\n    ^\nSyntaxError: invalid syntax\n", ""),
        ("", ""),
    ],
)
def test_ipython_s_syntax_at_the_end_of_stderr_gets_a_note_saying_what_plain_python_does_instead(
    stderr: str, said: str
) -> None:
    # Found in a first hour: !ls, %pip, display(df) and a top-level await, a notebook's habits, ended on a
    # bare SyntaxError or NameError.
    note = notebook_note(stderr)
    assert (note.startswith("this is plain Python, not IPython: ") and said in note) if said else note == ""


def test_only_an_error_s_result_gets_a_notebook_s_note() -> None:
    notes = Hints("", {}, ())
    stderr = StreamText(TRACEBACK + "NameError: name 'display' is not defined\n", 0, 0)
    assert "display()" in notes.noted(RunResult("0" * 8, Status.ERROR, exit_code=1, stderr=stderr)).note
    killed = RunResult("0" * 8, Status.TIMEOUT, stderr=stderr)
    assert notes.noted(killed) is killed


@pytest.mark.parametrize(
    "last",
    [
        "socket.gaierror: [Errno -3] Temporary failure in name resolution\n",
        "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>\n",
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='x.org', port=443): Max retries exceeded "
        "(Caused by NameResolutionError(\"Failed to resolve 'x.org' ([Errno -3] Temporary failure in name "
        'resolution)"))\n',
        "OSError: [Errno 101] Network is unreachable\n",
        "socket.gaierror: [Errno -2] Name or service not known\n",
        "ConnectionRefusedError: [Errno 111] Connection refused\n",
    ],
)
def test_a_run_that_ended_on_a_network_it_has_not_got_is_told_what_it_has(last: str) -> None:
    # Found in a first hour: a URL ended on a bare "Temporary failure in name resolution", and a model
    # tries it again, or another URL.
    none = no_network_note(())
    assert network_note(TRACEBACK + last, none) == none
    assert "RUNNER_EGRESS_ALLOW is unset" in none
    listed = no_network_note(("pypi.org", "*.githubusercontent.com"))
    assert network_note(TRACEBACK + last, listed).endswith("to these hosts alone: pypi.org, *.githubusercontent.com")
    assert network_note(TRACEBACK + last, "") == "", "runs with the host's network are told nothing"
    assert network_note(TRACEBACK + last + "and then more\n", none) == "", "only the error the run ended on"


def test_the_hosts_a_network_note_names_are_bounded() -> None:
    many = no_network_note(tuple(f"h{n}.org" for n in range(SHOWN + 3)))
    assert many.endswith(f"h{SHOWN - 1}.org and 3 more")


@pytest.mark.parametrize(
    ("stderr", "said"),
    [
        (TRACEBACK + "RuntimeError: can't start new thread\n", "its 32 processes and threads (RUNNER_MAX_PROCESSES)"),
        (
            TRACEBACK + '  File "<run_python>", line 3, in <module>\n    pid = os.fork()\n          ^^^^^^^^^\n'
            "BlockingIOError: [Errno 11] Resource temporarily unavailable\n",
            "its 32 processes and threads",
        ),
        (
            TRACEBACK + '  File "/usr/lib/python3.11/subprocess.py", line 1903, in _execute_child\n'
            "    self.pid = _fork_exec(\n               ^^^^^^^^^^^\n"
            "BlockingIOError: [Errno 11] Resource temporarily unavailable\n",
            "its 32 processes and threads",
        ),
        (TRACEBACK + "    data = s.recv(10)\nBlockingIOError: [Errno 11] Resource temporarily unavailable\n", ""),
        (TRACEBACK + "OSError: [Errno 28] No space left on device\n", "filled its /tmp (64 MiB for all of them"),
        (TRACEBACK + "OSError: [Errno 27] File too large\n", "a file passed 16 MiB"),
        (TRACEBACK + "OSError: [Errno 28] No space left on device\nthen more\n", ""),
        ("RuntimeError: can't start new thread", "its 32 processes and threads"),
        (
            TRACEBACK + "ImportError: libarrow.so.2600: failed to map segment from shared object\n",
            "a library did not fit in the run's 256 MiB of address space (RUNNER_MAX_MEMORY_MB",
        ),
        (TRACEBACK + "OSError: libx.so: cannot map zero-fill pages\n", "256 MiB of address space"),
        (TRACEBACK + "ImportError: libarrow.so.2600: failed to map segment from shared object\n" + "more\n" * 5, ""),
        # pandas' engines, each its own line, the first one out of room (found by a second look: said "not
        # installed", where it was), and pyarrow's allocator.
        (
            PARQUET.replace(
                " - `Import pyarrow` failed. pyarrow is",
                " - libssl.so.3: failed to map segment from shared object. pyarrow is",
            ),
            "a library did not fit in the run's 256 MiB of address space",
        ),
        (TRACEBACK + "pyarrow.lib.ArrowMemoryError: malloc of size 8388608 failed\n", "256 MiB of address space"),
    ],
)
def test_a_limit_a_run_met_that_its_error_does_not_name_gets_a_note_naming_it(stderr: str, said: str) -> None:
    # Found by a new user: 40 threads ended on "can't start new thread", a fork loop on EAGAIN, a full
    # /tmp on ENOSPC, none naming the limit or its variable.
    from runner.execution.hints import LimitNotes

    limits = LimitNotes(processes=32, tmp_mb=64, file_mb=16, memory_mb=256)
    note = limits.note(stderr)
    if said:
        assert said in note, note
    else:
        assert note == ""
    result = RunResult("0" * 8, Status.ERROR, exit_code=1, stderr=StreamText(stderr, 0, 0))
    assert Hints(limits=limits).noted(result).note == note
    assert LimitNotes().note(stderr) == "", "a limit not said where it is not the run's own (a plain run's /tmp)"


def test_matplotlib_s_magic_is_told_to_go_figures_come_back_by_themselves() -> None:
    stderr = SYNTAX + "    %matplotlib inline\n    ^\nSyntaxError: invalid syntax\n"
    assert notebook_note(stderr).endswith("drop the line, and the figures the code makes come back as images")


def test_a_server_with_the_standard_library_only_says_so_not_that_a_package_environment_lacks_it() -> None:
    # Found by a first hour: with RUNNER_PACKAGES="" and RUNNER_WHEELHOUSE="", `import numpy` was told it is
    # "neither in the package environment nor in the wheelhouse", of a server that has neither.
    stderr = StreamText(TRACEBACK + "ModuleNotFoundError: No module named 'numpy'\n", 0, 0)
    noted = Hints().noted(RunResult("0" * 8, Status.ERROR, exit_code=1, stderr=stderr))
    assert noted.note == (
        "no module 'numpy' here: this server's runs have the standard library only (RUNNER_PACKAGES and "
        "RUNNER_WHEELHOUSE are empty); nothing can be installed"
    )

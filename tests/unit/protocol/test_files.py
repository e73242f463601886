"""The `files` argument checked: every bad entry refused naming it, good ones decoded. No processes."""

from __future__ import annotations

import pytest

from runner.errors import ArgumentError
from runner.protocol.files import check_files


def entry(path: str, content: str = "x", encoding: str = "utf-8") -> dict[str, str]:
    return {"path": path, "content": content, "encoding": encoding}


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ([entry("../escape")], "files[0]' ('../escape'): every part of the path must be a name"),
        ([entry("a/../../b")], "every part of the path must be a name"),
        ([entry("/etc/passwd")], "an absolute path"),
        ([entry("a//b")], "every part of the path must be a name"),
        ([entry("./a")], "every part of the path must be a name"),
        ([entry("nul\x00byte")], "NUL"),
        ([entry("x" * 256)], "256 bytes long, more than 255"),
        ([entry("a"), entry("a")], "files[1]' ('a'): the same path is given twice"),
        ([entry("a/b"), entry("a")], "a file cannot also be a directory of another file"),
        ([entry("a"), entry("a/b")], "a file cannot also be a directory of another file"),
        ([entry("bin", "not base64!", "base64")], "not valid base64"),
        ([entry("big", "x" * 600), entry("more", "x" * 500)], "files[1]' ('more'): the files come to more than"),
        ([entry("one", "x" * 300)], "more than a run may write to one file (256)"),
        ([entry("lone", "\ud800")], "lone surrogate"),
    ],
)
def test_a_bad_file_entry_is_refused_naming_it(entries: list[dict[str, str]], problem: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        check_files(entries, max_bytes=1000, max_file_bytes=256 if problem.startswith("more than a run") else 1000)
    assert problem in str(caught.value)


def test_good_file_entries_are_decoded() -> None:
    files = check_files([entry("a/b.txt", "h\u00e9"), entry("c.bin", "AAE=", "base64")], 100, 100)
    assert [(f.path, f.data) for f in files] == [("a/b.txt", "h\u00e9".encode()), ("c.bin", b"\x00\x01")]


def test_a_long_path_is_said_back_cut_as_every_answer_cuts_a_clients_value() -> None:
    # The schema bounds a path at 1,024 characters; an answer says at most 200 of any value it says back.
    path = "d/" * 400 + "../x"
    with pytest.raises(ArgumentError) as caught:
        check_files([entry(path)], max_bytes=1000, max_file_bytes=1000)
    assert f"files[0]' ('{path[:200]}... (cut: 804 characters)'): every part" in str(caught.value)


def test_a_server_that_takes_no_files_says_so_not_that_they_pass_a_limit_of_0_bytes() -> None:
    # Found by a first hour: RUNNER_MAX_INPUT_MB=0 said "more than the limit of 0 bytes together".
    said = r"this server takes no files \(RUNNER_MAX_INPUT_MB=0\): call without 'files'"
    with pytest.raises(ArgumentError, match=said):
        check_files([entry("a.txt")], max_bytes=0, max_file_bytes=1000)
    assert check_files([entry("empty.txt", "")], max_bytes=0, max_file_bytes=1000)[0].data == b"", "empty ones fit"

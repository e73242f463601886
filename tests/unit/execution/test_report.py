"""The pure parts of what a run returns: the report read back and checked, files typed by their bytes and
names, image sizes read from their headers. No processes."""

from __future__ import annotations

import dataclasses
import json

import pytest

from runner.execution import report as report_module
from runner.execution.report import classify_file, parse_report
from runner.inrun.wire import Budgets, encode_end

BUDGETS = Budgets(images=2, image_bytes=1000, call_bytes=5000, file_bytes=3000, result_chars=100)
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x02\x80\x00\x00\x01\xe0" + bytes(20)


def report(head: dict[str, object], blobs: bytes = b"") -> bytes:
    encoded = json.dumps(head).encode()
    return b"report %d %d\n" % (len(encoded), len(blobs)) + encoded + blobs


def test_a_good_report_gives_the_result_images_and_typed_files() -> None:
    head = {
        "result": "42",
        "result_chars": 2,
        "images": [{"name": "figure-1.png", "bytes": len(PNG), "width": 1, "height": 1, "note": ""}],
        "files": [{"path": "out.csv", "bytes": 4}, {"path": "x.bin", "bytes": 2}],
        "omitted": [{"name": "link", "bytes": 0, "reason": "a symbolic link (never followed)"}],
    }
    returned = parse_report(report(head, PNG + b"a,b\n" + b"\x00\x01"), BUDGETS)
    assert returned.result == "42"
    image, csv, blob = returned.attachments
    assert (image.kind, image.width, image.height) == ("image", 640, 480)  # read from the PNG, not the report
    assert (csv.kind, csv.mime_type, blob.kind, blob.mime_type) == (
        "text",
        "text/csv",
        "blob",
        "application/octet-stream",
    )
    assert [o.name for o in returned.omitted] == ["link"]


KEEPING = BUDGETS.replace(kept_bytes=4000)
BOMB = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x75\x30\x00\x00\x75\x30" + bytes(20)  # 30,000 px square


def test_what_a_run_links_comes_after_its_inline_blobs_typed_by_its_bytes_with_the_budget_it_is_over() -> None:
    head = {
        "files": [{"path": "small.txt", "bytes": 2}],
        "linked": [
            {"name": "big.csv", "bytes": 6, "reason": "over the budget for files"},
            {"name": "figure-1-full.png", "bytes": len(PNG), "reason": "full size"},
        ],
    }
    returned = parse_report(report(head, b"hi" + b"a,b\n1\n" + PNG), KEEPING)
    assert [a.name for a in returned.attachments] == ["small.txt"]
    assert [(a.name, a.mime_type, a.data, a.note) for a in returned.linked] == [
        ("big.csv", "text/csv", b"a,b\n1\n", "over the budget for files"),
        ("figure-1-full.png", "image/png", PNG, "full size"),
    ]


def test_a_forged_report_cannot_link_an_image_too_large_to_decode_nor_more_than_the_budget_to_keep() -> None:
    bomb = parse_report(report({"linked": [{"name": "b.png", "bytes": len(BOMB), "reason": "x"}]}, BOMB), KEEPING)
    assert bomb.linked == ()
    assert [(o.name, o.reason) for o in bomb.omitted] == [
        ("b.png", "30000x30000 px: over the 4,000,000-pixel cap for images")
    ]
    over = parse_report(report({"linked": [{"name": "a", "bytes": 4001, "reason": "x"}]}, bytes(4001)), KEEPING)
    assert over.linked == ()
    assert "more bytes linked than the call's budget to keep" in over.omitted[0].reason
    nothing_kept = parse_report(report({"linked": [{"name": "a", "bytes": 10, "reason": "x"}]}, bytes(10)), BUDGETS)
    assert nothing_kept.linked == ()
    assert "malformed" in nothing_kept.omitted[0].reason


@pytest.mark.parametrize(
    ("head", "blobs", "problem"),
    [
        ({"images": [{"name": "a.png", "bytes": 3}]}, b"abc", "a figure is not a PNG"),
        ({"files": [{"path": "a", "bytes": 5}]}, b"abc", "sizes do not add up"),
        ({"files": [{"path": "a", "bytes": -1}]}, b"", "a size is not a count"),
        ({"files": [{"path": "", "bytes": 0}]}, b"", "a bad name"),
        ({"files": "all of them"}, b"", "files is not a list of objects"),
        ({"files": [{"path": "big", "bytes": 6000}]}, bytes(6000), "more bytes than the call's budget"),
        ({"result": ["not", "text"]}, b"", "result is not text"),
    ],
)
def test_a_report_that_does_not_hold_together_is_dropped_whole_with_a_note(
    head: dict[str, object], blobs: bytes, problem: str
) -> None:
    returned = parse_report(report(head, blobs), BUDGETS)
    assert returned.attachments == ()
    assert returned.result is None
    [note] = returned.omitted
    assert note.name == "(the run's report)"
    assert problem in note.reason


def test_names_from_a_report_are_shown_with_control_characters_escaped() -> None:
    returned = parse_report(report({"files": [{"path": "a\x1b[2Jb", "bytes": 1}]}, b"x"), BUDGETS)
    assert returned.attachments[0].name == "a\\x1b[2Jb"
    # Found by a review: a name that reverses as it is shown ("invoice_exe.jpg" in the view).
    returned = parse_report(report({"files": [{"path": "invoice_\u202egpj.exe", "bytes": 1}]}, b"x"), BUDGETS)
    assert returned.attachments[0].name == "invoice_\\u202egpj.exe"
    # By a second look: other invisible characters went through (a line separator, NEL, zero width, tags).
    hidden = "a\u2028b\x85c\u200bd\U000e0041e\u00e9"
    returned = parse_report(report({"files": [{"path": hidden, "bytes": 1}]}, b"x"), BUDGETS)
    assert returned.attachments[0].name == "a\\u2028b\\x85c\\u200bd\\U000e0041e\u00e9"
    # Joiners and the soft hyphen are how some words are written: shown as they are.
    written = "\U0001f468\u200d\U0001f469 \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 soft\u00adhyphen"
    returned = parse_report(report({"files": [{"path": written, "bytes": 1}]}, b"x"), BUDGETS)
    assert returned.attachments[0].name == written


def test_a_file_is_an_image_by_its_bytes_text_if_utf8_and_bytes_otherwise() -> None:
    assert classify_file("looks.txt", PNG).kind == "image"
    assert classify_file("a.jpg", b"\xff\xd8\xff\xe0rest").mime_type == "image/jpeg"
    assert classify_file("fake.png", b"not an image").kind == "text"
    assert classify_file("notes.md", "h\u00e9".encode()).mime_type == "text/markdown"
    assert classify_file("data.parquet", b"PAR1\x00\x01").mime_type == "application/vnd.apache.parquet"


def test_a_report_of_more_than_the_budgets_keeps_what_fits_and_lists_the_rest() -> None:
    head = {
        "files": [
            {"path": "fake.png", "bytes": 2900},  # text, whatever its name says
            {"path": "more.txt", "bytes": 200},
            {"path": "a.png", "bytes": len(PNG)},
            {"path": "b.png", "bytes": len(PNG)},
            {"path": "c.png", "bytes": len(PNG)},
        ]
    }
    returned = parse_report(report(head, b"x" * 2900 + b"y" * 200 + PNG * 3), BUDGETS)
    assert [(a.name, a.kind) for a in returned.attachments] == [
        ("fake.png", "text"),
        ("a.png", "image"),
        ("b.png", "image"),
    ]
    assert [(o.name, o.reason) for o in returned.omitted] == [
        ("more.txt", "over what is left of the call's 3,000-byte budget for files"),
        ("c.png", "more than 2 images in one call"),
    ]


def test_image_sizes_are_read_from_png_gif_and_jpeg_headers() -> None:
    gif = b"GIF89a" + (300).to_bytes(2, "little") + (200).to_bytes(2, "little") + bytes(10)
    jpeg = (
        b"\xff\xd8"
        + b"\xff\xe0\x00\x04ab"
        + b"\xff\xc0\x00\x11\x08"
        + (120).to_bytes(2, "big")
        + (160).to_bytes(2, "big")
    )
    assert (classify_file("p.png", PNG).width, classify_file("p.png", PNG).height) == (640, 480)
    assert (classify_file("g.gif", gif).width, classify_file("g.gif", gif).height) == (300, 200)
    assert (classify_file("j.jpg", jpeg + bytes(8)).width, classify_file("j.jpg", jpeg + bytes(8)).height) == (160, 120)


def png_of(width: int, height: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes(20)


def test_webp_sizes_are_read_from_each_kind_of_header_and_gif_from_its_largest_frame() -> None:
    def riff(chunk: bytes, body: bytes) -> bytes:
        return (
            b"RIFF" + (len(body) + 12).to_bytes(4, "little") + b"WEBP" + chunk + len(body).to_bytes(4, "little") + body
        )

    extended = riff(b"VP8X", bytes(4) + (799).to_bytes(3, "little") + (599).to_bytes(3, "little"))
    lossy = riff(b"VP8 ", bytes(3) + b"\x9d\x01\x2a" + (320).to_bytes(2, "little") + (240).to_bytes(2, "little"))
    lossless = riff(b"VP8L", b"\x2f" + ((100 - 1) | (50 - 1) << 14).to_bytes(4, "little"))
    frames = (
        b"GIF89a" + (10).to_bytes(2, "little") * 2 + b"\x80\x00\x00" + bytes(6)  # a 2-colour global table
        + b"\x21\xf9\x04" + bytes(4) + b"\x00"  # an extension
        + b"\x2c" + (5).to_bytes(2, "little") * 2 + (300).to_bytes(2, "little") + (20).to_bytes(2, "little")
        + b"\x00\x02\x02\x44\x01\x00;"
    )  # fmt: skip
    jpeg = b"\xff\xd8\xff\xff\xe0\x00\x04ab\xff\xc2\x00\x11\x08" + (90).to_bytes(2, "big") + (70).to_bytes(2, "big")
    for data, size in ((extended, (800, 600)), (lossy, (320, 240)), (lossless, (100, 50)), (frames, (305, 25))):
        attachment = classify_file("image", data)
        assert (attachment.kind, attachment.width, attachment.height) == ("image", *size), data
    filled = classify_file("fill.jpg", jpeg + bytes(8))  # fill bytes before a marker, a progressive frame
    assert (filled.width, filled.height) == (70, 90)


def test_a_gif_frame_after_a_stray_byte_and_a_jpeg_s_second_frame_header_still_count() -> None:
    # Decoders step over a byte that starts no block (Pillow does) and may take any frame header: a
    # 1 x 1 screen with a 9,000 x 9,000 frame behind a stray byte decoded to a gigabyte.
    frame = b"\x2c" + bytes(4) + (9000).to_bytes(2, "little") * 2 + b"\x00\x02\x02\x44\x01\x00"
    small = b"\x2c" + bytes(4) + (1).to_bytes(2, "little") * 2 + b"\x00\x02\x02\x44\x01\x00"
    gif = b"GIF89a" + (1).to_bytes(2, "little") * 2 + bytes(3) + small + b"\x00" + frame + b";"

    def start_of_frame(width: int, height: int) -> bytes:
        return b"\xff\xc0\x00\x11\x08" + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes(10)

    jpeg = b"\xff\xd8" + start_of_frame(1, 1) + start_of_frame(9000, 9000) + b"\xff\xda\x00\x02" + bytes(16)
    for name, data in (("a.gif", gif), ("a.jpg", jpeg)):
        attachment = classify_file(name, data)
        assert (attachment.width, attachment.height) == (9000, 9000), name


def test_an_image_over_the_pixel_cap_or_without_a_size_never_comes_back_even_from_a_forged_report() -> None:
    # The run leaves such an image out itself; a report the code wrote could list it all the same.
    big, fine, sizeless = png_of(30000, 30000), png_of(2000, 2000), b"GIF89a"
    budgets = BUDGETS.replace(images=4, image_bytes=10_000, call_bytes=10_000)
    head = {
        "images": [{"name": "figure-1.png", "bytes": len(big)}],
        "files": [{"path": p, "bytes": len(d)} for p, d in (("b.png", big), ("f.png", fine), ("g.gif", sizeless))],
    }
    returned = parse_report(report(head, big + big + fine + sizeless), budgets)
    assert [(a.name, a.width) for a in returned.attachments] == [("f.png", 2000)]
    cap = "30000x30000 px: over the 4,000,000-pixel cap for images"
    assert [(o.name, o.reason) for o in returned.omitted] == [
        ("figure-1.png", cap),
        ("b.png", cap),
        ("g.gif", "an image whose headers give no size"),
    ]


def test_names_and_results_that_are_not_unicode_come_back_escaped_and_serialisable() -> None:
    from runner.outcome import RunResult, Status
    from runner.protocol.results import to_call_result

    head = {
        "result": "caf\udce9",
        "files": [{"path": "\udce9t\udce9.txt", "bytes": 1}],
        "omitted": [{"name": "link-\udcff", "bytes": 0, "reason": "a symbolic link (never followed)"}],
    }
    returned = parse_report(report(head, b"x"), BUDGETS)
    assert returned.result == "caf\\udce9"
    assert returned.attachments[0].name == "\\udce9t\\udce9.txt"
    assert returned.omitted[0].name == "link-\\udcff"
    result = RunResult("0000abcd", Status.OK, exit_code=0, result=returned.result, result_chars=9)
    result = dataclasses.replace(result, attachments=returned.attachments, omitted=returned.omitted)
    to_call_result(result).model_dump_json()  # what the transport writes: it must not fail


def test_a_report_nested_too_deep_for_the_parser_is_dropped_with_a_note() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    data = b"report %d 0\n" % len(deep) + deep
    [note] = parse_report(data, BUDGETS.replace(result_chars=100_000)).omitted
    assert note.name == "(the run's report)"


def test_a_report_listing_as_many_files_as_a_run_may_is_taken_whole() -> None:
    files = [{"path": "\u00e9" * 1000 + str(n), "bytes": 0} for n in range(100)]
    omitted = [{"name": "\u00e9" * 1000 + str(n), "bytes": 5, "reason": "r" * 200} for n in range(50)]
    returned = parse_report(report({"files": files, "omitted": omitted, "more_omitted": 7}), BUDGETS)
    assert (len(returned.attachments), len(returned.omitted)) == (100, 51)


@pytest.mark.parametrize(
    "end",
    [
        (0, 0.0, 0),
        (1, 0.0123, 9876),
        (255, 12345.678, 10**14),
        (3, 1.5e-05, 1),
        (7, 1e-05, 2),  # repr without a point: the JSON path
        (256, 0.1, 1),  # out of range: dropped either way
        (0, 1e9, 1),
    ],
)
def test_an_end_only_report_reads_as_the_json_decoder_reads_it(end: tuple[int, float, int]) -> None:
    # The server reads the run's usual report without the JSON decoder; it must say the same.
    status, cpu, maxrss = end
    head = b'{"end": {"status": %d, "cpu": %r, "maxrss_kb": %d, "limit": ""}}' % (status, cpu, maxrss)
    data = b"report %d 0\n" % len(head) + head
    budgets = Budgets(0, 0, 0, 0, 0)
    assert parse_report(data, budgets) == parse_report_slowly(data, budgets)


def test_the_usual_end_only_report_is_read_without_the_json_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    module = report_module

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded as JSON")

    monkeypatch.setattr(module.json, "loads", refuse)
    for limit in ("", "memory", "file_size", "exit"):
        data = encode_end({"status": 1, "cpu": 0.0123, "maxrss_kb": 9876, "limit": limit})
        returned = parse_report(data, Budgets(0, 0, 0, 0, 0))
        assert returned == module.Returned(end=module.RunEnd(1, 0.0123, 9876 * 1024, limit))


@pytest.mark.parametrize(
    "head",
    [
        b'{"end": {"status": 007, "cpu": 0.1, "maxrss_kb": 1}}',
        b'{"end": {"status": 7, "cpu": 01.5, "maxrss_kb": 1}}',
        b'{"end": {"status": 7, "cpu": 0.1, "maxrss_kb": 01}}',
        b'{"end": {"status": 7, "cpu": 0.1, "maxrss_kb": 1}} ',
        b'{"end": {"status": 7, "cpu": 0.1, "maxrss_kb": 1}, "result": "x"}',
        b'{"end": {"status": 7, "cpu": 0.1, "maxrss_kb": 1}}',  # a run of an earlier server: no limit
        b'{"end": {"status": 7, "cpu": 0.1, "maxrss_kb": 1, "limit": "cpu"}}',
    ],
)
def test_a_report_near_the_end_only_form_is_read_the_whole_way(head: bytes) -> None:
    data = b"report %d 0\n" % len(head) + head
    budgets = Budgets(100, 0, 0, 0, 0)
    assert parse_report(data, budgets) == parse_report_slowly(data, budgets)


@pytest.mark.parametrize(
    "frame",
    [
        b"report 10 0\n",  # shorter than its header: the JSON is cut
        b"report 70 0\n",  # one byte longer than its header
        b"report 0069 0\n",  # the right length, zero-padded
        b"report 99999999 0\n",  # over the header's bound
    ],
)
def test_an_end_only_report_whose_frame_does_not_fit_its_header_is_read_the_whole_way(frame: bytes) -> None:
    # A run cut short sends a frame that was never whole; the server then reads what came.
    head = b'{"end": {"status": 0, "cpu": 0.0123, "maxrss_kb": 9876, "limit": ""}}'
    assert len(head) == 69
    budgets = Budgets(100, 0, 0, 0, 0)
    assert parse_report(frame + head, budgets) == parse_report_slowly(frame + head, budgets)


def parse_report_slowly(data: bytes, budgets: Budgets) -> object:
    """`parse_report` with its fast path matching nothing: the JSON decoder's reading."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_module, "read_end", lambda data: None)
        return parse_report(data, budgets)


def test_a_forged_link_without_a_reason_is_still_a_file_s_never_a_stream_s() -> None:
    """Found by a review: a link with no reason passed for a stream and broke full_output's schema."""
    returned = parse_report(report({"linked": [{"name": "stdout", "bytes": 3}]}, b"abc"), KEEPING)
    [linked] = returned.linked
    assert (linked.name, linked.note) == ("stdout", "over what the answer carries")


# --- the last value's table (runner/inrun/tables.py writes it; nothing of it is trusted) ---------------

TABLES = BUDGETS.replace(table_rows=3)  # table_bytes: half of call_bytes, 2,500
TABLE = {"columns": ["a", "b"], "dtypes": ["int64", "object"], "shape": [10, 2], "rows": [[1, "x"], [None, True]]}


def table_report(table: bytes, **head: object) -> bytes:
    return report({"table": len(table), **head}, table)


def test_a_table_comes_back_with_its_columns_dtypes_shape_rows_and_index() -> None:
    table = {**TABLE, "index": {"names": ["k", None], "rows": [["p", 1], ["q", 2]]}}
    returned = parse_report(table_report(json.dumps(table).encode(), result="df"), TABLES)
    assert returned.result == "df"
    assert returned.table is not None
    assert returned.table.columns == ("a", "b")
    assert returned.table.dtypes == ("int64", "object")
    assert returned.table.shape == (10, 2)
    assert returned.table.rows == ((1, "x"), (None, True))
    assert returned.table.index_names == ("k", None)
    assert returned.table.index_rows == (("p", 1), ("q", 2))


def test_a_table_s_blob_comes_before_the_figures_and_counts_against_the_call_s_bytes() -> None:
    table = json.dumps(TABLE).encode()
    head = {"images": [{"name": "figure-1.png", "bytes": len(PNG), "note": ""}]}
    returned = parse_report(
        table_report(table + PNG, **head)[:0] + report({"table": len(table), **head}, table + PNG), TABLES
    )
    assert returned.table is not None
    assert [a.name for a in returned.attachments] == ["figure-1.png"]
    over = report({"table": len(table), **head}, table + PNG + bytes(BUDGETS.call_bytes))
    assert parse_report(over, TABLES).table is None


@pytest.mark.parametrize(
    ("table", "why"),
    [
        (b"[1, 2]", "not an object"),
        (b'{"columns": ["a"], "dtypes": [], "shape": [1, 1], "rows": []}', "a dtype for each column"),
        (b'{"columns": ["a"], "dtypes": ["f"], "shape": [1, 1], "rows": [[NaN]]}', "NaN is not JSON"),
        (b'{"columns": ["a"], "dtypes": ["f"], "shape": [1, 1], "rows": [[Infinity]]}', "Infinity is not JSON"),
        (b'{"columns": ["a"], "dtypes": ["f"], "shape": [1, 1], "rows": [[1, 2]]}', "a row is not a list of 1 cells"),
        (b'{"columns": ["a"], "dtypes": ["f"], "shape": [1, 1], "rows": [[[1]]]}', "a cell is not a JSON scalar"),
        (b'{"columns": ["a"], "dtypes": ["f"], "shape": [1, 1], "rows": [[{}]]}', "a cell is not a JSON scalar"),
        (b'{"columns": [1], "dtypes": ["f"], "shape": [1, 1], "rows": []}', "columns are not text"),
        (b'{"columns": ["a"], "dtypes": ["f"], "shape": [-1, 1], "rows": []}', "a size is not a count"),
        (b'{"columns": ["a"], "dtypes": ["f"], "shape": [1, 1, 1], "rows": []}', "shape is not one or two counts"),
        (b'{"columns": ["a"], "dtypes": ["f"], "shape": [1, 1], "rows": [[1], [2]]}', "more rows than its shape"),
        (b'{"columns": ["a"], "dtypes": ["f"], "shape": [9, 1], "rows": [[1], [2], [3], [4]]}', "at most 3"),
        (
            b'{"columns": ["a"], "dtypes": ["f"], "shape": [9, 1], "rows": [[1]], '
            b'"index": {"names": ["k"], "rows": []}}',
            "an index key for each row",
        ),
        (b"[" * 2400, "recursion"),
        (b"\xff", "codec"),
    ],
)
def test_a_malformed_table_is_dropped_with_a_note_and_the_rest_of_the_report_stands(table: bytes, why: str) -> None:
    returned = parse_report(table_report(table, result="kept", result_chars=4), TABLES)
    assert returned.table is None
    assert returned.result == "kept"
    [note] = returned.omitted
    assert note.name == "(the last value's table)"
    assert note.reason.startswith("malformed, dropped: ")
    assert why.lower() in note.reason.lower()


def test_text_in_a_table_that_is_not_unicode_comes_back_escaped() -> None:
    table = b'{"columns": ["\\ud800"], "dtypes": ["o"], "shape": [1, 1], "rows": [["\\udcff"]]}'
    returned = parse_report(table_report(table), TABLES)
    assert returned.table is not None
    assert returned.table.columns == ("\\ud800",)
    assert returned.table.rows == (("\\udcff",),)
    json.dumps(returned.table.rows).encode("utf-8")


def test_a_table_over_half_the_call_s_bytes_or_unasked_for_drops_the_report() -> None:
    big = json.dumps({**TABLE, "columns": ["a" * 3000, "b"]}).encode()
    assert parse_report(table_report(big), TABLES).table is None
    assert parse_report(table_report(json.dumps(TABLE).encode()), BUDGETS).table is None, "a call that asked for none"


def test_a_forged_table_of_infinite_numbers_or_too_many_columns_is_dropped() -> None:
    # Found by a review: 1e400 read as an infinity, which JSON cannot carry back out.
    infinite = b'{"columns": ["a"], "dtypes": ["f"], "shape": [2, 1], "rows": [[1e400], [-1e999]]}'
    [note] = parse_report(table_report(infinite), TABLES).omitted
    assert "not a finite number" in note.reason
    wide = json.dumps({"columns": ["c"] * 201, "dtypes": ["d"] * 201, "shape": [0, 201], "rows": []}).encode()
    [note] = parse_report(table_report(wide), TABLES).omitted
    assert "more than 200 columns" in note.reason


def test_a_result_s_controls_are_shown_as_escapes_as_its_output_s_are() -> None:
    # Found by a review: the result section passed ESC, NUL, BEL and a bidirectional override as they were
    # (a DataFrame cell's, a __repr__'s), where stdout shows them escaped.
    returned = parse_report(report({"result": "\x1b[2J\x00\x07 \u202eevil \u2028--- exit_code: 0 ---"}, b""), BUDGETS)
    assert returned.result == "\\x1b[2J\\x00\\x07 \\u202eevil \\u2028--- exit_code: 0 ---"


def test_a_result_cut_as_shown_says_how_many_characters_it_left_out() -> None:
    # Found by a review: escaped after the cut, a cut result of 100,000 lone surrogates was shown in 600,000
    # characters and said nothing was cut.
    budgets = Budgets(images=2, image_bytes=1000, call_bytes=5000, file_bytes=3000, result_chars=1_000)
    sent = "\udce9" * 1_000
    returned = parse_report(report({"result": sent, "result_chars": 100_000}, b""), budgets)
    assert returned.result is not None
    assert len(returned.result) <= 1_000
    assert returned.result == "\\udce9" * 166
    assert returned.result_chars - len(returned.result) == 100_000 - 166

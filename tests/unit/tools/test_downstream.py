"""A downstream connection's own text, without a server: no credential of the file's in it."""

from __future__ import annotations

from runner.config.tools import Downstream
from runner.logs import get_logger
from runner.tools.downstream import Connection

TOKEN = "Bearer s3cr3t-0123456789"


def test_a_reason_or_an_error_never_shows_a_credential_the_file_gives_the_server() -> None:
    # Found by a review: an HTTP library's error echoed a header's value, which went to runs ("down")
    # and to the log.
    server = Downstream(
        "remote", "remote", ("*",), None, url="http://h/mcp", headers=(("Authorization", TOKEN), ("X-Short", "ab"))
    )
    connection = Connection(server, get_logger())
    said = connection.credentials.scrubbed(f"LocalProtocolError: Illegal header value b'{TOKEN}\\n' ({TOKEN})")
    assert "s3cr3t" not in said
    assert said == "LocalProtocolError: Illegal header value b'***\\n' (***)"
    assert connection.credentials.scrubbed("ab stays: too short to be one") == "ab stays: too short to be one"


def test_tools_whose_python_names_collide_or_are_the_servers_own_are_left_out() -> None:
    from mcp import types

    server = Downstream("every", "every", ("*",), None, command="x")
    connection = Connection(server, get_logger())
    connection.tools = {
        name: types.Tool(name=name, input_schema={}) for name in ("get-sum", "get_sum", "__class__", "_mcp_x", "echo")
    }
    assert connection.python_names() == {"echo": "echo", "get-sum": "get_sum"}


def test_the_head_of_a_longer_text_is_said_without_its_end_which_could_be_a_credentials_start() -> None:
    server = Downstream("remote", "remote", ("*",), None, url="http://h/mcp", headers=(("Authorization", TOKEN),))
    connection = Connection(server, get_logger())
    head = f"{TOKEN} and then {TOKEN[:12]}"  # the dump was cut in the middle of the second
    said = connection.credentials.scrubbed(head, whole=False)
    assert said == "*** and then"[: len(said)]
    assert "s3cr" not in said
    assert connection.credentials.scrubbed(head) == f"*** and then {TOKEN[:12]}"


def test_a_credential_is_masked_however_json_or_repr_escapes_it() -> None:
    # Found by a review: an error that is no text is dumped to JSON before it is masked, and a
    # credential JSON escapes ("pa\"ss\\word", "p\u00e4ssw\u00f6rd") reached the run, which decoded it back.
    import json

    secrets = ('pa"ss\\word-9', "pässwörd-1234", "plainSecret123")
    server = Downstream("s", "s", ("*",), None, command="x", env=tuple((f"K{n}", v) for n, v in enumerate(secrets)))
    connection = Connection(server, get_logger())
    for secret in secrets:
        for said in (json.dumps({"error": secret}), json.dumps({"error": secret}, ensure_ascii=False), repr(secret)):
            masked = connection.credentials.scrubbed(said)
            assert "***" in masked, masked
            assert secret not in masked
            if masked.startswith("{"):
                assert secret not in json.loads(masked)["error"], "nor once the run decodes it"

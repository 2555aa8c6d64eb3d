"""`huginn-chat mcp` through the official SDK's own client: the server is launched as a subprocess
over stdio (``mcp.client.stdio``) and driven by ``ClientSession``, against a reader on the fake
index (tests/reader_fakes.py) running in this process. What an agent host sees: the tools and
their schemas, hits as structured content plus text, tool errors naming the field, and a clear
error (never a hang) when the reader is down or silent."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from mcp.shared.exceptions import MCPError

from daemon.cli.client import exchange
from daemon.cli.mcp_server import STATUS_URI, TOOLS, input_schema
from daemon.reader import cursors
from daemon.reader.protocol import OP_FIELDS
from daemon.reader.search import make_query
from tests.mcp_client import Mcp, server_command, session_over, text_of
from tests.reader_fakes import ROOM_A, serving_the_fake_corpus

HEAVY = {"numpy", "fastembed", "qdrant_client", "qdrant_edge", "structlog", "nio", "onnxruntime"}


@pytest.fixture(scope="module")
def reader_path() -> Iterator[Path]:
    with serving_the_fake_corpus() as path:
        yield path


@pytest.fixture(scope="module")
def mcp(reader_path: Path) -> Iterator[Mcp]:
    with session_over(str(reader_path)) as session:
        yield session


# ---------------------------------------------------------------------------------------------
# The schema, from the one table


def test_each_tool_is_a_reader_operation() -> None:
    assert set(TOOLS) == {"search", "window", "thread", "rooms"} and set(TOOLS) <= set(OP_FIELDS)


@pytest.mark.parametrize("tool", ["search", "window", "thread", "rooms"])
def test_the_tool_schema_takes_exactly_the_protocols_fields(tool: str) -> None:
    """A field added to the reader protocol is one row in TOOLS; this fails until it is there."""
    schema = input_schema(tool)
    assert set(schema["properties"]) == set(OP_FIELDS[tool]), f"add the field's row to TOOLS[{tool!r}].args"
    assert schema["additionalProperties"] is False
    assert all(prop.get("description") for prop in schema["properties"].values())


def test_list_tools_shows_search_and_window_with_their_schemas(mcp: Mcp) -> None:
    listed = {tool.name: tool for tool in mcp("list_tools").tools}
    assert set(listed) == {"search", "window", "thread", "rooms"}
    for name, tool in listed.items():
        assert tool.input_schema == input_schema(name)
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert ("room_id" if name == "rooms" else "event_id") in (tool.description or "")
    assert listed["window"].input_schema["required"] == ["event_id"]
    assert listed["search"].input_schema["properties"]["top_k"]["maximum"] == 50
    assert listed["search"].input_schema["properties"]["texts"]["maxItems"] == 8


# ---------------------------------------------------------------------------------------------
# Answers


def _without_next(result: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in result.items() if key != "next"}


def test_the_rooms_tool_lists_the_searchable_rooms(mcp: Mcp, reader_path: Path) -> None:
    result = mcp.tool("rooms", {})
    assert result.is_error is False
    assert result.structured_content == exchange(str(reader_path), {"v": 1, "op": "rooms"})["result"]
    rooms = {room["room_id"]: room for room in result.structured_content["rooms"]}
    assert ROOM_A in rooms and rooms[ROOM_A]["messages"] == 3 and rooms[ROOM_A]["windows"] == 2
    assert "#dev:example.org" in text_of(result)
    refused = mcp.tool("rooms", {"texts": ["x"]})
    assert refused.is_error is True and refused.structured_content["error"]["field"] == "texts"


def test_resource_templates_are_answered_with_none(mcp: Mcp) -> None:
    assert mcp("list_resource_templates").resource_templates == []


def test_the_instructions_name_every_tool(mcp: Mcp) -> None:
    from daemon.cli.mcp_server import INSTRUCTIONS

    assert all(f"`{name}`" in INSTRUCTIONS for name in TOOLS)


def test_a_search_returns_the_readers_result_as_structured_content_and_text(mcp: Mcp, reader_path: Path) -> None:
    result = mcp.tool("search", {"texts": ["database migration"], "top_k": 2})
    assert result.is_error is False
    hits = result.structured_content["hits"]
    assert len(hits) == 2 and hits[0]["room_id"] == ROOM_A
    # Exactly what the reader answers the CLI (`search --json`), passed through unchanged.
    direct = exchange(str(reader_path), {"v": 1, "op": "search", "texts": ["database migration"], "top_k": 2})
    # (each ``next`` is sealed with the time it was issued: the two continue from the same place)
    assert _without_next(result.structured_content) == _without_next(direct["result"])
    query = make_query(["database migration"])
    assert cursors.decode(result.structured_content["next"], query.digest()) == cursors.decode(
        direct["result"]["next"], query.digest()
    )
    text = text_of(result)
    assert text.startswith("[1] #dev:example.org (!a:example.org)  relevance ")
    # Every message carries its event id and permalink, to cite.
    assert "      $a1  https://matrix.to/#/!a%3Aexample.org/%24a1?via=example.org" in text


def test_a_listing_pages_with_the_cursor(mcp: Mcp) -> None:
    first = mcp.tool("search", {"top_k": 3}).structured_content
    assert first["next"]
    second = mcp.tool("search", {"top_k": 3, "cursor": first["next"]}).structured_content
    seen = [hit["chunk_id"] for hit in first["hits"] + second["hits"]]
    assert len(seen) == len(set(seen)) == 4 and second["next"] is None


def test_filters_pass_through(mcp: Mcp) -> None:
    result = mcp.tool(
        "search", {"texts": ["migration"], "rooms": ["#nature:example.org"], "after": "1970-01-01T00:00:02Z"}
    )
    assert {hit["room_id"] for hit in result.structured_content["hits"]} == {"!b:example.org"}


def test_sort_and_relative_times_pass_through(mcp: Mcp) -> None:
    newest = mcp.tool("search", {"sort": "newest", "top_k": 2, "after": "1970-01-01"}).structured_content
    assert [hit["messages"][0]["event_id"] for hit in newest["hits"]] == ["$a3", "$c1"]
    # "2d" is two days before the reader's now: the 1970 corpus lies before it.
    assert mcp.tool("search", {"texts": ["migration"], "after": "2d"}).structured_content["hits"] == []


def test_a_window_returns_the_neighbours(mcp: Mcp) -> None:
    result = mcp.tool("window", {"event_id": "$a2", "before": 1, "after": 1})
    assert result.is_error is False
    assert [m["event_id"] for m in result.structured_content["messages"]] == ["$a1", "$a2", "$a3"]
    lines = text_of(result).splitlines()
    assert lines[0] == "#dev:example.org (!a:example.org)"
    assert lines[3] == "> 1970-01-01 00:00:02 UTC  bob (@bob:example.org): database migration rollback worked"
    assert lines[4] == "      $a2  https://matrix.to/#/!a%3Aexample.org/%24a2?via=example.org"


def test_a_thread_lists_its_root_and_replies(mcp: Mcp) -> None:
    """The fake corpus has no replies: a main-timeline message is a thread root with none."""
    result = mcp.tool("thread", {"event_id": "$a2"})
    assert result.is_error is False
    assert result.structured_content["root_id"] == "$a2"
    assert result.structured_content["root"]["event_id"] == "$a2"
    assert "thread $a2" in text_of(result).splitlines()[0]


def test_the_status_is_a_resource(mcp: Mcp) -> None:
    assert [str(r.uri) for r in mcp("list_resources").resources] == [STATUS_URI]
    contents = mcp("read_resource", STATUS_URI).contents
    status = json.loads(contents[0].text)
    assert status["protocol"] == 1 and status["embedder"] == "loaded"


# ---------------------------------------------------------------------------------------------
# Refusals: a tool error naming the field, before the reader is asked


@pytest.mark.parametrize(
    "tool, arguments, field",
    [
        ("search", {"texts": ["x"], "top_k": 99}, "top_k"),
        ("search", {"texts": ["x"], "top_k": "8"}, "top_k"),
        ("search", {"texts": [f"t{i}" for i in range(9)]}, "texts"),
        ("search", {"texts": ["x" * 1001]}, "texts"),
        ("search", {"texts": "just a string"}, "texts"),
        ("search", {"texts": ["x"], "rooms": []}, "rooms"),
        ("search", {"texts": ["x"], "senders": ["alice"]}, "senders"),
        ("search", {"texts": ["x"], "after": "last tuesday"}, "after"),
        ("search", {"texts": ["x"], "cursor": "abc"}, "cursor"),
        ("search", {"sort": "relevance"}, "sort"),
        ("search", {"texts": ["x"], "sort": "sideways"}, "sort"),
        ("search", {"texts": ["x"], "after": "2 days"}, "after"),
        ("search", {"texts": ["x"], "colour": "red"}, "colour"),
        ("search", {"texts": ["x"], "op": "status"}, "op"),
        ("window", {}, "event_id"),
        ("window", {"event_id": "not-an-event"}, "event_id"),
        ("window", {"event_id": "$a1", "before": 21}, "before"),
        ("window", {"event_id": "$a1", "after": -1}, "after"),
        ("window", {"event_id": "$a1", "texts": ["x"]}, "texts"),
        ("thread", {}, "event_id"),
        ("thread", {"event_id": "$a1", "top_k": 0}, "top_k"),
        ("thread", {"event_id": "$a1", "before": 2}, "before"),
    ],
)
def test_a_bad_argument_is_a_tool_error_naming_the_field(
    mcp: Mcp, tool: str, arguments: dict[str, Any], field: str
) -> None:
    result = mcp.tool(tool, arguments)
    assert result.is_error is True
    assert result.structured_content["error"]["field"] == field
    code = "bad_cursor" if field == "cursor" else "bad_request"  # a string that is no sealed token
    assert result.structured_content["error"]["code"] == code
    assert text_of(result).startswith(f"{code}: {field}: ")


def test_an_event_the_index_does_not_hold_is_the_readers_not_found(mcp: Mcp) -> None:
    result = mcp.tool("window", {"event_id": "$nope"})
    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "not_found"
    assert text_of(result).startswith("not_found: event_id: ")


def test_an_unknown_tool_is_a_protocol_error(mcp: Mcp) -> None:
    with pytest.raises(MCPError, match="unknown tool"):
        mcp.tool("status", {})


# ---------------------------------------------------------------------------------------------
# The reader down or silent: a clear error in bounded time, and the session stays usable


@pytest.mark.slow
def test_reader_not_running_is_a_tool_error_naming_the_socket(sock_dir: Path) -> None:
    path = str(sock_dir / "none.sock")
    with session_over(path) as session:
        assert {tool.name for tool in session("list_tools").tools} == {"search", "window", "thread", "rooms"}
        started = time.monotonic()
        result = session.tool("search", {"texts": ["x"]})
        assert time.monotonic() - started < 10
        assert result.is_error is True
        assert result.structured_content["error"]["code"] == "reader_unreachable"
        assert "not running" in text_of(result) and path in text_of(result)
        # A bad field is named even with the reader down: checked before connecting.
        result = session.tool("search", {"texts": ["x"], "top_k": 0})
        assert result.structured_content["error"]["field"] == "top_k"
        with pytest.raises(MCPError, match="not running"):
            session("read_resource", STATUS_URI)


@pytest.mark.slow
def test_a_reader_that_never_answers_times_out_with_a_clear_error(sock_dir: Path) -> None:
    path = str(sock_dir / "silent.sock")
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(path)
    silent.listen(8)  # connections queue in the backlog; nobody ever reads or answers
    try:
        with session_over(path, "--timeout", "1") as session:
            started = time.monotonic()
            result = session.tool("window", {"event_id": "$a1"})
            assert time.monotonic() - started < 10
            assert result.is_error is True and "did not answer in 1s" in text_of(result)
            assert session("list_tools").tools  # the session is still answering
    finally:
        silent.close()


@pytest.mark.slow
def test_a_bad_timeout_exits_2_before_serving() -> None:
    command, args = server_command()
    done = subprocess.run(
        [command, *args, "--timeout", "0"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("huginn-chat: --timeout: ")


# ---------------------------------------------------------------------------------------------
# What it loads


@pytest.mark.slow
def test_the_server_loads_no_index_embedder_or_settings() -> None:
    """The `mcp` path through the entry point, in a fresh interpreter: the SDK, never the engines,
    the settings (the credential's path lives there) or the journal."""
    code = (
        "import sys; from daemon.cli.main import main; from daemon.cli.mcp_server import build_server;"
        "build_server('/tmp/x.sock'); rc = main(['mcp', '--timeout', '0']);"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(HEAVY)!r});"
        "bad += [m for m in ('daemon.config', 'daemon.journal', 'daemon.wiring', 'daemon.embedder', 'daemon.reader.service')"
        " if m in sys.modules];"
        "assert 'mcp' in sys.modules and rc == 2; assert not bad, bad"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]

"""A reply's ``warnings``: a room or sender filter that names nothing the index holds says so,
through the reader, the CLI (human and JSON) and MCP, and a room the index does not hold reads
the same whatever the reason."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Iterator

import pytest

from daemon.cli.client import exchange
from daemon.cli.main import main
from daemon.reader.filter_warnings import filter_warnings
from tests.mcp_client import session_over, text_of
from tests.reader_fakes import ALICE, ROOM_A, FakeIndex, corpus, serving_the_fake_corpus


@pytest.fixture(scope="module")
def reader_path() -> Iterator[Path]:
    with serving_the_fake_corpus() as path:
        yield path


def search(path: Path, **fields: object) -> dict:
    reply = exchange(str(path), {"v": 1, "op": "search", **fields})
    assert reply["ok"], reply
    return reply["result"]


def test_no_warning_when_every_filter_names_something(reader_path: Path) -> None:
    result = search(reader_path, texts=["migration"], rooms=[ROOM_A, "#dev:example.org"], senders=[ALICE])
    assert result["warnings"] == []
    assert search(reader_path, texts=["migration"])["warnings"] == []


def test_an_unknown_room_and_sender_each_warn_naming_what_was_asked(reader_path: Path) -> None:
    result = search(
        reader_path, texts=["migration"], rooms=[ROOM_A, "#nowhere:example.org"], senders=["@nobody:example.org"]
    )
    assert [(w["code"], w["field"], w["value"]) for w in result["warnings"]] == [
        ("unknown_room", "rooms", "#nowhere:example.org"),
        ("unknown_sender", "senders", "@nobody:example.org"),
    ]


def test_operators_typed_in_a_text_warn_like_the_fields(reader_path: Path) -> None:
    result = search(reader_path, texts=["migration in:#nowhere:example.org from:@nobody:example.org"])
    assert {w["code"] for w in result["warnings"]} == {"unknown_room", "unknown_sender"}


def test_a_room_the_index_does_not_hold_reads_the_same_as_one_that_never_existed() -> None:
    """The index of a reader holds admitted rooms only: a refused room's id is just not held. Its
    warning is the one a made-up id gets, but for the name it repeats."""
    index = FakeIndex(corpus())
    refused, invented = "!refuseddm:example.org", "!neverexisted:example.org"
    one = filter_warnings(index, (refused,), None)
    other = filter_warnings(index, (invented,), None)
    assert json.dumps(one).replace(refused, "X") == json.dumps(other).replace(invented, "X")


def test_a_listing_warns_too(reader_path: Path) -> None:
    assert search(reader_path, rooms=["!nope:example.org"])["warnings"][0]["code"] == "unknown_room"


def test_the_cli_prints_the_warning_and_keeps_it_in_json(reader_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    argv = ["search", "migration", "--room", "#nowhere:example.org", "--socket", str(reader_path)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(argv) == 0
    assert "huginn-chat search: warning: no searchable room is called #nowhere:example.org" in err.getvalue()
    assert "(unknown_room)" in err.getvalue() and "no matching windows" in err.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    assert json.loads(out.getvalue())["warnings"][0]["value"] == "#nowhere:example.org"


@pytest.mark.slow
def test_mcp_carries_the_warning_as_structured_content_and_text(reader_path: Path) -> None:
    with session_over(str(reader_path)) as agent:
        found = agent.tool("search", {"texts": ["migration"], "senders": ["@nobody:example.org"]})
    assert found.is_error is False
    assert found.structured_content["warnings"][0]["code"] == "unknown_sender"
    assert "no searchable message is from @nobody:example.org" in text_of(found)

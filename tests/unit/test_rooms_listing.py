"""`huginn-chat rooms`: the searchable rooms, asked of a running reader over its socket (no
homeserver, no token), as a table or as JSON; the operator's dry run is `huginn-chat scope`."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Iterator

import pytest

from daemon.cli.client import exchange
from daemon.cli.main import build_parser, main
from tests.reader_fakes import ROOM_A, ROOM_B, serving_the_fake_corpus


@pytest.fixture(scope="module")
def reader_path() -> Iterator[Path]:
    with serving_the_fake_corpus() as path:
        yield path


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_the_reader_answers_rooms_with_counts_and_times(reader_path: Path) -> None:
    reply = exchange(str(reader_path), {"v": 1, "op": "rooms", "id": 7})
    assert reply["ok"] is True and reply["id"] == 7
    rooms = {room["room_id"]: room for room in reply["result"]["rooms"]}
    assert {ROOM_A, ROOM_B} <= set(rooms)
    a = rooms[ROOM_A]
    assert (a["messages"], a["windows"], a["first_ts"], a["last_ts"]) == (3, 2, 1_000, 10_000)
    assert a["canonical_alias"] == "#dev:example.org" and a["aliases"] == ["#dev:example.org"]


def test_rooms_takes_no_fields(reader_path: Path) -> None:
    reply = exchange(str(reader_path), {"v": 1, "op": "rooms", "texts": ["x"]})
    assert reply["ok"] is False and reply["error"]["field"] == "texts"


def test_huginn_chat_rooms_prints_each_room_and_its_names(reader_path: Path) -> None:
    code, out, err = run(["rooms", "--socket", str(reader_path)])
    assert code == 0, err
    assert f"#dev:example.org  {ROOM_A}" in out
    assert "  messages  3 in 2 windows" in out
    assert "  from      1970-01-01 00:00:01 UTC  to  1970-01-01 00:00:10 UTC" in out


def test_huginn_chat_rooms_json_is_the_readers_reply(reader_path: Path) -> None:
    code, out, _ = run(["rooms", "--json", "--socket", str(reader_path)])
    assert code == 0
    assert json.loads(out) == exchange(str(reader_path), {"v": 1, "op": "rooms"})["result"]


def test_rooms_without_a_reader_names_the_socket() -> None:
    code, out, err = run(["rooms", "--socket", "/tmp/hc-no-such-dir/reader.sock"])
    assert code == 1 and out == "" and "/tmp/hc-no-such-dir/reader.sock" in err and err.count("\n") == 1


def test_the_operators_dry_run_is_scope() -> None:
    args = build_parser().parse_args(["scope", "--json"])
    assert args.command == "scope" and args.json is True

"""daemon.cli.client: stdlib only, usage errors exit 2 naming the field, a missing reader exits 1
naming the socket, and what a user sees on stdout for search, listing and window."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from daemon.cli.client import add_client_parsers, exchange, socket_path
from daemon.cli.main import main
from daemon.reader.service import ReaderService
from tests.reader_fakes import (
    ROOM_B,
    DenseFailingEmbedder,
    FakeIndex,
    RecordingLogger,
    Running,
    corpus,
    serving_the_fake_corpus,
)

HEAVY = {"numpy", "fastembed", "qdrant_client", "qdrant_edge", "pydantic", "structlog", "nio", "onnxruntime"}


def test_the_client_imports_only_the_standard_library() -> None:
    code = (
        "import daemon.cli.client, sys;"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(HEAVY)!r});"
        "assert not bad, bad;"
        # The reader's modules (but its page of protocol names) load only on a failed path (to check the arguments) or for --format md.
        "assert not [m for m in sys.modules if m.startswith('daemon.') and m not in "
        "('daemon.cli', 'daemon.cli.client', 'daemon.errors', 'daemon.reader', 'daemon.reader.wire')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="huginn-chat")
    add_client_parsers(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def run(argv: list[str]) -> tuple[int, str, str]:
    """Through the entry point, which prints the error line and picks the exit code."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def reader_path() -> Iterator[Path]:
    with serving_the_fake_corpus() as path:
        yield path


NOWHERE = "/tmp/hc-no-such-dir/reader.sock"


@pytest.mark.parametrize(
    "argv, field",
    [
        (["search", "t0"] + [a for i in range(1, 9) for a in ("--text", f"t{i}")], "texts (TEXT)"),
        (["search", ""], "texts (TEXT)"),
        (["search", "x" * 1001], "texts (TEXT)"),
        (["search", "x", "--top-k", "51"], "top_k (--top-k)"),
        (["search", "x", "--top-k", "0"], "top_k (--top-k)"),
        (["search", "x", "--after", "last tuesday"], "after (--after)"),
        (["search", "x", "--before", "2026-02-30"], "before (--before)"),
        (["search", "x", "--room", "general"], "rooms (--room)"),
        (["search", "x", "--sender", "alice"], "senders (--sender)"),
        (["search", "x", "--cursor", "abc"], "cursor (--cursor)"),
        (["window", "not-an-event"], "event_id (EVENT_ID)"),
        (["window", "$e", "--before", "21"], "before (--before)"),
        (["window", "$e", "--after", "-1"], "after (--after)"),
    ],
)
def test_usage_errors_exit_2_naming_the_field_without_a_reader(argv: list[str], field: str) -> None:
    code, out, err = run(argv + ["--socket", NOWHERE])
    assert code == 2
    assert out == ""
    assert err.startswith(f"huginn-chat {argv[0]}: {field}: ")
    assert err.count("\n") == 1 and "not running" not in err


def test_a_non_integer_top_k_is_an_argparse_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(["search", "x", "--top-k", "many"])
    assert exit_.value.code == 2 and "--top-k" in capsys.readouterr().err


def test_reader_not_running_is_one_line_naming_the_socket_exit_1() -> None:
    code, out, err = run(["search", "hello", "--socket", NOWHERE])
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and NOWHERE in err and "not running" in err


def test_socket_path_comes_from_flag_then_env_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HUGINN_CHAT_SOCKET", raising=False)
    assert socket_path(parse(["search", "x"])) == "/run/huginn-chat/reader.sock"
    monkeypatch.setenv("HUGINN_CHAT_SOCKET", "/tmp/env.sock")
    assert socket_path(parse(["search", "x"])) == "/tmp/env.sock"
    assert socket_path(parse(["search", "x", "--socket", "/tmp/flag.sock"])) == "/tmp/flag.sock"
    code, _, err = run(["window", "$e"])
    assert code == 1 and "/tmp/env.sock" in err


def test_search_human_output(reader_path: Path) -> None:
    """Room alias, UTC time, sender's display name and id, text; every message's event id and
    permalink; the messages the reader says matched are marked and say by which leg."""
    code, out, err = run(
        ["search", "database migration", "--text", "birds", "--top-k", "2", "--socket", str(reader_path)]
    )
    assert code == 0, err
    lines = out.splitlines()
    assert (
        lines[0] == "[1] #nature:example.org (!b:example.org)  relevance 0.67  similarity 0.67  words: migration, birds"
    )
    assert lines[-2].startswith("legend: > the message that matched (dense: by meaning, lexical: by its words)")
    at = lines.index(
        "> 1970-01-01 00:00:03 UTC  carol (@carol:example.org): we talked about a migration of birds  (dense+lexical)"
    )
    assert lines[at + 1] == "      $b1  https://matrix.to/#/!b%3Aexample.org/%24b1?via=example.org"
    # A message that did not match still shows its id and link: any message can be cited.
    at = lines.index("  1970-01-01 00:00:04 UTC  bob (@bob:example.org): geese fly south")
    assert lines[at + 1] == "      $b2  https://matrix.to/#/!b%3Aexample.org/%24b2?via=example.org"
    assert (
        "> 1970-01-01 00:00:01 UTC  alice (@alice:example.org): the database migration failed at step three"
        "  (lexical)" in lines
    )
    assert sum(line.startswith("[") for line in lines) == 2


def test_search_json_output_shape(reader_path: Path) -> None:
    code, out, _ = run(["search", "database migration", "--text", "geese", "--json", "--socket", str(reader_path)])
    assert code == 0
    result = json.loads(out)
    assert set(result) == {"hits", "next", "degraded", "warnings"}
    for hit in result["hits"]:
        assert set(hit) == {
            "chunk_id",
            "room_id",
            "room_alias",
            "first_event_id",
            "last_event_id",
            "room_name",
            "score",
            "messages",
            "legs",
            "thread_root",
            "matched_words",
            "similarity",
            "relevance",
        }
        for message in hit["messages"]:
            assert set(message) == {
                "event_id",
                "sender",
                "display_name",
                "permalink",
                "ts",
                "body",
                "reply_to",
                "matched",
            }
            assert set(message["matched"]) <= {"dense", "lexical"}


def test_room_filter_by_alias_and_unknown_alias(reader_path: Path) -> None:
    code, out, _ = run(["search", "migration", "--room", "#nature:example.org", "--json", "--socket", str(reader_path)])
    assert code == 0 and {h["room_id"] for h in json.loads(out)["hits"]} == {ROOM_B}
    code, out, err = run(["search", "migration", "--room", "#nowhere:example.org", "--socket", str(reader_path)])
    assert code == 0 and out == "" and "no matching windows" in err


def test_listing_pages_with_cursor(reader_path: Path) -> None:
    code, out, _ = run(["search", "--top-k", "3", "--json", "--socket", str(reader_path)])
    first = json.loads(out)
    assert code == 0 and first["next"]
    code, out, _ = run(["search", "--top-k", "3", "--cursor", first["next"], "--json", "--socket", str(reader_path)])
    second = json.loads(out)
    assert second["next"] is None
    seen = [h["chunk_id"] for h in first["hits"] + second["hits"]]
    assert len(seen) == len(set(seen)) == 4
    code, out, _ = run(["search", "--top-k", "3", "--socket", str(reader_path)])
    # The text output prints the token to repeat with (each token is sealed with its issue time,
    # so it is not byte for byte the first one): it continues where the first one did.
    printed = out.split("more: repeat with --cursor ")[1].split()[0]
    code, out, _ = run(["search", "--top-k", "3", "--cursor", printed, "--json", "--socket", str(reader_path)])
    assert code == 0 and json.loads(out) == second


def test_a_cursor_the_reader_refuses_exits_2_naming_cursor(reader_path: Path) -> None:
    code, out, _ = run(["search", "--top-k", "3", "--json", "--socket", str(reader_path)])
    token = json.loads(out)["next"]
    code, _, err = run(["search", "--room", "!a:example.org", "--cursor", token, "--socket", str(reader_path)])
    assert code == 2 and err.startswith("huginn-chat search: cursor (--cursor): ")


def test_window_output_marks_the_cited_message(reader_path: Path) -> None:
    code, out, _ = run(["window", "$a2", "--before", "1", "--after", "1", "--socket", str(reader_path)])
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "#dev:example.org (!a:example.org)"
    assert lines[1].startswith("  1970-01-01 00:00:01 UTC  alice (@alice:example.org): the database")
    assert lines[3] == "> 1970-01-01 00:00:02 UTC  bob (@bob:example.org): database migration rollback worked"
    assert lines[4] == "      $a2  https://matrix.to/#/!a%3Aexample.org/%24a2?via=example.org"
    assert lines[5].startswith("  1970-01-01 00:00:10 UTC  alice (@alice:example.org): lunch")
    code, out, _ = run(["window", "$a2", "--json", "--socket", str(reader_path)])
    result = json.loads(out)
    assert set(result) == {
        "room_id",
        "room_alias",
        "room_name",
        "event_id",
        "thread_root",
        "messages",
        "chunk_ids",
    }  # docs/protocol.md
    assert result["chunk_ids"] == [corpus()[0]["chunk_id"], corpus()[1]["chunk_id"]]


def test_window_of_an_unknown_event_exits_2_naming_event_id(reader_path: Path) -> None:
    code, out, err = run(["window", "$nope", "--socket", str(reader_path)])
    assert code == 2 and out == ""
    assert err.startswith("huginn-chat window: event_id (EVENT_ID): ")


def test_the_reader_checks_again_what_the_client_checked(reader_path: Path) -> None:
    reply = exchange(str(reader_path), {"v": 1, "op": "search", "texts": ["x"] * 9, "top_k": 99})
    assert reply["ok"] is False and reply["error"]["field"] == "texts"
    reply = exchange(str(reader_path), {"v": 1, "op": "search", "texts": ["x"], "top_k": 99})
    assert reply["error"] == {"code": "bad_request", "field": "top_k", "message": reply["error"]["message"]}


def test_degraded_answers_say_so() -> None:
    directory = Path(tempfile.mkdtemp(prefix="hc-", dir="/tmp"))
    path = directory / "r.sock"
    service = ReaderService(lambda: FakeIndex(corpus()), DenseFailingEmbedder, None, logger=RecordingLogger())
    try:
        with Running(service, path):
            code, out, err = run(["search", "migration", "--socket", str(path)])
            assert code == 0 and "lexical matches only" in err and out
            code, out, _ = run(["search", "migration", "--json", "--socket", str(path)])
            assert json.loads(out)["degraded"] == "lexical_only"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_the_entry_point_runs_search_without_settings(reader_path: Path) -> None:
    """``huginn-chat search`` through daemon.cli.main: no config file, no pydantic, exit codes intact."""
    env = dict(os.environ, HUGINN_CHAT_SOCKET=str(reader_path))
    code = (
        "import sys; from daemon.cli.main import main; rc = main(sys.argv[1:]);"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'numpy', 'qdrant_client')];"
        "assert not bad, bad; sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "search", "geese", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hits"]
    done = subprocess.run(
        [sys.executable, "-c", code, "search", "x", "--top-k", "51"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "top_k" in done.stderr


@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "inf", "1e300"])
def test_a_timeout_that_is_no_number_of_seconds_exits_2_naming_it(timeout: str) -> None:
    code, out, err = run(["search", "x", "--socket", NOWHERE, "--timeout", timeout])
    assert code == 2 and out == ""
    assert err.startswith("huginn-chat search: --timeout: ")


@pytest.mark.parametrize(
    "argv, field",
    [
        # An argument that is not UTF-8 reaches Python as a lone surrogate (surrogateescape).
        (["window", "$ev\udcff"], "event_id (EVENT_ID)"),
        (["search", "x", "--room", "!room\udcff"], "rooms (--room)"),
        (["search", "x", "--sender", "@a\udcff:example.org"], "senders (--sender)"),
    ],
)
def test_an_id_that_is_not_utf8_exits_2_naming_the_field(argv: list[str], field: str) -> None:
    code, _, err = run(argv + ["--socket", NOWHERE])
    assert code == 2
    assert err.startswith(f"huginn-chat {argv[0]}: {field}: ")

"""What a Persona's ``huginn-chat search`` loads, and that sending the arguments as typed changes
nothing: the reader reads them as the same query, and a bad argument reads the same line and exit
code with a reader as without one (daemon/cli/client.py, daemon/cli/main.py).

Each import check runs a fresh interpreter started as the launcher starts it (``-I -S``, only the
checkout on the path), because this test process has long since imported everything.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from daemon.cli import client
from daemon.cli.main import build_parser, main
from daemon.reader import protocol, search, wire
from tests.reader_fakes import serving_the_fake_corpus

REPO = Path(__file__).resolve().parents[2]

# Every module an answered ``search --json`` may load beyond the bare interpreter (top-level names).
# The standard library's light modules only: no typing, dataclasses, inspect, pathlib, shutil,
# zoneinfo, hashlib or random (each costs milliseconds of every start), and none of the reader's
# modules (they load dataclasses and the index port).
ALLOWED = {
    "__future__", "_collections", "_collections_abc", "_functools", "_json", "_locale", "_operator", "_socket",
    "_sre", "_stat", "argparse", "array", "collections", "copyreg", "enum", "errno", "functools", "genericpath",
    "gettext", "itertools", "json", "keyword", "locale", "math", "operator", "os", "posixpath", "re", "reprlib",
    "select", "selectors", "socket", "stat", "types", "warnings", "daemon",
}  # fmt: skip
# The text output adds the clock's formatting.
ALLOWED_TEXT = ALLOWED | {"datetime", "_datetime"}
DAEMON_ALLOWED = {
    "daemon", "daemon.cli", "daemon.cli.main", "daemon.cli.client", "daemon.errors", "daemon.reader", "daemon.reader.wire"
}  # fmt: skip


@pytest.fixture(scope="module")
def reader_path() -> Iterator[Path]:
    with serving_the_fake_corpus() as path:
        yield path


def loaded_by(argv: list[str]) -> tuple[int, set[str], str]:
    """Run ``main(argv)`` as the launcher does; the modules it loaded beyond the bare interpreter."""
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); before = set(sys.modules);"
        "from daemon.cli.main import main\ntry: rc = main(sys.argv[1:])\nexcept SystemExit as exit_: rc = exit_.code\n"
        "import json; print(json.dumps(sorted(set(sys.modules) - before)), file=sys.stderr); sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    *_, modules = done.stderr.splitlines()
    return done.returncode, set(json.loads(modules)), done.stdout


@pytest.mark.parametrize("output, allowed", [(["--json"], ALLOWED), ([], ALLOWED_TEXT)])
def test_an_answered_search_loads_only_light_standard_modules(
    reader_path: Path, output: list[str], allowed: set[str]
) -> None:
    rc, modules, stdout = loaded_by(["search", "geese", "--socket", str(reader_path), *output])
    assert rc == 0 and "geese" in stdout
    outside = sorted(m for m in modules if m.split(".")[0] not in allowed)
    assert outside == []
    assert sorted(m for m in modules if m.split(".")[0] == "daemon") == sorted(DAEMON_ALLOWED)


def test_a_window_loads_no_more_than_a_search(reader_path: Path) -> None:
    rc, modules, stdout = loaded_by(["window", "$b1", "--json", "--socket", str(reader_path)])
    assert rc == 0 and "$b1" in stdout
    assert sorted(m for m in modules if m.split(".")[0] not in ALLOWED) == []


def test_the_help_of_search_loads_no_reader_module() -> None:
    rc, modules, stdout = loaded_by(["search", "--help"])
    assert rc == 0 and stdout.startswith("usage: huginn-chat search")
    readers = {m for m in modules if m.startswith("daemon.reader")}
    assert readers <= {"daemon.reader", "daemon.reader.wire"} and "typing" not in modules


def test_the_client_and_the_reader_read_one_page_of_protocol_names() -> None:
    """The client shows these in --help and sends them as defaults; the reader checks against the
    very same objects, so the two cannot drift apart."""
    for name in ("MAX_TEXTS", "SORTS", "TOP_K_DEFAULT", "TOP_K_MAX", "WINDOW_CONTEXT_DEFAULT", "WINDOW_CONTEXT_MAX"):
        assert getattr(client, name) is getattr(search, name) is getattr(wire, name), name
    assert client.PROTOCOL_VERSION is protocol.PROTOCOL_VERSION is wire.PROTOCOL_VERSION
    assert client.USAGE_ERRORS is protocol.USAGE_ERRORS is wire.USAGE_ERRORS


def parse(argv: list[str]) -> argparse.Namespace:
    return build_parser(only_client=True).parse_args(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "database migration"],
        ["search", "a", "--text", "b", "-t", "a", "--top-k", "5", "--sort", "newest"],
        ["search", "laser", "-chiller", "pump", "--top-k", "5"],
        ["search", '"exact phrase" -word from:@alice:example.org', "--room", "#dev:example.org"],
        ["search", "x", "in:#dev:example.org", "--room", "!b:example.org", "--sender", "@bob:example.org"],
        ["search", "x", "--after", "2d", "--before", "2126-01-02T03:04:05Z"],
        ["search", "x", "--after", "1700000000000", "--before", "today Europe/Berlin"],
        ["search", "--sort", "oldest", "--top-k", "50"],
        ["search"],
        ["search", "--thread", "$root", "--top-k", "3"],
        ["window", "$e", "--before", "0", "--after", "20"],
    ],
)
def test_the_arguments_as_typed_read_as_the_query_the_client_checks(argv: list[str]) -> None:
    """What the reader makes of the request line (``parse_request``) is the query the client's
    local check builds from the same arguments, and the query the former wire form (the client's
    normalised query, ``protocol.search_request``) carried."""
    args = parse(argv)
    command = "thread" if getattr(args, "thread", None) else argv[0]
    got = protocol.parse_request(client._encode_line(client._request(command, args)).rstrip(b"\n")).query
    if command == "thread":
        assert got == search.make_thread_query(args.thread, args.top_k, None)
    elif command == "window":
        assert got == search.make_window_query(args.event_id, args.before, args.after)
    else:
        query = search.make_query(
            client.typed_texts(args),
            rooms=args.rooms,
            senders=args.senders,
            after=args.after,
            before=args.before,
            top_k=args.top_k,
            cursor=args.cursor,
            sort=args.sort,
        )
        former = protocol.parse_request(protocol.encode_line(protocol.search_request(query)).rstrip(b"\n")).query
        # Each was parsed at its own clock: compare them resolved at one instant.
        now = 1_800_000_000_000
        assert got.at(now) == query.at(now) == former.at(now)
        assert got.digest() == query.digest() == former.digest()  # what a cursor binds


BAD = [
    ["search", "t0"] + [a for i in range(1, 9) for a in ("--text", f"t{i}")],
    ["search", "x" * 1001],
    ["search", "x" * 70_000],  # a request line past the reader's 64 KiB: still the texts field
    ["search", "x", "--top-k", "51"],
    ["search", "x", "--after", "last tuesday"],
    ["search", "x", "--room", "general"],
    ["search", "x", "--cursor", "abc"],
    ["search", "x", "--top-k", "0", "--timeout", "0"],  # the field first, as before: then --timeout
    ["search", "\udcff"],  # an undecodable byte from the shell: texts, not a broken request line
    ["search", "--thread", "not-an-event"],
    ["window", "not-an-event"],
    ["window", "$e", "--before", "21"],
]


@pytest.mark.parametrize("argv", BAD)
def test_a_bad_argument_reads_the_same_with_a_reader_and_without(
    argv: list[str], reader_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--socket", "/tmp/hc-no-such-dir/reader.sock"]) == 2
    without = capsys.readouterr()
    assert main([*argv, "--socket", str(reader_path)]) == 2
    answered = capsys.readouterr()
    assert answered.out == without.out == ""
    assert answered.err == without.err and without.err.count("\n") == 1
    assert without.err.startswith(f"huginn-chat {argv[0]}: ") and "(" in without.err  # names field and flag


def test_a_missing_event_is_the_readers_refusal_exit_2(reader_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A refusal only the reader can make still reaches the user as its own line."""
    assert main(["window", "$nope", "--socket", str(reader_path)]) == 2
    assert capsys.readouterr().err.startswith("huginn-chat window: ")

"""Replies and threads end to end without a homeserver: the refresher over ``FakeMatrix`` writes
into each index backend (Edge, the server adapter in qdrant-client's local mode, and the in-memory
fake), then the reader's operations (``daemon.reader.search``) read it back, and the CLI prints it.

What is checked: thread replies get their own windows and never enter the main timeline's; a
thread continues in its open window across runs (found again by its root's id); an edit and a
redaction inside a thread land; ``execute_thread`` lists a thread in order and pages it exactly
once; a hit's reply shows the replied-to message from another window; ``execute_window`` of a
thread reply stays in its thread.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from chunker.fold import Bounds
from daemon.cli.client import print_search, print_thread, print_window
from daemon.cli.main import main
from daemon.index.edge_reader import EdgeIndexReader
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.reader import cursors
from daemon.reader.protocol import ProtocolError, ThreadRequest, parse_request, thread_request
from daemon.reader.search import (
    QueryError,
    execute_search,
    execute_thread,
    execute_window,
    make_query,
    make_thread_query,
    make_window_query,
)
from daemon.reader.service import ReaderService
from tests.fakes import FakeEmbedder, FakeMatrix, MemoryIndex, run_refresher
from tests.reader_fakes import (
    ALICE as ALICE_X,
    CAROL as CAROL_X,
    ROOM_A,
    FakeEmbedder as ReaderEmbedder,
    FakeIndex,
    RecordingLogger,
    Running,
    make_window,
)

ALICE, BOB, CAROL = "@alice:hs.test", "@bob:hs.test", "@carol:hs.test"
ROOM = "!pub"
# Small windows, so a thread spans several and paging has something to page.
BOUNDS = Bounds(max_bytes=120, max_gap_ms=3_600_000)


class Backend:
    """``writer`` for the refresher; ``read()`` a reader of everything written so far."""

    def __init__(self, writer: Any, read: Any):
        self.writer, self.read = writer, read

    # The refresher and the payload checks use the writer's side.
    def __getattr__(self, name: str) -> Any:
        return getattr(self.writer, name)


# The Edge variant is `slow` (each read publishes a generation), as in the refresher's tests:
# `make check` runs the threads over the server adapter and the in-memory index.
@pytest.fixture(params=[pytest.param("edge", marks=pytest.mark.slow), "server", "memory"])
def index(request, tmp_path: Path):
    opened: list[Any] = []
    if request.param == "edge":
        writer: Any = EdgeIndexWriter(tmp_path / "index")

        def read() -> Any:
            opened.append(EdgeIndexReader.open_latest(tmp_path / "index", tmp_path / f"private{len(opened)}"))
            return opened[-1]

    elif request.param == "server":
        from qdrant_client import QdrantClient

        from daemon.index.remote_reader import RemoteIndexReader
        from daemon.index.remote_writer import RemoteIndexWriter

        client = QdrantClient(":memory:")
        writer = RemoteIndexWriter(client, "huginn_chat_test")

        def read() -> Any:
            return RemoteIndexReader(client, "huginn_chat_test")

    else:
        writer = MemoryIndex()

        def read() -> Any:
            return writer

    yield Backend(writer, read)
    for reader in opened:
        reader.close()
    writer.close()


def refresh(hs: FakeMatrix, index: Any, rooms: tuple[str, ...] = (ROOM,)) -> Any:
    summary = run_refresher(hs, index.writer, FakeEmbedder(), rooms, bounds=BOUNDS, page_size=3, checkpoint_events=4)
    assert summary.exit_code == 0
    return summary


def in_thread(root: str, *, falling_back_to: str | None = None, reply_to: str | None = None) -> dict[str, Any]:
    relation: dict[str, Any] = {"rel_type": "m.thread", "event_id": root}
    if falling_back_to is not None:
        relation.update({"is_falling_back": True, "m.in_reply_to": {"event_id": falling_back_to}})
    if reply_to is not None:
        relation["m.in_reply_to"] = {"event_id": reply_to}
    return relation


def windows(index: Any) -> list[dict[str, Any]]:
    return index.windows_in_span(ROOM, 0, 10**14)


def timelines(index: Any) -> dict[str | None, list[list[str]]]:
    """{thread root or None: [[event ids of a window], ...] in listing order}."""
    out: dict[str | None, list[list[str]]] = {}
    for payload in windows(index):
        if payload["event_ids"] or payload["redacted_ids"]:
            out.setdefault(payload["thread_root"], []).append(payload["event_ids"])
    return out


def test_thread_replies_are_windowed_apart_and_a_thread_continues_across_runs(index):
    hs = FakeMatrix()
    hs.add_room(ROOM, alias="#town:hs.test")
    root = hs.send(ROOM, ALICE, "move the build?")
    t1 = hs.send(ROOM, BOB, "yes", relates_to=in_thread(root, falling_back_to=root))
    m1 = hs.send(ROOM, CAROL, "lunch at noon")
    t2 = hs.send(ROOM, ALICE, "ok", relates_to=in_thread(root, falling_back_to=t1))
    m2 = hs.send(ROOM, BOB, "noon works")
    refresh(hs, index)
    assert timelines(index) == {None: [[root, m1, m2]], root: [[t1, t2]]}
    # The thread fallback's m.in_reply_to is no reply; the payload keeps what is.
    assert all(m["reply_to"] is None for p in windows(index) for m in p["messages"])

    t3 = hs.send(ROOM, CAROL, "done", relates_to=in_thread(root, reply_to=t1))  # a real reply in the thread
    m3 = hs.send(ROOM, CAROL, "back in the room")
    summary = refresh(hs, index)
    # Each timeline's open window took its message: one thread window, one main window rewritten.
    assert timelines(index) == {None: [[root, m1, m2, m3]], root: [[t1, t2, t3]]}
    assert summary.windows_written == 2
    (thread,) = [p for p in windows(index) if p["thread_root"] == root]
    assert thread["timeline"] == root and [m["reply_to"] for m in thread["messages"]] == [None, None, t1]


def test_an_edit_and_a_redaction_inside_a_thread_land_on_the_next_run(index):
    hs = FakeMatrix()
    hs.add_room(ROOM)
    root = hs.send(ROOM, ALICE, "root question")
    t1 = hs.send(ROOM, BOB, "first answer with a typo", relates_to=in_thread(root))
    t2 = hs.send(ROOM, CAROL, "second answer", relates_to=in_thread(root))
    refresh(hs, index)
    hs.edit(ROOM, BOB, t1, "first answer, fixed")
    hs.redact(ROOM, ALICE, t2)
    refresh(hs, index)
    (thread,) = [p for p in windows(index) if p["thread_root"] == root]
    assert [(m["event_id"], m["body"]) for m in thread["messages"]] == [(t1, "first answer, fixed")]
    assert thread["redacted_ids"] == [t2]
    assert not any("second answer" in str(p) for p in windows(index))


def long_thread(index: Any) -> tuple[FakeMatrix, str, list[str], list[str], Any]:
    hs = FakeMatrix()
    hs.add_room(ROOM, alias="#town:hs.test")
    old = hs.send(ROOM, BOB, "the staging database password rotates every friday")
    main = [old] + [hs.send(ROOM, CAROL, f"main timeline chatter number {i} padding padding") for i in range(6)]
    root = hs.send(ROOM, ALICE, "thread root: why did the nightly job fail")
    replies = []
    for i in range(12):
        replies.append(hs.send(ROOM, BOB, f"thread reply {i} with some padding text", relates_to=in_thread(root)))
        main.append(hs.send(ROOM, CAROL, f"interleaved main message {i} padding padding padding"))
    main.append(hs.send(ROOM, ALICE, "ack, rotating it now", relates_to={"m.in_reply_to": {"event_id": old}}))
    refresh(hs, index)
    return hs, root, replies, main, index.read()


def test_a_thread_is_listed_in_order_and_paged_exactly_once(index):
    _, root, replies, _, reader = long_thread(index)
    assert len([p for p in windows(index) if p["thread_root"] == root]) > 3  # several pages' worth
    for asked in (root, replies[5]):  # the root, or any message of the thread
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            result = execute_thread(reader, make_thread_query(asked, top_k=2, cursor=cursor))
            assert result["root_id"] == root and result["root"]["event_id"] == root
            assert result["room_id"] == ROOM and result["room_alias"] == "#town:hs.test"
            seen += [m["event_id"] for m in result["messages"]]
            pages += 1
            cursor = result["next"]
            if cursor is None:
                break
        assert seen == replies and pages > 1
    other = execute_thread(reader, make_thread_query(replies[0], top_k=2))
    with pytest.raises(QueryError, match="different request"):
        execute_thread(reader, make_thread_query("$unrelated", top_k=2, cursor=other["next"]))


def test_a_message_without_a_thread_lists_as_a_root_alone_and_an_unknown_id_is_not_found(index):
    _, _, _, main, reader = long_thread(index)
    lone = execute_thread(reader, make_thread_query(main[1]))
    assert lone["root"]["event_id"] == main[1] and lone["messages"] == [] and lone["next"] is None
    with pytest.raises(QueryError) as refused:
        execute_thread(reader, make_thread_query("$never-seen"))
    assert refused.value.not_found and refused.value.field == "event_id"


def test_a_hit_that_replies_shows_the_replied_to_message_from_another_window(index):
    _, _, _, main, reader = long_thread(index)
    old, reply = main[0], main[-1]
    query = make_query(["rotating"], rooms=[ROOM])
    result = execute_search(reader, FakeEmbedder(), query).to_json()
    (message,) = [m for h in result["hits"] for m in h["messages"] if m["event_id"] == reply]
    holder = reader.window_of_event(old)
    assert reply not in [m.event_id for m in holder.messages]  # the target sits in another window
    assert message["reply_to"] == {
        "event_id": old,
        "sender": BOB,
        "ts": next(m.ts for m in holder.messages if m.event_id == old),
        "body": "the staging database password rotates every friday",
    }
    out = io.StringIO()
    print_search(result, ["rotating"], out, io.StringIO())
    assert f"in reply to {BOB}" in out.getvalue() and f"[{old}]" in out.getvalue()


def test_a_thread_hit_names_its_root_and_a_window_of_a_reply_stays_in_its_thread(index):
    _, root, replies, main, reader = long_thread(index)
    result = execute_search(reader, FakeEmbedder(), make_query(["thread reply 7"])).to_json()
    hit = next(h for h in result["hits"] if h["thread_root"] is not None)
    assert hit["thread_root"]["event_id"] == root and hit["thread_root"]["sender"] == ALICE
    assert hit["thread_root"]["body"] == "thread root: why did the nightly job fail"
    window = execute_window(reader, make_window_query(replies[6], before=3, after=3))
    assert [m["event_id"] for m in window["messages"]] == replies[3:10]
    assert window["thread_root"]["event_id"] == root
    main_window = execute_window(reader, make_window_query(main[10], before=2, after=2))
    assert [m["event_id"] for m in main_window["messages"]] == main[8:13]  # no thread reply in between
    out = io.StringIO()
    print_window(window, out)
    assert "in the thread of" in out.getvalue() and f"[{root}]" in out.getvalue()


def test_a_reply_to_a_redacted_message_keeps_only_its_id(index):
    hs = FakeMatrix()
    hs.add_room(ROOM)
    gone = hs.send(ROOM, ALICE, "a secret plan nobody should read")
    reply = hs.send(ROOM, BOB, "replying here", relates_to={"m.in_reply_to": {"event_id": gone}})
    hs.redact(ROOM, ALICE, gone)
    refresh(hs, index)
    window = execute_window(index.read(), make_window_query(reply))
    (message,) = [m for m in window["messages"] if m["event_id"] == reply]
    assert message["reply_to"] == {"event_id": gone, "sender": None, "ts": None, "body": None}
    assert "secret plan" not in str(windows(index))


def test_ids_a_sender_writes_never_reach_into_another_room(index):
    hs = FakeMatrix()
    hs.add_room(ROOM)
    hs.add_room("!other")
    root = hs.send(ROOM, ALICE, "the root in the first room")
    mine = hs.send(ROOM, BOB, "a real reply in the thread", relates_to=in_thread(root))
    hs.send("!other", CAROL, "claims the same thread from elsewhere", relates_to=in_thread(root))
    stray = hs.send("!other", CAROL, "replies across rooms", relates_to={"m.in_reply_to": {"event_id": root}})
    refresh(hs, index, rooms=(ROOM, "!other"))
    reader = index.read()
    listed = execute_thread(reader, make_thread_query(root, top_k=50))
    assert [m["event_id"] for m in listed["messages"]] == [mine] and listed["room_id"] == ROOM
    window = execute_window(reader, make_window_query(stray))
    (message,) = [m for m in window["messages"] if m["event_id"] == stray]
    assert message["reply_to"] == {"event_id": root, "sender": None, "ts": None, "body": None}


def test_the_cli_prints_a_thread_root_first_then_each_reply_with_its_id(index):
    _, root, replies, _, reader = long_thread(index)
    result = execute_thread(reader, make_thread_query(root, top_k=50))
    out = io.StringIO()
    print_thread(result, out)
    lines = out.getvalue().splitlines()
    # Each message's line, then its event id (and permalink, once cited) indented below it.
    assert root in lines[0] and "(root)" in lines[1] and lines[2].split()[0] == root
    first_reply = next(i for i, line in enumerate(lines) if i > 2 and "thread reply" in line)
    assert lines[first_reply + 1].split()[0] == replies[0]
    assert len([line for line in lines if "thread reply" in line]) == len(replies)


# ---- the wire and the CLI, over a real socket ------------------------------------------------


def thread_corpus() -> list[dict[str, Any]]:
    """Room A: a root in the main timeline, two thread windows, and a main reply to an old message."""
    return [
        make_window(ROOM_A, [("$old", BOB, 1_000, "the release branch is cut on mondays")], alias="#dev:example.org"),
        make_window(ROOM_A, [("$root", ALICE_X, 5_000, "who owns the flaky login test?")], alias="#dev:example.org"),
        make_window(ROOM_A, [("$t1", BOB, 6_000, "I do, looking now")], thread_root="$root"),
        make_window(ROOM_A, [("$t2", CAROL_X, 9_000, "fixed in main")], thread_root="$root", replies={"$t2": "$t1"}),
        make_window(
            ROOM_A,
            [("$m1", CAROL_X, 20_000, "so the release waits for monday")],
            alias="#dev:example.org",
            replies={"$m1": "$old"},
        ),
    ]


@pytest.fixture
def thread_reader() -> Any:
    directory = Path(tempfile.mkdtemp(prefix="hc-", dir="/tmp"))
    path = directory / "r.sock"
    logger = RecordingLogger()
    service = ReaderService(lambda: FakeIndex(thread_corpus()), ReaderEmbedder, None, logger=logger)
    with Running(service, path):
        yield path, logger
    shutil.rmtree(directory, ignore_errors=True)


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_thread_requests_parse_round_trip_and_refuse_bad_fields():
    query = make_thread_query("$t1", 5, cursors.encode_listing(cursors.ListingPosition(1, "c", 0), "0" * 16))
    parsed = parse_request(json.dumps(thread_request(query, "r1")))
    assert isinstance(parsed, ThreadRequest) and parsed.query == query and parsed.id == "r1"
    for bad, field in (
        ({"event_id": "nope"}, "event_id"),
        ({"event_id": "$e", "top_k": 0}, "top_k"),
        ({"event_id": "$e", "cursor": 3}, "cursor"),
        ({"event_id": "$e", "cursor": "tok"}, "cursor"),
        ({"event_id": "$e", "before": 1}, "before"),
    ):
        with pytest.raises(ProtocolError) as refused:
            parse_request(json.dumps({"v": 1, "op": "thread", **bad}))
        assert refused.value.field == field


def test_cli_thread_lists_in_order_pages_and_audits(thread_reader):
    path, logger = thread_reader
    code, out, _ = cli(["search", "--thread", "$t2", "--top-k", "1", "--socket", str(path)])
    assert code == 0
    lines = out.splitlines()
    assert "thread $root" in lines[0] and "(root)" in lines[1] and "who owns the flaky login test?" in lines[1]
    assert lines[2].split()[0] == "$root"  # each message's event id (and permalink) below it
    assert "I do, looking now" in lines[3] and lines[4].split()[0] == "$t1"
    token = lines[-1].split("--cursor ")[1]
    code, out, _ = cli(["search", "--thread", "$root", "--cursor", token, "--json", "--socket", str(path)])
    page = json.loads(out)
    assert [m["event_id"] for m in page["messages"]] == ["$t2"] and page["next"] is None
    assert page["messages"][0]["reply_to"]["body"] == "I do, looking now"
    # Cited like a window: the room's name, and each message's (and the root's) permalink.
    assert "room_name" in page and page["root"]["permalink"].startswith("https://matrix.to/#/")
    assert page["messages"][0]["permalink"].startswith("https://matrix.to/#/") and page["messages"][0]["display_name"]
    audited = [fields for _, event, fields in logger.lines if event == "request_answered" and fields["op"] == "thread"]
    assert len(audited) == 2 and audited[1]["event_ids"] == ["$t2"] and audited[1]["continued"] is True
    assert "flaky" not in json.dumps(audited)  # the audit line names ids, never text


def test_cli_search_and_window_show_the_replied_to_message_and_the_thread_root(thread_reader):
    path, _ = thread_reader
    code, out, _ = cli(["search", "release waits", "--socket", str(path)])
    assert code == 0
    assert f"in reply to {BOB} (" in out and "the release branch is cut on mondays  [$old]" in out
    code, out, _ = cli(["window", "$t2", "--socket", str(path)])
    assert "in the thread of @alice:example.org" in out and "[$root]" in out
    assert "release" not in out  # a thread reply's neighbours are its thread, not the room's main timeline


@pytest.mark.parametrize(
    "extra", [["some text"], ["--room", "!a:example.org"], ["--sender", "@a:b"], ["--after", "2026-01-01"]]
)
def test_cli_thread_refuses_search_filters_exit_2(extra):
    code, out, err = cli(["search", "--thread", "$root", *extra, "--socket", "/tmp/hc-no-such-dir/r.sock"])
    assert code == 2 and out == "" and err.startswith("huginn-chat search: --thread: ")


def test_cli_thread_of_a_bad_or_unknown_id_names_thread(thread_reader):
    path, _ = thread_reader
    code, _, err = cli(["search", "--thread", "root", "--socket", str(path)])
    assert code == 2 and "event_id (--thread)" in err
    code, _, err = cli(["search", "--thread", "$nowhere", "--socket", str(path)])
    assert code == 2 and "event_id (--thread)" in err and "no thread" in err

"""Context rows: which messages of a window get a second dense row and what it holds
(``chunker.context``); how the index stores, checks and reuses them (``daemon.index.schema``);
how a search folds a context row into its message (``daemon.index.queries.message_scores``), on
every index backend; and that an edit or a redaction leaves no row made from the old text."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest
from hypothesis import given, strategies as st
from qdrant_client import QdrantClient

from chunker.context import CONTEXT_EARLIER_CHARS, CONTEXT_MAX_GAP_MS, addressee, context_rows
from chunker.windows import StoredMessage, Window, embed_line
from daemon.index import schema
from daemon.index.edge_reader import EdgeIndexReader
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.index.port import IndexMeta, SearchFilter, SparseVector, WindowPoint
from daemon.index.queries import message_scores
from daemon.index.remote_reader import RemoteIndexReader
from daemon.index.remote_writer import RemoteIndexWriter
from tests.fakes import FakeEmbedder, FakeMatrix, MemoryIndex, run_refresher

# qdrant-client's local mode (the remote backend here) has no payload indexes and searches exactly.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact"),
]

ROOM = "!room:example.org"
T0 = 1_700_000_000_000
MINUTE = 60_000


def msg(n: int, sender: str, body: str, minutes: float = 0, display_name: str | None = None) -> StoredMessage:
    return StoredMessage(f"${n}", f"@{sender}:example.org", T0 + int(minutes * MINUTE), body, None, display_name)


# ---------------------------------------------------------------------------------------------
# The rule (pure)


def test_an_answer_is_embedded_after_the_line_of_the_person_it_addresses():
    messages = [
        msg(0, "mc", "what program burns a cd from the command line?"),
        msg(1, "zed", "anyone around?", 1),
        msg(2, "gnea", "mc: cdrecord", 2),
    ]
    rows = context_rows(messages)
    assert rows == [
        (1, "mc: what program burns a cd from the command line?\nzed: anyone around?"),
        (2, "mc: what program burns a cd from the command line?\ngnea: mc: cdrecord"),
    ]


def test_the_addressee_is_found_by_display_name_in_any_case_and_else_the_line_before_is_taken():
    messages = [
        msg(0, "u123", "is the 2.6 kernel out?", display_name="Marta"),
        msg(1, "bob", "not yet", 1),
        msg(2, "cy", "MARTA, it is", 2),
        msg(3, "cy", "nobody: this names no one here", 3),
    ]
    rows = dict(context_rows(messages))
    assert rows[2] == "u123: is the 2.6 kernel out?\ncy: MARTA, it is"
    assert rows[3] == "cy: MARTA, it is\ncy: nobody: this names no one here"


def test_a_matrix_reply_is_embedded_after_the_message_it_replies_to_when_that_is_in_the_window():
    question = msg(0, "ann", "does the laser cutter need a new lens?")
    chatter = msg(1, "bob", "lunch anyone?", 1)
    reply = StoredMessage("$2", "@cy:example.org", T0 + 40 * MINUTE, "yes, order the 20 mm one", "$0")
    elsewhere = StoredMessage("$3", "@cy:example.org", T0 + 41 * MINUTE, "see above", "$gone")
    rows = dict(context_rows([question, chatter, reply, elsewhere]))
    # The reply's earlier line is its target, however long ago in the window it was said.
    assert rows[2] == "ann: does the laser cutter need a new lens?\ncy: yes, order the 20 mm one"
    # A reply to a message outside the window falls back to the line before.
    assert rows[3] == "cy: yes, order the 20 mm one\ncy: see above"
    # The stored payload reads back the same rows (a rewritten window reuses their vectors).
    payload = schema.window_payload(_window([question, chatter, reply, elsewhere]), room_alias=None, chat_version="v")
    assert schema.row_texts(payload)[4:] == [text for _, text in context_rows([question, chatter, reply, elsewhere])]


def test_no_row_for_a_window_s_first_message_nor_across_the_gap_of_a_new_conversation():
    messages = [
        msg(0, "ann", "first"),
        msg(1, "bob", "ann: after a long pause", CONTEXT_MAX_GAP_MS / MINUTE + 1),
        msg(2, "ann", "right after", CONTEXT_MAX_GAP_MS / MINUTE + 2),
    ]
    assert [i for i, _ in context_rows(messages)] == [2]
    assert context_rows([]) == [] and context_rows(messages[:1]) == []


def test_a_long_earlier_line_is_cut_so_the_message_stays_in_the_model_s_window():
    long_body = "x" * (CONTEXT_EARLIER_CHARS + 50)
    rows = context_rows([msg(0, "ann", long_body), msg(1, "bob", "ann: no")])
    assert rows == [(1, f"ann: {'x' * CONTEXT_EARLIER_CHARS}…\nbob: ann: no")]


def test_addressee_reads_a_leading_nick_only():
    assert addressee("Alice: try 2.6") == "alice"
    assert addressee("bob, yes") == "bob"
    assert addressee("http://example.org is down") is None
    assert addressee("no colon here") is None


names = st.sampled_from(["ann", "bob", "cy", "dee"])
bodies = st.one_of(
    st.text(min_size=0, max_size=40),
    st.builds(lambda n, rest: f"{n}: {rest}", names, st.text(min_size=1, max_size=20)),
)


@given(st.lists(st.tuples(names, bodies, st.integers(0, 40 * MINUTE), st.integers(-1, 12)), max_size=12))
def test_every_row_is_a_later_message_after_an_earlier_line_of_the_same_window(raw):
    messages, ts = [], T0
    for n, (sender, body, step, replies_to) in enumerate(raw):
        ts += step
        reply_to = f"${replies_to}" if replies_to >= 0 else None  # earlier, itself, later or absent
        messages.append(StoredMessage(f"${n}", f"@{sender}:example.org", ts, body, reply_to))
    rows = context_rows(messages)
    assert [i for i, _ in rows] == sorted({i for i, _ in rows})
    for i, text in rows:
        assert 0 < i < len(messages)
        assert text.endswith("\n" + embed_line(messages[i]))
        head = text[: -len(embed_line(messages[i])) - 1]
        candidates = [
            m for m in messages[:i] if messages[i].ts - m.ts <= CONTEXT_MAX_GAP_MS or m.event_id == messages[i].reply_to
        ]
        assert any(head in (embed_line(m), embed_line(m)[: len(head) - 1] + "…") for m in candidates)


# ---------------------------------------------------------------------------------------------
# Stored, checked, folded


def _window(messages: Sequence[StoredMessage]) -> Window:
    return Window(ROOM, messages[0].event_id, list(messages))


def test_the_payload_lists_the_message_of_each_context_row_and_row_texts_follow_it():
    w = _window([msg(0, "ann", "which program burns a cd?"), msg(1, "bob", "ann: cdrecord", 1)])
    payload = schema.window_payload(w, room_alias=None, chat_version="v")
    assert payload[schema.CONTEXT_OF] == [1]
    assert schema.row_texts(payload) == [
        "ann: which program burns a cd?",
        "bob: ann: cdrecord",
        "ann: which program burns a cd?\nbob: ann: cdrecord",
    ]
    # A payload written before context rows (no list), or one whose list is wrong, reads as one
    # row per message: a stored row is never taken for another text.
    for bad in (None, [0], [1, 1], [5], ["1"], [True], "1"):
        old = {k: v for k, v in payload.items() if k != schema.CONTEXT_OF}
        if bad is not None:
            old[schema.CONTEXT_OF] = bad
        assert schema.context_of(old, 2) == ()
        assert schema.row_texts(old) == ["ann: which program burns a cd?", "bob: ann: cdrecord"]


def test_a_context_row_counts_as_its_message_s_similarity_and_names_that_message():
    # rows: message 0, message 1, then message 1's context row
    stored = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert message_scores([0.0, 0.0, 1.0], stored, 2, (1,)) == pytest.approx((0.0, 1.0))
    assert message_scores([1.0, 0.0, 0.0], stored, 2, (1,)) == pytest.approx((1.0, 0.0))
    # Rows that do not match messages plus context rows name no message rather than a wrong one.
    assert message_scores([0.0, 0.0, 1.0], stored, 2) == ()
    assert message_scores([0.0, 0.0, 1.0], stored[:2], 2, (1,)) == ()


DIM = 3
META = IndexMeta(model="test-model", dim=DIM, chat_version="c1")


def _point(vectors: list[list[float]], w: Window) -> WindowPoint:
    payload = schema.window_payload(w, room_alias=None, chat_version="c1")
    return WindowPoint(w.point_id, vectors, SparseVector((1,), (1.0,)), payload)


@pytest.fixture(params=["edge", "remote", "memory"])
def backend(request, tmp_path: Path):
    if request.param == "remote":
        client = QdrantClient(":memory:")
        remote = RemoteIndexWriter(client, "context")
        remote.reset(META)
        yield remote, lambda: RemoteIndexReader(client, "context")
        client.close()
        return
    if request.param == "memory":
        index = MemoryIndex()
        index.reset(META)
        yield index, lambda: index
        return
    writer = EdgeIndexWriter(tmp_path / "index")
    writer.reset(META)
    opened = []

    def read():
        writer.commit()
        opened.append(EdgeIndexReader.open_latest(tmp_path / "index", tmp_path / f"private{len(opened)}"))
        return opened[-1]

    yield writer, read
    for reader in opened:
        reader.close()
    writer.close()


def test_a_search_like_the_exchange_finds_the_answer_by_its_context_row_and_cites_the_answer(backend):
    writer, read = backend
    question = msg(0, "ann", "which program burns a cd from the terminal?")
    answer = msg(1, "bob", "ann: cdrecord", 1)
    exchange = _window([question, answer])
    other = Window(ROOM, "$9", [msg(9, "cy", "lunch?", 30), msg(10, "dee", "cy: yes", 31)])
    # ann's line, bob's line, bob's context row; the other window's two lines and its context row
    writer.write_windows(ROOM, [_point([[1, 0, 0], [0, 1, 0], [0.6, 0, 0.8]], exchange)], [])
    writer.write_windows(ROOM, [_point([[0.8, 0.6, 0], [0.7, 0.7, 0.1], [0.6, 0.6, 0.5]], other)], [])
    with pytest.raises(ValueError, match=r"dense has 2 vectors for 2 messages and 1 context rows"):
        writer.write_windows(ROOM, [_point([[1, 0, 0], [0, 1, 0]], exchange)], [])
    wrong = _point([[1, 0, 0], [0, 1, 0], [0.6, 0, 0.8]], exchange)
    wrong.payload[schema.CONTEXT_OF] = [5]
    with pytest.raises(ValueError, match=r"upserts\[0\]\.payload\.context_of must list ascending message indexes"):
        writer.write_windows(ROOM, [wrong], [])
    hits = read().hybrid([0, 0, 1], SparseVector((), ()), SearchFilter(), 2)
    assert [h.window.messages[0].event_id for h in hits] == ["$0", "$9"]
    assert hits[0].message_scores == pytest.approx((0.0, 0.8))  # the answer, through its context row


# ---------------------------------------------------------------------------------------------
# No row outlives the text it was made from


def _stored_rows(index: EdgeIndexWriter) -> set[str]:
    return set(index.message_vectors([str(r.id) for r in index._scroll([schema.IS_WINDOW])]))


def test_a_redacted_earlier_line_leaves_no_row_and_the_answer_gets_a_row_from_what_is_left(tmp_path: Path):
    hs = FakeMatrix()
    hs.add_room(ROOM)
    hs.send(ROOM, "@bob:example.org", "morning all")
    secret = hs.send(ROOM, "@ann:example.org", "my old address is 12 canary lane")
    hs.send(ROOM, "@bob:example.org", "ann: noted")
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        run_refresher(hs, index, FakeEmbedder(), [ROOM], page_size=50)
        assert any("canary" in row for row in _stored_rows(index))
        hs.redact(ROOM, "@ann:example.org", secret)
        embedder = FakeEmbedder()
        run_refresher(hs, index, embedder, [ROOM], page_size=50)
        rows = _stored_rows(index)
    finally:
        index.close()
    assert not any("canary" in row for row in rows)
    assert "bob: morning all\nbob: ann: noted" in rows
    assert embedder.embedded == ["bob: morning all\nbob: ann: noted"]


def test_a_refresh_embeds_a_matrix_reply_after_the_message_it_answers(tmp_path: Path):
    hs = FakeMatrix()
    hs.add_room(ROOM)
    question = hs.send(ROOM, "@ann:example.org", "does the laser cutter need a new lens?")
    hs.send(ROOM, "@bob:example.org", "lunch anyone?")
    hs.send(ROOM, "@cy:example.org", "yes, the 20 mm one", relates_to={"m.in_reply_to": {"event_id": question}})
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        run_refresher(hs, index, FakeEmbedder(), [ROOM], page_size=50)
        rows = _stored_rows(index)
    finally:
        index.close()
    assert "ann: does the laser cutter need a new lens?\ncy: yes, the 20 mm one" in rows
    assert "bob: lunch anyone?\ncy: yes, the 20 mm one" not in rows

"""The index port's contract, run against every backend: Qdrant Edge (a real shard in a temp dir,
read through a published generation), the remote adapter on qdrant-client local mode (":memory:",
the same qdrant_client.models a server speaks) and the in-memory fake of tests/fakes.py.

What a backend alone does (publishing generations, the writer lock, transport faults) is tested
in test_index_edge.py and test_index_remote*.py."""

from __future__ import annotations

import math
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from qdrant_client import QdrantClient

from daemon.index import edge, schema
from daemon.index.edge_reader import EdgeIndexReader
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.index.port import (
    IndexMeta,
    RoomCursor,
    RoomEntry,
    ScoredWindow,
    SearchFilter,
    SparseVector,
    StoredWindow,
    WindowPoint,
)
from daemon.index.remote_reader import RemoteIndexReader
from daemon.index.remote_writer import RemoteIndexWriter
from tests.fakes import MemoryIndex

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect")

DIM = 4
META = IndexMeta(model="test-model", dim=DIM, chat_version="c1")
ROOM_A, ROOM_B, ROOM_C = "!a:example.org", "!b:example.org", "!c:example.org"
EVERYTHING = SearchFilter()
ANCHOR_OF: dict[str, str] = {}  # chunk id -> anchor, to name what a reader returns


def unit(i: int, j: int | None = None) -> list[float]:
    vector = [0.0] * DIM
    vector[i] = 1.0
    if j is not None:
        vector[j] = 0.5
    return vector


def window(
    room: str,
    anchor: str,
    ts_start: int,
    *,
    ts_end: int | None = None,
    events: tuple[str, ...] | None = None,
    senders: tuple[str, ...] = ("@ann:example.org",),
    redacted: tuple[str, ...] = (),
    dense: list[float] | list[list[float]] | None = None,
    terms: dict[int, float] | None = None,
    alias: str | None = None,
    empty: bool = False,
    thread: str | None = None,
) -> WindowPoint:
    point_id = str(uuid.uuid5(uuid.NAMESPACE_URL, room + "/" + anchor))
    ANCHOR_OF[point_id] = anchor
    event_ids = [] if empty else list(events or (anchor,))
    payload = {
        schema.ROOM_ID: room,
        schema.ROOM_ALIAS: alias,
        schema.CHUNK_ID: point_id,
        schema.ANCHOR_ID: anchor,
        schema.TS_START: ts_start,
        schema.TS_END: ts_start if ts_end is None else ts_end,
        schema.EVENT_IDS: event_ids,
        schema.SENDERS: [] if empty else list(senders),
        schema.REDACTED_IDS: list(redacted),
        schema.N_MESSAGES: len(event_ids),
        schema.THREAD_ROOT: thread,
        schema.TIMELINE: schema.timeline_of(thread),
        schema.MESSAGES: [
            {"event_id": e, "sender": senders[0], "ts": ts_start, "body": f"body {e}"} for e in event_ids
        ],
    }
    if empty:
        return WindowPoint(point_id, None, None, payload)
    terms = {7: 1.0} if terms is None else terms
    # One vector per message: rows as given, or the one vector given (unit(0) by default) for each.
    rows = dense if dense and isinstance(dense[0], list) else [dense or unit(0)] * len(event_ids)
    return WindowPoint(point_id, rows, SparseVector(tuple(terms), tuple(terms.values())), payload)


def names(rows: list[Any]) -> list[str]:
    """The anchors of payloads (writer reads), stored windows or scored hits (reader reads)."""
    out = []
    for row in rows:
        if isinstance(row, ScoredWindow):
            row = row.window
        out.append(ANCHOR_OF[row.chunk_id] if isinstance(row, StoredWindow) else row[schema.ANCHOR_ID])
    return out


QUERY = (unit(0), SparseVector((7,), (1.0,)))


# --- the backends ----------------------------------------------------------------------------


class Backend:
    """A writer after ``reset(META)``; ``read()`` gives a reader that sees every write so far;
    ``fresh()`` a writer on an index never reset."""

    def __init__(self, writer: Any, read: Callable[[], Any], fresh: Callable[[], Any]):
        self.writer, self.read, self.fresh = writer, read, fresh


@pytest.fixture(scope="module")
def edge_template(tmp_path_factory) -> Path:
    """An Edge root just after reset(META), made once: the payload indexes cost a second of fsyncs."""
    template = tmp_path_factory.mktemp("template") / "index"
    with EdgeIndexWriter(template) as w:
        w.reset(META)
    return template


# The Edge variant is `slow`: each test opens a shard and publishes what it reads (half a second to
# a second a test); `make check` runs the contract over the server adapter and the fake, and
# test_index_edge.py keeps the embedded shard in the fast loop.
@pytest.fixture(params=[pytest.param("edge", marks=pytest.mark.slow), "remote", "fake"])
def ix(request, tmp_path: Path) -> Backend:
    if request.param == "edge":
        template = request.getfixturevalue("edge_template")
        root = tmp_path / "index"
        root.mkdir()
        edge.copy_tree(template / "work", root / "work", durable=False)
        shutil.copy(template / "work.unpublished", root / "work.unpublished")
        writer = EdgeIndexWriter(root)
        opened: list[Any] = [writer]

        def read() -> EdgeIndexReader:
            writer.commit()
            reader = EdgeIndexReader.open_latest(root, tmp_path / f"private{len(opened)}")
            opened.append(reader)
            return reader

        def fresh() -> EdgeIndexWriter:
            opened.append(EdgeIndexWriter(tmp_path / "fresh"))
            return opened[-1]

        yield Backend(writer, read, fresh)
        for thing in reversed(opened):
            thing.close()
    elif request.param == "remote":
        client = QdrantClient(":memory:")
        writer = RemoteIndexWriter(client, "contract")
        writer.reset(META)
        yield Backend(writer, lambda: RemoteIndexReader(client, "contract"), lambda: RemoteIndexWriter(client, "fresh"))
        client.close()
    else:
        fake = MemoryIndex()
        fake.reset(META)
        yield Backend(fake, lambda: fake, MemoryIndex)


# --- meta and reset --------------------------------------------------------------------------


def test_meta_is_none_before_reset_and_the_meta_after(ix: Backend):
    fresh = ix.fresh()
    assert fresh.read_meta() is None
    fresh.reset(META)
    assert fresh.read_meta() == META and sum(fresh.window_counts().values()) == 0
    assert ix.read().read_meta() == META


def test_reset_wipes_windows_and_cursors_and_changes_the_dimension(ix: Backend):
    ix.writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    ix.writer.set_cursor(RoomCursor(ROOM_A, "t1", "$a1", None, "c1"))
    bigger = IndexMeta(model="other", dim=8, chat_version="c2")
    ix.writer.reset(bigger)
    assert ix.writer.read_meta() == bigger
    assert sum(ix.writer.window_counts().values()) == 0 and ix.writer.get_cursor(ROOM_A) is None
    message = {"event_id": "$x", "sender": "@x:y", "ts": 1, "body": "x"}
    payload = {schema.ROOM_ID: ROOM_A, schema.ANCHOR_ID: "$x", schema.MESSAGES: [message]}
    point = WindowPoint(str(uuid.uuid4()), [[1.0] + [0.0] * 7], None, payload)
    ix.writer.write_windows(ROOM_A, [point], [])
    assert names(ix.writer.get_windows([point.point_id])) == ["$x"]


def test_meta_entries_round_trip_json_values_and_refuse_what_reset_owns(ix: Backend):
    value = {"spans": [[1, 2], [3, 4]], "note": "ok", "none": None, "big": 1_700_000_000_000}
    ix.writer.set_meta_entry(schema.purge_key(ROOM_A), value)
    ix.writer.set_meta_entry(schema.purge_key(ROOM_B), [[1, 5]])
    ix.writer.set_meta_entry(schema.purge_key(ROOM_B), [[6, 9]])
    assert ix.writer.get_meta_entry(schema.purge_key(ROOM_A)) == value
    assert ix.writer.get_meta_entry(schema.purge_key(ROOM_B)) == [[6, 9]]
    assert ix.writer.get_meta_entry("absent") is None
    with pytest.raises(ValueError, match="written only by reset"):
        ix.writer.set_meta_entry(schema.META_INDEX, {"model": "other", "dim": 4, "chat_version": "c9"})
    for bad in ({"when": object()}, {"ratio": float("nan")}):
        with pytest.raises(ValueError, match="not JSON-serialisable"):
            ix.writer.set_meta_entry("bad", bad)
    with pytest.raises(ValueError, match="meta key"):
        ix.writer.get_meta_entry("")
    assert ix.writer.get_meta_entry("bad") is None and ix.writer.read_meta() == META


# --- windows ---------------------------------------------------------------------------------


def test_write_get_and_delete_windows(ix: Backend):
    first, second, third = (window(ROOM_A, f"$a{i}", 100 * i) for i in (1, 2, 3))
    ix.writer.write_windows(ROOM_A, [first, second, third], [])
    assert sum(ix.writer.window_counts().values()) == 3
    got = ix.writer.get_windows([third.point_id, str(uuid.uuid4()), first.point_id])
    assert names(got) == ["$a3", "$a1"]  # requested order, unknown ids skipped
    assert got[1] == {**first.payload, schema.KIND: "window", schema.CORPUS: "chat"}
    ix.writer.write_windows(ROOM_A, [window(ROOM_A, "$a4", 400)], [second.point_id])
    assert ix.writer.window_counts().get(ROOM_A, 0) == 3
    assert ix.writer.get_windows([second.point_id]) == []


def test_deletes_only_touch_the_named_rooms_windows(ix: Backend):
    theirs = window(ROOM_B, "$b1", 100)
    ix.writer.write_windows(ROOM_B, [theirs], [])
    ix.writer.set_cursor(RoomCursor(ROOM_A, "t1", "$a1", None, "c1"))
    ix.writer.write_windows(ROOM_A, [], [theirs.point_id, schema.meta_point_id(schema.cursor_key(ROOM_A))])
    assert ix.writer.window_counts().get(ROOM_B, 0) == 1
    assert ix.writer.get_cursor(ROOM_A) is not None


def test_meta_points_never_come_back_from_window_reads(ix: Backend):
    ix.writer.set_cursor(RoomCursor(ROOM_A, "t1", "$a1", None, "c1"))
    ix.writer.set_meta_entry(schema.purge_key(ROOM_A), [[0, 10**13]])
    assert sum(ix.writer.window_counts().values()) == 0
    assert ix.writer.get_windows([schema.meta_point_id(schema.cursor_key(ROOM_A))]) == []
    assert ix.writer.windows_in_span(ROOM_A, 0, 10**13) == []
    reader = ix.read()
    assert reader.listing(EVERYTHING, None, 10) == [] and reader.hybrid(*QUERY, EVERYTHING, 10) == []
    assert reader.room_aliases() == {} and reader.window_counts() == {}


def test_windows_with_events_matches_event_and_redacted_ids_in_one_room(ix: Backend):
    ix.writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$a1", 100, events=("$a1", "$a2")),
            window(ROOM_A, "$a3", 300, redacted=("$gone",)),
            window(ROOM_A, "$a4", 400),
        ],
        [],
    )
    ix.writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 100, events=("$a2",))], [])
    assert names(ix.writer.windows_with_events(ROOM_A, ["$a2", "$gone", "$nowhere"])) == ["$a1", "$a3"]
    assert ix.writer.windows_with_events(ROOM_A, []) == []


def test_windows_in_span_uses_overlap(ix: Backend):
    ix.writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$early", 100, ts_end=190),
            window(ROOM_A, "$overlap", 150, ts_end=260),
            window(ROOM_A, "$inside", 210, ts_end=220),
            window(ROOM_A, "$late", 400, ts_end=500),
        ],
        [],
    )
    assert names(ix.writer.windows_in_span(ROOM_A, 200, 300)) == ["$overlap", "$inside"]
    assert ix.writer.windows_in_span(ROOM_B, 0, 10**13) == []
    with pytest.raises(ValueError, match="ts_from"):
        ix.writer.windows_in_span(ROOM_A, 300, 200)


def test_empty_window_is_stored_but_never_searched_or_cited(ix: Backend):
    gone = window(ROOM_A, "$gone", 100, empty=True, redacted=("$gone",))
    ix.writer.write_windows(ROOM_A, [gone, window(ROOM_A, "$a2", 200)], [])
    assert names(ix.writer.get_windows([gone.point_id])) == ["$gone"]
    assert names(ix.writer.windows_with_events(ROOM_A, ["$gone"])) == ["$gone"]
    reader = ix.read()
    assert names(reader.hybrid(*QUERY, EVERYTHING, 10)) == ["$a2"]
    assert names(reader.listing(EVERYTHING, None, 10)) == ["$a2"]
    assert reader.window_of_event("$gone") is None
    assert reader.window_counts() == {ROOM_A: 2}


# --- cursors and rooms -----------------------------------------------------------------------


def test_cursor_round_trip_and_overwrite(ix: Backend):
    assert ix.writer.get_cursor(ROOM_A) is None
    first = RoomCursor(ROOM_A, "s123_4", "$last", None, "c1", updated_ms=1_700_000_000_123)
    ix.writer.set_cursor(first)
    assert ix.writer.get_cursor(ROOM_A) == first
    moved = RoomCursor(ROOM_A, "s200_1", "$later", str(uuid.uuid4()), "c1", updated_ms=5)
    ix.writer.set_cursor(moved)
    ix.writer.set_cursor(RoomCursor(ROOM_B, "t", "$b", None, "c1"))
    assert ix.writer.get_cursor(ROOM_A) == moved
    assert ix.read().cursors() == {ROOM_A: moved, ROOM_B: RoomCursor(ROOM_B, "t", "$b", None, "c1")}


def test_rooms_with_data_counts_cursors_and_windows_not_purge_records(ix: Backend):
    ix.writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    ix.writer.set_cursor(RoomCursor(ROOM_B, "t", "$b", None, "c1"))
    ix.writer.set_meta_entry(schema.purge_key(ROOM_C), [])
    assert ix.writer.rooms_with_data() == {ROOM_A, ROOM_B}


def test_purge_room_drops_windows_and_cursor_of_that_room_only(ix: Backend):
    ix.writer.write_windows(ROOM_A, [window(ROOM_A, f"$a{i}", i) for i in range(5)], [])
    ix.writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 1)], [])
    ix.writer.set_cursor(RoomCursor(ROOM_A, "t", "$a4", None, "c1"))
    ix.writer.set_cursor(RoomCursor(ROOM_B, "t", "$b1", None, "c1"))
    ix.writer.set_meta_entry(schema.purge_key(ROOM_A), [[1, 2]])
    assert ix.writer.purge_room(ROOM_A) == 5
    assert ix.writer.window_counts().get(ROOM_A, 0) == 0 and sum(ix.writer.window_counts().values()) == 1
    assert ix.writer.get_cursor(ROOM_A) is None and ix.writer.get_cursor(ROOM_B) is not None
    assert ix.writer.get_meta_entry(schema.purge_key(ROOM_A)) == [[1, 2]]
    assert ix.writer.rooms_with_data() == {ROOM_B}
    assert ix.writer.purge_room(ROOM_A) == 0
    assert ix.writer.read_meta() == META


def test_room_directory_entries_are_read_by_id_or_all_and_go_with_a_purge(ix: Backend):
    lobby = RoomEntry(ROOM_A, name="Lobby", canonical_alias="#lobby:e", alt_aliases=("#hall:e",), via=("e", "f"))
    garden = RoomEntry(ROOM_B, canonical_alias="#garden:e", allowed_as=("#garden:e",))
    for entry in (lobby, garden):
        ix.writer.set_meta_entry(schema.room_entry_key(entry.room_id), schema.room_entry_value(entry))
    ix.writer.set_cursor(RoomCursor(ROOM_A, "t", "$a", None, "c1"))
    ix.writer.write_windows(ROOM_C, [window(ROOM_C, "$c1", 1)], [])
    assert ix.writer.rooms_with_data() == {ROOM_A, ROOM_B, ROOM_C}  # an entry alone is data to purge
    reader = ix.read()
    assert reader.room_directory() == {ROOM_A: lobby, ROOM_B: garden}
    assert reader.room_directory([ROOM_B, ROOM_C]) == {ROOM_B: garden}
    assert reader.room_directory([]) == {}
    ix.writer.purge_room(ROOM_B)
    ix.writer.purge_room(ROOM_A)
    assert ix.writer.rooms_with_data() == {ROOM_C}
    assert ix.read().room_directory() == {}


# --- search ----------------------------------------------------------------------------------


def test_hybrid_applies_the_filter_inside_each_leg_before_ranking(ix: Backend):
    strong = [window(ROOM_A, f"$a{i}", 100 + i, terms={7: 2.0}) for i in range(60)]
    weak = window(ROOM_B, "$b1", 100, dense=unit(1, 0), terms={7: 0.5, 8: 3.0}, senders=("@bob:x",))
    ix.writer.write_windows(ROOM_A, strong, [])
    ix.writer.write_windows(ROOM_B, [weak], [])
    reader = ix.read()
    only_b = reader.hybrid(*QUERY, SearchFilter(room_ids=(ROOM_B,)), 1)
    assert names(only_b) == ["$b1"] and only_b[0].legs == ("dense", "lexical")
    by_sender = reader.lexical(QUERY[1], SearchFilter(senders=("@bob:x",)), 1)
    assert names(by_sender) == ["$b1"] and by_sender[0].legs == ("lexical",)
    in_time = reader.hybrid(*QUERY, SearchFilter(after_ms=150, before_ms=155), 10)
    assert sorted(names(in_time)) == [f"$a{i}" for i in range(50, 56)]


def test_hybrid_scores_are_weighted_min_max_of_the_legs(ix: Backend):
    ix.writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$top", 10, terms={7: 2.0}),
            window(ROOM_A, "$dense-only", 20, dense=unit(0, 1), terms={9: 1.0}),
        ],
        [],
    )
    hits = ix.read().hybrid(*QUERY, EVERYTHING, 5)
    assert names(hits) == ["$top", "$dense-only"]
    assert hits[0].score == pytest.approx(sum(schema.LEG_WEIGHTS.values()))  # best in both legs
    assert hits[1].score == pytest.approx(0.0)  # the deepest dense candidate, in no other leg
    assert hits[0].legs == ("dense", "lexical") and hits[1].legs == ("dense",)


def test_an_exact_identifier_beats_a_window_merely_about_the_same_thing(ix: Backend):
    # "about" wins the dense leg and is second by words; "exact" wins by words and is second by
    # meaning. With equal leg weights that is a tie, and the better lexical rank breaks it: the
    # exact identifier comes first, whatever the ids say.
    for trial in range(3):
        about = window(ROOM_A, f"$about{trial}", 100, terms={7: 0.5})
        exact = window(ROOM_A, f"$exact{trial}", 101, dense=unit(0, 1), terms={7: 2.0})
        ix.writer.write_windows(ROOM_A, [about, exact], [])
        hits = ix.read().hybrid(*QUERY, EVERYTHING, 2)
        assert names(hits) == [f"$exact{trial}", f"$about{trial}"]
        ix.writer.write_windows(ROOM_A, [], [about.point_id, exact.point_id])


def test_the_weights_a_query_names_decide_which_leg_counts_more(ix: Backend):
    # The tie above, with weights per leg: the leg weighted double wins it, on every backend, and
    # a fused score is the weighted sum of the min-max scaled leg scores.
    about = window(ROOM_A, "$about", 100, terms={7: 0.5})
    exact = window(ROOM_A, "$exact", 101, dense=unit(0, 1), terms={7: 2.0})
    ix.writer.write_windows(ROOM_A, [about, exact], [])
    by_meaning = ix.read().hybrid(*QUERY, EVERYTHING, 2, weights={"dense": 2.0, "lexical": 1.0})
    assert names(by_meaning) == ["$about", "$exact"]
    assert [h.score for h in by_meaning] == pytest.approx([2.0, 1.0])
    by_words = ix.read().hybrid(*QUERY, EVERYTHING, 2, weights={"dense": 1.0, "lexical": 2.0})
    assert names(by_words) == ["$exact", "$about"]
    assert [h.score for h in by_words] == pytest.approx([2.0, 1.0])


def test_a_window_ranks_by_its_best_message_and_says_which_message_that_was(ix: Backend):
    # "$many" holds three messages, one of them exactly the query; "$one" holds a single message
    # near it. A window vector (the mean) would put "$one" first; each message's own vector, the
    # best one counting (MaxSim), puts "$many" first and names its second message.
    many = window(ROOM_A, "$many", 10, events=("$m1", "$m2", "$m3"), dense=[unit(1), unit(0), unit(2)], terms={9: 1.0})
    one = window(ROOM_A, "$one", 20, dense=unit(0, 1), terms={9: 1.0})
    ix.writer.write_windows(ROOM_A, [many, one], [])
    hits = ix.read().hybrid(unit(0), SparseVector((), ()), EVERYTHING, 5)
    assert names(hits) == ["$many", "$one"]
    assert hits[0].message_scores == pytest.approx((0.0, 1.0, 0.0))
    assert hits[1].message_scores == pytest.approx((2 / math.sqrt(5),))
    # the lexical leg alone knows no message vectors
    assert ix.read().lexical(SparseVector((9,), (1.0,)), EVERYTHING, 5)[0].message_scores == ()


def test_message_vectors_give_back_each_stored_line_and_its_vector(ix: Backend):
    two = window(ROOM_A, "$two", 10, events=("$t1", "$t2"), dense=[unit(1), unit(2)])
    ix.writer.write_windows(ROOM_A, [two, window(ROOM_A, "$empty", 20, empty=True)], [])
    found = ix.writer.message_vectors([two.point_id, str(uuid.uuid4())])
    assert found.keys() == {"ann: body $t1", "ann: body $t2"}
    assert found["ann: body $t1"] == pytest.approx(unit(1)) and found["ann: body $t2"] == pytest.approx(unit(2))
    assert ix.writer.message_vectors([]) == {}
    with pytest.raises(ValueError, match=r"point_ids\[0\]"):
        ix.writer.message_vectors(["nope"])


def test_a_window_needs_one_vector_per_message(ix: Backend):
    two = window(ROOM_A, "$two", 10, events=("$t1", "$t2"))
    for rows, match in (
        ([unit(0)], r"upserts\[0\]\.dense has 1 vectors for 2 messages"),
        (unit(0), r"upserts\[0\]\.dense must be a list of vectors \(one per message\)"),
        ([unit(0), [1.0, 0.0]], r"upserts\[0\]\.dense\[1\] has 2 dimensions, the index has 4"),
    ):
        with pytest.raises(ValueError, match=match):
            ix.writer.write_windows(ROOM_A, [WindowPoint(two.point_id, rows, two.sparse, two.payload)], [])
    assert sum(ix.writer.window_counts().values()) == 0


def test_hybrid_with_no_known_terms_uses_the_dense_leg_alone(ix: Backend):
    ix.writer.write_windows(ROOM_A, [window(ROOM_A, "$a", 10)], [])
    reader = ix.read()
    hits = reader.hybrid(unit(0), SparseVector((), ()), EVERYTHING, 3)
    assert names(hits) == ["$a"] and hits[0].legs == ("dense",)
    assert reader.lexical(SparseVector((), ()), EVERYTHING, 3) == []


def test_search_filters_senders_and_time(ix: Backend):
    ix.writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$old", 10, ts_end=15, senders=("@x:e",)),
            window(ROOM_A, "$mid", 20, ts_end=25, senders=("@y:e",)),
            window(ROOM_A, "$new", 30, ts_end=35, senders=("@x:e",)),
        ],
        [],
    )
    reader = ix.read()
    assert sorted(names(reader.hybrid(*QUERY, SearchFilter(senders=("@x:e",)), 10))) == ["$new", "$old"]
    assert names(reader.hybrid(*QUERY, SearchFilter(after_ms=16, before_ms=29), 10)) == ["$mid"]
    assert names(reader.listing(SearchFilter(after_ms=25), None, 10)) == ["$mid", "$new"]
    assert sorted(names(reader.lexical(QUERY[1], SearchFilter(before_ms=20), 10))) == ["$mid", "$old"]
    assert names(reader.listing(SearchFilter(senders=()), None, 10)) == ["$old", "$mid", "$new"]


def test_an_empty_room_tuple_matches_nothing_while_none_matches_all(ix: Backend):
    ix.writer.write_windows(ROOM_A, [window(ROOM_A, "$a", 10)], [])
    reader = ix.read()
    nothing = SearchFilter(room_ids=())
    assert reader.hybrid(*QUERY, nothing, 10) == [] and reader.lexical(QUERY[1], nothing, 10) == []
    assert reader.listing(nothing, None, 10) == []
    assert names(reader.hybrid(*QUERY, SearchFilter(room_ids=None), 10)) == ["$a"]


# --- listing, windows around an event, aliases -----------------------------------------------


def test_listing_pages_exactly_once_through_many_equal_ts_start(ix: Backend):
    stamps = [1000, 2000, 2000, 3000]
    for room in (ROOM_A, ROOM_B, ROOM_C):
        ix.writer.write_windows(room, [window(room, f"$w{room}{i}", stamps[i % 4]) for i in range(40)], [])
    reader = ix.read()
    for flt, expected in ((EVERYTHING, 120), (SearchFilter(room_ids=(ROOM_A, ROOM_C)), 80)):
        seen: list[StoredWindow] = []
        after = None
        while page := reader.listing(flt, after, 7):
            assert len(page) <= 7
            seen += page
            after = (page[-1].ts_start, page[-1].chunk_id)
        keys = [(w.ts_start, w.chunk_id) for w in seen]
        assert len(keys) == expected and keys == sorted(set(keys))


def test_newest_first_listing_pages_exactly_once_and_is_the_reverse_of_oldest_first(ix: Backend):
    stamps = [1000, 2000, 2000, 3000]
    for room in (ROOM_A, ROOM_B, ROOM_C):
        ix.writer.write_windows(room, [window(room, f"$w{room}{i}", stamps[i % 4]) for i in range(40)], [])
    reader = ix.read()
    for flt, expected in ((EVERYTHING, 120), (SearchFilter(room_ids=(ROOM_A, ROOM_C)), 80)):
        pages: dict[bool, list[tuple[int, str]]] = {}
        for descending in (False, True):
            seen: list[StoredWindow] = []
            after = None
            while page := reader.listing(flt, after, 7, descending=descending):
                assert len(page) <= 7
                seen += page
                after = (page[-1].ts_start, page[-1].chunk_id)
            pages[descending] = [(w.ts_start, w.chunk_id) for w in seen]
        assert len(pages[True]) == expected and pages[True] == sorted(set(pages[True]), reverse=True)
        assert pages[True] == pages[False][::-1]


def test_newest_first_goes_by_each_windows_newest_message_and_pages_exactly_once(ix: Backend):
    """A conversation that began first but was answered last is the newest; equal newest
    messages page without repeat or skip."""
    ends = [5000, 2000, 2000, 3000]
    for room in (ROOM_A, ROOM_B):
        ix.writer.write_windows(
            room, [window(room, f"$n{room}{i}", 100 + i, ts_end=ends[i % 4]) for i in range(30)], []
        )
    reader = ix.read()
    seen: list[StoredWindow] = []
    after = None
    while page := reader.listing(EVERYTHING, after, 4, descending=True):
        seen += page
        after = (page[-1].ts_end, page[-1].chunk_id)
    keys = [(w.ts_end, w.chunk_id) for w in seen]
    assert len(keys) == 60 and keys == sorted(set(keys), reverse=True)
    assert seen[0].ts_end == 5000 and seen[0].ts_start < max(w.ts_start for w in seen)


def test_window_of_event_and_neighbours(ix: Backend):
    room_a = [window(ROOM_A, f"$a{i}", i * 100, events=(f"$a{i}", f"$a{i}x")) for i in range(1, 8)]
    ix.writer.write_windows(ROOM_A, [*room_a, window(ROOM_A, "$gone", 350, empty=True)], [])
    ix.writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 350)], [])
    reader = ix.read()
    cited = reader.window_of_event("$a4x")
    assert names([cited]) == ["$a4"] and cited.room_id == ROOM_A
    assert [m.event_id for m in cited.messages] == ["$a4", "$a4x"]
    assert reader.window_of_event("$nope") is None
    assert names(reader.neighbours(ROOM_A, 400, 2, 2)) == ["$a2", "$a3", "$a5", "$a6"]  # $gone skipped
    assert names(reader.neighbours(ROOM_A, 400, 0, 1)) == ["$a5"]
    assert names(reader.neighbours(ROOM_A, 150, 5, 0)) == ["$a1"]


def test_neighbours_across_equal_ts_start_are_the_nearest_by_chunk_id(ix: Backend):
    tied = [window(ROOM_A, f"$t{i}", 100) for i in range(6)]
    ix.writer.write_windows(ROOM_A, [*tied, window(ROOM_A, "$late", 200)], [])
    in_order = [p.payload[schema.ANCHOR_ID] for p in sorted(tied, key=lambda p: p.payload[schema.CHUNK_ID])]
    reader = ix.read()
    for _ in range(3):  # the same answer every time, never a pick by chance
        assert names(reader.neighbours(ROOM_A, 200, 2, 0)) == in_order[-2:]
        assert names(reader.neighbours(ROOM_A, 50, 0, 2)) == in_order[:2]
        assert names(reader.neighbours(ROOM_A, 100, 1, 1)) == ["$late"]


def test_threads_list_apart_page_exactly_once_and_keep_neighbours_in_their_timeline(ix: Backend):
    main = [window(ROOM_A, f"$m{i}", i * 100) for i in range(1, 6)]
    stamps = [150, 250, 250, 250, 450, 450]
    thread = [window(ROOM_A, f"$t{i}", ts, thread="$m1") for i, ts in enumerate(stamps)]
    other = [window(ROOM_B, "$o1", 250, thread="$b-root")]
    ix.writer.write_windows(ROOM_A, [*main, *thread, window(ROOM_A, "$tgone", 300, empty=True, thread="$m1")], [])
    ix.writer.write_windows(ROOM_B, other, [])
    reader = ix.read()
    seen: list[StoredWindow] = []
    after = None
    while page := reader.thread_windows("$m1", after, 2):
        assert len(page) <= 2
        seen += page
        after = (page[-1].ts_start, page[-1].chunk_id)
    keys = [(w.ts_start, w.chunk_id) for w in seen]
    assert len(keys) == 6 and keys == sorted(set(keys))  # the empty one skipped, none twice
    assert {w.thread_root for w in seen} == {"$m1"} and sorted(names(seen)) == sorted(f"$t{i}" for i in range(6))
    assert names(reader.thread_windows("$b-root", None, 5)) == ["$o1"]
    assert reader.thread_windows("$m2", None, 5) == []
    # Neighbours stay in one timeline: the room's main one by default, or the thread named.
    assert names(reader.neighbours(ROOM_A, 300, 2, 2)) == ["$m1", "$m2", "$m4", "$m5"]
    assert set(names(reader.neighbours(ROOM_A, 300, 9, 9, "$m1"))) == {f"$t{i}" for i in range(6)}
    # The writer finds a thread's windows by its root's id (the fold's lookup of an open thread).
    found = ix.writer.windows_with_events(ROOM_A, ["$m1"])
    assert {p[schema.ANCHOR_ID] for p in found} == {"$m1", "$tgone"} | {f"$t{i}" for i in range(6)}


def test_messages_by_id_finds_live_messages_anywhere_in_one_request(ix: Backend):
    ix.writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100, events=("$a1", "$a2"), redacted=("$r",))], [])
    ix.writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 200, thread="$a1")], [])
    reader = ix.read()
    found = reader.messages_by_id(["$a2", "$b1", "$r", "$nope", "$a2"])
    assert sorted(found) == ["$a2", "$b1"]  # a redacted or unknown id has no message
    assert (found["$a2"].body, found["$b1"].ts) == ("body $a2", 200)
    assert reader.messages_by_id([]) == {}
    with pytest.raises(ValueError, match="event_id"):
        reader.messages_by_id([""])


def test_room_aliases_take_the_newest_windows_alias_and_counts_every_window(ix: Backend):
    ix.writer.write_windows(
        ROOM_A, [window(ROOM_A, "$a1", 100, alias="#old:e"), window(ROOM_A, "$a2", 200, alias="#new:e")], []
    )
    ix.writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 100), window(ROOM_B, "$b2", 50, empty=True)], [])
    reader = ix.read()
    assert reader.room_aliases() == {ROOM_A: "#new:e"}  # room B has no alias: left out
    assert reader.window_counts() == {ROOM_A: 2, ROOM_B: 2}


def test_room_summaries_count_messages_and_span_every_timeline(ix: Backend):
    ix.writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$a1", 100, ts_end=150, events=("$a1", "$a2")),
            # A thread window that starts earlier and ends later than the main timeline's.
            window(ROOM_A, "$t1", 90, ts_end=400, events=("$t1",), thread="$root"),
        ],
        [],
    )
    ix.writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 50, empty=True)], [])  # nothing to search
    summaries = ix.read().room_summaries()
    assert set(summaries) == {ROOM_A}
    a = summaries[ROOM_A]
    assert (a.windows, a.messages, a.first_ts, a.last_ts) == (2, 3, 90, 400)


# --- refusals at the port boundary: the same input, the same error, on every backend -----------


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (dict(point_id="not-a-uuid"), ValueError, r"upserts\[1\]\.point_id holds 'not-a-uuid', not a UUID"),
        (dict(dense=[[1.0, 0.0]]), ValueError, r"upserts\[1\]\.dense\[0\] has 2 dimensions, the index has 4"),
        (dict(dense=[[math.nan, 0.0, 0.0, 0.0]]), ValueError, "NaN or infinite"),
        (dict(dense=[[math.inf, 0.0, 0.0, 0.0]]), ValueError, "NaN or infinite"),
        (dict(sparse=SparseVector((1, 1), (1.0, 1.0))), ValueError, "distinct and non-negative"),
        (dict(sparse=SparseVector((1,), (1.0, 2.0))), ValueError, "1 indices but 2 values"),
        (dict(sparse=SparseVector((1,), (math.nan,))), ValueError, "NaN or infinite"),
        (dict(payload={schema.ROOM_ID: ROOM_B}), ValueError, r"upserts\[1\]\.payload\.room_id"),
        (dict(payload={schema.ROOM_ID: ROOM_A, schema.KIND: "meta"}), ValueError, r"payload\.kind"),
    ],
)
def test_a_bad_point_anywhere_in_a_batch_is_refused_and_nothing_is_written(ix: Backend, bad, error, match):
    good = window(ROOM_A, "$a1", 100)
    payload = {schema.ROOM_ID: ROOM_A, schema.MESSAGES: [{"event_id": "$x", "sender": "@x:y", "ts": 1, "body": "x"}]}
    fields = {"point_id": str(uuid.uuid4()), "dense": [unit(1)], "sparse": None, "payload": payload}
    with pytest.raises(error, match=match):
        ix.writer.write_windows(ROOM_A, [good, WindowPoint(**{**fields, **bad})], [])
    with pytest.raises(TypeError, match=r"upserts\[0\]"):
        ix.writer.write_windows(ROOM_A, [good.payload], [])
    with pytest.raises(ValueError, match=r"delete_ids\[0\] holds 'nope'"):
        ix.writer.write_windows(ROOM_A, [good], ["nope"])
    assert sum(ix.writer.window_counts().values()) == 0


def test_bad_ids_cursors_and_meta_are_refused_alike(ix: Backend):
    w = ix.writer
    for call in (
        lambda: w.write_windows("", [], []),
        lambda: w.purge_room(""),
        lambda: w.get_cursor(""),
        lambda: w.set_cursor(RoomCursor("", "t", "$e", None, "c1")),
        lambda: w.get_windows(["nope"]),
        lambda: w.reset(IndexMeta("m", 0, "c1")),
    ):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(TypeError):
        w.reset({"model": "m", "dim": 4})
    assert w.read_meta() == META


def test_bad_queries_are_refused_alike(ix: Backend):
    ix.writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    reader = ix.read()
    for call in (
        lambda: reader.hybrid([math.nan, 0, 0, 0], QUERY[1], EVERYTHING, 3),
        lambda: reader.hybrid(QUERY[0], SparseVector((1, 1), (1.0, 1.0)), EVERYTHING, 3),
        lambda: reader.lexical(SparseVector((-1,), (1.0,)), EVERYTHING, 3),
        lambda: reader.listing(EVERYTHING, None, -1),
        lambda: reader.listing(EVERYTHING, ("x", "y"), 3),
        lambda: reader.window_of_event(""),
        lambda: reader.neighbours("", 100, 1, 1),
        lambda: reader.neighbours(ROOM_A, 100, -1, 1),
    ):
        with pytest.raises(ValueError):
            call()
    for flt in (SearchFilter(senders="@ann:example.org"), SearchFilter(room_ids=ROOM_A)):
        with pytest.raises(TypeError, match="not a single string"):  # never split into characters
            reader.listing(flt, None, 10)
    with pytest.raises(TypeError, match="SearchFilter"):
        reader.lexical(QUERY[1], {"room_ids": None}, 3)
    assert names(reader.listing(SearchFilter(senders=("@ann:example.org",)), None, 10)) == ["$a1"]


def test_fuse_legs_by_hand():
    from daemon.index.queries import fuse_legs

    w_dense, w_lex = schema.LEG_WEIGHTS["dense"], schema.LEG_WEIGHTS["lexical"]
    fused = fuse_legs([("dense", [("a", 0.9), ("b", 0.7), ("c", 0.5)]), ("lexical", [("c", 8.0), ("a", 4.0)])], 10)
    scores = {pid: score for pid, score, _ in fused}
    assert scores["a"] == pytest.approx(w_dense * 1.0 + w_lex * 0.0)
    assert scores["b"] == pytest.approx(w_dense * 0.5)
    assert scores["c"] == pytest.approx(w_dense * 0.0 + w_lex * 1.0)
    assert {pid: legs for pid, _, legs in fused} == {
        "a": ("dense", "lexical"),
        "b": ("dense",),
        "c": ("dense", "lexical"),
    }
    # a leg whose candidates all score alike gives each its full weight; the limit cuts
    assert fuse_legs([("lexical", [("x", 3.0), ("y", 3.0)])], 1)[0][1] == pytest.approx(w_lex)
    # an exact tie goes to the better lexical rank, whatever the ids say
    assert [pid for pid, _, _ in fuse_legs([("lexical", [("q", 3.0), ("p", 3.0)])], 2)] == ["q", "p"]
    assert fuse_legs([], 5) == []
    # weights named for the call replace schema.LEG_WEIGHTS
    named = fuse_legs(
        [("dense", [("a", 0.9), ("b", 0.7), ("c", 0.5)]), ("lexical", [("c", 8.0), ("a", 4.0)])],
        10,
        {"dense": 2.0, "lexical": 0.5},
    )
    assert [(pid, score) for pid, score, _ in named] == [
        ("a", pytest.approx(2.0)),
        ("b", pytest.approx(1.0)),
        ("c", pytest.approx(0.5)),
    ]

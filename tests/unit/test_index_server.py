"""ServerIndexWriter / ServerIndexReader semantics, against qdrant-client local mode (":memory:"),
which speaks the same qdrant_client.models as a server. Small hand-made vectors, no embedder."""

from __future__ import annotations

import uuid

import pytest
from qdrant_client import QdrantClient

from daemon.index import schema
from daemon.index.server_reader import ServerIndexReader
from daemon.index.server_writer import ServerIndexWriter
from daemon.ports import IndexMeta, RoomCursor, SearchFilter, SparseVector, WindowPoint

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect")

META = IndexMeta(model="test-model", dim=4, chat_version="c1")
ROOM_A = "!a:example.org"
ROOM_B = "!b:example.org"


def window(
    room_id: str,
    anchor: str,
    ts_start: int,
    *,
    dense: list[float] | None = (1.0, 0.0, 0.0, 0.0),
    terms: dict[int, float] | None = None,
    event_ids: list[str] | None = None,
    redacted_ids: list[str] = (),
    senders: list[str] = ("@u:example.org",),
    ts_end: int | None = None,
    alias: str = "",
) -> WindowPoint:
    event_ids = [anchor] if event_ids is None else event_ids
    point_id = str(uuid.uuid5(uuid.NAMESPACE_URL, room_id + anchor))
    payload = {
        schema.KIND: schema.KIND_WINDOW,
        schema.CORPUS: schema.CORPUS_CHAT,
        schema.ROOM_ID: room_id,
        schema.ROOM_ALIAS: alias,
        schema.CHUNK_ID: point_id,
        schema.ANCHOR_ID: anchor,
        schema.TS_START: ts_start,
        schema.TS_END: ts_start if ts_end is None else ts_end,
        schema.EVENT_IDS: list(event_ids),
        schema.REDACTED_IDS: list(redacted_ids),
        schema.SENDERS: list(senders),
        schema.N_MESSAGES: len(event_ids),
        schema.MESSAGES: [{"event_id": e, "sender": senders[0], "ts": ts_start, "body": "b"} for e in event_ids],
    }
    terms = {7: 1.0} if terms is None else terms
    sparse = SparseVector(tuple(terms), tuple(terms.values())) if terms else None
    return WindowPoint(point_id=point_id, dense=None if dense is None else list(dense), sparse=sparse, payload=payload)


@pytest.fixture
def client() -> QdrantClient:
    c = QdrantClient(":memory:")
    yield c
    c.close()


@pytest.fixture
def writer(client: QdrantClient) -> ServerIndexWriter:
    w = ServerIndexWriter(client, "test_chat")
    w.reset(META)
    return w


@pytest.fixture
def reader(client: QdrantClient, writer: ServerIndexWriter) -> ServerIndexReader:
    return ServerIndexReader(client, "test_chat")


def ids(rows) -> list[str]:
    return [r[schema.ANCHOR_ID] if isinstance(r, dict) else r.payload[schema.ANCHOR_ID] for r in rows]


# --- writer ----------------------------------------------------------------------------------


def test_read_meta_is_none_before_reset_and_the_meta_after(client):
    w = ServerIndexWriter(client, "fresh")
    assert w.read_meta() is None
    assert w.count_windows() == 0 and w.rooms_with_data() == set()
    w.reset(META)
    assert w.read_meta() == META
    assert ServerIndexReader(client, "fresh").read_meta() == META


def test_reset_wipes_every_point_and_sets_the_new_dim(writer, client):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$1", 10)], [])
    writer.set_cursor(RoomCursor(ROOM_A, "t1", "$1", None, "c1"))
    new_meta = IndexMeta(model="other", dim=8, chat_version="c2")
    writer.reset(new_meta)
    assert writer.read_meta() == new_meta
    assert writer.count_windows() == 0
    assert writer.get_cursor(ROOM_A) is None
    params = client.get_collection("test_chat").config.params
    assert params.vectors[schema.DENSE].size == 8
    assert params.sparse_vectors[schema.SPARSE].modifier.value == "idf"


def test_write_get_and_delete_windows(writer):
    w1, w2 = window(ROOM_A, "$1", 10), window(ROOM_A, "$2", 20)
    writer.write_windows(ROOM_A, [w1, w2], [])
    assert ids(writer.get_windows([w2.point_id, w1.point_id])) == ["$2", "$1"]
    writer.write_windows(ROOM_A, [], [w1.point_id])
    assert ids(writer.get_windows([w1.point_id, w2.point_id])) == ["$2"]
    assert writer.count_windows(ROOM_A) == 1


def test_deletes_never_touch_another_rooms_window(writer):
    wb = window(ROOM_B, "$b", 10)
    writer.write_windows(ROOM_B, [wb], [])
    writer.write_windows(ROOM_A, [], [wb.point_id])
    assert ids(writer.get_windows([wb.point_id])) == ["$b"]


def test_upsert_payload_of_another_room_is_refused_naming_the_field(writer):
    with pytest.raises(ValueError, match=r"upserts\[0\]\.payload\.room_id"):
        writer.write_windows(ROOM_A, [window(ROOM_B, "$b", 10)], [])
    with pytest.raises(ValueError, match=r"delete_ids\[0\]"):
        writer.write_windows(ROOM_A, [], ["not-a-uuid"])


def test_meta_points_never_appear_in_window_reads(writer, reader):
    writer.set_meta_entry(schema.purge_key(ROOM_A), [[1, 5]])
    writer.set_cursor(RoomCursor(ROOM_A, "t1", "$1", None, "c1"))
    assert writer.count_windows() == 0
    assert writer.get_windows([schema.meta_point_id(schema.META_INDEX)]) == []
    assert writer.windows_in_span(ROOM_A, 0, 10**15) == []
    everyone = SearchFilter()
    assert reader.listing(everyone, None, 10) == []
    assert reader.hybrid([1.0, 0, 0, 0], SparseVector((7,), (1.0,)), everyone, 10) == []
    assert reader.room_aliases() == {}


def test_meta_entries_round_trip(writer):
    assert writer.get_meta_entry(schema.META_LAST_RUN) is None
    writer.set_meta_entry(schema.META_LAST_RUN, {"rooms": 3, "ok": True})
    writer.set_meta_entry(schema.META_LAST_RUN, {"rooms": 4, "ok": False})
    assert writer.get_meta_entry(schema.META_LAST_RUN) == {"rooms": 4, "ok": False}


def test_windows_with_events_finds_live_and_redacted_ids_in_that_room_only(writer):
    writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$1", 10, event_ids=["$1", "$2"]),
            window(ROOM_A, "$3", 20, event_ids=["$3"], redacted_ids=["$4"]),
            window(ROOM_A, "$5", 30, event_ids=["$5"]),
        ],
        [],
    )
    writer.write_windows(ROOM_B, [window(ROOM_B, "$x", 10, event_ids=["$2"])], [])
    assert sorted(ids(writer.windows_with_events(ROOM_A, ["$2", "$4", "$unknown"]))) == ["$1", "$3"]
    assert writer.windows_with_events(ROOM_A, []) == []


def test_windows_in_span_returns_overlapping_windows(writer):
    writer.write_windows(
        ROOM_A,
        [window(ROOM_A, "$1", 10, ts_end=19), window(ROOM_A, "$2", 20, ts_end=29), window(ROOM_A, "$3", 30, ts_end=39)],
        [],
    )
    assert ids(writer.windows_in_span(ROOM_A, 25, 30)) == ["$2", "$3"]
    assert writer.windows_in_span(ROOM_B, 0, 100) == []


def test_cursor_round_trip_and_overwrite(writer):
    assert writer.get_cursor(ROOM_A) is None
    first = RoomCursor(ROOM_A, "t1", "$1", "open-1", "c1", updated_ms=5)
    writer.set_cursor(first)
    assert writer.get_cursor(ROOM_A) == first
    second = RoomCursor(ROOM_A, "t2", "$9", None, "c1", updated_ms=6)
    writer.set_cursor(second)
    assert writer.get_cursor(ROOM_A) == second
    assert writer.get_cursor(ROOM_B) is None


def test_rooms_with_data_counts_windows_and_cursors(writer):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$1", 10)], [])
    writer.set_cursor(RoomCursor(ROOM_B, "t", "$b", None, "c1"))
    writer.set_meta_entry(schema.purge_key("!c:example.org"), [])
    assert writer.rooms_with_data() == {ROOM_A, ROOM_B}


def test_purge_room_drops_windows_and_cursor_but_keeps_others(writer):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$1", 10), window(ROOM_A, "$2", 20)], [])
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b", 10)], [])
    writer.set_cursor(RoomCursor(ROOM_A, "t", "$2", None, "c1"))
    writer.set_meta_entry(schema.purge_key(ROOM_A), [[1, 2]])
    assert writer.purge_room(ROOM_A) == 2
    assert writer.count_windows(ROOM_A) == 0 and writer.count_windows() == 1
    assert writer.get_cursor(ROOM_A) is None
    assert writer.get_meta_entry(schema.purge_key(ROOM_A)) == [[1, 2]]
    assert writer.rooms_with_data() == {ROOM_B}
    assert writer.read_meta() == META


def test_empty_window_is_stored_but_never_searched(writer, reader):
    empty = window(ROOM_A, "$1", 10, dense=None, terms={}, event_ids=[], redacted_ids=["$1"])
    writer.write_windows(ROOM_A, [empty], [])
    assert writer.count_windows(ROOM_A) == 1
    assert ids(writer.windows_with_events(ROOM_A, ["$1"])) == ["$1"]
    assert reader.hybrid([1.0, 0, 0, 0], SparseVector((7,), (1.0,)), SearchFilter(), 5) == []
    assert reader.listing(SearchFilter(), None, 5) == []
    assert reader.window_of_event("$1") is None


# --- reader ----------------------------------------------------------------------------------


def test_hybrid_applies_the_room_filter_before_ranking(writer, reader):
    # Room A's window wins both legs outright; room B's is a weak match in both.
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a", 10, dense=[1, 0, 0, 0], terms={7: 3.0, 8: 1.0})], [])
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b", 10, dense=[0.2, 1, 0, 0], terms={7: 0.1, 9: 1.0})], [])
    query = ([1.0, 0, 0, 0], SparseVector((7,), (1.0,)))
    assert ids(reader.hybrid(*query, SearchFilter(), 1)) == ["$a"]
    hits = reader.hybrid(*query, SearchFilter(room_ids=(ROOM_B,)), 1)
    assert ids(hits) == ["$b"]
    assert hits[0].legs == ("dense", "lexical")
    lexical = reader.lexical(query[1], SearchFilter(room_ids=(ROOM_B,)), 1)
    assert ids(lexical) == ["$b"] and lexical[0].legs == ("lexical",)


def test_hybrid_scores_are_rrf_with_k_60_on_one_based_ranks(writer, reader):
    writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$top", 10, dense=[1, 0, 0, 0], terms={7: 2.0}),
            window(ROOM_A, "$dense-only", 20, dense=[1, 0.5, 0, 0], terms={9: 1.0}),
        ],
        [],
    )
    hits = reader.hybrid([1.0, 0, 0, 0], SparseVector((7,), (1.0,)), SearchFilter(), 5)
    assert ids(hits) == ["$top", "$dense-only"]
    assert hits[0].score == pytest.approx(2 / 61)  # rank 1 in both legs
    assert hits[1].score == pytest.approx(1 / 62)  # rank 2 in the dense leg only
    assert hits[0].legs == ("dense", "lexical") and hits[1].legs == ("dense",)


def test_search_filters_senders_and_time(writer, reader):
    writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$old", 10, ts_end=15, senders=["@x:e"]),
            window(ROOM_A, "$mid", 20, ts_end=25, senders=["@y:e"]),
            window(ROOM_A, "$new", 30, ts_end=35, senders=["@x:e"]),
        ],
        [],
    )
    query = ([1.0, 0, 0, 0], SparseVector((7,), (1.0,)))
    assert sorted(ids(reader.hybrid(*query, SearchFilter(senders=("@x:e",)), 10))) == ["$new", "$old"]
    assert ids(reader.hybrid(*query, SearchFilter(after_ms=16, before_ms=29), 10)) == ["$mid"]
    assert ids(reader.listing(SearchFilter(after_ms=25), None, 10)) == ["$mid", "$new"]
    assert ids(reader.lexical(query[1], SearchFilter(before_ms=20), 10)) in (["$old", "$mid"], ["$mid", "$old"])


def test_empty_room_tuple_matches_nothing_while_none_matches_all(writer, reader):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a", 10)], [])
    query = ([1.0, 0, 0, 0], SparseVector((7,), (1.0,)))
    nothing = SearchFilter(room_ids=())
    assert reader.hybrid(*query, nothing, 10) == []
    assert reader.lexical(query[1], nothing, 10) == []
    assert reader.listing(nothing, None, 10) == []
    assert ids(reader.hybrid(*query, SearchFilter(room_ids=None), 10)) == ["$a"]


def test_hybrid_with_no_known_terms_uses_the_dense_leg_alone(writer, reader):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a", 10)], [])
    hits = reader.hybrid([1.0, 0, 0, 0], SparseVector((), ()), SearchFilter(), 3)
    assert ids(hits) == ["$a"] and hits[0].legs == ("dense",)
    assert reader.lexical(SparseVector((), ()), SearchFilter(), 3) == []


def test_listing_pages_exactly_once_through_many_equal_ts_start(writer, reader):
    # 23 windows over three rooms, 17 of them starting in the same millisecond.
    rooms = [ROOM_A, ROOM_B, "!c:example.org"]
    points = [window(rooms[i % 3], f"$same{i:02d}", 100) for i in range(17)]
    points += [window(rooms[i % 3], f"$t{i}", 50 + 40 * i) for i in range(6)]
    for room in rooms:
        writer.write_windows(room, [p for p in points if p.payload[schema.ROOM_ID] == room], [])
    expected = sorted(points, key=lambda p: (p.payload[schema.TS_START], p.payload[schema.CHUNK_ID]))
    seen: list[str] = []
    after = None
    for _ in range(50):
        page = reader.listing(SearchFilter(), after, 4)
        if not page:
            break
        assert len(page) <= 4
        seen += [row[schema.CHUNK_ID] for row in page]
        after = (page[-1][schema.TS_START], page[-1][schema.CHUNK_ID])
    assert seen == [p.point_id for p in expected]


def test_window_of_event_and_neighbours(writer, reader):
    points = [window(ROOM_A, f"${i}", 10 * i, event_ids=[f"${i}", f"${i}b"]) for i in range(1, 7)]
    points.append(window(ROOM_A, "$gone", 45, dense=None, terms={}, event_ids=[], redacted_ids=["$gone"]))
    writer.write_windows(ROOM_A, points, [])
    writer.write_windows(ROOM_B, [window(ROOM_B, "$other", 35)], [])
    cited = reader.window_of_event("$3b")
    assert cited[schema.ANCHOR_ID] == "$3"
    assert reader.window_of_event("$nope") is None
    around = reader.neighbours(ROOM_A, cited[schema.TS_START], before=1, after=2)
    assert ids(around) == ["$2", "$4", "$5"]  # the empty window at 45 is skipped, room B never shows
    assert ids(reader.neighbours(ROOM_A, 30, before=5, after=0)) == ["$1", "$2"]


def test_room_aliases_use_the_newest_window(writer, reader):
    writer.write_windows(
        ROOM_A, [window(ROOM_A, "$1", 10, alias="#old:e"), window(ROOM_A, "$2", 20, alias="#new:e")], []
    )
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b", 10, alias="")], [])
    assert reader.room_aliases() == {ROOM_A: "#new:e"}


def test_reader_on_a_missing_collection_sees_no_index(client):
    reader = ServerIndexReader(client, "absent")
    assert reader.read_meta() is None
    assert reader.room_aliases() == {}


def test_set_meta_entry_refuses_the_index_key_and_values_json_cannot_hold(writer: ServerIndexWriter) -> None:
    with pytest.raises(ValueError, match="written only by reset"):
        writer.set_meta_entry(schema.META_INDEX, {"model": "other", "dim": 4, "chat_version": "c9"})
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        writer.set_meta_entry(schema.META_LAST_RUN, {"ratio": float("nan")})
    assert writer.read_meta() == META
    assert writer.get_meta_entry(schema.META_LAST_RUN) is None

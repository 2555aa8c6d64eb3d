"""The Edge index adapter against a real Qdrant Edge shard in a temp dir (tiny dims, no models)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import qdrant_edge as qe

from daemon.index import edge_reader, edge_shared, schema
from daemon.index.edge_reader import EdgeIndexReader
from daemon.index.edge_writer import EdgeIndexWriter, IndexLockedError
from daemon.ports import IndexMeta, IndexWriteError, RoomCursor, SearchFilter, SparseVector, WindowPoint

DIM = 8
META = IndexMeta(model="test-model", dim=DIM, chat_version="c1")
ROOM_A = "!alpha:example.org"
ROOM_B = "!beta:example.org"
ROOM_C = "!gamma:example.org"


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
    dense: list[float] | None = None,
    sparse: SparseVector | None = None,
    alias: str | None = None,
    empty: bool = False,
) -> WindowPoint:
    point_id = str(uuid.uuid5(uuid.NAMESPACE_URL, room + "/" + anchor))
    event_ids = [] if empty else list(events or (anchor,))
    payload = {
        schema.ROOM_ID: room,
        schema.ROOM_ALIAS: alias,
        schema.CORPUS: "chat",
        schema.CHUNK_ID: point_id,
        schema.ANCHOR_ID: anchor,
        schema.TS_START: ts_start,
        schema.TS_END: ts_end if ts_end is not None else ts_start,
        schema.EVENT_IDS: event_ids,
        schema.SENDERS: [] if empty else list(senders),
        schema.REDACTED_IDS: list(redacted),
        schema.N_MESSAGES: len(event_ids),
        schema.MESSAGES: [
            {"event_id": e, "sender": senders[0], "ts": ts_start, "body": f"body {e}"} for e in event_ids
        ],
        "text": f"text of {anchor}",
        "closed": True,
        schema.CHAT_VERSION: "c1",
    }
    if empty:
        return WindowPoint(point_id, None, None, payload)
    return WindowPoint(point_id, dense if dense is not None else unit(0), sparse, payload)


def anchors(payloads: list[dict]) -> list[str]:
    return [p[schema.ANCHOR_ID] for p in payloads]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "index"


@pytest.fixture(scope="module")
def freshly_reset(tmp_path_factory) -> Path:
    """An index root just after reset(META), made once: creating the payload indexes costs about
    a second of fsyncs, copying the result costs milliseconds."""
    template = tmp_path_factory.mktemp("template") / "index"
    with EdgeIndexWriter(template) as w:
        w.reset(META)
    return template


@pytest.fixture
def writer(root: Path, freshly_reset: Path):
    root.mkdir(parents=True)
    edge_shared._copy_tree(freshly_reset / "work", root / "work", durable=False)
    shutil.copy(freshly_reset / "work.unpublished", root / "work.unpublished")
    w = EdgeIndexWriter(root)
    assert w.read_meta() == META
    yield w
    w.close()


def publish(writer: EdgeIndexWriter, tmp_path: Path) -> EdgeIndexReader:
    writer.commit()
    reader = EdgeIndexReader.open_latest(writer.root, tmp_path / "private")
    assert reader is not None
    return reader


# ---------------------------------------------------------------- writer


def test_meta_is_none_before_reset_and_round_trips_after(root: Path):
    with EdgeIndexWriter(root) as fresh:
        assert fresh.read_meta() is None
        with pytest.raises(RuntimeError, match=r"call reset\(meta\) first"):
            fresh.count_windows()
        with pytest.raises(IndexWriteError, match=ROOM_A):
            fresh.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
        fresh.reset(META)
        assert fresh.read_meta() == META
    with EdgeIndexWriter(root) as reopened:
        assert reopened.read_meta() == META
        assert reopened.count_windows() == 0


def test_a_work_dir_that_does_not_load_reads_as_no_meta_and_reset_rebuilds_it(root: Path):
    (root / "work" / "segments").mkdir(parents=True)  # a crash between rmtree and create
    with EdgeIndexWriter(root) as w:
        assert w.read_meta() is None
        assert w.load_error
        w.reset(META)
        assert w.read_meta() == META


def test_reset_wipes_windows_and_changes_dimension(writer: EdgeIndexWriter):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    bigger = IndexMeta(model="other", dim=4, chat_version="c2")
    writer.reset(bigger)
    assert writer.read_meta() == bigger
    assert writer.count_windows() == 0
    point = window(ROOM_A, "$a1", 100, dense=[1.0, 0.0, 0.0, 0.0])
    writer.write_windows(ROOM_A, [point], [])
    assert anchors(writer.get_windows([point.point_id])) == ["$a1"]


def test_write_get_and_delete_windows(writer: EdgeIndexWriter):
    first, second, third = (window(ROOM_A, f"$a{i}", 100 * i) for i in (1, 2, 3))
    writer.write_windows(ROOM_A, [first, second, third], [])
    assert writer.count_windows() == 3
    got = writer.get_windows([third.point_id, str(uuid.uuid4()), first.point_id])
    assert anchors(got) == ["$a3", "$a1"]  # requested order, unknown ids skipped
    assert got[1] == {**first.payload, schema.KIND: "window"}

    writer.write_windows(ROOM_A, [window(ROOM_A, "$a4", 400)], [second.point_id])
    assert writer.count_windows(ROOM_A) == 3
    assert writer.get_windows([second.point_id]) == []


def test_delete_ids_only_touch_the_named_rooms_windows(writer: EdgeIndexWriter):
    theirs = window(ROOM_B, "$b1", 100)
    writer.write_windows(ROOM_B, [theirs], [])
    writer.set_cursor(RoomCursor(ROOM_A, "t1", "$a1", None, "c1"))
    cursor_point = schema.meta_point_id(schema.cursor_key(ROOM_A))
    writer.write_windows(ROOM_A, [], [theirs.point_id, cursor_point])
    assert writer.count_windows(ROOM_B) == 1
    assert writer.get_cursor(ROOM_A) is not None


def test_empty_window_is_stored_without_vectors(writer: EdgeIndexWriter, tmp_path: Path):
    gone = window(ROOM_A, "$gone", 100, empty=True, redacted=("$gone",))
    writer.write_windows(ROOM_A, [gone, window(ROOM_A, "$a2", 200)], [])
    assert anchors(writer.get_windows([gone.point_id])) == ["$gone"]
    with publish(writer, tmp_path) as reader:
        everything = SearchFilter()
        hits = reader.hybrid(unit(0), SparseVector((1,), (1.0,)), everything, 10)
        assert anchors([hit.payload for hit in hits]) == ["$a2"]
        assert anchors(reader.listing(everything, None, 10)) == ["$a2"]


def test_meta_points_never_come_back_from_window_queries(writer: EdgeIndexWriter, tmp_path: Path):
    writer.set_cursor(RoomCursor(ROOM_A, "t1", "$a1", None, "c1"))
    writer.set_meta_entry(schema.purge_key(ROOM_A), [[0, 10**13]])
    writer.set_meta_entry(schema.META_LAST_RUN, {"rooms": 1})
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    assert writer.count_windows() == 1
    assert writer.get_windows([schema.meta_point_id(schema.cursor_key(ROOM_A))]) == []
    assert anchors(writer.windows_in_span(ROOM_A, 0, 10**13)) == ["$a1"]
    with publish(writer, tmp_path) as reader:
        assert anchors(reader.listing(SearchFilter(), None, 50)) == ["$a1"]
        hits = reader.hybrid(unit(0), SparseVector((1,), (1.0,)), SearchFilter(), 50)
        assert [h.payload[schema.KIND] for h in hits] == ["window"]


def test_meta_entries_round_trip_json_values(writer: EdgeIndexWriter):
    value = {"spans": [[1, 2], [3, 4]], "note": "ok", "none": None, "big": 1_700_000_000_000}
    writer.set_meta_entry(schema.purge_key(ROOM_A), value)
    assert writer.get_meta_entry(schema.purge_key(ROOM_A)) == value
    assert writer.get_meta_entry("absent") is None
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        writer.set_meta_entry("bad", {"when": object()})


def test_windows_with_events_matches_event_and_redacted_ids_in_one_room(writer: EdgeIndexWriter):
    writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$a1", 100, events=("$a1", "$a2")),
            window(ROOM_A, "$a3", 300, redacted=("$gone",)),
            window(ROOM_A, "$a4", 400),
        ],
        [],
    )
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 100, events=("$a2",))], [])
    found = writer.windows_with_events(ROOM_A, ["$a2", "$gone", "$nowhere"])
    assert anchors(found) == ["$a1", "$a3"]
    assert writer.windows_with_events(ROOM_A, []) == []


def test_windows_in_span_uses_overlap(writer: EdgeIndexWriter):
    writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$early", 100, ts_end=190),
            window(ROOM_A, "$overlap", 150, ts_end=260),
            window(ROOM_A, "$inside", 210, ts_end=220),
            window(ROOM_A, "$late", 400, ts_end=500),
        ],
        [],
    )
    assert anchors(writer.windows_in_span(ROOM_A, 200, 300)) == ["$overlap", "$inside"]
    assert writer.windows_in_span(ROOM_B, 0, 10**13) == []


def test_cursor_round_trip(writer: EdgeIndexWriter):
    assert writer.get_cursor(ROOM_A) is None
    cursor = RoomCursor(ROOM_A, "s123_4", "$last", None, "c1", updated_ms=1_700_000_000_123)
    writer.set_cursor(cursor)
    assert writer.get_cursor(ROOM_A) == cursor
    moved = RoomCursor(ROOM_A, "s200_1", "$later", str(uuid.uuid4()), "c1", updated_ms=5)
    writer.set_cursor(moved)
    assert writer.get_cursor(ROOM_A) == moved


def test_rooms_with_data_counts_cursors_and_windows(writer: EdgeIndexWriter):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    writer.set_cursor(RoomCursor(ROOM_B, "t", "$b", None, "c1"))
    writer.set_meta_entry(schema.purge_key(ROOM_C), [])
    assert writer.rooms_with_data() == {ROOM_A, ROOM_B}


def test_purge_room_removes_windows_and_cursor_only_of_that_room(writer: EdgeIndexWriter):
    writer.write_windows(ROOM_A, [window(ROOM_A, f"$a{i}", i) for i in range(5)], [])
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 1)], [])
    writer.set_cursor(RoomCursor(ROOM_A, "t", "$a4", None, "c1"))
    writer.set_cursor(RoomCursor(ROOM_B, "t", "$b1", None, "c1"))
    assert writer.purge_room(ROOM_A) == 5
    assert writer.count_windows(ROOM_A) == 0
    assert writer.get_cursor(ROOM_A) is None
    assert writer.count_windows(ROOM_B) == 1
    assert writer.get_cursor(ROOM_B) is not None
    assert writer.rooms_with_data() == {ROOM_B}
    assert writer.purge_room(ROOM_A) == 0


def test_injected_write_failure_raises_and_leaves_the_shard_unchanged(writer: EdgeIndexWriter):
    kept = window(ROOM_A, "$a1", 100)
    writer.write_windows(ROOM_A, [kept], [])
    writer.inject_write_failure = 1
    with pytest.raises(IndexWriteError, match=ROOM_A):
        writer.write_windows(ROOM_A, [window(ROOM_A, "$a2", 200)], [kept.point_id])
    assert anchors(writer.get_windows([kept.point_id])) == ["$a1"]
    assert writer.count_windows() == 1
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a2", 200)], [])  # only the next call failed
    assert writer.count_windows() == 2


def test_fail_writes_callback_targets_one_boundary_and_room(root: Path):
    calls = []

    def fail(boundary: str, subject: str) -> bool:
        calls.append((boundary, subject))
        return boundary == "set_cursor" and subject == ROOM_B

    with EdgeIndexWriter(root, fail_writes=fail) as w:
        w.reset(META)
        w.set_cursor(RoomCursor(ROOM_A, "t", "$a", None, "c1"))
        with pytest.raises(IndexWriteError, match=ROOM_B):
            w.set_cursor(RoomCursor(ROOM_B, "t", "$b", None, "c1"))
        assert w.get_cursor(ROOM_B) is None
        assert ("set_cursor", ROOM_A) in calls


def test_a_bad_point_late_in_a_batch_writes_nothing(writer: EdgeIndexWriter):
    good = window(ROOM_A, "$a1", 100)
    short = window(ROOM_A, "$a2", 200, dense=[1.0, 0.0])
    with pytest.raises(ValueError, match="dense has 2 dimensions"):
        writer.write_windows(ROOM_A, [good, short], [])
    foreign = window(ROOM_B, "$b1", 100)
    with pytest.raises(ValueError, match="payload.room_id"):
        writer.write_windows(ROOM_A, [good, foreign], [])
    with pytest.raises(ValueError, match="not a UUID"):
        writer.write_windows(ROOM_A, [good], ["not-a-uuid"])
    assert writer.count_windows() == 0


def test_edge_rejection_becomes_index_write_error_naming_the_room(writer: EdgeIndexWriter, monkeypatch):
    shard = writer._shard

    class Refusing:
        def __getattr__(self, name):
            return getattr(shard, name)

        def update(self, operation):
            raise RuntimeError("Service runtime error: disk full")

    monkeypatch.setattr(writer, "_shard", Refusing())
    with pytest.raises(IndexWriteError, match=f"write_windows for {ROOM_A}.*disk full"):
        writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])


def test_second_writer_on_the_same_root_is_refused(writer: EdgeIndexWriter, root: Path):
    with pytest.raises(IndexLockedError, match="another writer"):
        EdgeIndexWriter(root)
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    writer.commit()  # the holder is unharmed
    writer.close()
    with EdgeIndexWriter(root) as next_run:
        assert next_run.count_windows() == 1


def test_second_writer_in_another_process_is_refused(writer: EdgeIndexWriter, root: Path):
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from daemon.index.edge_writer import EdgeIndexWriter, IndexLockedError
        try:
            EdgeIndexWriter(Path({str(root)!r}))
        except IndexLockedError:
            raise SystemExit(3)
        raise SystemExit(0)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert result.returncode == 3
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    writer.commit()


def test_commit_publishes_generations_only_after_writes_and_keeps_three(writer: EdgeIndexWriter, root: Path):
    generations = root / "generations"
    assert writer.published_generation() is None
    writer.commit()  # reset counts as a write
    assert writer.published_generation() == 1
    assert (generations / "CURRENT").read_text() == "1\n"
    writer.commit()
    assert writer.published_generation() == 1
    for i in range(4):
        writer.write_windows(ROOM_A, [window(ROOM_A, f"$a{i}", i)], [])
        writer.commit()
    assert writer.published_generation() == 5
    assert sorted(p.name for p in generations.iterdir()) == ["3", "4", "5", "CURRENT"]


def test_writes_left_unpublished_by_a_crash_are_published_by_the_next_commit(root: Path):
    with EdgeIndexWriter(root) as first:
        first.reset(META)
        first.commit()
        first.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
        # the run dies before commit
    with EdgeIndexWriter(root) as second:
        second.commit()
        assert second.published_generation() == 2


def test_published_copy_keeps_file_holes(writer: EdgeIndexWriter, root: Path):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    writer.commit()
    published = root / "generations" / "1"
    apparent = sum(p.stat().st_size for p in published.rglob("*") if p.is_file())
    on_disk = sum(p.stat().st_blocks * 512 for p in published.rglob("*") if p.is_file())
    assert apparent > 32 * 2**20
    assert on_disk < apparent / 4


def test_durable_without_flush_when_the_process_dies(root: Path):
    script = textwrap.dedent(
        f"""
        import os, uuid
        from pathlib import Path
        from daemon.index.edge_writer import EdgeIndexWriter
        from daemon.ports import IndexMeta, RoomCursor, WindowPoint
        w = EdgeIndexWriter(Path({str(root)!r}))
        w.reset(IndexMeta("m", {DIM}, "c1"))
        points = [
            WindowPoint(str(uuid.uuid5(uuid.NAMESPACE_URL, str(i))), [1.0] + [0.0] * {DIM - 1}, None,
                        {{"room_id": {ROOM_A!r}, "ts_start": i, "ts_end": i, "n_messages": 1,
                          "event_ids": ["$e%d" % i], "chunk_id": str(i)}})
            for i in range(50)
        ]
        w.write_windows({ROOM_A!r}, points, [])
        w.set_cursor(RoomCursor({ROOM_A!r}, "tok", "$e49", None, "c1"))
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    with EdgeIndexWriter(root) as reopened:
        assert reopened.read_meta() == IndexMeta("m", DIM, "c1")
        assert reopened.count_windows(ROOM_A) == 50
        assert reopened.get_cursor(ROOM_A).last_event_id == "$e49"


# ---------------------------------------------------------------- reader


def test_reader_has_nothing_to_open_before_the_first_publish(writer: EdgeIndexWriter, tmp_path: Path):
    assert EdgeIndexReader.open_latest(writer.root, tmp_path / "private") is None


def test_reader_loads_a_private_copy_and_sees_only_published_data(writer: EdgeIndexWriter, tmp_path: Path):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100, alias="#alpha:example.org")], [])
    private = tmp_path / "private"
    reader = publish(writer, tmp_path)
    assert reader.current_generation == 1
    assert reader.copy_dir.parent == private
    assert reader.read_meta() == META
    assert not reader.newer_available()

    # The writer carries on in its own shard: flushes and publishes stay healthy.
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a2", 200)], [])
    writer.commit()
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a3", 300)], [])
    writer._shard.flush()
    assert writer.count_windows() == 3
    assert anchors(reader.listing(SearchFilter(), None, 10)) == ["$a1"]
    assert reader.room_aliases() == {ROOM_A: "#alpha:example.org"}
    assert reader.newer_available()

    newer = EdgeIndexReader.open_latest(writer.root, private)
    assert newer.current_generation == 2
    assert anchors(newer.listing(SearchFilter(), None, 10)) == ["$a1", "$a2"]
    reader.close()
    assert not reader.copy_dir.exists()
    assert anchors(newer.listing(SearchFilter(), None, 10)) == ["$a1", "$a2"]
    newer.close()
    writer.commit()
    assert writer.published_generation() == 3


def test_reader_retries_when_its_generation_is_pruned_mid_copy(writer: EdgeIndexWriter, tmp_path: Path, monkeypatch):
    writer.commit()
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    generations = writer.root / "generations"
    real_copy = edge_shared._copy_tree
    raced = []

    def copy_during_a_publish(src: Path, dst: Path, durable: bool = True) -> None:
        if not raced:
            raced.append(src)
            writer.commit()  # publishes 2
            shutil.rmtree(src)  # and prunes the one being copied
        real_copy(src, dst, durable)

    monkeypatch.setattr(edge_reader, "_copy_tree", copy_during_a_publish)
    reader = EdgeIndexReader.open_latest(writer.root, tmp_path / "private")
    assert raced == [generations / "1"]
    assert reader.current_generation == 2
    assert anchors(reader.listing(SearchFilter(), None, 10)) == ["$a1"]
    assert len(list((tmp_path / "private").iterdir())) == 1  # the failed copy was removed
    reader.close()


def test_hybrid_applies_filters_inside_each_leg_before_ranking(writer: EdgeIndexWriter, tmp_path: Path):
    query_dense, query_sparse = unit(0), SparseVector((7,), (1.0,))
    strong = [window(ROOM_A, f"$a{i}", 100 + i, dense=unit(0), sparse=SparseVector((7,), (2.0,))) for i in range(60)]
    weak = window(ROOM_B, "$b1", 100, dense=unit(1, 0), sparse=SparseVector((7, 8), (0.5, 3.0)), senders=("@bob:x",))
    writer.write_windows(ROOM_A, strong, [])
    writer.write_windows(ROOM_B, [weak], [])
    with publish(writer, tmp_path) as reader:
        only_b = reader.hybrid(query_dense, query_sparse, SearchFilter(room_ids=(ROOM_B,)), 1)
        assert [h.payload[schema.ANCHOR_ID] for h in only_b] == ["$b1"]
        assert only_b[0].legs == ("dense", "lexical")
        by_sender = reader.lexical(query_sparse, SearchFilter(senders=("@bob:x",)), 1)
        assert [h.payload[schema.ANCHOR_ID] for h in by_sender] == ["$b1"]
        in_time = reader.hybrid(query_dense, query_sparse, SearchFilter(after_ms=150, before_ms=155), 10)
        assert sorted(h.payload[schema.ANCHOR_ID] for h in in_time) == [f"$a{i}" for i in range(50, 56)]


def test_hybrid_matches_qdrant_rrf_and_reports_legs(writer: EdgeIndexWriter, tmp_path: Path):
    writer.write_windows(
        ROOM_A,
        [
            window(ROOM_A, "$both", 1, dense=unit(0), sparse=SparseVector((1,), (1.0,))),
            window(ROOM_A, "$dense", 2, dense=unit(0, 1), sparse=SparseVector((2,), (1.0,))),
            window(ROOM_A, "$words", 3, dense=unit(3), sparse=SparseVector((1, 4), (0.5, 1.0))),
            window(ROOM_A, "$other", 4, dense=unit(5, 3), sparse=SparseVector((6,), (1.0,))),
        ],
        [],
    )
    dense, sparse = unit(0), SparseVector((1,), (1.0,))
    with publish(writer, tmp_path) as reader:
        hits = reader.hybrid(dense, sparse, SearchFilter(), 10)
        legs = {h.payload[schema.ANCHOR_ID]: h.legs for h in hits}
        assert legs["$both"] == ("dense", "lexical")
        assert legs["$words"] == ("dense", "lexical")  # cosine 0 still ranks in the dense leg
        assert hits[0].payload[schema.ANCHOR_ID] == "$both"
        assert hits[0].score == pytest.approx(2 / (schema.RRF_K_SPEC + 1))

        # Same ranking and scores as Edge's own RRF with the Qdrant-form k.
        def leg(query):
            return qe.Prefetch(limit=50, query=query, filter=qe.Filter(must=[edge_shared._IS_WINDOW]))

        fused = reader._shard.query(
            qe.QueryRequest(
                limit=10,
                prefetches=[
                    leg(qe.Query.Nearest(dense, using="dense")),
                    leg(qe.Query.Nearest(qe.SparseVector([1], [1.0]), using="bm25")),
                ],
                query=qe.Fusion.Rrf(k=schema.RRF_K_QDRANT),
            )
        )
        theirs = {str(p.id): p.score for p in fused}
        ours = {h.point_id: h.score for h in hits}
        assert theirs.keys() == ours.keys()
        for pid, score in ours.items():
            assert theirs[pid] == pytest.approx(score, rel=1e-5)


def test_lexical_only_hit_reports_its_leg(writer: EdgeIndexWriter, tmp_path: Path):
    dense_only = [window(ROOM_A, f"$a{i}", i, dense=unit(1), sparse=SparseVector((9,), (1.0,))) for i in range(60)]
    writer.write_windows(ROOM_A, dense_only, [])
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b", 1, dense=unit(2), sparse=SparseVector((3,), (1.0,)))], [])
    with publish(writer, tmp_path) as reader:
        # Each leg takes 50: the dense leg fills with the 60 $a windows, only $b has token 3.
        hits = reader.hybrid(unit(1), SparseVector((3,), (1.0,)), SearchFilter(), 3)
        legs = {h.payload[schema.ANCHOR_ID]: h.legs for h in hits}
        assert legs.pop("$b") == ("lexical",)
        assert set(legs.values()) == {("dense",)}
        assert reader.lexical(SparseVector((), ()), SearchFilter(), 5) == []


def test_an_empty_room_filter_matches_nothing(writer: EdgeIndexWriter, tmp_path: Path):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100, sparse=SparseVector((1,), (1.0,)))], [])
    nothing = SearchFilter(room_ids=())
    with publish(writer, tmp_path) as reader:
        assert reader.hybrid(unit(0), SparseVector((1,), (1.0,)), nothing, 10) == []
        assert reader.lexical(SparseVector((1,), (1.0,)), nothing, 10) == []
        assert reader.listing(nothing, None, 10) == []
        assert len(reader.listing(SearchFilter(), None, 10)) == 1


def test_listing_pages_through_equal_timestamps_exactly_once(writer: EdgeIndexWriter, tmp_path: Path):
    stamps = [1000, 2000, 2000, 3000]
    for room in (ROOM_A, ROOM_B, ROOM_C):
        writer.write_windows(room, [window(room, f"$w{room}{i}", stamps[i % 4]) for i in range(40)], [])
    with publish(writer, tmp_path) as reader:
        for flt, expected in ((SearchFilter(), 120), (SearchFilter(room_ids=(ROOM_A, ROOM_C)), 80)):
            seen, after = [], None
            while True:
                page = reader.listing(flt, after, 7)
                if not page:
                    break
                assert len(page) <= 7
                seen += page
                after = (page[-1][schema.TS_START], page[-1][schema.CHUNK_ID])
            keys = [(p[schema.TS_START], p[schema.CHUNK_ID]) for p in seen]
            assert len(keys) == expected
            assert keys == sorted(set(keys))


def test_window_of_event_and_neighbours(writer: EdgeIndexWriter, tmp_path: Path):
    room_a = [window(ROOM_A, f"$a{i}", i * 100, events=(f"$a{i}", f"$a{i}x")) for i in range(1, 8)]
    writer.write_windows(ROOM_A, room_a, [])
    writer.write_windows(ROOM_A, [window(ROOM_A, "$gone", 350, empty=True)], [])
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 350)], [])
    with publish(writer, tmp_path) as reader:
        assert reader.window_of_event("$a4x")[schema.ANCHOR_ID] == "$a4"
        assert reader.window_of_event("$nope") is None
        assert anchors(reader.neighbours(ROOM_A, 400, 2, 2)) == ["$a2", "$a3", "$a5", "$a6"]
        assert anchors(reader.neighbours(ROOM_A, 400, 0, 1)) == ["$a5"]
        assert anchors(reader.neighbours(ROOM_A, 150, 5, 0)) == ["$a1"]


def test_reader_close_removes_its_copy(writer: EdgeIndexWriter, tmp_path: Path):
    reader = publish(writer, tmp_path)
    copy = reader.copy_dir
    assert copy.is_dir()
    reader.close()
    reader.close()
    assert not copy.exists()
    with pytest.raises(RuntimeError, match="closed"):
        reader.listing(SearchFilter(), None, 1)


def test_room_aliases_take_the_newest_windows_alias(writer: EdgeIndexWriter, tmp_path: Path):
    writer.write_windows(
        ROOM_A,
        [window(ROOM_A, "$a1", 100, alias="#old:example.org"), window(ROOM_A, "$a2", 200, alias="#new:example.org")],
        [],
    )
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 100)], [])  # no alias: left out
    with publish(writer, tmp_path) as reader:
        assert reader.room_aliases() == {ROOM_A: "#new:example.org"}


def test_discard_copies_clears_what_a_dead_reader_left(writer: EdgeIndexWriter, tmp_path: Path):
    private = tmp_path / "private"
    abandoned = publish(writer, tmp_path)  # never closed, as if its process died
    EdgeIndexReader.discard_copies(private)
    assert list(private.iterdir()) == []
    abandoned._shard.close()


def test_an_exact_rrf_tie_goes_to_the_better_lexical_rank(writer: EdgeIndexWriter, tmp_path: Path):
    # "about" wins the dense leg and is second by words; "exact" wins by words and is second by
    # meaning. Both score 1/61 + 1/62; the exact identifier must come first, every time, whatever
    # the random point ids say.
    for trial in range(4):
        about = window(ROOM_A, f"$about{trial}", 100, dense=unit(0), sparse=SparseVector((7,), (0.5,)))
        exact = window(ROOM_A, f"$exact{trial}", 101, dense=unit(0, 1), sparse=SparseVector((7,), (2.0,)))
        writer.write_windows(ROOM_A, [about, exact], [])
        with publish(writer, tmp_path / f"p{trial}") as reader:
            hits = reader.hybrid(unit(0), SparseVector((7,), (1.0,)), SearchFilter(), 2)
        assert hits[0].score == hits[1].score
        assert [h.payload[schema.ANCHOR_ID] for h in hits] == [f"$exact{trial}", f"$about{trial}"]
        writer.write_windows(ROOM_A, [], [about.point_id, exact.point_id])


def test_a_generation_that_loads_but_cannot_be_read_leaves_no_copy(writer: EdgeIndexWriter, tmp_path: Path, monkeypatch):
    # The reader retries every few seconds: a copy left per failed try would fill the disk.
    writer.commit()
    private = tmp_path / "private"

    def unreadable(shard: qe.EdgeShard, key: str) -> None:
        raise RuntimeError("meta point unreadable")

    monkeypatch.setattr(edge_reader, "_get_meta", unreadable)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="meta point unreadable"):
            EdgeIndexReader.open_latest(writer.root, private)
    assert list(private.iterdir()) == []


def test_a_single_string_as_a_filter_list_is_refused_not_split_into_characters(
    writer: EdgeIndexWriter, tmp_path: Path
):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    with publish(writer, tmp_path) as reader:
        for flt in (SearchFilter(senders="@ann:example.org"), SearchFilter(room_ids=ROOM_A)):
            with pytest.raises(TypeError, match="not a single string"):
                reader.listing(flt, None, 10)
        assert anchors(reader.listing(SearchFilter(senders=("@ann:example.org",)), None, 10)) == ["$a1"]


def test_neighbours_across_equal_ts_start_are_the_nearest_by_chunk_id(writer: EdgeIndexWriter, tmp_path: Path):
    tied = [window(ROOM_A, f"$t{i}", 100) for i in range(6)]
    writer.write_windows(ROOM_A, [*tied, window(ROOM_A, "$late", 200)], [])
    in_order = [p.payload[schema.ANCHOR_ID] for p in sorted(tied, key=lambda p: p.payload[schema.CHUNK_ID])]
    with publish(writer, tmp_path) as reader:
        for _ in range(3):  # the same answer every time, never a pick by chance
            assert anchors(reader.neighbours(ROOM_A, 200, 2, 0)) == in_order[-2:]
            assert anchors(reader.neighbours(ROOM_A, 50, 0, 2)) == in_order[:2]
            assert anchors(reader.neighbours(ROOM_A, 100, 1, 1)) == ["$late"]

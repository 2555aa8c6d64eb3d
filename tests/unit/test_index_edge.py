"""The Edge index adapter against a real Qdrant Edge shard in a temp dir (tiny dims, no models)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import qdrant_edge as qe

from daemon.index import edge, edge_reader, schema
from daemon.index.edge_reader import EdgeIndexReader
from daemon.index.edge_writer import EdgeIndexWriter, IndexLockedError
from daemon.index.port import (
    IndexMeta,
    IndexWriteError,
    RoomCursor,
    ScoredWindow,
    SearchFilter,
    SparseVector,
    StoredWindow,
    WindowPoint,
)
from daemon.index.queries import fuse_legs

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
    # The index stores one vector per message: the one vector given (unit(0) by default) for each.
    return WindowPoint(point_id, [dense if dense is not None else unit(0)] * len(event_ids), sparse, payload)


def anchors(rows: list[Any]) -> list[str]:
    """The anchors of payloads, stored windows or hits (a window's first event is its anchor)."""
    rows = [row.window if isinstance(row, ScoredWindow) else row for row in rows]
    return [row.messages[0].event_id if isinstance(row, StoredWindow) else row[schema.ANCHOR_ID] for row in rows]


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
    edge.copy_tree(freshly_reset / "work", root / "work", durable=False)
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
            sum(fresh.window_counts().values())
        with pytest.raises(IndexWriteError, match=ROOM_A):
            fresh.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
        fresh.reset(META)
        assert fresh.read_meta() == META
    with EdgeIndexWriter(root) as reopened:
        assert reopened.read_meta() == META
        assert sum(reopened.window_counts().values()) == 0


def test_a_work_dir_that_does_not_load_reads_as_no_meta_and_reset_rebuilds_it(root: Path):
    (root / "work" / "segments").mkdir(parents=True)  # a crash between rmtree and create
    with EdgeIndexWriter(root) as w:
        assert w.read_meta() is None
        assert w.load_error
        w.reset(META)
        assert w.read_meta() == META


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


@pytest.mark.slow
def test_second_writer_on_the_same_root_is_refused(writer: EdgeIndexWriter, root: Path):
    with pytest.raises(IndexLockedError, match="another writer"):
        EdgeIndexWriter(root)
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    writer.commit()  # the holder is unharmed
    writer.close()
    with EdgeIndexWriter(root) as next_run:
        assert sum(next_run.window_counts().values()) == 1


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


@pytest.mark.slow
def test_commit_publishes_generations_only_after_writes_and_keeps_only_current(writer: EdgeIndexWriter, root: Path):
    generations = root / "generations"
    assert edge.read_current(writer.root) is None
    writer.commit()  # reset counts as a write
    assert edge.read_current(writer.root) == 1
    assert (generations / "CURRENT").read_text() == "1\n"
    writer.commit()
    assert edge.read_current(writer.root) == 1
    for i in range(4):
        writer.write_windows(ROOM_A, [window(ROOM_A, f"$a{i}", i)], [])
        writer.commit()
    assert edge.read_current(writer.root) == 5
    assert sorted(p.name for p in generations.iterdir()) == ["5", "CURRENT"]
    # An older generation left behind (a crash between publish and prune, or an older version
    # that kept three) goes with the next commit, even one that publishes nothing.
    shutil.copytree(generations / "5", generations / "4")
    writer.commit()
    assert edge.read_current(writer.root) == 5
    assert sorted(p.name for p in generations.iterdir()) == ["5", "CURRENT"]


@pytest.mark.slow
def test_writes_left_unpublished_by_a_crash_are_published_by_the_next_commit(root: Path):
    with EdgeIndexWriter(root) as first:
        first.reset(META)
        first.commit()
        first.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
        # the run dies before commit
    with EdgeIndexWriter(root) as second:
        second.commit()
        assert edge.read_current(root) == 2


def test_published_copy_keeps_file_holes(writer: EdgeIndexWriter, root: Path):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    writer.commit()
    published = root / "generations" / "1"
    apparent = sum(p.stat().st_size for p in published.rglob("*") if p.is_file())
    on_disk = sum(p.stat().st_blocks * 512 for p in published.rglob("*") if p.is_file())
    assert apparent > 32 * 2**20
    assert on_disk < apparent / 4


@pytest.mark.slow
def test_durable_without_flush_when_the_process_dies(root: Path):
    script = textwrap.dedent(
        f"""
        import os, uuid
        from pathlib import Path
        from daemon.index.edge_writer import EdgeIndexWriter
        from daemon.index.port import IndexMeta, RoomCursor, WindowPoint
        w = EdgeIndexWriter(Path({str(root)!r}))
        w.reset(IndexMeta("m", {DIM}, "c1"))
        points = [
            WindowPoint(str(uuid.uuid5(uuid.NAMESPACE_URL, str(i))), [[1.0] + [0.0] * {DIM - 1}], None,
                        {{"room_id": {ROOM_A!r}, "ts_start": i, "ts_end": i, "n_messages": 1,
                          "event_ids": ["$e%d" % i], "chunk_id": str(i),
                          "messages": [{{"event_id": "$e%d" % i, "sender": "@a:b", "ts": i, "body": "x"}}]}})
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
        assert reopened.window_counts().get(ROOM_A, 0) == 50
        assert reopened.get_cursor(ROOM_A).last_event_id == "$e49"


# ---------------------------------------------------------------- reader


def test_reader_has_nothing_to_open_before_the_first_publish(writer: EdgeIndexWriter, tmp_path: Path):
    assert EdgeIndexReader.open_latest(writer.root, tmp_path / "private") is None


@pytest.mark.slow
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
    assert sum(writer.window_counts().values()) == 3
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
    assert edge.read_current(writer.root) == 3


@pytest.mark.slow
def test_reader_retries_when_its_generation_is_pruned_mid_copy(writer: EdgeIndexWriter, tmp_path: Path, monkeypatch):
    writer.commit()
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    generations = writer.root / "generations"
    real_copy = edge.copy_tree
    raced = []

    def copy_during_a_publish(src: Path, dst: Path, durable: bool = True) -> None:
        if not raced:
            raced.append(src)
            writer.commit()  # publishes 2
            shutil.rmtree(src)  # and prunes the one being copied
        real_copy(src, dst, durable)

    monkeypatch.setattr(edge_reader, "copy_tree", copy_during_a_publish)
    reader = EdgeIndexReader.open_latest(writer.root, tmp_path / "private")
    assert raced == [generations / "1"]
    assert reader.current_generation == 2
    assert anchors(reader.listing(SearchFilter(), None, 10)) == ["$a1"]
    assert len(list((tmp_path / "private").iterdir())) == 1  # the failed copy was removed
    reader.close()


@pytest.mark.slow
def test_hybrid_fuses_the_legs_by_weighted_min_max_and_reports_legs(writer: EdgeIndexWriter, tmp_path: Path):
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
        legs = {anchors([h])[0]: h.legs for h in hits}
        assert legs["$both"] == ("dense", "lexical")
        assert legs["$words"] == ("dense", "lexical")  # cosine 0 still ranks in the dense leg
        assert anchors(hits)[0] == "$both"
        assert hits[0].score == pytest.approx(sum(schema.LEG_WEIGHTS.values()))  # best in both legs

        # The same ranking and scores as fuse_legs over the two legs queried alone.
        def leg(query):
            found = reader._shard.query(
                qe.QueryRequest(limit=50, query=query, filter=qe.Filter(must=edge.conditions([schema.IS_WINDOW])))
            )
            return [(str(p.id), p.score) for p in found]

        expected = fuse_legs(
            [
                ("dense", leg(qe.Query.Nearest(dense, using="dense"))),
                ("lexical", leg(qe.Query.Nearest(qe.SparseVector([1], [1.0]), using="bm25"))),
            ],
            10,
        )
        assert [(h.point_id, h.legs) for h in hits] == [(pid, found) for pid, _, found in expected]
        for h, (_, score, _) in zip(hits, expected):
            assert h.score == pytest.approx(score)


def test_lexical_only_hit_reports_its_leg(writer: EdgeIndexWriter, tmp_path: Path):
    dense_only = [window(ROOM_A, f"$a{i}", i, dense=unit(1), sparse=SparseVector((9,), (1.0,))) for i in range(60)]
    writer.write_windows(ROOM_A, dense_only, [])
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b", 1, dense=unit(2), sparse=SparseVector((3,), (1.0,)))], [])
    with publish(writer, tmp_path) as reader:
        # Each leg takes 50: the dense leg fills with the 60 $a windows, only $b has token 3.
        hits = reader.hybrid(unit(1), SparseVector((3,), (1.0,)), SearchFilter(), 3)
        legs = {anchors([h])[0]: h.legs for h in hits}
        assert legs.pop("$b") == ("lexical",)
        assert set(legs.values()) == {("dense",)}
        assert reader.lexical(SparseVector((), ()), SearchFilter(), 5) == []


@pytest.mark.slow
def test_reader_close_removes_its_copy(writer: EdgeIndexWriter, tmp_path: Path):
    reader = publish(writer, tmp_path)
    copy = reader.copy_dir
    assert copy.is_dir()
    reader.close()
    reader.close()
    assert not copy.exists()
    with pytest.raises(RuntimeError, match="closed"):
        reader.listing(SearchFilter(), None, 1)


def test_discard_copies_clears_what_a_dead_reader_left(writer: EdgeIndexWriter, tmp_path: Path):
    private = tmp_path / "private"
    abandoned = publish(writer, tmp_path)  # never closed, as if its process died
    EdgeIndexReader.discard_copies(private)
    assert list(private.iterdir()) == []
    abandoned._shard.close()


@pytest.mark.slow
def test_a_generation_that_loads_but_cannot_be_read_leaves_no_copy(
    writer: EdgeIndexWriter, tmp_path: Path, monkeypatch
):
    # The reader retries every few seconds: a copy left per failed try would fill the disk.
    writer.commit()
    private = tmp_path / "private"

    def unreadable(reader: EdgeIndexReader) -> None:
        raise RuntimeError("meta point unreadable")

    monkeypatch.setattr(EdgeIndexReader, "_index_meta", unreadable)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="meta point unreadable"):
            EdgeIndexReader.open_latest(writer.root, private)
    assert list(private.iterdir()) == []


# ---------------------------------------------------------------- rebuild beside, swaps, compaction

NEW_META = IndexMeta(model="test-model", dim=DIM, chat_version="c2")


@pytest.mark.slow
def test_a_rebuild_is_written_beside_and_published_only_when_complete(writer: EdgeIndexWriter, tmp_path: Path):
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100)], [])
    writer.commit()
    writer.reset(NEW_META)
    assert writer.rebuilding and (writer.root / "rebuild").is_dir()
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 100)], [])
    writer.commit(complete=False)
    assert edge.read_current(writer.root) == 1
    writer.close()

    with EdgeIndexWriter(writer.root) as resumed:  # the next run finds the unfinished rebuild
        assert resumed.rebuilding and resumed.read_meta() == NEW_META
        assert resumed.rooms_with_data() == {ROOM_B}
        with EdgeIndexReader.open_latest(resumed.root, tmp_path / "private") as reader:
            assert reader.read_meta() == META and anchors(reader.listing(SearchFilter(), None, 10)) == ["$a1"]
        resumed.commit(complete=True)
        assert not resumed.rebuilding and edge.read_current(resumed.root) == 2
        assert not (resumed.root / "rebuild").exists()
        with EdgeIndexReader.open_latest(resumed.root, tmp_path / "private") as reader:
            assert reader.read_meta() == NEW_META and anchors(reader.listing(SearchFilter(), None, 10)) == ["$b1"]


@pytest.mark.parametrize("crash_after", ["next_renamed", "work_moved_out"])
@pytest.mark.slow
def test_a_swap_cut_short_by_a_crash_is_finished_on_open(writer: EdgeIndexWriter, crash_after: str):
    writer.commit()
    writer.reset(NEW_META)
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 100)], [])
    writer.commit(complete=False)
    writer.close()
    root = writer.root
    os.rename(root / "rebuild", root / "work.next")
    if crash_after == "work_moved_out":
        os.rename(root / "work", root / "work.old")
    with EdgeIndexWriter(root) as reopened:
        assert not reopened.rebuilding and reopened.read_meta() == NEW_META
        assert reopened.rooms_with_data() == {ROOM_B}
        reopened.commit()
        assert edge.read_current(root) == 2
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("work")) == ["work", "work.lock"]


@pytest.mark.slow
def test_compaction_drops_deleted_text_from_every_file_and_keeps_the_rest(writer: EdgeIndexWriter, tmp_path: Path):
    secret = b"OCELOT-SECRET"
    doomed = window(ROOM_A, "$gone", 100)
    doomed.payload[schema.MESSAGES][0]["body"] = secret.decode()
    kept = window(ROOM_A, "$kept", 200)
    writer.write_windows(ROOM_A, [doomed, kept], [])
    writer.commit()
    writer.write_windows(ROOM_A, [], [doomed.point_id])
    writer.commit()
    holding = [p for p in writer.root.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert holding  # Edge keeps deleted payloads in its segments and WAL (measured)
    writer.commit(compact=True)
    holding = [p for p in writer.root.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert holding == []
    assert writer.read_meta() == META
    with EdgeIndexReader.open_latest(writer.root, tmp_path / "private") as reader:
        assert anchors(reader.listing(SearchFilter(), None, 10)) == ["$kept"]


def _files_holding(directory: Path, needle: bytes) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes())


@pytest.mark.slow
def test_a_readers_copy_loads_without_the_generations_wal_and_serves_all_of_it(writer: EdgeIndexWriter, tmp_path: Path):
    """The log of a flushed generation is dead weight in a reader (mapped, replayed, resident):
    the copy starts with an empty one and still serves every window, deletions included."""
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a1", 100), window(ROOM_A, "$a2", 200)], [])
    writer.write_windows(ROOM_B, [window(ROOM_B, "$b1", 300)], [])
    writer.commit()
    writer.write_windows(ROOM_A, [window(ROOM_A, "$a3", 400)], [window(ROOM_A, "$a2", 200).point_id])
    reader = publish(writer, tmp_path)
    generation_wal = writer.root / "generations" / str(reader.current_generation) / "wal"
    assert _files_holding(generation_wal, b"body $a3")  # the published log does hold the writes
    assert _files_holding(reader.copy_dir / "shard" / edge_reader.WAL_DIR, b"body $a3") == []
    assert anchors(reader.listing(SearchFilter(), None, 10)) == ["$a1", "$b1", "$a3"]
    assert [h.window.messages[0].event_id for h in reader.hybrid(unit(0), SparseVector((), ()), SearchFilter(), 10)]
    reader.close()

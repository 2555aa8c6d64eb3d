"""The Edge writer's sealed segment layout: what a written shard's segments are, that the
reader's quantised-then-rescored dense leg ranks as an exact scan does, and that sealing keeps the
project's promise that a deleted window's text leaves every file of the state directory.

Real Qdrant Edge shards in temp dirs, tiny dims; a ``SegmentLayout`` with tiny thresholds so a
handful of windows fills and seals segments as 20,000 message rows do in production.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
import qdrant_edge as qe

from daemon.index import edge, schema
from daemon.index.edge_reader import EdgeIndexReader, read_page_mappings
from daemon.index.edge_writer import EdgeIndexWriter, SegmentLayout, recorded_scan_copy, sealed_layout
from daemon.index.port import IndexMeta, SearchFilter, SparseVector, WindowPoint

# Each test fills and seals real segments and publishes them (msyncs and syncs): `slow`.
pytestmark = pytest.mark.slow

DIM = 16
META = IndexMeta(model="test-model", dim=DIM, chat_version="c1")
ROOM = "!alpha:example.org"
# Sizes in KB of vector data; a window here is 3 rows of 16 floats (192 bytes).
TINY = SegmentLayout(indexing_threshold_kb=4, max_segment_kb=16, segment_number=2, seal_rows=90)


def window(anchor: str, ts: int, rows: list[list[float]], body: str | None = None) -> WindowPoint:
    point_id = str(uuid.uuid5(uuid.NAMESPACE_URL, ROOM + "/" + anchor))
    events = [f"{anchor}.{i}" for i in range(len(rows))]
    payload = {
        schema.ROOM_ID: ROOM,
        schema.ROOM_ALIAS: None,
        schema.CORPUS: "chat",
        schema.CHUNK_ID: point_id,
        schema.ANCHOR_ID: anchor,
        schema.TS_START: ts,
        schema.TS_END: ts,
        schema.EVENT_IDS: events,
        schema.SENDERS: ["@ann:example.org"],
        schema.REDACTED_IDS: [],
        schema.N_MESSAGES: len(events),
        schema.MESSAGES: [
            {"event_id": e, "sender": "@ann:example.org", "ts": ts, "body": body or f"body {e}"} for e in events
        ],
        "text": f"text of {anchor}",
        "closed": True,
        schema.CHAT_VERSION: "c1",
    }
    return WindowPoint(point_id, rows, SparseVector((ts % 50,), (1.0,)), payload)


def random_rows(rng: random.Random, n: int) -> list[list[float]]:
    return [[rng.gauss(0.0, 1.0) for _ in range(DIM)] for _ in range(n)]


def segment_configs(shard_dir: Path) -> list[dict[str, Any]]:
    return [json.loads((s / "segment.json").read_text())["config"] for s in (shard_dir / "segments").iterdir()]


def is_sealed(config: dict[str, Any]) -> bool:
    return config["vector_data"][schema.DENSE]["index"]["type"] != "plain"  # appendable: plain, sealed: hnsw (m=0)


def _writer(root: Path):
    w = EdgeIndexWriter(root / "index", layout=TINY)
    w.reset(META)
    yield w
    w.close()


@pytest.fixture
def writer(tmp_path: Path):
    yield from _writer(tmp_path)


@pytest.fixture
def disk_writer(disk_tmp_path: Path):
    """On the disk, for the test that reads how much of each file is allocated (sparse there, all
    of it on tmpfs, where ``tmp_path`` may live). The other tests stay on ``tmp_path``: each of
    their seals and commits msyncs every map and syncs the filesystem, seconds a test on a disk."""
    yield from _writer(disk_tmp_path)


def write_many(writer: EdgeIndexWriter, n: int, seed: int = 3, body: str | None = None) -> list[WindowPoint]:
    rng = random.Random(seed)
    points = [window(f"$w{seed}_{i}", 1000 * seed + i, random_rows(rng, 3), body) for i in range(n)]
    for start in range(0, n, 10):  # checkpoints of 10 windows, as a run writes them
        writer.write_windows(ROOM, points[start : start + 10], [])
    return points


def test_a_new_shard_is_created_graphless_quantised_and_cold(writer: EdgeIndexWriter):
    config = json.loads((writer.work / "edge_config.json").read_text())
    dense = config["vectors"][schema.DENSE]
    assert config["hnsw_config"]["m"] == 0  # no graph: the scan stays exact
    # 1-bit copies pinned in RAM for the scan (48 bytes a 384-d row against int8's 384).
    assert dense["quantization_config"] == {"turbo": {"bits": "bits1", "memory": "pinned"}}
    assert dense["memory"] == "cold"  # the float32 originals are mapped, read for rescoring only
    assert config["sparse_vectors"][schema.SPARSE]["memory"] == "cold"
    assert config["payload_memory"] == "cold" and config["id_tracker_memory"] == "cold"
    assert config["optimizers"]["max_segment_size"] == TINY.max_segment_kb
    assert sealed_layout(writer.work)


def test_a_long_run_seals_bounded_segments_and_the_generation_is_served_sealed(disk_writer: EdgeIndexWriter, tmp_path):
    writer = disk_writer
    points = write_many(writer, 120)  # 360 rows: four seals on the way
    configs = segment_configs(writer.work)
    sealed = [c for c in configs if is_sealed(c)]
    assert len(sealed) >= 2  # sealed during the run, not only at the end
    for config in sealed:
        dense = config["vector_data"][schema.DENSE]
        assert dense["index"]["options"]["m"] == 0
        assert "turbo" in dense["quantization_config"]
    for segment in (writer.work / "segments").iterdir():  # bounded: none holds the whole shard (23 KB)
        vectors = segment / f"vector_storage-{schema.DENSE}" / "vectors"
        allocated = sum(f.stat().st_blocks * 512 for f in vectors.rglob("*.mmap"))  # files are sparse
        assert allocated <= TINY.max_segment_kb * 1024
    writer.commit()
    generation = edge.generations_dir(writer.root) / str(edge.read_current(writer.root))
    for segment in (generation / "segments").iterdir():  # Edge keeps one appendable segment, left empty
        config = json.loads((segment / "segment.json").read_text())["config"]
        if not is_sealed(config):
            vectors = segment / f"vector_storage-{schema.DENSE}" / "vectors"
            assert sum(f.stat().st_blocks for f in vectors.rglob("*.mmap")) == 0
    with EdgeIndexReader.open_latest(writer.root, tmp_path / "private") as reader:
        assert reader.window_counts() == {ROOM: len(points)}


def test_the_quantised_dense_leg_ranks_as_the_exact_scan(writer: EdgeIndexWriter, tmp_path: Path):
    write_many(writer, 150, seed=5)
    writer.commit()
    rng = random.Random(11)
    with EdgeIndexReader.open_latest(writer.root, tmp_path / "private") as reader:
        assert_ranks_as_the_exact_scan(reader, rng, "turbo")


def test_an_int8_shard_is_served_as_it_is_and_rewritten_with_1_bit_copies_by_the_next_commit(tmp_path: Path):
    """A shard made before the 1-bit copies (int8 ones, eight times the RAM): the reader ranks it
    exactly until the writer's next commit rewrites it (the compaction) with this layout's copies,
    every window kept."""
    old = EdgeIndexWriter(tmp_path / "index", layout=dataclasses.replace(TINY, scan_copy="int8"))
    old.reset(META)
    points = write_many(old, 150, seed=5)
    old.commit()
    old.close()
    rng = random.Random(11)
    with EdgeIndexReader.open_latest(tmp_path / "index", tmp_path / "private") as reader:
        assert_ranks_as_the_exact_scan(reader, rng, "scalar")
    writer = EdgeIndexWriter(tmp_path / "index", layout=TINY)
    try:
        writer.commit()  # a run that wrote nothing
        assert recorded_scan_copy(writer.work) == {"turbo": {"bits": "bits1", "memory": "pinned"}}
        published = writer.root / "generations" / str(edge.read_current(writer.root))
        assert recorded_scan_copy(published) == recorded_scan_copy(writer.work)
        generation = edge.read_current(writer.root)
        writer.commit()  # rewritten once, not at every commit
        assert edge.read_current(writer.root) == generation
    finally:
        writer.close()
    with EdgeIndexReader.open_latest(tmp_path / "index", tmp_path / "private") as reader:
        assert reader.window_counts() == {ROOM: len(points)}
        assert_ranks_as_the_exact_scan(reader, rng, "turbo")


def assert_ranks_as_the_exact_scan(reader: EdgeIndexReader, rng: random.Random, copy: str) -> None:
    """The reader's dense leg (the scan of the ``copy`` copies, rescored) orders the windows as an
    exact float32 scan does."""
    shard = reader._require_shard()
    sealed = [c for c in segment_configs(reader.copy_dir / "shard") if is_sealed(c)]
    assert sealed and all(copy in c["vector_data"][schema.DENSE]["quantization_config"] for c in sealed)
    for _ in range(20):
        query = [rng.gauss(0.0, 1.0) for _ in range(DIM)]
        exact = shard.query(
            qe.QueryRequest(
                limit=40,
                query=qe.Query.Nearest(query, using=schema.DENSE),
                filter=qe.Filter(must=edge.conditions([schema.IS_WINDOW])),
                params=qe.SearchParams(exact=True),
            )
        )
        hits = reader.hybrid(query, SparseVector((), ()), SearchFilter(), 10)
        assert [h.point_id for h in hits] == [str(p.id) for p in exact[:10]]


def test_a_deleted_windows_text_leaves_every_file_after_sealing_and_compaction(writer: EdgeIndexWriter, tmp_path):
    secret = "OCELOT-SEALED-SECRET"
    doomed = write_many(writer, 40, seed=7, body=secret)[:30]
    write_many(writer, 60, seed=8)
    writer.commit()
    assert any(secret.encode() in p.read_bytes() for p in (writer.work / "segments").rglob("*") if p.is_file())
    assert any(is_sealed(c) for c in segment_configs(writer.work))  # the secret sits in sealed segments
    writer.write_windows(ROOM, [], [p.point_id for p in doomed])
    rest = [window(f"$w7_{i}", 7000 + i, random_rows(random.Random(i), 3)) for i in range(30, 40)]
    writer.write_windows(ROOM, rest, [])  # the other 10 windows that held it, rewritten without it
    writer.commit(compact=True)
    holding = [p for p in writer.root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert holding == []
    with EdgeIndexReader.open_latest(writer.root, tmp_path / "private") as reader:
        assert reader.window_counts() == {ROOM: 70}


def _resident_kb(copy_dir: Path, part: str) -> int:
    """Rss of this process's mappings of files under ``copy_dir`` whose path holds ``part``."""
    total, current = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            current = len(head) >= 6 and str(copy_dir) in head[5] and part in head[5]
        elif current and head and head[0] == "Rss:":
            total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux /proc only")
def test_release_pages_leaves_no_page_of_the_vector_files_a_search_read_mapped(writer: EdgeIndexWriter, tmp_path: Path):
    """Edge never unmaps what a search read: without ``release_pages`` (which the reader service
    calls between requests) the originals a rescore touched stay in the reader's RSS (all of
    them, after a few hundred searches at 100k windows)."""
    write_many(writer, 150, seed=9)
    writer.commit()
    with EdgeIndexReader.open_latest(writer.root, tmp_path / "private") as reader:
        assert read_page_mappings(reader.copy_dir)  # the generation's vector and payload files are mapped
        hits = reader.hybrid([1.0] * DIM, SparseVector((3,), (1.0,)), SearchFilter(), 10)
        assert hits and hits[0].message_scores  # the originals were read (rescore, attribution)
        reader.release_pages()
        assert _resident_kb(reader.copy_dir, "/vectors/chunk_") == 0
        assert _resident_kb(reader.copy_dir, "/payload_storage/page_") == 0
        reader.lexical(SparseVector((3,), (1.0,)), SearchFilter(), 10)
        reader.release_pages()
        assert _resident_kb(reader.copy_dir, "/payload_storage/page_") == 0


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux /proc only")
def test_no_page_of_the_indexes_stays_mapped_after_the_load_or_a_search(writer: EdgeIndexWriter, tmp_path: Path):
    """The payload indexes, BM25 postings and id trackers are mapped as the vectors are, and were
    ~100 MB of a 100k-window reader's RSS (most from the load on): neither the load nor a search
    leaves a page of any file of the copy in the reader's page tables."""
    write_many(writer, 150, seed=9)
    writer.commit()
    with EdgeIndexReader.open_latest(writer.root, tmp_path / "private") as reader:
        assert _resident_kb(reader.copy_dir, "/payload_index/") == 0
        assert _resident_kb(reader.copy_dir, "/") == 0
        assert reader.hybrid([1.0] * DIM, SparseVector((3,), (1.0,)), SearchFilter(), 10)
        reader.release_pages()
        assert _resident_kb(reader.copy_dir, "/payload_index/") == 0
        assert _resident_kb(reader.copy_dir, "/inverted_index") == 0
        assert _resident_kb(reader.copy_dir, "/") == 0


def _segment_hashes(shard_dir: Path) -> dict[str, dict[str, str]]:
    return {
        segment.name: {
            str(f.relative_to(segment)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(segment.rglob("*"))
            if f.is_file()
        }
        for segment in (shard_dir / "segments").iterdir()
    }


def test_publishing_a_small_change_rewrites_no_sealed_segment(writer: EdgeIndexWriter, tmp_path: Path):
    """A change below the indexing threshold stays in the appendable segment: the next
    generation's sealed segments are the last one's, byte for byte (cloned, not rewritten, where
    the filesystem clones), and the reader serves the few new rows from the small appendable
    segment, bounded by ``indexing_threshold_kb``."""
    points = write_many(writer, 120)
    writer.commit()
    first = edge.generations_dir(writer.root) / str(edge.read_current(writer.root))
    before = _segment_hashes(first)
    sealed = {
        name
        for name in before
        if is_sealed(json.loads((first / "segments" / name / "segment.json").read_text())["config"])
    }
    assert sealed
    points += write_many(writer, 2, seed=9)  # 6 rows of 64 bytes, well under the 4 KB threshold
    writer.commit()
    second = edge.generations_dir(writer.root) / str(edge.read_current(writer.root))
    assert second != first
    after = _segment_hashes(second)
    assert {name: after.get(name) for name in sealed} == {name: before[name] for name in sealed}
    changed = [name for name in after if after[name] != before.get(name)]
    assert len(changed) == 1 and changed[0] not in sealed  # only the appendable segment took the change
    with EdgeIndexReader.open_latest(writer.root, tmp_path / "private") as reader:
        assert reader.window_counts() == {ROOM: len(points)}

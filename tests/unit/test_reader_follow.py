"""The reader follows a publication within a second: a stat of ``generations/CURRENT`` twice a
second starts the swap (``daemon.reader.follow``), not the slow periodic check."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from daemon.index import edge, edge_reader, edge_writer
from daemon.index.port import IndexMeta, WindowPoint
from daemon.reader.follow import FileChangeWatch
from daemon.reader.service import ReaderService
from tests.reader_fakes import ALICE, ROOM_A, FakeEmbedder, RecordingLogger, Running, make_window, message_vectors
from tests.reader_sockets import ask


def test_a_watch_sees_a_file_replaced_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "CURRENT"
    watch = FileChangeWatch(path)
    assert watch.changed()  # the first look always asks for a check
    assert not watch.changed()  # still absent
    path.write_text("1\n")
    assert watch.changed()
    assert not watch.changed() and not watch.changed()
    tmp = tmp_path / "CURRENT.tmp"
    tmp.write_text("2\n")  # same size, another inode, as the writer publishes
    os.replace(tmp, path)
    assert watch.changed()
    assert not watch.changed()
    path.unlink()
    assert watch.changed()


def test_a_published_generation_is_served_without_waiting_for_the_periodic_check(sock_dir: Path) -> None:
    root, private = sock_dir / "index", sock_dir / "private"
    embedder = FakeEmbedder()

    def point(event_id: str, body: str) -> WindowPoint:
        chunk_id = str(uuid.uuid5(uuid.NAMESPACE_URL, ROOM_A + event_id))
        payload = make_window(ROOM_A, [(event_id, ALICE, 1_000, body)], alias="#dev:x", chunk_id=chunk_id)
        return WindowPoint(chunk_id, message_vectors(payload), embedder.sparse_query(payload["text"]), payload)

    writer = edge_writer.EdgeIndexWriter(root)
    writer.reset(IndexMeta(model="fake-bag", dim=64, chat_version="test"))
    writer.write_windows(ROOM_A, [point("$1", "database migration failed")], [])
    writer.commit()
    # The periodic check and the check a request may start are an hour apart: only the follow
    # can swap within the bound below.
    service = ReaderService(
        lambda: edge_reader.EdgeIndexReader.open_latest(root, private),
        lambda: embedder,
        None,
        logger=RecordingLogger(),
        swap_check_s=3600,
        request_check_s=3600,
        follow=root / edge.GENERATIONS_DIR / edge.CURRENT_FILE,
        follow_s=0.5,
    )
    path = sock_dir / "r.sock"
    try:
        with Running(service, path):
            assert ask(path, {"v": 1, "op": "search", "texts": ["migration"], "top_k": 1})["result"]["hits"]
            writer.write_windows(ROOM_A, [point("$2", "zeppelin sighted over the harbour")], [])
            writer.commit()
            published = edge.read_current(root)
            deadline = time.monotonic() + 30  # generous: the follow looks every 0.5 s
            while service.swaps < 1:
                assert time.monotonic() < deadline, "the reader did not follow the publication"
                time.sleep(0.05)
            hits = ask(path, {"v": 1, "op": "search", "texts": ["zeppelin"], "top_k": 1})["result"]["hits"]
            assert hits and hits[0]["first_event_id"] == "$2"
            assert service._current is not None and service._current.generation == published
    finally:
        writer.close()

"""The incremental cost of a refresh, counted: homeserver calls per room in the run summary, texts
embedded by a run with nothing new (none) and by one new message in one of 16 rooms (one window).

The homeserver is the in-memory fake (unit tests); ``make bench`` measures the same figures against a
real Synapse.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from chunker.fold import Bounds
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.refresher.run import Refresher, RefreshOptions
from scope import Policy
from tests.fakes import FakeEmbedder, FakeMatrix, ListLog

ALICE = "@alice:hs.test"
ROOMS = [f"!room{i:02d}" for i in range(16)]


def _refresh(hs: FakeMatrix, index: EdgeIndexWriter, embedder: FakeEmbedder, state_dir: Path | None = None):
    refresher = Refresher(
        matrix=hs, index=index, embedder=embedder,
        policy=Policy.build(allowed=tuple(ROOMS), exclude=(), bridge_sender_patterns=()),
        log=ListLog(),
        options=RefreshOptions(bounds=Bounds(max_bytes=300, max_gap_ms=3_600_000), page_size=50,
                               state_dir=state_dir),
    )
    return asyncio.run(refresher.run())


def _sixteen_rooms(hs: FakeMatrix) -> None:
    for n, room in enumerate(ROOMS):
        hs.add_room(room)
        for i in range(30):
            hs.send(room, ALICE, f"room {n} says thing number {i} about the build")


def test_the_run_summary_counts_homeserver_requests_per_room_and_in_all(tmp_path: Path):
    hs = FakeMatrix()
    _sixteen_rooms(hs)
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        first = _refresh(hs, index, FakeEmbedder(), state_dir=tmp_path)
    finally:
        index.close()
    assert set(first.homeserver_requests_per_room) == set(ROOMS)
    # Each room: one state read and the /messages pages (30 messages + state events, page 50, then
    # the empty page that ends the read).
    assert all(n >= 3 for n in first.homeserver_requests_per_room.values())
    assert first.homeserver_requests == first.homeserver_requests_global + sum(
        first.homeserver_requests_per_room.values())
    assert first.homeserver_requests_global >= 3  # whoami, joined rooms, invites, m.direct
    written = json.loads((tmp_path / "last_run.json").read_text())
    assert written["homeserver_requests"] == first.homeserver_requests
    assert written["homeserver_requests_per_room"] == first.homeserver_requests_per_room


def test_a_refresh_with_nothing_new_embeds_nothing_and_asks_at_most_two_requests_per_room(tmp_path: Path):
    hs = FakeMatrix()
    _sixteen_rooms(hs)
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        _refresh(hs, index, FakeEmbedder())
        embedder = FakeEmbedder()
        noop = _refresh(hs, index, embedder)
    finally:
        index.close()
    assert noop.texts_embedded == 0 and embedder.embedded == []
    assert noop.windows_written == 0 and noop.events_read == 0
    assert set(noop.homeserver_requests_per_room) == set(ROOMS)
    assert max(noop.homeserver_requests_per_room.values()) <= 2


def test_one_new_message_in_one_of_sixteen_rooms_re_embeds_exactly_one_window(tmp_path: Path):
    hs = FakeMatrix()
    _sixteen_rooms(hs)
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        _refresh(hs, index, FakeEmbedder())
        hs.send(ROOMS[7], ALICE, "one more thing about the build")
        embedder = FakeEmbedder()
        after = _refresh(hs, index, embedder)
    finally:
        index.close()
    assert after.events_read == 1
    assert after.texts_embedded == 1 and len(embedder.embedded) == 1
    assert "one more thing about the build" in embedder.embedded[0]
    assert after.windows_written == 1
    assert max(n for room, n in after.homeserver_requests_per_room.items() if room != ROOMS[7]) <= 2

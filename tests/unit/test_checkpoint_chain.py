"""The refresher's checkpoints as a chain (daemon/refresher/run.py ``_checkpoint``): the next
checkpoint embeds while the one before it writes, writes and cursors keep their order, and what
a backfill stores is the same however the embedder's pace and the reads interleave.

Ordering is shown by handshakes between the embedder's worker thread and the index, never by
timing: a write that would have to wait for the next embedding gives up after a few seconds and
the test fails.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Sequence

import pytest

from chunker.fold import Bounds
from daemon.index.edge_writer import EdgeIndexWriter
from tests.fakes import FakeEmbedder, FakeMatrix, run_refresher

ALICE = "@alice:hs.test"
BOB = "@bob:hs.test"
BOUNDS = Bounds(max_bytes=300, max_gap_ms=3_600_000)


def _run(hs: FakeMatrix, index: Any, embedder: Any, rooms: list[str], **options: Any):
    return run_refresher(hs, index, embedder, rooms, bounds=BOUNDS, **options)


def _bodies(index: EdgeIndexWriter, room_id: str) -> list[str]:
    payloads = sorted(index.windows_in_span(room_id, 0, 10**15), key=lambda p: (p["ts_start"], p["messages"][0]["ts"]))
    return [m["body"] for p in payloads for m in p["messages"]]


class _GatedEmbedder(FakeEmbedder):
    """Records each embed call's start (in the worker thread) and can hold a call until told."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.started: list[threading.Event] = [threading.Event() for _ in range(64)]
        self.release_first = threading.Event()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        call, self.calls = self.calls, self.calls + 1
        self.started[call].set()
        if call == 0:
            self.release_first.wait(10)
        return super().embed(texts)


def test_the_next_checkpoint_embeds_before_the_one_before_it_writes(tmp_path: Path):
    """Two rooms, one checkpoint each: room two's lines are being embedded by the time room one's
    windows are written (its write waits for that embedding to begin). Before the chain, room
    one's write came first and room two's embedding began only after it."""
    hs = FakeMatrix()
    for room in ("!one", "!two"):
        hs.add_room(room)
        for i in range(6):
            hs.send(room, ALICE, f"{room} says line {i} about the build")
    embedder = _GatedEmbedder()
    index = EdgeIndexWriter(tmp_path / "index")
    order: list[str] = []
    real_write = index.write_windows

    def write_windows(room_id: str, upserts: Any, deletes: Any) -> None:
        if room_id == "!one":
            # Room two's embedding has begun (or never will: then this fails after 5 s).
            order.append("two embedding" if embedder.started[1].wait(5) else "no embedding yet")
        order.append(f"write {room_id}")
        real_write(room_id, upserts, deletes)

    index.write_windows = write_windows  # type: ignore[method-assign]

    # Room one's embedding is held until room two has been read to its end (its last, empty page).
    real_messages = hs.messages

    async def messages(room_id: str, start: str | None, limit: int) -> Any:
        page = await real_messages(room_id, start, limit)
        if room_id == "!two" and not page.events:
            embedder.release_first.set()
        return page

    hs.messages = messages  # type: ignore[method-assign]
    try:
        summary = _run(hs, index, embedder, ["!one", "!two"], page_size=50)
        assert summary.exit_code == 0
        assert order[:2] == ["two embedding", "write !one"]
        assert order.index("write !one") < order.index("write !two")  # writes keep their order
        assert _bodies(index, "!one") == [f"!one says line {i} about the build" for i in range(6)]
        assert _bodies(index, "!two") == [f"!two says line {i} about the build" for i in range(6)]
        assert index.get_cursor("!two") is not None
    finally:
        index.close()


class _SlowEmbedder(FakeEmbedder):
    """Every call takes a while, so the read always reaches its next checkpoint first and every
    checkpoint waits in the chain."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        time.sleep(0.02)
        return super().embed(texts)


def _busy_room(hs: FakeMatrix) -> tuple[list[str], str]:
    """Messages that close windows often, and edits of messages a few checkpoints back: the
    fold must still hold (or find in the index) each edited message's window."""
    hs.add_room("!pub")
    sent: list[str] = []
    want: list[str] = []
    last = ""
    for i in range(60):
        sent.append(hs.send("!pub", ALICE if i % 2 else BOB, f"line {i} " + "word " * 12, gap_ms=60_000))
        want.append(f"line {i} " + "word " * 12)
        if i >= 12 and i % 6 == 0:
            target = i - 9
            last = hs.edit("!pub", ALICE if target % 2 else BOB, sent[target], f"line {target} edited")
            want[target] = f"line {target} edited"
    return [w.strip() for w in want], sent[-1] if sent[-1] > last else last


def test_a_backfill_through_a_busy_chain_stores_what_a_one_call_refresh_stores(tmp_path: Path):
    """Many checkpoints in one room, each waiting for the one before it to embed, with edits
    whose targets lie a few checkpoints back: the same windows and cursor as a refresh that
    takes the whole room in one checkpoint, and the next run has nothing to embed."""
    chained_hs, single_hs = FakeMatrix(), FakeMatrix()
    want, chained_last = _busy_room(chained_hs)
    _, single_last = _busy_room(single_hs)
    chained = EdgeIndexWriter(tmp_path / "chained")
    single = EdgeIndexWriter(tmp_path / "single")
    try:
        summary = _run(chained_hs, chained, _SlowEmbedder(), ["!pub"], page_size=5, checkpoint_events=5)
        assert summary.exit_code == 0
        _run(single_hs, single, FakeEmbedder(), ["!pub"], page_size=500, checkpoint_events=10_000)
        assert [b.strip() for b in _bodies(chained, "!pub")] == want
        assert _bodies(chained, "!pub") == _bodies(single, "!pub")
        assert chained.get_cursor("!pub").last_event_id == chained_last
        assert single.get_cursor("!pub").last_event_id == single_last
        again = _run(chained_hs, chained, FakeEmbedder(), ["!pub"], page_size=5, checkpoint_events=5)
        assert again.texts_embedded == 0 and again.windows_written == 0
    finally:
        chained.close()
        single.close()


@pytest.mark.slow
def test_a_long_backfill_through_the_chain_lets_the_fold_release_what_was_written(tmp_path: Path, monkeypatch: Any):
    """A write releases the fold's settled windows except those a later checkpoint took and has
    not written. Before, only the newest take's write released, and in a backfill a later
    checkpoint has always taken by then: the fold held every window of the run until its end
    (~230 MB at 1M messages, bench/scale.py)."""
    from chunker.fold import RoomFold

    held_at_take: list[int] = []
    take_changes = RoomFold.take_changes

    def recording(self: RoomFold) -> Any:
        held_at_take.append(len(self.windows()))
        return take_changes(self)

    monkeypatch.setattr(RoomFold, "take_changes", recording)
    hs = FakeMatrix()
    hs.add_room("!pub")
    for i in range(240):
        hs.send("!pub", ALICE, f"line {i} of the long backfill about the build server cache " * 3)
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        summary = _run(hs, index, _SlowEmbedder(), ["!pub"], page_size=5, checkpoint_events=5)
        assert summary.exit_code == 0 and summary.windows_written >= 100
    finally:
        index.close()
    assert len(held_at_take) >= 40
    assert max(held_at_take) <= 12, held_at_take  # two checkpoints' windows and the open one, not the run

"""The incremental cost of a refresh, counted: homeserver calls per room in the run summary, texts
embedded by a run with nothing new (none), by one new message in one of 16 rooms (that message's
line and its context row: its window is rewritten, but the unchanged rows reuse their stored
vectors) and by an edit (the edited line and the context rows that repeat it).

The homeserver is the in-memory fake (unit tests); ``make bench`` measures the same figures against a
real Synapse.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from chunker.fold import Bounds
from daemon.index import schema
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.index.port import IndexWriteError
from daemon.ports import MatrixError
from tests.fakes import FakeEmbedder, FakeMatrix, ListLog, run_refresher

ALICE = "@alice:hs.test"
ROOMS = [f"!room{i:02d}" for i in range(16)]
BOUNDS = Bounds(max_bytes=300, max_gap_ms=3_600_000)


def _refresh(hs: FakeMatrix, index: EdgeIndexWriter, embedder: FakeEmbedder, state_dir: Path | None = None):
    return run_refresher(hs, index, embedder, ROOMS, bounds=BOUNDS, page_size=50, state_dir=state_dir)


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
        first.homeserver_requests_per_room.values()
    )
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


def test_one_new_message_in_one_of_sixteen_rooms_embeds_exactly_that_message_and_its_context(tmp_path: Path):
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
    assert embedder.embedded == [
        "alice: one more thing about the build",
        "alice: room 7 says thing number 29 about the build\nalice: one more thing about the build",
    ]
    assert after.texts_embedded == 2
    assert after.windows_written == 1


def test_an_edit_re_embeds_only_the_edited_line_and_the_context_row_that_repeats_it(tmp_path: Path):
    hs = FakeMatrix()
    hs.add_room(ROOMS[0])
    first = hs.send(ROOMS[0], ALICE, "the build is green")
    hs.send(ROOMS[0], ALICE, "deploying now")
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        before = _refresh(hs, index, FakeEmbedder())
        hs.edit(ROOMS[0], ALICE, first, "the build is red")
        embedder = FakeEmbedder()
        after = _refresh(hs, index, embedder)
        stored = index.message_vectors([str(r.id) for r in index._scroll([schema.IS_WINDOW])])
    finally:
        index.close()
    assert before.texts_embedded == 3
    assert embedder.embedded == ["alice: the build is red", "alice: the build is red\nalice: deploying now"]
    assert after.windows_written == 1
    # No row of the old text is left: the context row was made again from the edited line.
    assert set(stored) == {
        "alice: the build is red",
        "alice: deploying now",
        "alice: the build is red\nalice: deploying now",
    }


class _SlowEmbedder(FakeEmbedder):
    """Embedding takes time, and says when it ran (it runs in a worker thread)."""

    def __init__(self, trace: list[str]) -> None:
        super().__init__()
        self.trace = trace

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.trace.append("embed_start")
        import time

        time.sleep(0.05)
        self.trace.append("embed_end")
        return super().embed(texts)


class _TracedMatrix(FakeMatrix):
    def __init__(self, trace: list[str]) -> None:
        super().__init__()
        self.trace = trace

    async def messages(self, room_id, start, limit):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.01)  # the homeserver's answer takes a moment
        page = await super().messages(room_id, start, limit)
        self.trace.append(f"answered {start}")
        return page


def test_the_next_page_is_read_while_the_current_one_is_embedded(tmp_path: Path):
    """Ingest at the embedding bound: reading overlaps embedding (bench: ingest_vs_embed_ratio)."""
    trace: list[str] = []
    hs = _TracedMatrix(trace)
    hs.add_room(ROOMS[0])
    for i in range(120):
        hs.send(ROOMS[0], ALICE, f"message {i} about the build and the deploy and the cache")
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        summary = run_refresher(
            hs, index, _SlowEmbedder(trace), ROOMS[:1], bounds=BOUNDS, page_size=20, checkpoint_events=20
        )
    finally:
        index.close()
    assert summary.exit_code == 0 and summary.events_read > 100
    # Pages were answered while an embedding ran: the homeserver's time is hidden behind it.
    overlapped = 0
    for position, entry in enumerate(trace):
        if entry == "embed_start":
            end = trace.index("embed_end", position)
            overlapped += any(e.startswith("answered ") for e in trace[position + 1 : end])
    assert overlapped >= 3, trace


async def _listed(rooms: list[str]) -> list[str]:
    return list(rooms)


def _noop_after_change(tmp_path: Path, change) -> tuple:  # type: ignore[no-untyped-def]
    """A first run over 16 rooms, a change the timeline does not show, then a second run."""
    hs = FakeMatrix()
    _sixteen_rooms(hs)
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        _refresh(hs, index, FakeEmbedder())
        change(hs)
        calls_before = hs.message_calls
        second = _refresh(hs, index, FakeEmbedder())
        stored = set(index.rooms_with_data())
    finally:
        index.close()
    return second, hs.message_calls - calls_before, stored


@pytest.mark.slow
def test_a_room_with_nothing_new_is_not_read_but_still_decided_from_its_current_state(tmp_path: Path):
    """/messages is skipped when the run's /sync shows no new event, yet scope still decides every
    room from the state read in this run: a room that turned encrypted (a state change only) goes."""

    def encrypt(hs: FakeMatrix) -> None:
        hs.rooms[ROOMS[3]].state.append(
            {"type": "m.room.encryption", "state_key": "", "sender": ALICE, "content": {"algorithm": "m.megolm"}}
        )

    second, message_calls, stored = _noop_after_change(tmp_path, encrypt)
    assert message_calls == 0
    assert second.rooms_refused == 1 and ROOMS[3] not in stored and len(stored) == 15


@pytest.mark.slow
def test_a_directory_alias_added_without_a_state_change_still_refuses_the_room(tmp_path: Path):
    def roster_alias(hs: FakeMatrix) -> None:
        hs.aliases["#Members:hs.test"] = ROOMS[5]  # directory only; the lock matches in any case

    second, _, stored = _noop_after_change(tmp_path, roster_alias)
    assert second.rooms_refused == 1 and ROOMS[5] not in stored


@pytest.mark.slow
def test_a_kick_is_read_from_the_room_state_without_asking_for_the_membership_alone(tmp_path: Path):
    """Kicked after the run listed its joined rooms: the room's turn sees it in the state it reads."""
    asked: list[str] = []

    def kick(hs: FakeMatrix) -> None:
        hs.kick(ROOMS[9])
        hs.joined_rooms = lambda: _listed(ROOMS)  # type: ignore[method-assign]
        inner = hs.membership

        async def membership(room_id):  # type: ignore[no-untyped-def]
            asked.append(room_id)
            return await inner(room_id)

        hs.membership = membership  # type: ignore[method-assign]

    second, _, stored = _noop_after_change(tmp_path, kick)
    assert ROOMS[9] not in stored and second.rooms_purged == 1
    assert asked == []


@pytest.mark.slow
def test_without_the_sync_overview_every_room_is_read(tmp_path: Path):
    """The skip needs proof: when /sync fails, /messages is asked for every room."""

    def break_sync(hs: FakeMatrix) -> None:
        async def rooms_overview():  # type: ignore[no-untyped-def]
            raise MatrixError("invited_rooms", 500, "M_UNKNOWN")

        hs.rooms_overview = rooms_overview  # type: ignore[method-assign]

    second, message_calls, stored = _noop_after_change(tmp_path, break_sync)
    assert message_calls == len(ROOMS) and second.events_read == 0 and len(stored) == 16


class _StateTracedMatrix(_TracedMatrix):
    async def room_state(self, room_id):  # type: ignore[no-untyped-def]
        self.trace.append(f"state {room_id}")
        return await super().room_state(room_id)


def test_the_next_room_is_decided_and_read_while_the_last_one_is_embedded(tmp_path: Path):
    """The pipeline around the embed call: a room's last checkpoint is embedded and written while
    the next room's state and first page are read."""
    trace: list[str] = []
    hs = _StateTracedMatrix(trace)
    for room in ROOMS[:3]:
        hs.add_room(room)
        for i in range(10):
            hs.send(room, ALICE, f"{room} message {i} about the build")
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        summary = run_refresher(hs, index, _SlowEmbedder(trace), ROOMS[:3], bounds=BOUNDS, page_size=50)
        assert all(index.get_cursor(room) is not None for room in ROOMS[:3])
    finally:
        index.close()
    assert summary.exit_code == 0 and summary.texts_embedded > 0
    # The first room's only checkpoint had not finished embedding when the second room was decided.
    assert trace.index(f"state {ROOMS[1]}") < trace.index("embed_end"), trace


class _FailingRoomWrites:
    """The index, refusing every window write of one room."""

    def __init__(self, inner: EdgeIndexWriter, room_id: str) -> None:
        self._inner = inner
        self._room_id = room_id

    def write_windows(self, room_id, upserts, delete_ids):  # type: ignore[no-untyped-def]
        if room_id == self._room_id:
            raise IndexWriteError("injected")
        return self._inner.write_windows(room_id, upserts, delete_ids)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._inner, name)


def test_a_write_that_fails_behind_the_next_room_fails_its_own_room_and_sets_no_cursor(tmp_path: Path):
    hs = FakeMatrix()
    for room in ROOMS[:2]:
        hs.add_room(room)
        for i in range(10):
            hs.send(room, ALICE, f"{room} message {i} about the build")
    index = EdgeIndexWriter(tmp_path / "index")
    log = ListLog()
    try:
        failing = _FailingRoomWrites(index, ROOMS[0])
        summary = run_refresher(hs, failing, FakeEmbedder(), ROOMS[:2], log=log, bounds=BOUNDS, page_size=50)
        assert index.get_cursor(ROOMS[0]) is None and index.get_cursor(ROOMS[1]) is not None
        assert set(index.rooms_with_data()) == {ROOMS[1]}
    finally:
        index.close()
    assert summary.failed_rooms == [ROOMS[0]]
    assert [r["room_id"] for r in log.events("room_failed")] == [ROOMS[0]]


class _CursorChecks:
    """The index, checking at every cursor write that the cursor's open window is stored: a crash
    right after it must resume from a window the index holds."""

    def __init__(self, inner: EdgeIndexWriter) -> None:
        self._inner = inner
        self.cursors = 0

    def set_cursor(self, cursor):  # type: ignore[no-untyped-def]
        assert cursor.open_window_id is None or self._inner.get_windows([cursor.open_window_id]), cursor
        self.cursors += 1
        return self._inner.set_cursor(cursor)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._inner, name)


def test_a_cursor_written_behind_the_reading_names_a_window_already_stored(tmp_path: Path):
    trace: list[str] = []
    hs = _TracedMatrix(trace)
    hs.add_room(ROOMS[0])
    for i in range(120):
        hs.send(ROOMS[0], ALICE, f"message {i} about the build and the deploy and the cache")
    index = EdgeIndexWriter(tmp_path / "index")
    checked = _CursorChecks(index)
    try:
        summary = run_refresher(
            hs, checked, _SlowEmbedder(trace), ROOMS[:1], bounds=BOUNDS, page_size=20, checkpoint_events=20
        )
    finally:
        index.close()
    assert summary.exit_code == 0 and checked.cursors >= 5


def test_a_message_after_a_gap_rewrites_two_windows_and_embeds_one_line(tmp_path: Path):
    hs = FakeMatrix()
    hs.add_room(ROOMS[0])
    hs.send(ROOMS[0], ALICE, "the build is green")
    hs.send(ROOMS[0], ALICE, "deploying now")
    index = EdgeIndexWriter(tmp_path / "index")
    try:
        _refresh(hs, index, FakeEmbedder())
        hs.send(ROOMS[0], ALICE, "next morning: all good", gap_ms=4_000_000)  # past the 1 h gap bound
        embedder = FakeEmbedder()
        after = _refresh(hs, index, embedder)
    finally:
        index.close()
    assert after.windows_written == 2  # the new window, and the one it closed
    assert embedder.embedded == ["alice: next morning: all good"]

"""A refresh asked to stop (``daemon/refresher/stopping.py``), over the in-memory homeserver and
the real Edge index: where it stops, what it journals and returns, and that the next run
converges on what an uninterrupted run stores. The same against a real Synapse and a real
SIGTERM: tests/integration/test_refresh_signals_synapse.py.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chunker.fold import Bounds
from daemon.errors import EXIT_INTERRUPTED, EXIT_OK
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.refresher.run import Refresher, RefreshOptions
from daemon.refresher.stopping import StopRequest
from scope import Policy
from tests.fakes import FakeEmbedder, FakeMatrix, ListLog

REPO = Path(__file__).resolve().parents[2]
ALICE = "@alice:hs.test"
ROOMS = ("!a:hs.test", "!b:hs.test")
OPTIONS = RefreshOptions(bounds=Bounds(max_bytes=300, max_gap_ms=3_600_000), page_size=7, checkpoint_events=10)


def _homeserver() -> FakeMatrix:
    hs = FakeMatrix()
    for room in ROOMS:
        hs.add_room(room)
        for i in range(30):
            hs.send(room, ALICE, f"{room[1]}{i}: the ferry timetable for stop {i} changed again")
    return hs


def _refresh(hs: FakeMatrix, index: EdgeIndexWriter, stop: StopRequest | None = None) -> tuple[Any, ListLog]:
    log = ListLog()
    refresher = Refresher(
        matrix=hs, index=index, embedder=FakeEmbedder(), policy=Policy.build(allowed=ROOMS), log=log,
        options=OPTIONS, stop=stop,
    )  # fmt: skip
    return asyncio.run(refresher.run()), log


def _stop_after_pages(hs: FakeMatrix, pages: int, stop: StopRequest) -> None:
    """Ask for a stop (as SIGTERM would) once ``pages`` /messages answers have come back."""
    read, answered = hs.messages, [0]

    async def messages(*args: Any, **kwargs: Any) -> Any:
        page = await read(*args, **kwargs)
        answered[0] += 1
        if answered[0] == pages:
            stop.request("SIGTERM")
        return page

    hs.messages = messages  # type: ignore[method-assign]


def _state(index: EdgeIndexWriter) -> dict[str, Any]:
    windows = {
        p["chunk_id"]: [(m["event_id"], m["body"]) for m in p["messages"]]
        for room in ROOMS
        for p in index.windows_in_span(room, 0, 10**14)
    }
    cursors = {}
    for room in ROOMS:
        cursor = index.get_cursor(room)
        cursors[room] = None if cursor is None else (cursor.last_event_id, cursor.open_window_id)
    return {"windows": windows, "cursors": cursors}


@pytest.mark.parametrize("pages", [1, 3, 6, 9])
@pytest.mark.slow
def test_a_stop_ends_the_run_at_a_safe_point_and_the_next_run_converges(tmp_path: Path, pages: int) -> None:
    hs, stop = _homeserver(), StopRequest()
    with EdgeIndexWriter(tmp_path / "reference") as reference:
        summary, _ = _refresh(hs, reference)
        assert summary.exit_code == EXIT_OK
        expected = _state(reference)

    _stop_after_pages(hs, pages, stop)
    with EdgeIndexWriter(tmp_path / "index") as index:
        summary, log = _refresh(hs, index, stop)
        assert summary.interrupted == "SIGTERM" and summary.exit_code == EXIT_INTERRUPTED
        assert log.events("run_finished") == []
        [line] = log.events("run_interrupted")
        assert line["signal"] == "SIGTERM"
        assert line["rooms_done"] + line["rooms_remaining"] == len(ROOMS) and line["rooms_remaining"] >= 1
        stopped_in = line["room_stopped_in"]
        assert stopped_in in ROOMS  # every stop here lands inside a room's read, after a page
        # The room stopped part-way has its cursor where its written windows end: not at the end.
        cursor = index.get_cursor(stopped_in)
        assert cursor is not None and cursor.last_event_id != expected["cursors"][stopped_in][0]
        assert "room_stopped" in [r["event"] for r in log.records]
        # Nothing was purged for not being reached.
        assert log.events("room_purged") == []

        summary, log = _refresh(_without_stop(hs), index)
        assert summary.exit_code == EXIT_OK
        assert _state(index) == expected


def _without_stop(hs: FakeMatrix) -> FakeMatrix:
    """The same homeserver (the same events) without the stop."""
    hs.messages = type(hs).messages.__get__(hs)  # type: ignore[method-assign]
    return hs


@pytest.mark.slow
def test_a_stop_during_a_room_rebuild_keeps_no_redacted_text_and_the_next_run_finishes_it(tmp_path: Path) -> None:
    hs = FakeMatrix()
    room = ROOMS[0]
    hs.add_room(room)
    first = hs.send(room, ALICE, "original words")
    edit = hs.edit(room, ALICE, first, "EDITED-TEXT that alice took back")
    for i in range(30):
        hs.send(room, ALICE, f"later {i}: the ferry timetable changed again")
    with EdgeIndexWriter(tmp_path / "index") as index:
        log = ListLog()
        asyncio.run(
            Refresher(
                matrix=hs, index=index, embedder=FakeEmbedder(), policy=Policy.build(allowed=(room,)), log=log,
                options=OPTIONS,
            ).run()
        )  # fmt: skip
        hs.redact(room, ALICE, edit)  # an edit folded into a window: the room is rebuilt
        stop = StopRequest()
        _stop_after_pages(hs, 3, stop)
        log = ListLog()
        summary = asyncio.run(
            Refresher(
                matrix=hs, index=index, embedder=FakeEmbedder(), policy=Policy.build(allowed=(room,)), log=log,
                options=OPTIONS, stop=stop,
            ).run()
        )  # fmt: skip
        assert summary.exit_code == EXIT_INTERRUPTED
        assert log.events("room_rebuild_started") and not log.events("room_rebuilt")
        assert log.events("run_interrupted")[0]["room_stopped_in"] == room
        assert "EDITED-TEXT" not in json.dumps(index.windows_in_span(room, 0, 10**14))
        assert index.get_cursor(room) is None  # the next run rebuilds the room again

        _without_stop(hs)
        log = ListLog()
        summary = asyncio.run(
            Refresher(
                matrix=hs, index=index, embedder=FakeEmbedder(), policy=Policy.build(allowed=(room,)), log=log,
                options=OPTIONS,
            ).run()
        )  # fmt: skip
        assert summary.exit_code == EXIT_OK and log.events("room_rebuilt")
        bodies = [m["body"] for p in index.windows_in_span(room, 0, 10**14) for m in p["messages"]]
        assert bodies[0] == "original words" and len(bodies) == 31


def test_the_first_signal_asks_and_a_second_one_ends_the_process() -> None:
    script = (
        "import os, signal, time\n"
        "from daemon.refresher.stopping import StopRequest\n"
        "stop = StopRequest().install()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "print(stop.signal_name, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(30)\n"
        "print('still running', flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.stdout == "SIGTERM\n"
    assert proc.returncode == -signal.SIGINT

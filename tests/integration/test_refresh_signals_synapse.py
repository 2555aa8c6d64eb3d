"""SIGTERM at random points of a real refresh (`huginn-chat refresh`, the real embedder) against a
real Synapse, each followed by a run to the end.

Every interrupted run must stop at a safe point: one ``run_interrupted`` line naming the signal
and the rooms done and left, exit code ``EXIT_INTERRUPTED``, the index lock released. The run
that follows must leave the index holding exactly what an uninterrupted run holds: the same
window ids with the same message texts, and every room's cursor at the same last event and open
window.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench.reader_process import REPO, cli, run_cli
from daemon.errors import EXIT_INTERRUPTED, EXIT_OK
from daemon.index.edge_writer import EdgeIndexWriter

pytestmark = pytest.mark.synapse

ROOMS = ("harbour", "orchard", "quarry")
MESSAGES_PER_ROOM = 60
TRIALS = 3
# Journal lines a stop may follow: inside the rooms' turns, before the run commits.
TRIGGERS = frozenset({"room_admitted", "room_joined", "room_progress", "room_current", "index_rebuilt"})


@pytest.fixture(scope="module")
def env(synapse, tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("signals")
    alice = synapse.new_actor("alice")
    reader = synapse.new_actor("reader")
    rooms = []
    for name in ROOMS:
        room = alice.create_room(name=f"{name} notes")
        reader.join(room)
        for i in range(MESSAGES_PER_ROOM):
            alice.send_text(room, f"{name} {i}: the {name} log for day {i} says the weather held")
        rooms.append(room)
    token = tmp / "matrix-token"
    token.write_text(reader.account.access_token + "\n")
    token.chmod(0o600)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": synapse.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(token),
        "HUGINN_CHAT_ROOMS": json.dumps(rooms),
        "HUGINN_CHAT_PAGE_SIZE": "10",
    }


def _with_state(env: dict[str, str], state: Path) -> dict[str, str]:
    return {**env, "HUGINN_CHAT_STATE_DIR": str(state)}


def _journal(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _snapshot(state: Path) -> dict[str, Any]:
    """Every window's id with its messages' event ids and texts, and every room's cursor (less
    its paging token, which depends on where pages happened to break, and its write time)."""
    with EdgeIndexWriter(state / "index") as index:
        rooms = sorted(index.rooms_with_data())
        windows = {
            p["chunk_id"]: [(m["event_id"], m["body"]) for m in p["messages"]]
            for room in rooms
            for p in index.windows_in_span(room, 0, 10**14)
        }
        cursors = {}
        for room in rooms:
            cursor = index.get_cursor(room)
            cursors[room] = None if cursor is None else (cursor.last_event_id, cursor.open_window_id)
    return {"windows": windows, "cursors": cursors}


@pytest.fixture(scope="module")
def reference(env, tmp_path_factory) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    state = tmp_path_factory.mktemp("reference") / "state"
    proc = run_cli(_with_state(env, state), "refresh", timeout=300)
    lines = _journal(proc.stderr)
    assert proc.returncode == EXIT_OK, proc.stderr[-3000:]
    assert [line["event"] for line in lines].count("room_admitted") == len(ROOMS)
    snapshot = _snapshot(state)
    assert len(snapshot["windows"]) >= len(ROOMS)
    return snapshot, lines


def _refresh_until_signalled(env: dict[str, str], trigger: int) -> tuple[int, list[dict[str, Any]]]:
    """Run a refresh and send it SIGTERM as soon as its ``trigger``-th journal line of a
    ``TRIGGERS`` kind appears; return its exit code and journal."""
    proc = subprocess.Popen(
        cli("refresh"), env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[dict[str, Any]] = []
    seen = 0
    try:
        assert proc.stderr is not None
        for raw in proc.stderr:
            if not raw.startswith("{"):
                continue
            lines.append(json.loads(raw))
            if lines[-1].get("event") in TRIGGERS:
                seen += 1
                if seen == trigger:
                    proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=300), lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("trial", range(TRIALS))
def test_sigterm_at_a_random_point_stops_cleanly_and_the_next_run_converges(env, reference, tmp_path, trial):
    expected, reference_lines = reference
    triggers = [line for line in reference_lines if line.get("event") in TRIGGERS]
    rng = random.Random(2600 + trial)
    # The first trial stops just as the first room's read begins (a stop part-way through a
    # room's history); the others anywhere in the rooms' turns.
    trigger = 1 + next(i for i, line in enumerate(triggers) if line["event"] == "room_admitted")
    if trial:
        trigger = rng.randint(1, len(triggers) - 1)
    state = tmp_path / "state"
    code, lines = _refresh_until_signalled(_with_state(env, state), trigger)
    events = [line["event"] for line in lines]
    assert code == EXIT_INTERRUPTED, lines[-5:]
    assert "run_finished" not in events
    interrupted = [line for line in lines if line["event"] == "run_interrupted"]
    assert len(interrupted) == 1, events
    line = interrupted[0]
    assert line["signal"] == "SIGTERM"
    assert line["rooms_done"] + line["rooms_remaining"] == len(ROOMS)
    assert len(line["unfinished_rooms"]) == line["rooms_remaining"]
    if trial == 0:
        assert "room_stopped" in events and line["room_stopped_in"] is not None
    # The lock is released: another writer may open the index at once.
    EdgeIndexWriter(state / "index").close()

    proc = run_cli(_with_state(env, state), "refresh", timeout=300)
    assert proc.returncode == EXIT_OK, proc.stderr[-3000:]
    got = _snapshot(state)
    assert got["windows"] == expected["windows"]
    assert got["cursors"] == expected["cursors"]

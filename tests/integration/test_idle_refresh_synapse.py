"""An idle refresh against a real Synapse: one request, no model, no index file touched; and
whatever happens in a room between runs (a message, a state change) still reaches the next run.

Every run is the real `huginn-chat refresh` process. The idle runs are given a model directory
that does not exist: loading the model there fails the run (`embedder_unavailable`), so an idle
run that exits 0 loaded none.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.reader_process import run_cli
from daemon.index import schema
from daemon.index.edge_writer import EdgeIndexWriter
from tests.synapse_community import json_lines

pytestmark = pytest.mark.synapse


class Idle:
    def __init__(self, tmp: Path, env: dict[str, str], rooms: dict[str, str], alice: Any, tag: str):
        self.tmp, self.env, self.rooms, self.alice, self.tag = tmp, env, rooms, alice, tag

    @property
    def index_dir(self) -> Path:
        return self.tmp / "state" / "index"

    def refresh(self, **env: str) -> list[dict[str, Any]]:
        proc = run_cli({**self.env, **env}, "refresh", timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json_lines(proc.stderr)

    def idle_refresh(self) -> list[dict[str, Any]]:
        """A run that must not load the model: its model directory does not exist."""
        return self.refresh(HUGINN_CHAT_EMBED_MODEL_DIR=str(self.tmp / "no-model-here"))

    def index_files(self) -> dict[str, tuple[bytes, int]]:
        return {
            str(path.relative_to(self.index_dir)): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted(self.index_dir.rglob("*"))
            if path.is_file()
        }

    def bodies(self) -> str:
        with EdgeIndexWriter(self.index_dir) as index:
            return json.dumps([index.windows_in_span(room, 0, 10**14) for room in sorted(index.rooms_with_data())])

    def room_name(self, room: str) -> Any:
        with EdgeIndexWriter(self.index_dir) as index:
            entry = index.get_meta_entry(schema.room_entry_key(self.rooms[room]))
        return entry.get("name") if isinstance(entry, dict) else None


@pytest.fixture(scope="module")
def idle(synapse, tmp_path_factory) -> Idle:
    tmp = tmp_path_factory.mktemp("idle")
    tag = uuid.uuid4().hex[:6]
    alice = synapse.new_actor("alice")
    huginn = synapse.new_actor("huginn")
    rooms = {
        "town": alice.create_room(name="Town square", invite=[huginn.account.user_id]),
        "garden": alice.create_room(name="Gardeners", invite=[huginn.account.user_id]),
    }
    for room in rooms.values():
        huginn.join(room)
    alice.send_text(rooms["town"], f"hello from town {tag}")
    alice.send_text(rooms["garden"], f"the tomatoes need staking {tag}")
    token = tmp / "matrix-token"
    token.write_text(huginn.account.access_token + "\n")
    token.chmod(0o600)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": synapse.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(token),
        "HUGINN_CHAT_ROOMS": json.dumps(list(rooms.values())),
        "HUGINN_CHAT_STATE_DIR": str(tmp / "state"),
    }
    world = Idle(tmp, env, rooms, alice, tag)
    lines = world.refresh()
    assert [line for line in lines if line["event"] == "run_finished"][0]["rooms_admitted"] == 2
    return world


def _only(lines: list[dict[str, Any]], event: str) -> dict[str, Any]:
    found = [line for line in lines if line["event"] == event]
    assert len(found) == 1, lines
    return found[0]


def test_a_run_with_nothing_new_asks_once_loads_no_model_and_touches_no_index_file(idle):
    before = idle.index_files()
    assert before, "the first run wrote no index: the comparison proves nothing"
    for _ in range(2):  # the stored token does not move on an idle run: the next is idle as well
        lines = idle.idle_refresh()
        assert [line["event"] for line in lines] == ["run_idle"], lines
        assert lines[0]["homeserver_requests"] == 1
        assert idle.index_files() == before  # bytes and mtimes


def test_a_message_sent_between_runs_is_read_by_the_next_run(idle):
    idle.alice.send_text(idle.rooms["garden"], f"NEW-BETWEEN-RUNS-{idle.tag} bring bamboo canes")
    lines = idle.refresh()
    assert _only(lines, "full_run_started")["why"] == "new_events"
    assert _only(lines, "run_finished")["windows_written"] >= 1
    assert f"NEW-BETWEEN-RUNS-{idle.tag}" in idle.bodies()
    assert [line["event"] for line in idle.idle_refresh()] == ["run_idle"]


def test_a_state_change_is_read_by_the_next_run(idle):
    idle.alice.send_state(idle.rooms["town"], "m.room.name", "", {"name": f"Market square {idle.tag}"})
    lines = idle.refresh()
    assert _only(lines, "full_run_started")["why"] == "new_events"
    assert idle.room_name("town") == f"Market square {idle.tag}"

    # Encryption turned on: the room is refused and what the index held of it goes.
    idle.alice.send_state(idle.rooms["town"], "m.room.encryption", "", {"algorithm": "m.megolm.v1.aes-sha2"})
    lines = idle.refresh()
    assert _only(lines, "full_run_started")["why"] == "new_events"
    assert _only(lines, "room_refused")["reason"] == "encrypted"
    assert f"hello from town {idle.tag}" not in idle.bodies()
    assert [line["event"] for line in idle.idle_refresh()] == ["run_idle"]


def test_scope_facts_are_read_again_once_they_are_older_than_the_setting(idle):
    lines = idle.refresh(HUGINN_CHAT_SCOPE_RECHECK_S="0")
    assert _only(lines, "full_run_started")["why"] == "scope_recheck_due"
    assert _only(lines, "run_finished")["texts_embedded"] == 0

"""`huginn-chat follow` against a real Synapse: while nothing happens it only holds a /sync open
(no refresh, no model, no index file touched); a message, a state change or an invite-less scope
fact (the service user's ``m.direct``) reaches the index through the refreshes it starts itself,
with no timer and no `huginn-chat refresh` by hand; and a stop reaches the refresh under way
once, which then ends at its safe point.

Every process is the real CLI. The idle follow is given a model directory that does not exist:
a refresh it started would have to load the model there and fail (``embedder_unavailable``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

from bench.reader_process import REPO, cli, run_cli
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.refresher.refresh_lock import RefreshLock
from tests.synapse_community import json_lines

pytestmark = pytest.mark.synapse

WAIT_S = 240  # a deadline for what the follow must do, not a speed: a full run on two loaded cores


class Following:
    """A running ``huginn-chat follow``, its journal in a file."""

    def __init__(self, env: dict[str, str], log: Path):
        self.log = log
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                cli("follow"), env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        self.wait_for(lambda lines: any(line["event"] == "follow_started" for line in lines))

    def lines(self) -> list[dict[str, Any]]:
        return json_lines(self.log.read_text())

    def wait_for(self, found: Callable[[list[dict[str, Any]]], Any]) -> Any:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            answer = found(self.lines())
            if answer:
                return answer
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            time.sleep(0.2)
        raise AssertionError(f"not seen in {WAIT_S} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class World:
    def __init__(self, tmp: Path, env: dict[str, str], rooms: dict[str, str], alice: Any, huginn: Any, tag: str):
        self.tmp, self.env, self.rooms, self.alice, self.huginn, self.tag = tmp, env, rooms, alice, huginn, tag
        self.follows: list[Following] = []

    @property
    def index_dir(self) -> Path:
        return self.tmp / "state" / "index"

    def follow(self, **env: str) -> Following:
        following = Following({**self.env, **env}, self.tmp / f"follow-{len(self.follows)}.log")
        self.follows.append(following)
        return following

    def index_files(self) -> dict[str, tuple[bytes, int]]:
        return {
            str(path.relative_to(self.index_dir)): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted(self.index_dir.rglob("*"))
            if path.is_file()
        }

    def bodies(self) -> str:
        """Every stored window, read under the refresh lock: between the follow's refreshes."""
        lock = RefreshLock(self.tmp / "state")
        deadline = time.monotonic() + WAIT_S
        while not lock.acquire():
            assert time.monotonic() < deadline, "the refresh lock was not released"
            time.sleep(0.2)
        try:
            with EdgeIndexWriter(self.index_dir) as index:
                rooms = sorted(index.rooms_with_data())
                return json.dumps([index.windows_in_span(room, 0, 10**14) for room in rooms])
        finally:
            lock.release()


@pytest.fixture(scope="module")
def world(synapse, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("follow")
    tag = uuid.uuid4().hex[:6]
    alice = synapse.new_actor("alice")
    huginn = synapse.new_actor("huginn")
    rooms = {
        name: alice.create_room(name=f"{name} {tag}", invite=[huginn.account.user_id])
        for name in ("town", "garden", "attic")
    }
    for name, room in rooms.items():
        huginn.join(room)
        alice.send_text(room, f"the first word in the {name} {tag}")
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
    proc = run_cli(env, "refresh", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    made = World(tmp, env, rooms, alice, huginn, tag)
    yield made
    for following in made.follows:
        following.close()


def _events(lines: list[dict[str, Any]]) -> list[str]:
    return [line["event"] for line in lines]


def test_an_idle_follow_holds_a_sync_open_and_does_nothing_else(world):
    before = world.index_files()
    assert before, "the first run wrote no index: the comparison proves nothing"
    following = world.follow(
        HUGINN_CHAT_FOLLOW_POLL_S="1", HUGINN_CHAT_EMBED_MODEL_DIR=str(world.tmp / "no-model-here")
    )
    time.sleep(4)  # a few one-second polls with nothing to show
    assert following.stop() == 0
    lines = following.lines()
    assert _events(lines) == ["follow_started", "follow_stopped"], lines
    assert lines[-1]["cycles"] == 0 and lines[-1]["polls"] >= 1
    assert world.index_files() == before  # bytes and mtimes


def test_a_message_and_a_state_change_reach_the_index_through_the_follow_alone(world):
    following = world.follow()
    world.alice.send_text(world.rooms["garden"], f"FOLLOWED-{world.tag} the hose is by the shed")

    def message_read(lines: list[dict[str, Any]]) -> Any:
        return [line for line in lines if line["event"] == "run_finished" and line["windows_written"] >= 1]

    following.wait_for(message_read)
    assert f"FOLLOWED-{world.tag}" in world.bodies()
    assert "new_events" in [line["why"] for line in following.lines() if line["event"] == "full_run_started"]

    # Encryption turned on: the room is refused and what the index held of it goes.
    world.alice.send_state(world.rooms["town"], "m.room.encryption", "", {"algorithm": "m.megolm.v1.aes-sha2"})
    following.wait_for(
        lambda lines: [line for line in lines if line["event"] == "room_refused" and line["reason"] == "encrypted"]
    )
    following.wait_for(lambda lines: _events(lines).count("run_finished") >= 2)
    assert f"the first word in the town {world.tag}" not in world.bodies()
    assert following.stop() == 0
    assert following.lines()[-1]["event"] == "follow_stopped"


def test_a_scope_fact_no_sync_shows_is_acted_on_once_the_facts_are_older_than_the_setting(world):
    # m.direct is the service user's account data: the filtered /sync does not show it, so only
    # the full run that scope_recheck_s forces reads it.
    world.huginn.set_account_data("m.direct", {world.alice.user_id: [world.rooms["attic"]]})
    following = world.follow(HUGINN_CHAT_SCOPE_RECHECK_S="3")
    refused = following.wait_for(
        lambda lines: [line for line in lines if line["event"] == "room_refused" and line["reason"] == "dm"]
    )
    assert refused[0]["room_id"] == world.rooms["attic"]
    whys = [line["why"] for line in following.lines() if line["event"] == "full_run_started"]
    assert "scope_recheck_due" in whys
    following.wait_for(lambda lines: "run_finished" in _events(lines))
    assert f"the first word in the attic {world.tag}" not in world.bodies()
    assert following.stop() == 0


def test_a_stop_reaches_the_refresh_under_way_once_and_it_stops_at_a_safe_point(world):
    # One event a page: the run reads the new messages one request at a time, so it is under way
    # when the stop comes, and stops after the page it is on.
    world.alice.send_many(world.rooms["garden"], [f"row {i} of the seed order {world.tag}" for i in range(40)], 4)
    following = world.follow(HUGINN_CHAT_PAGE_SIZE="1")
    following.wait_for(lambda lines: "full_run_started" in _events(lines) or "room_admitted" in _events(lines))
    assert following.stop() == 0
    events = _events(following.lines())
    # Passed on once: a second signal would have ended the run at once, with no line of its own.
    assert "run_interrupted" in events and "run_finished" not in events, events
    assert events[-1] == "follow_stopped"
    settled = run_cli(world.env, "refresh", timeout=300)  # the next refresh carries on from there
    assert settled.returncode == 0, settled.stderr[-3000:]
    assert f"row 39 of the seed order {world.tag}" in world.bodies()

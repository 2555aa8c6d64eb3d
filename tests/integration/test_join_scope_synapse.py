"""What the refresher may join, leave and read, against a real Synapse.

One community is seeded on the session homeserver; ``huginn-chat refresh`` runs as systemd runs
it. Every assertion is on the journal, on what the index stores, or on the service user's own
``/joined_rooms`` as the homeserver reports it.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.reader_process import run_cli
from daemon.index.edge_writer import EdgeIndexWriter

pytestmark = pytest.mark.synapse


def _events(lines: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == name]


class World:
    def __init__(self, tmp: Path, env: dict[str, str], rooms: dict[str, str], actors: dict[str, Any], tag: str):
        self.tmp, self.env, self.rooms, self.actors, self.tag = tmp, env, rooms, actors, tag

    def refresh(self) -> tuple[int, list[dict[str, Any]]]:
        proc = run_cli(self.env, "refresh", timeout=300)
        lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
        assert lines, proc.stderr[-3000:]
        return proc.returncode, lines

    def joined(self) -> set[str]:
        return set(self.actors["huginn"].call("GET", "/_matrix/client/v3/joined_rooms")["joined_rooms"])

    def stored_rooms(self) -> set[str]:
        with EdgeIndexWriter(self.tmp / "state" / "index") as index:
            return set(index.rooms_with_data())

    def dump(self) -> str:
        with EdgeIndexWriter(self.tmp / "state" / "index") as index:
            return json.dumps([p for r in sorted(index.rooms_with_data()) for p in index.windows_in_span(r, 0, 10**14)])

    def name(self, room_id: str) -> str:
        return next((name for name, rid in self.rooms.items() if rid == room_id), room_id)


@pytest.fixture(scope="module")
def world(synapse, tmp_path_factory) -> World:
    tmp = tmp_path_factory.mktemp("joins")
    tag = uuid.uuid4().hex[:6]
    server = synapse.server_name
    alice, bob, huginn = synapse.new_actor("alice"), synapse.new_actor("bob"), synapse.new_actor("huginn")
    puppet = synapse.actor(synapse.puppet(f"_discord_{tag}"))
    me = huginn.user_id
    world_readable = {
        "type": "m.room.history_visibility",
        "state_key": "",
        "content": {"history_visibility": "world_readable"},
    }
    rooms: dict[str, str] = {}

    # Admitted: a public room, joined by the refresher itself.
    rooms["town"] = alice.create_room(name="Town", alias_localpart=f"town{tag}")
    bob.join(rooms["town"])
    # Admitted, then the service user is kicked from it after the first run.
    rooms["kicked"] = alice.create_room(name="Kicks", alias_localpart=f"kicks{tag}")
    # Refused before joining: a DM invite (is_direct in the invite's stripped state).
    rooms["dm"] = alice.create_room(preset="trusted_private_chat", is_direct=True, invite=[me])
    # Refused before joining: an encrypted private room the service user is invited to ...
    rooms["board"] = alice.create_room(name="Board", preset="private_chat", invite=[me], encrypted=True)
    # ... and an encrypted public room it is not (the room summary says so).
    rooms["vault"] = alice.create_room(name="Vault", alias_localpart=f"vault{tag}", encrypted=True)
    # Refused before joining: the roster lock, by a ROOMS alias in capitals.
    rooms["roster"] = alice.create_room(name="Patrons", alias_localpart="Patrons")
    # Refused before joining: a world-readable bridged room (its state shows the bridge).
    rooms["portal"] = alice.create_room(
        name="Discord portal", alias_localpart=f"portal{tag}", initial_state=[world_readable]
    )
    alice.send_state(rooms["portal"], "m.bridge", "discord", {"protocol": {"id": "discord"}})
    # Refused only from inside: a puppet is a member of an ordinary-looking public room.
    rooms["puppeted"] = alice.create_room(name="Game night", alias_localpart=f"games{tag}")
    puppet.join(rooms["puppeted"])
    # Refused before joining: a directory-only alias in the roster lock (the directory answers anyone).
    rooms["hidden_roster"] = alice.create_room(name="Lounge", alias_localpart=f"lounge{tag}")
    alice.call("PUT", f"/_matrix/client/v3/directory/room/%23members%3A{server}", {"room_id": rooms["hidden_roster"]})
    # The operator's: joined before any refresh, bridged. Refused and never read, never left.
    rooms["operators"] = alice.create_room(name="Mods", alias_localpart=f"mods{tag}")
    alice.send_state(rooms["operators"], "m.bridge", "discord", {"protocol": {"id": "discord"}})
    huginn.join(rooms["operators"])
    # Allowed and world-readable, but invite-only: the join is refused, nothing may be read.
    rooms["locked"] = alice.create_room(
        name="Reading room", alias_localpart=f"locked{tag}", preset="private_chat", initial_state=[world_readable]
    )

    for name, room in rooms.items():
        alice.send_text(room, f"CANARY-{name}-{tag}" if name not in ("town", "kicked") else f"hello from {name}")
    alice.send_text(rooms["kicked"], f"KICKED-LATER-{tag} stored until the kick")

    token = tmp / "matrix-token"
    token.write_text(huginn.account.access_token + "\n")
    token.chmod(0o600)
    entries = [
        f"#town{tag}:{server}",
        f"#kicks{tag}:{server}",
        rooms["dm"],
        rooms["board"],
        f"#vault{tag}:{server}",
        f"#Patrons:{server}",
        f"#portal{tag}:{server}",
        f"#games{tag}:{server}",
        f"#lounge{tag}:{server}",
        rooms["operators"],
        f"#locked{tag}:{server}",
    ]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": synapse.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(token),
        "HUGINN_CHAT_ROOMS": json.dumps(entries),
        "HUGINN_CHAT_STATE_DIR": str(tmp / "state"),
    }
    return World(tmp, env, rooms, {"alice": alice, "huginn": huginn}, tag)


@pytest.fixture(scope="module")
def first_run(world):
    return world.refresh()


def test_rooms_refused_before_joining_are_never_joined(world, first_run):
    _, lines = first_run
    r = world.rooms
    pre_join = {
        world.name(line["room_id"]): line["reason"] for line in _events(lines, "room_refused") if line["pre_join"]
    }
    assert pre_join == {
        "dm": "dm",
        "board": "encrypted",
        "vault": "encrypted",
        "roster": "excluded",
        "portal": "bridged",
        "hidden_roster": "excluded",
    }
    joined_ids = {line["room_id"] for line in _events(lines, "room_joined")}
    assert not joined_ids & {r[n] for n in pre_join}
    dm = next(line for line in _events(lines, "room_refused") if line["room_id"] == r["dm"])
    assert dm["evidence"]["signal"] == "is_direct" and "invite_state" in dm["sources"]
    vault = next(line for line in _events(lines, "room_refused") if line["room_id"] == r["vault"])
    assert "summary" in vault["sources"]
    hidden = next(line for line in _events(lines, "room_refused") if line["room_id"] == r["hidden_roster"])
    assert (hidden["evidence"]["signal"], hidden["evidence"]["value"], hidden["evidence"]["builtin"]) == (
        "named_by",
        f"#members:{world.actors['alice'].server_name}",
        True,
    )


def test_rooms_refused_from_inside_are_left_at_once_with_reason_and_evidence(world, first_run):
    _, lines = first_run
    r = world.rooms
    left = {line["room_id"]: line for line in _events(lines, "room_left")}
    assert set(left) == {r["puppeted"]}
    assert (left[r["puppeted"]]["reason"], left[r["puppeted"]]["evidence"]["signal"]) == ("bridged", "puppet_member")
    assert r["puppeted"] in {line["room_id"] for line in _events(lines, "room_joined")}
    operators = next(line for line in _events(lines, "room_refused") if line["room_id"] == r["operators"])
    assert (operators["reason"], operators["joined_by"]) == ("bridged", "operator")


def test_afterwards_the_service_user_is_in_admitted_rooms_and_the_operators_only(world, first_run):
    r = world.rooms
    assert world.joined() == {r["town"], r["kicked"], r["operators"]}


def test_a_refused_join_of_a_world_readable_room_reads_nothing(world, first_run):
    code, lines = first_run
    r = world.rooms
    failed = {line["room_id"]: line["why"] for line in _events(lines, "room_failed")}
    assert failed == {r["locked"]: "join_failed"} and code == 1
    assert r["locked"] not in {line["room_id"] for line in _events(lines, "room_current")}
    dump = world.dump()
    assert "CANARY-" not in dump and "hello from town" in dump
    assert world.stored_rooms() == {r["town"], r["kicked"]}


def test_a_kick_purges_the_rooms_points_and_cursor_and_it_is_not_read_again(world, first_run):
    r, alice = world.rooms, world.actors["alice"]
    assert f"KICKED-LATER-{world.tag}" in world.dump()
    alice.call("POST", f"/_matrix/client/v3/rooms/{r['kicked']}/kick", {"user_id": world.actors["huginn"].user_id})
    alice.send_text(r["kicked"], f"AFTER-KICK-{world.tag}")
    code, lines = world.refresh()
    purged = {line["room_id"]: line for line in _events(lines, "room_purged")}
    assert purged[r["kicked"]]["reason"] == "kicked"
    assert purged[r["kicked"]]["evidence"]["by"] == alice.user_id
    assert r["kicked"] not in world.stored_rooms()
    with EdgeIndexWriter(world.tmp / "state" / "index") as index:
        assert index.get_cursor(r["kicked"]) is None
    dump = world.dump()
    assert f"KICKED-LATER-{world.tag}" not in dump and f"AFTER-KICK-{world.tag}" not in dump
    assert r["kicked"] not in {line["room_id"] for line in _events(lines, "room_joined")}
    # A second run does not join a room refused from inside again: its state as left shows why.
    assert not ({r["puppeted"], r["hidden_roster"]} & {line["room_id"] for line in _events(lines, "room_joined")})
    assert world.joined() == {r["town"], r["operators"]}

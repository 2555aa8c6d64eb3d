"""Citations people can follow, and rooms by any name, end to end: a real Synapse, the real refresher
(`huginn-chat refresh`), `huginn-chat serve` as a subprocess and the real CLI as a Persona runs it.

The lobby has a canonical alias, an alt alias and a third alias that only the operator's ROOMS
names; its messages are sent under display names that change mid-history (one change between two
runs, after a message the second run reads first, so only the member state Synapse sends with each
/messages page can name that message right). Between runs the room is renamed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator
from urllib.parse import quote

import pytest

from bench.reader_process import ReaderProcess, run_cli
from tests.synapse_community import Community as SynapseCommunity

pytestmark = pytest.mark.synapse

READER_START_TIMEOUT_S = 60.0
SWAP_TIMEOUT_S = 30.0
QUERY = "marmalade sandwiches"


@dataclass
class Community(SynapseCommunity):
    actors: dict[str, Any] = field(default_factory=dict)

    def cli(self, *args: str) -> tuple[int, str, str]:
        proc = run_cli(self.env, *args, timeout=60)
        return proc.returncode, proc.stdout, proc.stderr


def _messages(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["event_id"]: m for hit in result["hits"] for m in hit["messages"]}


@pytest.fixture(scope="module")
def community(synapse, tmp_path_factory) -> Community:
    tmp = tmp_path_factory.mktemp("cite")  # short: a Unix socket path is at most 107 bytes
    tag = uuid.uuid4().hex[:6]
    c = Community(tmp=tmp, tag=tag, server=synapse.server_name)
    alice, bob, reader = synapse.new_actor("alice"), synapse.new_actor("bob"), synapse.new_actor("reader")
    c.actors.update(alice=alice, bob=bob)

    lobby = alice.create_room(name="Hackspace lobby")
    bob.join(lobby)
    alice.set_canonical_alias(lobby, f"lobby{tag}", alt_aliases=[f"foyer{tag}"])
    alice._ensure_alias(lobby, c.alias("ops"))  # published in the directory, named only by ROOMS
    garden = bob.create_room(name="Community garden")
    c.rooms.update(lobby=lobby, garden=garden)

    def named(actor: Any, room: str, name: str) -> None:
        actor.send_state(room, "m.room.member", actor.account.user_id, {"membership": "join", "displayname": name})

    named(alice, lobby, "Alice Liddell")
    c.events["first"] = alice.send_text(lobby, f"I will bring {QUERY} to the workshop")
    named(bob, lobby, "Bob [the builder](https://evil.example)")
    c.events["bob"] = bob.send_text(lobby, "and I will bring the *tea* and a [link](https://evil.example)")
    named(alice, lobby, "Alice Cooper")
    c.events["second"] = alice.send_text(lobby, f"actually the {QUERY} ran out, scones instead")
    bob.send_text(garden, f"the {QUERY} were lovely at the garden party")

    token = tmp / "matrix-token"
    token.write_text(reader.account.access_token + "\n")
    token.chmod(0o600)
    c.env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": synapse.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(token),
        "HUGINN_CHAT_ROOMS": json.dumps([c.alias("ops"), garden]),
        "HUGINN_CHAT_STATE_DIR": str(tmp / "state"),
        "HUGINN_CHAT_SOCKET": str(tmp / "reader.sock"),
        "HUGINN_CHAT_READER_PRIVATE_DIR": str(tmp / "reader-private"),
    }
    c.refresh()
    # Between runs: one more message under the old name, then a rename, then a message under the
    # new one. The second run's first page starts at "third": its name comes from the member state
    # Synapse sends with that page, not from the room's state now.
    c.events["third"] = alice.send_text(lobby, f"{QUERY} are back on the menu")
    named(alice, lobby, "Alice Three")
    c.events["fourth"] = alice.send_text(lobby, f"who ate all the {QUERY}?")
    c.refresh()
    return c


@pytest.fixture(scope="module")
def reader(community) -> Iterator[ReaderProcess]:
    with ReaderProcess(community.env, community.tmp / "reader-journal.jsonl", ready_s=READER_START_TIMEOUT_S) as proc:
        yield proc


def test_a_room_is_found_by_id_canonical_alias_alt_alias_and_rooms_alias(community, reader):
    lobby = community.rooms["lobby"]
    names = [
        lobby,
        community.alias("lobby"),
        community.alias("foyer"),
        community.alias("ops"),
        community.alias("LOBBY"),  # aliases match case-insensitively
    ]
    for name in names:
        result = community.search(QUERY, "--room", name, "--top-k", "20")
        assert result["hits"], name
        assert {hit["room_id"] for hit in result["hits"]} == {lobby}, name
        assert community.events["first"] in _messages(result), name
    assert community.search(QUERY, "--room", community.alias("nowhere"))["hits"] == []


def test_each_message_carries_the_display_name_of_its_time_and_a_permalink(community, reader):
    result = community.search(QUERY, "--room", community.rooms["lobby"], "--top-k", "20")
    messages = _messages(result)
    ev = community.events
    assert messages[ev["first"]]["display_name"] == "Alice Liddell"
    assert messages[ev["second"]]["display_name"] == "Alice Cooper"
    assert messages[ev["third"]]["display_name"] == "Alice Cooper"  # renamed after it, before the run
    assert messages[ev["fourth"]]["display_name"] == "Alice Three"
    lobby = community.rooms["lobby"]
    for event_id, message in messages.items():
        assert message["permalink"] == (
            f"https://matrix.to/#/{quote(lobby, safe='!')}/{quote(event_id, safe='')}?via={community.server}"
        )
    assert {hit["room_name"] for hit in result["hits"]} == {"Hackspace lobby"}
    assert {hit["room_alias"] for hit in result["hits"]} == {community.alias("lobby")}


def test_human_and_markdown_output_cite_every_message(community, reader):
    code, out, err = community.cli("search", QUERY, "--room", community.alias("ops"), "--top-k", "20")
    assert code == 0, err
    assert "Hackspace lobby (" in out and "Alice Three (@alice" in out
    for event_id in community.events.values():
        assert event_id in out  # every message's id, marked or not
    assert "https://matrix.to/#/" in out

    code, out, err = community.cli("search", QUERY, "--room", community.alias("ops"), "--format", "md")
    assert code == 0, err
    lines = out.strip().split("\n\n")
    assert lines and all(line.startswith("> **") and "\n" not in line for line in lines)
    assert any(line.startswith("> **Alice Three** (") and "Hackspace lobby" in line for line in lines)
    for line in lines:  # the only link in each line is its permalink
        assert line.count("](") == 1 and line.endswith(")") and "[link](https://matrix.to/#/" in line

    code, out, err = community.cli("window", community.events["bob"], "--format", "md")
    assert code == 0, err
    assert out.startswith("> **Bob \\[the builder\\]\\(https\\://evil\\.example\\)** (")
    assert "\\[link\\]\\(https\\://evil\\.example\\)" in out and out.count("](") == 1


def test_a_renamed_room_shows_its_new_name_after_the_next_run(community, reader):
    community.actors["alice"].send_state(community.rooms["lobby"], "m.room.name", "", {"name": "Hackspace foyer"})
    community.refresh()
    deadline = time.monotonic() + SWAP_TIMEOUT_S
    while True:
        result = community.search(QUERY, "--room", community.alias("foyer"))
        names = {hit["room_name"] for hit in result["hits"]}
        if names == {"Hackspace foyer"}:
            break
        assert time.monotonic() < deadline, names
        time.sleep(0.5)
    code, out, _ = community.cli("window", community.events["first"], "--json")
    assert code == 0 and json.loads(out)["room_name"] == "Hackspace foyer"

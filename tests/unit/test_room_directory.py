"""The refresher's side of citations: each admitted room's directory entry (names, routing servers)
and each message's display name at the time, over the in-memory homeserver and index."""

from __future__ import annotations

from typing import Any

import pytest

from chunker.fold import Bounds
from daemon.index import schema
from daemon.index.port import RoomEntry
from tests.fakes import FakeEmbedder, FakeMatrix, ListLog, MemoryIndex, run_refresher

ALICE, BOB = "@alice:hs.test", "@bob:hs.test"
GITHUB_TOKEN = "ghp_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8"


class CountingIndex(MemoryIndex):
    def __init__(self) -> None:
        super().__init__()
        self.entry_writes: list[str] = []

    def set_meta_entry(self, key: str, value: Any) -> None:
        if schema.room_of_entry_key(key):
            self.entry_writes.append(key)
        super().set_meta_entry(key, value)


def run(hs: FakeMatrix, index: MemoryIndex, rooms: list[str]) -> ListLog:
    log = ListLog()
    summary = run_refresher(
        hs,
        index,
        FakeEmbedder(),
        rooms,
        log,
        bridges=("@_discord_.*:.*",),
        bounds=Bounds(max_bytes=300, max_gap_ms=3_600_000),
        page_size=5,
        checkpoint_events=10,
    )
    assert summary.rooms_failed == 0, log.records
    return log


def messages(index: MemoryIndex, room_id: str) -> list[dict[str, Any]]:
    return [m for p in index.windows_in_span(room_id, 0, 10**14) for m in p["messages"]]


@pytest.fixture
def hs() -> FakeMatrix:
    return FakeMatrix()


def test_an_admitted_room_gets_an_entry_with_every_name_and_its_routing_servers(hs):
    hs.add_room("!pub", alias="#town:hs.test", name="Town square", members=(ALICE, BOB, "@carol:other.org"))
    hs.set_state("!pub", "m.room.canonical_alias", "", {"alias": "#town:hs.test", "alt_aliases": ["#square:hs.test"]})
    hs.aliases["#ops:hs.test"] = "!pub"
    hs.send("!pub", ALICE, "hello")
    index = MemoryIndex()
    run(hs, index, ["#ops:hs.test"])
    entry = index.room_directory()["!pub"]
    assert entry.name == "Town square" and entry.canonical_alias == "#town:hs.test"
    assert entry.alt_aliases == ("#square:hs.test",) and entry.allowed_as == ("#ops:hs.test",)
    assert {"#town:hs.test", "#square:hs.test", "#ops:hs.test"} <= set(entry.aliases)
    assert entry.via == ("hs.test", "other.org")  # the creator's server first (room version 12)


def test_the_entry_follows_a_rename_and_an_unchanged_room_writes_nothing(hs):
    hs.add_room("!pub", alias="#town:hs.test", name="Town square")
    hs.send("!pub", ALICE, "hello")
    index = CountingIndex()
    run(hs, index, ["!pub"])
    assert index.entry_writes == [schema.room_entry_key("!pub")]
    run(hs, index, ["!pub"])
    assert len(index.entry_writes) == 1  # a run that changed nothing writes nothing
    hs.set_state("!pub", "m.room.name", "", {"name": "Village green"})
    run(hs, index, ["!pub"])
    assert index.room_directory()["!pub"].name == "Village green" and len(index.entry_writes) == 2


def test_a_refused_room_loses_its_entry_with_its_windows(hs):
    hs.add_room("!pub", alias="#town:hs.test")
    hs.send("!pub", ALICE, "hello")
    index = MemoryIndex()
    run(hs, index, ["!pub"])
    assert "!pub" in index.room_directory()
    hs.set_state("!pub", "m.bridge", "discord", {"protocol": {"id": "discord"}})
    log = run(hs, index, ["!pub"])
    assert log.events("room_refused")
    assert index.room_directory() == {} and index.rooms_with_data() == set()


def test_messages_carry_the_display_name_of_their_time(hs):
    hs.add_room("!pub", members=(ALICE,))
    hs.set_state("!pub", "m.room.member", ALICE, {"membership": "join", "displayname": "Alice"}, sender=ALICE)
    first = hs.send("!pub", ALICE, "before the rename")
    hs.set_state("!pub", "m.room.member", ALICE, {"membership": "join", "displayname": "Alicia"}, sender=ALICE)
    second = hs.send("!pub", ALICE, "after the rename")
    hs.set_state("!pub", "m.room.member", BOB, {"membership": "join"}, sender=BOB)
    third = hs.send("!pub", BOB, "no display name")
    index = MemoryIndex()
    run(hs, index, ["!pub"])
    names = {m["event_id"]: m.get("display_name") for m in messages(index, "!pub")}
    assert names == {first: "Alice", second: "Alicia", third: None}
    # An incremental run starts from the room's state and follows the member events after the cursor.
    hs.set_state("!pub", "m.room.member", ALICE, {"membership": "join", "displayname": f"Al {GITHUB_TOKEN}"}, ALICE)
    fourth = hs.send("!pub", ALICE, "with a pasted token in my name")
    run(hs, index, ["!pub"])
    stored = {m["event_id"]: m.get("display_name") for m in messages(index, "!pub")}
    assert stored[first] == "Alice" and stored[fourth].startswith("Al ")
    assert GITHUB_TOKEN[:12] not in str(index.points)  # scrubbed like a body, nowhere in the index


def test_entries_round_trip_through_the_schema():
    entry = RoomEntry(
        "!r", name="N", canonical_alias="#a:x", alt_aliases=("#b:x",), aliases=("#a:x", "#b:x"), via=("x",)
    )
    assert schema.room_entry_from_value(schema.room_entry_value(entry), "!r") == entry
    assert schema.room_entry_from_value(schema.room_entry_value(entry), "!other") is None
    assert schema.room_entry_from_value({"room_id": 5}) is None

"""The refresher's control flow over an in-memory homeserver and the real Edge index.

The real homeserver runs in tests/integration; here the point is what the refresher does with
checkpoints, faults, rebuilds and refusals, asserted on what is stored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chunker.fold import Bounds
from daemon.index.edge_writer import EdgeIndexWriter
from tests.fakes import FailingWrites, FakeEmbedder, FakeMatrix, ListLog, run_refresher

ALICE = "@alice:hs.test"
BOB = "@bob:hs.test"


BOUNDS = Bounds(max_bytes=300, max_gap_ms=3_600_000)


@pytest.fixture
def hs() -> FakeMatrix:
    return FakeMatrix()


# The Edge variant is `slow`: each run publishes a generation and syncs the filesystem after
# the copy, and Edge msyncs its maps; `make check` runs the control flow
# over the server adapter, `make test` over both.
@pytest.fixture(params=[pytest.param("edge", marks=pytest.mark.slow), "server"])
def index(request, tmp_path: Path):
    """Both adapters: the embedded Edge shard, and the server adapter over qdrant-client's local
    mode (the same API a Qdrant server answers)."""
    writer = EdgeIndexWriter(tmp_path / "index") if request.param == "edge" else _remote_writer()
    yield writer
    writer.close()


def _remote_writer():
    from qdrant_client import QdrantClient

    from daemon.index.remote_writer import RemoteIndexWriter

    return RemoteIndexWriter(QdrantClient(":memory:"), "huginn_chat_test")


def run(hs, index, *, rooms, embedder=None, log=None, state_dir=None, bounds=BOUNDS, page_size=7, checkpoint_events=10):
    log = log or ListLog()
    summary = run_refresher(
        hs,
        index,
        embedder or FakeEmbedder(),
        rooms,
        log,
        bridges=("@_discord_.*:.*",),
        bounds=bounds,
        page_size=page_size,
        checkpoint_events=checkpoint_events,
        state_dir=state_dir,
    )
    return summary, log


def stored(index, room_id=None) -> list[dict[str, Any]]:
    """Every window payload of a room (or all rooms), oldest first."""
    rooms = [room_id] if room_id else sorted(index.rooms_with_data())
    out = []
    for r in rooms:
        out.extend(index.windows_in_span(r, 0, 10**14))
    return sorted(out, key=lambda p: (p["ts_start"] if p["ts_start"] is not None else 0, p["chunk_id"]))


def bodies(index, room_id=None) -> list[str]:
    return [m["body"] for p in stored(index, room_id) for m in p["messages"]]


def test_ingests_an_admitted_room_and_advances_its_cursor(hs, index):
    hs.add_room("!pub", alias="#town:hs.test")
    sent = [hs.send("!pub", ALICE if i % 2 else BOB, f"message number {i} about gardening") for i in range(25)]
    summary, log = run(hs, index, rooms=["#town:hs.test"])
    assert summary.exit_code == 0
    assert bodies(index, "!pub") == [f"message number {i} about gardening" for i in range(25)]
    cursor = index.get_cursor("!pub")
    assert cursor is not None and cursor.last_event_id == sent[-1]
    assert log.events("room_admitted")[0]["room_id"] == "!pub"
    payload = stored(index, "!pub")[0]
    assert payload["room_alias"] == "#town:hs.test" and payload["corpus"] == "chat"


def test_second_run_with_nothing_new_embeds_and_writes_nothing(hs, index):
    hs.add_room("!pub")
    for i in range(12):
        hs.send("!pub", ALICE, f"hello {i}")
    run(hs, index, rooms=["!pub"])
    before = stored(index)
    embedder = FakeEmbedder()
    summary, _ = run(hs, index, rooms=["!pub"], embedder=embedder)
    assert embedder.embedded == []
    assert summary.windows_written == 0 and summary.texts_embedded == 0
    assert stored(index) == before


def test_incremental_run_appends_to_the_open_window(hs, index):
    hs.add_room("!pub")
    hs.send("!pub", ALICE, "first")
    run(hs, index, rooms=["!pub"])
    hs.send("!pub", BOB, "second")
    run(hs, index, rooms=["!pub"])
    windows = stored(index, "!pub")
    assert len(windows) == 1
    assert [m["body"] for m in windows[0]["messages"]] == ["first", "second"]


def test_failed_upsert_keeps_the_cursor_and_the_next_run_recovers_exactly(hs, index, tmp_path):
    hs.add_room("!pub")
    for i in range(40):
        hs.send("!pub", ALICE if i % 3 else BOB, f"line {i} " + "x" * (i % 7) * 10)
    # A clean index for comparison, from the same homeserver.
    clean = EdgeIndexWriter(tmp_path / "clean")
    run(hs, clean, rooms=["!pub"])

    failing = FailingWrites(index, failures=1)
    summary, log = run(hs, failing, rooms=["!pub"])
    assert summary.exit_code == 1
    assert log.events("room_failed")[0]["room_id"] == "!pub"
    assert index.get_cursor("!pub") is None

    summary, _ = run(hs, index, rooms=["!pub"])
    assert summary.exit_code == 0
    assert stored(index) == stored(clean)
    clean.close()


def test_failure_after_a_checkpoint_resumes_from_that_checkpoint(hs, index, tmp_path):
    hs.add_room("!pub")
    for i in range(60):
        hs.send("!pub", ALICE, f"steady message {i}")
    clean = EdgeIndexWriter(tmp_path / "clean")
    run(hs, clean, rooms=["!pub"])

    class FailSecond(FailingWrites):
        calls = 0

        def write_windows(self, room_id, upserts, delete_ids):
            FailSecond.calls += 1
            if FailSecond.calls == 2:
                raise __import__("daemon.index.port", fromlist=["x"]).IndexWriteError("injected")
            return self._inner.write_windows(room_id, upserts, delete_ids)

    summary, _ = run(hs, FailSecond(index, failures=0), rooms=["!pub"])
    assert summary.exit_code == 1
    first_cursor = index.get_cursor("!pub")
    assert first_cursor is not None  # the first checkpoint held
    run(hs, index, rooms=["!pub"])
    assert stored(index) == stored(clean)
    clean.close()


def test_a_homeserver_error_in_one_room_does_not_stop_the_others(hs, index):
    hs.add_room("!broken").fail_messages = True
    hs.add_room("!fine")
    hs.send("!broken", ALICE, "never read")
    hs.send("!fine", ALICE, "read me")
    summary, log = run(hs, index, rooms=["!broken", "!fine"])
    assert summary.exit_code == 1
    assert bodies(index, "!fine") == ["read me"]
    assert [r["room_id"] for r in log.events("room_failed")] == ["!broken"]


def test_refused_rooms_are_never_read_and_named_in_the_journal(hs, index):
    hs.add_room("!dm", name=None, join_rule="invite", members=(ALICE,))
    hs.direct = {ALICE: ["!dm"]}
    hs.add_room(
        "!enc",
        extra_state=[
            {
                "type": "m.room.encryption",
                "state_key": "",
                "sender": ALICE,
                "content": {"algorithm": "m.megolm.v1.aes-sha2"},
            }
        ],
    )
    hs.add_room(
        "!bridged",
        extra_state=[
            {"type": "m.bridge", "state_key": "discord", "sender": ALICE, "content": {"protocol": {"id": "discord"}}}
        ],
    )
    hs.add_room("!notallowed")
    for room in ("!dm", "!enc", "!bridged", "!notallowed"):
        hs.send(room, ALICE, f"CANARY-{room}")
    summary, log = run(hs, index, rooms=["!dm", "!enc", "!bridged"])
    reasons = {r["room_id"]: r["reason"] for r in log.events("room_refused")}
    assert reasons == {"!dm": "dm", "!enc": "encrypted", "!bridged": "bridged", "!notallowed": "not_allowed"}
    assert stored(index) == []
    assert hs.message_calls == 0


def test_a_puppet_appearing_mid_history_refuses_and_purges_the_room(hs, index):
    hs.add_room("!pub")
    hs.send("!pub", ALICE, "before the bridge")
    run(hs, index, rooms=["!pub"])
    assert bodies(index, "!pub") == ["before the bridge"]
    hs.send("!pub", "@_discord_123:hs.test", "hello from discord")
    summary, log = run(hs, index, rooms=["!pub"])
    assert log.events("room_refused")[0]["reason"] == "bridged"
    assert log.events("room_purged")[0]["room_id"] == "!pub"
    assert stored(index) == [] and index.get_cursor("!pub") is None


def test_edits_and_redactions_are_applied_on_the_next_run(hs, index):
    hs.add_room("!pub")
    a = hs.send("!pub", ALICE, "the meeting is on monday")
    b = hs.send("!pub", BOB, "SECRET-PLAN do not keep this")
    run(hs, index, rooms=["!pub"])
    hs.edit("!pub", ALICE, a, "the meeting is on tuesday")
    hs.edit("!pub", BOB, a, "bob cannot edit alice")
    hs.redact("!pub", BOB, b)
    summary, log = run(hs, index, rooms=["!pub"])
    assert bodies(index, "!pub") == ["the meeting is on tuesday"]
    assert "SECRET-PLAN" not in json.dumps(stored(index))
    assert log.events("room_rebuilt") == []


def test_a_redaction_of_an_earlier_edit_rebuilds_the_room(hs, index):
    hs.add_room("!pub")
    a = hs.send("!pub", ALICE, "original words")
    e = hs.edit("!pub", ALICE, a, "EDITED-TEXT that alice took back")
    run(hs, index, rooms=["!pub"])
    assert bodies(index, "!pub") == ["EDITED-TEXT that alice took back"]
    hs.redact("!pub", ALICE, e)
    summary, log = run(hs, index, rooms=["!pub"])
    assert log.events("room_rebuilt")[0]["why"] == "unknown_redaction_target"
    assert bodies(index, "!pub") == ["original words"]
    assert "EDITED-TEXT" not in json.dumps(stored(index))


def test_a_redacted_reaction_needs_no_rebuild(hs, index):
    hs.add_room("!pub")
    a = hs.send("!pub", ALICE, "react to me")
    r = hs.react("!pub", BOB, a)
    run(hs, index, rooms=["!pub"])
    hs.redact("!pub", BOB, r)
    _, log = run(hs, index, rooms=["!pub"])
    assert log.events("room_rebuilt") == []
    assert bodies(index, "!pub") == ["react to me"]


def test_credentials_never_reach_the_index(hs, index):
    hs.add_room("!pub")
    token = "syt_YWxpY2U_SeCrEtCaNaRy0123456789_1a2b3c"
    ghp = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    hs.send("!pub", ALICE, f"oops here is my token {token}")
    a = hs.send("!pub", BOB, "nothing to see")
    hs.edit("!pub", BOB, a, f"use {ghp} for the api")
    run(hs, index, rooms=["!pub"])
    dump = json.dumps(stored(index))
    assert token not in dump and ghp not in dump
    assert "[redacted:" in dump


def test_a_purge_window_is_applied_and_kept_through_rebuilds(hs, index, tmp_path):
    from daemon.refresher.purges import add_purge

    hs.add_room("!pub")
    hs.send("!pub", ALICE, "keep one")
    t_from = hs.ts + 1
    hs.send("!pub", ALICE, "PURGED-A")
    hs.send("!pub", BOB, "PURGED-B")
    t_to = hs.ts
    hs.send("!pub", ALICE, "keep two")
    state_dir = tmp_path / "state"
    run(hs, index, rooms=["!pub"], state_dir=state_dir)
    assert "PURGED-A" in bodies(index)
    add_purge(state_dir, "!pub", t_from, t_to)
    _, log = run(hs, index, rooms=["!pub"], state_dir=state_dir)
    assert bodies(index, "!pub") == ["keep one", "keep two"]
    assert index.get_meta_entry("chat-purge:!pub") == [[t_from, t_to]]
    # A rebuild (forced by a redaction of an unknown edit) keeps the purge.
    e = hs.edit("!pub", ALICE, hs.rooms["!pub"].timeline[-1]["event_id"], "keep two, edited")
    run(hs, index, rooms=["!pub"], state_dir=state_dir)
    hs.redact("!pub", ALICE, e)
    _, log = run(hs, index, rooms=["!pub"], state_dir=state_dir)
    assert log.events("room_rebuilt")
    assert bodies(index, "!pub") == ["keep one", "keep two"]


def test_a_room_leaving_scope_loses_its_points(hs, index):
    hs.add_room("!pub")
    hs.send("!pub", ALICE, "soon gone")
    run(hs, index, rooms=["!pub"])
    hs.joined.discard("!pub")
    _, log = run(hs, index, rooms=[])
    assert stored(index) == []
    assert log.events("room_purged")[0]["reason"] == "not_in_scope"


def test_index_meta_mismatch_rebuilds_the_index(hs, index):
    hs.add_room("!pub")
    hs.send("!pub", ALICE, "hello")
    run(hs, index, rooms=["!pub"])

    class OtherModel(FakeEmbedder):
        model_id = "fake/other"

    summary, log = run(hs, index, rooms=["!pub"], embedder=OtherModel())
    assert log.events("index_rebuilt")[0]["why"] == "model"
    assert bodies(index, "!pub") == ["hello"]


def test_an_allowed_room_that_cannot_be_joined_fails_once_and_others_go_on(hs, index):
    hs.add_room("!ok")
    hs.send("!ok", ALICE, "fine")
    summary, log = run(hs, index, rooms=["!missing", "!ok"])
    assert summary.exit_code == 1
    assert summary.rooms_failed == 1 and summary.failed_rooms == ["!missing"]
    assert log.events("room_failed")[0]["why"] == "join_failed"
    assert bodies(index, "!ok") == ["fine"]


def test_an_unknown_alias_is_a_failure_named_in_the_journal(hs, index):
    summary, log = run(hs, index, rooms=["#nowhere:hs.test"])
    assert summary.exit_code == 1
    assert log.events("room_failed")[0]["alias"] == "#nowhere:hs.test"


def test_unreadable_room_facts_keep_the_rooms_points_and_cursor(hs, index):
    hs.add_room("!pub")
    hs.send("!pub", ALICE, "kept through an outage")
    run(hs, index, rooms=["!pub"])
    cursor = index.get_cursor("!pub")
    real_state = hs.room_state

    async def broken_state(room_id):
        from daemon.ports import MatrixError

        raise MatrixError(f"state {room_id}", 502, None)

    hs.room_state = broken_state
    summary, log = run(hs, index, rooms=["!pub"])
    assert summary.exit_code == 1
    assert log.events("room_failed")[0]["why"] == "room_state_unreadable"
    assert log.events("room_purged") == [] and log.events("room_refused") == []
    assert bodies(index, "!pub") == ["kept through an outage"]
    assert index.get_cursor("!pub") == cursor
    hs.room_state = real_state


@pytest.mark.parametrize("change", ["window_bytes", "window_gap"])
def test_a_new_chat_version_rebuilds_the_index(hs, index, change):
    hs.add_room("!pub")
    for i in range(6):
        hs.send("!pub", ALICE, f"line {i} " + "y" * 40)
    run(hs, index, rooms=["!pub"])
    bounds = (
        Bounds(max_bytes=120, max_gap_ms=3_600_000)
        if change == "window_bytes"
        else Bounds(max_bytes=300, max_gap_ms=500)
    )
    summary, log = run(hs, index, rooms=["!pub"], bounds=bounds)
    assert log.events("index_rebuilt")[0]["why"] == "chat_version"
    assert index.read_meta().chat_version.endswith(f"/b{bounds.max_bytes}/g{bounds.max_gap_ms}")
    assert len(bodies(index, "!pub")) == 6 and len(stored(index, "!pub")) > 1


def test_invites_are_accepted_for_allowed_rooms_only_and_rooms_are_joined_by_alias(hs, index):
    hs.add_room("!invited-ok", joined=False)
    hs.add_room("!invited-no", joined=False)
    hs.add_room("!by-alias", alias="#garden:hs.test", joined=False)
    hs.invited |= {"!invited-ok", "!invited-no"}
    hs.send("!invited-no", ALICE, "CANARY never joined")
    hs.send("!by-alias", ALICE, "tomatoes")
    summary, log = run(hs, index, rooms=["!invited-ok", "#garden:hs.test"])
    assert summary.exit_code == 0
    assert sorted(hs.join_calls) == ["!invited-ok", "#garden:hs.test"]  # the alias, not the bare id
    assert "!invited-no" not in hs.joined
    refused = [r for r in log.events("room_refused") if r["room_id"] == "!invited-no"]
    assert [(r["reason"], r["pre_join"]) for r in refused] == [("not_allowed", True)]
    assert {r["room_id"]: r["via"] for r in log.events("room_joined")} == {
        "!invited-ok": "invite",
        "!by-alias": "allowed",
    }
    assert bodies(index, "!by-alias") == ["tomatoes"]
    assert "CANARY" not in json.dumps(stored(index))


class CountingIndex(FailingWrites):
    """Counts ``rooms_with_data`` calls (a full scroll of the index's meta points)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner, failures=0)
        self.rooms_with_data_calls = 0

    def rooms_with_data(self) -> set[str]:
        self.rooms_with_data_calls += 1
        return self._inner.rooms_with_data()


def test_the_index_is_asked_for_its_rooms_once_per_run_however_many_are_refused(hs, index):
    for room in ("!a", "!b", "!c", "!keep"):
        hs.add_room(room)
        hs.send(room, ALICE, f"stored in {room}")
    run(hs, index, rooms=["!a", "!b", "!c", "!keep"])
    counting = CountingIndex(index)
    summary, log = run(hs, counting, rooms=["!keep"])
    assert sorted(r["room_id"] for r in log.events("room_purged")) == ["!a", "!b", "!c"]
    assert summary.rooms_purged == 3
    assert counting.rooms_with_data_calls == 1
    assert index.rooms_with_data() == {"!keep"}


def test_a_room_refused_mid_history_is_purged_even_if_this_run_first_stored_it(hs, index):
    hs.add_room("!pub")
    for i in range(12):
        hs.send("!pub", ALICE, f"before the bridge {i}")
    hs.send("!pub", "@_discord_123:hs.test", "hello from discord")
    summary, log = run(hs, index, rooms=["!pub"], page_size=5, checkpoint_events=5)
    assert log.events("room_refused")[0]["reason"] == "bridged"
    assert log.events("room_purged")[0]["room_id"] == "!pub"
    assert stored(index) == [] and index.get_cursor("!pub") is None


def test_a_purge_by_the_rooms_alias_applies_when_the_room_state_does_not_list_it(hs, index, tmp_path):
    from daemon.refresher.purges import add_purge

    hs.add_room("!pub")  # no alias in its state; the directory alone knows #town
    hs.aliases["#town:hs.test"] = "!pub"
    hs.send("!pub", ALICE, "keep me")
    t_from = hs.ts + 1
    hs.send("!pub", ALICE, "PURGED by the steward")
    t_to = hs.ts
    state_dir = tmp_path / "state"
    add_purge(state_dir, "#town:hs.test", t_from, t_to)
    run(hs, index, rooms=["#town:hs.test"], state_dir=state_dir)
    assert bodies(index, "!pub") == ["keep me"]


# --- joining and leaving ----------------------------------------------------------------------------


def _dm_invite(hs, room_id):
    hs.add_room(room_id, name=None, join_rule="invite", members=(ALICE,), joined=False)
    hs.invited.add(room_id)
    hs.invite_states[room_id] = [
        {"type": "m.room.create", "state_key": "", "sender": ALICE, "content": {"room_version": "12"}},
        {
            "type": "m.room.member",
            "state_key": hs.user_id,
            "sender": ALICE,
            "content": {"membership": "invite", "is_direct": True},
        },
    ]


def test_a_room_refused_before_joining_is_never_joined(hs, index):
    _dm_invite(hs, "!dm")
    hs.add_room(
        "!enc",
        name="Board",
        joined=False,
        extra_state=[
            {
                "type": "m.room.encryption",
                "state_key": "",
                "sender": ALICE,
                "content": {"algorithm": "m.megolm.v1.aes-sha2"},
            }
        ],
    )
    hs.add_room("!roster", alias="#Users:hs.test", joined=False)
    hs.aliases["#roster-directory:hs.test"] = "!roster"
    summary, log = run(hs, index, rooms=["!dm", "!enc", "#Users:hs.test"])
    assert hs.join_calls == [] and hs.joined == set()
    refused = {r["room_id"]: (r["reason"], r["pre_join"]) for r in log.events("room_refused")}
    assert refused == {"!dm": ("dm", True), "!enc": ("encrypted", True), "!roster": ("excluded", True)}
    assert summary.exit_code == 0 and hs.message_calls == 0


def test_a_room_refused_only_from_inside_is_joined_decided_and_left_at_once(hs, index, tmp_path):
    hs.add_room("!bridged", name="Looks normal", joined=False, members=(ALICE, "@_discord_1:hs.test"))
    hs.send("!bridged", ALICE, "CANARY from a bridged room")
    summary, log = run(hs, index, rooms=["!bridged"], state_dir=tmp_path / "state")
    assert hs.join_calls == ["!bridged"] and hs.leave_calls == ["!bridged"] and "!bridged" not in hs.joined
    left = log.events("room_left")
    assert [(r["room_id"], r["reason"], r["evidence"]["signal"]) for r in left] == [
        ("!bridged", "bridged", "puppet_member")
    ]
    assert log.events("room_refused")[0]["pre_join"] is False
    assert hs.message_calls == 0 and "CANARY" not in json.dumps(stored(index))
    assert json.loads((tmp_path / "state" / "joined_by_refresher.json").read_text()) == {"rooms": []}
    # The next run sees the bridge in the state the room showed when it was left: no second join.
    summary, log = run(hs, index, rooms=["!bridged"], state_dir=tmp_path / "state")
    assert hs.join_calls == ["!bridged"]
    assert [(r["reason"], r["pre_join"]) for r in log.events("room_refused")] == [("bridged", True)]


def test_a_room_the_operator_joined_is_refused_and_never_read_but_not_left(hs, index, tmp_path):
    hs.add_room("!ops", name="Mods", members=(ALICE, "@_discord_2:hs.test"))  # joined before any refresh
    hs.send("!ops", ALICE, "CANARY operator room")
    summary, log = run(hs, index, rooms=["!ops"], state_dir=tmp_path / "state")
    assert hs.leave_calls == [] and "!ops" in hs.joined
    assert log.events("room_refused")[0]["joined_by"] == "operator"
    assert hs.message_calls == 0


def test_a_room_the_refresher_joined_is_left_when_it_turns_refused_on_a_later_run(hs, index, tmp_path):
    hs.add_room("!pub", name="Garden", joined=False)
    hs.send("!pub", ALICE, "tomatoes")
    run(hs, index, rooms=["!pub"], state_dir=tmp_path / "state")
    assert "!pub" in hs.joined and bodies(index, "!pub") == ["tomatoes"]
    summary, log = run(hs, index, rooms=[], state_dir=tmp_path / "state")  # the operator took it out of ROOMS
    assert hs.leave_calls == ["!pub"] and log.events("room_left")[0]["reason"] == "not_allowed"
    assert stored(index, "!pub") == []


def test_a_kick_purges_the_room_and_nothing_is_read_again(hs, index):
    hs.add_room("!pub")
    hs.send("!pub", ALICE, "kept until the kick")
    run(hs, index, rooms=["!pub"])
    assert bodies(index, "!pub") == ["kept until the kick"] and index.get_cursor("!pub") is not None
    hs.kick("!pub", by=ALICE)
    calls = hs.message_calls
    summary, log = run(hs, index, rooms=["!pub"])
    assert stored(index, "!pub") == [] and index.get_cursor("!pub") is None
    assert hs.message_calls == calls and hs.join_calls == []  # not read, and not walked back into
    purged = log.events("room_purged")
    assert [(r["reason"], r["evidence"]["by"]) for r in purged] == [("kicked", ALICE)]
    assert log.events("room_failed")[0]["why"] == "kicked" and summary.exit_code == 1


def test_a_kick_between_the_run_start_and_the_rooms_turn_is_seen(hs, index):
    hs.add_room("!a")
    hs.add_room("!b")
    hs.send("!b", ALICE, "read before the kick")
    run(hs, index, rooms=["!a", "!b"])
    real = hs.room_state

    async def kick_b_while_reading_a(room_id):
        if room_id == "!a":
            hs.kick("!b", ban=True)
        return await real(room_id)

    hs.room_state = kick_b_while_reading_a
    summary, log = run(hs, index, rooms=["!a", "!b"])
    assert stored(index, "!b") == [] and index.get_cursor("!b") is None
    assert [r["reason"] for r in log.events("room_purged")] == ["banned"]


def test_a_failed_join_reads_nothing(hs, index):
    hs.add_room("!locked", name="Locked", joined=False)
    hs.world_readable.add("!locked")
    hs.refuse_join.add("!locked")
    hs.send("!locked", ALICE, "CANARY readable by anyone, joined by nobody")
    summary, log = run(hs, index, rooms=["!locked"])
    assert [r["why"] for r in log.events("room_failed")] == ["join_failed"]
    assert hs.message_calls == 0 and stored(index) == [] and summary.exit_code == 1


# ------------------------------------------------- never serve less


def served(index, tmp_path: Path) -> list[str]:
    """Every message body the READER can find: the published Edge generation, or the collection
    the server alias names. Not the writer's view, which may be a rebuild in progress."""
    from daemon.index.port import SearchFilter

    if isinstance(index, EdgeIndexWriter):
        from daemon.index.edge_reader import EdgeIndexReader

        reader = EdgeIndexReader.open_latest(index.root, tmp_path / "reader-private")
        if reader is None:
            return []
    else:
        from daemon.index.remote_reader import RemoteIndexReader

        reader = RemoteIndexReader(index._client, index.alias)
    try:
        rows = reader.listing(SearchFilter(), None, 10_000)
    finally:
        if isinstance(index, EdgeIndexWriter):
            reader.close()
    return sorted(m.body for p in rows for m in p.messages)


def served_meta(index, tmp_path: Path):
    if isinstance(index, EdgeIndexWriter):
        from daemon.index.edge_reader import EdgeIndexReader

        with EdgeIndexReader.open_latest(index.root, tmp_path / "reader-private") as reader:
            return reader.read_meta()
    from daemon.index.remote_reader import RemoteIndexReader

    return RemoteIndexReader(index._client, index.alias).read_meta()


def fail_messages_after(hs, calls: int):
    """The homeserver answers 502 to /messages from the ``calls``-th request of this run on."""
    from daemon.ports import MatrixError

    real = hs.messages
    seen = {"n": 0}

    async def flaky(room_id, start, limit):
        seen["n"] += 1
        if seen["n"] > calls:
            raise MatrixError(f"messages {room_id}", 502, None)
        return await real(room_id, start, limit)

    hs.messages = flaky
    return lambda: setattr(hs, "messages", real)


class OtherModel(FakeEmbedder):
    model_id = "fake/other"


def two_rooms(hs) -> None:
    for room in ("!one", "!two"):
        hs.add_room(room)
        for i in range(20):
            hs.send(room, ALICE, f"{room} message {i}")


def test_a_full_rebuild_that_fails_mid_run_keeps_serving_the_old_index(hs, index, tmp_path):
    two_rooms(hs)
    run(hs, index, rooms=["!one", "!two"])
    before = served(index, tmp_path)
    assert len(before) == 40

    restore = fail_messages_after(hs, 3)  # the model changed, then the homeserver 502s
    summary, log = run(hs, index, rooms=["!one", "!two"], embedder=OtherModel())
    restore()
    assert summary.exit_code == 1
    assert served(index, tmp_path) == before
    assert summary.rebuild_pending and log.events("index_rebuild_pending")

    summary, log = run(hs, index, rooms=["!one", "!two"], embedder=OtherModel())  # the next good run
    assert summary.exit_code == 0 and not summary.rebuild_pending
    assert served(index, tmp_path) == before
    assert index.read_meta().model == "fake/other" and not index.rebuilding
    assert served_meta(index, tmp_path).model == "fake/other"  # what the reader reads switched


def test_a_room_rebuild_that_fails_half_way_keeps_the_rooms_old_points(hs, index, tmp_path):
    from daemon.index.port import RoomCursor

    two_rooms(hs)
    run(hs, index, rooms=["!one", "!two"])
    before = served(index, tmp_path)
    cursor = index.get_cursor("!one")
    # A cursor from another chat version: the room is rebuilt (not the whole index).
    index.set_cursor(RoomCursor("!one", cursor.end_token, cursor.last_event_id, cursor.open_window_id, "older"))
    index.commit()

    restore = fail_messages_after(hs, 2)  # page 1 and 2 of 4 are read, then 502s
    summary, log = run(hs, index, rooms=["!one", "!two"], page_size=7, checkpoint_events=5)
    restore()
    assert summary.exit_code == 1
    assert log.events("room_rebuild_failed")[0]["kept_old"] is True
    assert served(index, tmp_path) == before
    assert index.get_cursor("!one") is None  # so the next run rebuilds it again

    summary, log = run(hs, index, rooms=["!one", "!two"])
    assert summary.exit_code == 0
    assert served(index, tmp_path) == before
    assert bodies(index, "!one") == [f"!one message {i}" for i in range(20)]
    assert index.get_cursor("!one").chat_version != "older"


def test_a_room_rebuild_drops_the_cursor_first_and_old_windows_last(hs, index):
    hs.add_room("!pub")
    a = hs.send("!pub", ALICE, "original words")
    e = hs.edit("!pub", ALICE, a, "EDITED-TEXT that alice took back")
    for i in range(10):
        hs.send("!pub", BOB, f"later {i}")
    run(hs, index, rooms=["!pub"])
    hs.redact("!pub", ALICE, e)

    calls: list[str] = []
    for name in ("drop_cursor", "purge_room", "prune_room", "write_windows", "set_cursor"):
        real = getattr(index, name)

        def spy(*args, _real=real, _name=name, **kw):
            deletes = _name == "write_windows" and bool(args[2])
            calls.append(_name + (" (deletes)" if deletes else ""))
            return _real(*args, **kw)

        setattr(index, name, spy)
    _, log = run(hs, index, rooms=["!pub"])
    assert log.events("room_rebuilt")[0]["why"] == "unknown_redaction_target"
    start = calls.index("drop_cursor")
    assert "purge_room" not in calls
    assert calls[start:].count("prune_room") == 1
    # After the cursor is dropped: writes, then the prune of old windows, then the cursor.
    assert calls[-2:] == ["prune_room", "set_cursor"]
    assert bodies(index, "!pub") == ["original words"] + [f"later {i}" for i in range(10)]


def test_a_redaction_rebuild_that_fails_still_removes_the_text_from_what_is_served(hs, index, tmp_path):
    hs.add_room("!pub")
    a = hs.send("!pub", ALICE, "original words")
    e = hs.edit("!pub", ALICE, a, "EDITED-TEXT that alice took back")
    for i in range(20):
        hs.send("!pub", BOB, f"later {i}")
    run(hs, index, rooms=["!pub"])
    hs.redact("!pub", ALICE, e)
    restore = fail_messages_after(hs, 5)  # the incremental page, the target lookup, then 502s
    summary, log = run(hs, index, rooms=["!pub"], page_size=7, checkpoint_events=5)
    restore()
    assert summary.exit_code == 1
    assert log.events("room_rebuild_failed")[0]["kept_old"] is False
    assert not any("EDITED-TEXT" in b for b in served(index, tmp_path))
    run(hs, index, rooms=["!pub"])
    assert served(index, tmp_path) == sorted(["original words"] + [f"later {i}" for i in range(20)])


# ------------------------------------------------- text leaves every copy


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Every file under ``root`` whose bytes contain ``needle`` (holes read as zeros)."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and needle in path.read_bytes():
            found.append(str(path.relative_to(root)))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("how", ["redaction", "purge", "edit_redaction"])
def test_removed_text_leaves_every_file_under_the_state_dir_after_one_run(hs, tmp_path, how):
    from daemon.index.edge_reader import EdgeIndexReader
    from daemon.refresher.purges import add_purge

    state = tmp_path / "state"
    secret = "ZEBRA-SECRET-4417"
    hs.add_room("!pub")
    for i in range(8):
        hs.send("!pub", BOB, f"before {i}")
    if how == "edit_redaction":
        a = hs.send("!pub", ALICE, "original words")
        target = hs.edit("!pub", ALICE, a, f"{secret} said in an edit")
    else:
        target = hs.send("!pub", ALICE, f"{secret} said by mistake")
    for i in range(8):
        hs.send("!pub", BOB, f"after {i}")
    with EdgeIndexWriter(state / "index") as index:
        run(hs, index, rooms=["!pub"], state_dir=state)
        for _ in range(2):  # more generations, as a running deployment has
            hs.send("!pub", BOB, "more")
            run(hs, index, rooms=["!pub"], state_dir=state)
    reader = EdgeIndexReader.open_latest(state / "index", state / "reader")
    reader.close()
    assert files_holding(state, secret.encode())  # the text really was stored

    if how == "purge":
        ts = next(e["origin_server_ts"] for e in hs.rooms["!pub"].timeline if e.get("event_id") == target)
        add_purge(state, "!pub", ts, ts)
    else:
        hs.redact("!pub", ALICE, target)
    with EdgeIndexWriter(state / "index") as index:
        summary, _ = run(hs, index, rooms=["!pub"], state_dir=state)
        assert summary.exit_code == 0
        assert not any(secret in b for b in bodies(index))
    assert files_holding(state, secret.encode()) == []
    assert len([p for p in (state / "index" / "generations").iterdir() if p.name != "CURRENT"]) == 1


def test_a_new_index_is_reset_while_the_homeserver_answers_the_runs_first_questions(hs, tmp_path):
    """The reset of a new index (its payload indexes: file work) overlaps the global homeserver
    calls, which touch no index, and is done before anything reads the index."""
    import threading

    asked = threading.Event()

    class Answering(FakeMatrix):
        async def joined_rooms(self):
            asked.set()
            return await super().joined_rooms()

    class SlowReset(EdgeIndexWriter):
        overlapped = False

        def reset(self, meta):
            # Ends as soon as the homeserver was asked; without the overlap, never (bounded).
            SlowReset.overlapped = asked.wait(timeout=10)
            super().reset(meta)

    matrix = Answering()
    matrix.add_room("!pub")
    matrix.send("!pub", ALICE, "hello")
    index = SlowReset(tmp_path / "index")
    try:
        summary, _ = run(matrix, index, rooms=["!pub"])
        assert SlowReset.overlapped
        assert summary.index_rebuilt and bodies(index, "!pub") == ["hello"]
    finally:
        index.close()

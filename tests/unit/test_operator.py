"""`huginn-chat scope` and `status` over an in-memory homeserver and a real Edge index.

The index is filled by the real Refresher (fake homeserver, fake embedder), so what the operator
sees is checked against what the refresher really decided and stored. Every test that runs a
command also checks that it wrote nothing: the state dir's tree (names, sizes, mtimes) and the
service user's joined rooms are the same before and after.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from chunker.fold import Bounds
from daemon.cli.operator_view import (
    NO_INDEX,
    format_age,
    public_url,
    read_server_index,
    rooms_main,
    status_main,
    summarize_evidence,
)
from daemon.config import load_settings
from daemon.errors import HuginnError
from daemon.index.edge import read_current
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.index.remote_reader import RemoteIndexReader
from daemon.index.remote_writer import RemoteIndexWriter
from daemon.ports import MatrixError
from daemon.refresher.run import Refresher, RefreshOptions
from scope import Policy
from tests.fakes import FakeEmbedder, FakeMatrix, ListLog

ALICE = "@alice:hs.test"
BOB = "@bob:hs.test"
NOW = 1_700_000_000.0 + 30 * 86400  # the clock the commands see: well after every fake event

ROOMS = ["#town:hs.test", "!dm", "!bridged", "!enc", "#users:hs.test", "!later", "#nowhere:hs.test", "!invited"]
BRIDGES = ["@_ircbot_.*:.*"]


def tree(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file and directory under root: (kind, size, mtime_ns)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            out[str(path.relative_to(root))] = ("dir" if path.is_dir() else "file", st.st_size, st.st_mtime_ns)
    return out


def community() -> FakeMatrix:
    hs = FakeMatrix()
    hs.add_room("!town", alias="#town:hs.test")
    hs.add_room("!dm", name=None, join_rule="invite", members=(ALICE,))
    hs.direct = {ALICE: ["!dm"]}
    hs.add_room(
        "!bridged",
        extra_state=[
            {"type": "m.bridge", "state_key": "discord", "sender": ALICE, "content": {"protocol": {"id": "discord"}}}
        ],
    )
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
    hs.add_room("!users", alias="#users:hs.test")
    hs.add_room("!elsewhere", name="Elsewhere")  # joined, not in ROOMS
    hs.add_room("!later", name="Not joined yet", joined=False)  # allowed, joined by the first refresh
    hs.add_room("!invited", name="Invited", joined=False)
    hs.invited.add("!invited")
    for i in range(30):
        hs.send("!town", ALICE if i % 2 else BOB, f"message {i} about the allotment and the new fence posts")
    for room in ("!dm", "!bridged", "!enc", "!users", "!elsewhere"):
        hs.send(room, ALICE, f"CANARY {room}")
    hs.send("!later", BOB, "a room nobody joined yet")
    return hs


def settings_for(state_dir: Path, **extra: Any):
    return load_settings(**{"state_dir": str(state_dir), "rooms": ROOMS, "bridge_senders": BRIDGES, **extra})


def refresh(hs: FakeMatrix, state_dir: Path, *, clock=lambda: NOW - 600, rooms=ROOMS) -> ListLog:
    log = ListLog()
    writer = EdgeIndexWriter(state_dir / "index")
    try:
        asyncio.run(
            Refresher(
                matrix=hs,
                index=writer,
                embedder=FakeEmbedder(),
                policy=Policy.build(allowed=rooms, exclude=(), bridge_sender_patterns=BRIDGES),
                log=log,
                options=RefreshOptions(
                    bounds=Bounds(max_bytes=300, max_gap_ms=3_600_000),
                    page_size=50,
                    checkpoint_events=100,
                    state_dir=state_dir,
                ),
                clock=clock,
            ).run()
        )
    finally:
        writer.close()
    return log


def run_rooms(settings, hs, *, as_json=True) -> tuple[int, Any]:
    out = io.StringIO()
    code = rooms_main(settings, as_json=as_json, matrix=hs, clock=lambda: NOW, out=out)
    return code, (json.loads(out.getvalue()) if as_json and code == 0 else out.getvalue())


def run_status(settings, *, as_json=True) -> tuple[int, Any]:
    out = io.StringIO()
    code = status_main(settings, as_json=as_json, clock=lambda: NOW, out=out)
    return code, (json.loads(out.getvalue()) if as_json and code == 0 else out.getvalue())


def by_room(rows):
    return {row["room_id"] or row["alias"]: row for row in rows}


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


def test_rooms_before_a_refresh_predicts_every_decision_the_refresher_makes(state):
    hs = community()
    joined_before, invited_before = set(hs.joined), set(hs.invited)
    before = tree(state)
    code, rows = run_rooms(settings_for(state), hs)
    assert code == 0
    assert tree(state) == before  # nothing written, not even an index directory
    assert hs.joined == joined_before and hs.invited == invited_before  # no join, no invite accepted

    log = refresh(hs, state)
    refresher = {r["room_id"]: ("refused", r["reason"]) for r in log.events("room_refused")}
    refresher |= {r["room_id"]: ("admitted", "admitted") for r in log.events("room_admitted")}
    shown = {r["room_id"]: (r["decision"], r["reason"]) for r in rows if r["room_id"]}
    # Rooms not joined yet and not refused by what shows before a join are decided after it.
    undecided = {room for room, (decision, _) in shown.items() if decision == "unknown"}
    assert undecided == {"!later", "!invited"}
    assert {room: shown[room] for room in shown if room not in undecided} == {
        room: seen for room, seen in refresher.items() if room not in undecided
    }
    assert {room: refresher[room] for room in undecided} == {
        "!later": ("admitted", "admitted"),
        "!invited": ("admitted", "admitted"),
    }
    assert shown == {
        "!town": ("admitted", "admitted"),
        "!dm": ("refused", "dm"),
        "!bridged": ("refused", "bridged"),
        "!enc": ("refused", "encrypted"),
        "!users": ("refused", "excluded"),
        "!elsewhere": ("refused", "not_allowed"),
        "!later": ("unknown", "decided_after_join"),
        "!invited": ("unknown", "decided_after_join"),
    }
    rooms = by_room(rows)
    assert rooms["!later"]["membership"] == "not_joined"
    assert "next refresh joins it" in rooms["!later"]["note"]
    assert rooms["!invited"]["membership"] == "invited"
    assert rooms["#nowhere:hs.test"]["reason"] == "alias_unknown"
    # The same evidence the journal carries.
    journal_dm = next(r for r in log.events("room_refused") if r["room_id"] == "!dm")
    assert rooms["!dm"]["evidence"] == journal_dm["evidence"]
    assert rooms["!town"]["windows"] == 0 and rooms["!town"]["cursor_age_s"] is None


@pytest.mark.slow
def test_rooms_after_a_refresh_shows_windows_and_cursor_age(state):
    hs = community()
    refresh(hs, state, clock=lambda: NOW - 125)
    with EdgeIndexWriter(state / "index") as writer:
        stored = writer.window_counts().get("!town", 0)
    assert stored > 1
    before, joined_before = tree(state), set(hs.joined)
    code, rows = run_rooms(settings_for(state), hs)
    assert code == 0
    assert tree(state) == before and hs.joined == joined_before
    town = by_room(rows)["!town"]
    assert town["windows"] == stored
    assert town["cursor_age_s"] == pytest.approx(125, abs=1)
    assert town["alias"] == "#town:hs.test"
    assert by_room(rows)["!dm"]["windows"] == 0

    code, text = run_rooms(settings_for(state), hs, as_json=False)
    assert code == 0
    header = text.splitlines()[0].split()
    assert header[:4] == ["ROOM", "ALIAS", "DECISION", "REASON"]
    town_line = next(line for line in text.splitlines() if line.startswith("!town "))
    assert "admitted" in town_line and f" {stored} " in town_line and "2m 5s" in town_line
    dm_line = next(line for line in text.splitlines() if line.startswith("!dm "))
    assert "refused" in dm_line and "m_direct" in dm_line
    assert "CANARY" not in text


@pytest.mark.slow
def test_rooms_works_while_a_refresher_holds_the_working_shard(state):
    hs = community()
    refresh(hs, state)
    with EdgeIndexWriter(state / "index"):  # the lock a running refresh holds
        before = tree(state)
        code, rows = run_rooms(settings_for(state), hs)
        assert tree(state) == before
    assert code == 0 and by_room(rows)["!town"]["windows"] > 0


@pytest.mark.slow
def test_a_room_dropped_from_scope_shows_as_purged_next(state):
    hs = community()
    refresh(hs, state)
    hs.joined.discard("!town")
    code, rows = run_rooms(settings_for(state, rooms=["!dm"]), hs)
    assert code == 0
    town = by_room(rows)["!town"]
    assert (town["decision"], town["reason"]) == ("refused", "not_in_scope")
    assert town["windows"] > 0 and "purges" in town["note"]
    # And the refresher agrees.
    log = refresh(hs, state, rooms=["!dm"])
    purged = {r["room_id"]: r["reason"] for r in log.events("room_purged")}
    assert purged["!town"] == "not_in_scope"
    assert {r["room_id"]: r["reason"] for r in rows if r["note"] and "purges" in r["note"]} == purged


class StateHiddenUntilJoined(FakeMatrix):
    async def room_state(self, room_id):
        if room_id not in self.joined:
            raise MatrixError(f"room_state {room_id}", 403, "M_FORBIDDEN")
        return await super().room_state(room_id)


def test_an_unjoined_room_with_unreadable_state_is_undecided_not_guessed(state):
    hs = StateHiddenUntilJoined()
    hs.add_room("!later", name="Later", joined=False)
    code, rows = run_rooms(load_settings(state_dir=str(state), rooms=["!later"]), hs)
    assert code == 0
    row = by_room(rows)["!later"]
    assert row["decision"] == "unknown" and row["reason"] == "decided_after_join"
    assert "next refresh joins it" in row["note"]
    assert hs.joined == set()


def test_rooms_exit_codes(state):
    with pytest.raises(HuginnError) as raised:
        rooms_main(load_settings(state_dir=str(state), rooms=["!a"]), as_json=True)
    assert raised.value.exit_code == 2 and "homeserver" in str(raised.value)

    token = state.parent / "token"
    token.write_text("syt_not_a_real_token\n")
    token.chmod(0o600)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the call: nothing listens there
    settings = load_settings(
        state_dir=str(state), rooms=["!a"], homeserver=f"http://127.0.0.1:{port}", token_file=str(token)
    )
    with pytest.raises(HuginnError) as raised:
        rooms_main(settings, as_json=True)
    err = str(raised.value)
    assert raised.value.exit_code == 1
    assert "\n" not in err and "unreachable" in err and f"127.0.0.1:{port}" in err
    assert "syt_not_a_real_token" not in err


def test_status_without_an_index_says_to_refresh(state):
    before = tree(state)
    with pytest.raises(HuginnError) as raised:
        run_status(load_settings(state_dir=str(state)))
    assert raised.value.exit_code == 1 and str(raised.value).startswith(NO_INDEX)
    assert str(state) in str(raised.value) and "/run/huginn-chat/reader.sock" in str(raised.value)
    assert tree(state) == before


def test_status_without_an_index_asks_the_reader(state):
    from tests.reader_fakes import serving_the_fake_corpus

    out = io.StringIO()
    with serving_the_fake_corpus() as path:
        settings = load_settings(state_dir=str(state), socket=str(path))
        assert status_main(settings, as_json=False, out=out) == 0
    text = out.getvalue()
    assert f"the reader on {path} answered" in text and "index_ready  True" in text


@pytest.mark.slow
def test_status_reports_the_published_index_and_the_last_run(state):
    hs = community()
    refresh(hs, state, clock=lambda: NOW - 3700)
    with EdgeIndexWriter(state / "index") as writer:
        total, town = sum(writer.window_counts().values()), writer.window_counts().get("!town", 0)
        generation = read_current(state / "index")
    before = tree(state)
    code, report = run_status(settings_for(state))
    assert code == 0
    assert tree(state) == before
    assert report["index"]["kind"] == "edge"
    assert report["index"]["windows"] == total
    assert report["index"]["rooms"] == 3  # !town, !later, !invited
    assert report["index"]["bytes_on_disk"] > 0
    assert report["index"]["meta"]["model"] == FakeEmbedder.model_id
    assert report["generation"]["number"] == generation
    assert report["last_run"]["rooms_admitted"] == 3 and report["last_run"]["rooms_refused"] == 5
    assert report["last_run"]["age_s"] == pytest.approx(3700, abs=1)
    lag = {r["room_id"]: r for r in report["rooms"]}
    assert lag["!town"]["windows"] == town and lag["!town"]["lag_s"] == pytest.approx(3700, abs=1)

    code, text = run_status(settings_for(state), as_json=False)
    assert code == 0
    assert f"{total} windows in 3 rooms" in text
    assert f"generation  {generation}," in text
    # The unresolvable alias in ROOMS is the refresher's one failure.
    assert "last run    1h 1m ago" in text and "3 admitted, 5 refused, 1 failed" in text


@pytest.mark.slow
def test_status_works_while_a_refresher_holds_the_working_shard(state):
    refresh(community(), state)
    with EdgeIndexWriter(state / "index"):
        before = tree(state)
        code, report = run_status(settings_for(state))
        assert tree(state) == before
    assert code == 0 and report["index"]["windows"] > 0


def test_status_reads_a_qdrant_server_index():
    from qdrant_client import QdrantClient

    client = QdrantClient(":memory:")
    hs = community()
    asyncio.run(
        Refresher(
            matrix=hs,
            index=RemoteIndexWriter(client, "chat"),
            embedder=FakeEmbedder(),
            policy=Policy.build(allowed=ROOMS),
            log=ListLog(),
            clock=lambda: NOW - 60,
        ).run()
    )
    snapshot = read_server_index(RemoteIndexReader(client, "chat"), "http://q:6333 collection chat")
    assert snapshot is not None and snapshot.kind == "server"
    assert snapshot.windows["!town"] == RemoteIndexWriter(client, "chat").window_counts()["!town"]
    assert snapshot.cursors["!town"].updated_ms == int((NOW - 60) * 1000)
    assert read_server_index(RemoteIndexReader(client, "absent"), "x") is None


def test_presentation_helpers():
    assert public_url("https://user:pw@qdrant.example:6333/base") == "https://qdrant.example:6333/base"
    assert [format_age(s) for s in (None, 5, 125, 3700, 90000)] == ["-", "5s", "2m 5s", "1h 1m", "1d 1h"]
    evidence = {
        "signal": "is_direct",
        "member": ALICE,
        "signals": [{"signal": "is_direct", "member": ALICE}, {"signal": "m_direct", "account_data_of": "@r:hs"}],
    }
    assert summarize_evidence(evidence) == f"is_direct {ALICE}, m_direct"
    assert summarize_evidence({"signal": "not_listed", "aliases": []}) == "not in ROOMS (no alias)"
    assert (
        summarize_evidence({"signal": "canonical_alias", "value": "#users:x", "entry": "#users:*", "builtin": True})
        == "canonical_alias #users:x (built-in)"
    )


def test_public_url_keeps_ipv6_brackets_and_drops_credentials():
    from daemon.cli.operator_view import public_url

    assert public_url("http://user:secret@[::1]:6333/x?k=v") == "http://[::1]:6333/x"
    assert public_url("https://qdrant.internal:6333") == "https://qdrant.internal:6333"


def test_rooms_shows_a_room_refused_before_joining_and_never_joins_it(state):
    hs = FakeMatrix()
    hs.add_room("!dm", name=None, join_rule="invite", members=(ALICE,), joined=False)
    hs.invited.add("!dm")
    hs.invite_states["!dm"] = [
        {
            "type": "m.room.member",
            "state_key": hs.user_id,
            "sender": ALICE,
            "content": {"membership": "invite", "is_direct": True},
        }
    ]
    hs.add_room("!stranger", name="Stranger", joined=False)
    hs.invited.add("!stranger")  # invited, not in ROOMS
    code, rows = run_rooms(load_settings(state_dir=str(state), rooms=["!dm"]), hs)
    assert code == 0 and hs.join_calls == []
    shown = {r["room_id"]: (r["decision"], r["reason"], r["pre_join"]) for r in rows if r["room_id"]}
    assert shown == {"!dm": ("refused", "dm", True), "!stranger": ("refused", "not_allowed", True)}
    assert "does not join it" in by_room(rows)["!dm"]["note"]
    log = refresh(hs, state, rooms=("!dm",))
    assert {(r["room_id"], r["reason"], r["pre_join"]) for r in log.events("room_refused")} == {
        ("!dm", "dm", True),
        ("!stranger", "not_allowed", True),
    }


@pytest.mark.slow
def test_purge_keys_resolve_by_any_name_and_status_lists_every_span_state(state):
    from daemon.refresher.purges import add_purge

    hs = FakeMatrix()
    hs.add_room("!town", alias="#town:hs.test")
    hs.aliases["#square:hs.test"] = "!town"  # a directory alias the room's state does not publish
    hs.send("!town", ALICE, "hello")
    add_purge(state, "#square:hs.test", 1, 2)
    add_purge(state, "#TOWN:hs.test", 3, 4)
    add_purge(state, "#nowhere:hs.test", 5, 6)
    log = refresh(hs, state, rooms=("#town:hs.test",))
    unmatched = log.events("purge_unmatched")
    assert [(r["room"], r["why"]) for r in unmatched] == [("#nowhere:hs.test", "alias_unknown")]
    add_purge(state, "!town", 7, 8)  # recorded after the run: pending until the next one
    code, report = run_status(settings_for(state))
    assert code == 0
    states = {(p["room"], p["ts_from"]): (p["state"], p["room_id"]) for p in report["purges"]}
    assert states == {
        ("#square:hs.test", 1): ("applied", "!town"),
        ("#TOWN:hs.test", 3): ("applied", "!town"),
        ("#nowhere:hs.test", 5): ("unmatched", None),
        ("!town", 7): ("pending", None),
    }
    code, text = run_status(settings_for(state), as_json=False)
    assert "PURGE" in text and "unmatched (alias_unknown)" in text
    # On every run, until the steward fixes the key.
    assert [r["room"] for r in refresh(hs, state, rooms=("#town:hs.test",)).events("purge_unmatched")] == [
        "#nowhere:hs.test"
    ]

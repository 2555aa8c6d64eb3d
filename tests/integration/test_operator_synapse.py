"""`huginn-chat scope` and `status` as an operator runs them, against a real Synapse.

A small community is seeded (a public room, a DM, a bridged room, an excluded room, a joined room
not in ROOMS); `refresh` runs as systemd would; then `rooms --json` must state, for every seeded
room, exactly the decision the refresher journalled, and neither `rooms` nor `status` may write a
byte under STATE_DIR or join a room.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.reader_process import run_cli

pytestmark = pytest.mark.synapse


def tree(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = (Path(dirpath) / name).lstat()
            out[str((Path(dirpath) / name).relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def seeded(synapse, tmp_path_factory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("operator")
    tag = uuid.uuid4().hex[:6]
    server = synapse.server_name
    alice, bob, reader = synapse.new_actor("alice"), synapse.new_actor("bob"), synapse.new_actor("reader")

    public = alice.create_room(name="Allotment", alias_localpart=f"allot{tag}")
    bob.join(public)
    dm = alice.create_room(preset="trusted_private_chat", is_direct=True, invite=[reader.user_id])
    bridged = alice.create_room(name="Discord bridge")
    alice.send_state(bridged, "m.bridge", "discord", {"protocol": {"id": "discord"}})
    excluded = alice.create_room(name="Quiet room", alias_localpart=f"quiet{tag}")
    elsewhere = alice.create_room(name="Elsewhere")
    reader.join(elsewhere)  # joined, but not in ROOMS
    for room in (dm, bridged, excluded, elsewhere):
        alice.send_text(room, f"CANARY-{tag} never indexed")
    for i in range(12):
        (alice if i % 2 else bob).send_text(public, f"the plot by the gate needs compost, note {i}")

    token = tmp / "matrix-token"
    token.write_text(reader.account.access_token + "\n")
    token.chmod(0o600)
    state = tmp / "state"
    state.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": synapse.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(token),
        "HUGINN_CHAT_ROOMS": json.dumps([f"#allot{tag}:{server}", dm, bridged, f"#quiet{tag}:{server}"]),
        "HUGINN_CHAT_EXCLUDE_ROOMS": json.dumps([f"#quiet{tag}:{server}"]),
        "HUGINN_CHAT_STATE_DIR": str(state),
    }
    rooms = {"public": public, "dm": dm, "bridged": bridged, "excluded": excluded, "elsewhere": elsewhere}
    return {"env": env, "state": state, "rooms": rooms, "reader": reader, "tag": tag}


def joined(reader) -> set[str]:
    return set(reader.call("GET", "/_matrix/client/v3/joined_rooms")["joined_rooms"])


def test_rooms_before_any_refresh_joins_nothing_and_writes_nothing(seeded):
    reader, state = seeded["reader"], seeded["state"]
    joined_before, files_before = joined(reader), tree(state)
    proc = run_cli(seeded["env"], "scope", "--json")
    assert proc.returncode == 0, proc.stderr
    assert joined(reader) == joined_before
    assert tree(state) == files_before == {}
    rows = {row["room_id"]: row for row in json.loads(proc.stdout) if row["room_id"]}
    r = seeded["rooms"]
    assert rows[r["public"]]["membership"] == "not_joined"
    # Synapse shows a room's state to members only (unless world-readable): nothing shown before a join
    # refuses it, so it is undecided until the next refresh joins it, not guessed.
    assert (rows[r["public"]]["decision"], rows[r["public"]]["reason"]) == ("unknown", "decided_after_join")
    assert "next refresh joins it" in rows[r["public"]]["note"]
    assert rows[r["dm"]]["membership"] == "invited"
    assert (rows[r["elsewhere"]]["decision"], rows[r["elsewhere"]]["reason"]) == ("refused", "not_allowed")


def test_rooms_states_the_refreshers_decision_for_every_seeded_room(seeded):
    env, state, reader, r = seeded["env"], seeded["state"], seeded["reader"], seeded["rooms"]
    proc = run_cli(env, "refresh")
    assert proc.returncode == 0, proc.stderr[-3000:]
    journal = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    decided = {
        line["room_id"]: ("refused", line["reason"], line["evidence"])
        for line in journal
        if line.get("event") == "room_refused"
    }
    decided |= {
        line["room_id"]: ("admitted", "admitted", None) for line in journal if line.get("event") == "room_admitted"
    }
    assert {name: decided[room][1] for name, room in r.items()} == {
        "public": "admitted",
        "dm": "dm",
        "bridged": "bridged",
        "excluded": "excluded",
        "elsewhere": "not_allowed",
    }

    joined_before, files_before = joined(reader), tree(state)
    proc = run_cli(env, "scope", "--json")
    assert proc.returncode == 0, proc.stderr
    assert joined(reader) == joined_before
    assert tree(state) == files_before
    rows = {row["room_id"]: row for row in json.loads(proc.stdout) if row["room_id"]}
    for name, room in r.items():
        decision, reason, evidence = decided[room]
        assert (rows[room]["decision"], rows[room]["reason"]) == (decision, reason), name
        if evidence is not None:
            assert rows[room]["evidence"] == evidence, name
    assert rows[r["public"]]["windows"] > 0 and rows[r["public"]]["cursor_age_s"] is not None
    assert all(rows[r[n]]["windows"] == 0 for n in ("dm", "bridged", "excluded", "elsewhere"))
    assert "CANARY" not in proc.stdout

    text = run_cli(env, "scope")
    assert text.returncode == 0 and "DECISION" in text.stdout and "not_allowed" in text.stdout
    assert tree(state) == files_before


def test_status_reads_the_published_index_without_the_homeserver(seeded):
    state = seeded["state"]
    if not (state / "index" / "generations" / "CURRENT").exists():  # run alone or first: publish one
        assert run_cli(seeded["env"], "refresh").returncode == 0
    env = {**seeded["env"], "HUGINN_CHAT_HOMESERVER": "http://127.0.0.1:9"}  # nothing listens there
    files_before = tree(state)
    proc = run_cli(env, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    assert tree(state) == files_before
    report = json.loads(proc.stdout)
    assert report["index"]["kind"] == "edge" and report["index"]["windows"] > 0
    assert report["generation"]["number"] >= 1
    assert report["last_run"]["rooms_admitted"] == 1
    assert [row["room_id"] for row in report["rooms"]] == [seeded["rooms"]["public"]]

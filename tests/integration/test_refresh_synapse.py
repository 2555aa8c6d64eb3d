"""The real refresher (`huginn-chat refresh`, as systemd runs it) against a real Synapse.

One small community is seeded once: rooms that must be read and rooms that must never be. Each
refused room holds a canary; every assertion is on the stored payloads (all of them, scrolled) or
on the journal lines an operator would read.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bench.reader_process import run_cli
from daemon.index.edge_writer import EdgeIndexWriter

pytestmark = pytest.mark.synapse

SECRETS = {
    "matrix": "syt_c2VydmljZQ_CaNaRyMaTrIxToKeN0123_0a1b2c",
    "github": "ghp_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8",
    "aws": "AKIA" + "QWERTYUIOPASDFGH",
    "password": "hunter2-CANARY-pw",
    # Shapes beyond vendor tokens, end to end: an IRC password and a Synapse password hash.
    "irc": "Sw0rdf1sh-CANARY-irc",
    "hash": "$2b$12$" + "CaNaRyHaShCaNaRyHaShCaNaRyHaShCaNaRyHaShCaNaRyHaSh123",
    # Command lines and told forms: a password piped to sudo, and one told as two short labels.
    "sudo": "Sud0-CANARY-pipe",
    "told": "Ch0c-CANARY-told",
    # Handed over in one breath, and a password in PHP config.
    "handover": "R0uter*CANARY+56",
    "define": "Tz4#CANARY09gGrs",
}


@dataclass
class Community:
    tmp: Path
    env: dict[str, str]
    rooms: dict[str, str] = field(default_factory=dict)
    events: dict[str, str] = field(default_factory=dict)
    actors: dict[str, Any] = field(default_factory=dict)

    def refresh(self, **env: str) -> tuple[int, list[dict[str, Any]]]:
        proc = run_cli({**self.env, **env}, "refresh", timeout=300)
        lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
        assert lines, proc.stderr[-3000:]
        return proc.returncode, lines

    def payloads(self) -> list[dict[str, Any]]:
        with EdgeIndexWriter(self.tmp / "state" / "index") as index:
            out = []
            for room_id in sorted(index.rooms_with_data()):
                out.extend(index.windows_in_span(room_id, 0, 10**14))
            return out

    def cursor(self, room: str):
        with EdgeIndexWriter(self.tmp / "state" / "index") as index:
            return index.get_cursor(self.rooms[room])


def _events(lines, name):
    return [line for line in lines if line.get("event") == name]


@pytest.fixture(scope="module")
def community(synapse, tmp_path_factory) -> Community:
    tmp = tmp_path_factory.mktemp("community")
    tag = uuid.uuid4().hex[:6]
    alice = synapse.new_actor("alice")
    bob = synapse.new_actor("bob")
    reader = synapse.new_actor("reader")
    puppet = synapse.actor(synapse.puppet(f"_discord_{tag}"))
    c = Community(tmp=tmp, env={})
    c.actors.update(alice=alice, bob=bob, reader=reader, puppet=puppet)
    server = synapse.server_name

    # Rooms that must be read.
    town = alice.create_room(name="Town square", alias_localpart=f"town{tag}")
    bob.join(town)
    private = alice.create_room(
        name="Gardeners", preset="private_chat", invite=[bob.account.user_id, reader.account.user_id]
    )
    bob.join(private)
    # Rooms that must never be read (each gets a canary).
    dm = alice.create_room(preset="trusted_private_chat", is_direct=True, invite=[reader.account.user_id])
    bridged = alice.create_room(name="Discord bridge")
    alice.send_state(bridged, "m.bridge", "discord", {"protocol": {"id": "discord"}})
    halfshot = alice.create_room(name="IRC bridge")
    alice.send_state(halfshot, "uk.half-shot.bridge", "irc", {"protocol": {"id": "irc"}})
    encrypted = alice.create_room(name="Secret club", encrypted=True)
    excluded = alice.create_room(name="Users", alias_localpart="users")
    puppeted = alice.create_room(name="Looks normal")
    puppet.join(puppeted)
    not_allowed = alice.create_room(name="Elsewhere")
    reader.join(not_allowed)  # joined but not in ROOMS
    c.rooms.update(
        town=town,
        private=private,
        dm=dm,
        bridged=bridged,
        halfshot=halfshot,
        encrypted=encrypted,
        excluded=excluded,
        puppeted=puppeted,
        not_allowed=not_allowed,
    )

    for name in ("dm", "bridged", "halfshot", "encrypted", "excluded", "puppeted", "not_allowed"):
        alice.send_text(c.rooms[name], f"CANARY-{name}-{tag} this text must never be indexed")
    puppet.send_text(puppeted, f"CANARY-puppet-{tag} hello from discord")
    alice.send_encrypted(encrypted)

    ev = c.events
    ev["kettle"] = alice.send_text(town, "Has anyone seen the blue kettle from the community kitchen?")
    ev["kettle_reply"] = bob.send_text(town, "I think Marta borrowed it for the bake sale on Saturday")
    ev["edit_me"] = alice.send_text(town, "The meetup is on Monday at the library")
    ev["redact_me"] = bob.send_text(town, f"REDACTED-LATER-{tag} my phone number is 555-0199")
    ev["edited_then_undone"] = alice.send_text(town, "Bring snacks please")
    ev["undone_edit"] = alice.send_edit(town, ev["edited_then_undone"], f"EDIT-TAKEN-BACK-{tag} bring nothing")
    ev["secret"] = bob.send_text(
        town,
        f"my token is {SECRETS['matrix']} and aws {SECRETS['aws']}, the admin hash {SECRETS['hash']}\n"
        f"/msg NickServ IDENTIFY bob {SECRETS['irc']}\n"
        f"echo '{SECRETS['sudo']}' | sudo -S systemctl restart synapse\n"
        f"u: jenny p: {SECRETS['told']}\n"
        f"handing over the account: login toni75@posteo.de, pass {SECRETS['handover']}\n"
        f"define( 'DB_PASSWORD', '{SECRETS['define']}' );",
    )
    ev["secret_edit_target"] = bob.send_text(town, "config coming")
    bob.send_edit(town, ev["secret_edit_target"], f"password={SECRETS['password']} and {SECRETS['github']}")
    alice.send_reaction(town, ev["kettle"], "👍")
    alice.send_image(town)
    for i in range(30):
        (alice if i % 2 else bob).send_text(town, f"chatter {i}: the weather in the valley is mild today")
    ev["garden"] = bob.send_text(private, "The tomatoes need staking before the storm on Thursday")
    alice.send_text(private, "I will bring bamboo canes from the shed")

    c.env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": synapse.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(_token_file(tmp, reader.account.access_token)),
        "HUGINN_CHAT_ROOMS": json.dumps(
            [f"#town{tag}:{server}", private, dm, bridged, halfshot, encrypted, f"#users:{server}", puppeted]
        ),
        "HUGINN_CHAT_STATE_DIR": str(tmp / "state"),
        "HUGINN_CHAT_PAGE_SIZE": "25",
    }
    c.tag = tag  # type: ignore[attr-defined]
    return c


def _token_file(tmp: Path, token: str) -> Path:
    path = tmp / "matrix-token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def first_run(community):
    return community.refresh()


def test_first_run_reads_the_allowed_rooms(community, first_run):
    code, lines = first_run
    assert code == 0, lines
    bodies = " ".join(m["body"] for p in community.payloads() for m in p["messages"])
    assert "blue kettle" in bodies
    assert "tomatoes need staking" in bodies
    admitted = {line["room_id"] for line in _events(lines, "room_admitted")}
    assert admitted == {community.rooms["town"], community.rooms["private"]}
    joined = {line["room_id"] for line in _events(lines, "room_joined")}
    assert community.rooms["town"] in joined  # joined by alias, it was public and not yet joined
    assert community.cursor("town") is not None


def test_every_refusal_is_named_in_the_journal(community, first_run):
    _, lines = first_run
    reasons = {line["room_id"]: line["reason"] for line in _events(lines, "room_refused")}
    r = community.rooms
    assert reasons == {
        r["dm"]: "dm",
        r["bridged"]: "bridged",
        r["halfshot"]: "bridged",
        r["encrypted"]: "encrypted",
        r["excluded"]: "excluded",
        r["puppeted"]: "bridged",
        r["not_allowed"]: "not_allowed",
    }
    dm_line = next(line for line in _events(lines, "room_refused") if line["room_id"] == r["dm"])
    assert dm_line["evidence"]["signal"]


def test_no_canary_from_a_refused_room_and_no_discord_puppet_is_stored(community, first_run):
    dump = json.dumps(community.payloads())
    assert "CANARY-" not in dump
    assert "_discord_" not in dump
    assert not (
        {community.rooms[n] for n in ("dm", "bridged", "halfshot", "encrypted", "excluded", "puppeted", "not_allowed")}
        & {p["room_id"] for p in community.payloads()}
    )


def test_no_secret_is_stored_anywhere(community, first_run):
    dump = json.dumps(community.payloads())
    for secret in SECRETS.values():
        assert secret not in dump
    assert "[redacted:" in dump
    # Every file under the state directory, bytes grepped: not only what the index hands back.
    files = [path for path in (community.tmp / "state").rglob("*") if path.is_file()]
    stored = [path.read_bytes() for path in files]
    assert any(b"blue kettle" in blob for blob in stored), (
        "message text is not stored as bytes: the grep proves nothing"
    )
    for name, secret in SECRETS.items():
        assert not [str(path) for path, blob in zip(files, stored) if secret.encode() in blob], name


def test_the_journal_carries_no_token(community, first_run):
    _, lines = first_run
    text = json.dumps(lines)
    assert community.actors["reader"].account.access_token not in text
    summary = _events(lines, "run_finished")[0]
    assert summary["rooms_admitted"] == 2 and summary["rooms_failed"] == 0 and summary["windows_written"] > 0


def test_a_second_run_with_nothing_new_embeds_nothing(community, first_run):
    # A full run, not the one-request idle run (tests/integration/test_idle_refresh_synapse.py):
    # the cost of re-reading every room's scope facts, which a run pays every few minutes.
    code, lines = community.refresh(HUGINN_CHAT_SCOPE_RECHECK_S="0")
    assert code == 0
    summary = _events(lines, "run_finished")[0]
    assert summary["texts_embedded"] == 0 and summary["windows_written"] == 0
    # At most 2 homeserver requests per room (its state and its directory aliases):
    # Synapse's /sync names each room's newest event, the very one the cursor ends at, so no
    # /messages is asked.
    current = _events(lines, "room_current")
    assert current and all(line.get("unchanged") for line in current), current
    per_room = summary["homeserver_requests_per_room"]
    admitted = {line["room_id"] for line in current}
    assert max(per_room[room] for room in admitted) <= 2, per_room


def test_edits_show_and_redacted_text_is_gone_after_the_next_run(community, first_run):
    alice, bob = community.actors["alice"], community.actors["bob"]
    town, ev, tag = community.rooms["town"], community.events, community.tag
    assert f"REDACTED-LATER-{tag}" in json.dumps(community.payloads())
    assert f"EDIT-TAKEN-BACK-{tag}" in json.dumps(community.payloads())
    before = community.cursor("town")

    alice.send_edit(town, ev["edit_me"], "The meetup moved to Wednesday at the library")
    bob.send_edit(town, ev["kettle"], "bob may not edit alice's message")
    bob.redact(town, ev["redact_me"])
    alice.redact(town, ev["undone_edit"])  # an edit the index never stored as an event: rebuild
    code, lines = community.refresh()
    assert code == 0, lines

    dump = json.dumps(community.payloads())
    assert "moved to Wednesday" in dump
    assert "bob may not edit" not in dump
    assert f"REDACTED-LATER-{tag}" not in dump
    assert f"EDIT-TAKEN-BACK-{tag}" not in dump and "Bring snacks please" in dump
    rebuilt = _events(lines, "room_rebuilt")
    assert [line["room_id"] for line in rebuilt] == [town]
    assert rebuilt[0]["why"] == "unknown_redaction_target"
    after = community.cursor("town")
    assert after.end_token != before.end_token
    for secret in SECRETS.values():
        assert secret not in dump

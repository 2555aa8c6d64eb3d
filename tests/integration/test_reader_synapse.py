"""The whole read side end to end: a real Synapse, the real refresher, `huginn-chat serve` as a
subprocess, and the real CLI (`huginn-chat search|window --json`) as a Persona would run it.

One small hackspace community is seeded once. The lobby (allowed by alias) and the garden
(allowed by room id) must be searchable; a DM and a Discord-bridged room are allowed in ROOMS
but must be refused, and each holds a canary written to match the queries below. The reader
keeps running while messages are edited and redacted and the refresher runs again: it must
swap to the new generation by itself and show the edit, never the redacted text.

Every assertion is on what a user sees: the CLI's JSON output and exit code, and the reader's
journal (its stderr) an operator would read.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from bench.reader_process import ReaderProcess, run_cli
from daemon.cli.client import ReaderUnavailable, exchange
from tests.mcp_client import session_over, text_of
from tests.synapse_community import Community as SynapseCommunity, json_lines

pytestmark = pytest.mark.synapse

READER_START_TIMEOUT_S = 60.0
SWAP_TIMEOUT_S = 20.0

IDENTIFIER = "ERR_QUOTA_7731"
MEANING_QUERY = "appliance needs repair"
EDIT_QUERY = "soldering class half past eight"
EDITED_TEXT = "The soldering class moved to half past eight on Wednesday"
REDACTED_MARK = "pelican"

# The lobby, in timeline order. Named entries are the ones the tests cite. None of the messages
# uses a word of MEANING_QUERY: the kettle can only be found by meaning.
LOBBY = [
    ("open", "Morning all, who is opening the space today?"),
    (None, "I can open up at nine, I have the spare keys"),
    (None, "The 3D printer finished the bracket overnight, looks clean"),
    (None, "Did anyone order more PLA filament? We are down to one spool"),
    (None, "I ordered two spools of black, arriving Friday"),
    ("quota", f"error {IDENTIFIER} when uploading the slicer profiles to the shared drive"),
    # Not "quota": BM25 splits the identifier into err/quota/7731, and a window that matches one
    # part lexically and is first by meaning ties the exact window (see the report on edge.hybrid).
    (None, "That upload problem again? I will ask the admin to raise our storage limit"),
    (None, "Meeting notes from last night are on the wiki"),
    ("before_kettle", "Can someone bring milk tomorrow"),
    ("kettle", "the kettle in the kitchen is broken again"),
    ("after_kettle", "Ugh, no tea until someone sorts it out"),
    (None, "I will pick up a cheap one from the market on my way in"),
    (None, "Bike rack outside is full, park by the bins"),
    ("soldering", "The soldering class starts at seven on Tuesday"),
    (None, "Who left the iron on overnight? The tip is ruined"),
    (None, "The laser cutter lens was cleaned yesterday"),
    (None, "New members induction is on Sunday at two"),
    ("before_gate", "Raffle tickets for the open day are in the drawer"),
    ("gate", f"gate code for the back door is 8812 {REDACTED_MARK}, please keep it to yourselves"),
    ("after_gate", "Got it, thanks"),
    (None, "The router was rebooted, wifi is back"),
    (None, "Anyone up for pizza after the session?"),
    (None, "Pineapple on pizza is a crime"),
    (None, "The CNC dust extraction is running much better since the filter swap"),
    (None, "Remember to sign the safety sheet before using the lathe"),
    (None, "The lathe chuck key is in the red toolbox"),
    (None, "Photos from the open day are uploaded to the shared album"),
    (None, "Welcome to our two new members, Priya and Tom"),
    (None, "Thanks! Happy to be here"),
    (None, "The heating timer is set to come on at six"),
    (None, "Recycling goes out on Monday night"),
    (None, "Who has the projector remote?"),
    (None, "It is in the cupboard under the stairs"),
    (None, "Sawdust everywhere near the bandsaw, please sweep up"),
    ("last", "Sorry, that was me, cleaning now"),
]
GARDEN = [
    "The lawnmower will not start, the pull cord snapped",
    "The tomatoes need staking before the storm on Thursday",
    "I will bring bamboo canes from the shed",
]


@dataclass
class Community(SynapseCommunity):
    senders: dict[str, Any] = field(default_factory=dict)  # who sent each named event (who may edit it)
    lobby_ids: list[str] = field(default_factory=list)

    @property
    def lobby_alias(self) -> str:
        return self.alias("lobby")

    def canary(self, room: str) -> str:
        return f"CANARY{room}{self.tag}"

    def cli(self, *args: str) -> tuple[int, Any, str]:
        """Run the real CLI; returns (exit code, parsed JSON stdout or None, stderr)."""
        proc = run_cli(self.env, *args, timeout=30)
        parsed = json.loads(proc.stdout) if proc.stdout.strip() else None
        return proc.returncode, parsed, proc.stderr

    def window(self, event_id: str, before: int = 2, after: int = 2) -> tuple[int, Any, str]:
        return self.cli("window", event_id, "--before", str(before), "--after", str(after), "--json")


def _bodies(result: dict[str, Any]) -> list[str]:
    return [m["body"] for hit in result["hits"] for m in hit["messages"]]


def _hit_with(result: dict[str, Any], event_id: str) -> int | None:
    """The 0-based rank of the first hit whose messages include ``event_id``."""
    for rank, hit in enumerate(result["hits"]):
        if any(m["event_id"] == event_id for m in hit["messages"]):
            return rank
    return None


@pytest.fixture(scope="module")
def community(synapse, tmp_path_factory) -> Community:
    tmp = tmp_path_factory.mktemp("rdr")  # short: a Unix socket path is at most 107 bytes
    tag = uuid.uuid4().hex[:6]
    c = Community(tmp=tmp, tag=tag, server=synapse.server_name)
    alice, bob, reader = synapse.new_actor("alice"), synapse.new_actor("bob"), synapse.new_actor("reader")

    lobby = alice.create_room(name="Hackspace lobby", alias_localpart=f"lobby{tag}")
    bob.join(lobby)
    garden = bob.create_room(name="Community garden")
    alice.join(garden)
    dm = alice.create_room(preset="trusted_private_chat", is_direct=True, invite=[reader.account.user_id])
    bridged = alice.create_room(name="Discord bridge")
    alice.send_state(bridged, "m.bridge", "discord", {"protocol": {"id": "discord"}})
    c.rooms.update(lobby=lobby, garden=garden, dm=dm, bridged=bridged)

    # The canaries are written to be found: a refused room must be absent, not merely unlucky.
    for name in ("dm", "bridged"):
        alice.send_text(c.rooms[name], f"{c.canary(name)} the kettle in the kitchen is broken, {IDENTIFIER}")
        alice.send_text(c.rooms[name], f"{c.canary(name)} appliance needs repair, {EDITED_TEXT}")

    for i, (name, body) in enumerate(LOBBY):
        sender = bob if i % 2 else alice
        event_id = sender.send_text(lobby, body)
        c.lobby_ids.append(event_id)
        if name:
            c.events[name] = event_id
            c.senders[name] = sender
    for i, body in enumerate(GARDEN):
        (alice if i % 2 else bob).send_text(garden, body)

    audit_key = tmp / "audit-key"
    audit_key.write_text(uuid.uuid4().hex + "\n")
    audit_key.chmod(0o600)
    token = tmp / "matrix-token"
    token.write_text(reader.account.access_token + "\n")
    token.chmod(0o600)
    c.env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": synapse.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(token),
        "HUGINN_CHAT_ROOMS": json.dumps([c.lobby_alias, garden, dm, bridged]),
        "HUGINN_CHAT_STATE_DIR": str(tmp / "state"),
        "HUGINN_CHAT_SOCKET": str(tmp / "reader.sock"),
        "HUGINN_CHAT_READER_PRIVATE_DIR": str(tmp / "reader-private"),
        "HUGINN_CHAT_AUDIT_KEY_FILE": str(audit_key),
        # Small windows, so the lobby is a dozen windows and "in the top 3" means something.
        "HUGINN_CHAT_WINDOW_MAX_BYTES": "250",
    }
    lines = c.refresh()
    refused = {line["room_id"]: line["reason"] for line in lines if line.get("event") == "room_refused"}
    assert refused == {dm: "dm", bridged: "bridged"}, lines
    return c


@dataclass
class Reader:
    proc: subprocess.Popen
    journal_path: Path

    def journal(self) -> list[dict[str, Any]]:
        return json_lines(self.journal_path.read_text(encoding="utf-8"))


def _status(socket_path: str) -> dict[str, Any] | None:
    try:
        reply = exchange(socket_path, {"v": 1, "op": "status"}, timeout=5)
    except ReaderUnavailable:
        return None
    return reply["result"] if reply.get("ok") else None


@pytest.fixture(scope="module")
def reader(community) -> Iterator[Reader]:
    journal_path = community.tmp / "reader-journal.jsonl"
    with ReaderProcess(community.env, journal_path, ready_s=READER_START_TIMEOUT_S) as running:
        # The model is loaded before the reader says it is ready, so no first search pays for it.
        assert _status(community.env["HUGINN_CHAT_SOCKET"])["embedder"] == "loaded"
        yield Reader(running.process, journal_path)


def test_the_socket_is_group_only(community, reader):
    mode = Path(community.env["HUGINN_CHAT_SOCKET"]).stat().st_mode & 0o777
    assert mode == 0o660


def _same_answer(result: dict[str, Any]) -> dict[str, Any]:
    """A reply with its ``next`` cursor read as the position it names: two answers to the same
    request carry different tokens (each is sealed with the moment it was issued)."""
    token = result.get("next")
    if not isinstance(token, str):
        return result
    payload = token.split(".", 1)[0]
    position = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return {**result, "next": {key: value for key, value in position.items() if key != "t"}}


def test_an_agent_searches_through_huginn_chat_mcp(community, reader):
    """The MCP server (launched by the SDK's own stdio client) against the real reader after a real
    refresh: the same answers as the CLI, as structured content, and refusals naming the field."""
    with session_over(community.env["HUGINN_CHAT_SOCKET"]) as agent:
        assert {tool.name for tool in agent("list_tools").tools} == {"search", "window", "thread", "rooms"}
        listed = agent.tool("rooms", {}).structured_content["rooms"]
        assert {room["room_id"] for room in listed} == {community.rooms["lobby"], community.rooms["garden"]}
        found = agent.tool("search", {"texts": [MEANING_QUERY], "top_k": 8})
        assert found.is_error is False
        assert _same_answer(found.structured_content) == _same_answer(community.search(MEANING_QUERY, "--top-k", "8"))
        assert _hit_with(found.structured_content, community.events["kettle"]) is not None
        assert community.events["quota"] in text_of(agent.tool("search", {"texts": [IDENTIFIER], "top_k": 1}))
        kettle = community.events["kettle"]
        context = agent.tool("window", {"event_id": kettle, "before": 1, "after": 1}).structured_content
        at = community.lobby_ids.index(kettle)
        assert [m["event_id"] for m in context["messages"]] == community.lobby_ids[at - 1 : at + 2]
        refused = agent.tool("search", {"texts": [MEANING_QUERY], "rooms": ["lobby"]})
        assert refused.is_error is True and refused.structured_content["error"]["field"] == "rooms"
        status = json.loads(agent("read_resource", "huginn-chat://status").contents[0].text)
        assert status["index_ready"] is True and status["embedder"] == "loaded"


def test_search_by_meaning_finds_the_kettle_in_the_top_3(community, reader):
    result = community.search(MEANING_QUERY, "--top-k", "8")
    rank = _hit_with(result, community.events["kettle"])
    assert rank is not None and rank < 3, [h["messages"] for h in result["hits"][:3]]
    assert result["degraded"] is None
    kettle_hit = result["hits"][rank]
    assert kettle_hit["room_id"] == community.rooms["lobby"]
    assert kettle_hit["room_alias"] == community.lobby_alias
    assert "dense" in kettle_hit["legs"]


def test_search_by_exact_identifier_finds_it_first(community, reader):
    result = community.search(IDENTIFIER)
    assert result["hits"], "no hit for the identifier"
    first = result["hits"][0]
    assert _hit_with(result, community.events["quota"]) == 0
    assert any(IDENTIFIER in m["body"] for m in first["messages"])
    assert "lexical" in first["legs"]


def test_nothing_comes_back_from_a_refused_room(community, reader):
    refused = {community.rooms["dm"], community.rooms["bridged"]}
    for query in ([community.canary("dm"), community.canary("bridged")], [MEANING_QUERY, IDENTIFIER]):
        result = community.search(query[0], "--text", query[1], "--top-k", "50")
        assert result["hits"], "the allowed rooms should still answer"
        assert not refused & {hit["room_id"] for hit in result["hits"]}
        assert "CANARY" not in json.dumps(result)
    # Naming a refused room is a filter that matches nothing, never everything.
    for room_id in refused:
        assert community.search(MEANING_QUERY, "--room", room_id)["hits"] == []


def test_the_room_filter_keeps_only_that_room(community, reader):
    lobby, garden = community.rooms["lobby"], community.rooms["garden"]
    # A word of the garden beside the meaning of the kettle: unfiltered, both rooms answer (the
    # lawnmower alone is too far below the kettle in meaning to be shown beside it).
    asked = (MEANING_QUERY, "--text", "lawnmower")
    unfiltered = community.search(*asked, "--top-k", "50")
    assert {lobby, garden} <= {hit["room_id"] for hit in unfiltered["hits"]}

    by_alias = community.search(*asked, "--room", community.lobby_alias, "--top-k", "50")
    assert by_alias["hits"] and {hit["room_id"] for hit in by_alias["hits"]} == {lobby}
    assert _hit_with(by_alias, community.events["kettle"]) is not None

    by_id = community.search(*asked, "--room", garden, "--top-k", "50")
    assert by_id["hits"] and {hit["room_id"] for hit in by_id["hits"]} == {garden}
    assert any("lawnmower" in body for body in _bodies(by_id))

    assert community.search(MEANING_QUERY, "--room", f"#nosuchroom{community.tag}:{community.server}")["hits"] == []


def test_words_typed_bare_are_the_same_search_as_one_quoted_text(community, reader):
    quoted = community.search("the kettle in the kitchen is broken", "--top-k", "5")
    bare = community.search(*"the kettle in the kitchen is broken".split(), "--top-k", "5")
    assert _same_answer(bare) == _same_answer(quoted) and _hit_with(bare, community.events["kettle"]) == 0
    # An exclusion typed without quotes: a word of the query, not an unknown flag.
    code, unquoted, err = community.cli("search", "kettle", "-tea", "--top-k", "50", "--json")
    assert code == 0, err
    assert _same_answer(unquoted) == _same_answer(community.search("kettle -tea", "--top-k", "50"))
    assert unquoted["hits"] and not any("tea" in body.casefold().split() for body in _bodies(unquoted))


def test_rooms_lists_every_admitted_room_and_no_refused_one(community, reader):
    env = {k: v for k, v in community.env.items() if k != "HUGINN_CHAT_TOKEN_FILE"}  # a Persona has no token
    proc = run_cli(env, "rooms", "--json", timeout=30)
    assert proc.returncode == 0, proc.stderr
    rooms = {room["room_id"]: room for room in json.loads(proc.stdout)["rooms"]}
    assert set(rooms) == {community.rooms["lobby"], community.rooms["garden"]}
    lobby = rooms[community.rooms["lobby"]]
    assert lobby["name"] == "Hackspace lobby" and community.lobby_alias in lobby["aliases"]
    assert lobby["messages"] >= len(LOBBY) - 1 and lobby["windows"] >= 1
    assert lobby["first_ts"] <= lobby["last_ts"]
    assert rooms[community.rooms["garden"]]["messages"] == len(GARDEN)
    text = run_cli(env, "rooms", timeout=30).stdout
    assert "Hackspace lobby" in text and "Community garden" in text and "CANARY" not in text
    assert "Discord bridge" not in text


def test_a_refused_room_warns_exactly_as_a_room_that_does_not_exist(community, reader):
    invented = "!" + "x" * len(community.rooms["dm"][1:])  # the same length: nothing to tell them apart
    answers = {}
    for room in (community.rooms["dm"], invented, community.rooms["bridged"]):
        proc = run_cli(community.env, "search", MEANING_QUERY, "--room", room, "--json", timeout=30)
        assert proc.returncode == 0, proc.stderr
        answers[room] = proc.stdout.replace(room, "ROOM")
        result = json.loads(proc.stdout)
        assert result["hits"] == [] and [w["code"] for w in result["warnings"]] == ["unknown_room"]
        human = run_cli(community.env, "search", MEANING_QUERY, "--room", room, timeout=30)
        assert human.returncode == 0 and f"no searchable room is called {room}" in human.stderr
    assert len(set(answers.values())) == 1, answers
    # An alias no room answers to, and a sender nobody is, say so too.
    typo = community.search(MEANING_QUERY, "--room", f"#lobyy{community.tag}:{community.server}")
    assert [w["code"] for w in typo["warnings"]] == ["unknown_room"]
    nobody = community.search(MEANING_QUERY, "--sender", f"@nobody{community.tag}:{community.server}")
    assert [w["code"] for w in nobody["warnings"]] == ["unknown_sender"] and nobody["hits"] == []
    assert community.search(MEANING_QUERY, "--room", community.lobby_alias)["warnings"] == []


def test_a_sender_filter_marks_only_that_senders_messages(community, reader):
    bob = community.senders["after_kettle"].account.user_id
    result = community.search("kettle kitchen broken tea", "--sender", bob, "--top-k", "5")
    marked = [m for hit in result["hits"] for m in hit["messages"] if m["matched"]]
    assert marked and {m["sender"] for m in marked} == {bob}
    for hit in result["hits"]:
        assert 0 <= hit["relevance"] <= 1 and isinstance(hit["matched_words"], list)
    human = run_cli(community.env, "search", "kettle", "--sender", bob, timeout=30).stdout
    assert "relevance " in human and any(line.startswith("legend: >") for line in human.splitlines())


def test_window_returns_the_cited_message_with_its_neighbours(community, reader):
    kettle = community.events["kettle"]
    code, result, err = community.window(kettle)
    assert code == 0, err
    at = community.lobby_ids.index(kettle)
    assert [m["event_id"] for m in result["messages"]] == community.lobby_ids[at - 2 : at + 3]
    assert result["event_id"] == kettle and result["room_id"] == community.rooms["lobby"]
    bodies = [m["body"] for m in result["messages"]]
    assert bodies[2] == "the kettle in the kitchen is broken again"
    assert bodies[1] == "Can someone bring milk tomorrow" and bodies[3] == "Ugh, no tea until someone sorts it out"
    assert result["chunk_ids"] and all(isinstance(chunk_id, str) for chunk_id in result["chunk_ids"])

    # At the start of the room there is nothing before; the window is cut, not padded.
    code, result, err = community.window(community.events["open"])
    assert code == 0, err
    assert [m["event_id"] for m in result["messages"]] == community.lobby_ids[:3]

    code, _, err = community.window(f"$nosuchevent{community.tag}")
    assert code == 2 and "event_id" in err


def test_a_running_reader_shows_the_edit_and_not_the_redacted_text(community, reader):
    ev, senders = community.events, community.senders
    lobby = community.rooms["lobby"]
    assert any(REDACTED_MARK in body for body in _bodies(community.search("gate code back door")))
    generation_before = _status(community.env["HUGINN_CHAT_SOCKET"])["generation"]

    senders["soldering"].send_edit(lobby, ev["soldering"], EDITED_TEXT)
    senders["gate"].redact(lobby, ev["gate"])
    community.refresh()

    deadline = time.monotonic() + SWAP_TIMEOUT_S
    while True:
        result = community.search(EDIT_QUERY)
        if EDITED_TEXT in _bodies(result):
            break
        assert time.monotonic() < deadline, f"the reader never showed the edit: {_bodies(result)}"
        time.sleep(0.3)
    assert reader.proc.poll() is None  # the same process, swapped, not restarted
    assert _status(community.env["HUGINN_CHAT_SOCKET"])["generation"] != generation_before
    assert "The soldering class starts at seven on Tuesday" not in _bodies(result)

    for query in ("gate code back door", REDACTED_MARK, "8812"):
        result = community.search(query, "--top-k", "50")
        assert not any(REDACTED_MARK in body for body in _bodies(result)), query
        assert ev["gate"] not in {m["event_id"] for hit in result["hits"] for m in hit["messages"]}

    code, result, err = community.window(ev["soldering"])
    assert code == 0, err
    assert result["messages"][2]["body"] == EDITED_TEXT

    code, result, err = community.window(ev["before_gate"])
    assert code == 0, err
    ids = [m["event_id"] for m in result["messages"]]
    assert ev["gate"] not in ids and ev["after_gate"] in ids
    assert REDACTED_MARK not in json.dumps(result)

    code, _, err = community.window(ev["gate"])
    assert code == 2 and "event_id" in err

    swaps = [line for line in reader.journal() if line.get("event") == "index_swapped"]
    assert swaps and swaps[-1]["generation"] != generation_before


def test_the_journal_audits_every_request_without_the_query_text(community, reader):
    journal_text = reader.journal_path.read_text(encoding="utf-8")
    audits = [line for line in reader.journal() if line.get("event") == "request_answered"]
    searches = [line for line in audits if line["op"] == "search"]
    windows = [line for line in audits if line["op"] == "window"]
    assert len(searches) >= 10 and len(windows) >= 3
    for line in searches + windows:
        assert isinstance(line["query_digest"], str) and len(line["query_digest"]) == 64
        assert isinstance(line["duration_ms"], (int, float))
    assert any(line["window_ids"] for line in searches)
    assert any(line["outcome"] == "not_found" and line.get("field") == "event_id" for line in windows)
    assert any(line["filters"].get("rooms") == [community.rooms["garden"]] for line in searches)
    # Never the query text, nor anything the queries matched.
    for text in (
        MEANING_QUERY,
        IDENTIFIER,
        EDIT_QUERY,
        "gate code back door",
        REDACTED_MARK,
        community.canary("dm"),
        "kettle",
    ):
        assert text not in journal_text, text

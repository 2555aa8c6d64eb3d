"""Order, relative times, the operators typed in a text, and ranked paging, end to end: a real
Synapse, the real refresher, `huginn-chat serve` as a subprocess and the real CLI
(`huginn-chat search --json`), as a person or a Persona runs them.

Messages are sent through the history appservice with timestamps days and hours in the past, so
`--after 2d`, `--before yesterday` and newest-first listings have something to tell apart. Small
windows (100 bytes) keep most messages in a window of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

from bench.reader_process import ReaderProcess, run_cli
from daemon.cli.client import ReaderUnavailable, exchange
from daemon.reader.explain import holds_a_word, words_of
from tests.synapse_community import Community as SynapseCommunity

pytestmark = pytest.mark.synapse

HOUR = 3_600_000
DAY = 24 * HOUR

FILLER = [
    "Morning all, who is opening the space today and bringing the spare keys along?",
    "The printer finished the bracket overnight and it looks clean enough to ship",
    "Did anyone order more filament for the workshop? We are down to one spool",
    "Meeting notes from last night are on the wiki under the planning section",
    "Bike rack outside is full again, please park by the bins near the gate",
    "The heating timer is set to come on at six in the morning from Monday",
]
# (name, days ago, sender, body): the operator tests cite these.
KEYED = [
    ("prod", 5.0, "alice", "the deploy key rotation is done for the production cluster, all green"),
    ("reordered", 3.0, "bob", "rotation of the deploy key for the mirror is planned for tomorrow morning"),
    ("staging", 1.2, "bob", "deploy key rotation on the staging cluster went fine after one retry"),
    ("header", 0.5, "alice", "the proxy drops the x-forwarded-for header when run with --verbose set"),
    ("recent", 0.05, "alice", "reminder: the deploy key rotation checklist now lives in the ops wiki"),
]


@dataclass
class Community(SynapseCommunity):
    users: dict[str, str] = field(default_factory=dict)
    actors: dict[str, Any] = field(default_factory=dict)

    @property
    def ops_alias(self) -> str:
        return self.alias("ops")

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run_cli(self.env, *args, timeout=timeout)

    def cli(self, *args: str) -> tuple[int, Any, str]:
        proc = self.run("search", *args, "--json", timeout=30)
        return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None, proc.stderr

    def pages(self, *args: str) -> list[dict[str, Any]]:
        """Every hit of a listing or search, following ``next`` to the end."""
        hits: list[dict[str, Any]] = []
        cursor: list[str] = []
        for _ in range(200):
            result = self.search(*args, *cursor)
            hits += result["hits"]
            if not result["next"]:
                return hits
            cursor = ["--cursor", result["next"]]
        raise AssertionError("paging never ended")


def _first_ids(hits: list[dict[str, Any]]) -> list[str]:
    return [h["first_event_id"] for h in hits]


def _bodies(hit: dict[str, Any]) -> list[str]:
    return [m["body"] for m in hit["messages"]]


def _event_ids(hits: list[dict[str, Any]]) -> set[str]:
    return {m["event_id"] for h in hits for m in h["messages"]}


@pytest.fixture(scope="module")
def community(synapse, tmp_path_factory) -> Community:
    tmp = tmp_path_factory.mktemp("ord")  # short: a Unix socket path is at most 107 bytes
    tag = uuid.uuid4().hex[:6]
    c = Community(tmp=tmp, tag=tag, server=synapse.server_name)
    alice, bob, reader = synapse.new_actor("alice"), synapse.new_actor("bob"), synapse.new_actor("reader")
    ops = alice.create_room(name="Ops", alias_localpart=f"ops{tag}")
    bob.join(ops)
    dev = bob.create_room(name="Dev")
    alice.join(dev)
    c.rooms.update(ops=ops, dev=dev)
    c.users.update(alice=alice.user_id, bob=bob.user_id)
    senders = {"alice": synapse.history_actor(alice.account), "bob": synapse.history_actor(bob.account)}

    now = int(time.time() * 1000)
    # Oldest first in each room, so timeline order and timestamps agree; a filler before each
    # keyed message, and one more hour apart, so the keyed ones sit in windows of their own.
    step = 0
    for name, days_ago, who, body in KEYED:
        ts = now - int(days_ago * DAY)
        for filler in FILLER[:2]:
            step += 1
            senders["alice" if step % 2 else "bob"].send_text(dev, f"{filler} ({step})", ts=ts - HOUR + step)
        senders["bob"].send_text(ops, f"{FILLER[step % len(FILLER)]} [{step}]", ts=ts - HOUR)
        c.events[name] = senders[who].send_text(ops, body, ts=ts)
    # Equal timestamps across both rooms: the listing order must still be total.
    for i in range(4):
        senders["alice"].send_text(ops if i % 2 else dev, f"{FILLER[i]} tied {i}", ts=now - 2 * HOUR)

    token = tmp / "matrix-token"
    token.write_text(reader.account.access_token + "\n")
    token.chmod(0o600)
    c.env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": synapse.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(token),
        "HUGINN_CHAT_ROOMS": json.dumps([c.ops_alias, dev]),
        "HUGINN_CHAT_STATE_DIR": str(tmp / "state"),
        "HUGINN_CHAT_SOCKET": str(tmp / "reader.sock"),
        "HUGINN_CHAT_READER_PRIVATE_DIR": str(tmp / "reader-private"),
        "HUGINN_CHAT_WINDOW_MAX_BYTES": "100",
    }
    c.refresh()
    c.actors.update(senders)
    return c


def _status(socket_path: str) -> dict[str, Any] | None:
    try:
        reply = exchange(socket_path, {"v": 1, "op": "status"}, timeout=5)
    except ReaderUnavailable:
        return None
    return reply["result"] if reply.get("ok") else None


@pytest.fixture(scope="module")
def reader(community) -> Iterator[ReaderProcess]:
    with ReaderProcess(community.env, community.tmp / "reader-journal.jsonl", ready_s=60, embedder_loaded=True) as proc:
        yield proc


def test_newest_first_listing_paged_to_the_end_goes_by_each_windows_newest_message(community, reader):
    oldest = community.pages("--top-k", "4")
    newest = community.pages("--top-k", "3", "--sort", "newest")
    keys = [(h["messages"][0]["ts"], h["chunk_id"]) for h in oldest]
    assert len(keys) == len(set(keys)) >= 20 and keys == sorted(keys)
    # The same windows, each once; newest first by each window's newest message.
    assert sorted(h["chunk_id"] for h in newest) == sorted(h["chunk_id"] for h in oldest)
    by_newest = [(max(m["ts"] for m in h["messages"]), h["chunk_id"]) for h in newest]
    assert by_newest == sorted(set(by_newest), reverse=True)
    # One room, newest first: its latest message opens the first page.
    first = community.search("--room", community.ops_alias, "--sort", "newest", "--top-k", "1")
    assert first["hits"][0]["room_id"] == community.rooms["ops"] and first["next"]


def test_relative_times_are_resolved_by_the_reader(community, reader):
    everything = _event_ids(community.pages("--top-k", "50"))
    recent = _event_ids(community.pages("--top-k", "50", "--after", "2d"))
    older = _event_ids(community.pages("--top-k", "50", "--before", "2d"))
    assert {community.events[n] for n in ("staging", "header", "recent")} <= recent
    assert not {community.events[n] for n in ("prod", "reordered")} & recent
    assert {community.events[n] for n in ("prod", "reordered")} <= older
    assert recent | older == everything
    assert community.events["recent"] in _event_ids(community.pages("--top-k", "50", "--after", "90m"))
    in_berlin = community.search("deploy key rotation", "--after", "last week Europe/Berlin", "--top-k", "10")
    assert in_berlin["hits"]
    assert community.search("--before", "1w", "--top-k", "5")["hits"] == []
    code, out, err = community.cli("x", "--after", "last tuesday")
    assert code == 2 and out is None and err.startswith("huginn-chat search: after (--after): ")
    assert err.count("\n") == 1


def test_phrase_exclusion_sender_and_room_typed_in_the_text(community, reader):
    e = community.events
    phrase = _event_ids(community.search('"deploy key rotation"', "--top-k", "20")["hits"])
    assert {e["prod"], e["staging"], e["recent"]} <= phrase and e["reordered"] not in phrase
    excluded = _event_ids(community.search('"deploy key rotation" -staging', "--top-k", "20")["hits"])
    assert {e["prod"], e["recent"]} <= excluded and e["staging"] not in excluded
    bob = community.search(f"deploy key rotation from:{community.users['bob']}", "--top-k", "20")["hits"]
    assert bob and all(community.users["bob"] in {m["sender"] for m in h["messages"]} for h in bob)
    in_dev = community.search(f"deploy key in:{community.rooms['dev']}", "--top-k", "20")["hits"]
    assert in_dev and {h["room_id"] for h in in_dev} == {community.rooms["dev"]}
    # The same as the flag: in:#alias typed in the text and --room give the same hits.
    typed = community.search(f"deploy key rotation in:{community.ops_alias}", "--top-k", "5")
    flagged = community.search("deploy key rotation", "--room", community.ops_alias, "--top-k", "5")
    assert _first_ids(typed["hits"]) == _first_ids(flagged["hits"])
    # Identifiers and flags are words, not exclusions: the lexical leg finds them.
    header = community.search("x-forwarded-for --verbose", "--top-k", "3")["hits"]
    assert header and e["header"] in _event_ids(header[:1])
    code, _, err = community.cli("deploy from:bob")
    assert code == 2 and err.startswith("huginn-chat search: texts (TEXT): ") and err.count("\n") == 1


def test_ranked_results_page_exactly_once_and_a_new_generation_makes_the_cursor_stale(community, reader):
    query = ["deploy key rotation checklist"]
    unpaged = community.search(*query, "--top-k", "4")
    paged = community.pages(*query, "--top-k", "4")
    ids = [h["chunk_id"] for h in paged]
    everything = community.pages("--top-k", "50")
    # Every window holding a word of the text is reached; the floor leaves out only windows that
    # hold none and are far below the best in meaning (the filler chatter).
    holders = {h["chunk_id"] for h in everything if holds_a_word(_bodies(h), words_of(query[0]))}
    assert ids[:4] == [h["chunk_id"] for h in unpaged["hits"]]  # page 1 is the unpaged search
    assert len(ids) == len(set(ids)) and holders <= set(ids) <= {h["chunk_id"] for h in everything}
    newest = community.pages(*query, "--top-k", "5", "--sort", "newest")
    assert len(newest) == len({h["chunk_id"] for h in newest}) and holders <= {h["chunk_id"] for h in newest}
    stamps = [max(m["ts"] for m in h["messages"]) for h in newest]
    assert stamps == sorted(stamps, reverse=True)

    first = community.search(*query, "--top-k", "3")
    generation = _status(community.env["HUGINN_CHAT_SOCKET"])["generation"]
    community.actors["alice"].send_text(community.rooms["ops"], "deploy key rotation is scheduled again")
    community.refresh()
    deadline = time.monotonic() + 30
    while _status(community.env["HUGINN_CHAT_SOCKET"])["generation"] == generation:
        assert time.monotonic() < deadline, "the reader did not swap to the new generation"
        time.sleep(0.2)
    code, out, err = community.cli(*query, "--top-k", "3", "--cursor", first["next"])
    assert code == 2 and out is None and err.count("\n") == 1
    assert err.startswith("huginn-chat search: cursor (--cursor): the index changed")

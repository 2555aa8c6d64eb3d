"""Replies and threads on a real Synapse, through the real refresher, `huginn-chat serve` and the
real CLI, as a Persona runs them.

One room holds a thread whose replies are interleaved with the main timeline, a reply (with the
legacy quoted fallback) to a message that sits in an old window, and, inside the thread, an edit,
a redaction and a reply that arrives in a second refresh. Everything asserted is what the CLI
prints (its JSON, and its human lines for the thread listing).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from bench.reader_process import ReaderProcess, run_cli

pytestmark = pytest.mark.synapse

READER_START_TIMEOUT_S = 60.0

OLD_TEXT = "the backup server disk is nearly full again"
ROOT_TEXT = "should we move the CI runners to the new cluster?"
REPLY_TEXT = "I will clean out the old snapshots tonight"
EDITED_TEXT = "the new cluster has twice the memory, so yes"
REDACTED_MARK = "marmalade"


@dataclass
class Room:
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    main: list[str] = field(default_factory=list)  # main-timeline event ids, in order
    senders: dict[str, str] = field(default_factory=dict)

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run_cli(self.env, *args, timeout=timeout)

    def refresh(self) -> None:
        proc = self.run("refresh")
        assert proc.returncode == 0, proc.stderr[-3000:]

    def json(self, *args: str) -> dict[str, Any]:
        proc = self.run(*args, "--json", timeout=30)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


def thread_of(root: str, falls_back_to: str) -> dict[str, Any]:
    """A thread reply as Element sends it: the m.in_reply_to is the fallback for old clients."""
    return {
        "rel_type": "m.thread",
        "event_id": root,
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": falls_back_to},
    }


@pytest.fixture(scope="module")
def room(synapse, tmp_path_factory) -> Room:
    tmp = tmp_path_factory.mktemp("thr")  # short: a Unix socket path is at most 107 bytes
    tag = uuid.uuid4().hex[:6]
    r = Room(tmp=tmp)
    alice, bob, reader = synapse.new_actor("alice"), synapse.new_actor("bob"), synapse.new_actor("reader")
    room_id = alice.create_room(name="Ops", alias_localpart=f"ops{tag}")
    bob.join(room_id)
    r.ids["room"] = room_id

    def say(actor: Any, name: str | None, body: str, relates_to: dict[str, Any] | None = None) -> str:
        content: dict[str, Any] = {"msgtype": "m.text", "body": body}
        if relates_to is not None:
            content["m.relates_to"] = relates_to
        event_id = actor.send_event(room_id, "m.room.message", content)
        if name:
            r.ids[name] = event_id
            r.senders[name] = actor.account.user_id
        return event_id

    r.main.append(say(alice, "old", OLD_TEXT))
    for i in range(8):  # enough to push "old" several windows back
        r.main.append(say(bob if i % 2 else alice, None, f"status update {i}: the nightly build passed on all targets"))
    r.main.append(say(alice, "root", ROOT_TEXT))
    root = r.ids["root"]
    say(bob, "t1", "the cluster is not ready until the network change lands", thread_of(root, root))
    r.main.append(say(alice, None, "lunch order goes in at noon, add yours to the list"))
    say(alice, "t2", "the cluster has more memory", thread_of(root, r.ids["t1"]))
    r.main.append(say(bob, None, "the coffee machine descaling is done"))
    say(bob, "t3", f"my {REDACTED_MARK} sandwich note, posted in the wrong place", thread_of(root, r.ids["t2"]))
    r.main.append(
        bob.send_reply(room_id, r.ids["old"], REPLY_TEXT, quoted_sender=alice.account.user_id, quoted_body=OLD_TEXT)
    )
    r.ids["reply"] = r.main[-1]

    token = tmp / "matrix-token"
    token.write_text(reader.account.access_token + "\n")
    token.chmod(0o600)
    r.env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": synapse.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(token),
        "HUGINN_CHAT_ROOMS": json.dumps([room_id]),
        "HUGINN_CHAT_STATE_DIR": str(tmp / "state"),
        "HUGINN_CHAT_SOCKET": str(tmp / "reader.sock"),
        "HUGINN_CHAT_READER_PRIVATE_DIR": str(tmp / "reader-private"),
        "HUGINN_CHAT_WINDOW_MAX_BYTES": "200",
    }
    r.refresh()
    # A second run: an edit and a redaction inside the thread, and a reply that continues it.
    alice.send_edit(room_id, r.ids["t2"], EDITED_TEXT)
    bob.redact(room_id, r.ids["t3"])
    say(bob, "t4", "then I will book the migration for friday", thread_of(root, r.ids["t2"]))
    r.main.append(say(alice, None, "reminder: the office is closed on monday"))
    r.refresh()
    return r


@pytest.fixture(scope="module")
def reader(room) -> Iterator[ReaderProcess]:
    with ReaderProcess(room.env, room.tmp / "reader-journal.jsonl", ready_s=READER_START_TIMEOUT_S) as proc:
        yield proc


def listing(room: Room) -> list[dict[str, Any]]:
    """Every window of the room, through the CLI's listing pages."""
    hits: list[dict[str, Any]] = []
    cursor: list[str] = []
    while True:
        page = room.json("search", "--room", room.ids["room"], "--top-k", "3", *cursor)
        hits += page["hits"]
        if not page["next"]:
            return hits
        cursor = ["--cursor", page["next"]]


def test_thread_replies_have_their_own_windows_and_the_main_timeline_none(room, reader):
    thread_ids = {room.ids[name] for name in ("t1", "t2", "t4")}
    windows = listing(room)
    main_ids = [m["event_id"] for hit in windows if hit["thread_root"] is None for m in hit["messages"]]
    assert main_ids == room.main  # every main message, in order, and no thread reply among them
    in_thread = [hit for hit in windows if hit["thread_root"] is not None]
    assert in_thread and all(hit["thread_root"]["event_id"] == room.ids["root"] for hit in in_thread)
    assert all(hit["thread_root"]["body"] == ROOT_TEXT for hit in in_thread)
    assert {m["event_id"] for hit in in_thread for m in hit["messages"]} == thread_ids
    assert REDACTED_MARK not in json.dumps(windows)


def test_thread_lists_in_order_with_the_edit_and_without_the_redaction_paged_exactly_once(room, reader):
    seen: list[dict[str, Any]] = []
    cursor: list[str] = []
    while True:
        page = room.json("search", "--thread", room.ids["t4"], "--top-k", "1", *cursor)
        assert page["root_id"] == room.ids["root"] and page["root"]["body"] == ROOT_TEXT
        seen += page["messages"]
        if not page["next"]:
            break
        cursor = ["--cursor", page["next"]]
    assert [m["event_id"] for m in seen] == [room.ids[name] for name in ("t1", "t2", "t4")]
    assert seen[1]["body"] == EDITED_TEXT
    # The thread fallback's m.in_reply_to is not a reply: nothing to show.
    assert all(m["reply_to"] is None for m in seen)

    human = room.run("search", "--thread", room.ids["root"], timeout=30)
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert room.ids["root"] in lines[0] and "(root)" in lines[1] and ROOT_TEXT in lines[1]
    # Under each message's line: its event id, then its permalink.
    ids = [line.split()[0] for line in lines[2:] if line.startswith("      $")]
    assert ids == [room.ids[n] for n in ("root", "t1", "t2", "t4")]


def test_a_reply_shows_the_message_it_answers_from_an_older_window(room, reader):
    result = room.json("search", "clean out the old snapshots", "--top-k", "3")
    message = next(m for hit in result["hits"] for m in hit["messages"] if m["event_id"] == room.ids["reply"])
    assert message["body"] == REPLY_TEXT  # the quoted fallback is stripped
    assert message["reply_to"]["event_id"] == room.ids["old"]
    assert message["reply_to"]["sender"] == room.senders["old"] and message["reply_to"]["body"] == OLD_TEXT
    hit = next(hit for hit in result["hits"] if message in hit["messages"])
    assert room.ids["old"] not in [m["event_id"] for m in hit["messages"]]  # it sits in another window

    human = room.run("search", "clean out the old snapshots", "--top-k", "1", timeout=30)
    assert f"in reply to {room.senders['old']} (" in human.stdout
    assert f"{OLD_TEXT}  [{room.ids['old']}]" in human.stdout


def test_a_window_around_a_thread_reply_stays_in_its_thread(room, reader):
    result = room.json("window", room.ids["t2"], "--before", "5", "--after", "5")
    assert [m["event_id"] for m in result["messages"]] == [room.ids[n] for n in ("t1", "t2", "t4")]
    assert result["thread_root"]["event_id"] == room.ids["root"]

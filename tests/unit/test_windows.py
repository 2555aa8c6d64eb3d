"""Windows as the index stores them: ids, the embedded and cited text, payload round trip."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings, strategies as st

from chunker import chat_version
from chunker.fold import Bounds
from chunker.windows import (
    CHUNK_VERSION,
    WINDOW_NAMESPACE,
    StoredMessage,
    Window,
    embed_text,
    render_text,
    window_bytes,
    window_point_id,
)
from daemon.index.schema import window_from_payload, window_payload

ROOM = "!room:example.org"


def window(*messages: StoredMessage, redacted: list[str] | None = None, closed: bool = False) -> Window:
    anchor = messages[0].event_id if messages else "$anchor"
    return Window(ROOM, anchor, list(messages), list(redacted or []), closed)


ALICE = StoredMessage("$a", "@alice:example.org", 1_700_000_000_000, "hello there")
BOB = StoredMessage("$b", "@bob:matrix.example.net", 1_700_000_061_500, "hi é")


def test_point_id_is_uuid5_of_room_and_anchor_and_stable():
    expected = str(uuid.uuid5(WINDOW_NAMESPACE, ROOM + "\x00" + "$a"))
    assert window_point_id(ROOM, "$a") == expected
    assert uuid.UUID(expected).version == 5
    assert window(ALICE, BOB).point_id == expected
    # The anchor names the window even after its message is gone.
    assert Window(ROOM, "$a", [BOB], ["$a"], False).point_id == expected
    assert window_point_id("!other:example.org", "$a") != expected
    assert window_point_id(ROOM, "$b") != expected
    # No ambiguity from concatenation.
    assert window_point_id("!r", "x$a") != window_point_id("!rx", "$a")


def test_embed_text_uses_localparts_one_line_per_message():
    assert embed_text(window(ALICE, BOB)) == "alice: hello there\nbob: hi é"
    assert embed_text(window()) == ""


def test_window_bytes_counts_utf8_bytes_of_embed_text():
    w = window(ALICE, BOB)
    assert window_bytes(w) == len("alice: hello there\nbob: hi é".encode()) == 29
    assert window_bytes(w) != len(embed_text(w))  # the é is two bytes


def test_render_text_cites_full_sender_and_utc_time():
    assert render_text(window(ALICE, BOB)) == (
        "[2023-11-14 22:13:20Z] @alice:example.org: hello there\n[2023-11-14 22:14:21Z] @bob:matrix.example.net: hi é"
    )


def test_properties_are_none_when_empty():
    empty = window(redacted=["$x"])
    assert (empty.first_event_id, empty.last_event_id, empty.ts_start, empty.ts_end) == (None, None, None, None)


def test_payload_has_exactly_the_documented_fields():
    w = window(ALICE, BOB, StoredMessage("$c", "@alice:example.org", 1_700_000_070_000, "again"), redacted=["$z"])
    payload = window_payload(w, room_alias="#lobby:example.org", chat_version="v")
    assert set(payload) == {
        "kind", "corpus", "room_id", "room_alias", "chunk_id", "anchor_id", "first_event_id",
        "last_event_id", "ts_start", "ts_end", "messages", "event_ids", "senders", "redacted_ids",
        "closed", "n_messages", "context_of", "text", "chat_version", "thread_root", "timeline",
    }  # fmt: skip
    assert payload["kind"] == "window" and payload["corpus"] == "chat"
    assert payload["chunk_id"] == w.point_id
    assert payload["anchor_id"] == "$a"
    assert (payload["first_event_id"], payload["last_event_id"]) == ("$a", "$c")
    assert (payload["ts_start"], payload["ts_end"]) == (1_700_000_000_000, 1_700_000_070_000)
    assert payload["event_ids"] == ["$a", "$b", "$c"]
    assert payload["senders"] == ["@alice:example.org", "@bob:matrix.example.net"]
    assert payload["redacted_ids"] == ["$z"]
    assert payload["n_messages"] == 3
    assert payload["text"] == render_text(w)
    assert payload["room_alias"] == "#lobby:example.org" and payload["chat_version"] == "v"
    assert payload["messages"][1] == {
        "event_id": "$b",
        "sender": "@bob:matrix.example.net",
        "ts": 1_700_000_061_500,
        "body": "hi é",
        "reply_to": None,
    }
    assert (payload["thread_root"], payload["timeline"]) == (None, "main")


def test_thread_window_and_reply_target_round_trip_through_the_payload():
    reply = StoredMessage("$r", "@bob:x", 1_700_000_000_500, "yes", reply_to="$a")
    w = Window(ROOM, "$r", [reply], thread_root="$root")
    payload = window_payload(w, room_alias=None, chat_version="v")
    assert (payload["thread_root"], payload["timeline"]) == ("$root", "$root")
    assert payload["messages"][0]["reply_to"] == "$a"
    assert window_from_payload(payload) == w
    assert "yes" in embed_text(w) and "$a" not in embed_text(w)  # an id is not text to embed


@pytest.mark.parametrize(
    "where, junk",
    [("thread_root", 7), ("thread_root", ""), ("thread_root", ["$x"]), ("reply_to", {"$x": 1}), ("reply_to", "")],
)
def test_a_bad_thread_root_or_reply_to_in_a_payload_is_refused_by_name(where, junk):
    payload = window_payload(window(ALICE), room_alias=None, chat_version="v")
    if where == "thread_root":
        payload["thread_root"] = junk
    else:
        payload["messages"][0]["reply_to"] = junk
    with pytest.raises(ValueError, match=where):
        window_from_payload(payload)


def test_time_bounds_survive_clock_skew():
    late_first = window(StoredMessage("$1", "@a:x", 2_000, "a"), StoredMessage("$2", "@a:x", 1_000, "b"))
    assert (late_first.ts_start, late_first.ts_end) == (1_000, 2_000)


def test_empty_window_payload_matches_nothing_by_count():
    payload = window_payload(window(redacted=["$gone"]), room_alias=None, chat_version="v")
    assert payload["n_messages"] == 0 and payload["text"] == "" and payload["event_ids"] == []
    assert payload["redacted_ids"] == ["$gone"]


ids = st.text(alphabet="abcdef0123456789$:!._", min_size=1, max_size=12)
messages = st.builds(
    StoredMessage,
    event_id=ids,
    sender=st.text(min_size=1, max_size=20),
    ts=st.integers(min_value=0, max_value=4_102_444_800_000),
    body=st.text(max_size=60),
    reply_to=st.one_of(st.none(), ids),
)
windows = st.builds(
    Window,
    room_id=ids,
    anchor_id=ids,
    messages=st.lists(messages, max_size=5),
    redacted_ids=st.lists(ids, max_size=3),
    closed=st.booleans(),
    thread_root=st.one_of(st.none(), ids),
)


@settings(max_examples=200, deadline=None)
@given(windows, st.one_of(st.none(), ids))
def test_payload_round_trip(w, alias):
    assert window_from_payload(window_payload(w, room_alias=alias, chat_version="chat1")) == w


def good_payload() -> dict:
    return window_payload(window(ALICE, BOB), room_alias=None, chat_version="v")


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda p: p.update(kind="meta"), "kind"),
        (lambda p: p.pop("room_id"), "room_id"),
        (lambda p: p.update(anchor_id=7), "anchor_id"),
        (lambda p: p.update(messages="x"), "messages"),
        (lambda p: p["messages"][1].update(ts="now"), "messages[1].ts"),
        (lambda p: p["messages"][0].update(ts=True), "messages[0].ts"),
        (lambda p: p["messages"][0].pop("body"), "messages[0].body"),
        (lambda p: p["messages"][1].pop("sender"), "messages[1].sender"),
        (lambda p: p.update(redacted_ids=[1]), "redacted_ids[0]"),
        (lambda p: p.update(closed="no"), "closed"),
        (lambda p: p.update(chunk_id="not-it"), "chunk_id"),
    ],
)
def test_malformed_payload_names_the_field(mutate, field):
    payload = good_payload()
    mutate(payload)
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        window_from_payload(payload)


def test_chat_version_names_every_input():
    from chunker.scrub import SCRUB_VERSION

    assert chat_version(Bounds(max_bytes=512, max_gap_ms=60_000)) == (
        f"chat1/scrub{SCRUB_VERSION}/chunk{CHUNK_VERSION}/b512/g60000"
    )
    assert chat_version(Bounds(512, 60_000)) != chat_version(Bounds(513, 60_000))


# -- Window.copy: the fold's cheap deep copy ------------------------------------------------


def test_window_copy_knows_every_field_that_holds_a_mutable_value():
    """``Window.copy`` copies the two lists and shares the rest: every other field of a window,
    and every field of a stored message, must hold an immutable value. A new field fails here
    until ``copy`` is checked for it."""
    import dataclasses

    assert [f.name for f in dataclasses.fields(Window)] == [
        "room_id",
        "anchor_id",
        "messages",
        "redacted_ids",
        "closed",
        "thread_root",
    ]
    assert [f.name for f in dataclasses.fields(StoredMessage)] == [
        "event_id",
        "sender",
        "ts",
        "body",
        "reply_to",
        "display_name",
    ]


@settings(max_examples=50, deadline=None)
@given(
    bodies=st.lists(st.text(max_size=20), min_size=1, max_size=5),
    redacted=st.lists(st.text(min_size=1, max_size=8), max_size=3),
    closed=st.booleans(),
)
def test_window_copy_equals_a_deepcopy_and_shares_nothing_mutable(bodies, redacted, closed):
    import copy

    def fresh() -> Window:
        return Window(
            "!r:hs",
            "$a",
            [
                StoredMessage(f"$e{i}", "@u:hs", i, body, reply_to=None, display_name="U")
                for i, body in enumerate(bodies)
            ],
            list(redacted),
            closed,
            None,
        )

    window = fresh()
    twin = window.copy()
    assert twin == copy.deepcopy(window) and twin.point_id == window.point_id
    twin.messages[0].body = "changed"
    twin.messages.append(StoredMessage("$new", "@u:hs", 99, "new"))
    twin.redacted_ids.append("$gone")
    twin.closed = not closed
    assert window == fresh()

"""Hostile raw event shapes (hypothesis), beside tests/unit/test_hostile_events.py: huge bodies,
deep nesting, control, zero-width and RTL characters around secrets, and wrong-typed fields.
Hostile raw events through the real parse (chunker/events.py), fold (chunker/fold.py)
and refresher (daemon/refresher/run.py, over tests/fakes.py): missing and wrong-typed fields,
huge bodies, control and zero-width characters, RTL text, deep nesting, unknown types and
encrypted shapes. Never a crash (no room fails), never ciphertext or a secret stored, and every
event not stored is counted in the run summary's ``events_skipped`` by why.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from chunker.events import Event, parse_event
from daemon.index import schema
from daemon.refresher.run import Refresher, RefreshOptions
from scope import Policy
from tests.fakes import FakeEmbedder, FakeMatrix, ListLog, MemoryIndex

ALICE = "@alice:hs.test"
CIPHER = "CIPHERTEXT-CANARY-AwgAEpAB"
SECRETS = ("ghp_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8", "AKIA" + "QWERTYUIOPASDFGH")

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)

HOSTILE_CHARS = [
    "\u200b",
    "\u200c",
    "\u200d",
    "\ufeff",
    "\u202e",
    "\u202d",
    "\u2066",
    "\u2069",
    "\x00",
    "\x07",
    "\x1b[31m",
    "\r",
    "\u0085",
    "\u2028",
    "\ud800",
    "שלום",
    "مرحبا",
    "\u0301",
    "🏳️‍🌈",
    "\t",
]
hostile_text = st.lists(st.one_of(st.sampled_from(HOSTILE_CHARS), st.text(max_size=12)), max_size=30).map("".join)
wrong = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(""),
)


def _nested(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"leaf": CIPHER}
    for _ in range(depth):
        node = {"n": node, "l": [node]}
    return node


@st.composite
def hostile_event(draw: Any) -> tuple[str, dict[str, Any]]:
    """(what it is, the raw event). Event ids and timestamps are filled in by the fake server."""
    kind = draw(
        st.sampled_from(
            [
                "message",
                "message",
                "huge",
                "secret",
                "encrypted",
                "unknown",
                "missing",
                "wrong_type",
                "deep",
                "junk_content",
                "bad_relation",
            ]
        )
    )
    if kind in ("message", "huge", "secret", "deep"):
        body = draw(hostile_text)
        if kind == "huge":
            body = body + draw(st.sampled_from(["x", "\u200b", "ש", "a "])) * draw(st.integers(20_000, 120_000))
        if kind == "secret":
            body = f"{body} {draw(st.sampled_from(SECRETS))} {draw(hostile_text)}"
        content: dict[str, Any] = {"msgtype": "m.text", "body": body}
        if kind == "deep":
            content["x"] = _nested(draw(st.integers(50, 400)))
        return kind, {"type": "m.room.message", "sender": ALICE, "content": content}
    if kind == "encrypted":
        return kind, {
            "type": "m.room.encrypted",
            "sender": ALICE,
            "content": {
                "algorithm": draw(st.sampled_from(["m.megolm.v1.aes-sha2", "m.olm.v1.curve25519-aes-sha2", 7])),
                "ciphertext": draw(st.sampled_from([CIPHER, {"k": {"type": 0, "body": CIPHER}}])),
                "sender_key": "abc",
                "session_id": "s",
                "device_id": "D",
                **draw(
                    st.sampled_from(
                        [{}, {"body": CIPHER}, {"m.relates_to": {"rel_type": "m.replace", "event_id": "$x"}}]
                    )
                ),
            },
        }
    if kind == "unknown":
        return kind, {
            "type": "x.hostile." + draw(st.text(min_size=1, max_size=20)),
            "sender": ALICE,
            "content": draw(st.dictionaries(st.text(max_size=8), json_value, max_size=4)),
        }
    base = {"type": "m.room.message", "sender": ALICE, "content": {"msgtype": "m.text", "body": CIPHER}}
    if kind == "missing":
        base.pop(draw(st.sampled_from(["type", "sender", "content", "event_id", "origin_server_ts"])), None)
        base["_missing"] = True
        return kind, base
    if kind == "wrong_type":
        field = draw(st.sampled_from(["type", "sender", "content", "event_id", "origin_server_ts"]))
        base[field] = draw(
            wrong.filter(
                lambda v: (
                    not (
                        (field == "content" and isinstance(v, dict)) or (field == "origin_server_ts" and type(v) is int)
                    )
                )
            )
        )
        return kind, base
    if kind == "junk_content":  # a message whose msgtype or body is not text
        content = {
            "msgtype": draw(st.one_of(wrong, st.just("m.text"))),
            "body": draw(st.one_of(wrong, st.just(CIPHER))),
        }
        if content["msgtype"] == "m.text" and content["body"] == CIPHER:
            content["body"] = 5
        return kind, {"type": "m.room.message", "sender": ALICE, "content": content}
    # bad_relation: an edit whose relation or new content is the wrong shape
    return kind, {
        "type": "m.room.message",
        "sender": ALICE,
        "content": {
            "msgtype": "m.text",
            "body": "* an edit",
            "m.relates_to": draw(st.one_of(wrong, st.just({"rel_type": "m.replace", "event_id": draw(wrong)}))),
            "m.new_content": draw(st.one_of(wrong, st.just({"msgtype": "m.image", "body": CIPHER}))),
        },
    }


@settings(max_examples=300)
@given(json_value)
def test_parse_is_total_over_any_json(raw):
    assert isinstance(parse_event(raw), Event.__args__)  # type: ignore[attr-defined]


@settings(max_examples=40)
@given(st.lists(hostile_event(), min_size=1, max_size=25))
@pytest.mark.slow
def test_hostile_events_through_the_refresher(events):
    hs = FakeMatrix()
    hs.add_room("!r", alias="#r:hs.test")
    ids: dict[str, list[str]] = {}
    for kind, raw in events:
        if kind == "missing" and raw.pop("_missing"):
            # A field the server omitted: append without the fake filling it back in.
            hs.ts += 1000
            hs.rooms["!r"].timeline.append(raw)
            continue
        event_id = hs._append("!r", raw)
        if isinstance(event_id, str):
            ids.setdefault(kind, []).append(event_id)
    index, log = MemoryIndex(), ListLog()
    summary = asyncio.run(
        Refresher(
            matrix=hs,
            index=index,
            embedder=FakeEmbedder(),
            log=log,
            policy=Policy.build(allowed=("!r",), bridge_sender_patterns=("@_discord_.*:.*",)),
            options=RefreshOptions(page_size=7, checkpoint_events=10),
        ).run()
    )

    assert summary.rooms_failed == 0, log.events("room_failed")
    payloads = index.windows_in_span("!r", 0, 10**14)
    dump = json.dumps(payloads)
    assert CIPHER not in dump
    for secret in SECRETS:
        assert secret not in dump
    for p in payloads:
        schema.window_from_payload(p)  # what was stored reads back
    stored_ids = {e for p in payloads for e in p["event_ids"]}
    for kind in ("encrypted", "unknown", "missing", "wrong_type", "junk_content"):
        assert not stored_ids & set(ids.get(kind, ())), kind
    skipped = summary.events_skipped
    assert skipped.get("encrypted", 0) == len(ids.get("encrypted", ()))
    assert skipped.get("custom_type", 0) == len(ids.get("unknown", ()))
    n_malformed = sum(1 for kind, _ in events if kind in ("missing", "wrong_type"))
    assert skipped.get("malformed", 0) >= n_malformed
    # Every event read is stored as a message, counted as skipped, or is an edit/redaction.
    assert sum(skipped.get(e["type"], 0) for e in {e["type"]: e for e in hs.rooms["!r"].state}.values()) >= len(
        hs.rooms["!r"].state
    )
    assert sum(skipped.values()) <= summary.events_read

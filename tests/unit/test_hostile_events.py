"""Hostile events: raw event JSON, as a homeserver might send it, through the
real parse, fold and refresher into a real (in-memory Qdrant) index. Never a crash; nothing of an
encrypted, media or unknown event and no token-shaped secret is stored; every event that is not
stored is counted in the run summary by why, under a bounded set of names."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from chunker.events import Message, parse_event
from daemon.refresher.summary import skip_reason
from tests.fakes import FakeEmbedder, FakeMatrix, run_refresher

ROOM = "!hostile:hs.test"
CIPHER = "CIPHERTEXTq9z"  # never in the index, whatever carries it
TOKEN = "syt_aGVsbG8_VeryLongSecretValue_0a1b2c"  # a Synapse access token shape

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=20)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=12,
)
odd_text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\u200b", "\u200d", "\u202e", "\u2066", "\x00", "\x1b", "\ufeff", "\u0627", "\n", "\r"]),
    ),
    max_size=200,
)


def _deep(depth: int) -> Any:
    value: Any = CIPHER
    for _ in range(depth):
        value = {"x": [value]}
    return value


@st.composite
def raw_event(draw: Any) -> dict[str, Any]:
    sender = draw(st.sampled_from(["@alice:hs.test", "@bob:hs.test"]))
    shape = draw(
        st.sampled_from(
            ["text", "huge", "secret", "encrypted", "media", "unknown", "wrong_types", "deep", "reply", "edit"]
        )
    )
    base: dict[str, Any] = {"type": "m.room.message", "sender": sender}
    if shape == "text":
        base["content"] = {"msgtype": draw(st.sampled_from(["m.text", "m.notice", "m.emote"])), "body": draw(odd_text)}
    elif shape == "huge":
        base["content"] = {
            "msgtype": "m.text",
            "body": draw(st.sampled_from(["a", "\u202e", "word "])) * draw(st.integers(5_000, 60_000)),
        }
    elif shape == "secret":
        base["content"] = {"msgtype": "m.text", "body": f"{draw(odd_text)} token {TOKEN} {draw(odd_text)}"}
    elif shape == "encrypted":
        base["type"] = "m.room.encrypted"
        base["content"] = {
            "algorithm": "m.megolm.v1.aes-sha2",
            "ciphertext": CIPHER + draw(st.text(max_size=30)),
            "session_id": "s",
            "body": CIPHER,
            "msgtype": "m.text",
        }
    elif shape == "media":
        base["content"] = {
            "msgtype": draw(st.sampled_from(["m.image", "m.file", "m.video", "x.custom", "1 2 3"])),
            "body": CIPHER,
            "url": "mxc://x/y",
        }
    elif shape == "unknown":
        base["type"] = draw(st.sampled_from(["com.example.custom", "m.sticker", "m.reaction", "zz" + CIPHER, ""]))
        base["content"] = {"body": CIPHER, "msgtype": "m.text"}
    elif shape == "wrong_types":
        base = {
            key: draw(json_value)
            for key in draw(
                st.sets(st.sampled_from(["type", "sender", "content", "event_id", "origin_server_ts", "unsigned"]))
            )
        }
        base.setdefault("sender", sender)
        if isinstance(base.get("content"), dict):
            base["content"]["body"] = CIPHER
    elif shape == "deep":
        base["content"] = {"msgtype": "m.image", "body": CIPHER, "info": _deep(draw(st.integers(50, 400)))}
    elif shape == "reply":
        base["content"] = {
            "msgtype": "m.text",
            "body": f"> <@x:hs.test> {CIPHER}\n\n{draw(odd_text)}",
            "m.relates_to": {"m.in_reply_to": {"event_id": "$nope"}},
        }
    else:  # an edit whose new content is not text, or is garbage
        base["content"] = {
            "msgtype": "m.text",
            "body": "* x",
            "m.new_content": draw(st.one_of(json_value, st.just({"msgtype": "m.image", "body": CIPHER}))),
            "m.relates_to": {"rel_type": "m.replace", "event_id": "$elsewhere"},
        }
    return base


class Quiet:
    def bind(self, **_: Any) -> "Quiet":
        return self

    def info(self, *_: Any, **__: Any) -> None:
        pass

    warning = error = info


def _index() -> Any:
    from qdrant_client import QdrantClient

    from daemon.index.remote_writer import RemoteIndexWriter as ServerIndexWriter

    return ServerIndexWriter(QdrantClient(":memory:"), "hostile")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=st.lists(raw_event(), min_size=1, max_size=25))
@pytest.mark.slow
def test_hostile_events_never_crash_never_store_ciphertext_or_secrets_and_are_counted(
    events: list[dict[str, Any]],
) -> None:
    hs = FakeMatrix()
    hs.add_room(ROOM, alias="#hostile:hs.test")
    for event in events:
        hs._append(ROOM, dict(event))
    index = _index()
    summary = run_refresher(hs, index, FakeEmbedder(), (ROOM,), Quiet(), page_size=7)
    assert summary.rooms_failed == 0, summary.failed_rooms

    stored = json.dumps(
        [index.windows_in_span(r, 0, 10**17) for r in sorted(index.rooms_with_data())], ensure_ascii=False
    )
    assert CIPHER not in stored
    assert TOKEN not in stored and "VeryLongSecretValue" not in stored

    # Every event read and not stored as text is counted by why; the names are bounded.
    timeline = hs.rooms[ROOM].timeline
    parsed = [parse_event(raw) for raw in timeline]
    expected: dict[str, int] = {}
    for event in parsed:
        if not isinstance(event, Message) and type(event).__name__ == "Other":
            why = skip_reason(event.kind)  # type: ignore[attr-defined]
            expected[why] = expected.get(why, 0) + 1
    if summary.rooms_refused == 0:
        assert summary.events_skipped == expected
        assert summary.events_read == len(timeline)
    assert all(len(why) <= 64 and CIPHER not in why for why in summary.events_skipped)


def test_skip_reasons_keep_spec_names_and_bucket_the_rest() -> None:
    assert skip_reason("encrypted") == "encrypted"
    assert skip_reason("m.image") == "m.image"
    assert skip_reason("m.room.member") == "m.room.member"
    assert skip_reason("com.example.custom") == "custom_type"
    assert skip_reason("m." + "x" * 500) == "custom_type"
    assert skip_reason("zz" + CIPHER) == "custom_type"

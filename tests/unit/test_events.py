"""parse_event over events shaped as Synapse 1.163 serves them from /messages (room version 12
unless a test says otherwise): each row of the classification table, the reply-fallback strip,
scrubbing of every body that leaves, and totality on arbitrary JSON."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from chunker.events import Edit, Message, Other, Redaction, parse_event

ROOM = "!lHWJkLqPL3hFsAbCdEfGhIjKlMnOpQrStUv"
ALICE = "@alice:test.local"
BOB = "@bob:test.local"
TS = 1_735_000_000_000
GHP = "ghp" + "_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1eF3hJ5"


def event(event_type: str, content: dict[str, Any], **extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "type": event_type,
        "room_id": ROOM,
        "sender": extra.pop("sender", ALICE),
        "content": content,
        "origin_server_ts": extra.pop("ts", TS),
        "unsigned": extra.pop("unsigned", {"age": 1234, "membership": "join"}),
        "event_id": extra.pop("event_id", "$Zk3v9Q_abcDEF-12345xyzAbCdEfGhIjKlMnOpQr"),
    }
    raw.update(extra)
    return raw


def text(body: str, msgtype: str = "m.text", **extra: Any) -> dict[str, Any]:
    return event("m.room.message", {"msgtype": msgtype, "body": body}, **extra)


def edit(target: str, new_body: str, msgtype: str = "m.text", **extra: Any) -> dict[str, Any]:
    return event(
        "m.room.message",
        {
            "msgtype": msgtype,
            "body": f" * {new_body}",
            "m.new_content": {"msgtype": msgtype, "body": new_body},
            "m.relates_to": {"rel_type": "m.replace", "event_id": target},
        },
        **extra,
    )


# -- messages -----------------------------------------------------------------------------------


@pytest.mark.parametrize("msgtype", ["m.text", "m.notice", "m.emote"])
def test_text_notice_and_emote_are_messages_with_their_body(msgtype: str) -> None:
    parsed = parse_event(text("waves at everyone", msgtype, event_id="$m1", sender=BOB, ts=TS + 5))
    assert parsed == Message(event_id="$m1", sender=BOB, ts=TS + 5, body="waves at everyone")


def test_formatted_body_is_ignored_and_body_kept_verbatim() -> None:
    raw = text("see **this**")
    raw["content"].update(format="org.matrix.custom.html", formatted_body="see <b>this</b>")
    assert parse_event(raw).body == "see **this**"


def test_reply_fallback_is_stripped() -> None:
    raw = event(
        "m.room.message",
        {
            "msgtype": "m.text",
            "body": "> <@bob:test.local> the deploy broke\n> second line\n>\n> after blank\n\nI'll look at it\n> my own quote",
            "format": "org.matrix.custom.html",
            "formatted_body": "<mx-reply><blockquote>...</blockquote></mx-reply>I'll look at it",
            "m.relates_to": {"m.in_reply_to": {"event_id": "$orig"}},
        },
    )
    parsed = parse_event(raw)
    assert parsed.body == "I'll look at it\n> my own quote"
    assert (parsed.reply_to, parsed.thread_root) == ("$orig", None)  # the fallback goes, the target id stays


@pytest.mark.parametrize("body", ["", "   ", "\n\t", "\x00"])
def test_a_blank_message_is_skipped_as_empty(body: str) -> None:
    parsed = parse_event(text(body))
    assert isinstance(parsed, Other) and parsed.kind == "empty"


def test_a_reply_that_is_only_its_quote_is_skipped_as_empty() -> None:
    raw = event(
        "m.room.message",
        {
            "msgtype": "m.text",
            "body": "> <@bob:test.local> hi\n\n",
            "m.relates_to": {"m.in_reply_to": {"event_id": "$o"}},
        },
    )
    parsed = parse_event(raw)
    assert isinstance(parsed, Other) and parsed.kind == "empty"


def test_quote_lines_are_kept_when_the_message_is_not_a_reply() -> None:
    body = "> quoting someone\n\nmy take"
    assert parse_event(text(body)).body == body


def test_reply_without_fallback_keeps_its_body() -> None:
    raw = event(
        "m.room.message",
        {"msgtype": "m.text", "body": "yes, agreed", "m.relates_to": {"m.in_reply_to": {"event_id": "$o"}}},
    )
    assert parse_event(raw).body == "yes, agreed"


def test_thread_reply_is_a_message_and_loses_its_fallback() -> None:
    raw = event(
        "m.room.message",
        {
            "msgtype": "m.text",
            "body": "> <@bob:test.local> root text\n\nin the thread",
            "m.relates_to": {
                "rel_type": "m.thread",
                "event_id": "$root",
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": "$root"},
            },
        },
        event_id="$t1",
    )
    # The thread fallback's m.in_reply_to names the thread's latest event: not a reply.
    assert parse_event(raw) == Message("$t1", ALICE, TS, "in the thread", reply_to=None, thread_root="$root")


def test_a_real_reply_inside_a_thread_keeps_both_ids() -> None:
    relation = {"rel_type": "m.thread", "event_id": "$root", "m.in_reply_to": {"event_id": "$t1"}}
    raw = event("m.room.message", {"msgtype": "m.text", "body": "to you", "m.relates_to": relation}, event_id="$t2")
    parsed = parse_event(raw)
    assert (parsed.reply_to, parsed.thread_root, parsed.body) == ("$t1", "$root", "to you")


@pytest.mark.parametrize(
    "relation",
    [
        {"m.in_reply_to": {"event_id": 7}},
        {"m.in_reply_to": {"event_id": ""}},
        {"m.in_reply_to": {"event_id": ["$x"]}},
        {"m.in_reply_to": "$x"},
        {"m.in_reply_to": {"event_id": {"nested": {"junk": 1}}}},
        {"m.in_reply_to": {"event_id": "$self"}},
        {"rel_type": "m.thread", "event_id": None},
        {"rel_type": "m.thread", "event_id": {"$x": 1}},
        {"rel_type": "m.thread", "event_id": "$self"},
        {"rel_type": ["m.thread"], "event_id": "$root"},
        {"rel_type": "m.annotation", "event_id": "$root"},
        {"rel_type": "m.thread", "event_id": "main"},  # not an event id: "$" first
        {"rel_type": "m.thread", "event_id": "$a b"},
        {"rel_type": "m.thread", "event_id": "$" + "x" * 255},
        {"m.in_reply_to": {"event_id": "$\n"}},
    ],
)
def test_hostile_relation_ids_are_dropped_and_the_message_kept(relation: dict[str, Any]) -> None:
    raw = event("m.room.message", {"msgtype": "m.text", "body": "hi", "m.relates_to": relation}, event_id="$self")
    assert parse_event(raw) == Message("$self", ALICE, TS, "hi")


def test_nul_characters_and_lone_surrogates_are_cleaned() -> None:
    parsed = parse_event(text("a\x00b \ud800c"))
    assert parsed.body == "ab \ufffdc"
    parsed.body.encode("utf-8")  # every later stage can encode it


# -- edits ----------------------------------------------------------------------------------


def test_edit_takes_its_body_from_new_content() -> None:
    parsed = parse_event(edit("$orig", "fixed typo", event_id="$e1"))
    assert parsed == Edit(event_id="$e1", sender=ALICE, ts=TS, target_id="$orig", body="fixed typo")


def test_edit_by_another_sender_is_still_an_edit() -> None:
    parsed = parse_event(edit("$orig", "hijack", sender=BOB))
    assert isinstance(parsed, Edit) and parsed.sender == BOB and parsed.target_id == "$orig"


def test_edit_without_new_content_falls_back_to_body_minus_star() -> None:
    raw = event(
        "m.room.message",
        {"msgtype": "m.text", "body": "* corrected", "m.relates_to": {"rel_type": "m.replace", "event_id": "$o"}},
    )
    assert parse_event(raw).body == "corrected"


def test_edit_to_an_image_is_not_text() -> None:
    raw = edit("$orig", "cat.png", msgtype="m.image")
    parsed = parse_event(raw)
    assert isinstance(parsed, Other) and parsed.kind == "edit_non_text"


def test_edit_with_missing_target_is_malformed() -> None:
    raw = edit("$orig", "x")
    del raw["content"]["m.relates_to"]["event_id"]
    assert parse_event(raw).kind == "malformed"


def test_edit_of_an_emote_is_an_edit() -> None:
    assert parse_event(edit("$o", "dances", msgtype="m.emote")).body == "dances"


# -- redactions -----------------------------------------------------------------------------


def test_redaction_room_version_11_plus_reads_content_redacts() -> None:
    raw = event("m.room.redaction", {"redacts": "$victim", "reason": "spam"}, event_id="$r1")
    assert parse_event(raw) == Redaction(event_id="$r1", sender=ALICE, ts=TS, target_id="$victim")


def test_redaction_as_synapse_serves_v12_with_both_places() -> None:
    raw = event("m.room.redaction", {"redacts": "$victim"}, redacts="$victim")
    assert parse_event(raw).target_id == "$victim"


@pytest.mark.parametrize("content", [{}, {"reason": "oops"}])
def test_redaction_room_version_10_reads_top_level_redacts(content: dict[str, Any]) -> None:
    raw = event("m.room.redaction", content, redacts="$victim", event_id="$r2")
    assert parse_event(raw) == Redaction(event_id="$r2", sender=ALICE, ts=TS, target_id="$victim")


def test_redaction_without_target_is_malformed() -> None:
    assert parse_event(event("m.room.redaction", {"reason": "?"})).kind == "malformed"


def test_a_redacted_redaction_still_redacts_its_target() -> None:
    raw = event(
        "m.room.redaction",
        {"redacts": "$victim"},
        unsigned={"redacted_because": {"type": "m.room.redaction", "content": {"redacts": "$r"}}},
    )
    assert parse_event(raw).target_id == "$victim"


def test_redacted_message_keeps_no_text() -> None:
    because = event("m.room.redaction", {"redacts": "$gone"}, event_id="$r9", sender=BOB)
    raw = event("m.room.message", {}, event_id="$gone", unsigned={"redacted_because": because, "age": 5})
    assert parse_event(raw) == Other("$gone", ALICE, TS, "redacted", "m.room.message", None)


def test_message_with_empty_content_is_redacted_even_without_unsigned() -> None:
    assert parse_event(event("m.room.message", {}, unsigned={})).kind == "redacted"


def test_redacted_because_wins_even_if_content_survived() -> None:
    raw = text("should not be here", unsigned={"redacted_because": {}})
    assert parse_event(raw).kind == "redacted"


def test_redacted_edit_is_redacted() -> None:
    raw = event("m.room.message", {}, unsigned={"redacted_because": {"type": "m.room.redaction"}})
    assert parse_event(raw).kind == "redacted"


# -- everything else ------------------------------------------------------------------------


def test_image_is_other_named_by_msgtype() -> None:
    raw = event("m.room.message", {"msgtype": "m.image", "body": "cat.png", "url": "mxc://test.local/abc"})
    assert parse_event(raw) == Other(raw["event_id"], ALICE, TS, "m.image", "m.room.message", None)


def test_unnamed_msgtype_keeps_no_text() -> None:
    raw = event("m.room.message", {"msgtype": "my secret is hunter2", "body": "x"})
    parsed = parse_event(raw)
    assert isinstance(parsed, Other) and "hunter2" not in repr(parsed)


def test_reaction_is_other() -> None:
    raw = event("m.reaction", {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$m", "key": "👍"}})
    parsed = parse_event(raw)
    assert isinstance(parsed, Other) and parsed.kind == "m.reaction" and parsed.state_key is None


def test_megolm_encrypted_is_other_and_keeps_no_ciphertext() -> None:
    ciphertext = "AwgAEpABqOC7kR9Qm2xZ3WvY5nLsKd8pT1uH6jF0eBcA"
    raw = event(
        "m.room.encrypted",
        {
            "algorithm": "m.megolm.v1.aes-sha2",
            "ciphertext": ciphertext,
            "device_id": "ABCDEFGHIJ",
            "sender_key": "Fq0nxL7Z1lJ4dbPRn2wiGkYq8p+3Qm7xYtEyR1tAbCd",
            "session_id": "sEsSiOn1234567890AbCdEfGhIjKlMnOpQrStUvWxYz",
        },
    )
    parsed = parse_event(raw)
    assert parsed == Other(raw["event_id"], ALICE, TS, "encrypted", "m.room.encrypted", None)
    assert ciphertext not in repr(parsed)


@pytest.mark.parametrize(
    ("event_type", "state_key", "content"),
    [
        ("m.room.create", "", {"room_version": "12"}),
        ("m.room.member", BOB, {"membership": "join", "displayname": "bob"}),
        ("m.room.member", "@_discord_1234:test.local", {"membership": "join"}),
        ("m.room.encryption", "", {"algorithm": "m.megolm.v1.aes-sha2"}),
        ("m.bridge", "org.matrix.appservice-discord://discord/123/456", {"protocol": {"id": "discord"}}),
        ("uk.half-shot.bridge", "x", {"bridgebot": "@discordbot:test.local"}),
        ("m.bridge", "gone", {}),
        ("m.room.topic", "", {"topic": "password=hunter2"}),
    ],
)
def test_state_events_are_other_with_type_and_state_key(
    event_type: str, state_key: str, content: dict[str, Any]
) -> None:
    parsed = parse_event(event(event_type, content, state_key=state_key))
    assert isinstance(parsed, Other)
    assert (parsed.kind, parsed.event_type, parsed.state_key) == (event_type, event_type, state_key)
    assert "hunter2" not in repr(parsed)


def test_redacted_state_event_keeps_type_and_state_key() -> None:
    raw = event("m.bridge", {}, state_key="b", unsigned={"redacted_because": {}})
    parsed = parse_event(raw)
    assert (parsed.kind, parsed.event_type, parsed.state_key) == ("redacted", "m.bridge", "b")


def test_custom_and_sticker_events_are_other() -> None:
    assert parse_event(event("m.sticker", {"body": "sticker", "url": "mxc://x/y"})).kind == "m.sticker"
    assert parse_event(event("com.example.custom", {"body": "x"})).kind == "com.example.custom"


# -- malformed ------------------------------------------------------------------------------


def _broken(mutate) -> dict[str, Any]:
    raw = text("hello")
    mutate(raw)
    return raw


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "not an event",
        42,
        [],
        {},
        _broken(lambda r: r.pop("event_id")),
        _broken(lambda r: r.update(event_id="")),
        _broken(lambda r: r.update(event_id=7)),
        _broken(lambda r: r.pop("sender")),
        _broken(lambda r: r.update(sender=None)),
        _broken(lambda r: r.pop("origin_server_ts")),
        _broken(lambda r: r.update(origin_server_ts="1735000000000")),
        _broken(lambda r: r.update(origin_server_ts=1.5)),
        _broken(lambda r: r.update(origin_server_ts=True)),
        _broken(lambda r: r.pop("type")),
        _broken(lambda r: r.update(content=None)),
        _broken(lambda r: r.update(content=["body"])),
        _broken(lambda r: r["content"].update(body=None)),
        _broken(lambda r: r["content"].update(body=["hello"])),
        _broken(lambda r: r["content"].pop("body")),
        _broken(lambda r: r["content"].pop("msgtype")),
        _broken(lambda r: r["content"].update(msgtype=["m.text"])),
        _broken(
            lambda r: r["content"].update(
                {"m.relates_to": {"rel_type": "m.replace", "event_id": "$o"}, "m.new_content": "x"}
            )
        ),
        _broken(
            lambda r: r["content"].update(
                {"m.relates_to": {"rel_type": "m.replace", "event_id": "$o"}, "m.new_content": {"msgtype": "m.text"}}
            )
        ),
    ],
)
def test_malformed_events_are_other_malformed(raw: object) -> None:
    parsed = parse_event(copy.deepcopy(raw))
    assert isinstance(parsed, Other) and parsed.kind == "malformed"


def test_malformed_keeps_what_identifies_it() -> None:
    raw = _broken(lambda r: r["content"].update(body=None))
    parsed = parse_event(raw)
    assert (parsed.event_id, parsed.sender, parsed.ts, parsed.event_type) == (
        raw["event_id"],
        ALICE,
        TS,
        "m.room.message",
    )


def test_odd_but_harmless_shapes_are_tolerated() -> None:
    assert isinstance(parse_event(text("hi", unsigned="junk")), Message)
    raw = text("hi")
    raw["content"]["m.relates_to"] = "junk"
    assert parse_event(raw).body == "hi"


# -- scrubbing ------------------------------------------------------------------------------


def test_secret_in_a_message_body_never_appears() -> None:
    parsed = parse_event(text(f"here is my token {GHP} and password=hunter2"))
    assert GHP not in repr(parsed) and "hunter2" not in repr(parsed)
    assert parsed.body == "here is my token [redacted:github_token] and password=[redacted:password]"


def test_secret_in_an_edit_new_content_never_appears() -> None:
    raw = edit("$o", f"oops, the key is {GHP}")
    parsed = parse_event(raw)
    assert isinstance(parsed, Edit) and GHP not in repr(parsed)
    assert "[redacted:github_token]" in parsed.body


def test_secret_in_an_edit_fallback_body_never_appears() -> None:
    raw = event(
        "m.room.message",
        {"msgtype": "m.text", "body": f"* {GHP}", "m.relates_to": {"rel_type": "m.replace", "event_id": "$o"}},
    )
    assert GHP not in repr(parse_event(raw))


def test_a_nul_cannot_split_a_secret_past_the_scrub() -> None:
    split = GHP[:10] + "\x00" + GHP[10:]
    assert GHP not in repr(parse_event(text(f"t {split}")))


def test_secret_quoted_in_a_reply_fallback_never_appears() -> None:
    raw = event(
        "m.room.message",
        {
            "msgtype": "m.text",
            "body": f"> <@bob:test.local> {GHP}\n\nplease revoke that",
            "m.relates_to": {"m.in_reply_to": {"event_id": "$o"}},
        },
    )
    assert parse_event(raw).body == "please revoke that"


# -- totality -------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
KEYS = ["type", "content", "sender", "event_id", "origin_server_ts", "unsigned", "redacts", "state_key"]
CONTENT_KEYS = ["msgtype", "body", "m.relates_to", "m.new_content", "redacts", "rel_type", "event_id", "m.in_reply_to"]
near_values = (
    json_values
    | st.sampled_from(
        ["m.room.message", "m.room.redaction", "m.text", "m.emote", "m.replace", "$x", "@a:b", "> q\n\nx", "* y"]
    )
    | st.integers(min_value=0)
)
near_content = st.recursive(
    st.dictionaries(st.sampled_from(CONTENT_KEYS), near_values, max_size=5),
    lambda children: st.dictionaries(st.sampled_from(CONTENT_KEYS), children | near_values, max_size=5),
    max_leaves=10,
)
near_events = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["m.room.message", "m.room.redaction", "m.room.encrypted", "m.reaction"]) | near_values,
        "event_id": st.just("$e") | near_values,
        "sender": st.just("@a:b") | near_values,
        "origin_server_ts": st.integers() | near_values,
        "content": near_content | near_values,
    },
    optional={"unsigned": near_content | near_values, "redacts": near_values, "state_key": near_values},
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values | near_events | st.from_type(type).flatmap(st.from_type))
def test_parse_event_never_raises_and_always_returns_an_event(raw: object) -> None:
    parsed = parse_event(raw)
    assert isinstance(parsed, (Message, Edit, Redaction, Other))
    if isinstance(parsed, (Message, Edit)):
        assert isinstance(parsed.body, str) and "\x00" not in parsed.body
        assert isinstance(parsed.ts, int) and parsed.event_id and parsed.sender


@settings(max_examples=300, deadline=None)
@given(near_events)
@pytest.mark.slow
def test_classification_does_not_need_the_safety_net(raw: dict[str, Any]) -> None:
    # parse_event catches any exception as a last resort; the rules themselves must not raise.
    from chunker.events import _classify

    _classify(raw)

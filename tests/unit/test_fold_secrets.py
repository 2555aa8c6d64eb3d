"""Secrets that cross messages, caught by the fold: a private key whose body
comes in the message after its BEGIN line, and a key pasted cut short then completed by an edit.
Bodies go through ``parse_event`` as in a run, so the per-message scrub runs first."""

from __future__ import annotations

from chunker.events import parse_event
from chunker.fold import Bounds, RoomFold
from tests.scrub_corpus import PIECE

ROOM = "!room:example.org"
ALICE = "@alice:example.org"
BOB = "@bob:example.org"
T0 = 1_700_000_000_000
BOUNDS = Bounds(max_bytes=4000, max_gap_ms=15 * 60_000)

# Fake key material, assembled so that no scanner takes this file for a leak.
BODY_LINES = [
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "QyNTUxOQAAACDf7Xq9Lk2mPz8Wq3VtYs0Hn6cRb1Ju4Ea5Gi7Ko9Ms2QAAAJgK3vLmCt7y5g",
]
GHP = "ghp" + "_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1eF3hJ5"
HALF = GHP[4:20]  # pasted without its prefix and cut short


def message(n: int, body: str, sender: str = ALICE, at: int = 0) -> object:
    return parse_event(
        {
            "type": "m.room.message",
            "event_id": f"$m{n}",
            "sender": sender,
            "origin_server_ts": T0 + at,
            "content": {"msgtype": "m.text", "body": body},
        }
    )


def edit(n: int, target: str, body: str, sender: str = ALICE) -> object:
    return parse_event(
        {
            "type": "m.room.message",
            "event_id": f"$e{n}",
            "sender": sender,
            "origin_server_ts": T0 + 1000,
            "content": {
                "msgtype": "m.text",
                "body": "* " + body,
                "m.new_content": {"msgtype": "m.text", "body": body},
                "m.relates_to": {"rel_type": "m.replace", "event_id": target},
            },
        }
    )


def redaction(n: int, target: str) -> object:
    return parse_event(
        {
            "type": "m.room.redaction",
            "event_id": f"$r{n}",
            "sender": ALICE,
            "origin_server_ts": T0 + 2000,
            "redacts": target,
            "content": {},
        }
    )


def stored_text(fold: RoomFold) -> str:
    return "\n".join(m.body for w in fold.windows() for m in w.messages)


def pieces_of(secret: str) -> set[str]:
    return {secret[i : i + PIECE] for i in range(len(secret) - PIECE + 1)}


def assert_gone(secret: str, text: str) -> None:
    assert not [p for p in pieces_of(secret) if p in text], text


def test_a_pem_body_pasted_after_its_header_message_is_caught() -> None:
    fold = RoomFold(ROOM, BOUNDS)
    fold.feed(
        [
            message(1, "-----BEGIN OPENSSH PRIVATE KEY-----"),
            message(2, BODY_LINES[0], at=1),  # one line: no per-message rule can tell it from chat
            message(3, "oops wrong channel", at=2),
        ]
    )
    text = stored_text(fold)
    assert_gone(BODY_LINES[0], text)
    assert "oops wrong channel" in text


def test_the_continuation_stops_at_the_first_line_that_is_not_key_material() -> None:
    fold = RoomFold(ROOM, BOUNDS)
    fold.feed([message(1, "-----BEGIN RSA PRIVATE KEY-----"), message(2, BODY_LINES[1] + "\nsorry, ignore that", at=1)])
    assert [m.body for w in fold.windows() for m in w.messages][1] == "[redacted:private_key]\nsorry, ignore that"


def test_only_the_senders_own_next_message_continues_the_key() -> None:
    fold = RoomFold(ROOM, BOUNDS)
    plain = "aGVsbG8gd29ybGQgdGhpcyBpcyBub3QgYSBrZXk"  # base64 chat from someone else
    fold.feed([message(1, "-----BEGIN RSA PRIVATE KEY-----"), message(2, plain, sender=BOB, at=1)])
    assert plain in stored_text(fold)


def test_a_header_stored_by_an_earlier_run_still_continues() -> None:
    first = RoomFold(ROOM, BOUNDS)
    first.feed([message(1, "-----BEGIN EC PRIVATE KEY-----")])
    [open_window] = first.take_changes().upserts
    second = RoomFold(ROOM, BOUNDS, open_window=open_window, incremental=True)
    second.feed([message(2, BODY_LINES[0], at=1)])
    assert_gone(BODY_LINES[0], stored_text(second))


def test_an_edit_that_completes_a_key_takes_the_first_half_with_it() -> None:
    fold = RoomFold(ROOM, BOUNDS)
    fold.feed([message(1, f"here it is {HALF} (rest in a sec)"), edit(1, "$m1", f"here it is {GHP} (rest in a sec)")])
    assert_gone(GHP, stored_text(fold))
    # The edit redacted: the body reverts to the first version, which must not bring the half back.
    fold.feed([redaction(1, "$e1")])
    text = stored_text(fold)
    assert text == "here it is [redacted:github_token] (rest in a sec)"


def test_an_edit_that_cuts_a_key_short_loses_what_is_left() -> None:
    fold = RoomFold(ROOM, BOUNDS)
    # No label before the key ("token <16+ characters>" is a row of its own): only the carry can catch HALF.
    fold.feed([message(1, f"use {GHP} for the bot"), edit(1, "$m1", f"use {HALF} for the bot")])
    assert_gone(HALF, stored_text(fold))
    assert stored_text(fold) == "use [redacted:github_token] for the bot"

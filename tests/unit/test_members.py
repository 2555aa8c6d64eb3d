"""chunker.members: display names at the time, cleaned names, and the routing servers of permalinks."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from chunker.events import Message, parse_event
from chunker.members import MAX_NAME_CHARS, DisplayNames, clean_name, via_servers

GITHUB_TOKEN = "ghp_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8"


def member(user: str, name: object = None, membership: str = "join", **extra: object) -> dict:
    content: dict = {"membership": membership}
    if name is not None:
        content["displayname"] = name
    return {"type": "m.room.member", "state_key": user, "sender": user, "content": content, **extra}


def text(user: str, body: str, event_id: str) -> dict:
    return {
        "type": "m.room.message",
        "sender": user,
        "event_id": event_id,
        "origin_server_ts": 1,
        "content": {"msgtype": "m.text", "body": body},
    }


def _names(names: DisplayNames, raw: list[dict]) -> list[str | None]:
    events = names.annotate(raw, [parse_event(r) for r in raw])
    return [e.display_name for e in events if isinstance(e, Message)]


# ---------------------------------------------------------------------------------------------
# Names as the index keeps them


def test_a_credential_in_a_display_name_is_scrubbed() -> None:
    cleaned = clean_name(f"Bob {GITHUB_TOKEN}")
    assert cleaned is not None and GITHUB_TOKEN[:12] not in cleaned and cleaned.startswith("Bob")


def test_names_are_one_bounded_line() -> None:
    assert clean_name("Al\nice\u202e  \t x") == "Al ice x"
    assert clean_name("x" * 500) == "x" * (MAX_NAME_CHARS - 1) + "…"
    for nothing in ("", "   ", "\n", None, 5, ["Alice"]):
        assert clean_name(nothing) is None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_name_comes_out_short_and_on_one_line(value: str) -> None:
    cleaned = clean_name(value)
    if cleaned is not None:
        assert len(cleaned) <= MAX_NAME_CHARS
        assert cleaned.splitlines() == [cleaned] and cleaned == cleaned.strip()
        assert not any(ch in cleaned for ch in "\x00\x1b\u202e\u2028")


# ---------------------------------------------------------------------------------------------
# Display names at the time


def test_a_rename_mid_history_shows_the_name_each_message_was_sent_under() -> None:
    names = DisplayNames()
    raw = [
        member("@a:x", "Alice"),
        text("@a:x", "before", "$1"),
        member("@a:x", "Alicia"),
        text("@a:x", "after", "$2"),
        text("@b:x", "no member event seen", "$3"),
    ]
    assert _names(names, raw) == ["Alice", "Alicia", None]
    assert names.name_of("@a:x") == "Alicia"


def test_state_seeds_the_names_and_a_page_state_overrides_them() -> None:
    names = DisplayNames()
    names.learn([member("@a:x", "Now"), {"type": "m.room.name", "state_key": "", "content": {"name": "R"}}])
    assert _names(names, [text("@a:x", "hi", "$1")]) == ["Now"]
    names.learn([member("@a:x", "Then")])  # the member state at a page's first event
    assert _names(names, [text("@a:x", "hi", "$2")]) == ["Then"]


def test_a_member_event_without_a_usable_name_clears_it() -> None:
    names = DisplayNames()
    raw = [member("@a:x", "Alice"), member("@a:x"), text("@a:x", "x", "$1"), member("@a:x", 7), text("@a:x", "y", "$2")]
    assert _names(names, raw) == [None, None]


# ---------------------------------------------------------------------------------------------
# Routing servers


def create(sender: str, version: str = "12") -> dict:
    return {"type": "m.room.create", "state_key": "", "sender": sender, "content": {"room_version": version}}


def power(users: dict) -> dict:
    return {"type": "m.room.power_levels", "state_key": "", "content": {"users": users}}


def test_the_highest_power_user_comes_first_then_the_most_populous_servers() -> None:
    state = [
        create("@admin:small.org", "10"),
        power({"@admin:small.org": 100, "@mod:mid.org": 50}),
        member("@admin:small.org"),
        *[member(f"@u{i}:big.org") for i in range(5)],
        *[member(f"@v{i}:mid.org") for i in range(3)],
        member("@mod:mid.org"),
        member("@w:tiny.org"),
        member("@left:huge.org", membership="leave"),
    ]
    assert via_servers(state) == ["small.org", "big.org", "mid.org"]


def test_in_room_version_12_the_creator_outranks_every_power_level() -> None:
    state = [create("@creator:first.org"), power({"@mod:other.org": 100}), member("@creator:first.org")]
    state += [member("@mod:other.org"), member("@x:other.org")]
    assert via_servers(state)[0] == "first.org"


def test_ip_literals_and_acl_denied_servers_are_never_used() -> None:
    acl = {"type": "m.room.server_acl", "state_key": "", "content": {"allow": ["*"], "deny": ["*.evil.org"]}}
    state = [acl, member("@a:1.2.3.4"), member("@b:[::1]:8448"), member("@c:bad.evil.org"), member("@d:good.org")]
    assert via_servers(state, fallback="hs.org") == ["good.org"]
    assert via_servers([acl, member("@a:1.2.3.4")], fallback="hs.org") == ["hs.org"]
    assert via_servers([], fallback="hs.org:8448") == ["hs.org:8448"]
    assert via_servers([], fallback="10.0.0.1") == []


def test_at_most_three_servers() -> None:
    state = [member(f"@u:s{i}.org") for i in range(6)]
    assert len(via_servers(state)) == 3

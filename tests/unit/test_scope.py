"""Scope: which rooms may be read. Each test builds room state as Synapse's /state returns it
(room v12 ids, ``unsigned.prev_content``, ``is_direct`` only on the invite) and asserts on the
decision the journal would show: the reason, the signal that fired, and what else matched.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from scope import (
    BUILTIN_EXCLUDE,
    DEFAULT_BRIDGE_SENDERS,
    REASONS,
    Decision,
    Member,
    Policy,
    PolicyError,
    RoomFacts,
    decide,
    decide_before_join,
    facts_before_join,
    facts_from_state,
    is_excluded,
    timeline_refusal,
)

# --- realistic Synapse state -------------------------------------------------------------------

SERVER = "hs.example"
SERVICE_USER = f"@huginn-reader:{SERVER}"
ALICE = f"@alice:{SERVER}"
BOB = f"@bob:{SERVER}"
CAROL = f"@carol:{SERVER}"
DAVE = f"@dave:{SERVER}"
PUPPET = f"@_discord_281919463411630099:{SERVER}"

ROOM = "!k3vQm8T2pXzN4rB7cYw1eHdL9sFgA6uJoViRt5qK0nM"

_event_numbers = itertools.count(1)


def state_event(
    room_id: str,
    event_type: str,
    content: dict[str, Any],
    *,
    sender: str = ALICE,
    state_key: str = "",
    prev_content: dict[str, Any] | None = None,
) -> dict[str, Any]:
    number = next(_event_numbers)
    unsigned: dict[str, Any] = {"age": 1200 + number}
    if prev_content is not None:
        unsigned.update(
            prev_content=prev_content,
            prev_sender=sender,
            replaces_state=f"$prevState{number:04d}wQ7hLkVx2nR9cT1bYpZ3mK",
        )
    return {
        "type": event_type,
        "room_id": room_id,
        "sender": sender,
        "content": content,
        "state_key": state_key,
        "origin_server_ts": 1_762_000_000_000 + number,
        "unsigned": unsigned,
        "event_id": f"$ev{number:04d}Pq8sD2vN6xJ0aG5hF3tU9kE1rW",
    }


def create(room_id: str, creator: str = ALICE) -> dict[str, Any]:
    return state_event(room_id, "m.room.create", {"room_version": "12"}, sender=creator)


def joined(room_id: str, user: str, *, invited_as_direct: bool = False, invited_by: str = ALICE) -> dict[str, Any]:
    """A join. If ``invited_as_direct``, the invite carried is_direct: after the join Synapse keeps it
    only in ``unsigned.prev_content``."""
    content = {"membership": "join", "displayname": user[1:].split(":")[0]}
    if user == invited_by:
        return state_event(room_id, "m.room.member", content, sender=user, state_key=user)
    prev = {"membership": "invite", "displayname": content["displayname"]}
    if invited_as_direct:
        prev["is_direct"] = True
    return state_event(room_id, "m.room.member", content, sender=user, state_key=user, prev_content=prev)


def invited(room_id: str, user: str, *, is_direct: bool = False, by: str = ALICE) -> dict[str, Any]:
    content: dict[str, Any] = {"membership": "invite", "displayname": user[1:].split(":")[0]}
    if is_direct:
        content["is_direct"] = True
    return state_event(room_id, "m.room.member", content, sender=by, state_key=user)


def left(room_id: str, user: str, *, membership: str = "leave") -> dict[str, Any]:
    return state_event(
        room_id,
        "m.room.member",
        {"membership": membership},
        sender=user,
        state_key=user,
        prev_content={"membership": "join", "displayname": user[1:].split(":")[0]},
    )


def join_rules(room_id: str, rule: str) -> dict[str, Any]:
    return state_event(room_id, "m.room.join_rules", {"join_rule": rule})


def name(room_id: str, room_name: str) -> dict[str, Any]:
    return state_event(room_id, "m.room.name", {"name": room_name})


def topic(room_id: str, text: str) -> dict[str, Any]:
    return state_event(room_id, "m.room.topic", {"topic": text})


def canonical_alias(room_id: str, alias: str | None, alt: list[str] | None = None) -> dict[str, Any]:
    content: dict[str, Any] = {}
    if alias is not None:
        content["alias"] = alias
    if alt is not None:
        content["alt_aliases"] = alt
    return state_event(room_id, "m.room.canonical_alias", content)


def encryption(room_id: str) -> dict[str, Any]:
    return state_event(
        room_id,
        "m.room.encryption",
        {"algorithm": "m.megolm.v1.aes-sha2", "rotation_period_ms": 604800000, "rotation_period_msgs": 100},
    )


def bridge(room_id: str, event_type: str = "m.bridge", state_key: str = "") -> dict[str, Any]:
    return state_event(
        room_id,
        event_type,
        {
            "bridgebot": f"@_discord_bot:{SERVER}",
            "protocol": {"id": "discord", "displayname": "Discord"},
            "network": {"id": "281919463411630080", "displayname": "GameCult"},
            "channel": {"id": "281919463411630081", "displayname": "general"},
        },
        sender=f"@_discord_bot:{SERVER}",
        state_key=state_key or "org.matrix.appservice-discord://discord/281919463411630080/281919463411630081",
    )


def room_basics(room_id: str, *, rule: str = "invite") -> list[dict[str, Any]]:
    """What every room has: create, creator's join, power levels, join rules, history visibility."""
    return [
        create(room_id),
        joined(room_id, ALICE, invited_by=ALICE),
        state_event(room_id, "m.room.power_levels", {"users": {ALICE: 100}, "state_default": 50, "users_default": 0}),
        join_rules(room_id, rule),
        state_event(room_id, "m.room.history_visibility", {"history_visibility": "shared"}),
        state_event(room_id, "m.room.guest_access", {"guest_access": "can_join"}),
    ]


def facts(events: list[dict[str, Any]], *, direct_rooms: dict[str, list[str]] | None = None) -> RoomFacts:
    return facts_from_state(ROOM, events, service_user=SERVICE_USER, direct_rooms=direct_rooms or {})


def community_room(*extra: dict[str, Any], rule: str = "public") -> list[dict[str, Any]]:
    """A named public community room with three people and the service user: admitted if listed."""
    return [
        *room_basics(ROOM, rule=rule),
        name(ROOM, "General"),
        canonical_alias(ROOM, f"#general:{SERVER}", [f"#lobby:{SERVER}"]),
        joined(ROOM, BOB),
        joined(ROOM, CAROL),
        joined(ROOM, SERVICE_USER),
        *extra,
    ]


def dm_room(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Alice opened a DM with Bob (is_direct on Bob's invite, now in prev_content); the service user
    was invited later and joined."""
    return [
        *room_basics(ROOM, rule="invite"),
        joined(ROOM, BOB, invited_as_direct=True),
        joined(ROOM, SERVICE_USER),
        *extra,
    ]


LISTED = Policy.build(allowed=[ROOM])
NOBODY_LISTED = Policy.build(allowed=[])


def decided(events: list[dict[str, Any]], policy: Policy = LISTED, **kwargs: Any) -> Decision:
    return decide(facts(events, **kwargs), policy, allowed_room_ids=frozenset())


# --- reading state into facts ------------------------------------------------------------------


def test_facts_read_from_realistic_state():
    got = facts(community_room(encryption(ROOM), bridge(ROOM), topic(ROOM, "welcome!")))
    assert got.room_id == ROOM
    assert got.canonical_alias == f"#general:{SERVER}"
    assert got.alt_aliases == (f"#lobby:{SERVER}",)
    assert got.name == "General"
    assert got.join_rule == "public"
    assert got.encryption == "m.megolm.v1.aes-sha2"
    assert got.bridge_state == (
        ("m.bridge", "org.matrix.appservice-discord://discord/281919463411630080/281919463411630081"),
    )
    assert {m.user_id: m.membership for m in got.members} == {
        ALICE: "join",
        BOB: "join",
        CAROL: "join",
        SERVICE_USER: "join",
    }
    assert not any(m.is_direct for m in got.members)
    assert got.service_user == SERVICE_USER
    assert got.in_m_direct is False


def test_is_direct_after_join_is_read_from_unsigned_prev_content():
    got = facts(dm_room())
    bob = next(m for m in got.members if m.user_id == BOB)
    assert bob == Member(BOB, "join", True)
    # The join itself carries no is_direct: only the previous (invite) content does.
    bob_event = next(e for e in dm_room() if e.get("state_key") == BOB)
    assert "is_direct" not in bob_event["content"]


def test_is_direct_on_a_pending_invite_is_read_from_content():
    got = facts([*room_basics(ROOM), invited(ROOM, BOB, is_direct=True)])
    assert Member(BOB, "invite", True) in got.members


def test_m_direct_listing_under_any_key_is_read():
    listing = {ALICE: ["!other"], CAROL: ["!elsewhere", ROOM]}
    assert facts(community_room(), direct_rooms=listing).in_m_direct is True
    assert facts(community_room(), direct_rooms={ALICE: ["!other"]}).in_m_direct is False


def test_m_direct_value_that_is_a_string_is_not_searched_as_a_substring():
    assert facts(community_room(), direct_rooms={ALICE: f"xx{ROOM}xx"}).in_m_direct is False  # type: ignore[dict-item]


def test_malformed_state_entries_are_skipped_and_the_rest_still_read():
    events: list[Any] = [
        None,
        "m.room.name",
        42,
        {},
        {"type": 5, "state_key": "", "content": {"name": "numeric type"}},
        {"type": "m.room.name", "content": {"name": "no state key"}},
        {"type": "m.room.member", "state_key": BOB},  # no content at all
        {"type": "m.room.member", "state_key": "", "content": {"membership": "join"}},
        {"type": "m.room.member", "state_key": CAROL, "content": ["join"], "unsigned": "x"},
        {
            "type": "m.room.member",
            "state_key": DAVE,
            "content": {"membership": "join"},
            "unsigned": {"prev_content": "not a dict"},
        },
        {"type": "m.room.canonical_alias", "state_key": "", "content": {"alias": 7, "alt_aliases": "#a:b"}},
        {"type": "m.room.join_rules", "state_key": "", "content": {"join_rule": None}},
        {"type": "m.room.name", "state_key": "not-empty", "content": {"name": "wrong state key"}},
        name(ROOM, "Real name"),
    ]
    got = facts(events)
    assert got.name == "Real name"
    assert got.canonical_alias is None and got.alt_aliases == ()
    assert got.join_rule is None
    assert {m.user_id: m.membership for m in got.members} == {BOB: "unknown", CAROL: "unknown", DAVE: "join"}
    assert facts_from_state(ROOM, "not a list", service_user=SERVICE_USER, direct_rooms={}).members == ()  # type: ignore[arg-type]


def test_encryption_without_an_algorithm_still_marks_the_room_encrypted():
    redacted = {"type": "m.room.encryption", "state_key": "", "content": {}, "sender": ALICE}
    got = facts(community_room(redacted))
    assert got.encryption == "unknown"
    assert decided(community_room(redacted)).reason == "encrypted"


def test_emptied_bridge_state_still_counts():
    emptied = {"type": "uk.half-shot.bridge", "state_key": "irc.libera/#gamecult", "content": {}}
    assert facts(community_room(emptied)).bridge_state == (("uk.half-shot.bridge", "irc.libera/#gamecult"),)


def test_blank_name_is_no_name():
    assert facts([*room_basics(ROOM), name(ROOM, "  ")]).name is None


# --- the dm rule -------------------------------------------------------------------------------


def test_dm_listed_in_rooms_is_still_refused_naming_the_member_flagged_direct():
    decision = decide(facts(dm_room()), Policy.build(allowed=[ROOM]), allowed_room_ids=frozenset({ROOM}))
    assert decision.admitted is False
    assert decision.reason == "dm"
    assert decision.evidence["signal"] == "is_direct"
    assert decision.evidence["member"] == BOB
    # The room also looks like a DM structurally; both signals are reported.
    assert [s["signal"] for s in decision.evidence["signals"]] == ["is_direct", "two_party_private"]
    assert decision.also == ()


def test_dm_to_the_service_user_itself_is_refused():
    events = [*room_basics(ROOM), name(ROOM, "Hi reader"), joined(ROOM, SERVICE_USER, invited_as_direct=True)]
    decision = decided(events)
    assert (decision.reason, decision.evidence["signal"], decision.evidence["member"]) == (
        "dm",
        "is_direct",
        SERVICE_USER,
    )


def test_room_in_service_users_m_direct_is_refused_even_if_named():
    decision = decided(community_room(), direct_rooms={BOB: [ROOM]})
    assert decision.reason == "dm"
    assert decision.evidence["signals"] == [{"signal": "m_direct", "account_data_of": SERVICE_USER}]


def test_unnamed_private_two_person_room_is_refused_as_dm_without_any_flag():
    events = [*room_basics(ROOM, rule="invite"), joined(ROOM, BOB), joined(ROOM, SERVICE_USER)]
    decision = decided(events)
    assert decision.reason == "dm"
    assert decision.evidence["signal"] == "two_party_private"
    assert decision.evidence["join_rule"] == "invite"
    assert sorted(decision.evidence["members"]) == [ALICE, BOB]


def test_people_who_left_do_not_make_a_private_room_a_group():
    events = [
        *room_basics(ROOM),
        joined(ROOM, BOB),
        joined(ROOM, SERVICE_USER),
        left(ROOM, CAROL),
        left(ROOM, DAVE, membership="ban"),
    ]
    assert decided(events).evidence["signal"] == "two_party_private"


def test_private_room_with_a_name_and_two_people_is_admitted():
    events = [*room_basics(ROOM, rule="invite"), name(ROOM, "Mod chat"), joined(ROOM, BOB), joined(ROOM, SERVICE_USER)]
    decision = decided(events)
    assert (decision.admitted, decision.reason, decision.also) == (True, "admitted", ())
    assert decision.evidence == {"signal": "room_id", "entry": ROOM}


def test_private_room_with_canonical_alias_and_two_people_is_admitted():
    events = [
        *room_basics(ROOM),
        canonical_alias(ROOM, f"#mods:{SERVER}"),
        joined(ROOM, BOB),
        joined(ROOM, SERVICE_USER),
    ]
    assert decided(events).admitted is True


def test_unnamed_public_room_with_two_people_is_admitted():
    events = [*room_basics(ROOM, rule="public"), joined(ROOM, BOB), joined(ROOM, SERVICE_USER)]
    assert decided(events).admitted is True


def test_unnamed_private_room_with_three_others_is_refused_as_a_group_dm():
    # A group DM loses is_direct from state once a member changes their display name (the new
    # member event's prev_content is the join): no name and no alias is what is left of it.
    events = [*room_basics(ROOM), joined(ROOM, BOB), invited(ROOM, CAROL), joined(ROOM, SERVICE_USER)]
    decision = decided(events)
    assert (decision.reason, decision.evidence["signal"]) == ("dm", "unnamed_private")
    assert decided([*events, name(ROOM, "Moderators")]).admitted is True
    assert decided([*events, canonical_alias(ROOM, f"#mods:{SERVER}")]).admitted is True


def test_a_group_dm_whose_is_direct_a_display_name_change_dropped_is_refused():
    renamed = state_event(
        ROOM,
        "m.room.member",
        {"membership": "join", "displayname": "Dave the Brave"},
        sender=DAVE,
        state_key=DAVE,
        prev_content={"membership": "join", "displayname": "Dave"},
    )
    events = [
        *room_basics(ROOM),
        joined(ROOM, BOB),
        joined(ROOM, CAROL),
        renamed,
        joined(ROOM, SERVICE_USER),
    ]
    assert decided(events).reason == "dm"


def test_missing_join_rules_counts_as_private():
    events = [e for e in dm_room() if e["type"] != "m.room.join_rules"]
    events = [e for e in events if e["type"] != "m.room.member" or e["state_key"] != BOB] + [joined(ROOM, BOB)]
    decision = decided(events)
    assert (decision.reason, decision.evidence["signal"], decision.evidence["join_rule"]) == (
        "dm",
        "two_party_private",
        None,
    )


# --- the bridged rule --------------------------------------------------------------------------


@pytest.mark.parametrize("bridge_type", ["m.bridge", "uk.half-shot.bridge"])
def test_bridge_state_refuses_the_room_whatever_its_state_key(bridge_type):
    decision = decided(community_room(bridge(ROOM, bridge_type, state_key="any/key/at/all")))
    assert decision.reason == "bridged"
    assert decision.evidence["signal"] == "bridge_state"
    assert (decision.evidence["event_type"], decision.evidence["state_key"]) == (bridge_type, "any/key/at/all")


@pytest.mark.parametrize("membership", ["join", "invite", "leave", "ban"])
def test_a_puppet_member_in_any_membership_refuses_the_room(membership):
    puppet_event = state_event(ROOM, "m.room.member", {"membership": membership}, sender=PUPPET, state_key=PUPPET)
    decision = decided(community_room(puppet_event))
    assert decision.reason == "bridged"
    assert decision.evidence["signal"] == "puppet_member"
    assert decision.evidence["member"] == PUPPET
    assert decision.evidence["membership"] == membership
    assert decision.evidence["pattern"] in DEFAULT_BRIDGE_SENDERS
    assert decision.evidence["puppet_count"] == 1


def test_operator_bridge_pattern_adds_to_the_discord_defaults():
    telegram = f"@telegram_5550123:{SERVER}"
    policy = Policy.build(allowed=[ROOM], bridge_sender_patterns=[r"@telegram_\d+:.+"])
    decision = decided(community_room(joined(ROOM, telegram)), policy)
    assert (decision.reason, decision.evidence["member"], decision.evidence["pattern"]) == (
        "bridged",
        telegram,
        r"@telegram_\d+:.+",
    )
    # The Discord defaults still apply next to the operator's pattern.
    assert decided(community_room(joined(ROOM, PUPPET)), policy).reason == "bridged"


def test_many_puppets_are_cut_in_evidence_but_counted():
    puppets = [joined(ROOM, f"@_discord_{n}:{SERVER}") for n in range(25)]
    decision = decided(community_room(*puppets))
    assert decision.evidence["puppet_count"] == 25
    assert len(decision.evidence["signals"]) == 10


@pytest.mark.parametrize(
    "user_id",
    [
        "@_discord_123:example.org",
        "@discord_456:x.y",
        "@discordbot:x.y",
        "@_discord_bot:hs.example",
        "@discord_456:x.y:8448",
    ],
)
def test_default_patterns_match_discord_puppets_on_any_server(user_id):
    assert Policy.build(allowed=[]).puppet_pattern(user_id) is not None


@pytest.mark.parametrize(
    "user_id",
    [
        "@alice:example.org",
        "@discordia_fan:x",
        "@discord:x.y",
        "@discordbotfan:x.y",
        "@my_discord_1:x.y",
        "@_discord_123",
    ],
)
def test_default_patterns_do_not_match_people(user_id):
    assert Policy.build(allowed=[]).puppet_pattern(user_id) is None


# --- encrypted, excluded, not_allowed ----------------------------------------------------------


def test_encrypted_room_is_refused_naming_the_algorithm():
    decision = decided(community_room(encryption(ROOM)))
    assert (decision.reason, decision.evidence) == (
        "encrypted",
        {"signal": "m.room.encryption", "algorithm": "m.megolm.v1.aes-sha2"},
    )


def test_room_excluded_by_alt_alias():
    policy = Policy.build(allowed=[ROOM], exclude=[f"#lobby:{SERVER}"])
    decision = decided(community_room(), policy)
    assert decision.reason == "excluded"
    assert decision.evidence == {
        "signal": "alt_alias",
        "value": f"#lobby:{SERVER}",
        "entry": f"#lobby:{SERVER}",
        "builtin": False,
    }
    assert decision.alias == f"#general:{SERVER}"


def test_room_excluded_by_room_id_and_by_canonical_alias():
    by_id = decided(community_room(), Policy.build(allowed=[ROOM], exclude=[ROOM]))
    assert (by_id.reason, by_id.evidence["signal"]) == ("excluded", "room_id")
    by_alias = decided(community_room(), Policy.build(allowed=[ROOM], exclude=[f"#general:{SERVER}"]))
    assert (by_alias.reason, by_alias.evidence["signal"]) == ("excluded", "canonical_alias")


def test_any_server_exclusion_matches_the_localpart_on_every_server():
    events = community_room(canonical_alias(ROOM, "#general:other.example", ["#offtopic:third.example:8448"]))
    policy = Policy.build(allowed=[ROOM], exclude=["#offtopic:*"])
    assert decided(events, policy).evidence["value"] == "#offtopic:third.example:8448"


@pytest.mark.parametrize("alias", ["#users:hs.example", "#members:other.example", "#patrons:x.y"])
def test_builtin_exclusions_apply_when_the_operator_excludes_nothing(alias):
    decision = decided(community_room(canonical_alias(ROOM, alias)), Policy.build(allowed=[ROOM, alias], exclude=[]))
    assert decision.reason == "excluded"
    assert (decision.evidence["entry"], decision.evidence["builtin"]) == (f"{alias.split(':')[0]}:*", True)


def test_builtin_exclusions_still_apply_when_the_operator_sets_their_own():
    events = community_room(canonical_alias(ROOM, f"#general:{SERVER}", [f"#users:{SERVER}"]))
    decision = decided(events, Policy.build(allowed=[ROOM], exclude=["#spam:*", "!someOtherRoom"]))
    assert (decision.reason, decision.evidence["entry"]) == ("excluded", "#users:*")
    assert BUILTIN_EXCLUDE == ("#users:*", "#members:*", "#patrons:*")


@pytest.mark.parametrize("alias", ["#users-lounge:hs.example", "#myusers:hs.example", "#user:hs.example"])
def test_builtin_exclusions_match_only_the_exact_localpart(alias):
    assert is_excluded(facts(community_room(canonical_alias(ROOM, alias))), NOBODY_LISTED) is None


@pytest.mark.parametrize("alias", ["#Users:hs.example", "#MEMBERS:HS.EXAMPLE", "#pAtRoNs:x.y"])
def test_builtin_exclusions_match_whatever_the_case(alias):
    evidence = is_excluded(facts(community_room(canonical_alias(ROOM, alias))), NOBODY_LISTED)
    assert evidence is not None and evidence["builtin"] and evidence["value"] == alias


def test_exclusions_match_a_name_the_room_state_does_not_publish():
    """A directory-only alias, or the ROOMS entry that found the room, is a name of the room."""
    for named_by in ([f"#users:{SERVER}"], [f"#Members:{SERVER}"]):
        room = facts_from_state(ROOM, community_room(), service_user=SERVICE_USER, direct_rooms={}, named_by=named_by)
        decision = decide(room, Policy.build(allowed=[ROOM]), allowed_room_ids=frozenset())
        assert (decision.reason, decision.evidence["signal"], decision.evidence["value"]) == (
            "excluded",
            "named_by",
            named_by[0],
        )


def test_operator_exclusions_compare_aliases_case_insensitively_and_ids_exactly():
    named = facts_from_state(ROOM, community_room(), service_user=SERVICE_USER, direct_rooms={})
    assert is_excluded(named, Policy.build(allowed=[ROOM], exclude=[f"#GENERAL:{SERVER}"])) is not None
    assert is_excluded(named, Policy.build(allowed=[ROOM], exclude=[ROOM.upper()])) is None


def test_room_not_in_rooms_is_refused_naming_what_could_be_listed():
    decision = decided(community_room(), NOBODY_LISTED)
    assert (decision.reason, decision.evidence) == (
        "not_allowed",
        {"signal": "not_listed", "aliases": [f"#general:{SERVER}", f"#lobby:{SERVER}"]},
    )


def test_room_is_listed_by_resolved_id_or_star():
    room = facts(community_room())
    assert decide(room, NOBODY_LISTED, allowed_room_ids=frozenset({ROOM})).evidence == {
        "signal": "room_id",
        "entry": ROOM,
    }
    star = decide(room, Policy.build(allowed=["*"]), allowed_room_ids=frozenset())
    assert (star.admitted, star.evidence) == (True, {"signal": "all_joined", "entry": "*"})
    assert Policy.build(allowed=["*"]).allows_every_joined_room is True


@pytest.mark.parametrize("alias", [f"#general:{SERVER}", f"#lobby:{SERVER}"])
def test_a_room_that_publishes_a_listed_alias_itself_is_not_listed_by_it(alias: str) -> None:
    # Any room, on any server, can put "#general:hs.example" in its own m.room.canonical_alias; an
    # alias in ROOMS lists only the room the directory resolves it to (allowed_room_ids).
    claimed = decide(facts(community_room()), Policy.build(allowed=[alias]), allowed_room_ids=frozenset({"!real"}))
    assert (claimed.admitted, claimed.reason) == (False, "not_allowed")


def _upgraded_old_room(former: str) -> list[dict[str, Any]]:
    # What Synapse leaves in a room it upgraded: the tombstone, and a canonical alias event that
    # cleared the alias (the old alias survives as prev_content). The directory alias moved on.
    return [
        *room_basics(ROOM, rule="public"),
        name(ROOM, "Members"),
        state_event(ROOM, "m.room.canonical_alias", {}, prev_content={"alias": former}),
        state_event(ROOM, "m.room.tombstone", {"body": "upgraded", "replacement_room": "!successor"}),
        joined(ROOM, ALICE),
        joined(ROOM, BOB),
        joined(ROOM, CAROL),
    ]


def test_the_old_room_of_an_upgraded_roster_room_stays_excluded() -> None:
    decision = decided(_upgraded_old_room(f"#members:{SERVER}"), Policy.build(allowed=["*"]))
    assert (decision.reason, decision.evidence["signal"], decision.evidence["value"]) == (
        "excluded",
        "former_alias",
        f"#members:{SERVER}",
    )
    assert decided(_upgraded_old_room(f"#general:{SERVER}"), Policy.build(allowed=["*"])).admitted


def test_an_exclusion_by_id_follows_a_room_upgrade_both_ways() -> None:
    old = decided(_upgraded_old_room(f"#general:{SERVER}"), Policy.build(allowed=["*"], exclude=["!successor"]))
    assert (old.reason, old.evidence["signal"]) == ("excluded", "upgraded_to")
    successor = [
        state_event("!successor", "m.room.create", {"room_version": "11", "predecessor": {"room_id": ROOM}}),
        join_rules("!successor", "public"),
        name("!successor", "General"),
        joined("!successor", ALICE),
        joined("!successor", BOB),
        joined("!successor", CAROL),
    ]
    new = decide(
        facts_from_state("!successor", successor, service_user=SERVICE_USER, direct_rooms={}),
        Policy.build(allowed=["*"], exclude=[ROOM]),
        allowed_room_ids=frozenset(),
    )
    assert (new.reason, new.evidence["signal"]) == ("excluded", "upgraded_from")


@pytest.mark.parametrize(
    "puppet",
    [
        "@_discordpuppet_281919463411630099:hs.example",
        "@_ooye_alice:hs.example",
        "@_ooye_bot:hs.example",
        "@_Discord_1:evil",
    ],
)
def test_puppets_of_other_discord_bridges_and_in_capitals_refuse_a_room(puppet: str) -> None:
    decision = decided(community_room(joined(ROOM, puppet)))
    assert (decision.reason, decision.evidence["signal"]) == ("bridged", "puppet_member")
    assert timeline_refusal(sender=puppet, event_type="m.room.message", state_key=None, policy=LISTED) is not None


@pytest.mark.parametrize("invisible", ["\u200b", " \u200b\u2060 ", "\ufeff", "\u200d\u200c"])
def test_an_invisible_room_name_is_no_name_and_the_dm_check_still_fires(invisible: str) -> None:
    unflagged_dm = [
        *room_basics(ROOM, rule="invite"),
        joined(ROOM, BOB),
        joined(ROOM, SERVICE_USER),
        name(ROOM, invisible),
    ]
    decision = decided(unflagged_dm)
    assert (decision.reason, decision.evidence["signal"]) == ("dm", "two_party_private")
    assert decided([*unflagged_dm[:-1], name(ROOM, "Book club")]).admitted


def test_encryption_in_the_older_room_summary_refuses_before_a_join() -> None:
    before = facts_before_join(
        ROOM,
        service_user=SERVICE_USER,
        direct_rooms={},
        summary={"im.nheko.summary.encryption": "m.megolm.v1.aes-sha2", "num_joined_members": 40},
    )
    refusal = decide_before_join(before, LISTED, allowed_room_ids=frozenset({ROOM}))
    assert refusal is not None and refusal.reason == "encrypted"


@pytest.mark.parametrize("event_type", ["m.room.encryption", "m.bridge"])
def test_refusing_state_with_a_malformed_state_key_still_refuses(event_type: str) -> None:
    malformed = {"type": event_type, "state_key": 0, "content": {"algorithm": "m.megolm.v1.aes-sha2"}}
    assert not decided(community_room(malformed)).admitted


def test_star_does_not_override_any_refusal():
    decision = decided(dm_room(), Policy.build(allowed=["*"]))
    assert decision.reason == "dm"


# --- order and reporting -----------------------------------------------------------------------


def test_first_matching_rule_wins_and_the_others_are_listed_in_table_order():
    events = dm_room(encryption(ROOM), bridge(ROOM), canonical_alias(ROOM, None, [f"#patrons:{SERVER}"]))
    decision = decided(events, NOBODY_LISTED)
    assert decision.reason == "dm"
    assert decision.also == ("bridged", "encrypted", "excluded", "not_allowed")
    assert REASONS == ("dm", "bridged", "encrypted", "room_type", "excluded", "not_allowed")


def test_evidence_is_json_and_carries_no_room_text():
    secret_topic = "the launch code is in the pinned message"
    for events in (
        dm_room(topic(ROOM, secret_topic)),
        community_room(topic(ROOM, secret_topic), bridge(ROOM), joined(ROOM, PUPPET)),
        community_room(topic(ROOM, secret_topic), encryption(ROOM)),
        community_room(topic(ROOM, secret_topic)),
    ):
        for policy in (LISTED, NOBODY_LISTED):
            decision = decided(events, policy)
            line = json.dumps({"reason": decision.reason, "evidence": decision.evidence, "also": decision.also})
            assert secret_topic not in line
            assert "launch" not in line


# --- policy validation -------------------------------------------------------------------------


def test_bad_bridge_pattern_raises_naming_the_pattern():
    with pytest.raises(ValueError, match=r"bridge_sender_patterns\[1\] '@_telegram_\(': not a valid regular"):
        Policy.build(allowed=[], bridge_sender_patterns=[r"@ok_.*:.+", "@_telegram_("])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"allowed": ["general"]}, r"allowed\[0\] 'general'"),
        ({"allowed": ["#general"]}, r"allowed\[0\] '#general'"),
        ({"allowed": [], "exclude": ["users:*"]}, r"exclude\[0\] 'users:\*'"),
        ({"allowed": [], "exclude": ["!ok", ""]}, r"exclude\[1\]: expected a non-empty string"),
        ({"allowed": "!single"}, r"allowed: expected a list of strings, got the single string '!single'"),
        ({"allowed": [], "bridge_sender_patterns": [None]}, r"bridge_sender_patterns\[0\]: expected a non-empty"),
    ],
)
def test_bad_policy_entries_raise_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Policy.build(**kwargs)


def test_direct_construction_validates_too():
    with pytest.raises(ValueError, match=r"bridge_sender_patterns\[0\] '\['"):
        Policy(allowed=(), bridge_sender_patterns=("[",))
    with pytest.raises(ValueError, match="exclude: expected a tuple"):
        Policy(allowed=(), exclude=["#users:*"])  # type: ignore[arg-type]


# --- events met mid-history --------------------------------------------------------------------


def test_timeline_message_from_a_puppet_is_bridged():
    got = timeline_refusal(sender=PUPPET, event_type="m.room.message", state_key=None, policy=LISTED)
    assert got is not None
    reason, evidence = got
    assert (reason, evidence["signal"], evidence["sender"]) == ("bridged", "puppet_sender", PUPPET)


@pytest.mark.parametrize("bridge_type", ["m.bridge", "uk.half-shot.bridge"])
def test_timeline_bridge_state_is_bridged(bridge_type):
    got = timeline_refusal(sender=ALICE, event_type=bridge_type, state_key="discord/123", policy=LISTED)
    assert got == (
        "bridged",
        {"signal": "bridge_state", "event_type": bridge_type, "state_key": "discord/123", "sender": ALICE},
    )


def test_timeline_invite_of_a_puppet_by_a_person_is_bridged():
    got = timeline_refusal(sender=ALICE, event_type="m.room.member", state_key=PUPPET, policy=LISTED)
    assert got is not None and got[0] == "bridged" and got[1]["member"] == PUPPET


def test_timeline_encryption_state_is_encrypted():
    got = timeline_refusal(sender=ALICE, event_type="m.room.encryption", state_key="", policy=LISTED)
    assert got == ("encrypted", {"signal": "m.room.encryption", "sender": ALICE})


@pytest.mark.parametrize(
    ("event_type", "state_key"),
    [
        ("m.room.message", None),
        ("m.room.encrypted", None),  # one encrypted event is skipped by the chunker, not a room refusal
        ("m.room.member", BOB),
        ("m.room.name", ""),
        ("m.bridge", None),  # not state: a message that merely has a bridge-like type
        ("m.room.encryption", None),
    ],
)
def test_ordinary_timeline_events_change_nothing(event_type, state_key):
    assert timeline_refusal(sender=ALICE, event_type=event_type, state_key=state_key, policy=LISTED) is None


def test_policy_error_carries_the_field_and_entry_for_config_to_rename():
    with pytest.raises(PolicyError) as caught:
        Policy.build(allowed=["!ok"], exclude=[f"#users:{SERVER}", "users"])
    assert (caught.value.field, caught.value.entry) == ("exclude[1]", "users")
    assert isinstance(caught.value, ValueError)


# --- before a join ----------------------------------------------------------------------------------


def _stripped(event_type: str, state_key: str, content: dict, sender: str = "@alice:hs.example") -> dict:
    """One event of an invite's stripped state, as /sync gives it: no event id, no unsigned."""
    return {"type": event_type, "state_key": state_key, "content": content, "sender": sender}


def test_a_dm_invite_is_refused_before_joining_from_its_stripped_state():
    invite = [
        _stripped("m.room.create", "", {"room_version": "12"}),
        _stripped("m.room.join_rules", "", {"join_rule": "invite"}),
        _stripped("m.room.member", SERVICE_USER, {"membership": "invite", "is_direct": True}),
    ]
    facts = facts_before_join(ROOM, service_user=SERVICE_USER, direct_rooms={}, invite_state=invite)
    decision = decide_before_join(facts, Policy.build(allowed=[ROOM]), allowed_room_ids=frozenset({ROOM}))
    assert decision is not None and (decision.reason, decision.evidence["signal"]) == ("dm", "is_direct")


@pytest.mark.parametrize("source", ["invite_state", "summary"])
def test_an_encrypted_room_is_refused_before_joining(source):
    invite = (
        [_stripped("m.room.encryption", "", {"algorithm": "m.megolm.v1.aes-sha2"})] if source == "invite_state" else []
    )
    summary = {"room_id": ROOM, "encryption": "m.megolm.v1.aes-sha2", "name": "Board"} if source == "summary" else None
    facts = facts_before_join(ROOM, service_user=SERVICE_USER, direct_rooms={}, invite_state=invite, summary=summary)
    decision = decide_before_join(facts, Policy.build(allowed=[ROOM]), allowed_room_ids=frozenset({ROOM}))
    assert decision is not None and decision.reason == "encrypted"


def test_a_space_is_refused_and_an_unremarkable_room_is_left_to_the_inside_look():
    space = facts_before_join(
        ROOM,
        service_user=SERVICE_USER,
        direct_rooms={},
        summary={"room_type": "m.space", "name": "Hub", "join_rule": "public"},
    )
    assert (
        decide_before_join(space, Policy.build(allowed=[ROOM]), allowed_room_ids=frozenset({ROOM})).reason
        == "room_type"
    )
    plain = facts_before_join(
        ROOM,
        service_user=SERVICE_USER,
        direct_rooms={},
        summary={"name": "Garden", "join_rule": "public", "num_joined_members": 9},
    )
    assert decide_before_join(plain, Policy.build(allowed=[ROOM]), allowed_room_ids=frozenset({ROOM})) is None


def test_a_small_unnamed_private_room_is_refused_before_joining_by_its_member_count():
    facts = facts_before_join(
        ROOM, service_user=SERVICE_USER, direct_rooms={}, summary={"join_rule": "invite", "num_joined_members": 2}
    )
    decision = decide_before_join(facts, Policy.build(allowed=[ROOM]), allowed_room_ids=frozenset({ROOM}))
    assert (decision.reason, decision.evidence["signal"], decision.evidence["joined_count"]) == (
        "dm",
        "two_party_private",
        2,
    )


def test_the_rooms_entry_alias_is_checked_against_the_exclusions_before_joining():
    facts = facts_before_join(ROOM, service_user=SERVICE_USER, direct_rooms={}, named_by=[f"#Patrons:{SERVER}"])
    decision = decide_before_join(
        facts, Policy.build(allowed=[f"#Patrons:{SERVER}"]), allowed_room_ids=frozenset({ROOM})
    )
    assert (decision.reason, decision.evidence["signal"]) == ("excluded", "named_by")


def test_rooms_star_never_makes_an_invite_a_reason_to_join():
    facts = facts_before_join(
        ROOM,
        service_user=SERVICE_USER,
        direct_rooms={},
        summary={"name": "Garden", "join_rule": "public", "num_joined_members": 9},
    )
    decision = decide_before_join(facts, Policy.build(allowed=["*"]), allowed_room_ids=frozenset())
    assert decision is not None and decision.reason == "not_allowed"

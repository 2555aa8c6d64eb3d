"""Scope properties over arbitrary rooms: whatever else is true, an encrypted or bridged room is
never admitted, the reported reasons are exactly the rules that match (first one wins), and
reading any JSON as room state never raises."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import HealthCheck, given, settings, strategies as st

from scope import (
    BUILTIN_EXCLUDE,
    REASONS,
    REFUSAL_RULES,
    Member,
    Policy,
    RoomFacts,
    decide,
    decide_before_join,
    facts_before_join,
    facts_from_state,
)

SERVICE_USER = "@huginn-reader:hs.example"
PROPERTY_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

localparts = st.sampled_from(
    [
        "alice",
        "bob",
        "carol",
        "_discord_42",
        "discord_7",
        "discordbot",
        "discordia_fan",
        "users",
        "members",
        "general",
        "huginn-reader",
    ]
)
servers = st.sampled_from(["hs.example", "other.example", "x.y:8448"])
user_ids = st.builds(lambda local, server: f"@{local}:{server}", localparts, servers)
aliases = st.builds(lambda local, server: f"#{local}:{server}", localparts, servers)
room_ids = st.sampled_from(["!roomA", "!roomB", "!k3vQm8T2pXzN4rB7cYw1eHdL9sFgA6uJoViRt5qK0nM"])
memberships = st.sampled_from(["join", "invite", "leave", "ban", "knock", "unknown"])
members = st.builds(Member, user_id=user_ids, membership=memberships, is_direct=st.booleans())
bridge_entries = st.tuples(st.sampled_from(["m.bridge", "uk.half-shot.bridge"]), st.text(max_size=8))


@st.composite
def room_facts(draw, *, encryption=None, bridge_state=None) -> RoomFacts:
    return RoomFacts(
        room_id=draw(room_ids),
        canonical_alias=draw(st.none() | aliases),
        alt_aliases=tuple(draw(st.lists(aliases, max_size=3))),
        name=draw(st.none() | st.sampled_from(["General", "Mods"])),
        join_rule=draw(st.none() | st.sampled_from(["public", "invite", "knock", "restricted"])),
        encryption=draw(encryption if encryption is not None else st.none() | st.just("m.megolm.v1.aes-sha2")),
        bridge_state=tuple(draw(bridge_state if bridge_state is not None else st.lists(bridge_entries, max_size=2))),
        members=tuple(draw(st.lists(members, max_size=6))),
        service_user=SERVICE_USER,
        in_m_direct=draw(st.booleans()),
    )


policies = st.builds(
    lambda allowed, exclude: Policy.build(allowed=allowed, exclude=exclude),
    allowed=st.lists(st.sampled_from(["*"]) | room_ids | aliases, max_size=4),
    exclude=st.lists(room_ids | aliases | st.builds(lambda local: f"#{local}:*", localparts), max_size=3),
)
allowed_id_sets = st.frozensets(room_ids, max_size=3)


@PROPERTY_SETTINGS
@given(room_facts(encryption=st.sampled_from(["m.megolm.v1.aes-sha2", "unknown"])), policies, allowed_id_sets)
def test_an_encrypted_room_is_never_admitted(facts, policy, allowed_ids):
    decision = decide(facts, policy, allowed_room_ids=allowed_ids)
    assert not decision.admitted
    assert "encrypted" in (decision.reason, *decision.also)


@PROPERTY_SETTINGS
@given(room_facts(bridge_state=st.lists(bridge_entries, min_size=1, max_size=3)), policies, allowed_id_sets)
def test_a_room_with_bridge_state_is_never_admitted(facts, policy, allowed_ids):
    decision = decide(facts, policy, allowed_room_ids=allowed_ids)
    assert not decision.admitted
    assert "bridged" in (decision.reason, *decision.also)


@PROPERTY_SETTINGS
@given(
    room_facts(),
    policies,
    allowed_id_sets,
    st.sampled_from(["@_discord_1:a.b", "@discord_2:c", "@discordbot:d"]),
    memberships,
)
def test_a_room_with_a_discord_puppet_in_any_membership_is_never_admitted(
    facts, policy, allowed_ids, puppet, membership
):
    with_puppet = replace(facts, members=(*facts.members, Member(puppet, membership, False)))
    decision = decide(with_puppet, policy, allowed_room_ids=allowed_ids)
    assert not decision.admitted
    assert "bridged" in (decision.reason, *decision.also)


@PROPERTY_SETTINGS
@given(room_facts(), policies, allowed_id_sets)
def test_reason_and_also_are_exactly_the_matching_rules_in_table_order(facts, policy, allowed_ids):
    matching = [rule.reason for rule in REFUSAL_RULES if rule.check(facts, policy, allowed_ids) is not None]
    decision = decide(facts, policy, allowed_room_ids=allowed_ids)
    if matching:
        assert (decision.admitted, decision.reason, decision.also) == (False, matching[0], tuple(matching[1:]))
    else:
        assert (decision.admitted, decision.reason, decision.also) == (True, "admitted", ())
    assert set(decision.also) <= set(REASONS)
    assert decision.alias == facts.canonical_alias
    json.dumps(decision.evidence)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=6)
    | st.sampled_from(["m.room.member", "m.room.encryption", "m.bridge", "m.room.canonical_alias", "", "join"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "state_key",
                    "content",
                    "unsigned",
                    "prev_content",
                    "membership",
                    "is_direct",
                    "alias",
                    "alt_aliases",
                    "name",
                    "join_rule",
                    "algorithm",
                ]
            ),
            inner,
            max_size=6,
        )
    ),
    max_leaves=30,
)


@PROPERTY_SETTINGS
@given(st.lists(json_values, max_size=8), st.dictionaries(st.text(max_size=4), json_values, max_size=3))
def test_reading_any_json_as_state_never_raises(state, direct):
    facts = facts_from_state("!roomA", state, service_user=SERVICE_USER, direct_rooms=direct)
    decision = decide(facts, Policy.build(allowed=["*"]), allowed_room_ids=frozenset())
    json.dumps(decision.evidence)


# --- the built-in roster lock: every name, any case -------------------------------------------------

roster_localparts = st.sampled_from([entry[1:].split(":")[0] for entry in BUILTIN_EXCLUDE])
any_case = st.builds(
    lambda word, flips: "".join(ch.upper() if flip else ch for ch, flip in zip(word, flips + [False] * len(word))),
    roster_localparts,
    st.lists(st.booleans(), max_size=10),
)
roster_aliases = st.builds(
    lambda local, server: f"#{local}:{server}", any_case, st.sampled_from(["hs.example", "Other.Example", "x.y:8448"])
)
slots = st.sampled_from(["canonical", "alt", "named_by"])


@PROPERTY_SETTINGS
@given(room_facts(), roster_aliases, slots, policies, allowed_id_sets)
def test_a_roster_room_is_never_admitted_by_whatever_name_or_case(facts, alias, slot, policy, allowed_ids):
    if slot == "canonical":
        facts = replace(facts, canonical_alias=alias)
    elif slot == "alt":
        facts = replace(facts, alt_aliases=(*facts.alt_aliases, alias))
    else:
        facts = replace(facts, named_by=(*facts.named_by, alias))
    decision = decide(facts, policy, allowed_room_ids=allowed_ids | {facts.room_id})
    assert not decision.admitted
    assert "excluded" in (decision.reason, *decision.also)
    before = decide_before_join(replace(facts, complete=False), policy, allowed_room_ids=allowed_ids | {facts.room_id})
    assert before is not None and "excluded" in (before.reason, *before.also)


@PROPERTY_SETTINGS
@given(room_facts(), st.lists(aliases, max_size=3), policies, allowed_id_sets)
def test_extra_names_only_ever_add_refusals(facts, extra, policy, allowed_ids):
    """A name the room was found by can make an exclusion match; it can never admit a room."""
    plain = decide(facts, policy, allowed_room_ids=allowed_ids)
    named = decide(replace(facts, named_by=tuple(extra)), policy, allowed_room_ids=allowed_ids)
    assert set((plain.reason, *plain.also)) - {"admitted"} <= set((named.reason, *named.also))


# --- before a join: partial facts may refuse, never admit ------------------------------------------


@PROPERTY_SETTINGS
@given(room_facts(), policies, allowed_id_sets, st.none() | st.integers(min_value=0, max_value=5))
def test_partial_facts_never_admit_and_a_refusal_they_prove_survives_the_join(facts, policy, allowed_ids, count):
    partial = replace(facts, members=(), complete=False, joined_count=count)
    before = decide_before_join(partial, policy, allowed_room_ids=allowed_ids)
    assert before is None or not before.admitted
    if before is not None and before.reason in ("bridged", "encrypted", "room_type", "excluded"):
        # What showed before the join is still there inside: the full decision refuses it too.
        assert before.reason in (
            decide(facts, policy, allowed_room_ids=allowed_ids).reason,
            *decide(facts, policy, allowed_room_ids=allowed_ids).also,
        )


@PROPERTY_SETTINGS
@given(
    st.lists(json_values, max_size=6),
    st.none()
    | st.dictionaries(
        st.sampled_from(
            [
                "room_id",
                "encryption",
                "room_type",
                "join_rule",
                "name",
                "canonical_alias",
                "num_joined_members",
                "world_readable",
            ]
        ),
        json_values,
        max_size=6,
    ),
)
def test_reading_any_json_as_pre_join_facts_never_raises(invite_state, summary):
    facts = facts_before_join(
        "!roomA", service_user=SERVICE_USER, direct_rooms={}, invite_state=invite_state, summary=summary
    )
    assert not facts.complete
    decision = decide_before_join(facts, Policy.build(allowed=["!roomA"]), allowed_room_ids=frozenset({"!roomA"}))
    json.dumps(decision.evidence if decision else None)

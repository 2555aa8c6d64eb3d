"""Scope properties over arbitrary rooms: whatever else is true, an encrypted or bridged room is
never admitted, the reported reasons are exactly the rules that match (first one wins), and
reading any JSON as room state never raises."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scope import REASONS, REFUSAL_RULES, Member, Policy, RoomFacts, decide, facts_from_state

SERVICE_USER = "@huginn-reader:hs.example"
PROPERTY_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

localparts = st.sampled_from(["alice", "bob", "carol", "_discord_42", "discord_7", "discordbot", "discordia_fan",
                              "users", "members", "general", "huginn-reader"])
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
@given(room_facts(), policies, allowed_id_sets, st.sampled_from(["@_discord_1:a.b", "@discord_2:c", "@discordbot:d"]),
       memberships)
def test_a_room_with_a_discord_puppet_in_any_membership_is_never_admitted(facts, policy, allowed_ids, puppet, membership):
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
    st.none() | st.booleans() | st.integers() | st.text(max_size=6)
    | st.sampled_from(["m.room.member", "m.room.encryption", "m.bridge", "m.room.canonical_alias", "", "join"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "state_key", "content", "unsigned", "prev_content", "membership", "is_direct",
                         "alias", "alt_aliases", "name", "join_rule", "algorithm"]),
        inner, max_size=6,
    ),
    max_leaves=30,
)


@PROPERTY_SETTINGS
@given(st.lists(json_values, max_size=8), st.dictionaries(st.text(max_size=4), json_values, max_size=3))
def test_reading_any_json_as_state_never_raises(state, direct):
    facts = facts_from_state("!roomA", state, service_user=SERVICE_USER, direct_rooms=direct)
    decision = decide(facts, Policy.build(allowed=["*"]), allowed_room_ids=frozenset())
    json.dumps(decision.evidence)

"""Scope: which rooms and senders may be read, with reasons. Pure: no I/O, no nio, no index.

``facts_from_state`` reads a room's state into ``RoomFacts`` (``facts_before_join``: what shows before
a join); ``decide`` runs the refusal table in ``scope/rules.py`` over them (``decide_before_join``:
the refusals partial facts prove); ``timeline_refusal`` judges one event met mid-history.
"""

from scope.errors import PolicyError
from scope.facts import BRIDGE_STATE_TYPES, Member, RoomFacts, facts_before_join, facts_from_state
from scope.rules import (
    ADMITTED,
    BUILTIN_EXCLUDE,
    DEFAULT_BRIDGE_SENDERS,
    REASONS,
    REFUSAL_RULES,
    Decision,
    Policy,
    Rule,
    decide,
    decide_before_join,
    is_alias,
    is_excluded,
    is_room_id,
    timeline_refusal,
)

__all__ = [
    "ADMITTED",
    "BRIDGE_STATE_TYPES",
    "BUILTIN_EXCLUDE",
    "DEFAULT_BRIDGE_SENDERS",
    "REASONS",
    "REFUSAL_RULES",
    "Decision",
    "Member",
    "Policy",
    "PolicyError",
    "RoomFacts",
    "Rule",
    "decide",
    "decide_before_join",
    "facts_before_join",
    "facts_from_state",
    "is_alias",
    "is_excluded",
    "is_room_id",
    "timeline_refusal",
]

"""Scope: which rooms and senders may be read, with reasons. Pure: no I/O, no nio, no index.

``facts_from_state`` reads a room's state into ``RoomFacts``; ``decide`` runs the refusal table in
``scope/rules.py`` over them; ``timeline_refusal`` judges one event met mid-history.
"""

from scope.facts import BRIDGE_STATE_TYPES, Member, RoomFacts, facts_from_state
from scope.rules import (
    ADMITTED,
    BUILTIN_EXCLUDE,
    DEFAULT_BRIDGE_SENDERS,
    REASONS,
    REFUSAL_RULES,
    Decision,
    Policy,
    PolicyError,
    Rule,
    decide,
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
    "facts_from_state",
    "is_alias",
    "is_excluded",
    "is_room_id",
    "timeline_refusal",
]

"""Room facts: the few things about a room that scope decisions look at, read from its state.

Owns: ``Member``, ``RoomFacts`` and ``facts_from_state``, which turns the raw list that
``GET /rooms/{id}/state`` returns (plus the service user's ``m.direct`` account data) into
``RoomFacts``.

Must not: do I/O, decide anything (that is ``scope/rules.py``), raise on a malformed state entry
(it is skipped), or keep any text a person wrote beyond room names and aliases.

Rules of reading, each chosen so that a doubtful entry errs toward refusing the room:

- An entry is used only if it is a dict whose ``type`` and ``state_key`` are strings. A
  ``content`` that is not a dict reads as ``{}``.
- ``m.room.encryption`` (any state_key) makes the room encrypted even if its ``algorithm`` is
  missing or not a string (a redacted encryption event keeps no content); the algorithm then
  reads as ``"unknown"``. Matrix has no way to turn encryption off, so presence is the fact.
- ``m.bridge`` and ``uk.half-shot.bridge`` (any state_key, any content, even ``{}``) are recorded
  as bridge state. An emptied bridge event still says a bridge was here.
- ``m.room.member`` gives a ``Member`` for its state_key. ``is_direct`` is read from the content
  *and* from ``unsigned.prev_content``: Synapse puts ``is_direct`` only on the invite, so once the
  invitee joins, current state holds it only as the previous content. Any value but absent,
  ``null`` or ``false`` counts as set. A membership that is not a string reads as ``"unknown"``
  (the member still counts for puppet checks, not for the two-party count).
- ``m.room.name`` / ``m.room.canonical_alias`` / ``m.room.join_rules`` are read from state_key
  ``""`` only, as clients do. An empty or blank name is no name.
- If the same (type, state_key) appears twice (it should not), the later entry wins, except that
  a member's ``is_direct`` is kept if either entry had it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

BRIDGE_STATE_TYPES: tuple[str, ...] = ("m.bridge", "uk.half-shot.bridge")
ENCRYPTION_STATE_TYPE = "m.room.encryption"
MEMBER_STATE_TYPE = "m.room.member"
UNKNOWN_ALGORITHM = "unknown"
UNKNOWN_MEMBERSHIP = "unknown"


@dataclass(frozen=True, slots=True)
class Member:
    """One ``m.room.member`` state entry. ``is_direct`` is true if the content or
    ``unsigned.prev_content`` carried it."""

    user_id: str
    membership: str  # join, invite, leave, ban, knock, or "unknown" when malformed
    is_direct: bool


@dataclass(frozen=True, slots=True)
class RoomFacts:
    """What scope knows about one room. Built by ``facts_from_state``; tests may build it directly."""

    room_id: str
    canonical_alias: str | None
    alt_aliases: tuple[str, ...]
    name: str | None
    join_rule: str | None
    encryption: str | None  # algorithm from m.room.encryption; None if the room has none
    bridge_state: tuple[tuple[str, str], ...]  # (event type, state_key), sorted
    members: tuple[Member, ...]  # sorted by user id
    service_user: str
    in_m_direct: bool  # the room is listed under any key of the service user's m.direct

    @property
    def aliases(self) -> tuple[str, ...]:
        """Canonical alias first, then the alt aliases: every published name of the room."""
        head = (self.canonical_alias,) if self.canonical_alias else ()
        return head + tuple(alias for alias in self.alt_aliases if alias != self.canonical_alias)


def facts_from_state(
    room_id: str,
    state_events: list[dict[str, Any]],
    *,
    service_user: str,
    direct_rooms: Mapping[str, Sequence[str]],
) -> RoomFacts:
    """Read ``RoomFacts`` from a room's current state. Never raises on malformed entries."""
    canonical_alias: str | None = None
    alt_aliases: tuple[str, ...] = ()
    name: str | None = None
    join_rule: str | None = None
    encryption: str | None = None
    bridge_state: set[tuple[str, str]] = set()
    members: dict[str, Member] = {}

    for entry in state_events if isinstance(state_events, (list, tuple)) else ():
        if not isinstance(entry, dict):
            continue
        event_type, state_key = entry.get("type"), entry.get("state_key")
        if not isinstance(event_type, str) or not isinstance(state_key, str):
            continue
        content = _as_dict(entry.get("content"))

        if event_type == ENCRYPTION_STATE_TYPE:
            algorithm = content.get("algorithm")
            encryption = algorithm if isinstance(algorithm, str) and algorithm else UNKNOWN_ALGORITHM
        elif event_type in BRIDGE_STATE_TYPES:
            bridge_state.add((event_type, state_key))
        elif event_type == MEMBER_STATE_TYPE:
            if not state_key:
                continue
            member = _member(state_key, content, _as_dict(entry.get("unsigned")))
            earlier = members.get(state_key)
            if earlier is not None and earlier.is_direct and not member.is_direct:
                member = Member(member.user_id, member.membership, True)
            members[state_key] = member
        elif state_key != "":
            continue
        elif event_type == "m.room.canonical_alias":
            alias = content.get("alias")
            canonical_alias = alias if isinstance(alias, str) and alias else None
            alt = content.get("alt_aliases")
            alt_aliases = tuple(a for a in alt if isinstance(a, str) and a) if isinstance(alt, list) else ()
        elif event_type == "m.room.name":
            room_name = content.get("name")
            name = room_name if isinstance(room_name, str) and room_name.strip() else None
        elif event_type == "m.room.join_rules":
            rule = content.get("join_rule")
            join_rule = rule if isinstance(rule, str) else None

    return RoomFacts(
        room_id=room_id,
        canonical_alias=canonical_alias,
        alt_aliases=alt_aliases,
        name=name,
        join_rule=join_rule,
        encryption=encryption,
        bridge_state=tuple(sorted(bridge_state)),
        members=tuple(members[user] for user in sorted(members)),
        service_user=service_user,
        in_m_direct=_listed_in_m_direct(room_id, direct_rooms),
    )


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _flag_set(value: Any) -> bool:
    # A malformed flag ("yes", 1) errs toward "direct": refusing a room is the safe side.
    return value is not None and value is not False


def _member(user_id: str, content: dict[str, Any], unsigned: dict[str, Any]) -> Member:
    membership = content.get("membership")
    previous = _as_dict(unsigned.get("prev_content"))
    return Member(
        user_id=user_id,
        membership=membership if isinstance(membership, str) else UNKNOWN_MEMBERSHIP,
        is_direct=_flag_set(content.get("is_direct")) or _flag_set(previous.get("is_direct")),
    )


def _listed_in_m_direct(room_id: str, direct_rooms: Mapping[str, Sequence[str]]) -> bool:
    if not isinstance(direct_rooms, Mapping):
        return False
    for rooms in direct_rooms.values():
        # Only real lists count: `room_id in "some string"` would test for a substring.
        if isinstance(rooms, (list, tuple)) and room_id in rooms:
            return True
    return False

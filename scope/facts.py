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
- ``m.room.create``'s ``type`` (``m.space``, …) is the room type; absent or not a string: a chat room.
  Its ``predecessor.room_id`` and ``m.room.tombstone``'s ``replacement_room`` link a room to the
  rooms an upgrade made it from and into; ``m.room.canonical_alias``'s ``unsigned.prev_content``
  gives the aliases it had before (an upgrade clears them in the old room).
- A name of only white space or invisible format characters (zero-width space, BOM) is no name.
- A bridge or encryption state entry whose ``state_key`` is present but not a string still counts.
- If the same (type, state_key) appears twice (it should not), the later entry wins, except that
  a member's ``is_direct`` is kept if either entry had it.

Before a join the homeserver shows less: ``facts_before_join`` reads what it does show (the invite's
stripped state, the room summary, the full state of a world-readable room) into the same
``RoomFacts`` with ``complete=False`` unless the full state was readable. Incomplete facts may only
*refuse* a room; a room they do not refuse is joined and decided again from inside.
"""

from __future__ import annotations

import dataclasses
import unicodedata
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
    room_type: str | None = None  # m.room.create's "type" (m.space, ...); None: a chat room
    # Other names the room goes by that its state does not publish: the ROOMS entry that found it,
    # directory aliases (GET /rooms/{id}/aliases). Exclusions match these too.
    named_by: tuple[str, ...] = ()
    # False when built from what the homeserver shows before a join (not the full state): the
    # member list is then unknown, and ``joined_count`` (the summary's) stands in for it.
    complete: bool = True
    joined_count: int | None = None
    # Room upgrades. ``predecessor``: m.room.create's predecessor.room_id (the room this one
    # replaced); ``successor``: m.room.tombstone's replacement_room (the room that replaced this
    # one); ``former_aliases``: the canonical and alt aliases the room had before its current
    # m.room.canonical_alias event (``unsigned.prev_content``). An upgrade moves a room's aliases to
    # its successor and clears them in the old room, so an exclusion by alias must still find the
    # old room by the names it had, and an exclusion by id must follow the upgrade both ways.
    predecessor: str | None = None
    successor: str | None = None
    former_aliases: tuple[str, ...] = ()

    @property
    def aliases(self) -> tuple[str, ...]:
        """Canonical alias first, then the alt aliases: every published name of the room."""
        head = (self.canonical_alias,) if self.canonical_alias else ()
        return head + tuple(alias for alias in self.alt_aliases if alias != self.canonical_alias)

    @property
    def all_names(self) -> tuple[str, ...]:
        """Every alias the room has or was named by: published aliases, then ``named_by``."""
        names = list(self.aliases)
        names += [name for name in self.named_by if name not in names]
        return tuple(names)


def facts_from_state(  # noqa: C901 - one pass over the state, one branch per state type, a dozen facts gathered
    room_id: str,
    state_events: list[dict[str, Any]],
    *,
    service_user: str,
    direct_rooms: Mapping[str, Sequence[str]],
    named_by: Sequence[str] = (),
) -> RoomFacts:
    """Read ``RoomFacts`` from a room's current state. Never raises on malformed entries.
    ``named_by``: other names the room goes by (the ROOMS entry, directory aliases)."""
    room_type: str | None = None
    canonical_alias: str | None = None
    alt_aliases: tuple[str, ...] = ()
    name: str | None = None
    join_rule: str | None = None
    encryption: str | None = None
    bridge_state: set[tuple[str, str]] = set()
    members: dict[str, Member] = {}
    predecessor: str | None = None
    successor: str | None = None
    former_aliases: tuple[str, ...] = ()

    for entry in state_events if isinstance(state_events, (list, tuple)) else ():
        if not isinstance(entry, dict):
            continue
        event_type, state_key = entry.get("type"), entry.get("state_key")
        if not isinstance(event_type, str) or state_key is None:
            continue
        content = _as_dict(entry.get("content"))
        if not isinstance(state_key, str):
            # Malformed, but present: for the types that refuse a room it still counts (a doubtful
            # source errs toward refusing); for the rest it is no state at all.
            if event_type == ENCRYPTION_STATE_TYPE:
                encryption = encryption or UNKNOWN_ALGORITHM
            elif event_type in BRIDGE_STATE_TYPES:
                bridge_state.add((event_type, repr(state_key)))
            continue

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
            canonical_alias, alt_aliases = _alias_content(content)
            before, before_alt = _alias_content(_as_dict(_as_dict(entry.get("unsigned")).get("prev_content")))
            former_aliases = tuple(dict.fromkeys(((before,) if before else ()) + before_alt))
        elif event_type == "m.room.name":
            room_name = content.get("name")
            name = room_name if isinstance(room_name, str) and _visible(room_name) else None
        elif event_type == "m.room.join_rules":
            rule = content.get("join_rule")
            join_rule = rule if isinstance(rule, str) else None
        elif event_type == "m.room.create":
            kind = content.get("type")
            room_type = kind if isinstance(kind, str) and kind else None
            predecessor = _str(_as_dict(content.get("predecessor")).get("room_id"))
        elif event_type == "m.room.tombstone":
            successor = _str(content.get("replacement_room"))

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
        room_type=room_type,
        named_by=_names(named_by),
        predecessor=predecessor,
        successor=successor,
        former_aliases=former_aliases,
    )


def facts_before_join(
    room_id: str,
    *,
    service_user: str,
    direct_rooms: Mapping[str, Sequence[str]],
    invite_state: Sequence[dict[str, Any]] = (),
    summary: Mapping[str, Any] | None = None,
    readable_state: Sequence[dict[str, Any]] | None = None,
    named_by: Sequence[str] = (),
) -> RoomFacts:
    """What the homeserver shows before a join, as ``RoomFacts``. Every source is optional:

    - ``readable_state``: the full current state of a world-readable room. When given, the facts
      are complete (exactly what a member would read).
    - ``invite_state``: the invite's stripped state (``rooms.invite.*.invite_state.events`` of
      /sync): create, join rules, name, canonical alias, encryption, the inviter's membership and
      the invite itself, whose content carries ``is_direct``. Stripped events have no
      ``unsigned``; they read as state events here.
    - ``summary``: the room summary (MSC3266 / ``GET /_matrix/client/v1/room_summary``):
      ``encryption``, ``room_type``, ``join_rule``, ``name``, ``canonical_alias``,
      ``num_joined_members``. A field present in the summary adds to the facts; it never erases
      what the state said (a doubtful source errs toward refusing).
    """
    events: list[dict[str, Any]] = list(readable_state or ()) + [e for e in invite_state if isinstance(e, dict)]
    facts = facts_from_state(room_id, events, service_user=service_user, direct_rooms=direct_rooms, named_by=named_by)
    summary = summary if isinstance(summary, Mapping) else {}
    # The older summary endpoint (im.nheko.summary) prefixes its field names: read both spellings.
    merged: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(key, str) and value is not None:
            merged.setdefault(key.removeprefix("im.nheko.summary."), value)
    summary = merged
    encryption = facts.encryption
    if encryption is None and summary.get("encryption") is not None:
        algorithm = summary.get("encryption")
        encryption = algorithm if isinstance(algorithm, str) and algorithm else UNKNOWN_ALGORITHM
    room_type = facts.room_type or _str(summary.get("room_type"))
    join_rule = facts.join_rule or _str(summary.get("join_rule"))
    summary_name = _str(summary.get("name"))
    name = facts.name or (summary_name if summary_name and _visible(summary_name) else None)
    canonical = facts.canonical_alias or _str(summary.get("canonical_alias"))
    count = summary.get("num_joined_members")
    return dataclasses.replace(
        facts,
        canonical_alias=canonical,
        name=name,
        join_rule=join_rule,
        encryption=encryption,
        room_type=room_type,
        complete=readable_state is not None,
        joined_count=count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None,
    )


def _str(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return value


def _visible(text: str) -> bool:
    """Whether a name shows anything: not only white space and invisible format characters
    (zero-width space, joiners, marks, BOM), which would pass for a name and switch off the DM check."""
    return any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in text)


def _alias_content(content: dict[str, Any]) -> tuple[str | None, tuple[str, ...]]:
    alias = content.get("alias")
    alt = content.get("alt_aliases")
    alt_aliases = tuple(a for a in alt if isinstance(a, str) and a) if isinstance(alt, list) else ()
    return (alias if isinstance(alias, str) and alias else None), alt_aliases


def _names(values: Sequence[str]) -> tuple[str, ...]:
    seen: list[str] = []
    for value in values if isinstance(values, (list, tuple)) else ():
        if isinstance(value, str) and value and value not in seen:
            seen.append(value)
    return tuple(seen)


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

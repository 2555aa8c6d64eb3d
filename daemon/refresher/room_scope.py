"""Scope as the refresher reaches it: the homeserver reads that feed ``scope.decide``.

Owns: resolving the ``ROOMS`` aliases, reading the service user's ``m.direct``, and reading one
room's state into a decision — as functions over the ``MatrixSource`` port, so the refresher and
``huginn-chat rooms`` take the very same steps and cannot drift apart.

Must not: decide anything itself (``scope`` does), join a room, or write anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.ports import MatrixError, MatrixSource
from scope import Decision, Policy, RoomFacts, decide, facts_from_state


@dataclass(frozen=True)
class AliasProblem:
    """A ``ROOMS`` alias that resolves to no room. ``why`` is the refresher's journal name."""

    alias: str
    why: str  # "alias_unknown" (the server has no such alias) | "alias_unresolvable" (the call failed)
    error: str | None = None


async def resolve_allowed(matrix: MatrixSource, policy: Policy) -> tuple[dict[str, str], list[AliasProblem]]:
    """The rooms ``ROOMS`` names, as ``{room_id: the entry that named it}``: ids as they are,
    aliases through the directory, ``*`` skipped (it admits every joined room without naming one).
    The entry is what to join by: an alias lets the homeserver find a room on another server,
    which a bare room id (room version 12 ids carry no server) cannot."""
    rooms: dict[str, str] = {}
    problems: list[AliasProblem] = []
    for entry in policy.allowed:
        if entry == "*":
            continue
        if entry.startswith("!"):
            rooms.setdefault(entry, entry)
            continue
        try:
            room_id = await matrix.resolve_alias(entry)
        except MatrixError as exc:
            problems.append(AliasProblem(entry, "alias_unresolvable", str(exc)))
            continue
        if room_id is None:
            problems.append(AliasProblem(entry, "alias_unknown"))
        else:
            rooms[room_id] = entry
    return rooms, problems


async def read_direct_rooms(matrix: MatrixSource) -> tuple[dict[str, list[str]], str | None]:
    """The service user's ``m.direct``, or ``({}, why)`` when it cannot be read: it is one DM
    signal among several, so not reading it must not stop anything (nor admit anything)."""
    try:
        return await matrix.direct_rooms(), None
    except MatrixError as exc:
        return {}, str(exc)


async def decide_room(
    matrix: MatrixSource,
    room_id: str,
    *,
    service_user: str,
    allowed_ids: set[str] | frozenset[str],
    direct_rooms: dict[str, list[str]],
    policy: Policy,
) -> tuple[RoomFacts, Decision]:
    """Read one room's state and let scope decide. Raises ``MatrixError`` if the state is unreadable."""
    state = await matrix.room_state(room_id)
    facts = facts_from_state(room_id, state, service_user=service_user, direct_rooms=direct_rooms)
    return facts, decide(facts, policy, allowed_room_ids=frozenset(allowed_ids))

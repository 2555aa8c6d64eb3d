"""Scope as the refresher reaches it: the homeserver reads that feed ``scope.decide``.

Owns: resolving the ``ROOMS`` aliases, reading the service user's ``m.direct``, reading one
room's state into a decision, and gathering what the homeserver shows of a room *before* a join
(the invite's stripped state, the room summary, the state of a world-readable room or of one the
service user left, its directory aliases) into a pre-join decision — as functions over the ``MatrixSource`` port, so the refresher
and ``huginn-chat scope`` take the very same steps and cannot drift apart.

Must not: decide anything itself (``scope`` does), join or leave a room, or write anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from daemon.ports import MatrixError, MatrixSource
from scope import (
    Decision,
    Policy,
    RoomFacts,
    decide,
    decide_before_join,
    facts_before_join,
    facts_from_state,
    is_alias,
)


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


async def exclusion_aliases(matrix: MatrixSource, policy: Policy, servers: Sequence[str]) -> dict[str, list[str]]:
    """``{room_id: [aliases]}`` for every exclusion alias the directory knows: each exact alias of
    ``EXCLUDE_ROOMS``, and each ``#name:*`` (the built-in roster lock included) on each server in
    ``servers`` (the service user's and those of the ROOMS aliases). The directory answers without
    a join, so a room with a directory-only roster alias is refused before anyone joins it. A
    lookup that fails is skipped: the inside look reads the room's aliases again."""
    found: dict[str, list[str]] = {}
    for entry in policy.effective_exclude:
        if not entry.startswith("#"):
            continue
        local, _, server = entry.partition(":")
        candidates = [f"{local}:{s}" for s in dict.fromkeys(servers)] if server == "*" else [entry]
        for alias in candidates:
            try:
                room_id = await matrix.resolve_alias(alias)
            except (MatrixError, ValueError):
                continue
            if room_id:
                found.setdefault(room_id, []).append(alias)
    return found


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
    named_by: Sequence[str] = (),
    state: list[dict[str, Any]] | None = None,
) -> tuple[RoomFacts, Decision]:
    """Read one room's state (and its directory aliases) and let scope decide. ``named_by``: the
    ROOMS entry that found it; ``state``: the room's state when the caller just read it (this
    turn's, never an older one). Raises ``MatrixError`` if the state is unreadable."""
    if state is None:
        state = await matrix.room_state(room_id)
    # A directory alias may be the only name an exclusion matches: not reading them is a failure
    # of the room (MatrixError), never a reason to read it without them.
    names = [*named_by, *await matrix.room_aliases(room_id)]
    facts = facts_from_state(room_id, state, service_user=service_user, direct_rooms=direct_rooms, named_by=names)
    return facts, decide(facts, policy, allowed_room_ids=frozenset(allowed_ids))


@dataclass(frozen=True)
class PreJoin:
    """What was seen of a room before joining it, and the refusal it proves (None: join, then decide)."""

    facts: RoomFacts
    refusal: Decision | None
    sources: tuple[str, ...]  # which pre-join sources answered: invite_state, summary, readable_state
    # The full decision where the facts are complete (a world-readable room's state), else None.
    decision: Decision | None = None


async def decide_before_joining(
    matrix: MatrixSource,
    room_id: str,
    *,
    entry: str | None,
    invite_state: Sequence[dict[str, Any]] | None,
    service_user: str,
    allowed_ids: set[str] | frozenset[str],
    direct_rooms: dict[str, list[str]],
    policy: Policy,
    named_by: Sequence[str] = (),
) -> PreJoin:
    """Decide from what the homeserver shows without a join. ``entry``: the ROOMS entry that named
    the room (an alias is asked for the summary: it also finds a room on another server).
    A source that fails is skipped: missing facts never admit, they only make the join needed."""
    sources: list[str] = ["invite_state"] if invite_state else []
    summary: dict[str, Any] | None = None
    try:
        summary = await matrix.room_summary(entry if entry and is_alias(entry) else room_id)
    except MatrixError:
        summary = None
    if summary is not None and summary.get("room_id") not in (None, room_id):
        summary = None  # the alias moved between resolving and asking: not this room's summary
    if summary is not None:
        sources.append("summary")
    readable: list[dict[str, Any]] | None = None
    try:
        # The full state where the homeserver shows it without a join: a world-readable room, or
        # a room the service user left (Synapse shows the state as it was at the leave). The
        # latter is what keeps a room refused from inside from being joined again on every run.
        readable = await matrix.room_state(room_id)
        sources.append("readable_state")
    except MatrixError:
        readable = None  # 403: only members see it
    names = ([entry] if entry and is_alias(entry) else []) + list(named_by)
    if readable is not None:
        names += await _directory_aliases(matrix, room_id)
    facts = facts_before_join(
        room_id,
        service_user=service_user,
        direct_rooms=direct_rooms,
        invite_state=invite_state or (),
        summary=summary,
        readable_state=readable,
        named_by=names,
    )
    refusal = decide_before_join(facts, policy, allowed_room_ids=frozenset(allowed_ids))
    full = decide(facts, policy, allowed_room_ids=frozenset(allowed_ids)) if facts.complete else None
    return PreJoin(facts, refusal, tuple(sources), refusal or full)


async def _directory_aliases(matrix: MatrixSource, room_id: str) -> list[str]:
    """Before a join: the directory's aliases, or none when they cannot be read (the decision
    after the join reads them again, and fails the room if it cannot)."""
    try:
        return await matrix.room_aliases(room_id)
    except MatrixError:
        return []

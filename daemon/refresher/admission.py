"""Whether the refresher may read a room this run: joining, the membership check, leaving.

Owns: a room's way in (see docs/authority.md). A room not joined at the start of the run is first
decided from what the homeserver shows without a join (``room_scope.decide_before_joining``); a
refusal there is journalled ``room_refused`` with ``pre_join: true`` and the room is never joined
(a DM invite is never accepted). Otherwise the refresher records the room as its own
(``own_joins``), joins it, and decides from its full state; a room it joined itself and then
refuses is left at once (``room_left``). A room the operator joined the service user to is refused
and never read, but never left. At the start of each room's turn the service user's membership is
checked: a room it is no longer in (kicked, banned) is not read and its points and cursor go.

Must not: decide scope itself (``scope.decide`` and ``scope.decide_before_join`` do, fed by
``daemon.refresher.room_scope``), walk back into a room it was kicked or banned from, leave a
room the operator joined, or read a room's timeline (``daemon.refresher.reading`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from daemon.ports import MatrixError, MatrixSource
from daemon.refresher.own_joins import OwnJoins
from daemon.refresher.purge_outcomes import PurgeOutcomes
from daemon.refresher.reading import RoomRefusedMidHistory
from daemon.refresher.room_scope import decide_before_joining, decide_room
from daemon.refresher.run_state import RunState
from scope import Policy


@dataclass
class RunRooms:
    """What the homeserver said of the rooms at the start of the run, shared by every room's turn."""

    service_user: str
    allowed: dict[str, str]  # room id -> the ROOMS entry that named it
    joined: set[str]  # joined at the start of the run, plus what this run joined
    invites: dict[str, list[dict[str, Any]]]  # pending invites -> their stripped state
    direct_rooms: dict[str, list[str]]
    own: OwnJoins  # rooms the refresher joined itself: the only ones it may leave
    purges: PurgeOutcomes
    excluded_names: dict[str, list[str]] = field(default_factory=dict)  # room -> exclusion aliases naming it

    def names_of(self, room_id: str) -> list[str]:
        """Names the room goes by beyond its state: the ROOMS entry, directory exclusion aliases."""
        entry = self.allowed.get(room_id)
        return ([entry] if entry else []) + self.excluded_names.get(room_id, [])


@dataclass
class AdmittedRoom:
    """A room scope admitted from inside: its alias as decided, its facts, its state as read at the
    start of its turn, and its journal bound to it."""

    room_id: str
    alias: str | None
    facts: Any
    member_state: list[dict[str, Any]]
    log: Any


class Admission:
    def __init__(self, *, matrix: MatrixSource, policy: Policy, state: RunState, log: Any) -> None:
        self.matrix = matrix
        self.policy = policy
        self.state = state
        self.log = log

    async def admit(self, room_id: str, rooms: RunRooms) -> AdmittedRoom | bool:
        """The room, admitted, once the service user is in it and scope admits it from its state;
        else whether the room keeps its data (True when its facts could not be read: an error is
        not a reclassification)."""
        if room_id not in rooms.joined:
            joined = await self._join_if_admitted(room_id, rooms)
            if joined is not None:
                return joined
        # The start of the room's turn: read only a room the service user is in right now. The
        # room's state holds the service user's own m.room.member event (Synapse shows a room it
        # was kicked from or left as it was then), so one read serves both the membership check
        # and the decision; a state without that event, or a refused read, asks for it alone.
        try:
            room_state: list[dict[str, Any]] | None = await self.matrix.room_state(room_id)
        except MatrixError as exc:
            if exc.status not in (403, 404):
                self.state.fail(room_id, "room_state_unreadable", error=str(exc))
                return True
            room_state = None
        lost = await self._check_membership(room_id, rooms, own_membership(room_state, rooms.service_user))
        if lost is not None:
            return lost
        try:
            facts, decision = await decide_room(
                self.matrix,
                room_id,
                service_user=rooms.service_user,
                allowed_ids=frozenset(rooms.allowed),
                direct_rooms=rooms.direct_rooms,
                policy=self.policy,
                named_by=rooms.names_of(room_id),
                state=room_state,
            )
        except MatrixError as exc:
            self.state.fail(room_id, "room_state_unreadable", error=str(exc))
            return True
        log = self.log.bind(room_id=room_id, alias=decision.alias)
        if not decision.admitted:
            self.state.summary.rooms_refused += 1
            await self._refuse_joined(
                room_id, rooms, facts.all_names, decision.reason, decision.evidence, log, also=list(decision.also)
            )
            return False
        self.state.summary.rooms_admitted += 1
        log.info("room_admitted")
        # The state read above (None only when decide_room had to read it itself) gives the
        # display names a read starts from and the routing servers of the room's permalinks.
        return AdmittedRoom(room_id, decision.alias, facts, room_state or [], log)

    async def refuse_mid_history(self, room: AdmittedRoom, rooms: RunRooms, refused: RoomRefusedMidHistory) -> None:
        """An admitted room an event of its history refused: counted refused, not admitted."""
        self.state.summary.rooms_admitted -= 1
        self.state.summary.rooms_refused += 1
        await self._refuse_joined(
            room.room_id,
            rooms,
            room.facts.all_names,
            refused.reason,
            refused.evidence,
            room.log,
            also=[],
            mid_history=True,
        )

    async def _join_if_admitted(self, room_id: str, rooms: RunRooms) -> bool | None:
        """A room the service user was not in at the start of the run. Decide what the homeserver
        shows without a join; join only a room that no pre-join fact refuses and that ROOMS names.
        Returns None once joined (go on to decide from inside), else what ``admit`` returns."""
        entry = rooms.allowed.get(room_id)
        invited = room_id in rooms.invites
        if entry is not None and not invited:
            # Kicked or banned earlier: the room's moderators said no; the refresher does not
            # walk back in (and a ban would refuse the join anyway).
            removed = await self._kick_or_ban(room_id, rooms)
            if removed is not None:
                self._not_in_room(room_id, rooms, removed)
                return False
        pre = await decide_before_joining(
            self.matrix,
            room_id,
            entry=entry,
            invite_state=rooms.invites.get(room_id),
            service_user=rooms.service_user,
            allowed_ids=frozenset(rooms.allowed),
            direct_rooms=rooms.direct_rooms,
            policy=self.policy,
            named_by=rooms.names_of(room_id),
        )
        if pre.refusal is not None:
            d = pre.refusal
            self.state.summary.rooms_refused += 1
            self.log.info(
                "room_refused",
                room_id=room_id,
                alias=d.alias or entry,
                reason=d.reason,
                evidence=d.evidence,
                also=list(d.also),
                pre_join=True,
                invited=invited,
                sources=list(pre.sources),
            )
            self.state.purge_if_stored(room_id, d.reason, d.evidence)
            rooms.purges.refused_room(room_id, pre.facts.all_names)
            return False
        if entry is None:  # not named by ROOMS (cannot happen: pre-join refuses it as not_allowed)
            return False
        rooms.own.add(room_id)  # before the join: a crash must not leave a join we think the operator's
        try:
            got = await self.matrix.join(room_id if invited else entry)
        except MatrixError as exc:
            self.state.fail(room_id, "join_failed", error=str(exc), via="invite" if invited else "allowed")
            return True  # nothing read; what the index holds stays until the room is decided
        if got != room_id:  # the alias moved between resolving and joining: that room is ours too
            rooms.own.add(got)
            self.state.fail(room_id, "alias_moved", joined=got, error="the alias now names another room")
            await self._leave(got, rooms, "alias_moved", {"entry": entry, "expected": room_id}, self.log)
            return True
        self.state.summary.rooms_joined += 1
        self.log.info("room_joined", room_id=room_id, via="invite" if invited else "allowed", sources=list(pre.sources))
        rooms.joined.add(room_id)
        return None

    async def _refuse_joined(
        self,
        room_id: str,
        rooms: RunRooms,
        names: Sequence[str],
        reason: str,
        evidence: dict[str, Any],
        log: Any,
        **journal: Any,
    ) -> None:
        """A joined room found refused (from its state, or mid-history): journal it, drop what the
        index holds of it, and leave it if the refresher joined it itself."""
        log.info(
            "room_refused",
            reason=reason,
            evidence=evidence,
            **journal,
            pre_join=False,
            joined_by="refresher" if room_id in rooms.own else "operator",
        )
        self.state.purge_if_stored(room_id, reason, evidence)
        rooms.purges.refused_room(room_id, names)
        if room_id in rooms.own:
            await self._leave(room_id, rooms, reason, evidence, log)

    async def _kick_or_ban(self, room_id: str, rooms: RunRooms) -> dict[str, Any] | None:
        """Evidence that the service user was kicked or banned from the room, or None."""
        try:
            member = await self.matrix.membership(room_id)
        except MatrixError:
            return None
        if member is None:
            return None
        membership, sender = member.get("membership"), member.get("sender")
        if membership == "ban":
            return {"why": "banned", "membership": "ban", "by": sender}
        if membership == "leave" and sender not in (None, rooms.service_user):
            return {"why": "kicked", "membership": "leave", "by": sender}
        return None

    async def _check_membership(
        self, room_id: str, rooms: RunRooms, from_state: dict[str, Any] | None = None
    ) -> bool | None:
        """None while the service user is joined; else the room is not read (and what the index
        holds of it goes when it was kicked, banned or left). ``from_state``: the membership the
        room's state just showed; None: ask the homeserver for it."""
        member = from_state
        if member is None:
            try:
                member = await self.matrix.membership(room_id)
            except MatrixError as exc:
                self.state.fail(room_id, "membership_unreadable", error=str(exc))
                return True
        membership = (member or {}).get("membership")
        if membership == "join":
            return None
        sender = (member or {}).get("sender")
        why = {"ban": "banned", "invite": "not_joined", "knock": "not_joined"}.get(
            membership or "", "kicked" if membership == "leave" and sender not in (None, rooms.service_user) else "left"
        )
        self._not_in_room(room_id, rooms, {"why": why, "membership": membership, "by": sender})
        return False

    def _not_in_room(self, room_id: str, rooms: RunRooms, evidence: dict[str, Any]) -> None:
        """The service user is not in the room: nothing is read, its points and cursor go."""
        rooms.joined.discard(room_id)
        rooms.own.discard(room_id)
        self.state.purge_if_stored(room_id, evidence["why"], evidence)
        if room_id in rooms.allowed:  # ROOMS names it, and it cannot be read: the operator must look
            self.state.fail(room_id, evidence["why"], evidence=evidence)
        else:
            self.log.info("room_not_joined", room_id=room_id, evidence=evidence)

    async def _leave(self, room_id: str, rooms: RunRooms, reason: str, evidence: dict[str, Any], log: Any) -> None:
        """Leave a room the refresher joined itself and scope refused."""
        try:
            await self.matrix.leave(room_id)
        except MatrixError as exc:
            self.state.fail(room_id, "leave_failed", error=str(exc), reason=reason)
            return
        rooms.own.discard(room_id)
        rooms.joined.discard(room_id)
        self.state.summary.rooms_left += 1
        log.info("room_left", room_id=room_id, reason=reason, evidence=evidence)


def own_membership(state: Sequence[Any] | None, user_id: str) -> dict[str, Any] | None:
    """``{membership, sender}`` from the service user's own m.room.member event in a room's state,
    as ``MatrixSource.membership`` answers it; None when the state does not hold it."""
    for event in state or ():
        if not isinstance(event, dict) or event.get("type") != "m.room.member" or event.get("state_key") != user_id:
            continue
        content = event.get("content")
        membership = content.get("membership") if isinstance(content, dict) else None
        sender = event.get("sender")
        if isinstance(membership, str):
            return {"membership": membership, "sender": sender if isinstance(sender, str) else None}
    return None


def servers_of(service_user: str, entries: Any) -> list[str]:
    """The server names ``#name:*`` exclusions are looked up on: the service user's, and each
    ROOMS alias's."""
    servers = [service_user.partition(":")[2]]
    servers += [entry.partition(":")[2] for entry in entries if entry.startswith("#")]
    return [s for s in dict.fromkeys(servers) if s]

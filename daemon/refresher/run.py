"""The oneshot refresh run: the one writer of chunks, vectors and cursors.

Owns: the order of a run — check the index meta, learn who we are, resolve the allowed rooms,
decide every room's scope (through ``scope``) before joining it and again from inside, read each
admitted room's new events page by page, fold them (through ``chunker``), embed the changed
windows, write them, and only then advance the room's cursor. It journals one line per decision
and a run summary.

Joining and leaving (see docs/authority.md): a room not joined at the start of the run is first
decided from what the homeserver shows without a join (``room_scope.decide_before_joining``); a
refusal there is journalled ``room_refused`` with ``pre_join: true`` and the room is never joined
(a DM invite is never accepted). Otherwise the refresher records the room as its own
(``own_joins``), joins it, and decides from its full state; a room it joined itself and then
refuses is left at once (``room_left``). A room the operator joined the service user to is refused
and never read, but never left. At the start of each room's turn the service user's membership is
checked: a room it is no longer in (kicked, banned) is not read and its points and cursor go.

Must not: decide scope itself (``scope.decide`` and ``scope.timeline_refusal`` do), touch Qdrant
or nio directly (only the ports), log a token or any message text, or advance a cursor before the
room's writes were acknowledged.

Theory of operation, per admitted room:

    cursor = index.get_cursor(room)               # None: read from the start of history
    fold   = RoomFold(open_window = the cursor's open window, incremental = cursor is not None)
    for page in /messages from cursor.end:
        refuse the room if an event in it says bridged / encrypted   (scope.timeline_refusal)
        fold.provide(index windows holding the page's event ids)     (replays + edit/redaction targets)
        fold.feed(page)
        unknown redaction target? ask the homeserver what it was; a message (or unknowable) -> rebuild
        every ``checkpoint_events`` events read: CHECKPOINT
    CHECKPOINT

    CHECKPOINT = embed changed windows -> index.write_windows (write boundary 2)
                 -> index.set_cursor (write boundary 3)

A crash between the two boundaries leaves windows ahead of the cursor; the next run re-reads those
events and the fold recognises them as replays (see chunker/fold.py), so the index converges.

A room rebuild drops the room's cursor first (the spec's order), reads its history again in the
same run and upserts the windows it makes, and only then deletes the room's windows it did not
write (``prune_room``) and sets the cursor: until then readers keep finding the room's old points.
It writes once, at its end (no checkpoints: a part-way write of the open window would replace the
fuller old window of the same id), so it holds the room's windows in memory while it reads.
While it reads, the fold is given only windows this rebuild wrote (old ones have another layout or
chat version). If it fails half way the room keeps its old points and has no cursor, so the next
run rebuilds it again, except when the rebuild was for a redaction: then the old points go at once
(a redaction's text leaves in the same run's publication). Reading from the start never asks for
another rebuild.

Stopping (SIGTERM, SIGINT: ``daemon/refresher/stopping.py``). The stop is read at safe points only:
before each room's turn and after each page a room's read folded. A room stopped part-way is
checkpointed as it would be at its end (its windows written, then its cursor set to the page it
reached), so the next run reads on from there; a room rebuild stopped part-way ends as a failed
rebuild does (its old windows kept, no cursor: the next run rebuilds it). Rooms not reached keep
what the index holds of them (nothing is purged as out of scope), a full rebuild is not switched
in, and the run commits what it wrote and ends with ``run_interrupted`` and its own exit code.

A full rebuild (the index meta changed: model, dim, chat version) is the index adapter's
``reset``, which builds beside what is served; the run's ``commit(complete=...)`` switches it in
only when every admitted room finished (``complete``), else the old generation or collection keeps
serving and the next run resumes the rebuild. ``commit(compact=True)`` after a run that redacted,
purged or deleted anything makes the Edge adapter rewrite its shard without the dropped bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, cast

from chunker import chat_version
from chunker.events import Other, Redaction, parse_event
from chunker.fold import Bounds, Changes, PurgeSpan, RoomFold
from chunker.members import DisplayNames, clean_name, server_of, via_servers
from chunker.windows import Window, embed_line, embed_text
from daemon.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, HuginnError
from daemon.index import schema
from daemon.ports import Embedder, MatrixError, MatrixSource, Page
from daemon.index.port import IndexMeta, IndexWriter, RoomCursor, RoomEntry, SparseVector, WindowPoint
from daemon.refresher.own_joins import OwnJoins
from daemon.refresher.purges import load_purges
from daemon.refresher.retry import RetryingMatrix, RetryPolicy
from daemon.refresher.stopping import StopRequest
from daemon.safe_files import make_configured_dir, write_atomically
from daemon.refresher.room_scope import (
    decide_before_joining,
    decide_room,
    exclusion_aliases,
    read_direct_rooms,
    resolve_allowed,
)
from scope import Policy, timeline_refusal


@dataclass
class RunSummary:
    rooms_admitted: int = 0
    rooms_refused: int = 0
    rooms_failed: int = 0
    rooms_rebuilt: int = 0
    rooms_purged: int = 0
    rooms_joined: int = 0
    rooms_left: int = 0
    events_read: int = 0
    windows_written: int = 0
    windows_deleted: int = 0
    texts_embedded: int = 0
    index_rebuilt: bool = False
    seconds: float = 0.0
    # Where the time went, so a benchmark can hold ingest against the embedding bound.
    seconds_reading: float = 0.0  # waiting for the homeserver
    seconds_folding: float = 0.0  # parse, scrub, scope checks, fold, index lookups
    seconds_embedding: float = 0.0
    seconds_writing: float = 0.0  # write_windows and set_cursor
    # Homeserver calls through the port (one per call; nio's own rate-limit retries not counted):
    # the incremental cost of a run. Calls naming a room count against it; the rest (whoami,
    # joined rooms, invites, m.direct, aliases) are global.
    homeserver_requests: int = 0
    homeserver_requests_global: int = 0
    homeserver_requests_per_room: dict[str, int] = field(default_factory=dict)
    failed_rooms: list[str] = field(default_factory=list)
    # Every steward purge span as this run left it: {room (as typed), room_id, ts_from, ts_to,
    # state: applied | pending | unmatched, why}. `huginn-chat status` lists them.
    purges: list[dict[str, Any]] = field(default_factory=list)
    # Events read but not stored, by why (chunker.events.Other.kind: "encrypted", "malformed",
    # "redacted", "m.reaction", "m.image", "m.room.member", ...).
    events_skipped: dict[str, int] = field(default_factory=dict)
    rebuild_pending: bool = False  # a full rebuild is not switched in yet: the old index serves
    failures: dict[str, int] = field(default_factory=dict)  # why -> how many (rooms or steps)
    homeserver_retries: int = 0  # attempts beyond each call's first (daemon/refresher/retry.py)
    homeserver_faults: dict[str, int] = field(default_factory=dict)  # fault kind -> attempts that met it
    interrupted: str | None = None  # the signal that stopped the run at a safe point

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.rooms_failed else EXIT_OK


# A skipped event's kind is often its type or msgtype, which any room member chooses. The summary
# keeps the spec's own names (m.*) and a few of ours; anything else is counted as "custom_type",
# so a hostile sender can neither grow the summary without bound nor write text into it.
_SPEC_NAME = re.compile(r"m\.[a-z0-9_.]{1,60}")
_OWN_KINDS = frozenset({"encrypted", "redacted", "malformed", "edit_non_text", "empty"})
# Message vectors kept for reuse within a run (``Refresher._points``): enough for the open window
# and recent edits, ~12 MB at most as Python floats.
_LINE_VECTORS_KEPT = 1024


def skip_reason(kind: str) -> str:
    if kind in _OWN_KINDS or _SPEC_NAME.fullmatch(kind):
        return kind
    return "custom_type"


class _RoomRefused(HuginnError):
    """Signal: the room is refused mid-run (never leaves ``Refresher``)."""

    def __init__(self, reason: str, evidence: dict[str, Any]):
        super().__init__(reason)
        self.reason = reason
        self.evidence = evidence


class _Interrupted(HuginnError):
    """Signal: a stop was asked for in the middle of a room rebuild (never leaves ``Refresher``)."""


class _NeedRebuild(HuginnError):
    """Signal: the room's windows must be rebuilt from its history (never leaves ``Refresher``)."""

    def __init__(self, why: str, evidence: dict[str, Any]):
        super().__init__(why)
        self.why = why
        self.evidence = evidence


@dataclass(frozen=True)
class RefreshOptions:
    bounds: Bounds = Bounds()
    page_size: int = 200
    checkpoint_events: int = 500  # bounds the work a crash can cost, and the memory of a backfill
    progress_every_s: float = 10.0
    state_dir: Path | None = None  # where purges.json lives; None: no purges
    retry: RetryPolicy | None = None  # None: a homeserver failure fails its room at once


class Refresher:
    def __init__(
        self,
        *,
        matrix: MatrixSource,
        index: IndexWriter,
        embedder: Embedder,
        policy: Policy,
        log: Any,
        options: RefreshOptions = RefreshOptions(),
        clock: Callable[[], float] = time.time,
        progress: Callable[[str, int, int, int, int], None] | None = None,
        stop: StopRequest | None = None,
    ) -> None:
        self.summary = RunSummary()
        self.stop = stop if stop is not None else StopRequest()
        self._stopped_in: str | None = None  # the room whose read a stop cut short
        # Retries sit under the counter: homeserver_requests stays one per call, however many tries.
        self._retrying = RetryingMatrix(matrix, options.retry, log, clock=time.monotonic) if options.retry else None
        self.matrix = cast(MatrixSource, _CountingMatrix(self._retrying or matrix, self.summary))
        self.index = index
        self.embedder = embedder
        self.policy = policy
        self.log = log
        self.options = options
        self.clock = clock
        self.progress = progress
        self.chat_version = chat_version(options.bounds)
        # Rooms holding windows or a cursor: read from the index once per run (a full scroll of
        # the meta points), then kept in step with this run's own writes and purges.
        self._stored_rooms: set[str] = set()
        # For the progress bar: rooms this run considers, and how many were finished before the current one.
        self._rooms_total = 0
        self._rooms_before = 0
        # Rooms whose turn did not finish: a full rebuild is not switched in while any remain.
        self._unfinished: set[str | None] = set()
        # The run deleted or rewrote stored text (redaction, purge, delete): compact at commit.
        self._text_dropped = False
        # Room rebuilds in progress: {room_id: point ids written by this rebuild}.
        self._rebuilding: dict[str, set[str]] = {}
        self._deferred_cursor: dict[str, RoomCursor] = {}
        # Joined room -> its newest event id as this run's /sync saw it (none: unknown, read it).
        self._latest_event: dict[str, str] = {}
        # Where the stream stood at this run's opening /sync: the next run's ``since`` (refresher.idle).
        self.sync_next_batch: str | None = None
        # The newest checkpoint being embedded and written while the run reads on (``_checkpoint``).
        self._in_flight: _Flight | None = None
        # Room -> checkpoint sequence number -> the windows that checkpoint took from the room's fold
        # and has not written yet: a write releases the fold's settled windows but those
        # (``_write_checkpoint``). Before, only the newest take's write released, and in a long
        # backfill a later checkpoint has always taken before the one before it writes: the fold
        # kept every window of the run (~230 MB at 1M messages, bench/scale.py).
        self._checkpoint_seq = 0
        self._unwritten_takes: dict[str, dict[int, frozenset[str]]] = {}
        # Each admitted room's state as read at the start of its turn: the display names a read
        # starts from (chunker.members.DisplayNames); dropped when the turn ends.
        self._member_state: dict[str, list[dict[str, Any]]] = {}
        # Message lines embedded lately, oldest first (``_points``), at most _LINE_VECTORS_KEPT.
        self._line_vectors: dict[str, list[float]] = {}

    # ------------------------------------------------------------------ run

    async def run(self) -> RunSummary:
        started = self.clock()
        # The token first: a refused token must leave the index as it was, never reset it.
        service_user = await self.matrix.whoami()
        # The index meta check (a new or changed index is reset: ~0.5-1 s of file work for its
        # payload indexes) runs in a worker thread while the homeserver answers the global
        # questions below, which touch no index; nothing reads the index before it is done.
        meta_check = asyncio.create_task(asyncio.to_thread(self._check_index_meta))
        try:
            allowed = await self._resolve_allowed()
            joined = set(await self.matrix.joined_rooms())  # membership at the start of the run
            invites = await self._invites()  # also learns each joined room's newest event (self._latest_event)
            direct_rooms = await self._direct_rooms()
            own = OwnJoins(self.options.state_dir)
            purges = self._load_purges()
            turn = _Turn(
                service_user,
                allowed,
                joined,
                invites,
                direct_rooms,
                own,
                purges,
                purge_targets=await self._resolve_purge_keys(purges, allowed),
                excluded_names=await exclusion_aliases(
                    self.matrix, self.policy, _servers(service_user, allowed.values())
                ),
            )
        except BaseException:
            # The reset in the thread cannot be stopped: let it finish before the run unwinds.
            await asyncio.gather(meta_check, return_exceptions=True)
            raise
        await meta_check
        self._stored_rooms = set(self.index.rooms_with_data())

        in_scope_or_unknown: set[str] = set()
        rooms = sorted(set(allowed) | joined | set(invites))
        done: list[str] = []
        self._rooms_total = len(rooms)
        for room_id in rooms:
            if self.stop.requested:  # a safe point: nothing of this room begun
                break
            self._rooms_before = len(done)
            try:
                kept = await self._one_room(room_id, turn)
            except _Interrupted:
                kept = True
            if kept:
                in_scope_or_unknown.add(room_id)
            if self._stopped_in != room_id:
                done.append(room_id)

        await self._drain(None)  # the last room's last checkpoint, before anything is purged or committed
        left = [room_id for room_id in rooms if room_id not in done]
        if self.stop.requested:
            # The rooms not reached were not decided this run: what the index holds of them stays.
            self._unfinished.update(left)
        else:
            for room_id in sorted(self._stored_rooms - in_scope_or_unknown):
                self._purge(room_id, reason="not_in_scope", evidence={"why": "neither allowed nor joined"})
        self._report_purges(turn)

        complete = not self._unfinished
        if getattr(self.index, "rebuilding", False) and not complete:
            self.summary.rebuild_pending = True
            self.log.warning("index_rebuild_pending", unfinished=sorted(r or "" for r in self._unfinished))
        # write boundary 6: flush; the Edge adapter publishes a generation (or switches in a
        # finished rebuild), the server adapter moves its alias to a finished rebuild.
        self.index.commit(complete=complete, compact=self._text_dropped)
        self.summary.seconds = round(self.clock() - started, 3)
        if self._retrying is not None:
            self.summary.homeserver_retries = self._retrying.stats.retries
            self.summary.homeserver_faults = dict(sorted(self._retrying.stats.faults.items()))
        self.summary.interrupted = self.stop.signal_name
        summary = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self.summary).items()}
        if self.options.state_dir is not None:
            write_last_run(self.options.state_dir, {**summary, "finished_ms": int(self.clock() * 1000)})
        if self.stop.requested:
            self.log.warning(
                "run_interrupted",
                signal=self.stop.signal_name,
                rooms_done=len(done),
                rooms_remaining=len(left),
                room_stopped_in=self._stopped_in,
                unfinished_rooms=left,
                **{k: v for k, v in summary.items() if k != "interrupted"},
            )
        else:
            self.log.info("run_finished", **summary)
        return self.summary

    # ------------------------------------------------------------- setup

    def _check_index_meta(self) -> None:
        want = IndexMeta(model=self.embedder.model_id, dim=self.embedder.dim, chat_version=self.chat_version)
        have = self.index.read_meta()
        if have == want:
            return
        why = (
            "new_index"
            if have is None
            else ",".join(
                name
                for name in ("model", "dim", "chat_version", "corpus")
                if getattr(have, name) != getattr(want, name)
            )
        )
        self.index.reset(want)
        self.summary.index_rebuilt = True
        self.log.info(
            "index_rebuilt",
            why=why,
            model=want.model,
            dim=want.dim,
            chat_version=want.chat_version,
            previous=None if have is None else asdict(have),
        )

    async def _resolve_allowed(self) -> dict[str, str]:
        rooms, problems = await resolve_allowed(self.matrix, self.policy)
        for problem in problems:
            self._fail(None, problem.why, alias=problem.alias, **({"error": problem.error} if problem.error else {}))
        return rooms

    async def _resolve_purge_keys(
        self, purges: dict[str, tuple[PurgeSpan, ...]], allowed: dict[str, str]
    ) -> dict[str, tuple[str | None, str | None]]:
        """Each purge key (a room as the steward typed it) -> (room id, None), or (None, why) when
        no room answers to it. An alias is looked up in ROOMS first, then in the directory; the
        room's own names (canonical, alt, directory aliases) match it again at the room's turn."""
        by_entry = {entry.casefold(): room_id for room_id, entry in allowed.items()}
        targets: dict[str, tuple[str | None, str | None]] = {}
        for key in sorted(purges):
            if not key.startswith("#"):
                targets[key] = (key, None)
            elif key.casefold() in by_entry:
                targets[key] = (by_entry[key.casefold()], None)
            else:
                try:
                    room_id = await self.matrix.resolve_alias(key)
                except (MatrixError, ValueError) as exc:
                    targets[key] = (None, f"alias_unresolvable: {exc}")
                    continue
                targets[key] = (room_id, None) if room_id else (None, "alias_unknown")
        return targets

    def _report_purges(self, turn: "_Turn") -> None:
        """``purge_unmatched`` for every key no room of this run answered to (on every run, until
        the steward fixes it), and the state of every span for `huginn-chat status`."""
        for key in sorted(turn.purges):
            room_id, state = turn.purge_outcome.get(key, (None, "unmatched"))
            why = None
            if state == "unmatched":
                target, why = turn.purge_targets.get(key, (None, None))
                why = why or ("room_not_in_this_run" if target else "no_room_answers")
                self.log.warning(
                    "purge_unmatched",
                    room=key,
                    room_id=target,
                    why=why,
                    spans=[[s.ts_from, s.ts_to] for s in turn.purges[key]],
                )
            for span in turn.purges[key]:
                self.summary.purges.append(
                    {
                        "room": key,
                        "room_id": room_id,
                        "ts_from": span.ts_from,
                        "ts_to": span.ts_to,
                        "state": state,
                        **({"why": why} if why else {}),
                    }
                )

    async def _invites(self) -> dict[str, list[dict[str, Any]]]:
        """Pending invites with their stripped state. Unreadable: none (no invite is accepted
        then, and rooms ROOMS names are still joined by their entry)."""
        try:
            overview = await self.matrix.rooms_overview()
        except MatrixError as exc:
            self.log.warning("invites_unreadable", error=str(exc))
            return {}
        self._latest_event = overview.latest_event
        self.sync_next_batch = overview.next_batch
        return overview.invites

    async def _direct_rooms(self) -> dict[str, list[str]]:
        direct, error = await read_direct_rooms(self.matrix)
        if error:
            self.log.warning("m_direct_unreadable", error=error)
        return direct

    def _load_purges(self) -> dict[str, tuple[PurgeSpan, ...]]:
        if self.options.state_dir is None:
            return {}
        return load_purges(self.options.state_dir)

    # ------------------------------------------------------------ one room

    async def _one_room(self, room_id: str, turn: "_Turn") -> bool:
        """Decide and ingest one room. Returns True if the room keeps its data (admitted, or its
        facts could not be read: an error is not a reclassification)."""
        if self._retrying is not None:
            self._retrying.begin_room(room_id)
        try:
            return await self._one_room_inner(room_id, turn)
        finally:
            self._member_state.pop(room_id, None)
            if self._retrying is not None:
                self._retrying.end_room()

    async def _one_room_inner(self, room_id: str, turn: "_Turn") -> bool:
        allowed = turn.allowed
        if room_id not in turn.joined:
            entered = await self._enter(room_id, turn)
            if entered is not None:
                return entered
        # The start of the room's turn: read only a room the service user is in right now. The
        # room's state holds the service user's own m.room.member event (Synapse shows a room it
        # was kicked from or left as it was then), so one read serves both the membership check
        # and the decision; a state without that event, or a refused read, asks for it alone.
        try:
            state: list[dict[str, Any]] | None = await self.matrix.room_state(room_id)
        except MatrixError as exc:
            if exc.status not in (403, 404):
                self._fail(room_id, "room_state_unreadable", error=str(exc))
                return True
            state = None
        lost = await self._membership_lost(room_id, turn, _own_membership(state, turn.service_user))
        if lost is not None:
            return lost
        try:
            facts, decision = await decide_room(
                self.matrix,
                room_id,
                service_user=turn.service_user,
                allowed_ids=frozenset(allowed),
                direct_rooms=turn.direct_rooms,
                policy=self.policy,
                named_by=turn.names_of(room_id),
                state=state,
            )
        except MatrixError as exc:
            self._fail(room_id, "room_state_unreadable", error=str(exc))
            return True
        log = self.log.bind(room_id=room_id, alias=decision.alias)
        if not decision.admitted:
            self.summary.rooms_refused += 1
            await self._refuse_joined(
                room_id, turn, facts.all_names, decision.reason, decision.evidence, log, also=list(decision.also)
            )
            return False

        self.summary.rooms_admitted += 1
        log.info("room_admitted")
        # A steward names the room by its id, a published alias, or the ROOMS alias that found it
        # (which the room's state need not list).
        names = {room_id, allowed.get(room_id), *facts.all_names}
        keys = turn.purge_keys_for(room_id, names)
        spans = {span for key in keys for span in turn.purges[key]}
        for key in keys:
            turn.purge_outcome[key] = (room_id, "pending")  # until the room's read finished
        try:
            # The state read above (None only when decide_room had to read it itself) gives the
            # display names a read starts from and the routing servers of the room's permalinks.
            self._member_state[room_id] = state or []
            await self._ingest(room_id, decision.alias, sorted(spans, key=lambda s: (s.ts_from, s.ts_to)), log)
            # After the room's writes: an entry without a cursor would read as an unfinished rebuild.
            self._after_writes(room_id, lambda: self._write_room_entry(room_id, facts, state or [], turn))
            for key in keys:
                turn.purge_outcome[key] = (room_id, "applied")
        except _Interrupted:
            raise
        except _RoomRefused as refused:
            self.summary.rooms_admitted -= 1
            self.summary.rooms_refused += 1
            await self._refuse_joined(
                room_id, turn, facts.all_names, refused.reason, refused.evidence, log, also=[], mid_history=True
            )
            return False
        except MatrixError as exc:
            self._fail(room_id, "homeserver_error", error=str(exc))
        except Exception as exc:  # noqa: BLE001 - one room's failure must not stop the others
            self._fail(room_id, type(exc).__name__, error=str(exc))
        return True

    def _after_writes(self, room_id: str, then: Callable[[], None]) -> None:
        """Run ``then`` once the room's checkpoint in flight (if any) is acknowledged; never if
        it fails (that failure stays the room's, journalled once by ``_drain``)."""
        if self._in_flight is None or self._in_flight.room_id != room_id:
            then()
            return
        previous = self._in_flight.task

        async def chained() -> None:
            await previous
            then()

        # The same flight, its task extended: the next checkpoint's handoff still reaches its write.
        self._in_flight.task = asyncio.create_task(chained())

    def _write_room_entry(self, room_id: str, facts: Any, state: list[dict[str, Any]], turn: "_Turn") -> None:
        """The room's directory entry (names, routing servers), written when it differs from the
        stored one: names change, and a run that changed nothing must write nothing."""
        entry_of = turn.allowed.get(room_id)
        entry = RoomEntry(
            room_id=room_id,
            name=clean_name(facts.name),
            canonical_alias=facts.canonical_alias,
            alt_aliases=tuple(facts.alt_aliases),
            aliases=tuple(
                name for name in dict.fromkeys([*facts.all_names, entry_of]) if name and name.startswith("#")
            ),
            allowed_as=(entry_of,) if entry_of else (),
            via=tuple(via_servers(state, fallback=server_of(turn.service_user))),
        )
        key, value = schema.room_entry_key(room_id), schema.room_entry_value(entry)
        if self.index.get_meta_entry(key) != value:
            self.index.set_meta_entry(key, value)
            self._stored_rooms.add(room_id)

    async def _enter(self, room_id: str, turn: "_Turn") -> bool | None:
        """A room the service user was not in at the start of the run. Decide what the homeserver
        shows without a join; join only a room that no pre-join fact refuses and that ROOMS names.
        Returns None once joined (go on to decide from inside), else what ``_one_room`` returns."""
        entry = turn.allowed.get(room_id)
        invited = room_id in turn.invites
        if entry is not None and not invited:
            # Kicked or banned earlier: the room's moderators said no; the refresher does not
            # walk back in (and a ban would refuse the join anyway).
            removed = await self._removal(room_id, turn)
            if removed is not None:
                self._lose(room_id, turn, removed)
                return False
        pre = await decide_before_joining(
            self.matrix,
            room_id,
            entry=entry,
            invite_state=turn.invites.get(room_id),
            service_user=turn.service_user,
            allowed_ids=frozenset(turn.allowed),
            direct_rooms=turn.direct_rooms,
            policy=self.policy,
            named_by=turn.names_of(room_id),
        )
        if pre.refusal is not None:
            d = pre.refusal
            self.summary.rooms_refused += 1
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
            self._purge_if_stored(room_id, d.reason, d.evidence)
            turn.refused_room(room_id, pre.facts.all_names)
            return False
        if entry is None:  # not named by ROOMS (cannot happen: pre-join refuses it as not_allowed)
            return False
        turn.own.add(room_id)  # before the join: a crash must not leave a join we think the operator's
        try:
            got = await self.matrix.join(room_id if invited else entry)
        except MatrixError as exc:
            self._fail(room_id, "join_failed", error=str(exc), via="invite" if invited else "allowed")
            return True  # nothing read; what the index holds stays until the room is decided
        if got != room_id:  # the alias moved between resolving and joining: that room is ours too
            turn.own.add(got)
            self._fail(room_id, "alias_moved", joined=got, error="the alias now names another room")
            await self._leave(got, turn, "alias_moved", {"entry": entry, "expected": room_id}, self.log)
            return True
        self.summary.rooms_joined += 1
        self.log.info("room_joined", room_id=room_id, via="invite" if invited else "allowed", sources=list(pre.sources))
        turn.joined.add(room_id)
        return None

    async def _refuse_joined(
        self,
        room_id: str,
        turn: "_Turn",
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
            joined_by="refresher" if room_id in turn.own else "operator",
        )
        self._purge_if_stored(room_id, reason, evidence)
        turn.refused_room(room_id, names)
        if room_id in turn.own:
            await self._leave(room_id, turn, reason, evidence, log)

    async def _removal(self, room_id: str, turn: "_Turn") -> dict[str, Any] | None:
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
        if membership == "leave" and sender not in (None, turn.service_user):
            return {"why": "kicked", "membership": "leave", "by": sender}
        return None

    async def _membership_lost(
        self, room_id: str, turn: "_Turn", from_state: dict[str, Any] | None = None
    ) -> bool | None:
        """None while the service user is joined; else the room is not read (and what the index
        holds of it goes when it was kicked, banned or left). ``from_state``: the membership the
        room's state just showed; None: ask the homeserver for it."""
        member = from_state
        if member is None:
            try:
                member = await self.matrix.membership(room_id)
            except MatrixError as exc:
                self._fail(room_id, "membership_unreadable", error=str(exc))
                return True
        membership = (member or {}).get("membership")
        if membership == "join":
            return None
        sender = (member or {}).get("sender")
        why = {"ban": "banned", "invite": "not_joined", "knock": "not_joined"}.get(
            membership or "", "kicked" if membership == "leave" and sender not in (None, turn.service_user) else "left"
        )
        self._lose(room_id, turn, {"why": why, "membership": membership, "by": sender})
        return False

    def _lose(self, room_id: str, turn: "_Turn", evidence: dict[str, Any]) -> None:
        """The service user is not in the room: nothing is read, its points and cursor go."""
        turn.joined.discard(room_id)
        turn.own.discard(room_id)
        self._purge_if_stored(room_id, evidence["why"], evidence)
        if room_id in turn.allowed:  # ROOMS names it, and it cannot be read: the operator must look
            self._fail(room_id, evidence["why"], evidence=evidence)
        else:
            self.log.info("room_not_joined", room_id=room_id, evidence=evidence)

    async def _leave(self, room_id: str, turn: "_Turn", reason: str, evidence: dict[str, Any], log: Any) -> None:
        """Leave a room the refresher joined itself and scope refused."""
        try:
            await self.matrix.leave(room_id)
        except MatrixError as exc:
            self._fail(room_id, "leave_failed", error=str(exc), reason=reason)
            return
        turn.own.discard(room_id)
        turn.joined.discard(room_id)
        self.summary.rooms_left += 1
        log.info("room_left", room_id=room_id, reason=reason, evidence=evidence)

    async def _ingest(self, room_id: str, alias: str | None, spans: list[PurgeSpan], log: Any) -> None:
        cursor = self.index.get_cursor(room_id)
        if cursor is not None and cursor.chat_version != self.chat_version:
            await self._rebuild(
                room_id, alias, spans, log, why="chat_version", evidence={"stored": cursor.chat_version}
            )
            return
        if cursor is None and room_id in self._stored_rooms:  # stored, no cursor: it holds windows
            # Windows but no cursor: a room rebuild that did not finish. Finish it (the
            # leftovers are pruned at its end) rather than fold new windows onto old ones.
            await self._rebuild(room_id, alias, spans, log, why="unfinished_rebuild", evidence={})
            return
        try:
            await self._read_room(room_id, alias, spans, cursor, log)
        except _NeedRebuild as need:
            await self._rebuild(room_id, alias, spans, log, why=need.why, evidence=need.evidence)

    async def _rebuild(
        self, room_id: str, alias: str | None, spans: list[PurgeSpan], log: Any, *, why: str, evidence: dict[str, Any]
    ) -> None:
        """Read the room again from the start beside its old windows; see the module docstring."""
        self.index.drop_cursor(room_id)  # before any delete: a crash from here re-reads the room
        self._text_dropped = True
        written = self._rebuilding[room_id] = set()
        self.summary.rooms_rebuilt += 1
        log.info("room_rebuild_started", why=why, evidence=evidence)
        try:
            await self._read_room(room_id, alias, spans, None, log)
        except BaseException:
            if why == "unknown_redaction_target":  # the redacted text must not outlive this run
                deleted = self.index.prune_room(room_id, sorted(written))
                self.summary.windows_deleted += deleted
                log.warning("room_rebuild_failed", why=why, windows_deleted=deleted, kept_old=False)
            else:
                log.warning("room_rebuild_failed", why=why, windows_written=len(written), kept_old=True)
            raise
        finally:
            self._rebuilding.pop(room_id, None)
            deferred = self._deferred_cursor.pop(room_id, None)
        deleted = self.index.prune_room(room_id, sorted(written))
        self.summary.windows_deleted += deleted
        if deferred is not None:
            self.index.set_cursor(deferred)
        log.info("room_rebuilt", why=why, evidence=evidence, windows_written=len(written), windows_deleted=deleted)

    async def _read_room(
        self, room_id: str, alias: str | None, spans: list[PurgeSpan], cursor: RoomCursor | None, log: Any
    ) -> None:
        incremental = cursor is not None
        open_window = None
        if cursor is not None and cursor.open_window_id:
            stored = self.index.get_windows([cursor.open_window_id])
            open_window = schema.window_from_payload(stored[0]) if stored else None
        fold = RoomFold(room_id, self.options.bounds, purges=spans, open_window=open_window, incremental=incremental)
        names = DisplayNames()  # who was called what, as the read goes (chunker.members)
        names.learn(self._member_state.get(room_id, ()))

        applied = self.index.get_meta_entry(schema.purge_key(room_id)) or []
        span_lists = [[s.ts_from, s.ts_to] for s in spans]
        new_spans = [s for s in spans if [s.ts_from, s.ts_to] not in applied]
        for span in new_spans:
            fold.provide(self._stored(room_id, self.index.windows_in_span(room_id, span.ts_from, span.ts_to)))
            self._text_dropped = True
            log.info("purge_applied", ts_from=span.ts_from, ts_to=span.ts_to)

        token = cursor.end_token if cursor else None
        last_event_id = cursor.last_event_id if cursor else None
        if cursor is not None and not new_spans and self._latest_event.get(room_id) == cursor.last_event_id:
            # This run's /sync says the room's newest event is the one the cursor ends at: nothing
            # new to read (an event arriving since is read by the next run).
            log.info("room_current", events_read=0, open_window_id=cursor.open_window_id, unchanged=True)
            return
        pending = 0
        events_read = 0
        last_progress = self.clock()
        prefetch: asyncio.Task[Page] | None = None
        try:
            while True:
                tick = time.perf_counter()
                if prefetch is not None:
                    page, prefetch = await prefetch, None
                else:
                    page = await self.matrix.messages(room_id, token, self.options.page_size)
                self.summary.seconds_reading += time.perf_counter() - tick
                if not page.events:
                    break
                if page.end is not None:
                    # Ask for the next page now: the homeserver answers while this one is folded,
                    # embedded (in a worker thread) and written. Besides this coroutine only the
                    # checkpoint in flight touches the fold (release_settled, at an await here).
                    prefetch = asyncio.create_task(self.matrix.messages(room_id, page.end, self.options.page_size))
                    await asyncio.sleep(0)  # let the request go out before the folding below
                tick = time.perf_counter()
                names.learn(page.state)
                events = names.annotate(page.events, [parse_event(raw) for raw in page.events])
                self._check_timeline(events)
                if any(isinstance(ev, Redaction) for ev in events):
                    self._text_dropped = True
                for ev in events:
                    if isinstance(ev, Other):
                        why = skip_reason(ev.kind)
                        self.summary.events_skipped[why] = self.summary.events_skipped.get(why, 0) + 1
                wanted = fold.lookups(events)
                if wanted:
                    fold.provide(self._stored(room_id, self.index.windows_with_events(room_id, sorted(wanted))))
                fold.feed(events)
                self.summary.seconds_folding += time.perf_counter() - tick
                if fold.unknown_redactions:
                    await self._settle_unknown_redactions(room_id, fold, spans)
                events_read += len(events)
                self.summary.events_read += len(events)
                last_event_id = _last_event_id(page.events) or last_event_id
                if page.end is not None:
                    token = page.end
                pending += len(events)
                # A room rebuild writes once, at its end: a window written part-way would replace
                # the old, fuller window of the same id, and readers would find less until the end.
                if pending >= self.options.checkpoint_events and room_id not in self._rebuilding:
                    await self._checkpoint(room_id, alias, fold, token, last_event_id, wait=False)
                    pending = 0
                if self.progress is not None:
                    # What is left is counted in rooms: /messages tells no count of the events
                    # still to come, and a room's timestamps (backdated history) say nothing of it.
                    self.progress(
                        alias or room_id,
                        events_read,
                        self.summary.windows_written,
                        self._rooms_before,
                        self._rooms_total,
                    )
                if self.clock() - last_progress >= self.options.progress_every_s:
                    last_progress = self.clock()
                    log.info("room_progress", events_read=events_read, windows_written=self.summary.windows_written)
                if page.end is None:
                    break
                if self.stop.requested:  # a safe point: the page is folded, nothing is half written
                    self._stopped_in = room_id
                    self._unfinished.add(room_id)
                    if room_id in self._rebuilding:
                        raise _Interrupted(room_id)  # a rebuild cut short keeps the old windows
                    log.info("room_stopped", events_read=events_read, signal=self.stop.signal_name)
                    break
        except BaseException:
            # Refused, rebuilt or failed: this room's checkpoint in flight lands before what follows
            # purges, prunes or rebuilds the room. If it failed, that failure is the room's (as it
            # was when the write came first): the room fails and is decided again next run.
            await self._drain(room_id)
            raise
        finally:
            if prefetch is not None:  # the room was refused, needs a rebuild, or failed
                prefetch.cancel()
                with contextlib.suppress(asyncio.CancelledError, MatrixError):
                    await prefetch
        if events_read or new_spans:
            # The room's last checkpoint is embedded and written while the next room is decided
            # and read, unless something must follow its write: a new purge's meta entry, or a
            # room rebuild's prune.
            later = not new_spans and room_id not in self._rebuilding
            await self._checkpoint(room_id, alias, fold, token, last_event_id, wait=not later)
        if new_spans:
            self.index.set_meta_entry(schema.purge_key(room_id), span_lists)
        if self._stopped_in != room_id:
            log.info("room_current", events_read=events_read, open_window_id=fold.open_window_id)

    def _check_timeline(self, events: Sequence[Any]) -> None:
        for ev in events:
            if isinstance(ev, Other):
                refusal = timeline_refusal(
                    sender=ev.sender, event_type=ev.event_type, state_key=ev.state_key, policy=self.policy
                )
            else:
                refusal = timeline_refusal(sender=ev.sender, event_type="", state_key=None, policy=self.policy)
            if refusal is not None:
                reason, evidence = refusal
                raise _RoomRefused(reason, {**evidence, "event_id": ev.event_id})

    async def _settle_unknown_redactions(self, room_id: str, fold: RoomFold, spans: list[PurgeSpan]) -> None:
        """A redaction whose target the index does not hold. If the homeserver says the target was
        not a message (a reaction, a state event, ciphertext) or lies in a purge span, nothing we
        stored can hold it. Anything else — a message, which may have been an edit whose text we
        folded in, or a target we cannot see — needs the room rebuilt."""
        unknown = list(fold.unknown_redactions)
        fold.unknown_redactions.clear()
        for redaction in unknown:
            try:
                target = await self.matrix.event(room_id, redaction.target_id)
            except MatrixError:
                target = None
            if target is not None:
                kind = target.get("type")
                ts = target.get("origin_server_ts")
                if kind != "m.room.message":
                    continue
                if isinstance(ts, int) and any(s.ts_from <= ts <= s.ts_to for s in spans):
                    continue
            raise _NeedRebuild(
                "unknown_redaction_target",
                {
                    "redaction_id": redaction.event_id,
                    "target_id": redaction.target_id,
                    "target_type": None if target is None else target.get("type"),
                },
            )

    async def _drain(self, room_id: str | None) -> None:
        """Wait for the checkpoints in flight (the newest waits for the one before it). A failure is
        its room's: raised when that is ``room_id`` (the room reading now stops: a later cursor must
        not pass windows that were never written), else journalled as that room's failure."""
        if self._in_flight is None:
            return
        flight, self._in_flight = self._in_flight, None
        await self._settle(flight, room_id)

    async def _settle(self, flight: "_Flight", room_id: str | None) -> None:
        try:
            await flight.task
        except Exception as exc:
            if flight.room_id == room_id:
                raise
            self._fail(flight.room_id, type(exc).__name__, error=str(exc))

    async def _checkpoint(
        self,
        room_id: str,
        alias: str | None,
        fold: RoomFold,
        token: str | None,
        last_event_id: str | None,
        *,
        wait: bool = True,
    ) -> None:
        """CHECKPOINT (module docstring). ``wait=False``: embed and write in the background while
        the run reads and folds on. Checkpoints are a chain: each embeds as soon as the one before
        it has embedded (so the embedder never waits for a write, nor for the payloads and index
        calls around it), and writes only once the one before it has written, so writes and
        cursors keep their order. At most two are alive (one embedding, one writing), which
        bounds memory."""
        previous, self._in_flight = self._in_flight, None
        if previous is not None:
            if previous.task.done():
                await self._settle(previous, room_id)  # a failure of this room's stops its read here
                previous = None
            else:
                # Its write waits until ours has begun embedding (``_write_checkpoint``).
                previous.successor = True
        try:
            if previous is not None:
                await previous.embedded.wait()
            changes = fold.take_changes()
            self._checkpoint_seq += 1
            self._unwritten_takes.setdefault(room_id, {})[self._checkpoint_seq] = frozenset(
                window.point_id for window in changes.upserts
            )
            # The cursor names the open window as it is now: by the time a background write sets
            # it, the fold may have opened a later one that is not written yet.
            flight = _Flight(room_id, None, asyncio.Event(), asyncio.Event())
            job = self._write_checkpoint(
                room_id,
                alias,
                fold,
                changes,
                token,
                last_event_id,
                fold.open_window_id,
                seq=self._checkpoint_seq,
                previous=previous,
                flight=flight,
            )
            flight.task = asyncio.create_task(job)
        except BaseException:
            if previous is not None:  # no checkpoint will begin embedding after it: it must not wait
                previous.successor_embedding.set()
                self._in_flight = previous  # and it is still drained
            raise
        self._in_flight = flight
        if wait:
            await self._drain(room_id)

    async def _write_checkpoint(
        self,
        room_id: str,
        alias: str | None,
        fold: RoomFold,
        changes: Changes,
        token: str | None,
        last_event_id: str | None,
        open_window_id: str | None,
        *,
        seq: int,
        previous: "_Flight | None",
        flight: "_Flight",
    ) -> None:
        embedding = previous.successor_embedding.set if previous is not None else None
        try:
            points = await self._points(changes.upserts, alias, embedding=embedding, embedded=flight.embedded.set)
        finally:
            if embedding is not None:
                embedding()
            flight.embedded.set()  # the next checkpoint may embed now
        if flight.successor:
            # The next checkpoint is waiting to embed: let it start before this write holds the
            # event loop (Edge's upserts are synchronous), so the embedder never waits for a write.
            await flight.successor_embedding.wait()
        if previous is not None:
            await self._settle(previous, room_id)  # write boundary 2 waits for the writes before it
        tick = time.perf_counter()
        if points or changes.deletes:
            self.index.write_windows(room_id, points, list(changes.deletes))  # write boundary 2
            if points:
                self._stored_rooms.add(room_id)
            if changes.deletes:
                self._text_dropped = True
            written = self._rebuilding.get(room_id)
            if written is not None:
                written.difference_update(changes.deletes)
                written.update(p.point_id for p in points)
            self.summary.windows_written += len(points)
            self.summary.windows_deleted += len(changes.deletes)
        if token is None or last_event_id is None:
            self.summary.seconds_writing += time.perf_counter() - tick
            return
        cursor = RoomCursor(
            room_id=room_id,
            end_token=token,
            last_event_id=last_event_id,
            open_window_id=open_window_id,
            chat_version=self.chat_version,
            updated_ms=int(self.clock() * 1000),
        )
        if room_id in self._rebuilding:
            # A room rebuild sets its cursor only once its old windows are pruned (_rebuild).
            self._deferred_cursor[room_id] = cursor
        else:
            self.index.set_cursor(cursor)  # write boundary 3: only after boundary 2 was acknowledged
        self._stored_rooms.add(room_id)
        # What was just written need not stay in memory (fold "Memory"), except the windows a later
        # checkpoint took and has not written yet.
        unwritten = self._unwritten_takes.get(room_id, {})
        unwritten.pop(seq, None)
        fold.release_settled(keep=frozenset().union(*unwritten.values()))
        self.summary.seconds_writing += time.perf_counter() - tick

    async def _points(
        self,
        windows: Sequence[Window],
        alias: str | None,
        *,
        embedding: Callable[[], None] | None = None,
        embedded: Callable[[], None] | None = None,
    ) -> list[WindowPoint]:
        """The windows as points: BM25 over each window's text, and one dense vector per message
        (``<localpart>: <body>`` alone; schema.DENSE), so a window ranks by its best message. A
        line whose vector this run made lately or the window's stored point holds is not
        embedded again: the open window is rewritten at every checkpoint and an edit rewrites
        its whole window, but only new or changed lines cost. ``embedding`` is called as the
        embedding starts, ``embedded`` once the vectors are in (the checkpoint chain's handoffs)."""
        live = [w for w in windows if w.messages]
        texts = [embed_text(w) for w in live]
        lines = [[embed_line(m) for m in w.messages] for w in live]
        known = self._line_vectors
        rewritten = [w.point_id for w, rows in zip(live, lines) if any(line not in known for line in rows)]
        if rewritten and any(w.room_id in self._stored_rooms for w in live):  # else nothing stored to reuse
            known.update(self.index.message_vectors(rewritten))
        fresh = [line for line in dict.fromkeys(line for rows in lines for line in rows) if line not in known]
        tick = time.perf_counter()
        # In a worker thread, so the event loop reads the next page meanwhile (onnxruntime and
        # the tokenizer release the GIL).
        if embedding is not None:
            embedding()
        dense, sparse = await asyncio.to_thread(self._embed, fresh, texts) if texts else ([], [])
        self.summary.seconds_embedding += time.perf_counter() - tick
        self.summary.texts_embedded += len(fresh)
        vectors = {**{line: known[line] for rows in lines for line in rows if line in known}, **dict(zip(fresh, dense))}
        known.update(zip(fresh, dense))
        while len(known) > _LINE_VECTORS_KEPT:
            del known[next(iter(known))]
        if embedded is not None:
            embedded()  # the payloads below need not hold the next checkpoint's embedding back
        by_window = {w.point_id: ([vectors[line] for line in rows], s) for w, rows, s in zip(live, lines, sparse)}
        points = []
        for w in windows:
            d, s = by_window.get(w.point_id, (None, None))
            points.append(
                WindowPoint(
                    point_id=w.point_id,
                    dense=d,
                    sparse=s,
                    payload=schema.window_payload(w, room_alias=alias, chat_version=self.chat_version),
                )
            )
        return points

    def _embed(self, lines: list[str], texts: list[str]) -> tuple[list[list[float]], list[SparseVector]]:
        return (self.embedder.embed(lines) if lines else []), self.embedder.sparse(texts)

    # ------------------------------------------------------------ helpers

    def _stored(self, room_id: str, payloads: Sequence[dict[str, Any]]) -> list[Window]:
        """Stored windows for the fold. During a room rebuild only those this rebuild wrote: the
        old ones stay stored until the rebuild ends but belong to the old layout."""
        windows = [schema.window_from_payload(p) for p in payloads]
        written = self._rebuilding.get(room_id)
        return windows if written is None else [w for w in windows if w.point_id in written]

    def _purge_if_stored(self, room_id: str, reason: str, evidence: dict[str, Any]) -> None:
        if room_id in self._stored_rooms:
            self._purge(room_id, reason=reason, evidence=evidence)

    def _purge(self, room_id: str, *, reason: str, evidence: dict[str, Any]) -> None:
        deleted = self.index.purge_room(room_id)
        self._stored_rooms.discard(room_id)
        self._text_dropped = True
        self.summary.rooms_purged += 1
        self.summary.windows_deleted += deleted
        self.log.info("room_purged", room_id=room_id, reason=reason, evidence=evidence, windows_deleted=deleted)

    def _fail(self, room_id: str | None, why: str, **context: Any) -> None:
        """Journal a failure; a room counts once however many of its steps failed. A failure to
        read what a room holds leaves a full rebuild unswitched; one where the room has nothing
        to keep (never joined, kicked, left) does not."""
        if why not in _NOTHING_TO_KEEP:
            self._unfinished.add(room_id)
        if room_id is None or room_id not in self.summary.failed_rooms:
            self.summary.rooms_failed += 1
        if room_id and room_id not in self.summary.failed_rooms:
            self.summary.failed_rooms.append(room_id)
        self.summary.failures[why] = self.summary.failures.get(why, 0) + 1
        self.log.error("room_failed", room_id=room_id, why=why, **context)


@dataclass
class _Flight:
    """A checkpoint in flight: its room, its task (embed, then write once the one before it
    wrote); ``embedded``: set once its embedding is over, when the next one may embed;
    ``successor``: a next checkpoint waits to embed, and ``successor_embedding`` is set once it
    has begun (this one's write waits for that)."""

    room_id: str
    task: "asyncio.Task[None] | Any"
    embedded: asyncio.Event
    successor_embedding: asyncio.Event
    successor: bool = False


@dataclass
class _Turn:
    """What every room's turn of one run shares."""

    service_user: str
    allowed: dict[str, str]  # room id -> the ROOMS entry that named it
    joined: set[str]  # joined at the start of the run, plus what this run joined
    invites: dict[str, list[dict[str, Any]]]  # pending invites -> their stripped state
    direct_rooms: dict[str, list[str]]
    own: OwnJoins  # rooms the refresher joined itself: the only ones it may leave
    purges: dict[str, tuple[PurgeSpan, ...]]  # purge key (as typed) -> spans
    purge_targets: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # key -> (room, why not)
    purge_outcome: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (room id, applied|pending)
    excluded_names: dict[str, list[str]] = field(default_factory=dict)  # room -> exclusion aliases naming it

    def names_of(self, room_id: str) -> list[str]:
        """Names the room goes by beyond its state: the ROOMS entry, directory exclusion aliases."""
        entry = self.allowed.get(room_id)
        return ([entry] if entry else []) + self.excluded_names.get(room_id, [])

    def purge_keys_for(self, room_id: str, names: set[str | None]) -> list[str]:
        """The purge keys that name this room: resolved to its id, or equal to one of its names
        (aliases case-insensitively)."""
        folded = {name.casefold() for name in names if name and name.startswith("#")}
        return [
            key
            for key in sorted(self.purges)
            if self.purge_targets.get(key, (None, None))[0] == room_id
            or key == room_id
            or (key.startswith("#") and key.casefold() in folded)
        ]

    def refused_room(self, room_id: str, names: Sequence[str]) -> None:
        """A refused room keeps nothing in the index: its purges hold trivially."""
        for key in self.purge_keys_for(room_id, {room_id, *names}):
            self.purge_outcome[key] = (room_id, "applied")


def _servers(service_user: str, entries: Any) -> list[str]:
    """The server names ``#name:*`` exclusions are looked up on: the service user's, and each
    ROOMS alias's."""
    servers = [service_user.partition(":")[2]]
    servers += [entry.partition(":")[2] for entry in entries if entry.startswith("#")]
    return [s for s in dict.fromkeys(servers) if s]


class _CountingMatrix:
    """The ``MatrixSource`` port with every call counted into the run summary, per room where the
    call names one. Counting here, not in the nio adapter, keeps it true for any adapter."""

    _ROOM_CALLS = frozenset({"room_state", "messages", "event", "membership", "room_aliases", "room_summary", "leave"})
    _GLOBAL_CALLS = frozenset(
        {
            "whoami",
            "joined_rooms",
            "invited_rooms",
            "invites",
            "rooms_overview",
            "changes_since",
            "resolve_alias",
            "join",
            "direct_rooms",
        }
    )

    def __init__(self, inner: MatrixSource, summary: RunSummary) -> None:
        self._inner = inner
        self._summary = summary

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self._ROOM_CALLS and name not in self._GLOBAL_CALLS:
            return attr
        summary = self._summary

        async def counted(*args: Any, **kwargs: Any) -> Any:
            summary.homeserver_requests += 1
            if name in self._ROOM_CALLS:
                room_id = args[0] if args else next(iter(kwargs.values()))
                summary.homeserver_requests_per_room[room_id] = summary.homeserver_requests_per_room.get(room_id, 0) + 1
            else:
                summary.homeserver_requests_global += 1
            return await attr(*args, **kwargs)

        return counted


# Failures after which a room holds nothing the index should keep: they never hold a rebuild back.
_NOTHING_TO_KEEP = frozenset({"join_failed", "alias_moved", "kicked", "banned", "left", "not_joined", "leave_failed"})


def _own_membership(state: Sequence[Any] | None, user_id: str) -> dict[str, Any] | None:
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


def _last_event_id(raw_events: Sequence[Any]) -> str | None:
    for raw in reversed(raw_events):
        if isinstance(raw, dict) and isinstance(raw.get("event_id"), str):
            return raw["event_id"]
    return None


LAST_RUN_FILE = "last_run.json"


def write_last_run(state_dir: Path, summary: dict[str, Any]) -> None:
    """The run summary for `huginn-chat status`, beside the index rather than in it, so a run that
    changed nothing writes nothing to the index and publishes no generation."""
    make_configured_dir(state_dir)
    write_atomically(state_dir / LAST_RUN_FILE, json.dumps(summary, sort_keys=True))

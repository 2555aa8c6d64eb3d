"""The oneshot refresh run: the one writer of chunks, vectors and cursors.

Owns: the order of a run — check the index meta, learn who we are, resolve the allowed rooms,
then for every room: decide its scope before joining it and again from inside
(``daemon.refresher.admission``), read its new events page by page and fold them
(``daemon.refresher.reading``), embed and write the changed windows and only then advance its
cursor (``daemon.refresher.checkpoints``); then purge what is out of scope, commit, and journal
one line per decision and a run summary (``daemon.refresher.summary``, written out by
``daemon.refresher.last_run``). ``Refresher`` wires those parts to each other over the state they
share (``daemon.refresher.run_state``).

Must not: decide scope itself (``scope.decide`` and ``scope.timeline_refusal`` do), touch Qdrant
or nio directly (only the ports), log a token or any message text, or advance a cursor before the
room's writes were acknowledged.

Theory of operation. Per admitted room, read and fold as ``daemon.refresher.reading`` says, with

    CHECKPOINT = embed changed windows -> index.write_windows (write boundary 2)
                 -> index.set_cursor (write boundary 3)

A crash between the two boundaries leaves windows ahead of the cursor; the next run re-reads those
events and the fold recognises them as replays (see chunker/fold.py), so the index converges.

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
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, cast

from chunker import chat_version
from chunker.fold import Bounds, PurgeSpan
from chunker.members import clean_name, server_of, via_servers
from daemon.index import schema
from daemon.index.port import IndexMeta, IndexWriter, RoomEntry
from daemon.ports import Embedder, MatrixError, MatrixSource
from daemon.refresher.admission import Admission, AdmittedRoom, RunRooms, servers_of
from daemon.refresher.checkpoints import Checkpoints
from daemon.refresher.last_run import write_last_run
from daemon.refresher.own_joins import OwnJoins
from daemon.refresher.purge_outcomes import PurgeOutcomes
from daemon.refresher.purges import load_purges
from daemon.refresher.reading import RebuildStopped, RoomReading, RoomRefusedMidHistory
from daemon.refresher.retry import RetryingMatrix, RetryPolicy
from daemon.refresher.room_scope import exclusion_aliases, read_direct_rooms, resolve_allowed
from daemon.refresher.run_state import RunState
from daemon.refresher.stopping import StopRequest
from daemon.refresher.summary import CountingMatrix, RunSummary
from scope import Policy


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
        self.state = RunState(index, log)
        self.summary = self.state.summary
        self.stop = stop if stop is not None else StopRequest()
        # Retries sit under the counter: homeserver_requests stays one per call, however many tries.
        self._retrying = RetryingMatrix(matrix, options.retry, log, clock=time.monotonic) if options.retry else None
        self.matrix = cast(MatrixSource, CountingMatrix(self._retrying or matrix, self.summary))
        self.index = index
        self.embedder = embedder
        self.policy = policy
        self.log = log
        self.options = options
        self.clock = clock
        self.chat_version = chat_version(options.bounds)
        # Where the stream stood at this run's opening /sync: the next run's ``since`` (refresher.idle).
        self.sync_next_batch: str | None = None
        self.admission = Admission(matrix=self.matrix, policy=policy, state=self.state, log=log)
        self.checkpoints = Checkpoints(index, embedder, self.state, chat_version=self.chat_version, clock=clock)
        self.reading = RoomReading(
            matrix=self.matrix,
            index=index,
            policy=policy,
            options=options,
            state=self.state,
            checkpoints=self.checkpoints,
            stop=self.stop,
            progress=progress,
            clock=clock,
            chat_version=self.chat_version,
        )

    async def run(self) -> RunSummary:
        started = self.clock()
        rooms = await self._rooms_of_run()
        state = self.state
        in_scope_or_unknown: set[str] = set()
        room_ids = sorted(set(rooms.allowed) | rooms.joined | set(rooms.invites))
        done: list[str] = []
        state.rooms_total = len(room_ids)
        for room_id in room_ids:
            if self.stop.requested:  # a safe point: nothing of this room begun
                break
            state.rooms_before = len(done)
            try:
                kept = await self._one_room(room_id, rooms)
            except RebuildStopped:
                kept = True
            if kept:
                in_scope_or_unknown.add(room_id)
            if state.stopped_in != room_id:
                done.append(room_id)

        await self.checkpoints.drain(None)  # the last room's last checkpoint, before anything is purged or committed
        left = [room_id for room_id in room_ids if room_id not in done]
        if self.stop.requested:
            # The rooms not reached were not decided this run: what the index holds of them stays.
            state.unfinished.update(left)
        else:
            for room_id in sorted(state.stored_rooms - in_scope_or_unknown):
                state.purge(room_id, reason="not_in_scope", evidence={"why": "neither allowed nor joined"})
        rooms.purges.report(self.summary, self.log)
        self._commit()
        self._finish(started, done, left)
        return self.summary

    async def _rooms_of_run(self) -> RunRooms:
        """Who we are and which rooms the run considers, asked of the homeserver while the index
        meta is checked (and the index reset if it changed)."""
        # The token first: a refused token must leave the index as it was, never reset it.
        service_user = await self.matrix.whoami()
        # The index meta check (a new or changed index is reset: ~0.5-1 s of file work for its
        # payload indexes) runs in a worker thread while the homeserver answers the global
        # questions below, which touch no index; nothing reads the index before it is done.
        meta_check = asyncio.create_task(asyncio.to_thread(self._check_index_meta))
        try:
            allowed = await self._resolve_allowed()
            joined = set(await self.matrix.joined_rooms())  # membership at the start of the run
            invites = await self._invites()  # also learns each joined room's newest event (state.latest_event)
            direct_rooms = await self._direct_rooms()
            own = OwnJoins(self.options.state_dir)
            purges = PurgeOutcomes(self._load_purges())
            await purges.resolve(self.matrix, allowed)
            rooms = RunRooms(
                service_user,
                allowed,
                joined,
                invites,
                direct_rooms,
                own,
                purges,
                excluded_names=await exclusion_aliases(
                    self.matrix, self.policy, servers_of(service_user, allowed.values())
                ),
            )
        except BaseException:
            # The reset in the thread cannot be stopped: let it finish before the run unwinds.
            await asyncio.gather(meta_check, return_exceptions=True)
            raise
        await meta_check
        self.state.stored_rooms = set(self.index.rooms_with_data())
        return rooms

    def _commit(self) -> None:
        complete = not self.state.unfinished
        if getattr(self.index, "rebuilding", False) and not complete:
            self.summary.rebuild_pending = True
            self.log.warning("index_rebuild_pending", unfinished=sorted(r or "" for r in self.state.unfinished))
        # write boundary 6: flush; the Edge adapter publishes a generation (or switches in a
        # finished rebuild), the server adapter moves its alias to a finished rebuild.
        self.index.commit(complete=complete, compact=self.state.text_dropped)

    def _finish(self, started: float, done: list[str], left: list[str]) -> None:
        """The summary completed, written for `huginn-chat status` and journalled."""
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
                room_stopped_in=self.state.stopped_in,
                unfinished_rooms=left,
                **{k: v for k, v in summary.items() if k != "interrupted"},
            )
        else:
            self.log.info("run_finished", **summary)

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
            self.state.fail(
                None, problem.why, alias=problem.alias, **({"error": problem.error} if problem.error else {})
            )
        return rooms

    async def _invites(self) -> dict[str, list[dict[str, Any]]]:
        """Pending invites with their stripped state. Unreadable: none (no invite is accepted
        then, and rooms ROOMS names are still joined by their entry)."""
        try:
            overview = await self.matrix.rooms_overview()
        except MatrixError as exc:
            self.log.warning("invites_unreadable", error=str(exc))
            return {}
        self.state.latest_event = overview.latest_event
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

    async def _one_room(self, room_id: str, rooms: RunRooms) -> bool:
        """Decide and ingest one room. Returns True if the room keeps its data (admitted, or its
        facts could not be read: an error is not a reclassification)."""
        if self._retrying is not None:
            self._retrying.begin_room(room_id)
        try:
            admitted = await self.admission.admit(room_id, rooms)
            if not isinstance(admitted, AdmittedRoom):
                return admitted
            return await self._ingest(admitted, rooms)
        finally:
            if self._retrying is not None:
                self._retrying.end_room()

    async def _ingest(self, room: AdmittedRoom, rooms: RunRooms) -> bool:
        """Read an admitted room, applying the purge spans that name it; whether it keeps its data."""
        room_id = room.room_id
        # A steward names the room by its id, a published alias, or the ROOMS alias that found it
        # (which the room's state need not list).
        names = {room_id, rooms.allowed.get(room_id), *room.facts.all_names}
        keys = rooms.purges.keys_for(room_id, names)
        spans = {span for key in keys for span in rooms.purges.spans[key]}
        for key in keys:
            rooms.purges.outcome[key] = (room_id, "pending")  # until the room's read finished
        try:
            await self.reading.ingest(
                room_id, room.alias, sorted(spans, key=lambda s: (s.ts_from, s.ts_to)), room.log, room.member_state
            )
            # After the room's writes: an entry without a cursor would read as an unfinished rebuild.
            self.checkpoints.after_writes(room_id, lambda: self._write_room_entry(room, rooms))
            for key in keys:
                rooms.purges.outcome[key] = (room_id, "applied")
        except RebuildStopped:
            raise
        except RoomRefusedMidHistory as refused:
            await self.admission.refuse_mid_history(room, rooms, refused)
            return False
        except MatrixError as exc:
            self.state.fail(room_id, "homeserver_error", error=str(exc))
        except Exception as exc:  # noqa: BLE001 - one room's failure must not stop the others
            self.state.fail(room_id, type(exc).__name__, error=str(exc))
        return True

    def _write_room_entry(self, room: AdmittedRoom, rooms: RunRooms) -> None:
        """The room's directory entry (names, routing servers), written when it differs from the
        stored one: names change, and a run that changed nothing must write nothing."""
        room_id, facts = room.room_id, room.facts
        entry_of = rooms.allowed.get(room_id)
        entry = RoomEntry(
            room_id=room_id,
            name=clean_name(facts.name),
            canonical_alias=facts.canonical_alias,
            alt_aliases=tuple(facts.alt_aliases),
            aliases=tuple(
                name for name in dict.fromkeys([*facts.all_names, entry_of]) if name and name.startswith("#")
            ),
            allowed_as=(entry_of,) if entry_of else (),
            via=tuple(via_servers(room.member_state, fallback=server_of(rooms.service_user))),
        )
        key, value = schema.room_entry_key(room_id), schema.room_entry_value(entry)
        if self.index.get_meta_entry(key) != value:
            self.index.set_meta_entry(key, value)
            self.state.stored_rooms.add(room_id)

"""Reading an admitted room: its new events page by page, folded into windows.

Owns: where a room's read starts (its cursor, or the start of history) and whether it needs one at
all (this run's ``/sync`` says its newest event is the one the cursor ends at), the steward's new
purge spans for the room, the pages (the next one asked for while this one is folded), refusing a
room mid-history when an event says bridged or encrypted (``scope.timeline_refusal``), the fold
(``chunker.fold.RoomFold``, given the stored windows each page touches), asking the homeserver
what an unknown redaction target was, a checkpoint every ``checkpoint_events`` events read, the
progress callback and journal line, the stop read after each page, and room rebuilds.

Must not: decide a room's scope from its state (``daemon.refresher.admission`` does), write
windows or cursors but through ``daemon.refresher.checkpoints``, or log any message text.

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

A stop read after a page checkpoints the room as it would be at its end (its windows written, then
its cursor set to the page it reached); a room rebuild stopped part-way ends as a failed rebuild
does (``RebuildStopped``: its old windows kept, no cursor, so the next run rebuilds it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from chunker.events import Other, Redaction, parse_event
from chunker.fold import PurgeSpan, RoomFold
from chunker.members import DisplayNames
from chunker.windows import Window
from daemon.errors import HuginnError
from daemon.index import schema
from daemon.index.port import IndexWriter, RoomCursor
from daemon.ports import MatrixError, MatrixSource, Page
from daemon.refresher.checkpoints import Checkpoints
from daemon.refresher.run_state import RunState
from daemon.refresher.stopping import StopRequest
from daemon.refresher.summary import skip_reason
from scope import Policy, timeline_refusal

if TYPE_CHECKING:
    from daemon.refresher.run import RefreshOptions


class RoomRefusedMidHistory(HuginnError):
    """Signal: an event read says the room must be refused (never leaves the refresh run)."""

    def __init__(self, reason: str, evidence: dict[str, Any]):
        super().__init__(reason)
        self.reason = reason
        self.evidence = evidence


class RebuildStopped(HuginnError):
    """Signal: a stop was asked for in the middle of a room rebuild (never leaves the refresh run)."""


class RebuildNeeded(HuginnError):
    """Signal: the room's windows must be rebuilt from its history (never leaves this module)."""

    def __init__(self, why: str, evidence: dict[str, Any]):
        super().__init__(why)
        self.why = why
        self.evidence = evidence


@dataclass
class ReadPosition:
    """How far one read of a room got: the token to read on from, the last event read, events
    read in all and since the last checkpoint, and when the last progress line was journalled."""

    token: str | None
    last_event_id: str | None
    last_progress: float
    events_read: int = 0
    pending: int = 0


class RoomReading:
    def __init__(
        self,
        *,
        matrix: MatrixSource,
        index: IndexWriter,
        policy: Policy,
        options: RefreshOptions,
        state: RunState,
        checkpoints: Checkpoints,
        stop: StopRequest,
        progress: Callable[[str, int, int, int, int], None] | None,
        clock: Callable[[], float],
        chat_version: str,
    ) -> None:
        self.matrix = matrix
        self.index = index
        self.policy = policy
        self.options = options
        self.state = state
        self.checkpoints = checkpoints
        self.stop = stop
        self.progress = progress
        self.clock = clock
        self.chat_version = chat_version

    async def ingest(
        self, room_id: str, alias: str | None, spans: list[PurgeSpan], log: Any, member_state: list[dict[str, Any]]
    ) -> None:
        """Read the room on from its cursor, or rebuild it when its windows cannot be read on from.
        ``member_state``: the room's state as read at the start of its turn (the display names a
        read starts from)."""
        cursor = self.index.get_cursor(room_id)
        if cursor is not None and cursor.chat_version != self.chat_version:
            await self._rebuild(
                room_id,
                alias,
                spans,
                log,
                member_state,
                why="chat_version",
                evidence={"stored": cursor.chat_version},
            )
            return
        if cursor is None and room_id in self.state.stored_rooms:  # stored, no cursor: it holds windows
            # Windows but no cursor: a room rebuild that did not finish. Finish it (the
            # leftovers are pruned at its end) rather than fold new windows onto old ones.
            await self._rebuild(room_id, alias, spans, log, member_state, why="unfinished_rebuild", evidence={})
            return
        try:
            await self._read(room_id, alias, spans, cursor, log, member_state)
        except RebuildNeeded as need:
            await self._rebuild(room_id, alias, spans, log, member_state, why=need.why, evidence=need.evidence)

    async def _rebuild(
        self,
        room_id: str,
        alias: str | None,
        spans: list[PurgeSpan],
        log: Any,
        member_state: list[dict[str, Any]],
        *,
        why: str,
        evidence: dict[str, Any],
    ) -> None:
        """Read the room again from the start beside its old windows; see the module docstring."""
        state = self.state
        self.index.drop_cursor(room_id)  # before any delete: a crash from here re-reads the room
        state.text_dropped = True
        written = state.rebuilding[room_id] = set()
        state.summary.rooms_rebuilt += 1
        log.info("room_rebuild_started", why=why, evidence=evidence)
        try:
            await self._read(room_id, alias, spans, None, log, member_state)
        except BaseException:
            if why == "unknown_redaction_target":  # the redacted text must not outlive this run
                deleted = self.index.prune_room(room_id, sorted(written))
                state.summary.windows_deleted += deleted
                log.warning("room_rebuild_failed", why=why, windows_deleted=deleted, kept_old=False)
            else:
                log.warning("room_rebuild_failed", why=why, windows_written=len(written), kept_old=True)
            raise
        finally:
            state.rebuilding.pop(room_id, None)
            deferred = state.deferred_cursors.pop(room_id, None)
        deleted = self.index.prune_room(room_id, sorted(written))
        state.summary.windows_deleted += deleted
        if deferred is not None:
            self.index.set_cursor(deferred)
        log.info("room_rebuilt", why=why, evidence=evidence, windows_written=len(written), windows_deleted=deleted)

    async def _read(
        self,
        room_id: str,
        alias: str | None,
        spans: list[PurgeSpan],
        cursor: RoomCursor | None,
        log: Any,
        member_state: list[dict[str, Any]],
    ) -> None:
        fold = RoomFold(
            room_id,
            self.options.bounds,
            purges=spans,
            open_window=self._open_window(cursor),
            incremental=cursor is not None,
        )
        names = DisplayNames()  # who was called what, as the read goes (chunker.members)
        names.learn(member_state)
        new_spans = self._apply_new_purges(room_id, spans, fold, log)
        if cursor is not None and not new_spans and self.state.latest_event.get(room_id) == cursor.last_event_id:
            # This run's /sync says the room's newest event is the one the cursor ends at: nothing
            # new to read (an event arriving since is read by the next run).
            log.info("room_current", events_read=0, open_window_id=cursor.open_window_id, unchanged=True)
            return
        position = ReadPosition(
            token=cursor.end_token if cursor else None,
            last_event_id=cursor.last_event_id if cursor else None,
            last_progress=self.clock(),
        )
        await self._read_pages(room_id, alias, spans, fold, names, position, log)
        if position.events_read or new_spans:
            # The room's last checkpoint is embedded and written while the next room is decided
            # and read, unless something must follow its write: a new purge's meta entry, or a
            # room rebuild's prune.
            later = not new_spans and room_id not in self.state.rebuilding
            await self.checkpoints.checkpoint(
                room_id, alias, fold, position.token, position.last_event_id, wait=not later
            )
        if new_spans:
            self.index.set_meta_entry(schema.purge_key(room_id), [[s.ts_from, s.ts_to] for s in spans])
        if self.state.stopped_in != room_id:
            log.info("room_current", events_read=position.events_read, open_window_id=fold.open_window_id)

    def _open_window(self, cursor: RoomCursor | None) -> Window | None:
        """The window the cursor says is still open, as stored."""
        if cursor is None or not cursor.open_window_id:
            return None
        stored = self.index.get_windows([cursor.open_window_id])
        return schema.window_from_payload(stored[0]) if stored else None

    def _apply_new_purges(self, room_id: str, spans: list[PurgeSpan], fold: RoomFold, log: Any) -> list[PurgeSpan]:
        """The spans not applied to the room yet: the fold is given the stored windows in each,
        to drop their messages. Which spans are new."""
        applied = self.index.get_meta_entry(schema.purge_key(room_id)) or []
        new_spans = [s for s in spans if [s.ts_from, s.ts_to] not in applied]
        for span in new_spans:
            fold.provide(self._stored(room_id, self.index.windows_in_span(room_id, span.ts_from, span.ts_to)))
            self.state.text_dropped = True
            log.info("purge_applied", ts_from=span.ts_from, ts_to=span.ts_to)
        return new_spans

    async def _read_pages(
        self,
        room_id: str,
        alias: str | None,
        spans: list[PurgeSpan],
        fold: RoomFold,
        names: DisplayNames,
        position: ReadPosition,
        log: Any,
    ) -> None:
        """Page after page until the room's end (or a stop): each folded, checkpointed every
        ``checkpoint_events`` events unless the room is being rebuilt."""
        summary = self.state.summary
        prefetch: asyncio.Task[Page] | None = None
        try:
            while True:
                page, prefetch = await self._next_page(room_id, position.token, prefetch)
                if not page.events:
                    break
                events = self._fold_page(room_id, page, names, fold)
                if fold.unknown_redactions:
                    await self._resolve_unknown_redactions(room_id, fold, spans)
                position.events_read += len(events)
                summary.events_read += len(events)
                position.last_event_id = _last_event_id(page.events) or position.last_event_id
                if page.end is not None:
                    position.token = page.end
                position.pending += len(events)
                # A room rebuild writes once, at its end: a window written part-way would replace
                # the old, fuller window of the same id, and readers would find less until the end.
                if position.pending >= self.options.checkpoint_events and room_id not in self.state.rebuilding:
                    await self.checkpoints.checkpoint(
                        room_id, alias, fold, position.token, position.last_event_id, wait=False
                    )
                    position.pending = 0
                self._report_progress(room_id, alias, position, log)
                if page.end is None or self._stops_after_page(room_id, position, log):
                    break
        except BaseException:
            # Refused, rebuilt or failed: this room's checkpoint in flight lands before what follows
            # purges, prunes or rebuilds the room. If it failed, that failure is the room's (as it
            # was when the write came first): the room fails and is decided again next run.
            await self.checkpoints.drain(room_id)
            raise
        finally:
            if prefetch is not None:  # the room was refused, needs a rebuild, or failed
                prefetch.cancel()
                with contextlib.suppress(asyncio.CancelledError, MatrixError):
                    await prefetch

    async def _next_page(
        self, room_id: str, token: str | None, prefetch: asyncio.Task[Page] | None
    ) -> tuple[Page, asyncio.Task[Page] | None]:
        """The page from ``token`` (asked for already when ``prefetch`` is given), and the request
        for the page after it, sent before this one is folded."""
        tick = time.perf_counter()
        if prefetch is not None:
            page = await prefetch
        else:
            page = await self.matrix.messages(room_id, token, self.options.page_size)
        self.state.summary.seconds_reading += time.perf_counter() - tick
        if not page.events or page.end is None:
            return page, None
        # Ask for the next page now: the homeserver answers while this one is folded, embedded (in
        # a worker thread) and written. Besides this coroutine only the checkpoint in flight
        # touches the fold (drop_written_windows, at an await here).
        following = asyncio.create_task(self.matrix.messages(room_id, page.end, self.options.page_size))
        await asyncio.sleep(0)  # let the request go out before the folding below
        return page, following

    def _fold_page(self, room_id: str, page: Page, names: DisplayNames, fold: RoomFold) -> list[Any]:
        """The page's events parsed, checked against scope and fed to the fold; the events."""
        summary = self.state.summary
        tick = time.perf_counter()
        names.learn(page.state)
        events = names.annotate(page.events, [parse_event(raw) for raw in page.events])
        self._check_timeline(events)
        if any(isinstance(ev, Redaction) for ev in events):
            self.state.text_dropped = True
        for ev in events:
            if isinstance(ev, Other):
                why = skip_reason(ev.kind)
                summary.events_skipped[why] = summary.events_skipped.get(why, 0) + 1
        wanted = fold.lookups(events)
        if wanted:
            fold.provide(self._stored(room_id, self.index.windows_with_events(room_id, sorted(wanted))))
        fold.feed(events)
        summary.seconds_folding += time.perf_counter() - tick
        return events

    def _report_progress(self, room_id: str, alias: str | None, position: ReadPosition, log: Any) -> None:
        summary = self.state.summary
        if self.progress is not None:
            # What is left is counted in rooms: /messages tells no count of the events
            # still to come, and a room's timestamps (backdated history) say nothing of it.
            self.progress(
                alias or room_id,
                position.events_read,
                summary.windows_written,
                self.state.rooms_before,
                self.state.rooms_total,
            )
        if self.clock() - position.last_progress >= self.options.progress_every_s:
            position.last_progress = self.clock()
            log.info("room_progress", events_read=position.events_read, windows_written=summary.windows_written)

    def _stops_after_page(self, room_id: str, position: ReadPosition, log: Any) -> bool:
        """A safe point: the page is folded, nothing is half written. Whether a stop was asked for;
        a room rebuild cut short raises ``RebuildStopped`` (it keeps the old windows)."""
        if not self.stop.requested:
            return False
        self.state.stopped_in = room_id
        self.state.unfinished.add(room_id)
        if room_id in self.state.rebuilding:
            raise RebuildStopped(room_id)
        log.info("room_stopped", events_read=position.events_read, signal=self.stop.signal_name)
        return True

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
                raise RoomRefusedMidHistory(reason, {**evidence, "event_id": ev.event_id})

    async def _resolve_unknown_redactions(self, room_id: str, fold: RoomFold, spans: list[PurgeSpan]) -> None:
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
            raise RebuildNeeded(
                "unknown_redaction_target",
                {
                    "redaction_id": redaction.event_id,
                    "target_id": redaction.target_id,
                    "target_type": None if target is None else target.get("type"),
                },
            )

    def _stored(self, room_id: str, payloads: Sequence[dict[str, Any]]) -> list[Window]:
        """Stored windows for the fold. During a room rebuild only those this rebuild wrote: the
        old ones stay stored until the rebuild ends but belong to the old layout."""
        windows = [schema.window_from_payload(p) for p in payloads]
        written = self.state.rebuilding.get(room_id)
        return windows if written is None else [w for w in windows if w.point_id in written]


def _last_event_id(raw_events: Sequence[Any]) -> str | None:
    for raw in reversed(raw_events):
        if isinstance(raw, dict) and isinstance(raw.get("event_id"), str):
            return raw["event_id"]
    return None

"""A refresh run's checkpoints: a room's changed windows embedded, written, then its cursor set.

Owns: CHECKPOINT (see ``daemon.refresher.run``): embed the windows a room's fold changed (one
dense vector per message line, reusing the vectors this run made lately or the window's stored
point holds; BM25 over each window's text), ``IndexWriter.write_windows`` (write boundary 2), and
only once that returned ``IndexWriter.set_cursor`` (write boundary 3); a room rebuild's cursor is
held back until its old windows are pruned. Checkpoints form a chain: each embeds as soon as the
one before it has embedded and writes only once the one before it has written, so the embedder
never waits for a write and writes and cursors keep their order. At most two are alive (one
embedding, one writing), which bounds memory; what a write settled is released from the fold.

Must not: advance a cursor before its windows' write was acknowledged, decide what a window holds
(``chunker`` does), or read the homeserver. A failed checkpoint is its room's failure: raised to
that room's read, or journalled once as that room's when another room reads now.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from chunker.context import dense_row_texts
from chunker.fold import Changes, RoomFold
from chunker.windows import Window, embed_text
from daemon.index import schema
from daemon.index.port import IndexWriter, RoomCursor, SparseVector, WindowPoint
from daemon.ports import Embedder
from daemon.refresher.run_state import RunState

# Row vectors (message lines and context rows) kept for reuse within a run
# (``Checkpoints._points``): enough for the open window and recent edits, ~12 MB at most as
# Python floats.
_LINE_VECTORS_KEPT = 1024


@dataclass
class CheckpointInFlight:
    """A checkpoint in flight: its room, its task (embed, then write once the one before it
    wrote); ``embedded``: set once its embedding is over, when the next one may embed;
    ``successor``: a next checkpoint waits to embed, and ``successor_embedding`` is set once it
    has begun (this one's write waits for that)."""

    room_id: str
    task: "asyncio.Task[None] | Any"
    embedded: asyncio.Event
    successor_embedding: asyncio.Event
    successor: bool = False


class Checkpoints:
    def __init__(
        self,
        index: IndexWriter,
        embedder: Embedder,
        state: RunState,
        *,
        chat_version: str,
        clock: Callable[[], float],
    ) -> None:
        self.index = index
        self.embedder = embedder
        self.state = state
        self.chat_version = chat_version
        self.clock = clock
        # The newest checkpoint being embedded and written while the run reads on (``checkpoint``).
        self._in_flight: CheckpointInFlight | None = None
        # Room -> checkpoint sequence number -> the windows that checkpoint took from the room's fold
        # and has not written yet: a write releases the fold's settled windows but those
        # (``_write``). Before, only the newest take's write released, and in a long
        # backfill a later checkpoint has always taken before the one before it writes: the fold
        # kept every window of the run (~230 MB at 1M messages, bench/scale.py).
        self._checkpoint_seq = 0
        self._unwritten_takes: dict[str, dict[int, frozenset[str]]] = {}
        # Row texts embedded lately, oldest first (``_points``), at most _LINE_VECTORS_KEPT.
        self._line_vectors: dict[str, list[float]] = {}

    def after_writes(self, room_id: str, then: Callable[[], None]) -> None:
        """Run ``then`` once the room's checkpoint in flight (if any) is acknowledged; never if
        it fails (that failure stays the room's, journalled once by ``drain``)."""
        if self._in_flight is None or self._in_flight.room_id != room_id:
            then()
            return
        previous = self._in_flight.task

        async def chained() -> None:
            await previous
            then()

        # The same flight, its task extended: the next checkpoint's handoff still reaches its write.
        self._in_flight.task = asyncio.create_task(chained())

    async def drain(self, room_id: str | None) -> None:
        """Wait for the checkpoints in flight (the newest waits for the one before it). A failure is
        its room's: raised when that is ``room_id`` (the room reading now stops: a later cursor must
        not pass windows that were never written), else journalled as that room's failure."""
        if self._in_flight is None:
            return
        flight, self._in_flight = self._in_flight, None
        await self._await_flight(flight, room_id)

    async def _await_flight(self, flight: CheckpointInFlight, room_id: str | None) -> None:
        """Wait for ``flight``; its failure is raised when it is ``room_id``'s, else journalled."""
        try:
            await flight.task
        except Exception as exc:
            if flight.room_id == room_id:
                raise
            self.state.fail(flight.room_id, type(exc).__name__, error=str(exc))

    async def checkpoint(
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
        the run reads and folds on."""
        previous, self._in_flight = self._in_flight, None
        if previous is not None:
            if previous.task.done():
                await self._await_flight(previous, room_id)  # a failure of this room's stops its read here
                previous = None
            else:
                # Its write waits until ours has begun embedding (``_write``).
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
            flight = CheckpointInFlight(room_id, None, asyncio.Event(), asyncio.Event())
            job = self._write(
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
            await self.drain(room_id)

    async def _write(
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
        previous: CheckpointInFlight | None,
        flight: CheckpointInFlight,
    ) -> None:
        state, summary = self.state, self.state.summary
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
            await self._await_flight(previous, room_id)  # write boundary 2 waits for the writes before it
        tick = time.perf_counter()
        if points or changes.deletes:
            self.index.write_windows(room_id, points, list(changes.deletes))  # write boundary 2
            if points:
                state.stored_rooms.add(room_id)
            if changes.deletes:
                state.text_dropped = True
            written = state.rebuilding.get(room_id)
            if written is not None:
                written.difference_update(changes.deletes)
                written.update(p.point_id for p in points)
            summary.windows_written += len(points)
            summary.windows_deleted += len(changes.deletes)
        if token is None or last_event_id is None:
            summary.seconds_writing += time.perf_counter() - tick
            return
        cursor = RoomCursor(
            room_id=room_id,
            end_token=token,
            last_event_id=last_event_id,
            open_window_id=open_window_id,
            chat_version=self.chat_version,
            updated_ms=int(self.clock() * 1000),
        )
        if room_id in state.rebuilding:
            # A room rebuild sets its cursor only once its old windows are pruned (RoomReading.rebuild).
            state.deferred_cursors[room_id] = cursor
        else:
            self.index.set_cursor(cursor)  # write boundary 3: only after boundary 2 was acknowledged
        state.stored_rooms.add(room_id)
        # What was just written need not stay in memory (fold "Memory"), except the windows a later
        # checkpoint took and has not written yet.
        unwritten = self._unwritten_takes.get(room_id, {})
        unwritten.pop(seq, None)
        fold.drop_written_windows(keep=frozenset().union(*unwritten.values()))
        summary.seconds_writing += time.perf_counter() - tick

    async def _points(
        self,
        windows: Sequence[Window],
        alias: str | None,
        *,
        embedding: Callable[[], None] | None = None,
        embedded: Callable[[], None] | None = None,
    ) -> list[WindowPoint]:
        """The windows as points: BM25 over each window's text, and one dense vector per message
        (``<localpart>: <body>`` alone) then one per context row (the message after the line it
        answers, ``chunker.context``; schema.DENSE), so a window ranks by its best message. A
        row text whose vector this run made lately or the window's stored point holds is not
        embedded again: the open window is rewritten at every checkpoint and an edit rewrites
        its whole window, but only new or changed rows cost. ``embedding`` is called as the
        embedding starts, ``embedded`` once the vectors are in (the checkpoint chain's handoffs)."""
        live = [w for w in windows if w.messages]
        texts = [embed_text(w) for w in live]
        lines = [dense_row_texts(w.messages)[0] for w in live]
        known = self._line_vectors
        rewritten = [w.point_id for w, rows in zip(live, lines) if any(line not in known for line in rows)]
        if rewritten and any(w.room_id in self.state.stored_rooms for w in live):  # else nothing stored to reuse
            known.update(self.index.message_vectors(rewritten))
        fresh = [line for line in dict.fromkeys(line for rows in lines for line in rows) if line not in known]
        tick = time.perf_counter()
        # In a worker thread, so the event loop reads the next page meanwhile (onnxruntime and
        # the tokenizer release the GIL).
        if embedding is not None:
            embedding()
        dense, sparse = await asyncio.to_thread(self._embed, fresh, texts) if texts else ([], [])
        self.state.summary.seconds_embedding += time.perf_counter() - tick
        self.state.summary.texts_embedded += len(fresh)
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

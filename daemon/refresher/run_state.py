"""What the parts of one refresh run share, and the two things any of them may do to a room.

Owns: ``RunState``, one run's bookkeeping in memory: the summary being counted, the rooms the
index holds data of (kept in step with the run's own writes and purges), the rooms whose turn did
not finish (a full rebuild is not switched in while any remain), whether stored text was dropped
(the commit then compacts), the room rebuilds in progress, where this run's ``/sync`` said each
room's newest event is, and which room a stop cut short. And the two acts every part may need:
failing a room (``fail``: one journal line, counted once per room) and purging what the index
holds of it (``purge``).

Must not: decide scope, read the homeserver, or write to the index but through ``purge_room``; it
is never written to a file (``daemon.refresher.last_run`` writes the summary out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.index.port import IndexWriter, RoomCursor
from daemon.refresher.summary import RunSummary

# Failures after which a room holds nothing the index should keep: they never hold a rebuild back.
_NOTHING_TO_KEEP = frozenset({"join_failed", "alias_moved", "kicked", "banned", "left", "not_joined", "leave_failed"})


@dataclass
class RunState:
    index: IndexWriter
    log: Any
    summary: RunSummary = field(default_factory=RunSummary)
    # Rooms holding windows or a cursor: read from the index once per run (a full scroll of
    # the meta points), then kept in step with this run's own writes and purges.
    stored_rooms: set[str] = field(default_factory=set)
    # Rooms whose turn did not finish: a full rebuild is not switched in while any remain.
    unfinished: set[str | None] = field(default_factory=set)
    # The run deleted or rewrote stored text (redaction, purge, delete): compact at commit.
    text_dropped: bool = False
    # Room rebuilds in progress: {room_id: point ids written by this rebuild}; the cursor each
    # will set once its old windows are pruned.
    rebuilding: dict[str, set[str]] = field(default_factory=dict)
    deferred_cursors: dict[str, RoomCursor] = field(default_factory=dict)
    # Joined room -> its newest event id as this run's /sync saw it (none: unknown, read it).
    latest_event: dict[str, str] = field(default_factory=dict)
    stopped_in: str | None = None  # the room whose read a stop cut short
    # For the progress bar: rooms this run considers, and how many were finished before the current one.
    rooms_total: int = 0
    rooms_before: int = 0

    def fail(self, room_id: str | None, why: str, **context: Any) -> None:
        """Journal a failure; a room counts once however many of its steps failed. A failure to
        read what a room holds leaves a full rebuild unswitched; one where the room has nothing
        to keep (never joined, kicked, left) does not."""
        if why not in _NOTHING_TO_KEEP:
            self.unfinished.add(room_id)
        if room_id is None or room_id not in self.summary.failed_rooms:
            self.summary.rooms_failed += 1
        if room_id and room_id not in self.summary.failed_rooms:
            self.summary.failed_rooms.append(room_id)
        self.summary.failures[why] = self.summary.failures.get(why, 0) + 1
        self.log.error("room_failed", room_id=room_id, why=why, **context)

    def purge_if_stored(self, room_id: str, reason: str, evidence: dict[str, Any]) -> None:
        if room_id in self.stored_rooms:
            self.purge(room_id, reason=reason, evidence=evidence)

    def purge(self, room_id: str, *, reason: str, evidence: dict[str, Any]) -> None:
        """What the index holds of the room goes (``IndexWriter.purge_room``), journalled once."""
        deleted = self.index.purge_room(room_id)
        self.stored_rooms.discard(room_id)
        self.text_dropped = True
        self.summary.rooms_purged += 1
        self.summary.windows_deleted += deleted
        self.log.info("room_purged", room_id=room_id, reason=reason, evidence=evidence, windows_deleted=deleted)

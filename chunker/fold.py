"""The fold: one room's event stream in, window changes out. A pure state machine.

Owns: every rule that decides which window a message lands in, what an edit or a redaction does
to a stored window, what a replayed event does, and which redactions the fold cannot honour.

Must not: do I/O, know about the index, Matrix or the embedder, or keep any text of a redacted
message. The shell (``daemon/refresher/run.py``) does the reading and writing:

    fold = RoomFold(room_id, bounds, purges=..., open_window=<cursor's window>, incremental=...)
    for page in pages:
        fold.provide(windows_with_events(room_id, fold.lookups(page)))
        fold.feed(page)
        drain fold.unknown_redactions
        every so many events:
            write(fold.take_changes()); write the cursor; fold.drop_written_windows()

Theory of operation (docs/design.md, "The fold"). The stored windows are a pure function of the
event stream, built one event at a time, so page boundaries never matter, and re-feeding events
whose effect is already stored changes nothing. That second property is what makes a crash
between a window write and the cursor write harmless, and it rests on four rules:

1. A message the fold already holds (as a message or as a tombstone in ``redacted_ids``) is a
   replay: it only moves the open window to the window that holds it.
2. Layout looks only at the open window, and a closed window never takes a message (nor does an
   emptied one: it has no last message to measure a gap from), so replaying the events between
   the cursor and the end of what was stored walks the open window to exactly where it was.
3. Edits and redactions are idempotent on stored state once the replay has caught up: the
   latest edit wins, a tombstone swallows later edits and redactions.
4. A redaction of an edit reverts to the body before that edit, which the fold knows only for
   edits it has fed itself (the *edit chain*, per message, for the life of the fold). The chain
   of a message that came from the index starts at its stored body. While the fold may still be
   replaying (no message new to the index has arrived yet) an edit of such a message may already
   be in that stored body, so a revert that would fall back to it is not trusted: the redaction
   is reported in ``unknown_redactions`` (in every mode) and the shell rebuilds the room.

Threads. A message in a thread (``Message.thread_root``) is laid out in its thread's own windows
(``Window.thread_root``), never in the room's main timeline, which is laid out without them: the
main timeline and each thread are separate sequences, each with one open window, each following
the rules above on its own (a thread's gap and byte bound are measured inside the thread). The
root is a main-timeline message and stays in its main window, once: a thread's windows do not
copy it, so its edit or redaction has one place to go, and the reader shows it beside a thread's
hits from the index. A thread's open window is found again the way any stored window is: the
shell's lookup of the root id returns the thread's windows (``windows_with_events`` matches
``thread_root``), so ``lookups`` names the root of every thread message whose open window the
fold does not hold. Edits and redactions find their target by id in whichever window holds it.

Purge spans drop messages by their own ts, on arrival and from every window provided; a provided
window left with neither messages nor tombstones is deleted. An edit is judged by its target,
not by its own ts.

Secrets across messages. Every body arrives scrubbed on its own (``chunker.events``); two cases
need the message before, so the fold handles them (``chunker.scrub`` has the rules):

- a private key whose BEGIN line was in the sender's previous message: the base64 lines that
  open the next message are the rest of it (``scrub_continuation``; the fold keeps each sender's
  last stored body for the life of the fold, seeded from the open window);
- an edit that completes a key pasted cut short: the edit's redactions carry back onto every
  body it replaces (the stored one and the edit chain), and the stored body's onto the edit
  (``carry_redactions``), so a revert never brings the first half back.

A redaction the fold cannot place at all (its target is no held message or tombstone and no
event this fold was fed) is *unknown*: reported when the room had a cursor (``incremental``),
because it may be of an edit stored by an earlier run; ignored when folding from the start of
history, where every edit and message would have been seen.

Memory. The fold holds windows, not the room. ``drop_written_windows()``, called once the shell has
written ``take_changes()`` and the cursor, drops every window that is closed, written (not dirty)
and not the open window, unless it must stay (below). A released window is in the index exactly
as it was held (the payload round-trips), so when a later event of the run needs it (a
replayed message, an edit or redaction target) ``lookups`` names its ids again and ``provide``
brings it back; "held" in the rules above means "held or handed back by the shell". What stays:

- the main open window, and windows changed since the last ``take_changes`` (a thread's open
  window is released like a closed one: the lookup of its root brings it back);
- windows whose anchor is neither among their messages nor their tombstones (a purged anchor):
  a lookup by the anchor id cannot find them, and the anchor replay check in ``_on_message``
  needs them.

A window holding an edited message is released like any other: its message's edit chain stays
(reverting a redacted edit needs it), and since a redaction names the edit, which no stored window
lists, ``lookups`` maps a redacted edit to its message and asks for that window back; the body it
comes back with is the chain's latest, as written.

So a run holds about the open window + the windows of one checkpoint, however long the history.
What still grows per event is ids and edit chains only: accepted edits (edit id -> message id,
and each edited message's bodies), deleted point ids, and, when ``incremental``,
the ids of fed events the fold does not store (edits, redactions, others, purged messages), so
that a redaction of one is not taken for unknown. From the start of history that set is not kept:
an unknown redaction is ignored there anyway, so the set would decide nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Sequence

from chunker.events import Edit, Event, Message, Other, Redaction
from chunker.scrub import carry_redactions, scrub_continuation
from chunker.windows import StoredMessage, Window, embed_line, window_bytes, window_point_id


def _positive_int(value: object, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class Bounds:
    """Layout limits: a window's ``embed_text`` stays within ``max_bytes`` (unless one message is
    bigger on its own), and a message more than ``max_gap_ms`` after the window's last one starts
    a new window."""

    max_bytes: int = 700
    max_gap_ms: int = 15 * 60 * 1000

    def __post_init__(self) -> None:
        _positive_int(self.max_bytes, "max_bytes")
        _positive_int(self.max_gap_ms, "max_gap_ms")


@dataclass(frozen=True)
class PurgeSpan:
    """A steward's purge: messages with ``ts_from <= ts <= ts_to`` (unix ms) are never stored."""

    ts_from: int
    ts_to: int

    def __post_init__(self) -> None:
        for name in ("ts_from", "ts_to"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer (unix ms), got {value!r}")
        if self.ts_from > self.ts_to:
            raise ValueError(f"ts_from ({self.ts_from}) must not be after ts_to ({self.ts_to})")

    def covers(self, ts: int) -> bool:
        return self.ts_from <= ts <= self.ts_to


@dataclass
class Changes:
    """What to write since the last ``take_changes``: each changed window once, in its final
    state, and the point ids of windows that must go."""

    upserts: list[Window] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)


@dataclass
class _EditChain:
    """One message's accepted edits, oldest first, on top of the body the fold first saw."""

    base_body: str
    base_may_hold_replayed_edit: bool = False
    edits: list[tuple[str, str]] = field(default_factory=list)  # (edit event id, body)

    def body(self) -> str:
        return self.edits[-1][1] if self.edits else self.base_body


class RoomFold:
    """The fold of one room's events into windows, for one run of the refresher."""

    def __init__(
        self,
        room_id: str,
        bounds: Bounds,
        *,
        purges: Sequence[PurgeSpan] = (),
        open_window: Window | None = None,
        incremental: bool = False,
    ) -> None:
        self.room_id = room_id
        self.bounds = bounds
        self.incremental = incremental
        self.unknown_redactions: list[Redaction] = []
        self._purges = tuple(purges)
        self._windows: dict[str, Window] = {}  # point id -> window, in the order the fold got them
        self._holder: dict[str, str] = {}  # message or tombstone event id -> point id
        self._open_id: str | None = None  # the main timeline's open window
        self._thread_open: dict[str, str] = {}  # thread root id -> point id of the thread's open window
        self._dirty: dict[str, None] = {}  # ordered set of point ids
        self._gone: dict[str, None] = {}  # deleted point ids, never taken back
        self._undelivered_deletes: dict[str, None] = {}
        # Ids of fed events that no window holds (edits, redactions, others, purged messages);
        # kept only when incremental, the one mode where a redaction of one could be misreported.
        self._fed_unstored: set[str] = set()
        self._edit_target: dict[str, str] = {}  # accepted edit id -> message id
        self._chains: dict[str, _EditChain] = {}
        self._maybe_replaying = True  # until the first message new to the index arrives
        self._last_body: dict[str, str] = {}  # sender -> their latest stored body (cross-message scrub)
        self._handlers: dict[type, Callable[[Any], None]] = {  # each takes the type it is keyed by
            Message: self._on_message,
            Edit: self._on_edit,
            Redaction: self._on_redaction,
            Other: self._on_other,
        }
        if open_window is not None:
            self.provide([open_window])
            if open_window.point_id in self._windows:
                self._open_id = open_window.point_id
            for held in open_window.messages:
                self._last_body[held.sender] = held.body

    # ---- the shell's side -------------------------------------------------------------

    @property
    def open_window_id(self) -> str | None:
        return self._open_id

    def lookups(self, events: Sequence[Event]) -> set[str]:
        """Event ids whose stored windows the fold needs before ``feed(events)``: every message
        (to recognise a replay) and every edit or redaction target, minus what it holds and the
        fed events it knows no window holds. A message of a released window is asked for again."""
        wanted: set[str] = set()
        roots: set[str] = set()
        for event in events:
            if isinstance(event, Message):
                if not self._purged(event.ts):
                    wanted.add(event.event_id)
                    if event.thread_root is not None and event.thread_root not in self._thread_open:
                        roots.add(event.thread_root)  # its thread's open window (held root or not)
            elif isinstance(event, (Edit, Redaction)):
                wanted.add(event.target_id)
                # A redaction of an accepted edit reverts its message, whose window may have
                # been released since: ask for it back (the chain itself stays held).
                edited = self._edit_target.get(event.target_id) if isinstance(event, Redaction) else None
                if edited is not None and edited in self._chains:
                    wanted.add(edited)
        return {i for i in wanted if i not in self._holder and i not in self._fed_unstored} | roots

    def provide(self, windows: Iterable[Window]) -> None:
        """Hand the fold stored windows. A window it already holds is skipped (its own copy is
        newer); purge spans apply at once."""
        for stored in windows:
            if stored.room_id != self.room_id:
                raise ValueError(f"provided window room_id {stored.room_id!r} is not {self.room_id!r}")
            point_id = stored.point_id
            if point_id in self._windows or point_id in self._gone:
                continue
            window = stored.copy()
            self._windows[point_id] = window
            for event_id in [m.event_id for m in window.messages] + window.redacted_ids:
                self._holder.setdefault(event_id, point_id)
            if window.thread_root is not None and not window.closed:
                self._thread_open.setdefault(window.thread_root, point_id)
            self._apply_purges(window)

    def feed(self, events: Sequence[Event]) -> None:
        """Fold one page of events, in stream order."""
        for event in events:
            handler = self._handlers.get(type(event))
            if handler is None:
                raise TypeError(f"event must be Message, Edit, Redaction or Other, got {type(event).__name__}")
            handler(event)
            if self.incremental and event.event_id not in self._holder:
                self._fed_unstored.add(event.event_id)

    def take_changes(self) -> Changes:
        changes = Changes(
            upserts=[self._windows[p].copy() for p in self._dirty if p in self._windows],
            deletes=list(self._undelivered_deletes),
        )
        self._dirty.clear()
        self._undelivered_deletes.clear()
        return changes

    def windows(self) -> list[Window]:
        """Every window held now (released ones are not): stored windows in the order they were
        provided, then the windows this fold opened, in stream order."""
        return [w.copy() for w in self._windows.values()]

    def drop_written_windows(self, keep: Collection[str] = ()) -> int:
        """Drop the windows the index already holds as they are and no rule needs held (module
        docstring, "Memory"); returns how many. Call only after the windows from
        ``take_changes()`` were written, or name in ``keep`` the windows of any later take that is
        not written yet: a dirty window is never dropped, but one taken and not written would be
        lost (a lookup of it would find nothing in the index)."""
        settled = [
            window
            for point_id, window in self._windows.items()
            if (window.closed or window.thread_root is not None)
            and point_id != self._open_id
            and point_id not in self._dirty
            and point_id not in keep
            and point_id not in self._gone
            and self._findable_by_anchor(window)
        ]
        for window in settled:
            point_id = window.point_id
            del self._windows[point_id]
            for event_id in [m.event_id for m in window.messages] + window.redacted_ids:
                if self._holder.get(event_id) == point_id:
                    del self._holder[event_id]
            self._forget_thread_open(window)
        return len(settled)

    # ---- transitions --------------------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        holder = self._holder.get(message.event_id)
        if holder is not None:  # rule 1: a replay
            held = self._windows.get(holder)
            self._set_open(held.thread_root if held is not None else None, holder)
            found = self._held_message(message.event_id)
            if found is not None:
                self._last_body[message.sender] = found[1].body
            return
        if self._purged(message.ts):
            return
        body = scrub_continuation(self._last_body.get(message.sender), message.body)
        self._last_body[message.sender] = body
        stored = StoredMessage(
            message.event_id,
            message.sender,
            message.ts,
            body,
            reply_to=message.reply_to,
            display_name=message.display_name,
        )
        thread = message.thread_root
        open_id = self._open_id if thread is None else self._thread_open.get(thread)
        open_window = self._windows.get(open_id) if open_id else None
        if open_window is not None and self._fits(open_window, stored):
            target = open_window
        else:
            point_id = window_point_id(self.room_id, message.event_id)
            if point_id in self._windows:  # a stored window already anchored here: a replay
                self._set_open(self._windows[point_id].thread_root, point_id)
                return
            if open_window is not None and not open_window.closed:
                open_window.closed = True
                self._mark(open_window)
            target = Window(room_id=self.room_id, anchor_id=message.event_id, thread_root=thread)
            self._windows[point_id] = target
            # Reachable only with inconsistent stored data; never upsert and delete one id.
            self._gone.pop(point_id, None)
            self._undelivered_deletes.pop(point_id, None)
            self._set_open(thread, point_id)
        target.messages.append(stored)
        self._holder[message.event_id] = target.point_id
        self._maybe_replaying = False
        self._mark(target)

    def _on_edit(self, edit: Edit) -> None:
        # An edit of an edit, of a tombstone or of anything never stored finds no held message.
        found = self._held_message(edit.target_id)
        if found is None or found[1].sender != edit.sender:
            return  # dropped: a redaction of it finds no chain and changes nothing
        window, message = found
        chain = self._chains.get(message.event_id)
        if chain is None:
            chain = self._chains[message.event_id] = _EditChain(message.body)
        # While replaying, every held message came from the index (laying one out ends the
        # replay), so its stored body may already hold this very edit.
        if self._maybe_replaying:
            chain.base_may_hold_replayed_edit = True
        # Two versions of one text: what either redacted goes from the other (a key pasted cut
        # short and completed by this edit loses its first half too).
        new_body = carry_redactions(chain.body(), edit.body)
        chain.base_body = carry_redactions(new_body, chain.base_body)
        chain.edits = [(edit_id, carry_redactions(new_body, body)) for edit_id, body in chain.edits]
        chain.edits.append((edit.event_id, new_body))
        self._edit_target[edit.event_id] = message.event_id
        self._set_body(window, message, chain.body())

    def _on_redaction(self, redaction: Redaction) -> None:
        target_id = redaction.target_id
        if target_id in self._holder:
            found = self._held_message(target_id)
            if found is not None:
                window, message = found
                window.messages.remove(message)
                window.redacted_ids.append(target_id)
                self._chains.pop(target_id, None)
                self._mark(window)
            return  # a held tombstone: already redacted
        if target_id in self._edit_target:
            self._revert_edit(redaction)
            return
        if target_id in self._fed_unstored:
            return  # a dropped edit, an Other, a redaction or a purged message: nothing stored
        if self.incremental:
            self.unknown_redactions.append(redaction)

    def _on_other(self, other: Other) -> None:
        pass  # not stored; feed() remembers its id so a redaction of it is not unknown

    # ---- helpers -----------------------------------------------------------------------

    def _set_open(self, thread_root: str | None, point_id: str) -> None:
        """Make ``point_id`` the open window of its timeline (the main one, or a thread)."""
        if thread_root is None:
            self._open_id = point_id
        else:
            self._thread_open[thread_root] = point_id

    def _forget_thread_open(self, window: Window) -> None:
        if window.thread_root is not None and self._thread_open.get(window.thread_root) == window.point_id:
            del self._thread_open[window.thread_root]

    def _revert_edit(self, redaction: Redaction) -> None:
        chain = self._chains.get(self._edit_target[redaction.target_id])
        if chain is None:
            return  # its message has been redacted since
        remaining = [e for e in chain.edits if e[0] != redaction.target_id]
        if len(remaining) == len(chain.edits):
            return  # this edit was already reverted
        chain.edits = remaining
        if not remaining and chain.base_may_hold_replayed_edit:
            self.unknown_redactions.append(redaction)  # rule 4: the base cannot be trusted
        found = self._held_message(self._edit_target[redaction.target_id])
        if found is not None:  # lookups asked for its window back if it was released
            self._set_body(found[0], found[1], chain.body())

    def _fits(self, window: Window, message: StoredMessage) -> bool:
        if window.closed or not window.messages:
            # An emptied window has no last message to measure a gap from: start afresh.
            return False
        if message.ts - window.messages[-1].ts > self.bounds.max_gap_ms:
            return False
        grown = window_bytes(window) + 1 + len(embed_line(message).encode("utf-8"))
        return grown <= self.bounds.max_bytes

    @staticmethod
    def _findable_by_anchor(window: Window) -> bool:
        # A lookup finds a window by the ids it lists. One whose anchor it no longer lists (the
        # anchor was purged from it) must stay held for the anchor replay check in _on_message.
        anchor = window.anchor_id
        return anchor in window.redacted_ids or any(m.event_id == anchor for m in window.messages)

    def _held_message(self, event_id: str) -> tuple[Window, StoredMessage] | None:
        point_id = self._holder.get(event_id)
        window = self._windows.get(point_id) if point_id else None
        if window is None:
            return None
        for message in window.messages:
            if message.event_id == event_id:
                return window, message
        return None  # a tombstone

    def _set_body(self, window: Window, message: StoredMessage, body: str) -> None:
        if message.body != body:
            message.body = body
            self._mark(window)

    def _purged(self, ts: int) -> bool:
        return any(span.covers(ts) for span in self._purges)

    def _apply_purges(self, window: Window) -> None:
        kept = [m for m in window.messages if not self._purged(m.ts)]
        if len(kept) == len(window.messages):
            return
        kept_ids = {m.event_id for m in kept}
        for message in window.messages:
            if message.event_id not in kept_ids and self._holder.get(message.event_id) == window.point_id:
                del self._holder[message.event_id]
        window.messages = kept
        if kept or window.redacted_ids:
            self._mark(window)
            return
        # Nothing left to recognise a replay by, and a purge keeps no trace: the point goes.
        point_id = window.point_id
        del self._windows[point_id]
        self._dirty.pop(point_id, None)
        self._gone[point_id] = None
        self._undelivered_deletes[point_id] = None
        if self._open_id == point_id:
            self._open_id = None
        self._forget_thread_open(window)

    def _mark(self, window: Window) -> None:
        self._dirty[window.point_id] = None

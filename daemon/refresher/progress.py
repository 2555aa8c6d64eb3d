"""A progress bar for a long backfill, on a terminal only.

Owns: drawing one status line on stderr when stderr is a TTY, and keeping it out of the way of
the journal lines written to the same stream (each journal line clears the bar, then the bar is
drawn again under it).

Must not: write anything when stderr is not a terminal (under systemd the journal is the only
output), or carry any message text — only room names and counts.

What is left is counted in rooms (the rooms this run considers, and how many are finished), with
the events read and windows written in the current room beside it. A room's own share is not
guessed: ``/messages`` gives no count of the events still to come, and timestamps mislead
(history imported with old timestamps reads as a room nearly untouched when it is done).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 24


class TtyProgress:
    def __init__(self, stream: TextIO | None = None, *, min_interval_s: float = 0.1) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval_s = min_interval_s
        self._line = ""
        self._drawn_at = 0.0

    @staticmethod
    def wanted(stream: TextIO | None = None) -> bool:
        stream = stream if stream is not None else sys.stderr
        return bool(getattr(stream, "isatty", lambda: False)())

    def update(self, room: str, events_read: int, windows_written: int, rooms_before: int, rooms_total: int) -> None:
        now = time.monotonic()
        if now - self._drawn_at < self.min_interval_s:
            return
        self._drawn_at = now
        total = max(rooms_total, 1)
        before = max(0, min(rooms_before, total - 1))
        filled = before * _WIDTH // total
        bar = "[" + "#" * filled + "." * (_WIDTH - filled) + f"] room {before + 1} of {total}"
        self._line = f"{bar} {room}: {events_read} events read, {windows_written} windows written"
        self._draw()

    def done(self) -> None:
        self._clear()
        self._line = ""

    def _draw(self) -> None:
        self.stream.write("\r\033[K" + self._line)
        self.stream.flush()

    def _clear(self) -> None:
        if self._line:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def journal_stream(self) -> "_JournalStream":
        """A stream for the journal: each line clears the bar first and redraws it after."""
        return _JournalStream(self)


class _JournalStream:
    """Buffers until a whole line is there (``print`` writes the newline separately), then clears
    the bar, writes the line, and draws the bar again."""

    def __init__(self, progress: TtyProgress) -> None:
        self._progress = progress
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            complete, _, self._pending = self._pending.rpartition("\n")
            self._progress._clear()
            self._progress.stream.write(complete + "\n")
            if self._progress._line:
                self._progress._draw()
        return len(text)

    def flush(self) -> None:
        self._progress.stream.flush()

    def isatty(self) -> bool:
        return True

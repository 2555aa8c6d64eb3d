"""A progress bar for a long backfill, on a terminal only.

Owns: drawing one status line on stderr when stderr is a TTY, and keeping it out of the way of
the journal lines written to the same stream (each journal line clears the bar, then the bar is
drawn again under it).

Must not: write anything when stderr is not a terminal (under systemd the journal is the only
output), or carry any message text — only room names and counts.

How far through a room's history a read is: the time of the last event read, between the first
event read this run and now. Chat arrives unevenly, so this is an estimate, but it moves steadily
and needs no count the homeserver does not give.
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

    def update(self, room: str, events_read: int, windows_written: int, fraction: float | None) -> None:
        now = time.monotonic()
        if now - self._drawn_at < self.min_interval_s:
            return
        self._drawn_at = now
        if fraction is None:
            bar = "[" + "?" * _WIDTH + "]"
        else:
            # Clock skew can put the last event before the first or after now: an estimate
            # still never reads below 0% or above 100%.
            fraction = max(0.0, min(1.0, fraction))
            filled = int(fraction * _WIDTH)
            bar = "[" + "#" * filled + "." * (_WIDTH - filled) + f"] {fraction * 100:5.1f}%"
        self._line = f"{bar} {room}: {events_read} events, {windows_written} windows written"
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

    def journal_stream(self) -> "_UnderTheBar":
        """A stream for the journal: each line clears the bar first and redraws it after."""
        return _UnderTheBar(self)


class _UnderTheBar:
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


def history_fraction(first_ts: int | None, last_ts: int | None, now_ms: int) -> float | None:
    if first_ts is None or last_ts is None or now_ms <= first_ts:
        return None
    return (last_ts - first_ts) / (now_ms - first_ts)

"""How a refresh run is asked to stop: SIGTERM (systemd stopping the unit) or SIGINT (Ctrl-C).

Owns: ``StopRequest``, which turns the first of those signals into a request the refresher reads
at its next safe point (between two pages of a room, between two rooms: never inside a write),
and lets a second one end the process at once, as the signal would have without a handler.

Must not: do any work in the signal handler beyond recording the signal (it runs between two
bytecodes of whatever the main thread was doing), nor decide where a run may stop: the
refresher does (``daemon/refresher/run.py``).
"""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """``signal_name`` is None until a stop is asked for, then the first signal's name
    (``SIGTERM``, ``SIGINT``). ``install`` takes both signals over; ``restore`` gives them back."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def request(self, name: str) -> None:
        """Ask for a stop without a signal (tests, and the handler below)."""
        if self.signal_name is None:
            self.signal_name = name

    def install(self) -> "StopRequest":
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signal_name is not None:
            # A second signal while the run winds down: the operator insists. The index is
            # crash-safe at every point (the next run converges), so end as the signal would.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signal_name = signal.Signals(signum).name

"""``huginn-chat follow``: start a refresh as soon as the homeserver shows something new, and
between refreshes hold one request open instead of starting a process every few seconds.

Owns: ``FollowLoop``. Between refreshes it long-polls the filtered ``/sync`` from the token the
last full run stored (``sync_state``), each poll held by the homeserver up to ``poll_s``, and
starts a refresh cycle when a poll shows new timeline or state events in a joined room, an
invite or a room left; when this host alone can tell one is due (no stored state, the settings,
the purge list or the published index changed: ``idle.local_reason``); and when the scope facts
reach ``scope_recheck_s`` (``scope_recheck_s = 0``: a full run on every wake and every
``poll_s``, not one after another). A poll that failed starts a
cycle after a pause (its own ``/sync`` decides: an expired token is a full run there, a homeserver
that is down is a failed run); a poll that failed, or a cycle that ended without a stored state,
pauses the loop ``BACKOFF_S``, longer each time in a row.

Must not: decide what a refresh decides or touch what it writes (the cycle asks the homeserver
again, runs the full run, stores or drops the token: ``idle.refresh_cycle``); write any file; or
start a thread: ``run_cycle`` is given by the wiring, which runs each cycle in a child process
forked from this one under the refresh lock (``refresh_lock``), and a process with threads must
not fork.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from daemon.errors import EXIT_OK
from daemon.ports import MatrixError, SyncChanges
from daemon.refresher.idle import local_reason
from daemon.refresher.sync_state import RunMarks, load_sync_state

# Pauses after a failed poll or an unsettled cycle, one step further each time in a row: a
# homeserver that is down, or a room that fails every run, costs a run every five minutes at most.
BACKOFF_S = (5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0)
# A poll that shows nothing is never followed by the next sooner than this after it began: a
# server (or a proxy) that ignores the poll's timeout would otherwise be asked without pause.
MIN_POLL_GAP_S = 1.0


class LongPoll(Protocol):
    def wait_for_changes(self, since: str, wait_s: float) -> tuple[SyncChanges, str]: ...


@dataclass(frozen=True)
class FollowConfig:
    """What one turn of the loop works from; the wiring rebuilds it when the settings change."""

    state_dir: Path
    probe: LongPoll
    marks: Callable[[], RunMarks]
    scope_recheck_s: float
    poll_s: float


def _shows_change(changes: SyncChanges) -> bool:
    return bool(changes.changed_rooms or changes.invited_rooms or changes.left_rooms)


class FollowLoop:
    """``run()`` until ``stopping()``; ``step()`` is one turn (a poll, a cycle, or a poll and a
    cycle) and says which: ``"idle"`` (a poll that showed nothing), ``"cycle"``."""

    def __init__(
        self,
        *,
        config: Callable[[], FollowConfig],
        run_cycle: Callable[[], int],
        log: Any,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        stopping: Callable[[], bool] = lambda: False,
    ):
        self._config = config
        self._run_cycle = run_cycle
        self._log = log
        self._clock = clock
        self._sleep = sleep
        self._stopping = stopping
        self.polls = 0
        self.cycles = 0
        self._failures = 0  # polls that failed and cycles that did not settle, in a row
        self._failed_polls = 0  # in the current series of failed polls (journalled once)
        self._last_cycle_end: float | None = None
        # (the stored token a poll started from, the next_batch it answered): polls that show
        # nothing move on from the answer; a new stored token (a full run, ours or the timer's)
        # starts from that token again.
        self._since: tuple[str, str] | None = None

    def run(self) -> None:
        config = self._config()
        self._log.info("follow_started", poll_s=config.poll_s, scope_recheck_s=config.scope_recheck_s)
        try:
            while not self._stopping():
                self.step()
        finally:
            self._log.info("follow_stopped", polls=self.polls, cycles=self.cycles)

    def step(self) -> str:
        config = self._config()
        stored = load_sync_state(config.state_dir)
        now = self._clock()
        why, _ = local_reason(stored, config.marks(), scope_recheck_s=config.scope_recheck_s, now_ms=int(now * 1000))
        wait_s = config.poll_s
        if why == "scope_recheck_due" and config.scope_recheck_s <= 0 and self._last_cycle_end is not None:
            # 0: every run is full. Here that is a full run on each wake and every poll_s, not one
            # after another without end.
            rest = self._last_cycle_end + config.poll_s - now
            if rest > 0:
                why, wait_s = None, rest
        elif why is None and stored is not None:
            wait_s = min(wait_s, stored.finished_ms / 1000 + config.scope_recheck_s - now)
        if why is None and stored is not None:
            shown = self._poll(config, stored.next_batch, max(0.0, wait_s))
            if shown is False:
                return "idle"
        self._since = None
        self._cycle(config)
        return "cycle"

    def _poll(self, config: FollowConfig, stored_token: str, wait_s: float) -> bool | None:
        """True: the poll showed a change; False: nothing; None: it failed (after a pause)."""
        since = self._since[1] if self._since is not None and self._since[0] == stored_token else stored_token
        started = self._clock()
        self.polls += 1
        try:
            changes, next_batch = config.probe.wait_for_changes(since, wait_s)
        except MatrixError as exc:
            self._since = None
            self._failed_polls += 1
            pause = self._pause_s()
            if self._failed_polls == 1:
                self._log.warning("follow_poll_failed", error=str(exc), retry_in_s=pause)
            self._sleep(pause)
            return None
        if self._failed_polls:
            self._log.info("follow_poll_recovered", failed_polls=self._failed_polls)
            self._failed_polls = 0
        if _shows_change(changes):
            # Not a reason to stop pausing: a run that fails leaves the old token, which shows
            # the same change again at once.
            return True
        self._failures = 0
        self._since = (stored_token, next_batch)
        quick = MIN_POLL_GAP_S - (self._clock() - started)
        if quick > 0 and wait_s >= MIN_POLL_GAP_S:
            self._sleep(quick)
        return False

    def _cycle(self, config: FollowConfig) -> None:
        code = self._run_cycle()
        self.cycles += 1
        self._last_cycle_end = self._clock()
        after = load_sync_state(config.state_dir)
        # Settled: the cycle stored a state this host's marks agree with (its age does not count).
        why, _ = local_reason(after, config.marks(), scope_recheck_s=math.inf, now_ms=after.finished_ms if after else 0)
        if code == EXIT_OK and why is None:
            self._failures = 0
        elif not self._stopping():
            self._sleep(self._pause_s())

    def _pause_s(self) -> float:
        pause = BACKOFF_S[min(self._failures, len(BACKOFF_S) - 1)]
        self._failures += 1
        return pause

"""The cheap start of every refresh: find out with one request whether a full run is needed.

Owns: ``refresh_cycle`` — compare the marks stored by the last full run (``sync_state``) with
today's, ask the homeserver one filtered incremental ``/sync`` from the stored token, and either
end the run there (journal ``run_idle``: nothing new) or run the full refresh through the factory
it is given and, once that run finished with every room read, store the new token and marks.
A full run is due when there is no stored state, the settings, the purge list or the published
index changed, the scope facts are older than ``scope_recheck_s`` (room state the filtered
``/sync`` does not show, such as ``m.direct`` or a directory alias, is re-read at least that
often), the ``/sync`` failed, or it shows a joined room with new timeline or state events, an
invite, or a room left.

Must not: load the embedding model, open the index writer or touch any index file on an idle run
(the full run's factory does those, and only when it is called); read or decide scope itself; or
store a token before the full run that read from it finished (``sync_state``).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, cast

from daemon.ports import MatrixError, MatrixSource
from daemon.refresher.summary import CountingMatrix as _CountingMatrix, RunSummary
from daemon.refresher.sync_state import RunMarks, SyncState, clear_sync_state, load_sync_state, save_sync_state

# Full runs re-read every room's state at least this often by default: a few minutes bounds how
# long a change the filtered /sync cannot show (m.direct, a directory alias moving) goes unseen.
DEFAULT_SCOPE_RECHECK_S = 300

# A full run (it opens its own homeserver client, the model and the index writer): its summary
# and the next_batch of its opening /sync (None: unknown).
FullRun = Callable[[], Awaitable[tuple[RunSummary, str | None]]]


@dataclass(frozen=True)
class CycleOutcome:
    summary: RunSummary
    idle: bool
    why: str  # why the run was idle ("nothing_new") or full (the first reason found)


def settings_digest(values: dict[str, Any]) -> str:
    """A digest of the settings (and code versions) a full run's outcome depends on."""
    text = repr(sorted((k, repr(v)) for k, v in values.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:32]
    except FileNotFoundError:
        return None


def file_mark(path: Path) -> str | None:
    """A file's identity as a stat tells it (inode, size, mtime): any replacement changes it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def local_reason(
    stored: SyncState | None, marks: RunMarks, *, scope_recheck_s: float, now_ms: int
) -> tuple[str | None, dict[str, Any]]:
    """Why a full run is due from what this host alone can tell (the stored state, today's marks,
    the clock), or (None, {}): then only the homeserver can say. ``huginn-chat follow`` asks this
    between its long polls."""
    if stored is None:
        return "no_sync_state", {}
    if stored.marks.settings != marks.settings:
        return "settings_changed", {}
    if stored.marks.purges != marks.purges:
        return "purges_changed", {}
    if stored.marks.index != marks.index:
        return "index_changed", {}
    age_s = (now_ms - stored.finished_ms) / 1000
    if not 0 <= age_s < scope_recheck_s:
        return "scope_recheck_due", {"scope_age_s": round(age_s, 1)}
    return None, {}


async def full_run_due(
    matrix: MatrixSource, stored: SyncState | None, marks: RunMarks, *, scope_recheck_s: float, now_ms: int
) -> tuple[str | None, dict[str, Any]]:
    """(why a full run is due, its evidence), or (None, {}) when nothing changed. Asks the
    homeserver only when every local mark still holds, and then exactly once."""
    why, evidence = local_reason(stored, marks, scope_recheck_s=scope_recheck_s, now_ms=now_ms)
    if why is not None or stored is None:
        return why, evidence
    age_s = (now_ms - stored.finished_ms) / 1000
    try:
        changes = await matrix.changes_since(stored.next_batch)
    except MatrixError as exc:
        # An expired token, a busy server: the full run reads from the rooms' own cursors.
        return "sync_failed", {"error": str(exc)}
    evidence = {
        "rooms_changed": len(changes.changed_rooms),
        "invites": len(changes.invited_rooms),
        "rooms_left": len(changes.left_rooms),
    }
    if changes.changed_rooms:
        return "new_events", evidence
    if changes.invited_rooms:
        return "invited", evidence
    if changes.left_rooms:
        return "room_left", evidence
    return None, {"scope_age_s": round(age_s, 1)}


async def refresh_cycle(
    probe: Any,
    *,
    state_dir: Path,
    marks: RunMarks,
    index_mark: Callable[[], str | None],
    scope_recheck_s: float,
    full_run: FullRun,
    log: Any,
    clock: Callable[[], float] = time.time,
) -> CycleOutcome:
    """One refresh: idle when nothing changed, else the full run. ``probe`` answers
    ``changes_since`` (``sync_probe.SyncProbe``, or any ``MatrixSource``). ``marks.index`` is the
    index mark now; ``index_mark`` reads it again after a full run (which may have published)."""
    started = clock()
    summary = RunSummary()
    counted = cast(MatrixSource, _CountingMatrix(probe, summary))
    why, evidence = await full_run_due(
        counted, load_sync_state(state_dir), marks, scope_recheck_s=scope_recheck_s, now_ms=int(started * 1000)
    )
    if why is None:
        summary.seconds = round(clock() - started, 3)
        log.info("run_idle", homeserver_requests=summary.homeserver_requests, seconds=summary.seconds, **evidence)
        return CycleOutcome(summary, idle=True, why="nothing_new")
    if why != "no_sync_state":  # a first run, or the one after an incomplete run, needs no telling
        log.info("full_run_started", why=why, **evidence)
    requests_before = summary.homeserver_requests
    full, next_batch = await full_run()
    full.homeserver_requests += requests_before
    full.homeserver_requests_global += requests_before
    if full.rooms_failed == 0 and not full.rebuild_pending and next_batch:
        finished_ms = int(clock() * 1000)
        save_sync_state(
            state_dir,
            SyncState(
                next_batch=next_batch,
                finished_ms=finished_ms,
                marks=RunMarks(marks.settings, marks.purges, index_mark()),
            ),
        )
    elif clear_sync_state(state_dir):
        # The failed rooms, or the unswitched rebuild, must be read again by the next run.
        log.info("sync_state_dropped", why="run_incomplete" if next_batch else "no_sync_token")
    return CycleOutcome(full, idle=False, why=why)

"""Where the homeserver's ``/sync`` stream stood after the last full refresh run that finished.

Owns: ``STATE_DIR/sync.json`` — the ``next_batch`` token of the full run's opening ``/sync``, when
that run finished, and the marks of what else a run depends on (the settings that shape scope and
the index, the purge list, the published index). ``daemon.refresher.idle`` compares them with
today's and asks the homeserver what happened since the token; nothing else reads the file.

Must not: decide whether a run is needed (``idle`` does), hold a secret (the sync token is a
stream position, not a credential; it is never journalled either), or advance the token anywhere
but after a full run that finished with every room read: a crash or a failed room leaves the older
token (or none), so the next run still sees every event since and never skips one.

The file is replaced whole (temp file in the same directory, ``os.replace``, mode 0o640), so a
crash leaves the old state or the new one; an unreadable or foreign file reads as no state, which
costs one full run, never a skipped event.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from daemon.safe_files import make_dir, read_text, write_atomically

SYNC_STATE_FILE = "sync.json"
_VERSION = 1


@dataclass(frozen=True)
class RunMarks:
    """What a full run's outcome depends on besides the homeserver; any change asks for a full run.
    ``settings``: a digest of the settings that shape scope and the index (and the chat version);
    ``purges``: a digest of ``purges.json`` (None: no file); ``index``: the published index as a
    cheap stat can tell (None where it cannot be told, e.g. a Qdrant server)."""

    settings: str
    purges: str | None
    index: str | None


@dataclass(frozen=True)
class SyncState:
    next_batch: str
    finished_ms: int  # when the full run that stored it finished: its scope facts are this old
    marks: RunMarks


def sync_state_path(state_dir: Path) -> Path:
    return Path(state_dir) / SYNC_STATE_FILE


def load_sync_state(state_dir: Path) -> SyncState | None:
    """The stored state, or None (no file, unreadable, another version, a field of the wrong shape)."""
    try:
        data = json.loads(read_text(sync_state_path(state_dir)))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        return None
    token, finished, marks = data.get("next_batch"), data.get("finished_ms"), data.get("marks")
    if not isinstance(token, str) or not token or not isinstance(finished, int) or not isinstance(marks, dict):
        return None
    settings, purges, index = marks.get("settings"), marks.get("purges"), marks.get("index")
    if not isinstance(settings, str) or not all(v is None or isinstance(v, str) for v in (purges, index)):
        return None
    return SyncState(next_batch=token, finished_ms=finished, marks=RunMarks(settings, purges, index))


def save_sync_state(state_dir: Path, state: SyncState) -> None:
    path = sync_state_path(state_dir)
    make_dir(path.parent, parents=True)
    body = json.dumps(
        {
            "version": _VERSION,
            "next_batch": state.next_batch,
            "finished_ms": state.finished_ms,
            "marks": asdict(state.marks),
        },
        sort_keys=True,
    )
    write_atomically(path, body)


def clear_sync_state(state_dir: Path) -> bool:
    """Forget the token: the next run is a full one. False when there was none."""
    try:
        os.unlink(sync_state_path(state_dir))
    except FileNotFoundError:
        return False
    return True

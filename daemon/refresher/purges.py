"""Steward purge requests: `huginn-chat purge ROOM --from T --to T`.

Owns: the durable list of purge spans per room, kept in ``STATE_DIR/purges.json``. The file is
the source of truth: the refresher applies every span on its next run and keeps applying them
on every rebuild (a span is a standing order, not a one-off delete), and records the spans it
has applied in the index meta as ``chat-purge:<room>``, so the next run looks up only new ones.

Must not: touch the index. The purge command runs while the refresher may hold the working
shard; it only appends to this file (under an flock, written whole through a temp file and an
atomic rename, so a crash leaves the old list or the new one, never half of one). Neither the
file nor its lock is opened through a link (``daemon.safe_files``): purge runs from root shells.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from chunker.fold import PurgeSpan
from daemon.errors import UsageError
from daemon.safe_files import make_configured_dir, open_no_follow, read_text, write_atomically

PURGES_FILE = "purges.json"


class PurgeFileError(UsageError, ValueError):
    """A purge the command refuses, or a ``purges.json`` this code cannot read."""


def _path(state_dir: Path) -> Path:
    return Path(state_dir) / PURGES_FILE


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    make_configured_dir(state_dir)
    lock = open_no_follow(Path(state_dir) / (PURGES_FILE + ".lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    finally:
        os.close(lock)


def _read(state_dir: Path) -> dict[str, list[list[int]]]:
    path = _path(state_dir)
    try:
        data = json.loads(read_text(path))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise PurgeFileError(f"purges: {path} is unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise PurgeFileError(f"purges: {path} must hold an object of room -> spans")
    for room, spans in data.items():
        if not isinstance(spans, list) or not all(_is_span(s) for s in spans):
            raise PurgeFileError(f"purges: {path}: spans of {room!r} must be [[from_ms, to_ms], ...] with from <= to")
    return data


def _is_span(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and value[0] <= value[1]
    )


def load_purges(state_dir: Path) -> dict[str, tuple[PurgeSpan, ...]]:
    """Every recorded span, by room (id or alias, as the steward named it)."""
    return {
        room: tuple(PurgeSpan(ts_from=a, ts_to=b) for a, b in sorted(spans)) for room, spans in _read(state_dir).items()
    }


def add_purge(state_dir: Path, room: str, ts_from: int, ts_to: int) -> bool:
    """Record a span; returns False if it was already recorded."""
    if ts_from > ts_to:
        raise PurgeFileError("purge: --from must not be after --to")
    with _locked(state_dir):
        data = _read(state_dir)
        spans = data.setdefault(room, [])
        if [ts_from, ts_to] in spans:
            return False
        spans.append([ts_from, ts_to])
        spans.sort()
        write_atomically(_path(state_dir), json.dumps(data, indent=1, sort_keys=True))
        return True

"""The rooms the refresher joined itself: ``STATE_DIR/joined_by_refresher.json``.

Owns: the durable list of room ids the service user joined because the refresher joined them
(not because the operator did). The refresher may leave exactly these rooms when scope refuses
them; a room the operator joined the service user to is theirs — refused and never read, but
never left.

Must not: decide anything, or talk to the homeserver. The file is written whole through a temp
file, fsync and an atomic rename, so a crash leaves the old list or the new one. It is recorded
*before* the join is sent: a crash between the two leaves a room listed that the service user may
not have joined (harmless: leaving a room one is not in is a no-op), never a room joined but
unlisted (which the refresher would then take for the operator's and never leave).
"""

from __future__ import annotations

import json
from pathlib import Path

from daemon.safe_files import make_configured_dir, read_text, write_atomically

OWN_JOINS_FILE = "joined_by_refresher.json"


class OwnJoins:
    """The set, kept in step with its file. ``state_dir`` None keeps it in memory (tests)."""

    def __init__(self, state_dir: Path | None):
        self._path = Path(state_dir) / OWN_JOINS_FILE if state_dir is not None else None
        self._rooms: set[str] = set()
        if self._path is not None:
            try:
                data = json.loads(read_text(self._path))
            except FileNotFoundError:
                return
            except (OSError, ValueError) as exc:
                raise ValueError(f"{OWN_JOINS_FILE}: {self._path} is unreadable: {exc}") from None
            rooms = data.get("rooms") if isinstance(data, dict) else None
            if not isinstance(rooms, list) or not all(isinstance(r, str) for r in rooms):
                raise ValueError(f'{OWN_JOINS_FILE}: {self._path} must hold {{"rooms": [room ids]}}')
            self._rooms = set(rooms)

    def __contains__(self, room_id: object) -> bool:
        return room_id in self._rooms

    @property
    def rooms(self) -> frozenset[str]:
        return frozenset(self._rooms)

    def add(self, *room_ids: str) -> None:
        if not set(room_ids) <= self._rooms:
            self._rooms |= set(room_ids)
            self._write()

    def discard(self, room_id: str) -> None:
        if room_id in self._rooms:
            self._rooms.discard(room_id)
            self._write()

    def _write(self) -> None:
        if self._path is None:
            return
        make_configured_dir(self._path.parent)
        write_atomically(self._path, json.dumps({"rooms": sorted(self._rooms)}, indent=1))

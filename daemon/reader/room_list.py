"""The ``rooms`` operation: the rooms a Persona can search, from the index alone.

Owns: ``list_rooms``, the reply of a ``rooms`` request: per room that holds a message, its id,
name, aliases (every name a room filter accepts for it), message and window counts and the times
of its first and last message, ordered by how people name the room.

Must not: reach the homeserver or need its token, do I/O beyond the ``IndexReader`` port, or name
a room the index does not hold: the refresher stores only admitted rooms and drops a room's
windows with its directory entry when scope refuses it, so what is listed here is exactly what a
search can return.
"""

from __future__ import annotations

from typing import Any

from daemon.index.port import IndexReader
from daemon.reader.rooms import names_of


def list_rooms(index: IndexReader) -> dict[str, Any]:
    summaries = index.room_summaries()
    directory = index.room_directory(sorted(summaries)) if summaries else {}
    rooms: list[dict[str, Any]] = []
    for room_id, summary in summaries.items():
        entry = directory.get(room_id)
        rooms.append(
            {
                "room_id": room_id,
                "name": entry.name if entry is not None else None,
                "canonical_alias": entry.canonical_alias if entry is not None else None,
                "aliases": list(names_of(entry)) if entry is not None else [],
                "messages": summary.messages,
                "windows": summary.windows,
                "first_ts": summary.first_ts,
                "last_ts": summary.last_ts,
            }
        )
    rooms.sort(key=lambda r: (str(r["name"] or r["canonical_alias"] or r["room_id"]).casefold(), r["room_id"]))
    return {"rooms": rooms}

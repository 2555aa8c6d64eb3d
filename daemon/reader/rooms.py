"""Rooms by any name: the one resolver every room filter of the read side goes through.

Owns: ``resolve_rooms``, which turns the rooms a request names (a room id, the canonical alias, an
alt alias, an alias the local directory publishes, the operator's ``ROOMS`` alias) into room ids,
from the directory entries the refresher writes into the index (``daemon.index.port.RoomEntry``).

Must not: import anything outside the standard library and ``daemon.index.port`` (the stdlib-only
CLI client imports ``daemon.reader.search``, which imports this), do I/O, or widen a filter: a name
no entry answers to resolves to no room, never to every room.

Matching. A room id is opaque and case-sensitive: it is taken as it is, whether or not an entry
holds it (an unknown id matches no window anyway). An alias matches exactly first; only when no
entry holds it exactly does it match case-insensitively (``casefold``), as the rest of this project
matches aliases (scope locks, purge keys), since Synapse's directory stores aliases as typed but
people do not type them consistently.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from daemon.index.port import RoomEntry


def names_of(entry: RoomEntry) -> tuple[str, ...]:
    """Every alias ``entry`` answers to, canonical first."""
    head = [entry.canonical_alias] if entry.canonical_alias else []
    return tuple(dict.fromkeys([*head, *entry.alt_aliases, *entry.aliases, *entry.allowed_as]))


def resolve_rooms(names: Iterable[str], directory: Mapping[str, RoomEntry]) -> tuple[str, ...]:
    """The room ids ``names`` name, distinct, in the order named (see the module docstring)."""
    exact: dict[str, list[str]] = {}
    folded: dict[str, list[str]] = {}
    for room_id, entry in sorted(directory.items()):
        for alias in names_of(entry):
            exact.setdefault(alias, []).append(room_id)
            folded.setdefault(alias.casefold(), []).append(room_id)
    resolved: list[str] = []
    for name in names:
        if name.startswith("!"):
            found = [name]
        else:
            found = exact.get(name) or folded.get(name.casefold()) or []
        for room_id in found:
            if room_id not in resolved:
                resolved.append(room_id)
    return tuple(resolved)

"""Warnings on a search reply: the filters that name nothing the index holds.

Owns: ``filter_warnings``, the reply's ``warnings`` list (``docs/protocol.md`` lists the codes):
``unknown_room`` for each room filter (``rooms`` or ``in:``) that resolves to no room the index
holds, and ``unknown_sender`` for each sender filter (``senders`` or ``from:``) that no stored
window has a message from. Without them "no matching windows" reads the same as a misspelled
room, and an agent cannot tell "nobody said it" from "I asked about a room that is not there".

Must not: tell a refused room from one that does not exist. The index holds admitted rooms only,
so both are simply "not held", and the warning repeats the name as it was asked and nothing the
index or the homeserver knows about it. Nor may it change what a search returns, or do I/O
beyond the ``IndexReader`` port.
"""

from __future__ import annotations

from typing import Any

from daemon.index.port import IndexReader, SearchFilter
from daemon.reader.rooms import resolve_rooms

UNKNOWN_ROOM = "unknown_room"
UNKNOWN_SENDER = "unknown_sender"


def filter_warnings(
    index: IndexReader, rooms: tuple[str, ...] | None, senders: tuple[str, ...] | None
) -> list[dict[str, Any]]:
    """One warning per room or sender filter that matches nothing the index holds, in the order
    asked; empty when every filter names something (or none is given)."""
    warnings: list[dict[str, Any]] = []
    if rooms:
        held = set(index.window_counts())
        names_an_alias = any(not room.startswith("!") for room in rooms)
        directory = index.room_directory() if names_an_alias else {}
        for room in rooms:
            if not held.intersection(resolve_rooms([room], directory)):
                warnings.append(
                    {
                        "code": UNKNOWN_ROOM,
                        "field": "rooms",
                        "value": room,
                        "message": f"no searchable room is called {room}; `rooms` lists them",
                    }
                )
    for sender in senders or ():
        # One window is enough to know: a listing of one, which every index answers cheaply.
        if not index.listing(SearchFilter(senders=(sender,)), None, 1):
            warnings.append(
                {
                    "code": UNKNOWN_SENDER,
                    "field": "senders",
                    "value": sender,
                    "message": f"no searchable message is from {sender}",
                }
            )
    return warnings

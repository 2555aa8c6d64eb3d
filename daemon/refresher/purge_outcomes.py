"""What became of each of the steward's purge spans in one refresh run.

Owns: ``PurgeOutcomes``: the spans from ``purges.json`` by key (a room as the steward typed it),
the room each key resolved to (an alias through ROOMS first, then the directory), which keys name a
given room (its id, or any of its names, aliases case-insensitively), each key's state as the run
leaves it (``applied``, ``pending``, ``unmatched``), the ``purge_unmatched`` journal line for a key
no room of the run answered to, and every span's state in the run summary for `huginn-chat status`.

Must not: read or write ``purges.json`` (``daemon.refresher.purges`` does), or drop anything from
the index: the fold drops a span's messages as a room is read (``daemon.refresher.reading``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from chunker.fold import PurgeSpan
from daemon.ports import MatrixError, MatrixSource
from daemon.refresher.summary import RunSummary


@dataclass
class PurgeOutcomes:
    spans: dict[str, tuple[PurgeSpan, ...]]  # purge key (as typed) -> spans
    targets: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # key -> (room, why not)
    outcome: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (room id, applied|pending)

    async def resolve(self, matrix: MatrixSource, allowed: dict[str, str]) -> None:
        """Each purge key (a room as the steward typed it) -> (room id, None), or (None, why) when
        no room answers to it. An alias is looked up in ROOMS first, then in the directory; the
        room's own names (canonical, alt, directory aliases) match it again at the room's turn."""
        by_entry = {entry.casefold(): room_id for room_id, entry in allowed.items()}
        for key in sorted(self.spans):
            if not key.startswith("#"):
                self.targets[key] = (key, None)
            elif key.casefold() in by_entry:
                self.targets[key] = (by_entry[key.casefold()], None)
            else:
                try:
                    room_id = await matrix.resolve_alias(key)
                except (MatrixError, ValueError) as exc:
                    self.targets[key] = (None, f"alias_unresolvable: {exc}")
                    continue
                self.targets[key] = (room_id, None) if room_id else (None, "alias_unknown")

    def keys_for(self, room_id: str, names: set[str | None]) -> list[str]:
        """The purge keys that name this room: resolved to its id, or equal to one of its names
        (aliases case-insensitively)."""
        folded = {name.casefold() for name in names if name and name.startswith("#")}
        return [
            key
            for key in sorted(self.spans)
            if self.targets.get(key, (None, None))[0] == room_id
            or key == room_id
            or (key.startswith("#") and key.casefold() in folded)
        ]

    def refused_room(self, room_id: str, names: Sequence[str]) -> None:
        """A refused room keeps nothing in the index: its purges hold trivially."""
        for key in self.keys_for(room_id, {room_id, *names}):
            self.outcome[key] = (room_id, "applied")

    def report(self, summary: RunSummary, log: Any) -> None:
        """``purge_unmatched`` for every key no room of this run answered to (on every run, until
        the steward fixes it), and the state of every span for `huginn-chat status`."""
        for key in sorted(self.spans):
            room_id, state = self.outcome.get(key, (None, "unmatched"))
            why = None
            if state == "unmatched":
                target, why = self.targets.get(key, (None, None))
                why = why or ("room_not_in_this_run" if target else "no_room_answers")
                log.warning(
                    "purge_unmatched",
                    room=key,
                    room_id=target,
                    why=why,
                    spans=[[s.ts_from, s.ts_to] for s in self.spans[key]],
                )
            for span in self.spans[key]:
                summary.purges.append(
                    {
                        "room": key,
                        "room_id": room_id,
                        "ts_from": span.ts_from,
                        "ts_to": span.ts_to,
                        "state": state,
                        **({"why": why} if why else {}),
                    }
                )

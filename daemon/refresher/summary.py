"""What a refresh run counts: its summary, and the homeserver calls behind it.

Owns: ``RunSummary`` (rooms admitted, refused, failed, rebuilt, purged, joined and left; events
read and skipped by why; windows written and deleted; where the time went; homeserver calls, per
room where a call names one; the purge spans' states; the exit code a run ends with),
``skip_reason`` (the bounded name a skipped event is counted under) and ``CountingMatrix`` (the
``MatrixSource`` port with every call counted into a summary).

Must not: decide anything of a run, touch the index or a file (``daemon.refresher.last_run``
writes the summary out), or let a name a room member chose grow the summary or carry text into it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from daemon.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from daemon.ports import MatrixSource


@dataclass
class RunSummary:
    rooms_admitted: int = 0
    rooms_refused: int = 0
    rooms_failed: int = 0
    rooms_rebuilt: int = 0
    rooms_purged: int = 0
    rooms_joined: int = 0
    rooms_left: int = 0
    events_read: int = 0
    windows_written: int = 0
    windows_deleted: int = 0
    texts_embedded: int = 0
    index_rebuilt: bool = False
    seconds: float = 0.0
    # Where the time went, so a benchmark can hold ingest against the embedding bound.
    seconds_reading: float = 0.0  # waiting for the homeserver
    seconds_folding: float = 0.0  # parse, scrub, scope checks, fold, index lookups
    seconds_embedding: float = 0.0
    seconds_writing: float = 0.0  # write_windows and set_cursor
    # Homeserver calls through the port (one per call; nio's own rate-limit retries not counted):
    # the incremental cost of a run. Calls naming a room count against it; the rest (whoami,
    # joined rooms, invites, m.direct, aliases) are global.
    homeserver_requests: int = 0
    homeserver_requests_global: int = 0
    homeserver_requests_per_room: dict[str, int] = field(default_factory=dict)
    failed_rooms: list[str] = field(default_factory=list)
    # Every steward purge span as this run left it: {room (as typed), room_id, ts_from, ts_to,
    # state: applied | pending | unmatched, why}. `huginn-chat status` lists them.
    purges: list[dict[str, Any]] = field(default_factory=list)
    # Events read but not stored, by why (chunker.events.Other.kind: "encrypted", "malformed",
    # "redacted", "m.reaction", "m.image", "m.room.member", ...).
    events_skipped: dict[str, int] = field(default_factory=dict)
    rebuild_pending: bool = False  # a full rebuild is not switched in yet: the old index serves
    failures: dict[str, int] = field(default_factory=dict)  # why -> how many (rooms or steps)
    homeserver_retries: int = 0  # attempts beyond each call's first (daemon/refresher/retry.py)
    homeserver_faults: dict[str, int] = field(default_factory=dict)  # fault kind -> attempts that met it
    interrupted: str | None = None  # the signal that stopped the run at a safe point

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.rooms_failed else EXIT_OK


# A skipped event's kind is often its type or msgtype, which any room member chooses. The summary
# keeps the spec's own names (m.*) and a few of ours; anything else is counted as "custom_type",
# so a hostile sender can neither grow the summary without bound nor write text into it.
_SPEC_NAME = re.compile(r"m\.[a-z0-9_.]{1,60}")
_OWN_KINDS = frozenset({"encrypted", "redacted", "malformed", "edit_non_text", "empty"})


def skip_reason(kind: str) -> str:
    if kind in _OWN_KINDS or _SPEC_NAME.fullmatch(kind):
        return kind
    return "custom_type"


class CountingMatrix:
    """The ``MatrixSource`` port with every call counted into the run summary, per room where the
    call names one. Counting here, not in the nio adapter, keeps it true for any adapter."""

    _ROOM_CALLS = frozenset({"room_state", "messages", "event", "membership", "room_aliases", "room_summary", "leave"})
    _GLOBAL_CALLS = frozenset(
        {
            "whoami",
            "joined_rooms",
            "invited_rooms",
            "invites",
            "rooms_overview",
            "changes_since",
            "resolve_alias",
            "join",
            "direct_rooms",
        }
    )

    def __init__(self, inner: MatrixSource, summary: RunSummary) -> None:
        self._inner = inner
        self._summary = summary

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self._ROOM_CALLS and name not in self._GLOBAL_CALLS:
            return attr
        summary = self._summary

        async def counted(*args: Any, **kwargs: Any) -> Any:
            summary.homeserver_requests += 1
            if name in self._ROOM_CALLS:
                room_id = args[0] if args else next(iter(kwargs.values()))
                summary.homeserver_requests_per_room[room_id] = summary.homeserver_requests_per_room.get(room_id, 0) + 1
            else:
                summary.homeserver_requests_global += 1
            return await attr(*args, **kwargs)

        return counted

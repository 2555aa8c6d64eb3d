"""What the reader's audit line records of what a client sent, and how big the line may grow.

Owns: the audit form of client-sent values (filters as asked, field names a refusal names), which
the line holds only where the index vouches for them and otherwise as a keyed digest, every
such value through the chat scrubber (``chunker.scrub.scrub``) and a length bound; and the bound
on a whole line (``bounded``).

Must not: log (``daemon.reader.audit_log`` writes the line), do I/O, or ever put a query text, a
message body or a value a client typed that names nothing the index holds into the line: a
mistyped filter is as likely to be a pasted password (``in:#hunter2xyz:x``) as a room name, and
the scrubber cannot tell such a word from a name.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Iterable, Mapping

from chunker.scrub import scrub
from daemon.index.port import RoomEntry
from daemon.reader.rooms import resolve_rooms

# One value (a room, a sender) as the line holds it, at most this many characters.
MAX_VALUE_CHARS = 256
# A whole line, rendered as JSON, at most this many bytes; past it the per-message score
# components go first, then returned windows from the end (``truncated`` says how many).
MAX_LINE_BYTES = 48 * 1024
# The fields a request may name in a refusal; any other name a client sent is recorded as OTHER.
KNOWN_FIELDS = frozenset(
    {"v", "id", "op", "texts", "rooms", "senders", "after", "before", "top_k", "cursor", "sort", "event_id"}
)
OTHER = "[other]"
UNRESOLVED = "[unresolved]"


def bounded_text(value: str) -> str:
    """``value`` scrubbed as a message body is, and cut to ``MAX_VALUE_CHARS``."""
    text = scrub(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "\u2026"


def unresolved(value: str, key: bytes | None) -> str:
    """A value the index does not vouch for: its keyed digest (so an operator holding the key can
    test a guess, as with the query digest), or the bare marker without a key."""
    if key is None:
        return UNRESOLVED
    digest = hmac.new(key, b"audit value\x00" + value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return f"{UNRESOLVED[:-1]}:{digest[:16]}]"


def audited_field(field: str | None) -> str | None:
    """The field a refusal names, when it is one the protocol has; a name a client made up is not
    echoed."""
    if field is None or field in KNOWN_FIELDS:
        return field
    return OTHER


def audited_filters(
    filters: Mapping[str, Any],
    directory: Mapping[str, RoomEntry],
    seen_senders: Iterable[str],
    key: bytes | None,
) -> dict[str, Any]:
    """``filters`` (``Query.filters()``: rooms and senders as asked, times resolved) as the line
    holds them. A room is recorded when the index's directory names it (an id or alias some entry
    holds), a sender when a returned message is theirs; any other value only as ``unresolved``.
    Times are the instants they resolved to."""
    known_senders = set(seen_senders)
    rooms = filters.get("rooms")
    senders = filters.get("senders")
    return {
        **filters,
        "rooms": None
        if rooms is None
        else [bounded_text(room) if _names_a_room(room, directory) else unresolved(room, key) for room in rooms],
        "senders": None
        if senders is None
        else [bounded_text(sender) if sender in known_senders else unresolved(sender, key) for sender in senders],
    }


def _names_a_room(name: str, directory: Mapping[str, RoomEntry]) -> bool:
    if name.startswith("!"):
        return name in directory
    return bool(resolve_rooms([name], directory))


def bounded(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` within ``MAX_LINE_BYTES`` once rendered: the per-message components of the
    returned windows are dropped first, then windows from the end of ``returned``; ``truncated``
    counts the windows dropped (0 when only message components were)."""
    if _size(fields) <= MAX_LINE_BYTES:
        return fields
    returned = [dict(entry) for entry in fields.get("returned") or ()]
    for entry in returned:
        entry.pop("messages", None)
    fields = {**fields, "returned": returned, "truncated": 0}
    while returned and _size(fields) > MAX_LINE_BYTES:
        returned.pop()
        fields["truncated"] += 1
    return fields


def _size(fields: dict[str, Any]) -> int:
    return len(json.dumps(fields, default=str, ensure_ascii=False).encode("utf-8", "surrogatepass"))

"""Timeline events as the chunker sees them: four kinds, already scrubbed.

Owns: the mapping from a raw Matrix event (the dict nio keeps in ``event.source``) to one of
``Message``, ``Edit``, ``Redaction`` or ``Other``; reply-fallback stripping; scrubbing every body
that leaves this module (``chunker.scrub.scrub``), so no raw body ever enters the fold.

Must not: do I/O, raise on any input (a malformed event is ``Other`` with a reason), or keep
any text of an event it classifies as ``Other`` (encrypted payloads, media, state).

Classification table (first match wins):

| raw event                                                    | kind        |
|--------------------------------------------------------------|-------------|
| not a dict / no event_id / no sender / no integer ts         | Other(malformed) |
| ``unsigned.redacted_because`` present, or content == {}       | Other(redacted)  |
| type m.room.redaction (``redacts`` top-level or in content)   | Redaction        |
| type m.room.message, ``m.relates_to.rel_type == m.replace``   | Edit (body from ``m.new_content``) |
| type m.room.message, msgtype m.text / m.notice / m.emote      | Message          |
| type m.room.encrypted                                         | Other(encrypted) |
| anything else (media, reactions, state, stickers, custom)     | Other(<type>)    |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True, slots=True)
class Message:
    """A text message (m.text, m.notice, m.emote). ``body`` is scrubbed, reply fallback removed."""

    event_id: str
    sender: str
    ts: int  # origin_server_ts, unix ms
    body: str


@dataclass(frozen=True, slots=True)
class Edit:
    """An ``m.replace`` of ``target_id``. ``body`` is the scrubbed ``m.new_content`` body."""

    event_id: str
    sender: str
    ts: int
    target_id: str
    body: str


@dataclass(frozen=True, slots=True)
class Redaction:
    event_id: str
    sender: str
    ts: int
    target_id: str


@dataclass(frozen=True, slots=True)
class Other:
    """Anything the index does not store. ``kind`` says why (``encrypted``, ``redacted``,
    ``malformed``, ``m.reaction``, ``m.room.member``, ...). ``state_key`` is set for state events
    so the refresher can watch for mid-history bridge/encryption/puppet changes."""

    event_id: str
    sender: str
    ts: int
    kind: str
    event_type: str = ""
    state_key: str | None = None


Event = Union[Message, Edit, Redaction, Other]

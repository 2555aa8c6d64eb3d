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
| state event (has a ``state_key``)                             | Other(<type>)    |
| type m.room.redaction with a readable target (``redacts`` in content or top level), even if itself redacted | Redaction |
| ``unsigned.redacted_because`` present, or content == {} for m.room.message | Other(redacted) |
| type m.room.message, ``m.relates_to.rel_type == m.replace``   | Edit (body from ``m.new_content``) |
| type m.room.message, msgtype m.text / m.notice / m.emote      | Message          |
| type m.room.encrypted                                         | Other(encrypted) |
| anything else (media, reactions, state, stickers, custom)     | Other(<type>)    |

How ``parse_event`` reads the rows:

- ``redacts`` is read from content (room versions 11+, Synapse's default 12) or top level (older).
  A redaction that was itself redacted still counts as a Redaction when its target is readable:
  redacting a redaction does not bring the original back, so its target must still go.
- "content == {}" means a redacted ``m.room.message``; other types keep their own kind (an
  emptied ``m.bridge`` state event is news for the refresher, not a redaction).
- Any event with a ``state_key`` is state: ``Other(<type>)`` keeping ``event_type`` and
  ``state_key``. Media msgtypes give ``Other(<msgtype>)``; a non-string msgtype or body gives
  ``Other(malformed)``; a text message whose body is blank (after the reply fallback goes) gives
  ``Other(empty)``; an edit whose new msgtype is not text gives ``Other(edit_non_text)``.
- Edit bodies come from ``m.new_content.body``; without ``m.new_content``, from ``body`` less its
  leading "* ". An edit by another sender is still an ``Edit``: the fold decides.
- Replies (``m.in_reply_to``) lose their leading "> " quote lines and the blank line after them,
  so a quoted message's text cannot outlive that message's redaction; the replied-to event id
  is kept as ``reply_to`` (an id only). A thread's fallback reply (``is_falling_back: true``)
  is no reply: it names the thread's latest event for clients without threads.
- A thread message (``rel_type: m.thread``) keeps its root's id as ``thread_root``. An id that
  is not an event id (a string: "$", then 1-254 characters, no whitespace) or names the event
  itself is dropped (the message stays a message): the index keeps ids, and a filter on them.
- Bodies lose NULs, lone surrogates become U+FFFD, then ``scrub`` runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, TypeGuard, Union

from chunker.scrub import scrub


@dataclass(frozen=True, slots=True)
class Message:
    """A text message (m.text, m.notice, m.emote). ``body`` is scrubbed, reply fallback removed.
    ``reply_to`` is the event it replies to; ``thread_root`` the root of the thread it is in."""

    event_id: str
    sender: str
    ts: int  # origin_server_ts, unix ms
    body: str
    reply_to: str | None = None
    thread_root: str | None = None
    # The sender's display name when it was sent, already cleaned (``chunker.members``); set by
    # the refresher from the room's member state, never by ``parse_event``.
    display_name: str | None = None


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


_TEXT_MSGTYPES = frozenset({"m.text", "m.notice", "m.emote"})
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_MSGTYPE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def parse_event(raw: object) -> Event:
    """Classify one raw event per the table above. Never raises: a bug in here, or a shape no
    rule foresaw, yields ``Other(kind="malformed")`` rather than stopping a room."""
    try:
        return _classify(raw)
    except Exception:  # noqa: BLE001 - the contract is total; a surprise is a malformed event, not a crash
        return _malformed(raw)


def _classify(raw: object) -> Event:
    if not isinstance(raw, dict):
        return _malformed(raw)
    event_id, sender, ts = raw.get("event_id"), raw.get("sender"), raw.get("origin_server_ts")
    event_type, content = raw.get("type"), raw.get("content")
    if not (_nonempty_str(event_id) and _nonempty_str(sender) and _is_int(ts) and _nonempty_str(event_type)):
        return _malformed(raw)
    if not isinstance(content, dict):
        return _malformed(raw)
    state_key = raw.get("state_key")
    state_key = state_key if isinstance(state_key, str) else None

    def other(kind: str) -> Other:
        return Other(event_id, sender, ts, kind, event_type, state_key)

    if event_type == "m.room.redaction":
        # Room versions 11+ carry the target in content, older ones at top level. A redaction
        # that was itself redacted still redacts its target (Matrix ignores redacting a
        # redaction), so it is read before the redacted check below.
        for target in (content.get("redacts"), raw.get("redacts")):
            if _nonempty_str(target):
                return Redaction(event_id, sender, ts, target)
        return other("redacted" if _is_redacted(raw) else "malformed")
    if _is_redacted(raw) or (event_type == "m.room.message" and not content):
        return other("redacted")
    if state_key is not None:
        return other(event_type)
    if event_type == "m.room.encrypted":
        return other("encrypted")
    if event_type != "m.room.message":
        return other(event_type)
    return _room_message(raw, content, other)


def _room_message(raw: dict[str, Any], content: dict[str, Any], other: Callable[[str], Other]) -> Event:
    """An ``m.room.message`` event whose envelope ``_classify`` checked: an edit, a text message
    or an ``Other`` that keeps none of its text."""
    event_id = raw["event_id"]
    relation = content.get("m.relates_to")
    relation = relation if isinstance(relation, dict) else {}
    if relation.get("rel_type") == "m.replace":
        return _edit(raw, content, relation, other)
    msgtype = content.get("msgtype")
    if not isinstance(msgtype, str):
        return other("malformed")
    if msgtype not in _TEXT_MSGTYPES:
        # m.image, m.file, m.location, ...: never indexed. A msgtype that is not a name could be
        # anybody's text, and Other keeps none.
        return other(msgtype if _MSGTYPE_NAME.fullmatch(msgtype) else raw["type"])
    body = content.get("body")
    if not isinstance(body, str):
        return other("malformed")
    if "m.in_reply_to" in relation:
        body = _strip_reply_fallback(body)
    body = _clean(body)
    if not body.strip():
        # Nothing to find or cite (an empty body, or a reply that was only its quote): stored, it
        # would be a window line with no words. Counted as skipped like any other non-text event.
        return other("empty")
    reply_to, thread_root = _relations(relation, event_id)
    return Message(event_id, raw["sender"], raw["origin_server_ts"], body, reply_to, thread_root)


def _relations(relation: dict[str, Any], event_id: str) -> tuple[str | None, str | None]:
    """``(reply_to, thread_root)`` of a message's ``m.relates_to``; a hostile shape gives None."""
    thread_root = relation.get("event_id") if relation.get("rel_type") == "m.thread" else None
    in_reply_to = relation.get("m.in_reply_to")
    reply_to = in_reply_to.get("event_id") if isinstance(in_reply_to, dict) else None
    if thread_root is not None and relation.get("is_falling_back") is True:
        reply_to = None  # the thread fallback for clients without threads, not a reply
    return (
        reply_to if _is_event_id(reply_to) and reply_to != event_id else None,
        thread_root if _is_event_id(thread_root) and thread_root != event_id else None,
    )


_EVENT_ID = re.compile(r"\$\S{1,254}")


def _is_event_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _EVENT_ID.fullmatch(value) is not None


def _edit(
    raw: dict[str, Any], content: dict[str, Any], relation: dict[str, Any], other: Callable[[str], Other]
) -> Event:
    target = relation.get("event_id")
    if not _nonempty_str(target):
        return other("malformed")
    new_content = content.get("m.new_content")
    if new_content is None:
        # A client that sent no m.new_content: the fallback body is "* " + the new text.
        body = content.get("body")
        msgtype = content.get("msgtype")
        if isinstance(body, str) and body.startswith("* "):
            body = body[2:]
    elif isinstance(new_content, dict):
        body = new_content.get("body")
        msgtype = new_content.get("msgtype", content.get("msgtype"))
    else:
        return other("malformed")
    if not isinstance(msgtype, str) or msgtype not in _TEXT_MSGTYPES:
        return other("edit_non_text")
    if not isinstance(body, str):
        return other("malformed")
    return Edit(raw["event_id"], raw["sender"], raw["origin_server_ts"], target, _clean(body))


def _strip_reply_fallback(body: str) -> str:
    """Drop the quoted original a reply carries ("> <@a:b> original" lines, then a blank line):
    it is the other message's text, which must not outlive that message's redaction."""
    lines = body.split("\n")
    quoted = 0
    while quoted < len(lines) and (lines[quoted].startswith("> ") or lines[quoted] == ">"):
        quoted += 1
    if quoted == 0:
        return body
    if quoted < len(lines) and lines[quoted].strip() == "":
        quoted += 1
    return "\n".join(lines[quoted:])


def _clean(body: str) -> str:
    # NULs go before the scrub so they cannot split a secret; lone surrogates (valid JSON, not
    # valid UTF-8) would break every later encode.
    body = _LONE_SURROGATE.sub("\ufffd", body.replace("\x00", ""))
    return scrub(body)


def _is_redacted(raw: dict[str, Any]) -> bool:
    unsigned = raw.get("unsigned")
    return isinstance(unsigned, dict) and "redacted_because" in unsigned


def _malformed(raw: object) -> Other:
    fields = raw if isinstance(raw, dict) else {}
    event_id, sender, ts = fields.get("event_id"), fields.get("sender"), fields.get("origin_server_ts")
    event_type, state_key = fields.get("type"), fields.get("state_key")
    return Other(
        event_id if isinstance(event_id, str) else "",
        sender if isinstance(sender, str) else "",
        ts if _is_int(ts) else 0,
        "malformed",
        event_type if isinstance(event_type, str) else "",
        state_key if isinstance(state_key, str) else None,
    )


def _nonempty_str(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)

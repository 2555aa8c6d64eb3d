"""Windows: the unit the index stores.

Owns: ``Window`` and ``StoredMessage``; a window's point id (``window_point_id``); the text that
gets embedded (``embed_text``) and the text a search hit cites (``render_text``); ``CHUNK_VERSION``.

Must not: do I/O, decide layout (that is ``chunker.fold``), keep any text of a redacted message
(a window records redacted event ids only), or name payload fields: how a window is written into
the index and read back is ``daemon/index/schema.py`` (``window_payload``/``window_from_payload``).

Rules a reader of the index relies on:

1. A window's point id is ``uuid5(WINDOW_NAMESPACE, room_id + "\\x00" + anchor_id)``. The anchor is
   the event id of the message that opened the window and never changes, even when that
   message is later redacted or purged, so a window keeps its point for life.
2. A window read back from the index is equal to the one that was written (the schema's
   payload mapping round-trips every field of ``Window``).
3. Bump ``CHUNK_VERSION`` whenever layout, rendering or the payload shape changes: it is part of
   ``chat_version``, and a different chat version rebuilds the index.
"""

from __future__ import annotations

import copy
import functools
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

# 2: the BM25 leg analyses ``daemon.embedder.lexical_text`` (stored sparse vectors changed).
# 3: thread replies are laid out in their thread's own windows; messages keep ``reply_to``.
# 4: each message keeps its sender's display name at the time (``display_name``).
# 5: the dense vector is one row per message (``embed_line``), not one per window.
# 6: BM25 document weights fully length-normalised (``daemon.embedder.BM25_B``: stored sparse
#    vectors changed; windows, texts and dense rows did not).
# 7: a context row per message that answers an earlier line of its window (``chunker.context``),
#    listed by the payload's ``context_of``.
CHUNK_VERSION: int = 7

# Fixed for the life of the index format: changing it moves every point.
WINDOW_NAMESPACE = uuid.UUID("5b1f6c0e-8a47-5e21-9d3c-6f0a2b7c4e19")


@dataclass
class StoredMessage:
    """One text message as a window keeps it: the latest accepted body, already scrubbed, and the
    id (only) of the event it replies to."""

    event_id: str
    sender: str
    ts: int  # origin_server_ts, unix ms
    body: str
    reply_to: str | None = None
    display_name: str | None = None  # the sender's display name when it was sent (chunker.members)


@dataclass
class Window:
    """A run of consecutive text messages of one timeline of one room, in stream order: the main
    timeline (``thread_root`` None) or one thread (``thread_root`` = the root's event id; the
    root itself is a main-timeline message and lives in a main window).

    ``redacted_ids`` are the ids of messages that were in this window and were redacted: ids
    only, so a replayed redaction or message is recognised without keeping any of its text.
    ``closed`` is set once a later message opened the next window; a closed window never takes
    another message."""

    room_id: str
    anchor_id: str
    messages: list[StoredMessage] = field(default_factory=list)
    redacted_ids: list[str] = field(default_factory=list)
    closed: bool = False
    thread_root: str | None = None

    def copy(self) -> "Window":
        """An independent copy, as ``copy.deepcopy`` makes one but ~10x cheaper (the fold copies
        every window it hands out or takes in: on a backfill deepcopy was the refresher's largest
        Python cost after scrubbing). Every field but the two lists holds an immutable value
        (str, int, bool, None), and so does every field of ``StoredMessage``;
        tests/unit/test_windows.py holds the field lists to that."""
        window = copy.copy(self)
        window.messages = [copy.copy(message) for message in self.messages]
        window.redacted_ids = list(self.redacted_ids)
        return window

    @property
    def point_id(self) -> str:
        return window_point_id(self.room_id, self.anchor_id)

    @property
    def first_event_id(self) -> str | None:
        return self.messages[0].event_id if self.messages else None

    @property
    def last_event_id(self) -> str | None:
        return self.messages[-1].event_id if self.messages else None

    # Time bounds are min/max rather than first/last so that a time filter stays right when
    # servers' clocks disagree and timestamps in the stream go backwards.
    @property
    def ts_start(self) -> int | None:
        return min(m.ts for m in self.messages) if self.messages else None

    @property
    def ts_end(self) -> int | None:
        return max(m.ts for m in self.messages) if self.messages else None


@functools.lru_cache(maxsize=4096)
def window_point_id(room_id: str, anchor_id: str) -> str:
    # Cached: a window's id is asked for many times while it is folded, embedded and written
    # (uuid5 hashes and builds a UUID each time), and the windows of one checkpoint repeat.
    return str(uuid.uuid5(WINDOW_NAMESPACE, room_id + "\x00" + anchor_id))


def localpart(mxid: str) -> str:
    """``@alice:example.org`` -> ``alice``; anything else is returned as it is."""
    if mxid.startswith("@") and ":" in mxid:
        return mxid[1 : mxid.index(":")]
    return mxid


def embed_line(message: StoredMessage) -> str:
    return f"{localpart(message.sender)}: {message.body}"


def embed_text(window: Window) -> str:
    """What gets embedded: one ``<localpart>: <body>`` line per message. Localparts, not full
    mxids, so server names do not dominate the vector; emotes are not special-cased."""
    return "\n".join(embed_line(m) for m in window.messages)


def window_bytes(window: Window) -> int:
    """A window's size as the layout bounds it: UTF-8 bytes of ``embed_text``."""
    return len(embed_text(window).encode("utf-8"))


def _utc(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def render_text(window: Window) -> str:
    """The citation text: ``[YYYY-MM-DD HH:MM:SSZ] @sender:server: body`` per message (UTC)."""
    return "\n".join(f"[{_utc(m.ts)}] {m.sender}: {m.body}" for m in window.messages)

"""Context rows: each message of a window embedded again together with the line it answers.

Owns: ``context_rows`` (which messages of a window get a second dense row, and its text),
``dense_row_texts`` (the order of a window's dense rows: message lines, then context rows), the
addressee rule (``addressee``) and the bounds ``CONTEXT_MAX_GAP_MS`` and ``CONTEXT_EARLIER_CHARS``.

Why: a chat answer rarely repeats its question ("cdrecord", "yes, 2.6 fixed it"), so a search
that describes the exchange in its own words finds the question's line and not the answer's.
A second row holding both lines lets the answer's window rank by the exchange; the reader folds
a context row's similarity into its message's (``daemon.index.queries.message_scores``), so
citations still name the message itself. Measured in docs/quality.md: on the tune halves of
both outside query sets it gains first places (and paraphrases on irc1) and loses no query from
the top 5; held out, first places rose and recall@5 did not. It nearly doubles what is embedded.

Rules:

1. The earlier line of a message is the message it replies to (a Matrix reply, ``reply_to``)
   when that is earlier in the same window; else its addressee's latest line before it in the
   window when the message opens with ``nick:`` or ``nick,`` naming a sender of the window
   (localpart or display name, any case); else the line just before it. The first message of a
   window has no context row, nor has a message whose inferred earlier line (not a reply's) is
   more than ``CONTEXT_MAX_GAP_MS`` older (a new conversation).
2. Only lines of the window itself are read, never one of another window: a redaction or an edit
   rewrites the window that holds the line, and with it every row that repeats the line, so no
   row outlives the text it was made from.
3. The text is ``<earlier line>\\n<message line>``, both as ``chunker.windows.embed_line`` writes
   them, the earlier body cut to ``CONTEXT_EARLIER_CHARS`` (so the message itself stays inside
   the model's 256-token window).

Must not: do I/O, or name payload fields (the index schema stores which message each row
belongs to).
"""

from __future__ import annotations

import re
from typing import Sequence

from chunker.windows import StoredMessage, embed_line, localpart

CONTEXT_MAX_GAP_MS = 15 * 60 * 1000
CONTEXT_EARLIER_CHARS = 200

# A leading addressee as chat clients write it (``nick: ...``, ``nick, ...``): a name without
# spaces, colons or commas, then a colon or comma, a space and the rest of the message.
_ADDRESSEE = re.compile(r"^\s*([^\s:,]{1,32})\s*[:,]\s+(?=\S)")


def addressee(body: str) -> str | None:
    """The name a message opens by addressing (``"alice: try 2.6"`` -> ``"alice"``), lowercased,
    or None."""
    match = _ADDRESSEE.match(body)
    return match.group(1).lower() if match else None


def _names_of(message: StoredMessage) -> set[str]:
    names = {localpart(message.sender).lower()}
    if message.display_name:
        names.add(message.display_name.lower())
    return names


def _cut(message: StoredMessage) -> StoredMessage:
    if len(message.body) <= CONTEXT_EARLIER_CHARS:
        return message
    return StoredMessage(message.event_id, message.sender, message.ts, message.body[:CONTEXT_EARLIER_CHARS] + "…")


def context_rows(messages: Sequence[StoredMessage]) -> list[tuple[int, str]]:
    """``(i, text)`` for each message ``i`` of a window that has a context row, in message order
    (the module docstring's rules)."""
    rows: list[tuple[int, str]] = []
    latest_by_name: dict[str, StoredMessage] = {}
    by_id: dict[str, StoredMessage] = {}
    for i, message in enumerate(messages):
        replied = by_id.get(message.reply_to) if message.reply_to else None
        if replied is not None:
            rows.append((i, f"{embed_line(_cut(replied))}\n{embed_line(message)}"))
        elif i:
            named = addressee(message.body)
            earlier = latest_by_name.get(named) if named else None
            earlier = earlier or messages[i - 1]
            if message.ts - earlier.ts <= CONTEXT_MAX_GAP_MS:
                rows.append((i, f"{embed_line(_cut(earlier))}\n{embed_line(message)}"))
        for name in _names_of(message):
            latest_by_name[name] = message
        by_id[message.event_id] = message
    return rows


def dense_row_texts(messages: Sequence[StoredMessage]) -> tuple[list[str], list[int]]:
    """What a window's dense rows are embedded from, in row order (each message's line, then each
    context row), and the index of the message each context row belongs to."""
    rows = context_rows(messages)
    return [embed_line(m) for m in messages] + [text for _, text in rows], [i for i, _ in rows]

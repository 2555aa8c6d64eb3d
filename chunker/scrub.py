"""Credential scrubbing: every message body passes through ``scrub`` before it is chunked.

Owns: the engine that runs the credential table (``chunker.scrub_rules.PATTERNS``):
``find_secrets``, ``scrub``, the cross-message helpers the fold uses (``scrub_continuation``,
``carry_redactions``) and ``SCRUB_VERSION``. Bump ``SCRUB_VERSION`` whenever the table or the
engine changes what is redacted: it is part of the chat version, so a change rebuilds every room
and no stored point keeps text an older table missed.

Must not: do I/O, log, or keep the text it was given. It never raises on any ``str``.

How it works. Each row of the table is a kind, a regex and why it exists (the table is the
documentation, see ``chunker/scrub_rules.py``). A row runs only when one of its lowercase
trigger strings occurs in the lowered text, so ordinary chat costs a few substring tests. A
row's match redacts its ``secret*`` group when it has one, else the whole match; a row's
``refine`` may veto the match (code, not a secret) or move the span. Overlapping spans are
merged (a secret is never half-redacted); the earlier row names the merged span. Each span
becomes ``[redacted:<kind>]``.

``scrub`` is idempotent: a marker never matches a row, and a second pass runs only when the
first redacted something (it catches secrets that a redaction exposed, e.g. nested keys).

Across messages (the fold calls these; one message alone cannot tell):

- ``scrub_continuation(previous, body)``: when the sender's previous message ended inside a
  private key (its body ends with the private_key marker: a BEGIN without END), the base64
  lines that open ``body`` are the rest of that key.
- ``carry_redactions(source, target)``: an edit and the body it replaces are two versions of
  one text. Where ``source`` has a marker, the text that ``target`` has in the same place (by
  alignment of the unchanged text around it) is the same secret, possibly cut short (a key
  completed by the edit), and is redacted too.
"""

from __future__ import annotations

import bisect
import difflib
import re

import ahocorasick

from chunker.scrub_rules import PATTERNS, SecretPattern, secret_span

__all__ = [
    "PATTERNS",
    "SCRUB_VERSION",
    "SecretPattern",
    "carry_redactions",
    "find_secrets",
    "may_hold_secrets",
    "scrub",
    "scrub_continuation",
]

# 2: the table of issue 9 (60+ kinds, vetoes for code, values to the end of the line, prose,
#    cut-short vendor tokens, PEM bodies without BEGIN, linear JWT row).
# 4: X/Twitter bearer, Facebook and older Notion tokens, labelled recovery phrases; a marker's
#    own text never matches (rubygems_token was redacted again on each pass).
# 5: what a chat community pastes (IRC passwords, password hashes, base64 PEM keys, cookies,
#    recovery and door codes, URL capabilities, wallet keys), more ways a password is told, labels
#    without a verb, ~25 more vendor shapes.
SCRUB_VERSION: int = 5

_MARKER = re.compile(r"\[redacted:[a-z0-9_]+\]")


# Which rows a text triggers: one pass of an Aho-Corasick automaton over the lowered text
# (pyahocorasick, in C), which reports every trigger that occurs, overlapping ones included. Same
# test as one search per row (does any of its triggers occur in the lowered text) at a fraction of
# its cost, and ~4x cheaper than the prefix-tree regex it replaced (60 KB: 11.8 -> 2.6 ms; 100
# journal ids: 0.67 -> 0.18 ms; a chat line: 9.3 -> 2.4 us): the journal scrubs every string it
# writes, ids included, and a reader's audit line holds ~80 of them.
_TRIGGERS = sorted({trigger for row in PATTERNS for trigger in row.triggers})
_AUTOMATON = ahocorasick.Automaton()
for _trigger in _TRIGGERS:
    _AUTOMATON.add_word(_trigger, _trigger)
_AUTOMATON.make_automaton()
_ROWS_OF_TRIGGER = {
    trigger: frozenset(order for order, row in enumerate(PATTERNS) if trigger in row.triggers) for trigger in _TRIGGERS
}
_UNTRIGGERED_ROWS = frozenset(order for order, row in enumerate(PATTERNS) if not row.triggers)
_UNTRIGGERED = tuple(PATTERNS[order] for order in sorted(_UNTRIGGERED_ROWS))


def triggered_rows(lowered: str) -> frozenset[int]:
    """The positions in ``PATTERNS`` of the rows to run on ``lowered``: each row with no
    triggers, and each row one of whose triggers occurs in it."""
    rows = set(_UNTRIGGERED_ROWS)
    # Each distinct trigger once: a long paste finds thousands (every ':' and newline is one).
    for trigger in {trigger for _end, trigger in _AUTOMATON.iter(lowered)}:
        rows |= _ROWS_OF_TRIGGER[trigger]
    return frozenset(rows)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# Many short texts tested together (``may_hold_secrets``): joined by a character no trigger holds,
# so every trigger found in the joined text lies inside one of them.
_JOIN = "\x00"
assert not any(_JOIN in trigger for trigger in _TRIGGERS)


def may_hold_secrets(texts: list[str]) -> list[bool]:
    """Per text, False when ``scrub`` certainly returns it unchanged: none of the triggers occurs
    in it and no row without triggers matches it; True when it must be scrubbed to know.

    Decided for all of them with one pass of the automaton over the texts joined, where ``scrub``
    costs a pass (and a few calls) per text: the journal tests every string it writes, and a
    reader's audit line holds ~100 ids. Each trigger found is mapped to the text it ends in by its
    offset (no trigger crosses a separator)."""
    lowered = [text.lower() for text in texts]
    ends: list[int] = []  # the offset in the joined text where each text ends
    offset = -1
    for low in lowered:
        offset += len(low) + 1
        ends.append(offset)
    flags = [False] * len(texts)
    for end, _trigger in _AUTOMATON.iter(_JOIN.join(lowered)):
        flags[bisect.bisect_left(ends, end)] = True
    for index, (text, low) in enumerate(zip(texts, lowered)):
        if not flags[index]:
            folded = low if len(low) == len(text) else text.translate(_ASCII_LOWER)
            flags[index] = any(row.pattern.search(folded if row.folded else text) for row in _UNTRIGGERED)
    return flags


def find_secrets(text: str) -> list[tuple[str, int, int]]:
    """Spans to redact as ``(kind, start, end)``, sorted, non-overlapping (overlaps merged)."""
    lowered = text.lower()
    # Rows written in lower case search the lowered text; lower() keeps every offset unless a
    # character grows (İ), and then only ASCII is folded.
    folded: str | None = lowered if len(lowered) == len(text) else None
    found: list[tuple[int, int, int, str]] = []  # start, row order, end, kind
    # A marker a pass before placed is never a secret, nor is any part of it: a kind's name can
    # hold a vendor's prefix (``rubygems_token`` starts with ``rubygems_``).
    markers = [m.span() for m in _MARKER.finditer(text)] if "[redacted:" in text else []
    for order in sorted(triggered_rows(lowered)):
        row = PATTERNS[order]
        searched = text
        if row.folded:
            if folded is None:
                folded = text.translate(_ASCII_LOWER)
            searched = folded
        for match in row.pattern.finditer(searched):
            if row.not_after and match.start() and text[match.start() - 1] in row.not_after:
                continue
            span = secret_span(match) if row.refine is None else row.refine(match, text)
            if span is None:
                continue
            start, end = span
            if start >= end or text.startswith("[redacted:", start):
                continue
            if any(m_start <= start and end <= m_end for m_start, m_end in markers):
                continue
            found.append((start, order, end, row.kind))
    found.sort()
    merged: list[tuple[str, int, int]] = []
    for start, _order, end, kind in found:
        if merged and start < merged[-1][2]:
            last_kind, last_start, last_end = merged[-1]
            merged[-1] = (last_kind, last_start, max(last_end, end))
        else:
            merged.append((kind, start, end))
    return merged


def _redact(text: str, spans: list[tuple[str, int, int]]) -> tuple[str, list[int]]:
    """``text`` with ``spans`` replaced by markers, and where each marker starts."""
    pieces: list[str] = []
    markers: list[int] = []
    position = length = 0
    for kind, start, end in spans:
        pieces.append(text[position:start])
        length += start - position
        markers.append(length)
        marker = f"[redacted:{kind}]"
        pieces.append(marker)
        length += len(marker)
        position = end
    pieces.append(text[position:])
    return "".join(pieces), markers


_MAX_PASSES = 4
_CONTEXT_LINES = 1


def _around(text: str, positions: list[int]) -> list[tuple[int, int]]:
    """Merged ranges of whole lines, ``_CONTEXT_LINES`` either side of each position."""
    ranges: list[tuple[int, int]] = []
    for position in positions:  # ascending
        if ranges and position < ranges[-1][1]:
            continue  # inside the range already taken: no search back (a long line has many)
        start = position
        for _ in range(_CONTEXT_LINES + 1):
            start = text.rfind("\n", 0, max(start - 1, 0)) + 1 if start > 0 else 0
        end = position
        for _ in range(_CONTEXT_LINES + 1):
            found = text.find("\n", end + 1)
            end = len(text) if found < 0 else found
        if ranges and start <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
        else:
            ranges.append((start, end))
    return ranges


def scrub(text: str) -> str:
    """``text`` with every recognised credential replaced by ``[redacted:<kind>]``.

    Later passes (a redaction can expose a secret, e.g. a key nested in another's value) look
    only at the lines around the markers the pass before placed: the rest of the text is what
    the first pass already saw, so a second full pass over a 60 KB paste would find nothing new
    there and cost as much as the first."""
    spans = find_secrets(text)
    if not spans:
        return text
    text, markers = _redact(text, spans)
    for _ in range(_MAX_PASSES - 1):
        pieces: list[str] = []
        new_markers: list[int] = []
        position = length = 0
        for start, end in _around(text, markers):
            region_spans = find_secrets(text[start:end])
            if not region_spans:
                continue
            region, region_markers = _redact(text[start:end], region_spans)
            pieces.append(text[position:start])
            length += start - position
            new_markers.extend(length + m for m in region_markers)
            pieces.append(region)
            length += len(region)
            position = end
        if not new_markers:
            return text
        pieces.append(text[position:])
        text, markers = "".join(pieces), new_markers
    return text


_PEM_OPEN_MARKER = "[redacted:private_key]"
_KEY_LINE = re.compile(r"[ \t]*[A-Za-z0-9+/=]{16,}[ \t]*\r?")


def scrub_continuation(previous: str | None, body: str) -> str:
    """``body`` scrubbed as the continuation of ``previous`` (the same sender's last message in
    the room, already scrubbed): a key whose BEGIN line came before loses the base64 lines that
    open this message. Otherwise ``body`` unchanged."""
    if not previous or not previous.rstrip().endswith(_PEM_OPEN_MARKER):
        return body
    lines = body.split("\n")
    taken = 0
    while taken < len(lines) and _KEY_LINE.fullmatch(lines[taken]):
        taken += 1
    if taken == 0:
        return body
    return "\n".join([_PEM_OPEN_MARKER, *lines[taken:]])


def carry_redactions(source: str, target: str) -> str:
    """``target`` with the text redacted that lines up with each marker of ``source``.

    Both are scrubbed versions of one message (an edit and the body it replaced). The unchanged
    text around a marker of ``source`` is found in ``target``; what ``target`` holds between it
    is that secret's other version (cut short, or complete) and goes too."""
    markers = list(_MARKER.finditer(source))
    if not markers:
        return target
    # One private-use character per marker, so no marker text aligns with target text.
    sentinel = "\ue000"
    flat = _MARKER.sub(sentinel, source)
    matcher = difflib.SequenceMatcher(None, flat, target, autojunk=False)
    blocks = matcher.get_matching_blocks()
    spans: list[tuple[int, int, str]] = []
    position = 0
    for marker in markers:
        at = flat.index(sentinel, position)
        position = at + 1
        before = max((b for b in blocks if b.size and b.a + b.size <= at), key=lambda b: b.a, default=None)
        after = min((b for b in blocks if b.size and b.a > at), key=lambda b: b.a, default=None)
        lo = before.b + before.size if before else 0
        hi = after.b if after else len(target)
        if lo < hi and target[lo:hi].strip() and not _MARKER.fullmatch(target, lo, hi):
            spans.append((lo, hi, marker.group(0)))
    if not spans:
        return target
    pieces: list[str] = []
    cursor = 0
    for lo, hi, marker_text in sorted(spans):
        if lo < cursor:
            continue
        pieces.append(target[cursor:lo])
        pieces.append(marker_text)
        cursor = hi
    pieces.append(target[cursor:])
    return "".join(pieces)

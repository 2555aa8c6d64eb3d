"""Credential scrubbing: every message body passes through ``scrub`` before it is chunked.

Owns: the engine that runs the credential table (``chunker.scrub_rules.PATTERNS``):
``find_secrets``, ``scrub``, the cross-message helpers the fold uses (``scrub_continuation``,
``carry_redactions``) and ``SCRUB_VERSION``. Bump ``SCRUB_VERSION`` whenever the table or the
engine changes what is redacted: it is part of the chat version, so a change rebuilds every room
and no stored point keeps text an older table missed.

Must not: do I/O, log, or keep the text it was given. It never raises on any ``str``.

How it works. Each row of the table is a kind, a regex and why it exists (the table is the
documentation, see ``chunker/scrub_rules/__init__.py``). A row runs only when one of its lowercase
trigger strings occurs in the lowered text, so ordinary chat costs a few substring tests; in a
long paste, a row whose matches cannot cross a line is searched only on the lines that hold one
of its triggers (``stays_on_one_line``), with the same result as a search of the whole text. A
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
import functools
import re
from typing import Any, Iterable

import ahocorasick

from chunker.scrub_rules import PATTERNS, SecretPattern, secret_span

try:  # CPython's regex parser (3.11+), private: without it ``stays_on_one_line`` proves no row
    import re._constants as _sre
    import re._parser as _sre_parse
except ImportError:
    _sre_parse = None

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

# Raised whenever the table changes what it redacts: the index's meta names the version, so a new
# one rebuilds every room and no stored window keeps what the newer table would remove. What each
# version added: CHANGELOG.md.
SCRUB_VERSION: int = 9

_MARKER = re.compile(r"\[redacted:[a-z0-9_]+\]")


# Which triggers occur in a text: Aho-Corasick automata (pyahocorasick, in C), which report every
# trigger that occurs, overlapping ones included. Same test as one search per row (does any of its
# triggers occur in the lowered text) at a fraction of its cost, and cheaper than a prefix-tree
# regex of every trigger (bench/results.md): the journal scrubs every string it writes, ids
# included, and a reader's audit line holds dozens of them. ``_AUTOMATON`` holds every trigger and answers "does this text
# hold any" for many texts joined (``may_hold_secrets``); ``_WORD_AUTOMATON`` below also says where.
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
    return frozenset(_rows_of(_trigger_ends(lowered)))


def _rows_of(triggers_found: Iterable[str]) -> set[int]:
    """The rows to run when these triggers occur: each row without triggers, and theirs."""
    rows = set(_UNTRIGGERED_ROWS)
    for trigger in triggers_found:
        rows |= _ROWS_OF_TRIGGER[trigger]
    return rows


# Triggers with no letter or digit (a newline, ':', '.', '--', '://') occur hundreds of times in a
# paste; where they occur is never worth keeping (their rows search the whole text), and each
# occurrence the automaton reports is a Python object. One substring test each says whether they
# occur; the automaton below reports the others.
_PUNCTUATION_TRIGGERS = tuple(t for t in _TRIGGERS if not any(c.isalnum() for c in t))
_WORD_AUTOMATON = ahocorasick.Automaton()
for _trigger in _TRIGGERS:
    if _trigger not in _PUNCTUATION_TRIGGERS:
        _WORD_AUTOMATON.add_word(_trigger, _trigger)
_WORD_AUTOMATON.make_automaton()


def _trigger_ends(lowered: str) -> dict[str, list[int] | None]:
    """Each trigger that occurs in ``lowered``, with the offset of the last character of each
    of its occurrences (ascending), or None for a punctuation trigger (where is not kept)."""
    ends: dict[str, list[int] | None] = {t: None for t in _PUNCTUATION_TRIGGERS if t in lowered}
    for end, trigger in _WORD_AUTOMATON.iter(lowered):
        positions = ends.get(trigger)
        if positions is None:
            ends[trigger] = [end]
        else:
            positions.append(end)
    return ends


# Rows searched only on the lines that hold one of their triggers. In a long paste most lines
# hold no trigger of a given row, and a row's regex costs about as much per character where it
# cannot match as where it can (a row opening with an alternation of words tries it at every
# letter that starts one): searching three lines instead of 60 KB is the saving.
#
# It finds exactly what a search of the whole text finds when (a) no match of the row, nor any
# text its look-arounds examine, can hold a newline (``stays_on_one_line`` proves it from the
# parsed regex, so a row gains it without anyone remembering to say so) and (b) every match holds
# one of the row's triggers, which is what a trigger is for (tests/unit/test_scrub.py checks every
# match in the corpus). Then every match lies in one line, the lines without a trigger hold none,
# and a search of one line sees the same text around its matches as the whole-text search does:
# look-behinds and ``\b`` see the line before (``pos`` is not a slice), and ``endpos`` is past
# the line's newline, so look-aheads see it.
_LINE_SEARCH_MAX_OCCURRENCES = 64  # beyond this many trigger occurrences, one whole-text search


def stays_on_one_line(pattern: re.Pattern[str]) -> bool:
    r"""True when nothing ``pattern`` matches, and nothing its look-arounds examine, can hold a
    newline, and it has no end-of-string anchor (``$`` without MULTILINE, ``\Z``), which a
    search that ends at a line's end would meet early. False for anything this cannot parse
    or does not know: the row is then searched over the whole text, as before."""
    if _sre_parse is None:
        return False
    try:
        parsed = _sre_parse.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - any failure means "not proven", never an error
        return False
    return _nodes_stay_on_one_line(parsed, bool(pattern.flags & re.DOTALL), bool(pattern.flags & re.MULTILINE))


def _nodes_stay_on_one_line(nodes: Any, dotall: bool, multiline: bool) -> bool:
    """True when no node of a parsed regex can match or examine a newline or meet the end of the
    string: a node that holds others is as safe as they are."""
    for op, arg in nodes:
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT):
            ok = _nodes_stay_on_one_line(arg[2], dotall, multiline)
        elif op is _sre.SUBPATTERN:
            group_dotall = (dotall or bool(arg[1] & re.DOTALL)) and not arg[2] & re.DOTALL
            ok = _nodes_stay_on_one_line(arg[3], group_dotall, multiline)
        elif op is _sre.ATOMIC_GROUP:
            ok = _nodes_stay_on_one_line(arg, dotall, multiline)
        elif op is _sre.BRANCH:
            ok = all(_nodes_stay_on_one_line(branch, dotall, multiline) for branch in arg[1])
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            ok = _nodes_stay_on_one_line(arg[1], dotall, multiline)
        elif op is _sre.GROUPREF_EXISTS:
            ok = _nodes_stay_on_one_line(arg[1], dotall, multiline) and (
                arg[2] is None or _nodes_stay_on_one_line(arg[2], dotall, multiline)
            )
        else:
            ok = _leaf_stays_on_one_line(op, arg, dotall, multiline)
        if not ok:
            return False
    return True


def _leaf_stays_on_one_line(op: Any, arg: Any, dotall: bool, multiline: bool) -> bool:
    """True when a node that holds no other (a character, a set, a position, a group's text)
    cannot match a newline nor meet the end of the string; False for an unknown one."""
    if op is _sre.LITERAL:
        return bool(arg != 10)
    if op is _sre.NOT_LITERAL:
        return bool(arg == 10)  # [^x] matches a newline unless x is one
    if op is _sre.IN:
        return not _set_holds_newline(arg)
    if op is _sre.ANY:
        return not dotall
    if op is _sre.GROUPREF:
        return True  # the text a group matched, which the group's own check covers
    if op is _sre.AT:
        return arg not in (_sre.AT_END_STRING,) and (arg is not _sre.AT_END or multiline)
    return False


def _set_holds_newline(items: Any) -> bool:
    """True when a parsed character set (``[...]``) can match a newline; an unknown item counts
    as one that can."""
    negate, holds = False, False
    for op, arg in items:
        if op is _sre.NEGATE:
            negate = True
        elif op is _sre.LITERAL:
            holds |= arg == 10
        elif op is _sre.RANGE:
            holds |= arg[0] <= 10 <= arg[1]
        elif op is _sre.CATEGORY:
            if arg in (_sre.CATEGORY_DIGIT, _sre.CATEGORY_WORD, _sre.CATEGORY_NOT_SPACE, _sre.CATEGORY_NOT_LINEBREAK):
                continue
            holds = True  # \s, \W, \D, a line break: each holds a newline; unknown: assume so
        else:
            holds = True
    return holds != negate


@functools.cache
def _one_line_rows() -> frozenset[int]:
    """The rows searched by line (see above). Proved on first need, not at import: parsing every
    row's regex again takes ~0.1 s, and most processes that import the scrubber (the journal of a
    reader, a short refresh) never scrub a text of several lines."""
    return frozenset(
        order
        for order, row in enumerate(PATTERNS)
        if row.triggers and not any("\n" in t or "\r" in t for t in row.triggers) and stays_on_one_line(row.pattern)
    )


def _trigger_lines(text: str, row: SecretPattern, ends: dict[str, list[int] | None]) -> list[tuple[int, int]] | None:
    """The ``(pos, endpos)`` ranges of the lines of ``text`` that hold one of ``row``'s
    triggers (a line with its newline), merged; None when a whole-text search is cheaper."""
    found = [(trigger, ends[trigger]) for trigger in row.triggers if trigger in ends]
    if any(at is None for _, at in found) or sum(len(at or ()) for _, at in found) > _LINE_SEARCH_MAX_OCCURRENCES:
        return None
    positions = sorted((end - len(trigger) + 1, end) for trigger, at in found for end in at or ())
    ranges: list[tuple[int, int]] = []
    for start, end in positions:
        if ranges and start < ranges[-1][1]:
            continue  # on a line already taken
        line_start = text.rfind("\n", 0, start) + 1
        newline = text.find("\n", end)
        line_end = len(text) if newline < 0 else newline + 1
        if ranges and line_start <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], line_end)
        else:
            ranges.append((line_start, line_end))
    if sum(end - start for start, end in ranges) * 2 > len(text):
        return None
    return ranges


def _matches_at_triggers(row: SecretPattern, searched: str, ends: dict[str, list[int] | None]) -> list[re.Match[str]]:
    """The matches of a row whose every match starts with one of its triggers (``starts_at_trigger``):
    the regex tried at each place a trigger starts, left to right, skipping places inside a match
    already taken, as ``finditer`` would. The places come from the automaton's pass, so a row of a
    hundred words costs a ``match`` per occurrence, not an alternation tried at every character."""
    starts = sorted({end - len(trigger) + 1 for trigger in row.triggers for end in ends.get(trigger) or ()})
    found: list[re.Match[str]] = []
    taken = 0
    for start in starts:
        if start < taken:
            continue
        match = row.pattern.match(searched, start)
        if match is not None and match.end() > match.start():
            found.append(match)
            taken = match.end()
    return found


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
    ends = _trigger_ends(lowered)
    # Line ranges are offsets into the lowered text: only when lowering kept every offset.
    one_line_rows = _one_line_rows() if folded is not None and "\n" in text else frozenset()
    for order in sorted(_rows_of(ends)):
        row = PATTERNS[order]
        searched = text
        if row.folded:
            if folded is None:
                folded = text.translate(_ASCII_LOWER)
            searched = folded
        matches: Iterable[re.Match[str]]
        if row.starts_at_trigger and folded is not None:
            matches = _matches_at_triggers(row, searched, ends)
        else:
            lines = _trigger_lines(text, row, ends) if order in one_line_rows else None
            matches = (
                row.pattern.finditer(searched)
                if lines is None
                else (match for pos, endpos in lines for match in row.pattern.finditer(searched, pos, endpos))
            )
        for match in matches:
            if row.not_after and match.start() and text[match.start() - 1] in row.not_after:
                continue
            span = secret_span(match) if row.refine is None else row.refine(match, text)
            if span is None:
                continue
            start, end = span
            if start >= end or text.startswith("[redacted:", start):
                continue
            if any(m_start <= start < m_end for m_start, m_end in markers):
                continue  # starts inside a marker: a label's value read out of the marker's own text
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

"""The operators people type inside a search text: ``"exact phrase"``, ``-word``, ``from:@user``, ``in:#room``.

Owns: splitting one query text into what the index legs search (``words``) and what the reader
applies around them: phrases every hit must hold (words in order, inside one message), terms no
hit may hold, and the senders / rooms that join the request's ``senders`` / ``rooms`` filters.
And the two tests a window is held to (``holds_phrase``, ``holds_term``). The grammar is written
out in docs/protocol.md ("Query syntax").

Must not: import anything outside the standard library and ``daemon.errors`` (the stdlib-only CLI client checks a text
with it before it connects), or quote a text in an error (it may end up in a log).

Careful with ``-``: only a token that starts with ``-`` (at the start of the text or after
whitespace) and whose next character is a letter or ``_`` is an exclusion. ``x-forwarded-for``
(``-`` inside a word), ``--verbose`` (a flag: the next character is ``-``), ``-s`` (a one-letter
flag, as in ``apt-get -s dist-upgrade``: excluding a single letter would drop nearly every window),
``-5`` and ``-0.5`` (numbers) stay words to search for. A lone ``"`` (no closing quote) is an ordinary character.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from daemon.errors import UsageError

_WORD = re.compile(r"\w+", re.UNICODE)
# ``-`` then a letter or ``_``, then at least one more character: ``-s`` alone is a short flag.
_EXCLUSION = re.compile(r"-[^\W\d]\S", re.UNICODE)
_MXID = re.compile(r"^@[^:\s]+:\S+$")
_ROOM_ID = re.compile(r"^!\S+$")
_ALIAS = re.compile(r"^#[^:\s]+:\S+$")


class SyntaxProblem(UsageError, ValueError):
    """An operator with a value it cannot take; ``message`` names the operator, never the text."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class ParsedText:
    """One text taken apart. ``words`` is what the legs search: the text itself when it holds no
    operator, else its plain words and its phrases' words, operators removed."""

    words: str
    phrases: tuple[tuple[str, ...], ...] = ()
    excluded: tuple[tuple[str, ...], ...] = ()
    senders: tuple[str, ...] = ()
    rooms: tuple[str, ...] = ()
    operators: bool = field(default=False)


def analysed(text: str) -> tuple[str, ...]:
    """The words a phrase or an exclusion is compared on: ``\\w+`` runs, case-folded. So
    ``X-Forwarded-For`` is ``(x, forwarded, for)`` and matches it written with any separators."""
    return tuple(_WORD.findall(text.casefold()))


def parse_text(text: str) -> ParsedText:
    """Take ``text`` apart (see the module docstring). Raises ``SyntaxProblem`` for ``from:`` /
    ``in:`` with a value that is not a user id / room."""
    kept: list[str] = []
    phrases: list[tuple[str, ...]] = []
    excluded: list[tuple[str, ...]] = []
    senders: list[str] = []
    rooms: list[str] = []
    operators = False
    position, end = 0, len(text)
    while position < end:
        if text[position].isspace():
            position += 1
            continue
        negated = text.startswith('-"', position)
        quote_at = position + 1 if negated else position
        if text[quote_at] == '"':
            closing = text.find('"', quote_at + 1)
            inner = text[quote_at + 1 : closing] if closing != -1 else ""
            words = analysed(inner)
            if closing != -1 and words:
                operators = True
                if negated:
                    excluded.append(words)
                else:
                    phrases.append(words)
                    kept.append(inner.strip())
                position = closing + 1
                continue
        stop = position
        while stop < end and not text[stop].isspace():
            stop += 1
        token = text[position:stop]
        position = stop
        lowered = token.casefold()
        if lowered.startswith("from:") and len(token) > 5:
            value = token[5:]
            if not _MXID.match(value):
                raise SyntaxProblem("from: takes a Matrix user id (from:@name:server)")
            operators = True
            if value not in senders:
                senders.append(value)
        elif lowered.startswith("in:") and len(token) > 3:
            value = token[3:]
            if not (_ROOM_ID.match(value) or _ALIAS.match(value)):
                raise SyntaxProblem("in: takes a room alias or id (in:#name:server or in:!id)")
            operators = True
            if value not in rooms:
                rooms.append(value)
        elif _EXCLUSION.match(token) and analysed(token[1:]):
            operators = True
            excluded.append(analysed(token[1:]))
        else:
            kept.append(token)
    return ParsedText(
        words=" ".join(kept) if operators else text,
        phrases=tuple(dict.fromkeys(phrases)),
        excluded=tuple(dict.fromkeys(excluded)),
        senders=tuple(senders),
        rooms=tuple(rooms),
        operators=operators,
    )


def _holds(haystack: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    n = len(needle)
    if n == 0 or n > len(haystack):
        return False
    first = needle[0]
    return any(haystack[i] == first and haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def holds_phrase(bodies: list[str], phrase: tuple[str, ...]) -> bool:
    """Whether one of the messages holds the phrase's words in order, next to each other
    (punctuation and case between them ignored). A phrase never spans two messages."""
    return any(_holds(analysed(body), phrase) for body in bodies)


def holds_term(bodies: list[str], term: tuple[str, ...]) -> bool:
    """Whether one of the messages holds the excluded term (a word, or the words of an
    identifier or a quoted phrase, in order)."""
    return holds_phrase(bodies, term)

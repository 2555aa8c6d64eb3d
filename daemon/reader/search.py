"""What a search, a listing and a window lookup mean, independent of sockets and engines.

Owns: the query limits (1..8 texts of at most 1,000 UTF-8 bytes, ``top_k`` 1..50, window context
0..20), refusing bad input with a ``QueryError`` that names the field, the sort orders, room/sender
filter resolution, reciprocal rank fusion across the per-text legs, the floor that keeps
unrelated candidates from padding a page (``unrelated``), the ranked sequence that ranked paging
walks, the one-line context of a reply's target and a thread's root
(``attach_context``), and the four operations (``execute_search``, ``execute_listing``,
``execute_window``, ``execute_thread``) over the ``IndexReader`` / ``Embedder`` ports. The
grammars it applies live beside it: times in ``times``, the operators typed in a text in
``query_syntax``, the ``next`` tokens in ``cursors``.

Must not: do I/O of its own, log, or import anything outside the standard library and
``daemon.ports`` / ``daemon.index.port`` / ``daemon.reader.{times,query_syntax,cursors,rooms,explain}`` — the
stdlib-only CLI client imports this module to check input before it connects. Never filter after
a limit: eligibility is a ``SearchFilter`` handed to every index leg; the phrase and exclusion
operators, which no index filter expresses, are tested over ``CONSTRAINED_LEG_LIMIT`` candidates
per leg before fusion and before ``top_k`` is cut.

Fusion, as the spec writes it: each distinct text is one ranked list (the index fuses dense and
BM25 for that text, and the windows holding the text verbatim go first among its top ten:
``verbatim_first``); a window's score is ``sum 1/(60 + rank)`` over the lists it appears in, with
1-based ranks. A window appears at most once per list (its best rank) and once in the result.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Iterable, Mapping, Sequence

from daemon.errors import OperationalError, UsageError
from daemon.index.port import IndexReader, RoomEntry, ScoredWindow, SearchFilter, StoredWindow, WindowMessage
from daemon.ports import Embedder
from daemon.reader import cursors, query_syntax, times
from daemon.reader.explain import explain, holds_a_word, similarity_of, words_of
from daemon.reader.rooms import resolve_rooms
from daemon.reader.wire import (
    BAD_CURSOR,
    MAX_RANKED,
    MAX_TEXT_BYTES,
    MAX_TEXTS,
    SORT_NEWEST,
    SORT_OLDEST,
    SORT_RELEVANCE,
    SORTS,
    STALE_CURSOR,
    TOP_K_DEFAULT,
    TOP_K_MAX,
    WINDOW_CONTEXT_DEFAULT,
    WINDOW_CONTEXT_MAX,
)

RRF_K = 60  # the spec's k, with 1-based ranks (schema.RRF_K_SPEC)
# With several texts each leg is asked for more than top_k, so a window ranked just below the cut
# in every list can still win on the sum. One text asks for exactly top_k (ten when its verbatim
# holders go first): its result is then the index's own hybrid order and hits, with those holders
# moved up.
MULTI_TEXT_LEG_LIMIT = 20

DEGRADED_LEXICAL_ONLY = "lexical_only"

_MXID = re.compile(r"^@[^:\s]+:\S+$")
# Room version 12 (Synapse's default) ids have no ":server" part: "!" and an opaque string.
_ROOM_ID = re.compile(r"^!\S+$")
_ALIAS = re.compile(r"^#[^:\s]+:\S+$")
MAX_UNIX_MS = times.MAX_UNIX_MS

# A search sorted by time sorts this many of its best-ranked windows (then pages through them):
# deep enough for "the newest messages about X", shallow enough that they are still about X
# (the hybrid legs rank 50 candidates each for an ordinary search).
SORTED_POOL = 50
# With a phrase or an exclusion each leg ranks this many candidates before they are tested, so a
# constraint that few windows meet still finds them among the best 200 of each text.
CONSTRAINED_LEG_LIMIT = 200


class QueryError(UsageError, ValueError):
    """Input the reader refuses. ``field`` is the request field at fault (``texts``, ``top_k``,
    ``rooms``, ``senders``, ``after``, ``before``, ``cursor``, ``event_id``); ``not_found`` marks a
    well-formed id the index does not hold."""

    def __init__(self, field: str, message: str, *, not_found: bool = False, code: str | None = None):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.not_found = not_found
        self.code = code  # a protocol error code other than bad_request / not_found (bad_cursor, stale_cursor)


# ---------------------------------------------------------------------------------------------
# Validation


def validate_texts(texts: Any) -> tuple[str, ...]:
    """The distinct query texts, first occurrence order. An empty list means a listing.

    The count limit applies to what the caller sent (9 copies of one text are still refused);
    duplicates are dropped afterwards so a repeated text does not count twice in the fusion.
    Messages never quote a text: they may end up in logs."""
    if not isinstance(texts, (list, tuple)):
        raise QueryError("texts", "must be a list of strings")
    if len(texts) > MAX_TEXTS:
        raise QueryError("texts", f"at most {MAX_TEXTS} texts, got {len(texts)}")
    distinct: list[str] = []
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise QueryError("texts", f"texts[{position}] must be a string")
        if not text.strip():
            raise QueryError("texts", f"texts[{position}] is empty")
        if not _is_utf8(text):
            raise QueryError("texts", f"texts[{position}] is not valid UTF-8")
        size = len(text.encode("utf-8"))
        if size > MAX_TEXT_BYTES:
            raise QueryError("texts", f"texts[{position}] is {size} bytes, at most {MAX_TEXT_BYTES}")
        if text not in distinct:
            distinct.append(text)
    return tuple(distinct)


def _is_utf8(text: str) -> bool:
    """False for a string holding a lone surrogate (a ``\\udXXX`` escape in JSON, or an argument
    that was not UTF-8): it can be neither searched for nor written back in a reply."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bounded_int(value: Any, field_name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueryError(field_name, "must be an integer")
    if not low <= value <= high:
        raise QueryError(field_name, f"must be between {low} and {high}, got {value}")
    return value


def validate_top_k(value: Any) -> int:
    if value is None:
        return TOP_K_DEFAULT
    return _bounded_int(value, "top_k", 1, TOP_K_MAX)


def validate_context(value: Any, field_name: str) -> int:
    """``before`` / ``after`` of a window request: how many messages on that side."""
    if value is None:
        return WINDOW_CONTEXT_DEFAULT
    return _bounded_int(value, field_name, 0, WINDOW_CONTEXT_MAX)


def validate_event_id(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("$") or len(value) < 2 or len(value) > 255:
        raise QueryError("event_id", "must be a Matrix event id ($...)")
    if not _is_utf8(value):
        raise QueryError("event_id", "is not valid UTF-8")
    if any(ch.isspace() for ch in value):
        raise QueryError("event_id", "must not contain whitespace")
    return value


def parse_time_spec(value: Any, field_name: str) -> times.TimeSpec | None:
    """``after`` / ``before`` as asked (``daemon.reader.times``): absolute, or relative to the
    reader's clock."""
    if value is None:
        return None
    try:
        return times.parse_spec(value)
    except times.TimeError as exc:
        raise QueryError(field_name, exc.message) from None


def parse_time(value: Any, field_name: str) -> int | None:
    """An absolute time only (unix ms or ISO 8601; no zone means UTC), as unix ms: for commands
    that record a time (``purge``), where "2d" would mean something else on every run."""
    spec = parse_time_spec(value, field_name)
    if spec is None:
        return None
    if spec.absolute_ms is None:
        raise QueryError(field_name, "must be ISO 8601 (2026-11-01T07:38:59Z) or unix milliseconds")
    return spec.absolute_ms


def validate_sort(value: Any, has_texts: bool) -> str:
    """``relevance`` (the default with texts), ``newest`` or ``oldest`` (the default of a listing:
    it pages forward through history, the order an audit or a catch-up reads in)."""
    if value is None:
        return SORT_RELEVANCE if has_texts else SORT_OLDEST
    if not isinstance(value, str) or value not in SORTS:
        raise QueryError("sort", f"must be one of {', '.join(SORTS)}")
    if value == SORT_RELEVANCE and not has_texts:
        raise QueryError("sort", "relevance needs a text to rank by; a listing is newest or oldest")
    return value


def validate_rooms(rooms: Any) -> tuple[str, ...] | None:
    """Room ids (``!opaque``, ``!id:server`` before room version 12) or aliases
    (``#alias:server``); None = no room filter."""
    if rooms is None:
        return None
    if not isinstance(rooms, (list, tuple)):
        raise QueryError("rooms", "must be a list of room ids or aliases")
    if not rooms:
        # Fail closed: an empty list is refused, never read as "every room". Omit the field instead.
        raise QueryError("rooms", "must name at least one room (omit it for no room filter)")
    out: list[str] = []
    for room in rooms:
        if not isinstance(room, str) or not (_ROOM_ID.match(room) or _ALIAS.match(room)) or not _is_utf8(room):
            raise QueryError("rooms", "each must be a room id (!id) or alias (#name:server)")
        if room not in out:
            out.append(room)
    return tuple(out)


def validate_senders(senders: Any) -> tuple[str, ...] | None:
    if senders is None:
        return None
    if not isinstance(senders, (list, tuple)):
        raise QueryError("senders", "must be a list of user ids")
    if not senders:
        raise QueryError("senders", "must name at least one user id (omit it for no sender filter)")
    out: list[str] = []
    for sender in senders:
        if not isinstance(sender, str) or not _MXID.match(sender) or not _is_utf8(sender):
            raise QueryError("senders", "each must be a Matrix user id (@name:server)")
        if sender not in out:
            out.append(sender)
    return tuple(out) if out else None


# ---------------------------------------------------------------------------------------------
# Queries


@dataclass(frozen=True, slots=True)
class Query:
    """A validated search or listing request. ``texts`` are the distinct texts as asked (the audit
    digest and the cursor bind them); ``terms`` are what the index legs search, the operators of
    ``daemon.reader.query_syntax`` taken out (empty = a listing); ``phrases`` / ``excluded`` are
    the constraints those operators set, and their ``from:`` / ``in:`` are already in
    ``senders`` / ``rooms``. ``after_ms`` / ``before_ms`` are resolved at ``now_ms`` from
    ``after_spec`` / ``before_spec``."""

    texts: tuple[str, ...] = ()
    rooms: tuple[str, ...] | None = None
    senders: tuple[str, ...] | None = None
    after_ms: int | None = None
    before_ms: int | None = None
    top_k: int = TOP_K_DEFAULT
    cursor: str | None = None
    sort: str = SORT_RELEVANCE
    terms: tuple[str, ...] = ()
    phrases: tuple[tuple[str, ...], ...] = ()
    excluded: tuple[tuple[str, ...], ...] = ()
    after_spec: times.TimeSpec | None = None
    before_spec: times.TimeSpec | None = None
    now_ms: int = 0
    sort_given: bool = False

    def filters(self) -> dict[str, Any]:
        """The filters as asked (before alias resolution): audit lines and the cursor digest."""
        return {
            "rooms": list(self.rooms) if self.rooms is not None else None,
            "senders": list(self.senders) if self.senders is not None else None,
            "after_ms": self.after_ms,
            "before_ms": self.before_ms,
        }

    @property
    def constrained(self) -> bool:
        return bool(self.phrases or self.excluded)

    def at(self, now_ms: int) -> Query:
        """This query with its relative times resolved at ``now_ms`` (a continued page resolves
        them at its first page's clock, so every page lists the same windows)."""
        after_ms = self.after_spec.resolve(now_ms) if self.after_spec is not None else None
        before_ms = self.before_spec.resolve(now_ms) if self.before_spec is not None else None
        # Without a relative time the clock means nothing: 0, so equal requests are equal queries
        # and give equal tokens.
        relative = any(spec is not None and spec.relative for spec in (self.after_spec, self.before_spec))
        return replace(self, after_ms=after_ms, before_ms=before_ms, now_ms=now_ms if relative else 0)

    def digest(self) -> str:
        """What a cursor binds: the texts, the filters as asked (a relative time as written, not
        as resolved) and the sort."""
        return cursors.request_digest(
            {
                "texts": list(self.texts),
                "rooms": list(self.rooms) if self.rooms is not None else None,
                "senders": list(self.senders) if self.senders is not None else None,
                "after": _spec_key(self.after_spec),
                "before": _spec_key(self.before_spec),
                "sort": self.sort,
            }
        )


def _spec_key(spec: times.TimeSpec | None) -> Any:
    if spec is None:
        return None
    return spec.absolute_ms if spec.absolute_ms is not None else times.spec_text(spec)


def _parse_operators(distinct: tuple[str, ...]) -> tuple[list[query_syntax.ParsedText], tuple[str, ...]]:
    parsed: list[query_syntax.ParsedText] = []
    for position, text in enumerate(distinct):
        try:
            parsed.append(query_syntax.parse_text(text))
        except query_syntax.SyntaxProblem as exc:
            raise QueryError("texts", f"texts[{position}]: {exc.message}") from None
    terms = tuple(dict.fromkeys(p.words for p in parsed if p.words.strip()))
    return parsed, terms


def _merged(given: tuple[str, ...] | None, typed: list[str]) -> tuple[str, ...] | None:
    """A filter flag and the same operator typed in a text: one list, any of them matches."""
    if not typed:
        return given
    return tuple(dict.fromkeys([*(given or ()), *typed]))


def make_query(
    texts: Any = (),
    *,
    rooms: Any = None,
    senders: Any = None,
    after: Any = None,
    before: Any = None,
    top_k: Any = None,
    cursor: Any = None,
    sort: Any = None,
    now_ms: int | None = None,
) -> Query:
    """Validate every field of a search/listing request; the first bad field raises. Relative
    times resolve at ``now_ms`` (default: now)."""
    distinct = validate_texts(list(texts) if isinstance(texts, tuple) else texts)
    parsed, terms = _parse_operators(distinct)
    if not terms and any(p.excluded for p in parsed):
        raise QueryError("texts", "an exclusion (-word) needs words to search for beside it")
    after_spec = parse_time_spec(after, "after")
    before_spec = parse_time_spec(before, "before")
    sort_value = validate_sort(sort, bool(terms))
    _check_cursor_form(cursor, "search or listing")
    rooms_asked = validate_rooms(rooms)
    senders_asked = validate_senders(senders)
    query = Query(
        texts=distinct,
        rooms=_merged(rooms_asked, [r for p in parsed for r in p.rooms]),
        senders=_merged(senders_asked, [s for p in parsed for s in p.senders]),
        top_k=validate_top_k(top_k),
        cursor=cursor,
        sort=sort_value,
        terms=terms,
        phrases=tuple(dict.fromkeys(ph for p in parsed for ph in p.phrases)),
        excluded=tuple(dict.fromkeys(ex for p in parsed for ex in p.excluded)),
        after_spec=after_spec,
        before_spec=before_spec,
        sort_given=sort is not None,
    ).at(int(time.time() * 1000) if now_ms is None else now_ms)
    if query.after_ms is not None and query.before_ms is not None and query.after_ms > query.before_ms:
        raise QueryError("after", "is later than before")
    return query


def _check_cursor_form(cursor: Any, issuer: str) -> None:
    """A cursor that cannot be a token is refused here, where the CLI checks too; only the reader
    that sealed a token can open it (``_position_of_cursor``)."""
    if cursor is None:
        return
    if not isinstance(cursor, str) or not cursor:
        raise QueryError("cursor", f"must be the opaque string a previous {issuer} returned")
    try:
        cursors.check_form(cursor)
    except cursors.CursorError as exc:
        raise QueryError("cursor", exc.message, code=BAD_CURSOR) from None


def canonical_query(query: Query) -> bytes:
    """The bytes the audit digest is taken over: texts (distinct, in order) and top_k."""
    return json.dumps(
        {"texts": list(query.texts), "top_k": query.top_k},
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
    ).encode("utf-8")


def _index_filter(index: IndexReader, query: Query) -> SearchFilter:
    """``resolve_filter`` against ``index``, which is asked for its room directory only when a
    room is named by alias (room ids need none)."""
    names_an_alias = query.rooms is not None and any(not room.startswith("!") for room in query.rooms)
    return resolve_filter(query, index.room_directory() if names_an_alias else {})


def resolve_filter(query: Query, directory: Mapping[str, RoomEntry]) -> SearchFilter:
    """The eligibility every leg gets. Rooms resolve by any name (``daemon.reader.rooms``); an
    alias no room answers to resolves to no room; if every named room resolves to nothing the
    filter matches nothing (``room_ids=()``), never everything. A sender the index does not hold
    simply matches no window."""
    room_ids = resolve_rooms(query.rooms, directory) if query.rooms is not None else None
    return SearchFilter(
        room_ids=room_ids,
        senders=query.senders,
        after_ms=query.after_ms,
        before_ms=query.before_ms,
    )


# ---------------------------------------------------------------------------------------------
# Fusion


@dataclass(slots=True)
class FusedHit:
    point_id: str
    score: float
    window: StoredWindow
    legs: set[str] = field(default_factory=set)
    best_rank: int = 0
    first_list: int = 0
    ranks: dict[int, int] = field(default_factory=dict)  # list (text) index -> 1-based rank there
    # Each message's dense similarity, the best over the texts whose lists held the window with
    # one (``ScoredWindow.message_scores``); empty when no list said.
    message_scores: tuple[float, ...] = ()
    # list (text) index -> the index's score for the window in that text's list, and the raw score
    # each leg gave it there: the audit line's score components.
    components: dict[int, tuple[float, tuple[tuple[str, float], ...]]] = field(default_factory=dict)


def fuse(ranked_lists: Sequence[Sequence[ScoredWindow]], top_k: int | None) -> list[FusedHit]:
    """Reciprocal rank fusion, ``sum 1/(RRF_K + rank)`` over the lists, 1-based ranks, one entry
    per window id. Ties break by the better single rank, then by the earlier text, then by id, so
    the order is total and repeatable."""
    fused: dict[str, FusedHit] = {}
    for list_index, ranked in enumerate(ranked_lists):
        seen_here: set[str] = set()
        rank = 0
        for scored in ranked:
            if scored.point_id in seen_here:
                continue  # a window counts once per list, at its best rank
            seen_here.add(scored.point_id)
            rank += 1
            hit = fused.get(scored.point_id)
            if hit is None:
                hit = fused[scored.point_id] = FusedHit(
                    scored.point_id, 0.0, scored.window, best_rank=rank, first_list=list_index
                )
            hit.score += 1.0 / (RRF_K + rank)
            hit.ranks[list_index] = rank
            hit.components[list_index] = (scored.score, scored.leg_scores)
            hit.legs.update(scored.legs)
            hit.best_rank = min(hit.best_rank, rank)
            if scored.message_scores and len(scored.message_scores) == len(hit.window.messages):
                old = hit.message_scores or scored.message_scores
                hit.message_scores = tuple(max(a, b) for a, b in zip(old, scored.message_scores))
    ordered = sorted(fused.values(), key=lambda h: (-h.score, h.best_rank, h.first_list, h.point_id))
    return ordered if top_k is None else ordered[:top_k]


# Query-adaptive weights (``leg_weights``): a text that is mostly identifiers (error codes, paths,
# snake_case, camelCase, ``call()``) is what BM25 is for, and plain language is what the dense
# leg is for, so the leg that fits the text counts double. Chosen on the dev queries
# (bench/results.md, "Query-adaptive fusion"): more first places and paraphrases, exact matches
# kept; a fixed 1:2 loses exact matches, a fixed 2:1 paraphrases.
LEG_WEIGHTS_EQUAL = {"dense": 1.0, "lexical": 1.0}
LEG_WEIGHTS_IDENTIFIERS = {"dense": 1.0, "lexical": 2.0}
LEG_WEIGHTS_LANGUAGE = {"dense": 2.0, "lexical": 1.0}
# A token that looks like an identifier: word parts joined by identifier punctuation
# (payment_intent, smb.conf, a::b, dist-upgrade, 16.04), a case join (redirectToCheckout), a
# letter/digit join (E0463, req_123), a leading path or sigil, or code brackets and quotes.
_IDENTIFIER_TOKEN = re.compile(
    r"[A-Za-z0-9][._/:\\-]+[A-Za-z0-9]|[a-z][A-Z]|[A-Za-z][0-9]|[0-9][A-Za-z]|^[/~$#]|[()\[\]<>{}`=]"
)
# At least this share of a text's tokens must look like identifiers for the lexical-heavy weights.
IDENTIFIER_SHARE = 0.5
# A plain-language text of this many tokens or more (a question told as a story: who had what
# problem and what they were told) weighs its legs equally: a single sentence vector of so many
# words drifts from any one chat line, while the rare words it names still find the window.
# Chosen on the tune halves of both corpora's outside query sets (bench/results.md): more first
# places on both, recall@5 and every kind kept.
LONG_TEXT_TOKENS = 20


def leg_weights(text: str) -> dict[str, float]:
    """The fusion weights for one query text: ``LEG_WEIGHTS_IDENTIFIERS`` when at least
    ``IDENTIFIER_SHARE`` of its whitespace tokens look like identifiers, else
    ``LEG_WEIGHTS_LANGUAGE``, or ``LEG_WEIGHTS_EQUAL`` for one of ``LONG_TEXT_TOKENS`` or more."""
    tokens = [t.rstrip(".,;:!?") for t in text.split()]
    tokens = [t for t in tokens if t]
    if not tokens:
        return dict(LEG_WEIGHTS_EQUAL)
    shaped = sum(1 for t in tokens if _IDENTIFIER_TOKEN.search(t))
    if shaped >= IDENTIFIER_SHARE * len(tokens):
        return dict(LEG_WEIGHTS_IDENTIFIERS)
    return dict(LEG_WEIGHTS_EQUAL if len(tokens) >= LONG_TEXT_TOKENS else LEG_WEIGHTS_LANGUAGE)


def leg_limit(top_k: int, n_texts: int) -> int:
    return top_k if n_texts <= 1 else max(top_k, MULTI_TEXT_LEG_LIMIT)


# A text typed as it was said: among a text's first ``VERBATIM_DEPTH`` windows, those with a
# message holding the text verbatim (case and runs of white space folded; punctuation kept, so
# ``update_active_desktop()`` is not ``update_active_desktop ?`` and ``apt-get -s dist-upgrade``
# is not ``apt-get dist-upgrade``) go first, in their order. Both legs score words, not the
# string: a window that quotes the exact error or command ties with one that holds its words
# apart. Chosen on the dev queries (bench/results.md): exact queries move up, none down, and
# recall@5 stays equal.
VERBATIM_DEPTH = 10


def wants_verbatim(text: str) -> bool:
    """Whether ``text`` is specific enough for its verbatim holders to go first: two words or
    more, or one identifier-shaped token (a lone plain word is what BM25 already ranks by)."""
    tokens = text.split()
    return len(tokens) >= 2 or (len(tokens) == 1 and _IDENTIFIER_TOKEN.search(tokens[0]) is not None)


def verbatim_needle(text: str) -> str | None:
    """What a message must hold for a window to hold ``text`` verbatim (the text casefolded, its
    white space folded to single spaces); None when the text does not want it (``wants_verbatim``)."""
    return " ".join(text.casefold().split()) if wants_verbatim(text) else None


def holds_verbatim(bodies: Iterable[str], needle: str) -> bool:
    """Whether one of ``bodies`` holds ``needle`` once casefolded and its white space folded."""
    for body in bodies:
        body = body.casefold()
        if needle in body:
            return True
        # Folding the body's white space costs a split and a join: only a body with a run of it
        # (a line break, a tab, two spaces) can hold the needle once folded and not before.
        if ("  " in body or "\n" in body or "\t" in body or "\r" in body) and needle in " ".join(body.split()):
            return True
    return False


def verbatim_first(ranked: Sequence[ScoredWindow], text: str) -> list[ScoredWindow]:
    """``ranked`` with the windows among its first ``VERBATIM_DEPTH`` that hold ``text``
    verbatim moved to the front, in their order; the rest keep theirs."""
    return _holders_first(ranked, verbatim_needle(text))


def _holders_first(ranked: Sequence[ScoredWindow], needle: str | None) -> list[ScoredWindow]:
    ranked = list(ranked)
    if needle is None:
        return ranked
    head = ranked[:VERBATIM_DEPTH]
    holding = [scored for scored in head if holds_verbatim((m.body for m in scored.window.messages), needle)]
    if not holding or len(holding) == len(head):
        return ranked
    kept = {id(scored) for scored in holding}
    return holding + [scored for scored in head if id(scored) not in kept] + ranked[VERBATIM_DEPTH:]


# No padding: a candidate that holds none of the query's words and whose best message is far less
# similar than the best candidate's is not shown just to fill ``top_k``: an identifier that few
# windows hold would otherwise come back with the nearest unrelated chatter. "Far" is more than
# ``FLOOR_MARGIN`` under the best similarity among the candidates. Chosen on the dev and tune
# queries (bench/results.md, "No padding"): a margin under the best left out fewer relevant
# windows than a share of it or a fixed minimum for as many hits left out, and no relevant
# window at 0.15.
FLOOR_MARGIN = 0.15


def unrelated(
    candidates: Sequence[tuple[Sequence[str], float | None]], terms: Iterable[str], margin: float = FLOOR_MARGIN
) -> list[bool]:
    """Per candidate, given as (its messages' bodies, its similarity as ``explain.similarity_of``
    gives it), whether the floor leaves it out: it holds none of the words of ``terms`` (the query
    texts without their operators) and its similarity is more than ``margin`` under the best
    candidate's. A candidate without a similarity (BM25 alone, an index that gave none) is never
    left out: nothing says it is far."""
    words = words_of(" ".join(terms))
    best = max((sim for _, sim in candidates if sim is not None), default=None)
    if best is None:
        return [False] * len(candidates)
    return [sim is not None and sim < best - margin and not holds_a_word(bodies, words) for bodies, sim in candidates]


# ---------------------------------------------------------------------------------------------
# Output shapes


def _message_json(message: WindowMessage) -> dict[str, Any]:
    """A message as replies carry it; ``reply_to`` is the target's id until ``attach_context``."""
    return {
        "event_id": message.event_id,
        "sender": message.sender,
        "display_name": message.display_name,  # citations.cite falls back to the localpart
        "ts": message.ts,
        "body": message.body,
        "reply_to": message.reply_to,
    }


def hit_json(window: StoredWindow, score: float | None, legs: Iterable[str]) -> dict[str, Any]:
    return {
        "chunk_id": window.chunk_id,
        "room_id": window.room_id,
        "room_alias": window.room_alias,
        "first_event_id": window.first_event_id,
        "last_event_id": window.last_event_id,
        "score": score,
        "messages": [_message_json(m) for m in window.messages],
        "legs": sorted(legs),
        "thread_root": window.thread_root,
    }


# A replied-to message or a thread root is shown on one line: its body, whitespace folded, cut here.
CONTEXT_BODY_CHARS = 120


def context_line(event_id: str, message: WindowMessage | None) -> dict[str, Any]:
    """One line of context: the message ``event_id`` names, from the index; ``sender``, ``ts`` and
    ``body`` are None when the index holds no live message with that id (redacted, purged, not
    text, or in a room the index does not hold)."""
    if message is None:
        return {"event_id": event_id, "sender": None, "ts": None, "body": None}
    body = " ".join(message.body.split())
    if len(body) > CONTEXT_BODY_CHARS:
        body = body[: CONTEXT_BODY_CHARS - 1] + "\u2026"
    return {"event_id": event_id, "sender": message.sender, "ts": message.ts, "body": body}


def attach_context(index: IndexReader, holders: Sequence[dict[str, Any]]) -> None:
    """Turn the ids in ``reply_to`` (of each message) and ``thread_root`` (of each holder: a hit,
    a window or thread reply, each with its ``room_id``) into ``context_line`` objects, looked up
    in one batch per room, wherever in the room the target sits (another window, another page of
    history); never in another room, whatever id a sender wrote. An index without
    ``messages_by_id`` (an older adapter) gives id-only lines, never a guess."""
    pending: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for holder in holders:
        room = str(holder.get("room_id") or "")
        if isinstance(holder.get("thread_root"), str):
            pending.setdefault(room, []).append((holder, "thread_root"))
        for message in holder.get("messages") or ():
            if isinstance(message.get("reply_to"), str):
                pending.setdefault(room, []).append((message, "reply_to"))
    lookup = getattr(index, "messages_by_id", None)
    for room, targets in pending.items():
        found = lookup([owner[key] for owner, key in targets], room or None) if callable(lookup) else {}
        for owner, key in targets:
            owner[key] = context_line(owner[key], found.get(owner[key]))


# The rules that keep a candidate out of a page, in the order they are applied: the filter
# (rooms, senders, times) inside the index, a phrase not held, an excluded word held, the floor
# (``unrelated``), and depth (ranked outside this page: below it, or on an earlier page).
EXCLUSION_RULES = ("eligibility", "phrase", "word", "floor", "depth")


def exclusions(
    eligibility: int | None, phrase: int = 0, word: int = 0, floor: int = 0, depth: int = 0
) -> dict[str, int | None]:
    return dict(zip(EXCLUSION_RULES, (eligibility, phrase, word, floor, depth)))


@dataclass(frozen=True, slots=True)
class SearchResult:
    """``hits`` and friends are the reply. ``attribution`` (per returned window: its event ids,
    its rank in each text's list, the legs that matched, its score components) and ``excluded``
    (per rule of ``EXCLUSION_RULES``, how many windows the first rule that removed each kept out;
    eligibility None where the index cannot count) are for the audit line only, as is
    ``candidates``, how many distinct windows the legs ranked."""

    hits: list[dict[str, Any]]
    next: str | None = None
    degraded: str | None = None
    attribution: tuple[dict[str, Any], ...] = ()
    excluded: dict[str, int | None] = field(default_factory=lambda: exclusions(0))
    candidates: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"hits": self.hits, "next": self.next, "degraded": self.degraded}


def attribution_of(hit: dict[str, Any], ranks: dict[str, int]) -> dict[str, Any]:
    """What the audit line records of one returned window: never a body or a query text."""
    return {
        "chunk_id": hit.get("chunk_id"),
        "event_ids": [m.get("event_id") for m in hit.get("messages") or ()],
        "ranks": ranks,
        "legs": list(hit.get("legs") or ()),
    }


def excluded_by_eligibility(index: IndexReader, flt: SearchFilter) -> int | None:
    """How many searchable windows ``flt`` kept out: the index's count without a filter minus its
    count with it. None where the index has no ``count_eligible`` (the count is then unknown,
    never guessed). An unfiltered request excludes nothing and costs no count."""
    if flt == SearchFilter():
        return 0
    count = getattr(index, "count_eligible", None)
    if not callable(count):
        return None
    total = int(count(SearchFilter()))
    return total - (0 if flt.room_ids == () else int(count(flt)))


# ---------------------------------------------------------------------------------------------
# Continuation (the token codec is daemon.reader.cursors)


def _position_of_cursor(query: Query) -> tuple[Query, cursors.ListingPosition | cursors.RankedPosition | None]:
    """The query as its first page saw it (relative times at that page's clock) and where to
    continue; ``(query, None)`` for a first page."""
    if query.cursor is None:
        return query, None
    try:
        position = cursors.decode(query.cursor, query.digest())
    except cursors.CursorError as exc:
        raise QueryError("cursor", exc.message, code=exc.code) from None
    listing = not query.terms
    if listing != isinstance(position, cursors.ListingPosition):
        raise QueryError("cursor", "was issued for a different request (other texts, filters or sort)", code=BAD_CURSOR)
    if isinstance(position, cursors.RankedPosition) and not _reachable(position, query.sort):
        raise QueryError("cursor", cursors.NOT_A_TOKEN, code=BAD_CURSOR)
    return query.at(position.now_ms), position


def _reachable(position: cursors.RankedPosition, sort: str) -> bool:
    """Whether a page of ``sort`` can have issued ``position``: a relevance page continues after a
    head of one search's ``top_k`` within ``MAX_RANKED``; a time-sorted page has no head and walks
    ``SORTED_POOL`` windows. Sealed tokens always are; this bounds the work a page can ask for even
    if a key were ever to leak."""
    if sort == SORT_RELEVANCE:
        return 1 <= position.head <= min(TOP_K_MAX, position.offset) and position.offset < MAX_RANKED
    return position.head == 0 and position.offset < SORTED_POOL


def index_version(index: IndexReader) -> str:
    """What a ranked cursor is bound to: the published generation, or where the index has none (a
    Qdrant server, written in place) a digest of every room's ingest cursor, which the refresher
    advances after each room's writes and drops on a purge or rebuild."""
    generation = getattr(index, "current_generation", None)
    if generation is not None:
        return f"g{generation}"
    read_cursors = getattr(index, "cursors", None)
    if not callable(read_cursors):
        return "unversioned"
    state = sorted(
        (room, c.end_token, c.last_event_id, c.open_window_id or "", c.updated_ms) for room, c in read_cursors().items()
    )
    return "c" + cursors.request_digest({"rooms": state})


# ---------------------------------------------------------------------------------------------
# Operations over the ports


def execute_listing(index: IndexReader, query: Query) -> SearchResult:
    """Windows oldest first (or newest first) by ``(ts_start, chunk_id)``, one page of ``top_k``.
    The key is total across rooms, so following ``next`` visits every window exactly once, in
    either direction."""
    query, position = _position_of_cursor(query)
    assert position is None or isinstance(position, cursors.ListingPosition)
    descending = query.sort == SORT_NEWEST
    after = (position.ts, position.chunk_id) if position is not None else None
    flt = _index_filter(index, query)
    if flt.room_ids == ():
        return SearchResult(hits=[], excluded=exclusions(excluded_by_eligibility(index, flt)))
    if descending:
        rows = index.listing(flt, after, query.top_k + 1, descending=True)
    else:
        rows = index.listing(flt, after, query.top_k + 1)  # the port's original call, for older fakes
    page = rows[: query.top_k]
    next_token = None
    if len(rows) > query.top_k and page:
        # The key of the listing's order: newest first goes by each window's newest message.
        last_ts = page[-1].ts_end if descending else page[-1].ts_start
        next_token = cursors.encode_listing(
            cursors.ListingPosition(last_ts, page[-1].chunk_id, query.now_ms), query.digest()
        )
    hits = [hit_json(p, None, ()) for p in page]
    attach_context(index, hits)
    return SearchResult(
        hits=hits,
        next=next_token,
        attribution=tuple(attribution_of(h, {"list": n}) for n, h in enumerate(hits, 1)),
        excluded=exclusions(excluded_by_eligibility(index, flt)),
    )


class EmbedderUnavailable(OperationalError, RuntimeError):
    """Neither a dense nor a lexical query could be made: the search fails rather than widen."""


@dataclass(slots=True)
class _Ranker:
    """One request's query vectors, ranked at whatever depth a page needs. Each ranking is a
    pure function of (vectors, filter, depth, index generation), so a later page repeats it."""

    index: IndexReader
    query: Query
    flt: SearchFilter
    sparse: list[Any]
    dense: list[list[float]] | None
    degraded: str | None = None
    # Every candidate any ranking of this request fused (point id -> the first rule that removed
    # it, None when it met them all): the audit line's candidate and exclusion counts.
    seen: dict[str, str | None] = field(default_factory=dict)

    def rank(self, leg_limit_: int) -> list[FusedHit]:
        """Every text's leg at ``leg_limit_``, fused (RRF), the phrase/exclusion test applied,
        untruncated: the windows in rank order."""
        if self.degraded is None and self.dense is not None:
            try:
                lists = []
                for v, s, text in zip(self.dense, self.sparse, self.query.terms):
                    self._release_pages_before_leg()
                    lists.append(
                        _leg_holders_first(
                            partial(self.index.hybrid, v, s, self.flt, weights=leg_weights(text)),
                            text,
                            leg_limit_,
                        )
                    )
                return self._kept(fuse(lists, None))
            except Exception:  # noqa: BLE001 - degrade to the lexical leg, still filtered
                self.degraded = DEGRADED_LEXICAL_ONLY
        lists = []
        for s, text in zip(self.sparse, self.query.terms):
            self._release_pages_before_leg()
            lists.append(_leg_holders_first(partial(self.index.lexical, s, self.flt), text, leg_limit_))
        return self._kept(fuse(lists, None))

    def _kept(self, fused: list[FusedHit]) -> list[FusedHit]:
        """The fused candidates that meet the phrase and exclusion operators and the floor
        (``unrelated``, over those that meet the operators), each one's fate noted."""
        rules = {hit.point_id: _failed_rule(self.query, hit.window) for hit in fused}
        met = [hit for hit in fused if rules[hit.point_id] is None]
        left_out = unrelated(
            [
                ([m.body for m in hit.window.messages], similarity_of(hit.message_scores, len(hit.window.messages)))
                for hit in met
            ],
            self.query.terms,
        )
        for hit, out in zip(met, left_out):
            if out:
                rules[hit.point_id] = "floor"
        for point_id, rule in rules.items():
            self.seen.setdefault(point_id, rule)
        return [hit for hit in fused if rules[hit.point_id] is None]

    def excluded(self, eligibility: int | None, shown: Iterable[str]) -> dict[str, int | None]:
        """Per rule, the candidates it removed first; ``depth``: those that met every rule but are
        not among ``shown`` (the page's windows)."""
        rules = list(self.seen.values())
        met = {pid for pid, rule in self.seen.items() if rule is None}
        return exclusions(
            eligibility, rules.count("phrase"), rules.count("word"), rules.count("floor"), len(met - set(shown))
        )

    def _release_pages_before_leg(self) -> None:
        """Before each text's leg of a request of several, drop the pages mapped so far (an index
        with ``release_pages``: the Edge copy). The reader service drops them after a reply once
        they pass its budget; without this a request of eight texts held eight searches' pages
        until then (peak 562 MB at 100k windows against 386), and began on top of what the
        searches before it had left within that budget. A one-text request, the usual one, waits
        for no release."""
        several = len(self.query.terms) > 1
        release = getattr(self.index, "release_pages", None) if several else None
        if callable(release):
            release()

    def depth(self, top_k: int) -> int:
        """How many candidates each leg ranks for a result of ``top_k``."""
        return CONSTRAINED_LEG_LIMIT if self.query.constrained else leg_limit(top_k, len(self.query.terms))


def _leg_holders_first(
    search: Callable[[int], Sequence[ScoredWindow]], text: str, leg_limit_: int
) -> list[ScoredWindow]:
    """One text's leg, ``search(depth)``, with its verbatim holders first, cut to ``leg_limit_``.
    The depth is ``leg_limit_``, or ``VERBATIM_DEPTH`` when that is deeper and the text has a
    verbatim needle, so that a search of ``top_k`` 5 shows what the first five of ``top_k`` 10
    would."""
    needle = verbatim_needle(text)
    depth = leg_limit_ if needle is None else max(leg_limit_, VERBATIM_DEPTH)
    return _holders_first(search(depth), needle)[:leg_limit_]


def _failed_rule(query: Query, window: StoredWindow) -> str | None:
    """The first operator ``window`` fails: ``phrase`` (a phrase no message holds), ``word`` (a
    message holds an excluded term), or None when it meets them all."""
    if not query.constrained:
        return None
    bodies = [m.body for m in window.messages]
    if not all(query_syntax.holds_phrase(bodies, p) for p in query.phrases):
        return "phrase"
    if any(query_syntax.holds_term(bodies, t) for t in query.excluded):
        return "word"
    return None


def _time_key(sort: str) -> Callable[[FusedHit], tuple[int, str]]:
    """A hit's place in a time-sorted search: newest first by its newest message (a reply added
    to a long conversation makes it new), oldest first by its oldest."""
    if sort == SORT_NEWEST:
        return lambda h: (h.window.ts_end, h.point_id)
    return lambda h: (h.window.ts_start, h.point_id)


def _ranked_sequence(ranker: _Ranker, head: int, wanted: int) -> list[FusedHit]:
    """The request's ranked sequence, at least ``wanted`` long where it can be: its first page
    (``head`` windows, ranked exactly as an unpaged search of ``top_k = head`` ranks them), then
    the rest of a ranking at ``MAX_RANKED`` depth without the windows already shown. The same
    ``head`` always gives the same sequence in one generation, so pages neither repeat nor skip."""
    sequence = ranker.rank(ranker.depth(head))[:head]
    if wanted > len(sequence) and len(sequence) == head:
        shown = {h.point_id for h in sequence}
        sequence += [h for h in ranker.rank(ranker.depth(MAX_RANKED))[:MAX_RANKED] if h.point_id not in shown]
    return sequence[:MAX_RANKED]


def execute_search(index: IndexReader, embedder: Embedder | None, query: Query) -> SearchResult:
    """One hybrid leg per distinct text (dense and BM25 fused by the index), RRF across texts.

    The dense vectors come from one ``embed`` batch. If the embedder is missing or fails, or the
    hybrid query fails, every text falls back to the lexical leg alone, under the same filter,
    and the result says ``degraded: lexical_only``. Never an unfiltered answer.

    Paging: ``relevance`` walks the ranked sequence (``_ranked_sequence``) up to ``MAX_RANKED``
    windows; ``newest`` / ``oldest`` sort the best ``SORTED_POOL`` of the ranking by time and walk
    those. A cursor is bound to the index version; another version is refused (stale_cursor)."""
    if not query.terms:
        return execute_listing(index, query)
    query, position = _position_of_cursor(query)
    assert position is None or isinstance(position, cursors.RankedPosition)
    version = index_version(index) if position is not None else None
    if position is not None and position.version != version:
        raise QueryError("cursor", "the index changed since this search's first page: search again", code=STALE_CURSOR)
    flt = _index_filter(index, query)
    if flt.room_ids == ():
        return SearchResult(hits=[], excluded=exclusions(excluded_by_eligibility(index, flt)))
    if embedder is None:
        raise EmbedderUnavailable("no embedder loaded")
    try:
        sparse = [embedder.sparse_query(text) for text in query.terms]
    except Exception as exc:  # the lexical leg is all that is left; say why
        raise EmbedderUnavailable(f"sparse query failed: {type(exc).__name__}") from exc
    ranker = _Ranker(index, query, flt, sparse, None)
    if position is not None and position.lexical_only:
        ranker.degraded = DEGRADED_LEXICAL_ONLY  # the first page was lexical: so is every later one
    else:
        try:
            ranker.dense = embedder.embed(list(query.terms))
            if len(ranker.dense) != len(query.terms):
                raise RuntimeError("embedder returned a different number of vectors")
        except Exception:  # noqa: BLE001 - degrade to the lexical leg, still filtered
            ranker.degraded = DEGRADED_LEXICAL_ONLY
    offset = position.offset if position is not None else 0
    end = offset + query.top_k
    if query.sort == SORT_RELEVANCE:
        head = position.head if position is not None else query.top_k
        # A first page ranks its head alone (what an unpaged search costs) and offers a next page
        # when the head is full; a later page ranks one more than it shows, to know if more follow.
        sequence = _ranked_sequence(ranker, head, end if position is None else end + 1)
        more = len(sequence) > end or (position is None and len(sequence) == head and head < MAX_RANKED)
    else:
        sequence = ranker.rank(ranker.depth(SORTED_POOL))[:SORTED_POOL]
        sequence.sort(key=_time_key(query.sort), reverse=query.sort == SORT_NEWEST)
        head = 0
        more = len(sequence) > end
    if position is not None and not position.lexical_only and ranker.degraded:
        raise QueryError(
            "cursor", "the first page was ranked with the embedder, which failed now: search again", code=STALE_CURSOR
        )
    fused = sequence[offset:end]
    next_token = None
    if more and end < MAX_RANKED:
        next_token = cursors.encode_ranked(
            cursors.RankedPosition(
                end, head, version or index_version(index), ranker.degraded is not None, query.now_ms
            ),
            query.digest(),
        )
    hits = [hit_json(h.window, h.score, h.legs) for h in fused]
    attach_context(index, hits)
    lexical_counts = attribute(hits, sparse, [h.message_scores for h in fused], embedder, senders=query.senders)
    explain(hits, [h.message_scores for h in fused], query.terms)
    return SearchResult(
        hits=hits,
        next=next_token,
        degraded=ranker.degraded,
        # Each text is one hybrid leg (dense and BM25 fused by the index), so a rank is the
        # window's place in that text's fused list; ``legs`` says which of dense/BM25 matched.
        attribution=tuple(
            {
                **attribution_of(hit, {f"text{i + 1}": rank for i, rank in sorted(h.ranks.items())}),
                **score_components(hit, h, counts),
            }
            for hit, h, counts in zip(hits, fused, lexical_counts)
        ),
        excluded=ranker.excluded(excluded_by_eligibility(index, flt), (h.point_id for h in fused)),
        candidates=len(ranker.seen),
    )


def score_components(hit: dict[str, Any], fused: FusedHit, lexical_counts: Sequence[int] | None) -> dict[str, Any]:
    """What the audit line records of a returned window's scores: ``fused`` (the RRF score the
    reply carries), per text the index's score and each leg's raw score there, and per message
    its dense similarity (the best over the texts), the query terms it holds (the lexical leg's
    own measure at message level) and the window's fused score."""
    texts = {
        f"text{i + 1}": {"score": score, **{leg: raw for leg, raw in legs}}
        for i, (score, legs) in sorted(fused.components.items())
    }
    sims = fused.message_scores if len(fused.message_scores) == len(hit["messages"]) else ()
    messages = [
        {
            "event_id": message.get("event_id"),
            "dense": sims[n] if sims else None,
            "lexical": lexical_counts[n] if lexical_counts else None,
            "fused": fused.score,
        }
        for n, message in enumerate(hit["messages"])
    ]
    return {"scores": {"fused": fused.score, "texts": texts}, "messages": messages}


# ---------------------------------------------------------------------------------------------
# Message-level attribution


def _message_line(message: dict[str, Any]) -> str:
    """A message as the index analysed it inside its window: ``<localpart>: <body>``."""
    sender = str(message.get("sender") or "")
    if sender.startswith("@") and ":" in sender:
        sender = sender[1 : sender.index(":")]
    return f"{sender}: {message.get('body') or ''}"


def attribute(
    hits: list[dict[str, Any]],
    sparse: Sequence[Any],
    message_scores: Sequence[Sequence[float]],
    embedder: Embedder,
    senders: Sequence[str] | None = None,
) -> list[list[int] | None]:
    """Say, per message of each hit, which legs it matched on: ``matched`` lists ``"lexical"``
    for the message(s) of a lexically found hit holding the most distinct query terms (at least
    one), and ``"dense"`` for the message of a densely found hit nearest in meaning to a query
    text (one per hit): the message whose stored vector the dense leg ranked the window by
    (``message_scores``, per hit, from the index; nothing is embedded again). The reader
    computes it, so a Persona can cite the message rather than the window. Attribution never
    changes the ranking; where the index gave no per-message scores the dense mark is left out,
    not guessed. With a sender filter (``senders``) only those senders' messages are marked: the
    filter chose the window for them, and the match a Persona cites must be theirs. Returns, per
    hit, how many distinct query terms each message holds, whoever sent it (None for a hit the
    lexical leg did not find)."""
    counted: dict[int, list[int]] = {}
    for hit in hits:
        for message in hit["messages"]:
            message["matched"] = []
    terms = [set(vector.indices) for vector in sparse]
    lexical_hits = [hit for hit in hits if "lexical" in hit.get("legs", ()) and any(terms)]
    if lexical_hits:
        lines = [_message_line(m) for hit in lexical_hits for m in hit["messages"]]
        vectors = iter(embedder.sparse(lines))
        for hit in lexical_hits:
            held = [set(next(vectors).indices) for _ in hit["messages"]]
            counted[id(hit)] = [max(len(t & words) for t in terms) for words in held]
            counts = [count if _may_mark(m, senders) else 0 for m, count in zip(hit["messages"], counted[id(hit)])]
            best = max(counts, default=0)
            for message, count in zip(hit["messages"], counts):
                if best and count == best:
                    message["matched"].append("lexical")
    for hit, sims in zip(hits, message_scores):
        if "dense" in hit.get("legs", ()) and sims and len(sims) == len(hit["messages"]):
            allowed = [i for i, m in enumerate(hit["messages"]) if _may_mark(m, senders)]
            if allowed:
                best = max(allowed, key=lambda i: sims[i])
                hit["messages"][best]["matched"].insert(0, "dense")
    return [counted.get(id(hit)) for hit in hits]


def _may_mark(message: dict[str, Any], senders: Sequence[str] | None) -> bool:
    return not senders or message.get("sender") in senders


@dataclass(frozen=True, slots=True)
class WindowQuery:
    event_id: str
    before: int = WINDOW_CONTEXT_DEFAULT
    after: int = WINDOW_CONTEXT_DEFAULT


def make_window_query(event_id: Any, before: Any = None, after: Any = None) -> WindowQuery:
    return WindowQuery(
        event_id=validate_event_id(event_id),
        before=validate_context(before, "before"),
        after=validate_context(after, "after"),
    )


def _window_messages(windows: Iterable[StoredWindow]) -> list[tuple[WindowMessage, str]]:
    """Flatten windows into (message, chunk_id) pairs; window order first so messages with equal
    timestamps keep their stream order."""
    ordered = sorted(windows, key=lambda w: (w.ts_start, w.chunk_id))
    pairs = [(m, w.chunk_id) for w in ordered for m in w.messages]
    pairs.sort(key=lambda pair: pair[0].ts or 0)  # stable: ties keep window order
    return pairs


def execute_window(index: IndexReader, query: WindowQuery) -> dict[str, Any]:
    """The cited message and up to ``before``/``after`` messages around it in the same room,
    across window boundaries, from the index alone. ``chunk_ids`` names the windows they came
    from (the audit line records them)."""
    window = index.window_of_event(query.event_id)
    cited = None
    if window is not None:
        cited = next((m for m in window.messages if m.event_id == query.event_id), None)
    if window is None or cited is None:
        raise QueryError("event_id", "the index holds no message with this id", not_found=True)
    room_id = window.room_id
    # One extra on each side: whether the index counts windows or messages, and whether it counts
    # the cited window as "before", this is always enough messages. The neighbours are those of
    # the message's own timeline: a thread reply's are its thread, a main message's the room's.
    around = index.neighbours(room_id, int(cited.ts), query.before + 1, query.after + 1, window.thread_root)
    rows = [window, *(row for row in around if row.room_id == room_id and row.thread_root == window.thread_root)]
    pairs: list[tuple[WindowMessage, str]] = []
    seen: set[str] = set()
    for message, chunk_id in _window_messages(rows):
        if message.event_id in seen:
            continue
        seen.add(message.event_id)
        pairs.append((message, chunk_id))
    position = next(i for i, (m, _) in enumerate(pairs) if m.event_id == query.event_id)
    chosen = pairs[max(0, position - query.before) : position + query.after + 1]
    chunk_ids = list(dict.fromkeys(chunk_id for _, chunk_id in chosen))
    result = {
        "room_id": room_id,
        "room_alias": window.room_alias,
        "event_id": query.event_id,
        "thread_root": window.thread_root,
        "messages": [_message_json(m) for m, _ in chosen],
        "chunk_ids": chunk_ids,
    }
    attach_context(index, [result])
    return result


# ---------------------------------------------------------------------------------------------
# Threads


@dataclass(frozen=True, slots=True)
class ThreadQuery:
    """A thread listing: ``event_id`` is the root or any message in the thread."""

    event_id: str
    top_k: int = TOP_K_DEFAULT
    cursor: str | None = None


def make_thread_query(event_id: Any, top_k: Any = None, cursor: Any = None) -> ThreadQuery:
    _check_cursor_form(cursor, "thread listing")
    return ThreadQuery(event_id=validate_event_id(event_id), top_k=validate_top_k(top_k), cursor=cursor)


def _thread_after(cursor: str | None, digest: str) -> tuple[int, str] | None:
    if cursor is None:
        return None
    try:
        position = cursors.decode(cursor, digest)
    except cursors.CursorError as exc:
        raise QueryError("cursor", exc.message, code=exc.code) from None
    if not isinstance(position, cursors.ListingPosition):
        raise QueryError("cursor", "was issued for a different request (other texts, filters or sort)", code=BAD_CURSOR)
    return position.ts, position.chunk_id


def execute_thread(index: IndexReader, query: ThreadQuery) -> dict[str, Any]:
    """One thread in stream order, from the index alone: its root (a main-timeline message, or
    None once redacted or never text) and a page of ``top_k`` of the thread's windows, their
    messages flattened. ``next`` continues after the page's last window by the same exactly-once
    ``(ts_start, chunk_id)`` key as a listing; a token of another thread is refused."""
    holder = index.window_of_event(query.event_id)
    root_id = holder.thread_root if holder is not None and holder.thread_root else query.event_id
    digest = cursors.request_digest({"thread": root_id})
    after = _thread_after(query.cursor, digest)
    root_window = holder if holder is not None and holder.thread_root is None else index.window_of_event(root_id)
    root = next((m for m in root_window.messages if m.event_id == root_id), None) if root_window else None
    # The thread's room: the root's, else the asked reply's, else (a root gone from the index,
    # asked by its id) the room of the thread's first window, the same on every page.
    first = root_window or holder
    if first is None:
        first = next(iter(index.thread_windows(root_id, None, 1)), None)
    if first is None:
        raise QueryError("event_id", "the index holds no thread and no message with this id", not_found=True)
    rows = index.thread_windows(root_id, after, query.top_k + 1, first.room_id)
    page = rows[: query.top_k]
    next_token = None
    if len(rows) > query.top_k and page:
        next_token = cursors.encode_listing(cursors.ListingPosition(page[-1].ts_start, page[-1].chunk_id, 0), digest)
    result = {
        "room_id": first.room_id,
        "room_alias": first.room_alias,
        "root_id": root_id,
        "root": _message_json(root) if root is not None else None,
        "messages": [_message_json(m) for w in page for m in w.messages],
        "next": next_token,
        "chunk_ids": [w.chunk_id for w in page],
    }
    root_holder = {"room_id": first.room_id, "messages": [result["root"]] if root is not None else []}
    attach_context(index, [result, root_holder])
    return result

"""Why a search hit matched, in terms a person (or an agent) reads and can threshold.

Owns: ``explain``, which sets on each hit of a ranked search ``matched_words`` (the query's words
its matched messages hold, as typed in the query, lowercased), ``similarity`` (the dense cosine of
its best message to the nearest query text, 0..1; null where no vector said) and ``relevance``
(0..1: the better of that similarity and the share of the query's words its best message holds).
The fused RRF ``score`` stays what ranks; it only orders and means nothing on its own (about
0.016 for a first place), which is why it is not what a caller should threshold.

Must not: change the ranking or which messages are marked, do I/O, or import beyond the standard
library (the reader's search module calls it on every ranked page).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

# Words too common to count as matched (the CLI's text marker uses the same idea).
_STOPWORDS = frozenset(
    "the and for are but not you all any can had her was one our out has him his how its may new now "
    "old see two way who did get got let say she too use this that with have from they will what when "
    "your been were which their there then them some would about into than could".split()
)
_WORD = re.compile(r"\w+")


def words_of(text: str) -> list[str]:
    """The words of ``text`` that can match: lowercased, at least two characters, not a stopword,
    in order, each once."""
    found = (w for w in _WORD.findall(text.casefold()) if len(w) >= 2 and w not in _STOPWORDS)
    return list(dict.fromkeys(found))


def similarity_of(message_scores: Sequence[float], n_messages: int) -> float | None:
    """A hit's ``similarity``: its best message's dense similarity, clipped to 0..1; None where
    the index gave no score for each of its ``n_messages`` messages."""
    if not message_scores or len(message_scores) != n_messages:
        return None
    return max(0.0, min(1.0, max(message_scores)))


def holds_a_word(bodies: Iterable[str], words: Iterable[str]) -> bool:
    """Whether one of ``bodies`` holds one of ``words`` (as ``words_of`` gives them) as a word."""
    wanted = set(words)
    return bool(wanted) and any(wanted & set(_WORD.findall(body.casefold())) for body in bodies)


def explain(hits: list[dict[str, Any]], message_scores: Sequence[Sequence[float]], terms: Iterable[str]) -> None:
    """Set ``matched_words``, ``similarity`` and ``relevance`` on each hit (see the module
    docstring). ``message_scores`` are each hit's per-message dense similarities, in message order
    (empty where the index gave none); ``terms`` are the query texts without their operators."""
    wanted = words_of(" ".join(terms))
    for hit, sims in zip(hits, message_scores):
        messages = hit.get("messages") or []
        marked = [m for m in messages if m.get("matched")] or messages
        held = [set(_WORD.findall(str(m.get("body") or "").casefold())) for m in messages]
        marked_words = set().union(*(set(_WORD.findall(str(m.get("body") or "").casefold())) for m in marked))
        hit["matched_words"] = [w for w in wanted if w in marked_words]
        similarity = similarity_of(sims, len(messages))
        hit["similarity"] = round(similarity, 3) if similarity is not None else None
        coverage = (
            max((sum(w in words for w in wanted) / len(wanted) for words in held), default=0.0) if wanted else 0.0
        )
        hit["relevance"] = round(max(similarity or 0.0, coverage), 3)

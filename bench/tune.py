"""The in-process tuning harness: window layouts, legs and fusions scored on the dev queries
without a homeserver, a refresher or a reader, so one variant costs seconds once its texts are
embedded.

Owns: building windows from the corpus the way ``chunker.fold`` lays them out (greedy: a new
window when the next ``<localpart>: <body>`` line would pass ``max_bytes`` or the gap passes
``max_gap``; optionally overlapping), an on-disk cache of dense vectors keyed by text
(``.cache/eval/vectors-<model>.npy`` + index), an in-memory BM25 that scores like the index
(qdrant_edge ``Bm25`` document weights times Qdrant's IDF), and ``Variant``: one choice of
layout, legs and fusion. ``python -m bench.tune [names...]`` prints dev figures per variant;
``--set irc1/independent`` (or ``irc2/independent``, on that corpus) the figures of an outside
set's ``tune`` half; ``--floor-sweep`` the reader's no-padding floor (``daemon.reader.search.
unrelated``) at other margins.

Must not: read held-out queries unless asked (``--split heldout`` is for the final report only,
never for choosing), or write anything outside ``.cache/eval/``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from bench.corpus import REPO, CorpusMessage, corpus_dir, load_messages, nick_localparts
from bench.eval import LabelledQuery
from bench.metrics import first_relevant_rank, summarise, table
from bench.querysets import OLD_CORPUS, OLD_SET, query_sets
from daemon.reader.explain import similarity_of
from daemon.reader.search import LEG_WEIGHTS_IDENTIFIERS, holds_verbatim, leg_weights, unrelated, verbatim_needle

CACHE = REPO / ".cache" / "eval"


# ---------------------------------------------------------------------------------------------
# Dense vectors, cached by text


class VectorCache:
    def __init__(self, embedder, path: Path = CACHE / "vectors-minilm") -> None:
        self.embedder = embedder
        self.path = path
        self.keys: dict[str, int] = {}
        self.rows: list[np.ndarray] = []
        if (path / "keys.txt").is_file():
            keys = (path / "keys.txt").read_text().split("\n")
            matrix = np.load(path / "vectors.npy")
            for i, key in enumerate(keys[: len(matrix)]):
                self.keys[key] = i
            self.rows = [matrix]
        self._flat: np.ndarray | None = None

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    def get(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if self.key(t) not in self.keys))
        if missing:
            started = time.monotonic()
            vectors = np.asarray(self.embedder.embed(missing), dtype=np.float32)
            print(f"embedded {len(missing)} texts in {time.monotonic() - started:.0f} s", file=sys.stderr)
            base = sum(len(r) for r in self.rows)
            for i, text in enumerate(missing):
                self.keys[self.key(text)] = base + i
            self.rows.append(vectors)
            self._flat = None
            self.save()
        flat = self.matrix()
        return flat[[self.keys[self.key(t)] for t in texts]]

    def matrix(self) -> np.ndarray:
        if self._flat is None:
            self._flat = np.concatenate(self.rows) if self.rows else np.zeros((0, 384), np.float32)
            self.rows = [self._flat]
        return self._flat

    def save(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        ordered = sorted(self.keys, key=self.keys.get)
        np.save(self.path / "vectors.npy", self.matrix())
        (self.path / "keys.txt").write_text("\n".join(ordered))


# ---------------------------------------------------------------------------------------------
# Lexical: BM25 as the index scores it


class Bm25Index:
    """Document weights from ``qdrant_edge.Bm25`` (what the refresher stores) times Qdrant's IDF
    modifier ``ln(1 + (N - n + 0.5) / (n + 0.5))``; a query term counts once."""

    def __init__(
        self, docs: Sequence[str], analyse: Callable[[str], str], avg_len: float = 0.0, b: float = -1, k: float = 0.0
    ) -> None:
        from qdrant_edge import Bm25, Bm25Config

        options = {"avg_len": avg_len} if avg_len else {}
        if b >= 0:
            options["b"] = b
        if k:
            options["k"] = k
        self._bm25 = Bm25(Bm25Config(**options)) if options else Bm25()
        self.analyse = analyse
        self.postings: dict[int, list[tuple[int, float]]] = {}
        for doc_id, text in enumerate(docs):
            vector = self._bm25.embed_document(analyse(text))
            for index, value in zip(vector.indices, vector.values):
                self.postings.setdefault(int(index), []).append((doc_id, float(value)))
        n = len(docs)
        self.idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self.postings.items()}
        self.n = n

    def scores(self, query: str) -> np.ndarray:
        return self.scores_of(self._bm25.embed_query(self.analyse(query)).indices)

    def scores_of(self, indices: Sequence[int]) -> np.ndarray:
        """Scores of a query given as its term indices (a ``sparse_query`` vector's)."""
        out = np.zeros(self.n, dtype=np.float32)
        for index in set(int(i) for i in indices):
            idf = self.idf.get(index)
            if idf is None:
                continue
            for doc_id, value in self.postings[index]:
                out[doc_id] += idf * value
        return out


# ---------------------------------------------------------------------------------------------
# Windows


@dataclass(frozen=True)
class Unit:
    """One retrievable text: a window of messages (``keys`` in order)."""

    room: str
    keys: tuple[str, ...]
    text: str


def line_of(message: CorpusMessage, names: dict[str, str]) -> str:
    return f"{names[message.sender]}: {message.body}"


def build_windows(
    messages: Sequence[CorpusMessage], names: dict[str, str], max_bytes: int, max_gap_ms: int, overlap: int = 0
) -> list[Unit]:
    """``chunker.fold``'s layout (byte bound on the embed text, gap bound), and optionally the
    last ``overlap`` messages of a window repeated at the start of the next."""
    out: list[Unit] = []
    by_room: dict[str, list[CorpusMessage]] = {}
    for m in messages:
        by_room.setdefault(m.room, []).append(m)
    for room, msgs in by_room.items():
        current: list[CorpusMessage] = []
        size = 0
        for m in msgs:
            line = len(line_of(m, names).encode("utf-8"))
            fits = current and m.ts - current[-1].ts <= max_gap_ms and size + 1 + line <= max_bytes
            if fits:
                current.append(m)
                size += 1 + line
                continue
            if current:
                out.append(_unit(room, current, names))
                carried = current[-overlap:] if overlap and m.ts - current[-1].ts <= max_gap_ms else []
                current = list(carried)
                size = sum(len(line_of(c, names).encode("utf-8")) + 1 for c in current) - (1 if current else 0)
                while current and size + 1 + line > max_bytes:
                    size -= len(line_of(current[0], names).encode("utf-8")) + 1
                    current.pop(0)
                if current:
                    current.append(m)
                    size += 1 + line
                    continue
            current = [m]
            size = line
        if current:
            out.append(_unit(room, current, names))
    return out


def _unit(room: str, msgs: list[CorpusMessage], names: dict[str, str]) -> Unit:
    return Unit(room, tuple(m.key for m in msgs), "\n".join(line_of(m, names) for m in msgs))


# ---------------------------------------------------------------------------------------------
# Variants


def identity(text: str) -> str:
    return text


@dataclass(frozen=True)
class Variant:
    name: str
    max_bytes: int = 700
    max_gap_ms: int = 15 * 60 * 1000
    overlap: int = 0
    legs: tuple[str, ...] = ("dense", "bm25")  # any of dense, bm25, msg_dense, msg_bm25
    weights: tuple[float, ...] = ()  # per leg; RRF weight (default 1 each)
    fusion: str = "rrf"  # rrf | score
    rrf_k: int = 60
    depth: int = 50  # how many each leg ranks before fusion (the index's prefetch floor)
    analyse: str = "plain"  # lexical analysis of documents and queries
    msg_text: str = "line"  # what a message's dense row embeds: see MESSAGE_TEXTS
    query: str = "as-is"  # query handling: see QUERY_TEXTS (per leg: dense, lexical)
    adaptive: float = 0.0  # >0: the lexical weight falls toward this floor as BM25's top flattens
    by_text: bool = False  # weights per query text: the product's ``daemon.reader.search.leg_weights``
    ctx: str = "none"  # context rows beside each message's row (MaxSim over both): see context_texts
    ctx_short: int = 0  # >0: a context row only for messages whose body is shorter than this (chars)
    bm25_avg_len: float = 0.0  # >0: qdrant_edge Bm25Config.avg_len (its default is 256 tokens)
    bm25_b: float = -1  # >=0: qdrant_edge Bm25Config.b, length normalisation (its default is 0.75)
    bm25_k: float = 0.0  # >0: qdrant_edge Bm25Config.k, term-frequency saturation (its default is 1.2)
    ctx_window: bool = False  # the earlier line only from the message's own window (what a chunker sees)
    # How the index holds the message vectors (msg_dense, ctx "none" only): see ``stored_scores``.
    store: str = "float32"  # float32 | float16 | int8 (scan only) | int8-rescored (the product)
    # Recall@1 levers on top of the product's fusion, each off by default.
    dense_pool: str = "max"  # a window's msg_dense score from its messages: see pool_messages
    norm: str = "minmax"  # how score fusion scales each leg over its candidates: see scale_leg
    sender_bonus: float = 0.0  # >0: added to a window whose dense-best line is by the sender the query names
    dup_first: bool = False  # a repeated line: the window of its first posting ranks above a later one
    # Among the fused top 10, windows with a line holding the query verbatim go first (the product's).
    verbatim: bool = False
    # The reader's floor over the top 10 (``daemon.reader.search.unrelated``) at ``floor_margin``
    # (None: the reader's). See ``floored``.
    floor: bool = False
    floor_margin: float | None = None


class Corpus:
    """The corpus, its names, the vector cache and memoised layouts/indexes."""

    def __init__(
        self,
        embedder,
        vectors: Path = CACHE / "vectors-minilm",
        corpus: str = OLD_CORPUS,
        messages: Sequence[CorpusMessage] | None = None,
    ) -> None:
        self.messages = list(messages) if messages is not None else load_messages(corpus_dir(corpus))
        self.names = nick_localparts([m.sender for m in self.messages])
        self.vectors = VectorCache(embedder, vectors)
        self._layouts: dict[tuple, list[Unit]] = {}
        self._bm25: dict[tuple, Bm25Index] = {}
        self.message_units = [Unit(m.room, (m.key,), line_of(m, self.names)) for m in self.messages]
        self._message_texts: dict[str, list[str]] = {}
        self.at = {m.key: i for i, m in enumerate(self.messages)}
        # Per query id, what the floor judged in the last ranking with ``Variant.floor``: each hit's
        # keys and its (bodies, similarity), for ``floor_sweep``.
        self.floor_inputs: dict[str, tuple[list[tuple[str, ...]], list[tuple[list[str], float | None]]]] = {}
        _LOCALPARTS.update(self.names.values())

    def message_texts(self, kind: str) -> list[str]:
        """The text each message's dense row embeds under ``Variant.msg_text``."""
        if kind not in self._message_texts:
            nicks = _known_nicks(self.names)
            self._message_texts[kind] = [MESSAGE_TEXTS[kind](m, self.names, nicks) for m in self.messages]
        return self._message_texts[kind]

    def layout(self, v: Variant) -> list[Unit]:
        key = (v.max_bytes, v.max_gap_ms, v.overlap)
        if key not in self._layouts:
            self._layouts[key] = build_windows(self.messages, self.names, v.max_bytes, v.max_gap_ms, v.overlap)
        return self._layouts[key]

    def bm25(
        self, key: tuple, units: list[Unit], analyse: str, avg_len: float = 0.0, b: float = -1, k: float = 0.0
    ) -> Bm25Index:
        full = (*key, analyse, avg_len, b, k)
        if full not in self._bm25:
            self._bm25[full] = Bm25Index([u.text for u in units], ANALYSERS[analyse], avg_len, b, k)
        return self._bm25[full]


def _identifier_analyser(text: str) -> str:
    from bench.lexical import lexical_text

    return lexical_text(text)


ANALYSERS: dict[str, Callable[[str], str]] = {"plain": identity, "ident": _identifier_analyser}

# A leading addressee as IRC writes it (``nick: ...``, ``nick, ...``): a known nick, then a
# colon or comma and the rest of the message. 7,007 of the 18,839 messages open with one.
_ADDRESSEE = re.compile(r"^\s*([^\s:,]{1,32})\s*[:,]\s+(?=\S)")


def strip_addressee(body: str, nicks: set[str]) -> str:
    """``body`` without a leading ``nick:`` / ``nick,`` when ``nick`` (any case) is in ``nicks``."""
    match = _ADDRESSEE.match(body)
    if match and match.group(1).lower() in nicks:
        return body[match.end() :]
    return body


def _known_nicks(names: dict[str, str]) -> set[str]:
    return {n.lower() for n in names} | {v.lower() for v in names.values()}


MESSAGE_TEXTS: dict[str, Callable[[CorpusMessage, dict[str, str], set[str]], str]] = {
    "line": lambda m, names, nicks: line_of(m, names),  # the product: <localpart>: <body>
    "noaddr": lambda m, names, nicks: f"{names[m.sender]}: {strip_addressee(m.body, nicks)}",
    "body": lambda m, names, nicks: strip_addressee(m.body, nicks),  # no sender, no addressee
}

# Context rows: a message embedded together with the line it answers. ``prev``: the line before
# it in the room; ``addr``: when it opens with a known ``nick:``, that nick's latest line before
# it (the thread it answers), else the line before. No context across a gap of ``max_gap_ms``
# (a new conversation). The earlier line is cut to ``CONTEXT_PREV_CHARS`` so the message itself
# stays inside the model's window.
CONTEXT_PREV_CHARS = 200


def context_texts(
    messages: Sequence[CorpusMessage], names: dict[str, str], kind: str, short: int, max_gap_ms: int
) -> list[str | None]:
    nicks = {n.lower(): n for n in names}
    by_local = {v.lower(): k for k, v in names.items()}
    out: list[str | None] = []
    prev: dict[str, CorpusMessage] = {}
    latest_by: dict[tuple[str, str], CorpusMessage] = {}
    for m in messages:
        before = prev.get(m.room)
        if kind == "addr":
            match = _ADDRESSEE.match(m.body)
            if match:
                nick = nicks.get(match.group(1).lower()) or by_local.get(match.group(1).lower())
                said = latest_by.get((m.room, nick)) if nick else None
                if said is not None:
                    before = said
        if before is not None and m.ts - before.ts > max_gap_ms:
            before = None
        if before is None or (short and len(m.body) >= short):
            out.append(None)
        else:
            head = before.body if len(before.body) <= CONTEXT_PREV_CHARS else before.body[:CONTEXT_PREV_CHARS] + "…"
            out.append(f"{names[before.sender]}: {head}\n{line_of(m, names)}")
        prev[m.room] = m
        latest_by[(m.room, m.sender)] = m
    return out


def within_windows(texts: list[str | None], corpus: "Corpus", windows: list[Unit], kind: str) -> list[str | None]:
    """``texts`` with the context rows whose earlier line lies outside the message's window dropped
    (recomputed inside the window for ``addr``: the addressee's latest line in the window)."""
    at = {m.key: i for i, m in enumerate(corpus.messages)}
    out: list[str | None] = [None] * len(texts)
    for u in windows:
        msgs = [corpus.messages[at[k]] for k in u.keys]
        inner = context_texts(msgs, corpus.names, kind, 0, 1 << 62)
        for k, t in zip(u.keys, inner):
            if texts[at[k]] is not None:
                out[at[k]] = t
    return out


# Question scaffolding a known-item query wraps around what it is about ("when did we decide
# to ...", "what did X say about ...", "someone asked about ..."): stripped, the asker's own words
# stay; a named speaker stays (BM25 finds their lines by name).
_SCAFFOLD_VERBS = (
    r"(?:decide[ds]?|conclude[ds]?|agree[ds]?|settle[ds]?|discuss(?:ed)?|switch(?:ed)?|talk(?:ed)? about|"
    r"bring up|brought up|mention(?:ed)?|say|said|figure[ds]? out|find out|found out|choose|chose)"
)
_SCAFFOLDS = [
    re.compile(
        r"^\s*when\s+(?:did|was|were|do|have|had)\s+(?:we|it|they|you|i|someone|somebody|people)?\s*"
        r"(?:first\s+)?" + _SCAFFOLD_VERBS + r"?\s*(?:that|to|on|whether|if)?\s+",
        re.I,
    ),
    re.compile(
        r"^\s*when\s+(?:was|were)\s+(?:it\s+)?(?:decided|agreed|concluded|settled|discussed|mentioned)\s*"
        r"(?:that|to|on|whether)?\s+",
        re.I,
    ),
    re.compile(
        r"^\s*who\s+(?:said|asked|explained|pointed out|mentioned|suggested|tried|told|recommended|wrote|claimed|"
        r"thought)\s*(?:that|whether|if|about)?\s+",
        re.I,
    ),
    re.compile(
        r"^\s*what\s+(?:did|does|was)\s+(\S+)\s+(?:say|tell|answer|suggest|do|get|reply|explain|recommend|think|"
        r"write|mean)(?:\s+(?:to\s+)?(\S+))?\s+(?:about|on|regarding|for|to|with)\s+",
        re.I,
    ),
    re.compile(r"^\s*what\s+(?:was|is)\s+(?:the|that)\s+", re.I),
    re.compile(
        r"^\s*(?:someone|somebody|a person|person|a guy|guy|there was|there was an?)\b(?:'s)?\s*(?:who|that)?\s*"
        r"(?:asked about|asked|reported|had|wanted|mentioned|said|could not|couldn't)?\s*",
        re.I,
    ),
]


def strip_scaffold(text: str) -> str:
    for pattern in _SCAFFOLDS:
        match = pattern.match(text)
        if match:
            kept = " ".join(g for g in match.groups() if g)
            out = f"{kept} {text[match.end() :]}".strip()
            return out if len(out) >= 3 else text
    return text


# (dense query text, lexical query text) per ``Variant.query``.
QUERY_TEXTS: dict[str, Callable[[str], tuple[str, str]]] = {
    "as-is": lambda t: (t, t),
    "strip-lexical": lambda t: (t, strip_scaffold(t)),
    "strip-dense": lambda t: (strip_scaffold(t), t),
    "strip-both": lambda t: (strip_scaffold(t), strip_scaffold(t)),
    # The dense text written the way a message row is embedded (``<localpart>: <body>``) when the
    # query names a sender ("what did alice say about X" -> "alice: X"); the lexical text as typed.
    "sender-line": lambda t: (sender_line(t), t),
}

# "what did <sender> say/tell/... [to <other>] about <topic>": the sender and the topic.
_NAMED_SENDER = re.compile(
    r"^\s*what\s+did\s+(\S+)\s+(?:say|tell|suggest|get|answer|reply|explain|recommend|think|write|mean)\b"
    r"(?:\s+to)?(?:\s+(\S+))?\s+(?:about|from|on|regarding|for|to|with)?\s*(.*)$",
    re.I,
)
# The corpus's localparts, set by ``Corpus`` (the query parser needs to know who is a sender).
_LOCALPARTS: set[str] = set()


def named_sender(text: str) -> tuple[str, str] | None:
    """``(localpart, topic)`` when ``text`` asks what a known sender said, else None."""
    match = _NAMED_SENDER.match(text)
    if not match or match.group(1).lower() not in _LOCALPARTS:
        return None
    return match.group(1).lower(), match.group(3)


def sender_line(text: str) -> str:
    named = named_sender(text)
    return f"{named[0]}: {named[1]}" if named else text


def _leg_scorers(
    corpus: Corpus,
    v: Variant,
    windows: list[Unit],
    holders: dict[str, list[int]],
    qvec: np.ndarray,
    lexical_q: list,
) -> tuple[dict[str, Callable[[int], np.ndarray]], np.ndarray | None]:
    """Each leg of ``v`` as a function of the query's index to its score per window, and the
    message vectors when a message-level leg loaded them."""
    mmat: np.ndarray | None = None
    leg_scores: dict[str, Callable[[int], np.ndarray]] = {}
    if "dense" in v.legs:
        wmat = corpus.vectors.get([u.text for u in windows])
        leg_scores["dense"] = lambda qi: wmat @ qvec[qi]
    if "bm25" in v.legs:
        idx = corpus.bm25(
            (v.max_bytes, v.max_gap_ms, v.overlap), windows, v.analyse, v.bm25_avg_len, v.bm25_b, v.bm25_k
        )
        leg_scores["bm25"] = lambda qi: idx.scores(lexical_q[qi])
    if "msg_dense" in v.legs:
        mmat = corpus.vectors.get(corpus.message_texts(v.msg_text))
        if v.dense_pool != "max":
            pool = WindowPool(corpus, windows)
            leg_scores["msg_dense"] = lambda qi: pool.pool(mmat @ qvec[qi], v.dense_pool)
        elif v.ctx == "none":
            leg_scores["msg_dense"] = lambda qi: stored_scores(
                v.store, mmat, qvec[qi], lambda s: _to_windows(s, corpus.message_units, holders, len(windows)), v.depth
            )
        else:
            # A message's score is MaxSim over its own row and its context row (when it has one):
            # the context row is attributed to the message it ends with, never to the line before.
            ctx_texts = context_texts(corpus.messages, corpus.names, v.ctx, v.ctx_short, v.max_gap_ms)
            if v.ctx_window:
                ctx_texts = within_windows(ctx_texts, corpus, windows, v.ctx)
            ctx_at = [i for i, t in enumerate(ctx_texts) if t is not None]
            cmat = corpus.vectors.get([ctx_texts[i] for i in ctx_at]) if ctx_at else np.zeros((0, 384), np.float32)
            ctx_idx = np.asarray(ctx_at, dtype=np.int64)

            def _with_context(qi: int) -> np.ndarray:
                own = mmat @ qvec[qi]
                if len(ctx_idx):
                    own[ctx_idx] = np.maximum(own[ctx_idx], cmat @ qvec[qi])
                return _to_windows(own, corpus.message_units, holders, len(windows))

            leg_scores["msg_dense"] = _with_context
    if "msg_bm25" in v.legs:
        midx = corpus.bm25(("msg",), corpus.message_units, v.analyse, b=v.bm25_b)
        leg_scores["msg_bm25"] = lambda qi: _to_windows(
            midx.scores(lexical_q[qi]), corpus.message_units, holders, len(windows)
        )
    return leg_scores, mmat


def rank_variant(corpus: Corpus, v: Variant, queries: Sequence[LabelledQuery]) -> dict[str, list[tuple[str, ...]]]:
    windows = corpus.layout(v)
    # message -> windows holding it, to map message-level legs onto windows
    holders: dict[str, list[int]] = {}
    for i, u in enumerate(windows):
        for k in u.keys:
            holders.setdefault(k, []).append(i)
    dense_q = [QUERY_TEXTS[v.query](q.text)[0] for q in queries]
    lexical_q = [QUERY_TEXTS[v.query](q.text)[1] for q in queries]
    qvec = corpus.vectors.get(dense_q)
    leg_scores, mmat = _leg_scorers(corpus, v, windows, holders, qvec, lexical_q)
    weights = dict(zip(v.legs, v.weights)) if v.weights else {leg: 1.0 for leg in v.legs}
    out: dict[str, list[tuple[str, ...]]] = {}
    for qi, q in enumerate(queries):
        fused = np.zeros(len(windows), dtype=np.float64)
        for leg in v.legs:
            s = leg_scores[leg](qi)
            order = np.argsort(-s, kind="stable")[: v.depth]
            order = order[s[order] > 0] if leg in ("bm25", "msg_bm25") else order
            weight = weights[leg]
            if v.by_text and leg in _PRODUCT_LEG:
                weight = leg_weights(q.text)[_PRODUCT_LEG[leg]]
            if v.adaptive and leg == "bm25" and len(order) >= 10:
                weight *= adaptive_weight(s[order[0]], s[order[9]], v.adaptive)
            if v.fusion == "rrf":
                fused[order] += weight / (v.rrf_k + np.arange(1, len(order) + 1))
            else:  # score: each leg scaled over its candidates (min-max in the product), weighted sum
                if len(order):
                    fused[order] += weight * scale_leg(s[order], v.norm)
        if v.sender_bonus or v.dup_first:
            best = best_lines(corpus, windows, mmat @ qvec[qi])
            if v.sender_bonus:
                fused += v.sender_bonus * sender_wrote_best(corpus, q.text, best, fused > 0)
            if v.dup_first:
                fused = first_posting_first(corpus, windows, best, fused)
        top = np.argsort(-fused, kind="stable")[:10]
        if v.verbatim:
            top = verbatim_top(corpus, windows, top, q.text)
        out[q.id] = [windows[i].keys for i in top if fused[i] > 0]
        if v.floor:
            cosines = corpus.vectors.get(corpus.message_texts("line")) @ qvec[qi]
            candidates = floor_candidates(corpus, [windows[i] for i in top if fused[i] > 0], cosines)
            corpus.floor_inputs[q.id] = (out[q.id], candidates)
            out[q.id] = floored(out[q.id], candidates, q.text, v.floor_margin)
    return out


def scale_leg(scores: np.ndarray, how: str) -> np.ndarray:
    """A leg's candidate scores (best first) on a common scale: ``minmax`` (the product: 1 best,
    0 the last candidate), ``top`` (score / best: a leg whose candidates trail its best far keeps
    that gap), ``z`` (z-score over the candidates, shifted so the last is 0)."""
    if how == "minmax":
        return (scores - scores[-1]) / ((scores[0] - scores[-1]) or 1.0)
    if how == "top":
        return scores / (scores[0] or 1.0)
    if how == "z":
        z = (scores - scores.mean()) / (scores.std() or 1.0)
        return z - z.min()
    raise ValueError(how)


class WindowPool:
    """A window's dense score from its messages' cosines, other than the product's max (MaxSim):
    ``second:A`` best + A x second best (a window with one message: its best alone); ``lse:T``
    the soft maximum T x log sum exp(cos / T) (T -> 0 is the max)."""

    def __init__(self, corpus: "Corpus", windows: list[Unit]) -> None:
        at = {m.key: i for i, m in enumerate(corpus.messages)}
        self.members = [np.asarray([at[k] for k in u.keys]) for u in windows]

    def pool(self, scores: np.ndarray, how: str) -> np.ndarray:
        kind, _, value = how.partition(":")
        param = float(value)
        out = np.empty(len(self.members), dtype=np.float32)
        for w, members in enumerate(self.members):
            s = scores[members].astype(np.float64)
            if kind == "second":
                two = np.sort(s)[-2:]
                out[w] = two[-1] + (param * two[0] if len(two) == 2 else 0.0)
            elif kind == "lse":
                out[w] = s.max() + param * np.log(np.exp((s - s.max()) / param).sum())
            else:
                raise ValueError(how)
        return out


def best_lines(corpus: "Corpus", windows: list[Unit], scores: np.ndarray) -> list[CorpusMessage]:
    """Each window's line with the best dense score (the line MaxSim ranked it by)."""
    at = {m.key: i for i, m in enumerate(corpus.messages)}
    return [corpus.messages[max((at[k] for k in u.keys), key=lambda i: scores[i])] for u in windows]


def sender_wrote_best(corpus: "Corpus", text: str, best: list[CorpusMessage], candidates: np.ndarray) -> np.ndarray:
    """1 for a fused candidate whose dense-best line is by the sender ``text`` names, else 0."""
    named = named_sender(text)
    out = np.zeros(len(best), dtype=np.float64)
    if named:
        for w in np.flatnonzero(candidates):
            out[w] = 1.0 if corpus.names[best[w].sender] == named[0] else 0.0
    return out


def first_posting_first(
    corpus: "Corpus", windows: list[Unit], best: list[CorpusMessage], fused: np.ndarray, k: int = 10
) -> np.ndarray:
    """Among the top ``k``, a window whose dense-best line repeats a higher-ranked window's in the
    same room (equal, or one holding the other, case and spaces folded; >= 20 chars) and was
    posted earlier moves just above it: a repeated question's first posting is the one asked."""
    top = list(np.argsort(-fused, kind="stable")[:k])
    out = fused.copy()
    lines = [" ".join(best[w].body.lower().split()) for w in top]
    for j in range(len(top)):
        for i in range(j):
            a, b = lines[i], lines[j]
            same = a == b or (min(len(a), len(b)) >= 20 and (a in b or b in a))
            if same and windows[top[j]].room == windows[top[i]].room and best[top[j]].ts < best[top[i]].ts:
                out[top[j]] = max(out[top[j]], out[top[i]] + 1e-6)
    return out


# The product's leg names (``schema.LEG_*``) of the harness legs it has.
_PRODUCT_LEG = {"bm25": "lexical", "msg_dense": "dense"}


def int8_bounds(matrix: np.ndarray, quantile: float = 0.99) -> tuple[float, float]:
    """The range holding ``quantile`` of the stored values (Qdrant's scalar quantisation)."""
    tail = (1.0 - quantile) / 2
    low, high = np.quantile(matrix, [tail, 1.0 - tail])
    return float(low), float(high)


def int8(values: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """``values`` clipped to ``bounds`` and rounded to 256 even steps (returned dequantised): the
    stored rows and the query alike, as Edge's int8 scan scores them."""
    low, high = bounds
    step = (high - low) / 255
    return (np.round((np.clip(values, low, high) - low) / step) * step + low).astype(np.float32)


_INT8: dict[int, tuple[np.ndarray, tuple[float, float]]] = {}


def stored_scores(store: str, mmat: np.ndarray, query: np.ndarray, to_windows, depth: int) -> np.ndarray:
    """Window scores of the message-dense leg as the index would compute them: ``float32``
    exact; ``float16`` from half-precision rows; ``int8`` from quantised rows and query (Edge's
    scan); ``int8-rescored`` the product (``edge_reader.hybrid``): the quantised scan keeps
    ``RESCORE_OVERSAMPLING`` x ``depth`` windows, ranked by their exact scores."""
    exact = to_windows(mmat @ query)
    if store == "float32":
        return exact
    if store == "float16":
        return to_windows(mmat.astype(np.float16).astype(np.float32) @ query.astype(np.float16).astype(np.float32))
    if id(mmat) not in _INT8:
        bounds = int8_bounds(mmat)
        _INT8[id(mmat)] = (int8(mmat, bounds), bounds)
    rows, bounds = _INT8[id(mmat)]
    quantised = to_windows(rows @ int8(query, bounds))
    if store == "int8":
        return quantised
    from daemon.index.edge_reader import RESCORE_OVERSAMPLING

    kept = np.argsort(-quantised, kind="stable")[: depth * RESCORE_OVERSAMPLING]
    out = np.full_like(exact, exact.min() - 1)
    out[kept] = exact[kept]
    return out


def adaptive_weight(top: float, tenth: float, floor: float) -> float:
    """The lexical leg's weight factor by how peaked BM25 is: 1 when its 10th candidate scores
    at most 0.3 of its best (an identifier that only a few windows hold), ``floor`` when at least
    0.9 (every candidate shares a few common words: a paraphrase), linear between."""
    ratio = tenth / top if top > 0 else 1.0
    t = min(1.0, max(0.0, (0.9 - ratio) / 0.6))
    return floor + (1.0 - floor) * t


def verbatim_top(corpus: "Corpus", windows: list[Unit], top: np.ndarray, text: str) -> np.ndarray:
    """``top`` with the windows holding ``text`` verbatim first, in their order: the reader's rule
    (``daemon.reader.search.verbatim_needle`` / ``holds_verbatim``) over the harness's windows."""
    needle = verbatim_needle(text)
    if needle is None:
        return top
    body = {m.key: m.body for m in corpus.messages}
    held = [w for w in top if holds_verbatim((body[k] for k in windows[w].keys), needle)]
    return np.asarray(held + [w for w in top if w not in held], dtype=top.dtype)


def _to_windows(scores: np.ndarray, units: list[Unit], holders: dict[str, list[int]], n: int) -> np.ndarray:
    out = np.full(n, -1e9 if scores.min() < 0 else 0.0, dtype=np.float32)
    out[:] = scores.min() - 1
    for i in np.argsort(-scores)[:200]:
        for w in holders.get(units[i].keys[0], ()):
            out[w] = max(out[w], scores[i])
    return out


def floor_candidates(
    corpus: "Corpus", hits: Sequence[Unit], cosines: np.ndarray
) -> list[tuple[list[str], float | None]]:
    """What the reader's floor judges of each hit: its messages' bodies and its similarity (its
    best message's cosine to the query, as ``daemon.reader.explain.similarity_of`` gives it)."""
    out = []
    for u in hits:
        rows = [corpus.at[k] for k in u.keys]
        out.append(
            ([corpus.messages[i].body for i in rows], similarity_of([float(cosines[i]) for i in rows], len(rows)))
        )
    return out


def floored(
    hits: Sequence[Sequence[str]],
    candidates: Sequence[tuple[list[str], float | None]],
    text: str,
    margin: float | None = None,
) -> list[Sequence[str]]:
    """``hits`` with those the reader's floor leaves out emptied: an emptied place keeps the
    windows below at their ranks, since a search of a smaller ``top_k`` would not have shown the
    one that moved up (the reader judges the candidates of the page it ranks)."""
    left_out = unrelated(candidates, [text]) if margin is None else unrelated(candidates, [text], margin)
    return [() if out else hit for hit, out in zip(hits, left_out)]


def evaluate(corpus: Corpus, v: Variant, queries: Sequence[LabelledQuery]):
    runs = rank_variant(corpus, v, queries)
    ranks = {q.id: first_relevant_rank(runs[q.id], q.relevant) for q in queries}
    return summarise(ranks, {q.id: q.kind for q in queries}), len(corpus.layout(v))


_B1 = Variant("by-text-b1", legs=("bm25", "msg_dense"), fusion="score", analyse="ident", by_text=True, bm25_b=1.0)
RECALL_AT_1_LEVERS: dict[str, dict] = {
    "b1-second": {"dense_pool": "second:0.1"},  # soft MaxSim: best + 0.1 x second-best line
    "b1-lse": {"dense_pool": "lse:0.03"},  # soft MaxSim: log-sum-exp, temperature 0.03
    "b1-msg-bm25": {"legs": ("bm25", "msg_dense", "msg_bm25"), "weights": (1.0, 1.0, 0.25)},  # score fusion
    "b1-norm-z": {"norm": "z"},
    "b1-norm-top": {"norm": "top"},
    "b1-depth100": {"depth": 100},
    "b1-sender": {"sender_bonus": 0.2},
    "b1-sender-line": {"query": "sender-line"},  # embeds the rewritten query texts: pass --vectors
    "b1-dup-first": {"dup_first": True},
    # The reader's verbatim holders first (shipped).
    "b1-verbatim": {"verbatim": True},
}

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("baseline"),  # the product today: 700-byte windows, dense+BM25 RRF
        Variant("dense-only", legs=("dense",)),
        Variant("bm25-only", legs=("bm25",)),
        Variant("w500", max_bytes=500),
        Variant("w1000", max_bytes=1000),
        Variant("w1500", max_bytes=1500),
        Variant("w700-ov2", overlap=2),
        Variant("w1000-ov3", max_bytes=1000, overlap=3),
        Variant("gap5", max_gap_ms=5 * 60 * 1000),
        Variant("gap60", max_gap_ms=60 * 60 * 1000),
        Variant("ident", analyse="ident"),
        Variant("msg-dense", legs=("dense", "bm25", "msg_dense")),
        Variant("msg-both", legs=("dense", "bm25", "msg_dense", "msg_bm25")),
        Variant("msg-both-ident", legs=("dense", "bm25", "msg_dense", "msg_bm25"), analyse="ident"),
        Variant("score-fusion", fusion="score"),
        Variant("rrf-k10", rrf_k=10),
        # The shipped fusion before message vectors, and the message-vector variants of results.md.
        Variant("score-1-2-ident", weights=(1.0, 2.0), fusion="score", analyse="ident"),
        Variant("msg-3leg-1-1-1", legs=("dense", "bm25", "msg_dense"), fusion="score", analyse="ident"),
        # Shipped: window BM25 + message dense, equal weights (the index's multivector, MaxSim).
        Variant("msg-dense-bm25-1-1", legs=("bm25", "msg_dense"), weights=(1.0, 1.0), fusion="score", analyse="ident"),
        # Query-adaptive: identifier-heavy texts BM25 2 : dense 1, plain language 1 : 2.
        Variant("by-text", legs=("bm25", "msg_dense"), fusion="score", analyse="ident", by_text=True),
        # The product now: the above with BM25 fully length-normalised (daemon.embedder.BM25_B).
        Variant("by-text-b1", legs=("bm25", "msg_dense"), fusion="score", analyse="ident", by_text=True, bm25_b=1.0),
        # Context rows: each message also embedded after the line before it.
        Variant("ctx-prev", legs=("bm25", "msg_dense"), fusion="score", analyse="ident", by_text=True, ctx="prev"),
        Variant("ctx-addr", legs=("bm25", "msg_dense"), fusion="score", analyse="ident", by_text=True, ctx="addr"),
        # Recall@1 levers over by-text-b1, one at a time (results.md).
        *(replace(_B1, name=name, **options) for name, options in RECALL_AT_1_LEVERS.items()),
        # The product now: b1-verbatim with the reader's floor (no unrelated hit pads the top 10).
        replace(_B1, name="b1-floor", verbatim=True, floor=True),
    ]
}


def is_identifier(text: str) -> bool:
    """A text the reader weights as identifiers (``daemon.reader.search.leg_weights``)."""
    return leg_weights(text) == LEG_WEIGHTS_IDENTIFIERS


# The margins of ``daemon.reader.search.unrelated`` that ``--floor-sweep`` tries (1 leaves nothing out).
FLOOR_MARGINS = (1.0, 0.05, 0.1, 0.11, 0.12, 0.13, 0.15, 0.17, 0.2, 0.25, 0.3)


def floor_figures(corpus: Corpus, queries: Sequence[LabelledQuery], margin: float | None = None) -> str:
    """The floor at ``margin`` (None: the reader's) over the last ranking with ``Variant.floor``:
    recall@5 (the floor over the top 5, as a search of ``top_k`` 5 judges them), recall@10 (over
    the top 10), how many of the top 10 it leaves out per query (all, exact, identifier-shaped)
    and how many relevant windows it leaves out of the top 10."""
    r5 = r10 = lost = 0
    out: dict[str, int] = {}
    for q in queries:
        hits, candidates = corpus.floor_inputs[q.id]
        ten = floored(hits, candidates, q.text, margin)
        five = floored(hits[:5], candidates[:5], q.text, margin)
        r5 += (first_relevant_rank(five, q.relevant) or 99) <= 5
        r10 += (first_relevant_rank(ten, q.relevant) or 99) <= 10
        out[q.id] = sum(1 for a, b in zip(hits, ten) if a and not b)
        lost += sum(1 for a, b in zip(hits, ten) if not b and set(q.relevant) & set(a))

    def mean(chosen: Sequence[LabelledQuery]) -> float:
        return sum(out[q.id] for q in chosen) / len(chosen) if chosen else 0.0

    exact = [q for q in queries if q.kind == "exact"]
    ident = [q for q in queries if is_identifier(q.text)]
    return (
        f"r5={r5 / len(queries):.3f} r10={r10 / len(queries):.3f} | left out of the top 10 per query: "
        f"all={mean(queries):.2f} exact={mean(exact):.2f} ({len(exact)}) ident={mean(ident):.2f} ({len(ident)}) "
        f"| relevant left out={lost}"
    )


def floor_sweep(corpus: Corpus, v: Variant, queries: Sequence[LabelledQuery]) -> list[str]:
    """``floor_figures`` at each of ``FLOOR_MARGINS``, over one ranking of ``v``."""
    rank_variant(corpus, replace(v, floor=True), queries)
    return [f"margin={m:.2f}: {floor_figures(corpus, queries, m)}" for m in FLOOR_MARGINS]


def load_set(name: str, split: str) -> tuple[str, list[LabelledQuery]]:
    """(corpus, queries) of a query set: ``old`` (the team's, on irc1) or ``<corpus>/<set>``."""
    corpus, _, set_name = (OLD_CORPUS, "", OLD_SET) if name == OLD_SET else name.partition("/")
    chosen = next((qs for qs in query_sets(corpus) if qs.name == set_name), None)
    if chosen is None:
        raise SystemExit(f"bench.tune: no query set {name!r}")
    return corpus, [q for q in chosen.queries if split == "all" or q.split == split]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tune")
    parser.add_argument("variants", nargs="*", help="default: every variant (with --floor-sweep: b1-floor)")
    parser.add_argument(
        "--set", default=OLD_SET, help="old (the team's, irc1) or <corpus>/<set>, e.g. irc2/independent"
    )
    parser.add_argument("--split", help="dev (old) or tune (an outside set), heldout, all; default dev / tune")
    parser.add_argument(
        "--floor-sweep", action="store_true", help="the floor at other constants, over the first variant"
    )
    parser.add_argument("--vectors", type=Path, default=CACHE / "vectors-minilm", help="the vector cache directory")
    args = parser.parse_args(argv)
    from daemon.config import default_model_dir
    from daemon.embedder import FastEmbedder

    split = args.split or ("dev" if args.set == OLD_SET else "tune")
    corpus_name, queries = load_set(args.set, split)
    embedder = FastEmbedder(model_dir=default_model_dir(), cache_dir=CACHE / "fastembed", threads=2, batch_size=32)
    corpus = Corpus(embedder, args.vectors, corpus_name)
    if args.floor_sweep:
        print("\n".join(floor_sweep(corpus, VARIANTS[(args.variants or ["b1-floor"])[0]], queries)))
        return 0
    rows = {}
    for name in args.variants or list(VARIANTS):
        v = VARIANTS[name] if name in VARIANTS else eval(f"Variant({name!r}.split('=')[0], {name.split('=', 1)[1]})")
        started = time.monotonic()
        per, n_windows = evaluate(corpus, v, queries)
        rows[f"{v.name} ({n_windows} w)"] = per
        print(
            f"{v.name}: windows={n_windows} r1={per['all'].r1:.3f} r5={per['all'].r5:.3f} "
            f"r10={per['all'].r10:.3f} mrr={per['all'].mrr10:.3f} "
            + " ".join(f"{k}={s.r5:.2f}" for k, s in per.items() if k != "all")
            + f" ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        if v.floor:
            print(f"  floor: {floor_figures(corpus, queries, v.floor_margin)}", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

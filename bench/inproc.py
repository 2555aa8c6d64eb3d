"""The in-process eval: every system on every corpus and query set, without a homeserver, a
refresher or a reader process, so a full table costs minutes once the texts are embedded.

Owns: ``InMemoryIndex``, the product's two index legs over the harness's windows (laid out as
``chunker.fold`` does, ``bench.tune.build_windows``): the dense leg ranks windows by the best
cosine of their message rows (``<localpart>: <body>``, MaxSim, as the index's multivector does),
the lexical leg by BM25 as Edge scores it (``bench.tune.Bm25Index``, the product's analysis and
``BM25_B``), and one text's legs are fused by the product's own ``fuse_legs``. Over it the
product is the reader's own ranking (``daemon.reader.search``: operators parsed by
``make_query``, per-text weights, verbatim holders first, RRF across texts), so nothing of the
reader is copied here. Beside it: the dense leg alone, the BM25 leg alone and the textbook hybrid
(``bench.textbook``); scoring per split, kind and style (``bench.querysets``); the judging pool
(``bench.eval.pool_records``, ``--pool DIR``); and ``LEVERS``, changes to the product measured on
the tune and dev halves (``--lever``).

Differences from ``make eval`` it accepts: the dense leg is exact float32 (the index rescans its
quantised copy and rescores the candidates with the float32 originals), and message bodies are
embedded unscrubbed (the scrubber changes a handful of the corpus's lines).

Must not: score a held-out half unless ``--heldout`` is given (levers are chosen on tune and dev
halves only), or write outside ``.cache/eval/`` and the ``--pool`` / ``--out`` paths.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from bench.corpus import CORPORA, corpus_dir
from bench.querysets import (
    LabelledQuery,
    QuerySet,
    check_relevant,
    long_tables,
    markdown_tables,
    name_value_lines,
    query_sets,
    score_set,
)
from bench.tune import CACHE, Corpus, Unit, Variant, context_texts, within_windows
from daemon.reader.search import LONG_TEXT_TOKENS

TOP_K = 10
SYSTEMS = ("product", "textbook", "dense", "bm25")
# The product's layout (chunker.fold's defaults, daemon.config's window settings).
PRODUCT_LAYOUT = Variant("product")
# A text of at least this many words is "long": a narrative told in plain language (the reader's
# own bound for weighting its legs equally).
LONG_WORDS = LONG_TEXT_TOKENS


# ---------------------------------------------------------------------------------------------
# The product's index, in memory


@dataclass(frozen=True)
class ContextRows:
    """Which context rows an in-memory index holds: ``kind`` ``product`` the refresher's
    (``chunker.context``), ``none`` no context row, ``prev`` / ``addr`` ``bench.tune.context_texts``
    across windows (``window``: recomputed inside each window); ``short`` > 0 keeps rows of
    bodies shorter than that (chars) only, ``addressed`` rows of messages opening with ``nick:``
    only; ``discount`` is taken off a context row's cosine."""

    kind: str = "product"
    window: bool = False
    short: int = 0
    discount: float = 0.0
    addressed: bool = False


def context_name(ctx: ContextRows) -> str:
    """The cost table's name of an index's context rows: the lever that asks for them."""
    return next((lv.name for lv in LEVERS.values() if lv.ctx == ctx), f"ctx-{ctx.kind}")


def product_context_texts(corpus: Corpus, windows: list[Unit]) -> list[str | None]:
    """Per corpus message, the text of its context row as the refresher makes it
    (``chunker.context.context_rows`` over each window's messages), or None."""
    from chunker.context import context_rows
    from chunker.windows import StoredMessage

    at = {m.key: i for i, m in enumerate(corpus.messages)}
    out: list[str | None] = [None] * len(corpus.messages)
    for unit in windows:
        found = [corpus.messages[at[k]] for k in unit.keys]
        stored = [StoredMessage(m.key, f"@{corpus.names[m.sender]}:corpus", m.ts, m.body) for m in found]
        for i, text in context_rows(stored):
            out[at[unit.keys[i]]] = text
    return out


class InMemoryIndex:
    """The two legs ``EdgeIndexReader.hybrid`` / ``lexical`` ask of the index, over the windows
    of one corpus. ``ctx``: beside each message's row, a context row that the message's MaxSim
    also takes: ``product`` the refresher's (``chunker.context``), ``none`` no context row, and
    levers measured against it (``bench.tune.context_texts``: ``prev`` the room's line before,
    ``addr`` the addressee's latest line, both across windows)."""

    def __init__(self, corpus: Corpus, ctx: ContextRows = ContextRows()) -> None:
        from daemon.embedder import BM25_B

        self.corpus = corpus
        self.windows: list[Unit] = corpus.layout(PRODUCT_LAYOUT)
        at = {m.key: i for i, m in enumerate(corpus.messages)}
        members = [at[k] for w in self.windows for k in w.keys]
        self._members = np.asarray(members, dtype=np.int64)
        self._starts = np.cumsum([0] + [len(w.keys) for w in self.windows[:-1]])
        self.rows = corpus.vectors.get(corpus.message_texts("line"))
        self.ctx_texts: list[str] = []
        self._ctx_at = np.zeros(0, dtype=np.int64)
        self._ctx_rows = np.zeros((0, self.rows.shape[1]), dtype=np.float32)
        self._ctx_discount = ctx.discount
        if ctx.kind != "none":
            if ctx.kind == "product":
                texts = product_context_texts(corpus, self.windows)
            else:
                texts = context_texts(corpus.messages, corpus.names, ctx.kind, 0, PRODUCT_LAYOUT.max_gap_ms)
            if ctx.window:
                texts = within_windows(texts, corpus, self.windows, ctx.kind)
            if ctx.short:
                texts = [t if len(m.body) < ctx.short else None for t, m in zip(texts, corpus.messages)]
            if ctx.addressed:
                from chunker.context import addressee

                texts = [t if addressee(m.body) else None for t, m in zip(texts, corpus.messages)]
            self._ctx_at = np.asarray([i for i, t in enumerate(texts) if t is not None], dtype=np.int64)
            self.ctx_texts = [t for t in texts if t is not None]
            self._ctx_rows = corpus.vectors.get(self.ctx_texts)
        layout = (PRODUCT_LAYOUT.max_bytes, PRODUCT_LAYOUT.max_gap_ms, PRODUCT_LAYOUT.overlap)
        self.bm25 = corpus.bm25(layout, self.windows, "ident", b=BM25_B)
        self._by_key = {m.key: m for m in corpus.messages}
        self._stored: dict[int, object] = {}

    def message_scores(self, vector: Sequence[float]) -> np.ndarray:
        q = np.asarray(vector, dtype=np.float32)
        own = self.rows @ q
        if len(self._ctx_at):
            own[self._ctx_at] = np.maximum(own[self._ctx_at], self._ctx_rows @ q - self._ctx_discount)
        return own

    def dense_scores(self, vector: Sequence[float]) -> np.ndarray:
        """Each window's best message (or context row) cosine: the index's MaxSim."""
        return np.maximum.reduceat(self.message_scores(vector)[self._members], self._starts)

    def lexical_scores(self, indices: Sequence[int]) -> np.ndarray:
        return self.bm25.scores_of(indices)

    @staticmethod
    def _top(scores: np.ndarray, depth: int, positive: bool = False) -> list[tuple[str, float]]:
        order = np.argsort(-scores, kind="stable")[:depth]
        return [(str(int(i)), float(scores[i])) for i in order if not positive or scores[i] > 0]

    def stored(self, point_id: str):
        from daemon.index.port import StoredWindow, WindowMessage

        w = int(point_id)
        if w not in self._stored:
            unit = self.windows[w]
            found = [self._by_key[k] for k in unit.keys]
            msgs = tuple(WindowMessage(m.key, m.sender, m.ts, m.body) for m in found)
            self._stored[w] = StoredWindow(
                point_id, unit.room, None, unit.keys[0], unit.keys[-1], msgs[0].ts, msgs[-1].ts, msgs
            )
        return self._stored[w]

    def hybrid(self, dense, sparse, flt, limit: int, weights=None) -> list:
        from daemon.index import schema
        from daemon.index.port import ScoredWindow
        from daemon.index.queries import fuse_legs, raw_leg_scores

        depth = schema.prefetch_depth(limit)
        legs = [(schema.LEG_DENSE, self._top(self.dense_scores(dense), depth))]
        if sparse.indices:
            legs.append((schema.LEG_LEXICAL, self._top(self.lexical_scores(sparse.indices), depth, positive=True)))
        raw = raw_leg_scores(legs)
        # Each message's cosine, as the index gives them: the reader's floor and attribution
        # judge a hit by them.
        per_message = self.message_scores(dense)
        return [
            ScoredWindow(
                pid, score, self.stored(pid), found_by, self._window_scores(per_message, pid), raw.get(pid, ())
            )
            for pid, score, found_by in fuse_legs(legs, limit, weights)
        ]

    def _window_scores(self, per_message: np.ndarray, point_id: str) -> tuple[float, ...]:
        w = int(point_id)
        start = int(self._starts[w])
        rows = self._members[start : start + len(self.windows[w].keys)]
        return tuple(float(x) for x in per_message[rows])

    def lexical(self, sparse, flt, limit: int) -> list:
        from daemon.index import schema
        from daemon.index.port import ScoredWindow

        return [
            ScoredWindow(pid, score, self.stored(pid), (schema.LEG_LEXICAL,), leg_scores=((schema.LEG_LEXICAL, score),))
            for pid, score in self._top(self.lexical_scores(sparse.indices), limit, positive=True)
        ]


# ---------------------------------------------------------------------------------------------
# Levers: changes to the product, each measured on the tune and dev halves


_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
_CLAUSE_BREAK = re.compile(
    r"[.!?;:,]\s+|\s+(?:and|but|so|because|while|then|though|although|after|until|since|when|which|whereas)\s+",
    re.I,
)
# Function words and the storytelling scaffold of a narrative ("someone wanted to ..., and was
# told ..."): what a key-phrase text leaves out.
_FILLER = set(
    """a an the and or but so of to in on at for from with by about into onto over under up out off as is
    are was were be been being am do does did done have has had having i me my mine we our us you your
    he him his she her they them their it its this that these those there here what which who whom whose
    when where why how if then than too very just only also still even not no can could would should will
    shall may might must some any all each every other another such own same one ones someone somebody
    anyone anybody something anything person people guy user someone's somebody's got get getting gets
    wanted want wants tried try trying asked ask said say says told tell explained suggested pointed
    recommended thing things way kept keep like really whole back because while though although after
    before until since whether way""".split()
)


def is_long(text: str) -> bool:
    """A text of ``LONG_WORDS`` tokens or more, counted as ``leg_weights`` counts them."""
    return len([t for t in (w.rstrip(".,;:!?") for w in text.split()) if t]) >= LONG_WORDS


def pieces(text: str, pattern: re.Pattern[str], min_words: int = 4) -> list[str]:
    """``text`` cut at ``pattern``; a piece shorter than ``min_words`` joins its neighbour."""
    merged: list[str] = []
    for part in (p.strip() for p in pattern.split(text)):
        if not part:
            continue
        if merged and (len(part.split()) < min_words or len(merged[-1].split()) < min_words):
            merged[-1] = f"{merged[-1]} {part}"
        else:
            merged.append(part)
    return merged


def key_words(text: str) -> str:
    words = [w for w in re.findall(r"[\w./'+#-]+", text) if w.lower().strip("'") not in _FILLER]
    return " ".join(dict.fromkeys(words)) or text


def _split(cut: Callable[[str], list[str]], keep_whole: bool) -> Callable[[str], list[str]]:
    from daemon.reader.wire import MAX_TEXTS

    def texts(text: str) -> list[str]:
        if not is_long(text):
            return [text]
        parts = [p for p in cut(text) if p != text]
        return list(dict.fromkeys(([text] if keep_whole else []) + parts))[:MAX_TEXTS] or [text]

    return texts


QUERY_FORMS: dict[str, Callable[[str], list[str]]] = {
    "whole": lambda text: [text],
    "sentences": _split(lambda t: pieces(t, _SENTENCE_END), keep_whole=False),
    "whole+sentences": _split(lambda t: pieces(t, _SENTENCE_END), keep_whole=True),
    "clauses": _split(lambda t: pieces(t, _CLAUSE_BREAK), keep_whole=False),
    "whole+clauses": _split(lambda t: pieces(t, _CLAUSE_BREAK), keep_whole=True),
    "keywords": _split(lambda t: [key_words(t)], keep_whole=False),
    "whole+keywords": _split(lambda t: [key_words(t)], keep_whole=True),
}


@dataclass(frozen=True)
class Lever:
    """One change to the product: how a query is given to the reader (``QUERY_FORMS``), what a
    message's dense rows see (``ctx``), and the weights of long plain-language texts
    (``long_weights`` = (dense, lexical); empty keeps ``leg_weights``)."""

    name: str
    query: str = "whole"
    ctx: ContextRows = ContextRows()
    long_weights: tuple[float, float] = ()  # type: ignore[assignment]
    short_weights: tuple[float, float] = ()  # type: ignore[assignment]  # plain-language texts under 20 words


LEVERS: dict[str, Lever] = {
    lv.name: lv
    for lv in [
        Lever("sentences", query="sentences"),
        Lever("whole+sentences", query="whole+sentences"),
        Lever("clauses", query="clauses"),
        Lever("whole+clauses", query="whole+clauses"),
        Lever("keywords", query="keywords"),
        Lever("whole+keywords", query="whole+keywords"),
        Lever("no-ctx", ctx=ContextRows("none")),  # the product before context rows
        Lever("ctx-prev", ctx=ContextRows("prev")),
        Lever("ctx-addr", ctx=ContextRows("addr")),  # the addressee's line across windows
        Lever("ctx-addr-window", ctx=ContextRows("addr", window=True)),
        *(Lever(f"ctx-short-{n}", ctx=ContextRows(short=n)) for n in (30, 50, 80, 120)),
        *(Lever(f"ctx-discount-{d}", ctx=ContextRows(discount=d)) for d in (0.02, 0.04, 0.06)),
        Lever("ctx-addressed", ctx=ContextRows(addressed=True)),
        Lever("long-2-1", long_weights=(2.0, 1.0)),  # the weights of every plain-language text
        Lever("long-1-1", long_weights=(1.0, 1.0)),  # what the reader ships
        Lever("long-3-1", long_weights=(3.0, 1.0)),
        Lever("long-4-1", long_weights=(4.0, 1.0)),
        Lever("long-dense", long_weights=(1.0, 0.0)),
        Lever("long-1-2", long_weights=(1.0, 2.0)),
        Lever("short-3-1", short_weights=(3.0, 1.0)),
        Lever("short-4-1", short_weights=(4.0, 1.0)),
        Lever("short-1-1", short_weights=(1.0, 1.0)),
        Lever("whole+keywords,long-1-1", query="whole+keywords", long_weights=(1.0, 1.0)),
        Lever("whole+clauses,long-1-1", query="whole+clauses", long_weights=(1.0, 1.0)),
    ]
}


@contextmanager
def long_text_weights(
    weights: tuple[float, float] | tuple[()], short: tuple[float, float] | tuple[()] = ()
) -> Iterator[None]:
    """The reader's ``leg_weights`` with long plain-language texts weighted ``weights`` and
    shorter ones ``short`` (each (dense, lexical); empty keeps the reader's)."""
    from daemon.reader import search

    if not weights and not short:
        yield
        return
    shipped = search.leg_weights

    def weighed(text: str) -> dict[str, float]:
        chosen = shipped(text)
        if chosen == search.LEG_WEIGHTS_IDENTIFIERS:
            return chosen
        pair = weights if is_long(text) else short
        return {"dense": pair[0], "lexical": pair[1]} if pair else chosen

    search.leg_weights = weighed
    try:
        yield
    finally:
        search.leg_weights = shipped


# ---------------------------------------------------------------------------------------------
# Systems


class Systems:
    """Every system over one corpus; each ``rank_*`` returns a query's top ``TOP_K`` hits, each
    the message keys it holds in order."""

    def __init__(self, corpus: Corpus) -> None:
        from daemon.embedder import Bm25Sparse

        self.corpus = corpus
        self.sparse_model = Bm25Sparse()
        self._indexes: dict[ContextRows, InMemoryIndex] = {}
        self._textbook = None

    def index(self, ctx: ContextRows = ContextRows()) -> InMemoryIndex:
        if ctx not in self._indexes:
            self._indexes[ctx] = InMemoryIndex(self.corpus, ctx)
        return self._indexes[ctx]

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        return self.corpus.vectors.get(list(texts))

    def rank_product(self, text: str, lever: Lever | None = None) -> list[tuple[str, ...]]:
        """The reader's ranking (``daemon.reader.search``) of the texts ``lever`` makes of ``text``."""
        from daemon.index.port import SearchFilter
        from daemon.reader import search

        lever = lever or Lever("product")
        index = self.index(lever.ctx)
        query = search.make_query(QUERY_FORMS[lever.query](text), top_k=TOP_K, now_ms=0)
        if not query.terms:
            return []
        sparse = [self.sparse_model.sparse_query(t) for t in query.terms]
        dense = [list(map(float, v)) for v in self.vectors(query.terms)]
        # Filters typed in a text (from:, in:) would narrow the index; the sets type none.
        ranker = search._Ranker(index, query, SearchFilter(), sparse, dense)
        with long_text_weights(lever.long_weights, lever.short_weights):
            hits = search._ranked_sequence(ranker, TOP_K, TOP_K)
        return [index.windows[int(h.point_id)].keys for h in hits]

    def rank_dense(self, text: str) -> list[tuple[str, ...]]:
        index = self.index()
        top = index._top(index.dense_scores(self.vectors([text])[0]), TOP_K)
        return [index.windows[int(pid)].keys for pid, _ in top]

    def rank_bm25(self, text: str) -> list[tuple[str, ...]]:
        index = self.index()
        indices = self.sparse_model.sparse_query(text).indices
        top = index._top(index.lexical_scores(indices), TOP_K, positive=True)
        return [index.windows[int(pid)].keys for pid, _ in top]

    def textbook(self):
        from bench.textbook import TextbookHybrid

        if self._textbook is None:
            self._textbook = TextbookHybrid(self.corpus.messages, self.corpus.vectors)
        return self._textbook

    def rank_textbook(self, text: str) -> list[tuple[str, ...]]:
        return self.textbook().rank(text, self.vectors([text])[0], TOP_K)

    def rank(self, system: str, text: str) -> list[tuple[str, ...]]:
        if system in LEVERS:
            return self.rank_product(text, LEVERS[system])
        return getattr(self, f"rank_{system}")(text)

    def cost(self) -> dict[str, dict[str, object]]:
        """What each configuration embeds and holds (no time: vectors come from the cache)."""
        index = self.index()
        # Each distinct line and context text once, as the refresher embeds them.
        distinct = set(self.corpus.message_texts("line"))
        product = {
            "texts_embedded": len(distinct | set(index.ctx_texts)),
            "windows": len(index.windows),
            "vector_bytes": int(index.rows.nbytes + index._ctx_rows.nbytes),
            "sparse_entries": sum(len(p) for p in index.bm25.postings.values()),
        }
        out: dict[str, dict[str, object]] = {"product": product}
        for ctx, built in self._indexes.items():
            if ctx != ContextRows():
                out[context_name(ctx)] = {"texts_embedded": len(distinct | set(built.ctx_texts))}
        if self._textbook is not None:
            out["textbook"] = {k: v for k, v in self._textbook.cost().items() if k != "embed_seconds"}
        return out


def chosen_sets(corpus: str, heldout: bool, sets: Sequence[str] | None) -> list[QuerySet]:
    """The corpus's query sets, held-out halves dropped unless ``heldout``."""
    out = []
    for qs in query_sets(corpus):
        if sets and qs.name not in sets:
            continue
        if not heldout:
            qs = replace(qs, queries=tuple(q for q in qs.queries if q.split != "heldout"))
        out.append(qs)
    return out


def run_corpus(
    corpus_name: str,
    embedder,
    systems: Sequence[str],
    sets: list[QuerySet],
    pool_sets: list[QuerySet],
    log,
    vectors: Path = CACHE / "vectors-minilm",
) -> dict:
    corpus = Corpus(embedder, vectors, corpus_name)
    check_relevant([*sets, *pool_sets], {m.key for m in corpus.messages})
    built = Systems(corpus)
    queries: dict[str, LabelledQuery] = {q.id: q for qs in [*sets, *pool_sets] for q in qs.queries}
    pooled = {q.id for qs in pool_sets for q in qs.queries}
    needed = list(systems) + [s for s in SYSTEMS if pool_sets and s not in systems]
    runs: dict[str, dict[str, list]] = {}
    for system in needed:
        started = time.monotonic()
        wanted = [q for q in queries.values() if system in systems or q.id in pooled]
        if system in LEVERS:  # every text the lever makes, embedded in one batch
            built.vectors([t for q in wanted for t in QUERY_FORMS[LEVERS[system].query](q.text)])
        runs[system] = {q.id: built.rank(system, q.text) for q in wanted}
        log(f"{corpus_name}: {system} {len(wanted)} queries in {time.monotonic() - started:.0f} s")
    result = {
        "messages": len(corpus.messages),
        "scores": {qs.name: _scored(qs, {s: runs[s] for s in systems}) for qs in sets},
        "cost": built.cost(),
        "runs": runs,
    }
    if pool_sets:
        from bench.eval import pool_records
        from bench.tune import line_of

        vectors = built.vectors([q.text for q in queries.values() if q.id in pooled])
        query_vectors = {qid: v for qid, v in zip([q for q in queries if q in pooled], vectors)}
        result["pool"] = pool_records(
            list(pool_sets),
            runs,
            corpus.messages,
            built.sparse_model,
            corpus.vectors,
            query_vectors,
            text_of=lambda m: line_of(m, corpus.names),
        )
    return result


def _scored(qs: QuerySet, runs: dict[str, dict[str, list]]):
    """``score_set``, without the ``all`` group when the held-out half was left out (it would
    repeat the tune or dev group)."""
    scored = score_set(qs, runs)
    if not any(q.split == "heldout" for q in qs.queries):
        scored.pop("all", None)
    return scored


def cost_rows(results: dict[str, dict]) -> str:
    rows = [
        "| corpus | configuration | texts embedded | windows | float32 vectors | BM25 postings |",
        "|---|---|---|---|---|---|",
    ]
    for corpus, r in results.items():
        for config, c in r["cost"].items():
            vb = c.get("vector_bytes")
            rows.append(
                f"| {corpus} | {config} | {c.get('texts_embedded', '-')} | {c.get('windows', '-')} "
                f"| {'-' if vb is None else f'{vb / 1e6:.1f} MB'} | {c.get('sparse_entries', '-')} |"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inproc", description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="repeatable; default both")
    parser.add_argument("--system", action="append", help=f"repeatable; default {', '.join(SYSTEMS)}; or a lever")
    parser.add_argument("--lever", action="append", default=[], help=f"add a lever as a system: {', '.join(LEVERS)}")
    parser.add_argument("--set", dest="sets", action="append", help="only these query sets (old, independent)")
    parser.add_argument("--heldout", action="store_true", help="score the held-out halves too (reporting only)")
    parser.add_argument("--long", action="store_true", help="also print recall@1/5/10 and MRR@10 per kind and style")
    parser.add_argument("--pool", type=Path, help="write DIR/<corpus>.jsonl, the judging pool of the outside sets")
    parser.add_argument("--vectors", type=Path, default=CACHE / "vectors-minilm", help="the vector cache directory")
    parser.add_argument("--out", type=Path, default=CACHE / "inproc.json")
    args = parser.parse_args(argv)
    unknown = [lv for lv in args.lever if lv not in LEVERS]
    if unknown:
        parser.error(f"--lever {unknown[0]!r}: not one of {', '.join(LEVERS)}")
    systems = [*(args.system or SYSTEMS), *args.lever]
    bad = [s for s in systems if s not in SYSTEMS and s not in LEVERS]
    if bad:
        parser.error(f"--system {bad[0]!r}: not a system or lever")
    if args.pool is not None and not args.pool.is_dir():
        parser.error(f"--pool {args.pool}: not a directory")

    from daemon.config import default_model_dir
    from daemon.embedder import FastEmbedder

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    embedder = FastEmbedder(model_dir=default_model_dir(), cache_dir=CACHE / "fastembed", threads=2, batch_size=32)
    results: dict[str, dict] = {}
    markdown: list[str] = []
    lines: list[str] = []
    for corpus in args.corpus or sorted(CORPORA):
        if not (corpus_dir(corpus) / "messages.jsonl").is_file():
            print(f"inproc: corpus {corpus}: {corpus_dir(corpus) / 'messages.jsonl'} not found", file=sys.stderr)
            return 2
        sets = chosen_sets(corpus, args.heldout, args.sets)
        pool_sets = [qs for qs in query_sets(corpus) if not qs.is_old] if args.pool else []
        r = results[corpus] = run_corpus(corpus, embedder, systems, sets, pool_sets, log, args.vectors)
        markdown.append(f"### {corpus} ({r['messages']} messages)")
        for qs in sets:
            scored = r["scores"][qs.name]
            markdown += ["", markdown_tables(f"{corpus}, {qs.name} set", scored)]
            if args.long:
                markdown += ["", long_tables(f"{corpus}, {qs.name} set", scored)]
            lines += name_value_lines(f"{corpus}.{qs.name}", scored)
        markdown.append("")
        if args.pool:
            from bench.pool import write_lines

            write_lines(args.pool / f"{corpus}.jsonl", r["pool"])
            log(f"pool: {len(r['pool'])} queries -> {args.pool / f'{corpus}.jsonl'}")
    markdown += ["### Ingest cost (in process)", "", cost_rows(results), ""]
    print("\n".join(markdown))
    print("\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                corpus: {
                    "cost": r["cost"],
                    "runs": {s: {q: [list(h) for h in hits] for q, hits in rs.items()} for s, rs in r["runs"].items()},
                }
                for corpus, r in results.items()
            }
        )
    )
    (args.out.with_suffix(".md")).write_text("\n".join(markdown) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The dense leg's scan copy measured on the dev queries: which quantisation (and how deep a
rescore) ranks windows exactly as the float32 scan does.

Owns: loading the dev corpus's message vectors from the tuning vector cache (``bench.tune``:
``Corpus``, ``VectorCache``), writing them as the product lays them out (one multivector per
window of the shipped layout, MaxSim, in an Edge shard made by ``edge_writer._edge_config`` with
each candidate scan copy, sealed by ``optimize()`` so the copies exist), asking each dev query's
vector the product's dense-leg request (``edge_reader.dense_leg_request``: the quantised scan
as a prefetch, rescored by the originals) and comparing the ranked windows with the exact
float32 MaxSim (numpy). Also the product's dev figures (``bench.tune.evaluate`` of the shipped
variant) with the dense leg answered by the shard. ``python -m bench.quantisation``.

Must not: read held-out queries (dev only: choices are made here), embed anything or write to
the shared vector cache (a text missing from it is an error: build the cache first), or change
``bench.tune``'s ranking (it is only called).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import qdrant_edge as qe

from bench import tune
from bench.eval import load_queries
from daemon.index import schema
from daemon.index.edge_reader import dense_leg_request
from daemon.index.edge_writer import DEFAULT_LAYOUT, SCAN_COPIES, _edge_config

SHIPPED = "by-text-b1"  # bench.tune's variant of the product
TOP = 10  # the answer a search shows by default
_BATCH = 256


class _NoEmbedding:
    """The vector cache's embedder: every text must already be cached."""

    def embed(self, texts: Sequence[str]) -> Any:
        raise SystemExit(f"{len(texts)} texts are not in the vector cache (build it first: python -m bench.tune)")


def build_shard(directory: Path, scan_copy: str, windows: list[np.ndarray]) -> qe.EdgeShard:
    """Windows as the product stores them (point id = window number, one row per message),
    sealed into immutable segments that hold the scan copies, then loaded again as a reader does."""
    layout = dataclasses.replace(DEFAULT_LAYOUT, scan_copy=scan_copy)
    shard = qe.EdgeShard.create(str(directory), _edge_config(384, layout))
    for start in range(0, len(windows), _BATCH):
        points = [
            qe.Point(i, {schema.DENSE: windows[i].tolist()}, {})
            for i in range(start, min(start + _BATCH, len(windows)))
        ]
        shard.update(qe.UpdateOperation.upsert_points(points))
    shard.optimize()
    shard.flush()
    shard.close()
    return qe.EdgeShard.load(str(directory))


def quantised_files(directory: Path) -> int:
    """Bytes of quantised-vector files in the shard (a check that sealing made scan copies)."""
    return sum(
        f.stat().st_size for f in directory.rglob("*") if f.is_file() and "quant" in str(f.relative_to(directory))
    )


def exact_scores(n_windows: int, owner: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each window's float32 MaxSim (cosine: the rows are unit length)."""
    best = np.full(n_windows, -np.inf, dtype=np.float32)
    np.maximum.at(best, owner, rows @ query)
    return best


# Two rankings are the same when their windows' exact scores agree position by position within
# this: the shard's float32 sums and numpy's differ in the last bits, so windows whose scores tie
# to 1e-5 swap places between any two exact scans (int8 rescored from the whole shard shows it).
TIE = 1e-5


def same_ranking(scores: np.ndarray, got: list[int], want: list[int]) -> bool:
    return len(got) == len(want) and bool(np.allclose(scores[got], scores[want], rtol=0, atol=TIE))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quantisation")
    parser.add_argument("copies", nargs="*", default=list(SCAN_COPIES), help="scan copies (edge_writer.SCAN_COPIES)")
    parser.add_argument("--oversampling", type=float, action="append", help="prefetch depth factors (repeatable)")
    parser.add_argument("--vectors", type=Path, default=tune.CACHE / "vectors-minilm")
    parser.add_argument("--no-tune", action="store_true", help="skip the dev figures of the shipped variant")
    args = parser.parse_args(argv)
    oversamplings = args.oversampling or [1.0, 2.0, 4.0]

    corpus = tune.Corpus(_NoEmbedding(), args.vectors)
    variant = tune.VARIANTS[SHIPPED]
    queries = [q for q in load_queries() if q.split == "dev"]
    units = corpus.layout(variant)
    texts = corpus.message_texts(variant.msg_text)
    mmat = corpus.vectors.get(texts)
    mmat = mmat / np.linalg.norm(mmat, axis=1, keepdims=True)
    row_of = {m.key: i for i, m in enumerate(corpus.messages)}
    windows = [mmat[[row_of[k] for k in u.keys]] for u in units]
    owner = np.concatenate([np.full(len(w), i) for i, w in enumerate(windows)])
    rows = np.concatenate(windows)
    qvec = corpus.vectors.get([tune.QUERY_TEXTS[variant.query](q.text)[0] for q in queries])
    qvec = qvec / np.linalg.norm(qvec, axis=1, keepdims=True)
    depth = schema.prefetch_depth(TOP)
    exact = [exact_scores(len(windows), owner, rows, q) for q in qvec]
    print(f"{len(queries)} dev queries, {len(units)} windows, {len(rows)} message rows, depth {depth}", flush=True)

    results = []
    for copy in args.copies:
        with tempfile.TemporaryDirectory(prefix="quant-") as tmp:
            directory = Path(tmp) / "shard"
            started = time.monotonic()
            shard = build_shard(directory, copy, windows)
            built = time.monotonic() - started
            quant_mb = quantised_files(directory) / 1e6
            for factor in oversamplings:
                top1 = top10 = 0
                started = time.monotonic()
                for qi, q in enumerate(qvec):
                    hits = shard.query(dense_leg_request(q.tolist(), None, depth, factor))
                    got = [int(h.id) for h in hits][:TOP]
                    want = [int(i) for i in np.argsort(-exact[qi], kind="stable")[:TOP]]
                    top1 += same_ranking(exact[qi], got[:1], want[:1])
                    top10 += same_ranking(exact[qi], got, want)
                per_query_ms = (time.monotonic() - started) / len(qvec) * 1000
                figures = ""
                if not args.no_tune:
                    figures = _tune_figures(corpus, variant, queries, shard, factor)
                line = (
                    f"{copy:9s} x{factor:<4g} top1 {top1}/{len(qvec)} top10 {top10}/{len(qvec)} {figures} quantised files {quant_mb:.1f} MB"
                    f" ({per_query_ms:.1f} ms/query, built {built:.0f} s)"
                )
                print(line, flush=True)
                results.append(line)
            shard.close()
            shutil.rmtree(directory, ignore_errors=True)
    return 0


def _tune_figures(corpus: tune.Corpus, variant: tune.Variant, queries: list, shard: qe.EdgeShard, factor: float) -> str:
    """bench.tune's dev figures of the shipped variant with its dense leg answered by ``shard``
    (the product's request) instead of numpy: ``stored_scores`` swapped for the shard's scores."""
    original = tune.stored_scores

    def shard_scores(store: str, mmat: np.ndarray, query: np.ndarray, to_windows: Any, depth: int) -> np.ndarray:
        norm = query / np.linalg.norm(query)
        hits = shard.query(dense_leg_request(norm.tolist(), None, depth, factor))
        n = len(corpus.layout(variant))
        out = np.full(n, -2.0, dtype=np.float32)
        for h in hits:
            out[int(h.id)] = h.score
        return out

    tune.stored_scores = shard_scores
    try:
        per, _ = tune.evaluate(corpus, variant, queries)
    finally:
        tune.stored_scores = original
    return f"r1 {per['all'].r1:.3f} r5 {per['all'].r5:.3f} r10 {per['all'].r10:.3f} mrr {per['all'].mrr10:.3f}"


if __name__ == "__main__":
    sys.exit(main())

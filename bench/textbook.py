"""The textbook hybrid: the baseline a reader of the retrieval literature would build first.

Owns: its layout (consecutive messages of one room, ``<localpart>: <body>`` lines, a new window
when the next line would pass ``WINDOW_BYTES``; no time-gap bound, no overlap), its two legs (BM25
as Qdrant scores it, ``bench.tune.Bm25Index`` with no analysis of its own; cosine over the
product's dense model, vectors cached by text under ``.cache/eval/``), and plain reciprocal rank
fusion (k=60) of the two legs' top ``LEG_DEPTH``.

Must not: borrow anything from the product's reader (its query handling, fusion weights, boosts or
verbatim rules): it is the yardstick the product is compared with, so it stays textbook.
"""

from __future__ import annotations

import sys
import time
from typing import Sequence

import numpy as np

from bench.corpus import CorpusMessage, nick_localparts
from bench.metrics import rrf
from bench.tune import Bm25Index, Unit, VectorCache, build_windows, identity

WINDOW_BYTES = 1000
LEG_DEPTH = 100
NO_GAP_BOUND = 10**15


def unit_vectors(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


class TextbookHybrid:
    def __init__(self, messages: Sequence[CorpusMessage], vectors: VectorCache) -> None:
        names = nick_localparts([m.sender for m in messages])
        self.windows: list[Unit] = build_windows(messages, names, WINDOW_BYTES, NO_GAP_BOUND)
        texts = [w.text for w in self.windows]
        missing = sum(1 for t in dict.fromkeys(texts) if vectors.key(t) not in vectors.keys)
        started = time.monotonic()
        self.matrix = unit_vectors(vectors.get(texts))
        # Ingest cost: what embedding took this run, and for how many of the windows (the others
        # were cached by an earlier run); None when nothing was embedded.
        self.embedded_now = missing
        self.embed_seconds = round(time.monotonic() - started, 1) if missing else None
        self.bm25 = Bm25Index(texts, identity)
        print(f"textbook hybrid: {len(self.windows)} windows", file=sys.stderr)

    def cost(self) -> dict[str, object]:
        return {
            "texts_embedded": len(self.windows),
            "embedded_now": self.embedded_now,
            "embed_seconds": self.embed_seconds,
            # float32 vectors plus the sparse postings' (index, weight) pairs: what an index of it holds
            "vector_bytes": int(self.matrix.nbytes),
            "sparse_entries": sum(len(p) for p in self.bm25.postings.values()),
        }

    def rank(self, query_text: str, query_vector: Sequence[float], top_k: int = 10) -> list[tuple[str, ...]]:
        """The top ``top_k`` windows, each as its message keys in order."""
        q = np.asarray(query_vector, dtype=np.float32)
        q = q / (np.linalg.norm(q) or 1.0)
        dense = np.argsort(-(self.matrix @ q), kind="stable")[:LEG_DEPTH]
        lexical_scores = self.bm25.scores(query_text)
        lexical = [i for i in np.argsort(-lexical_scores, kind="stable")[:LEG_DEPTH] if lexical_scores[i] > 0]
        fused = rrf([[str(i) for i in dense], [str(i) for i in lexical]])
        return [self.windows[int(i)].keys for i in fused[:top_k]]

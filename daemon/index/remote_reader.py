"""The reading side of the index on a Qdrant server: the search reader's ``IndexReader``.

Owns: ``RemoteIndexReader``: ``hybrid`` and ``lexical`` (the engine's own); ``listing``,
``window_of_event``, ``neighbours``, ``window_counts``, ``cursors``, ``room_aliases`` come from
``daemon/index/queries.py`` over the primitives of ``daemon/index/remote.py``.

Must not: import ``daemon.index.remote_writer`` or send any write (give it a client on a
read-only API key); apply a filter after ranking instead of before. Its reads raise
qdrant-client's exceptions as they are.

Theory of operation:

- **Hybrid search** is one ``query_batch_points`` round trip holding the two legs (dense over the
  message multivector, bm25), each with the eligibility filter and ``prefetch_depth`` deep, fused
  here by ``daemon.index.queries.fuse_legs`` (weighted min-max scores, as the Edge reader), so
  filters apply before ranking, never after, and each hit says which legs found it; a second
  request fetches the fused hits' message vectors, so each says which message the dense leg
  matched (``ScoredWindow.message_scores``).
- **Ordered reads** (``listing``, ``neighbours``) are exact on ``(ts_start, chunk_id)`` across
  page boundaries; ``daemon/index/queries.py`` says how.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from qdrant_client import QdrantClient, models

from daemon.index import schema
from daemon.index.port import IndexMeta, ScoredWindow, SearchFilter, SparseVector
from daemon.index.queries import fuse_legs, message_scores, raw_leg_scores
from daemon.index.remote import DEFAULT_COLLECTION, RemoteQueries, remote_sparse, to_filter

# The dense leg: the server scans its 1-bit copies for RESCORE_OVERSAMPLING x the depth and ranks
# those by the float32 originals, as the Edge reader does (its default oversampling, 1, would
# rank fewer candidates than the copies need: bench/quantisation.py).
_RESCORE = models.SearchParams(
    quantization=models.QuantizationSearchParams(rescore=True, oversampling=schema.RESCORE_OVERSAMPLING)
)


class RemoteIndexReader(RemoteQueries):
    """The reader's side: queries only. Give it a client on a read-only API key."""

    current_generation = None  # a collection is served as it is: no generations to swap

    def __init__(self, client: QdrantClient, collection: str = DEFAULT_COLLECTION):
        super().__init__(client, collection)

    def newer_available(self) -> bool:
        return False

    def read_meta(self) -> IndexMeta | None:
        return self._index_meta()

    def hybrid(
        self,
        dense: Sequence[float],
        sparse: SparseVector,
        flt: SearchFilter,
        limit: int,
        weights: Mapping[str, float] | None = None,
    ) -> list[ScoredWindow]:
        """A dense and a BM25 leg, both filtered before ranking, in one ``query_batch_points``
        round trip, fused here by ``fuse_legs`` (the Edge reader's fusion)."""
        must = schema.eligibility(flt)
        # The collection's dim is not known here without a request: the server checks it.
        dense_query = schema.dense_vector(dense, None)
        sparse_query = remote_sparse(schema.sparse_vector(sparse))
        if must is None or schema.require_limit(limit) == 0:
            return []
        leg_filter = to_filter(must)
        depth = schema.prefetch_depth(limit)
        # A list of one vector: the stored dense vector is one row per message and per context row
        # (MaxSim), and a server wants a multivector query for it.
        legs: list[tuple[str, models.Prefetch]] = [
            (schema.LEG_DENSE, models.Prefetch(query=[dense_query], using=schema.DENSE, filter=leg_filter, limit=depth))
        ]
        if sparse_query is not None:  # a query with no known terms has no lexical leg
            legs.append(
                (
                    schema.LEG_LEXICAL,
                    models.Prefetch(query=sparse_query, using=schema.SPARSE, filter=leg_filter, limit=depth),
                )
            )
        requests = [
            models.QueryRequest(
                query=p.query,
                using=p.using,
                filter=leg_filter,
                limit=depth,
                with_payload=True,
                params=_RESCORE if name == schema.LEG_DENSE else None,
            )
            for name, p in legs
        ]
        answers = self._client.query_batch_points(self._collection, requests)
        payloads = {str(point.id): point.payload for answer in answers for point in answer.points}
        ranked = [
            (name, [(str(point.id), float(point.score)) for point in answer.points])
            for (name, _), answer in zip(legs, answers)
        ]
        fused = fuse_legs(ranked, limit, weights)
        raw = raw_leg_scores(ranked)
        # The message vectors of the few fused hits only (one more round trip, a few KB), so each
        # hit can name the message the dense leg matched without embedding anything again.
        rows: dict[str, object] = {}
        if fused:
            records = self._client.retrieve(
                self._collection, [pid for pid, _, _ in fused], with_payload=False, with_vectors=[schema.DENSE]
            )
            rows = {
                str(r.id): (r.vector or {}).get(schema.DENSE) if isinstance(r.vector, dict) else None for r in records
            }
        hits = []
        for pid, score, found_by in fused:
            window = schema.stored_window(payloads[pid], pid)
            context = schema.context_of(payloads[pid], len(window.messages))
            scores = message_scores(dense_query, rows.get(pid), len(window.messages), context)
            hits.append(ScoredWindow(pid, score, window, found_by, scores, raw.get(pid, ())))
        return hits

    def lexical(self, sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]:
        """BM25 alone (scores as the server gives them), filtered before ranking."""
        must, sparse_query = schema.eligibility(flt), remote_sparse(schema.sparse_vector(sparse))
        if must is None or sparse_query is None or schema.require_limit(limit) == 0:
            return []
        answer = self._client.query_points(
            self._collection,
            query=sparse_query,
            using=schema.SPARSE,
            query_filter=to_filter(must),
            limit=limit,
            with_payload=True,
        )
        return [
            ScoredWindow(
                str(p.id),
                float(p.score),
                schema.stored_window(p.payload, p.id),
                (schema.LEG_LEXICAL,),
                leg_scores=((schema.LEG_LEXICAL, float(p.score)),),
            )
            for p in answer.points
        ]
